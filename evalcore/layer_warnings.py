"""Warnings about a run whose inputs look wrong although they are readable.

Classic mistakes pass every input check and give a result that is silently
meaningless: predictions in degrees labelled as a projected CRS, or with latitude
and longitude swapped, land far from the reference (TP 0, F1 0.000); a layer of
LineStrings loses every row to the polygon filter; two files of different places do
not meet. Each is a fact of counts and extents the run has anyway, so it is stated
in the summary (``warnings``) and on the terminal, with what to check, instead of
refusing the run: a model can truly miss everything.

Both the single-process and the distributed run call :func:`run_warnings` with the
same facts (row counts, the extents of the kept rows, the overall sums), so the list
is the same either way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evalcore._typing import F64Array

__all__ = ["LayerFacts", "aoi_overlap_warning", "extent_of", "run_warnings", "DROPPED_SHARE", "MAX_PAIRS_NAMED"]

MAX_PAIRS_NAMED = 5
"""The overlapping AOI pairs a warning names; it counts the rest."""

DROPPED_SHARE = 0.5
"""A layer whose dropped rows are more than this share of its rows gets a warning."""

Box = tuple[float, float, float, float]


@dataclass(frozen=True, slots=True)
class LayerFacts:
    """What the warnings need to know of one prepared layer.

    Attributes
    ----------
    role : str
        ``"predicted"`` or ``"reference"``.
    n_input, n_dropped, n_kept : int
        Rows read; dropped as null, empty, non-polygonal or zero-area; evaluated.
    extent : tuple of float, optional
        ``(xmin, ymin, xmax, ymax)`` of the kept rows in the equal-area CRS (None without rows).
    """

    role: str
    n_input: int
    n_dropped: int
    n_kept: int
    extent: Box | None


def extent_of(boxes: F64Array | list[Box]) -> Box | None:
    """The box holding every ``(xmin, ymin, xmax, ymax)`` row; None for no rows or only NaN boxes."""
    arr = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    arr = arr[np.isfinite(arr).all(axis=1)]
    if len(arr) == 0:
        return None
    return (float(arr[:, 0].min()), float(arr[:, 1].min()), float(arr[:, 2].max()), float(arr[:, 3].max()))


def _disjoint(a: Box, b: Box) -> bool:
    return a[2] < b[0] or b[2] < a[0] or a[3] < b[1] or b[3] < a[1]


def _warning(code: str, message: str) -> dict[str, str]:
    return {"code": code, "message": message}


def aoi_overlap_warning(keys: list[str], pairs: list[tuple[int, int]]) -> dict[str, str] | None:
    """The one warning of a run whose AOIs overlap, naming the pairs; None when none do.

    Parameters
    ----------
    keys : list of str
        The AOIs' keys (their ids as text), in layer order.
    pairs : list of (int, int)
        Positions ``(i, j)``, ``i < j``, of the AOIs whose interiors meet
        (:func:`evalcore.levels.overlapping_aois`).

    Examples
    --------
    >>> aoi_overlap_warning(["north", "south", "west"], [(0, 1)])["message"][:66]
    "AOIs overlap: 'north' and 'south'. A field or prediction in an ove"
    """
    if not pairs:
        return None
    named = ", ".join(f"{keys[i]!r} and {keys[j]!r}" for i, j in pairs[:MAX_PAIRS_NAMED])
    more = f" and {len(pairs) - MAX_PAIRS_NAMED} more pair(s)" if len(pairs) > MAX_PAIRS_NAMED else ""
    i, j = pairs[0]
    return _warning(
        "overlapping_aois",
        f"AOIs overlap: {named}{more}. A field or prediction in an overlap counts in the first of them in the "
        f"AOI layer's order only ({keys[i]!r}, not {keys[j]!r}), so the later AOI's numbers leave it out; make the "
        "AOIs disjoint, or order the layer so that the AOI that should count an overlap comes first.",
    )


def run_warnings(pred: LayerFacts, ref: LayerFacts, n_ref_with_overlap: int, equal_area_crs: str) -> list[dict[str, str]]:
    """The run's warnings, each ``{"code", "message"}``, in a fixed order.

    ``most_rows_dropped`` (per layer): more than half of the layer's rows were dropped.
    ``disjoint_extents``: both layers have rows and their extents do not intersect.
    ``no_overlap``: both layers have rows, their extents intersect, and no prediction
    has a positive intersection with any reference field (``n_ref_with_overlap`` is 0).
    Disjoint extents imply no overlap; only the more specific warning is given.

    Examples
    --------
    >>> p = LayerFacts("predicted", 4, 3, 1, (0.0, 0.0, 1.0, 1.0))
    >>> r = LayerFacts("reference", 2, 0, 2, (5.0, 5.0, 6.0, 6.0))
    >>> [w["code"] for w in run_warnings(p, r, 0, "EPSG:6933")]
    ['most_rows_dropped', 'disjoint_extents']
    """
    out = []
    for layer in (pred, ref):
        if layer.n_input and layer.n_dropped > DROPPED_SHARE * layer.n_input:
            out.append(_warning(
                "most_rows_dropped",
                f"{layer.n_dropped} of the {layer.n_input} rows of the {layer.role} layer were dropped (null, empty, "
                "non-polygonal or zero-area geometries), so the metrics describe only the {layer.n_input - layer.n_dropped} rows left: check that the layer "
                "holds polygons (not lines or points) and that it is the right file.",
            ))
    if pred.n_kept and ref.n_kept and pred.extent is not None and ref.extent is not None:
        if _disjoint(pred.extent, ref.extent):
            out.append(_warning(
                "disjoint_extents",
                f"the predicted and reference layers do not meet: their extents in {equal_area_crs} are disjoint, so "
                "every prediction is a false positive and every reference field a false negative; check that each "
                "layer's CRS label matches its coordinates (degrees labelled as a projected CRS, or the reverse), "
                "that x and y are not swapped (latitude, longitude order), and that these are the right two files.",
            ))
        elif n_ref_with_overlap == 0:
            out.append(_warning(
                "no_overlap",
                f"no predicted polygon overlaps any reference field ({pred.n_kept} predictions, {ref.n_kept} reference "
                "fields, extents that intersect): check each layer's CRS label, that x and y are not swapped "
                "(latitude, longitude order), and that these are the right two files.",
            ))
    return out
