"""Attributes: the reference layer's ``stratum`` (county) and ``crop``, the predicted ``crop``."""

from __future__ import annotations

import numpy as np

from evalcore._typing import IdArray
from evalcore.synth.constants import _COUNTIES, _CROP_CONFUSION, _CROP_P_OTHER, _CROP_P_PIVOT, _CROPS, _PIVOT
from evalcore.synth.layout import _Layout
from evalcore.synth.shapes import _Shapes


def _strata(rng: np.random.Generator, layout: _Layout, ref_items: IdArray, item_cluster: IdArray) -> np.ndarray:
    """County of each reference row: the west or east half of its cluster; a few missing."""
    cluster = item_cluster[ref_items]
    east = layout.tx[ref_items] > layout.extent[cluster, 0] / 2
    strata = np.array(_COUNTIES, dtype=object)[(2 * cluster + east) % len(_COUNTIES)]
    n_missing = min(ref_items.size // 10, max(3, round(0.002 * ref_items.size)))
    strata[rng.choice(ref_items.size, n_missing, replace=False)] = None
    return strata


def _crops(rng: np.random.Generator, ref_items: IdArray, shapes: _Shapes, n_ref: int) -> np.ndarray:
    """Crop of each reference row; pivots grow more corn and alfalfa."""
    is_field = ref_items < n_ref
    is_pivot = np.zeros(ref_items.size, dtype=bool)
    is_pivot[is_field] = shapes.kind[ref_items[is_field]] == _PIVOT
    u = rng.random(ref_items.size)
    crop = np.where(
        is_pivot,
        np.searchsorted(np.cumsum(_CROP_P_PIVOT), u * sum(_CROP_P_PIVOT), side="right"),
        np.searchsorted(np.cumsum(_CROP_P_OTHER), u * sum(_CROP_P_OTHER), side="right"),
    )
    return np.array(_CROPS, dtype=object)[np.minimum(crop, len(_CROPS) - 1)]


def _predicted_crops(rng: np.random.Generator, source_crop: np.ndarray) -> np.ndarray:
    """Predicted crop of each prediction from its source field's crop (None: no source field).

    Mostly the source's crop; with the probability of :data:`_CROP_CONFUSION` the crop it
    is confused with. A prediction without a source field (a false positive, a bad row)
    gets a crop drawn from the crops' shares outside pivots.
    """
    u = rng.random(source_crop.size)
    other = np.array(_CROPS, dtype=object)[
        np.minimum(np.searchsorted(np.cumsum(_CROP_P_OTHER), rng.random(source_crop.size) * sum(_CROP_P_OTHER), side="right"), len(_CROPS) - 1)
    ]
    out = np.empty(source_crop.size, dtype=object)
    for k, crop in enumerate(source_crop.tolist()):
        if crop is None:
            out[k] = other[k]
            continue
        confused, p = _CROP_CONFUSION[crop]
        out[k] = confused if u[k] < p else crop
    return out
