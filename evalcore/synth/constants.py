"""Constants of :mod:`evalcore.synth`: the public ones, and the codes and sizes its sections share.

The public constants (CRSs, error mix, false-positive rate, bad-row kinds, formats and
layer names) are re-exported by the package. The item, shape and outcome codes are
small integers stored in arrays that every section reads, and the sizes (field areas,
gaps, lattice of cluster slots, attribute vocabularies) tune several sections at once,
so they live here, below all of them; the site layers' own sizes are in
:mod:`evalcore.synth.sites`.
"""

from __future__ import annotations

from types import MappingProxyType

REF_CRS: str = "EPSG:4326"
"""CRS of the reference layer (lon/lat degrees)."""

PRED_CRS: str = "EPSG:5070"
"""CRS of the predicted layer (NAD83 / Conus Albers, metres)."""

ERROR_MIX: MappingProxyType[str, float] = MappingProxyType(
    {
        "good": 0.69,
        "dilate_erode": 0.10,
        "merge": 0.05,
        "split": 0.05,
        "miss": 0.08,
        "bad_shape": 0.03,
    }
)
"""Share of reference fields with each prediction outcome (sums to 1)."""

FALSE_POSITIVE_RATE: float = 0.05
"""Number of false-positive predictions per reference field."""

BAD_ROW_KINDS: tuple[str, ...] = ("null", "empty", "point", "linestring", "bowtie", "zero_area")
"""Kinds of bad rows added to each layer when ``bad_rows=True``, one row each."""

FIELDS_PER_CLUSTER: int = 50_000
"""The default number of clusters is ``max(4, ceil(n_ref / FIELDS_PER_CLUSTER))``."""

FORMATS: MappingProxyType[str, str] = MappingProxyType({"parquet": ".parquet", "gpkg": ".gpkg"})
"""File formats of :func:`write_layers` and their file name extensions."""

LAYER_NAMES: tuple[str, ...] = ("predicted", "reference", "aoi", "annotated")
"""Layers :func:`write_layers` writes, each to ``<name><extension>``."""

# Shape kinds.
_RECT, _PIVOT, _IRREGULAR = 0, 1, 2
# Item kinds: everything that occupies space in a cluster.
_FIELD, _FP_EMPTY, _FP_OUTSIDE, _FP_PARTIAL, _BAD_REF, _BAD_PRED = range(6)
# Prediction outcomes of a field; _MERGE_PARTNER is the second field of a merge.
_GOOD, _DILATE_ERODE, _SPLIT, _MISS, _BAD_SHAPE, _MERGE, _MERGE_PARTNER = range(7)
_OUTCOME_NAMES = ("good", "dilate_erode", "split", "miss", "bad_shape", "merge", "merge_partner")
# Outcomes whose rates a clustered error field modulates (merges too, in _add_merges).
_CLUSTERED_OUTCOMES = [_SPLIT, _MISS, _BAD_SHAPE]
_FIELD_FEATURES = 256  # random Fourier features of the clustered-error field

_HA_M2 = 10_000.0
_MEDIAN_FIELD_HA = 3.0
_FIELD_AREA_SIGMA = 1.1  # of log(area)
_MIN_FIELD_HA, _MAX_FIELD_HA = 0.1, 200.0
_MIN_GAP_M = 4.0  # the least distance between two reference fields
_BAD_CELL_HALF_M = 40.0  # bad-row geometries lie within +-30 m of their cell centre
_OUTSIDE_MAX_M = 1_500.0  # outside false positives lie at most this far from a cluster
_MERGE_MAX_GAP_M = 30.0  # only neighbours closer than this are merged
_DENSIFY_M = 25.0  # good predictions are densified to edges of at most this length
_CHUNK_ITEMS = 32_768  # items built per batch of vertex arrays
_SLOT_DLON, _SLOT_DLAT = 2.0, 1.5  # lattice of cluster centres, degrees
_SLOT_ORIGIN = (-108.0, 38.0)  # a lattice node on the zone 12/13 boundary
_SLOT_ANCHORS = ((-108.0, 38.0), (-102.0, 41.0), (-110.5, 35.0), (-98.5, 36.5))
_SLOT_REGION = (-112.0, 31.5, -96.0, 45.5)  # lon_min, lat_min, lon_max, lat_max
_MIN_SLOT_SPACING_KM = 143.0  # 2 degrees of longitude at 50 N
_COUNTIES = ("Finney", "Haskell", "Kearny", "Scott", "Texas", "Cimarron", "Baca", "Yuma")
_CROPS = ("winter wheat", "corn", "soybeans", "sorghum", "cotton", "alfalfa", "fallow")
_CROP_P_PIVOT = (0.05, 0.45, 0.20, 0.05, 0.0, 0.25, 0.0)
_CROP_P_OTHER = (0.32, 0.18, 0.17, 0.10, 0.08, 0.03, 0.12)
# The crop a model confuses each crop with, and how often (the predicted ``crop``):
# summer row crops with each other, winter wheat with fallow stubble, alfalfa with wheat.
_CROP_CONFUSION = {
    "winter wheat": ("fallow", 0.10),
    "corn": ("sorghum", 0.12),
    "soybeans": ("corn", 0.08),
    "sorghum": ("corn", 0.20),
    "cotton": ("soybeans", 0.10),
    "alfalfa": ("winter wheat", 0.06),
    "fallow": ("winter wheat", 0.15),
}
