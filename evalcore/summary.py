"""The summary dict: agribound 1.0.1's layout (SPEC 5.1) filled by the metric families.

This module owns the output layout and nothing else: which keys a group entry has is
each family's :meth:`~evalcore.metrics.base.MetricFamily.summarize`; the run-level
keys, the groupings (``per_stratum``, ``per_size_class``), the levels' blocks (``tiles``,
``aois`` with ``per_aoi``, and the evidence's ``per_tile``: :func:`level_summary`,
:func:`unit_entries` over :func:`evalcore.levels.unit_table`) and the ``bootstrap``
block are laid out here once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from evalcore.bootstrap import percentile_intervals
from evalcore.config import BOOTSTRAP_CONFIDENCE_LEVEL
from evalcore.engine.sums import MergedSums
from evalcore.metrics.registry import enabled_families, finalize_all, finalize_replicates, interval_keys
from evalcore.levels import AoiLayer, Sites, overlapping_aois, tile_key, unit_table
from evalcore.rates import F1_HARMONIC_POSITIVE, detection_rates
from evalcore.metrics.base import GroupView
from evalcore.options import EvalOptions, RunPlan
from evalcore.layer_warnings import LayerFacts, aoi_overlap_warning, run_warnings
from evalcore.pixel_counts import micro_macro
from evalcore.study import Study, study_keys

__all__ = [
    "DISTANCE_CRS",
    "WORST_KEYS",
    "QUANTILES",
    "build_summary",
    "group_summary",
    "worst_group",
    "level_tables",
    "level_blocks",
    "level_summary",
    "aoi_entries",
    "unit_entries",
    "LayerTally",
    "run_summary",
]

DISTANCE_CRS = "WGS 84 / UTM zone of each polygon's centroid"
"""The value of ``distance_crs`` (SPEC 5.1)."""


def _replicate_intervals(merged: MergedSums, group: int, options: EvalOptions) -> tuple[dict, dict]:
    if merged.replicates is None:
        return {}, {}
    values = finalize_replicates(merged.replicates.groups[group], options)
    return percentile_intervals({k: values[k] for k in interval_keys(options)})


def group_summary(
    merged: MergedSums,
    group: int,
    options: EvalOptions,
    *,
    grouping: str | None = None,
    both_empty: bool = False,
    empty_group: bool = False,
) -> tuple[dict[str, object], dict[str, list[float]], dict[str, int]]:
    """Every family's keys for one group, and the group's ``ci`` block.

    ``grouping`` is the output key of the grouping ``group`` belongs to (None for the
    overall group, 0).

    Returns
    -------
    entry : dict
    ci, n_undefined : dict
        Intervals and undefined counts of the families' block interval keys.
    """
    sums = merged.sums.as_dict(group)
    ci, n_undefined = _replicate_intervals(merged, group, options)
    view = GroupView(
        sums=sums,
        maxima=merged.sums.maxima_dict(group),
        order=merged.order.get(group, {}),
        values=finalize_all(sums, options),
        ci=ci,
        n_undefined=n_undefined,
        both_empty=both_empty,
        empty_group=empty_group,
        options=options,
        grouping=grouping,
    )
    entry: dict[str, object] = {}
    block_ci: dict[str, list[float]] = {}
    block_undefined: dict[str, int] = {}
    for family in enabled_families(options):
        entry.update(family.summarize(view))
        for key in family.block_interval_keys(options) if ci else ():
            block_ci[key] = ci[key]
            block_undefined[key] = n_undefined[key]
    return entry, block_ci, block_undefined


WORST_KEYS: tuple[str, ...] = ("precision", "recall", "f1")
"""The metrics :func:`worst_group` names a group for (SPEC 6.3)."""


def worst_group(entries: dict[str, dict]) -> dict | None:
    """The group with the lowest value of each of :data:`WORST_KEYS` among groups with sufficient support.

    Ties go to the first group in key order; groups whose value is undefined (NaN) are
    passed over. None when no group has sufficient support.

    Examples
    --------
    >>> e = {"a": {"precision": 0.5, "recall": 0.9, "f1": 0.6, "support": 40, "insufficient_support": False},
    ...      "b": {"precision": 0.1, "recall": 0.1, "f1": 0.1, "support": 3, "insufficient_support": True}}
    >>> worst_group(e)["precision"]
    {'group': 'a', 'value': 0.5, 'support': 40}
    >>> worst_group({"b": e["b"]}) is None
    True
    """
    eligible = {k: e for k, e in entries.items() if not e["insufficient_support"]}
    if not eligible:
        return None
    out: dict[str, object] = {}
    for metric in WORST_KEYS:
        best = None
        for key, entry in eligible.items():
            value = entry[metric]
            if value is None or (isinstance(value, float) and np.isnan(value)):
                continue
            if best is None or value < best[1]:
                best = (key, value, entry["support"])
        out[metric] = None if best is None else {"group": best[0], "value": best[1], "support": best[2]}
    return out


QUANTILES: tuple[int, ...] = (10, 25, 50, 75, 90)
"""Percentiles of per-unit F1 and count ratio in the summary (numpy's linear method)."""

def _null(value: float) -> float | None:
    return None if value is None or not np.isfinite(value) else float(value)


def _unit_keys(table: pd.DataFrame, kind: str) -> list[str]:
    if kind == "aois":
        return [str(k) for k in table["aoi"].tolist()]
    return [tile_key(e, x, y) for e, x, y in zip(table["epsg"], table["tile_x"], table["tile_y"])]


def level_summary(table: pd.DataFrame, kind: str, *, tile_km: float | None = None,
                  aois: AoiLayer | None = None) -> dict[str, object]:
    """The ``tiles`` or ``aois`` block of the summary from a :func:`unit_table`.

    Micro pools the counts of the units; macro is the mean of the unit values where
    they are defined, with the number of units averaged; quantiles are numpy's linear
    percentiles over the units where the value is defined; ``worst`` is the unit with
    the lowest value among units with sufficient support (ties: the first unit in the
    table's order), null when none has enough.
    """
    tp = float(table["count_tp"].sum())
    fp = float(table["count_fp"].sum())
    n_ref = float(table["count_reference"].sum())
    # The tiles' and AOIs' F1 rule, as for each unit (evalcore.rates.F1_HARMONIC_POSITIVE).
    micro = dict(zip(("precision", "recall", "f1"), detection_rates(np.array([tp]), np.array([fp]), np.array([n_ref - tp]), f1=F1_HARMONIC_POSITIVE)))
    out: dict[str, object] = {}
    name = "tiles" if kind == "tiles" else "aois"
    with_ref = table["count_reference"].to_numpy() > 0
    if kind == "tiles":
        out["tile_km"] = float(tile_km)
        out["count_tiles"] = int(len(table))
        out["count_tiles_with_reference"] = int(with_ref.sum())
        out["count_tiles_without_reference"] = int((~with_ref).sum())
        free = table[~with_ref]
        free_area = float(free["tile_area_km2"].sum())
        out["fp_per_km2_reference_free"] = _null(float(free["count_fp"].sum()) / free_area) if free_area > 0 else None
    else:
        out["id_column"] = aois.id_column if aois is not None else None
        out["count_aois"] = int(len(table))
        out["count_aois_with_reference"] = int(with_ref.sum())
    has_fn = table["count_fn"].to_numpy() > 0
    out[f"fraction_{name}_with_fn"] = _null(float(has_fn[with_ref].mean())) if with_ref.any() else None
    out["micro"] = {k: _null(float(v[0])) for k, v in micro.items()}
    out["macro"] = {}
    for metric in WORST_KEYS:
        values = table[metric].to_numpy(np.float64)
        ok = ~np.isnan(values)
        out["macro"][metric] = {"value": _null(float(values[ok].mean())) if ok.any() else None, "n_units": int(ok.sum())}
    out["quantiles"] = {}
    for metric in ("f1", "count_ratio"):
        values = table[metric].to_numpy(np.float64)
        values = values[~np.isnan(values)]
        if len(values):
            qs = np.percentile(values, QUANTILES)
            out["quantiles"][metric] = {f"p{q}": float(v) for q, v in zip(QUANTILES, qs)}
        else:
            out["quantiles"][metric] = {f"p{q}": None for q in QUANTILES}
    keys = _unit_keys(table, kind)
    entries = {}
    for k, rec in zip(keys, table[list(WORST_KEYS) + ["support", "insufficient_support"]].to_dict("records")):
        entries[k] = {m: rec[m] for m in WORST_KEYS} | {"support": int(rec["support"]), "insufficient_support": bool(rec["insufficient_support"])}
    worst = worst_group(entries)
    if worst is not None:
        worst = {m: (None if w is None else {**w, "value": float(w["value"])}) for m, w in worst.items()}
    out["worst"] = worst
    return out


def aoi_entries(table: pd.DataFrame) -> dict[str, dict]:
    """``per_aoi``: every AOI's values keyed by id (rates null when undefined)."""
    return unit_entries(table, "aois")


def unit_entries(table: pd.DataFrame, kind: str) -> dict[str, dict]:
    """Every unit's values keyed like the outputs (an AOI's id, a tile's ``EPSG_x_y``), rates
    null when undefined and intervals as ``ci: {rate: [lower, upper]}`` (the layout of a group)."""
    out = {}
    keys = _unit_keys(table, kind)
    key_columns = ("aoi",) if kind == "aois" else ("tile", "epsg", "tile_x", "tile_y")
    for key, rec in zip(keys, table.drop(columns=[c for c in (*key_columns, "geometry") if c in table.columns]).to_dict("records")):
        entry = {}
        for k, v in rec.items():
            if isinstance(v, (bool, np.bool_)):
                entry[k] = bool(v)
            elif isinstance(v, (int, np.integer)):
                entry[k] = int(v)
            else:
                entry[k] = _null(float(v))
        ci = {m: [entry.pop(f"{m}_ci_lower"), entry.pop(f"{m}_ci_upper")] for m in ("precision", "recall", "f1") if f"{m}_ci_lower" in entry}
        if ci:
            entry["ci"] = ci
            undefined = {m: entry.pop(f"{m}_ci_n_undefined") for m in ci}
            undefined = {m: n for m, n in undefined.items() if n}
            if undefined:
                entry["ci_n_undefined"] = undefined
        out[key] = entry
    return out


def level_tables(merged: MergedSums, options: EvalOptions, sites: Sites | None) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The per-tile and per-AOI tables (None without AOIs) of a run (:func:`evalcore.levels.unit_table`)."""
    tile_m = float(options.tile_km) * 1000.0
    families = enabled_families(options)
    tiles = unit_table(merged.tiles, "tiles", families=families, options=options, min_support=options.min_support, tile_size_m=tile_m)
    if merged.pixels is not None:
        for name in ("tp", "fp", "fn", "tn"):
            tiles[f"pixel_{name}"] = [
                int(getattr(merged.pixels[(int(e), int(x), int(y))], name)) if (int(e), int(x), int(y)) in merged.pixels else 0
                for e, x, y in zip(tiles["epsg"], tiles["tile_x"], tiles["tile_y"])
            ]
    aois = None
    if sites is not None and sites.aois is not None:
        aois = unit_table(merged.aois, "aois", families=families, options=options, min_support=options.min_support, aois=sites.aois)
    return tiles, aois


def level_blocks(merged: MergedSums, options: EvalOptions, sites: Sites | None,
                 tables: tuple[pd.DataFrame, pd.DataFrame | None] | None = None) -> dict[str, object]:
    """The ``tiles`` block, and the ``aois`` block with ``per_aoi`` when there is an AOI layer.

    ``tables`` are :func:`level_tables` of the same arguments when the caller made them
    (it writes them too): every tile's interval is then made once.
    """
    tiles, aois = tables if tables is not None else level_tables(merged, options, sites)
    out: dict[str, object] = {"tiles": level_summary(tiles, "tiles", tile_km=options.tile_km)}
    if aois is not None:
        block = level_summary(aois, "aois", aois=sites.aois)
        block["per_aoi"] = aoi_entries(aois)
        out["aois"] = block
    return out


def _undefine_intervals(entry: object) -> None:
    """Every ``ci`` block under ``entry`` set to [NaN, NaN] (too few units to resample)."""
    if isinstance(entry, dict):
        for key, value in entry.items():
            if key == "ci" and isinstance(value, dict):
                entry[key] = {k: [float("nan"), float("nan")] for k in value}
            else:
                _undefine_intervals(value)
    elif isinstance(entry, list):
        for item in entry:
            _undefine_intervals(item)


def build_summary(
    merged: MergedSums,
    plan: RunPlan,
    options: EvalOptions,
    *,
    layer_counts: dict[str, int],
    utm_epsg_codes: list[int],
    equal_area_crs: str,
    strata_column: str | None = None,
    sites: Sites | None = None,
    run_keys: dict[str, object] | None = None,
    warnings: list[dict[str, str]] | None = None,
    tables: tuple[pd.DataFrame, pd.DataFrame | None] | None = None,
) -> dict[str, object]:
    """The summary dict from merged partition sums.

    Parameters
    ----------
    merged : MergedSums
    plan : RunPlan
    options : EvalOptions
    layer_counts : dict
        ``count_{predicted,reference}_{dropped,repaired}``.
    utm_epsg_codes : list of int
    equal_area_crs : str
    strata_column : str, optional
        Name of the reference column the strata came from (None for given values).
    sites : Sites, optional
        The reporting tiles and AOIs (default: 10 km tiles, no AOIs).
    run_keys : dict, optional
        More run-level keys, placed after the layer counts: the study area's and the
        leakage audit's (:func:`evalcore.study.study_keys`).
    warnings : list of dict, optional
        The run's ``{"code", "message"}`` warnings (:func:`evalcore.layer_warnings.run_warnings`),
        written as ``warnings`` (an empty list when there are none).
    tables : (DataFrame, DataFrame or None), optional
        :func:`level_tables` of ``merged``, when the caller made them.
    """
    overall = merged.sums.as_dict(0)
    both_empty = overall["n_ref"] == 0 and overall["n_pred"] == 0
    entry, ci, n_undefined = group_summary(merged, 0, options, both_empty=both_empty)
    result: dict[str, object] = dict(entry)
    result["iou_threshold"] = options.iou_threshold
    result["boundary_sample_spacing_m"] = options.boundary_sample_spacing_m
    result["count_fp_unassigned"] = int(round(merged.unassigned.get("n_pred", 0.0)))
    for key in ("count_predicted_dropped", "count_reference_dropped", "count_predicted_repaired", "count_reference_repaired"):
        result[key] = int(layer_counts[key])
    result.update(run_keys or {})
    result["matching"] = options.matching
    result["equal_area_crs"] = equal_area_crs
    result["distance_crs"] = DISTANCE_CRS
    result["utm_epsg_codes"] = sorted(int(c) for c in utm_epsg_codes)
    result["warnings"] = [dict(w) for w in warnings or ()]
    if options.boundary_tolerance_m is not None:
        result["boundary_tolerance_m"] = options.boundary_tolerance_m
    for family in enabled_families(options):
        result.update(family.run_keys(options))

    with_ci = options.bootstrap > 0 and merged.replicates is not None
    offset = 1
    for g, (name, keys) in enumerate(plan.groupings):
        outside = int(merged.n_ungrouped[g]) if g < len(merged.n_ungrouped) else 0
        if name == "per_stratum":
            result["strata_column"] = strata_column
            result["count_reference_no_stratum"] = outside
        else:
            result["size_class_edges_ha"] = list(plan.sizes.edges)
            result["count_reference_outside_size_classes"] = outside
        entries = {}
        for j, key in enumerate(keys):
            n = int(round(merged.sums.as_dict(offset + j)["n_ref"]))
            head: dict[str, object] = {}
            if name == "per_size_class":
                head = {"lower_ha": plan.sizes.edges[j], "upper_ha": plan.sizes.edges[j + 1]}
            head["n"] = n
            body, gci, gund = group_summary(merged, offset + j, options, grouping=name, empty_group=n == 0)
            head.update(body)
            head["support"] = n
            head["insufficient_support"] = n < options.min_support
            if with_ci:
                head["ci"] = gci
                undefined = {k: v for k, v in gund.items() if v}
                if undefined:
                    head["ci_n_undefined"] = undefined
            entries[key] = head
        result[name] = entries
        result.setdefault("worst", {})[name] = worst_group(entries)
        offset += len(keys)
    result.update(level_blocks(merged, options, sites, tables))
    if merged.pixels is not None:
        counts = [merged.pixels[k] for k in sorted(merged.pixels)]
        block = {"gsd_m": options.pixel_gsd_m}
        block.update(micro_macro(counts, alpha=options.tversky_alpha, beta=options.tversky_beta))
        block["tversky_alpha"], block["tversky_beta"] = options.tversky_alpha, options.tversky_beta
        result["pixel"] = block
    result.update(merged.global_values.get("keys", {}))
    if with_ci:
        stratified = plan.strata_names is not None
        unit = options.bootstrap_unit
        if unit == "field":
            resampling = "reference fields with replacement" + (" within strata" if stratified else "")
        elif unit == "tile":
            resampling = f"reporting tiles of {options.tile_km:g} km with replacement (block bootstrap)"
        else:
            resampling = "AOIs with replacement (block bootstrap; the rows in no AOI are one more unit)"
        block = {
            "n_resamples": options.bootstrap,
            "seed": options.bootstrap_seed,
            "confidence_level": BOOTSTRAP_CONFIDENCE_LEVEL,
            "method": "percentile",
            "resampling": resampling,
            "unit": unit,
            "n_units": merged.n_units,
            "tile_km": options.tile_km,
            "partition_size_m": options.partition_size_m,
            "ci": {**ci, **merged.global_values.get("ci", {})},
            "n_undefined": {k: v for k, v in {**n_undefined, **merged.global_values.get("n_undefined", {})}.items() if v},
        }
        if merged.n_units is not None and merged.n_units < 2 and unit != "field":
            block["note"] = (
                f"only {merged.n_units} {unit} unit(s) to draw from: every resample is that unit again, so the "
                "intervals say nothing about sampling variability and are left undefined"
            )
            _undefine_intervals(result)
            block["ci"] = {k: [float("nan"), float("nan")] for k in block["ci"]}
        result["bootstrap"] = block
    return result


@dataclass(frozen=True, slots=True)
class LayerTally:
    """What the run summary reports of one prepared input layer, however the run held it
    (a :class:`~evalcore.prepare.PreparedLayer` in process, the prepare phase's index on a
    cluster).

    Attributes
    ----------
    n_input, n_kept, n_dropped, n_repaired : int
        Rows read, evaluated, dropped (empty or without a polygonal part) and repaired.
    n_outside_study_area, n_within_training_buffer : int
        Rows the study area left out, and kept rows within the training buffer.
    utm_epsg : tuple of int
        EPSG codes of the UTM zones its rows lie in.
    extent : object
        :func:`evalcore.layer_warnings.extent_of` of its rows' boxes (None: no row).
    """

    n_input: int
    n_kept: int
    n_dropped: int
    n_repaired: int
    n_outside_study_area: int
    n_within_training_buffer: int
    utm_epsg: tuple[int, ...]
    extent: object


def run_summary(
    merged: MergedSums,
    plan: RunPlan,
    options: EvalOptions,
    *,
    reference: LayerTally,
    predicted: LayerTally,
    equal_area_crs: str,
    strata_column: str | None,
    sites: Sites | None,
    study: Study | None,
    tables: tuple[pd.DataFrame, pd.DataFrame | None] | None = None,
) -> dict[str, object]:
    """The summary of a run: the one assembly of :func:`build_summary`'s run-level inputs
    (layer counts, UTM zones, the study keys and the layer warnings), used by the
    in-process run (:func:`evalcore.evaluate`) and the distributed one alike.

    Parameters
    ----------
    merged : MergedSums
    plan : RunPlan
    options : EvalOptions
    reference, predicted : LayerTally
    equal_area_crs : str
        The equal-area CRS as text (``pyproj.CRS.to_string``).
    strata_column : str, optional
    sites : Sites, optional
    study : Study, optional
    tables : (DataFrame, DataFrame or None), optional
        :func:`level_tables` of ``merged``, when the caller made them (to write them).
    """
    layers = {"reference": reference, "predicted": predicted}
    counts = {f"count_{role}_{what}": getattr(t, f"n_{what}") for role, t in layers.items() for what in ("dropped", "repaired")}
    study_counts: dict[str, int] = {}
    for role, t in layers.items():
        study_counts |= {f"outside_{role}": t.n_outside_study_area, f"within_{role}": t.n_within_training_buffer, f"kept_{role}": t.n_kept}
    facts = [LayerFacts(role, t.n_input, t.n_dropped, t.n_kept, t.extent) for role, t in (("predicted", predicted), ("reference", reference))]
    # Without the segmentation family's column the warning about no overlap cannot fire.
    overlap = int(round(merged.sums.as_dict(0).get("n_ref_with_overlap", 1.0)))
    warnings = run_warnings(*facts, overlap, equal_area_crs)
    if sites is not None and sites.aois is not None:
        aois_overlap = aoi_overlap_warning(sites.aois.keys, overlapping_aois(sites.aois))
        if aois_overlap is not None:
            warnings.append(aois_overlap)
    return build_summary(
        merged, plan, options, layer_counts=counts, utm_epsg_codes=sorted({int(c) for t in layers.values() for c in t.utm_epsg}),
        equal_area_crs=equal_area_crs, strata_column=strata_column, sites=sites,
        run_keys=study_keys(study, study_counts), warnings=warnings, tables=tables,
    )
