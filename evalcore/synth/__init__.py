"""Synthetic predicted and reference field layers with a realistic error mix, and site layers.

:func:`make_layers` builds a reference layer that looks like a field registry and a
predicted layer that looks like the output of a field-boundary model. Everything is
drawn from one ``numpy.random.default_rng(seed)``, so the same ``(n_ref, seed)``
always gives identical layers. :func:`make_site_layers` lays an AOI layer and an
annotated-area layer over them, drawn from a generator of their own,
``numpy.random.default_rng([seed, 1])``, so adding them changed nothing in the
first two layers. :func:`write_layers` writes all four to disk
(``predicted``, ``reference``, ``aoi`` and ``annotated``, see :data:`LAYER_NAMES`).

Reference layer (``EPSG:4326``, lon/lat)
    * Field areas are lognormal (median 3 ha) clipped to 0.1-200 ha.
    * Shapes: rectangles (most near the cardinal directions, some at any angle),
      centre pivots (regular 32-64-gons, more common among large fields), irregular
      star-shaped jittered polygons, some fields with a hole (pond, farmstead) and
      some multipolygons (a rectangle cut in two by a 8-20 m track).
    * Fields do not overlap, by construction: each cluster is a row packing of
      cells, every field sits inside its own cell, and the cells leave a gap of at
      least 4 m between fields. Clusters sit on a lattice of slots in the US Great
      Plains / Southwest (longitudes -110 to -98 by default) and cover UTM zones 12,
      13 and 14. The first two clusters are centred on the zone boundaries at
      -108 and -102 degrees, with one field centred exactly on the boundary, so some
      fields always cross a zone boundary. Each cluster is built in the UTM zone of
      its centre (``EPSG:326xx``, metres) and then reprojected.
    * Columns: ``field_id`` (unique int64, a permutation of ``0..n-1``, so an id is
      not its row position and id 0 exists), ``stratum`` (a county name, spatially
      coherent, a handful of values, a few missing), ``crop``.

Predicted layer (``EPSG:5070``, NAD83 / Conus Albers, metres)
    Each reference field gives rise to one outcome, with these probabilities
    (:data:`ERROR_MIX`):

    ============  =====  ==============================================================
    outcome       share  prediction
    ============  =====  ==============================================================
    good          0.69   densified copy with vertex jitter (sigma 0.5-2 m) and a shift
                         of 0-3 m per cluster plus 0-2 m per field
    dilate_erode  0.10   buffer by +-2-5 m (mitre joins)
    merge         0.05   one prediction covering two neighbouring fields (the share
                         counts both fields); their union, closed over the gap
    split         0.05   two predictions: the field cut by a line through its centroid
    miss          0.08   no prediction
    bad_shape     0.03   the field shrunk to 30-60 % of its size, or heavily eroded
    ============  =====  ==============================================================

    On top of that come ``round(0.05 * n_ref)`` false positives
    (:data:`FALSE_POSITIVE_RATE`): half overlap no reference field (they sit in empty
    cells between fields, or up to 1.5 km outside a cluster), half partly cover a
    reference field (mostly a missed one). Everything except ``miss`` is shifted.
    Predictions can overlap each other slightly (dilations, shifts) but mostly do not.
    Columns: ``pred_id`` (unique int64, a permutation of ``0..n-1``), ``score``
    (float64 in [0, 1]; Beta-distributed with a mean of 0.8 for good matches down to
    0.2 for false positives, so it is informative but not separating) and ``crop``
    (the predicted crop: its source field's crop, confused now and then with a
    similar one, e.g. sorghum for corn in 12 % and corn for sorghum in 20 % of the
    predictions, winter wheat and fallow both ways; a false positive gets a crop drawn
    from the crops' shares). The crop comes from ``numpy.random.default_rng([seed,
    3])``, a generator of its own, so the columns drawn before it did not change.

Clustered errors (``error_correlation_km=L``)
    Real errors cluster in space (a hazy scene, a region the model saw little of), so
    neighbouring fields are not independent. With ``error_correlation_km`` a smooth
    random field ``z`` over each cluster (a sum of 256 random Fourier features; mean 0,
    variance 1, correlation ``exp(-(d / L)^2)`` at a distance ``d``, so 1/e at ``L``;
    independent between clusters) sets a weight ``w = 2 Phi(z)`` at each field, uniform
    on [0, 2] with mean 1. A field's chances of ``miss``, ``split`` and ``bad_shape``,
    of starting a ``merge``, and its own 0-2 m shift are multiplied by ``w``;
    ``dilate_erode`` keeps its share and ``good`` takes the rest (so it never drops
    below 0.55). The mean error mix is :data:`ERROR_MIX`; the mix of one landscape
    varies with its field, more so at a long ``L`` (the point). The partly overlapping
    false positives sit on the new missed fields. Everything else, the reference layer
    included, is what ``error_correlation_km=None`` (independent errors) gives with the
    same seed; the extra draws come from ``numpy.random.default_rng([seed, 2])``.

Bad rows
    With ``bad_rows=True`` each layer gets one extra row of each kind in
    :data:`BAD_ROW_KINDS`: a null geometry, an empty polygon, a point, a line string,
    a self-intersecting bow-tie polygon and a zero-area polygon. Each sits in its own
    empty cell at a random place, so a repaired bow-tie overlaps nothing.

Rows of both layers are in spatial order (cluster, then row of cells, then x), like
a registry sorted by parcel number, which keeps GeoParquet row groups compact.

AOI layer (``EPSG:4326``), from :func:`make_site_layers`
    10-17 areas of interest (never fewer than 8 nor more than 20, whatever
    ``n_ref``). The clusters of fields are found from the data. With 4 clusters
    (the default up to 200,000 fields) each cluster is a hub; with more, 4-7
    spread-out clusters are hubs and each other cluster joins the nearest one.

    * Around each hub lies a fan of 2 or more sector AOIs (8-14 in all): irregular
      regions that meet at an apex near the cluster's centre, reach 30-45 km out
      (further for large clusters or groups) and leave an open wedge of 50-100
      degrees (turned away from the other clusters of the hub's group when it
      can be), so the sectors split the cluster between them and 10-30 % of the
      fields lie in no AOI. Each boundary between two sectors is a straight edge
      of typically 12-27 km from the apex out past the cluster, then a bend; the rim
      has a vertex every ~25 degrees. Edges are straight lines in lon/lat (vertices
      are reprojected from the hub's UTM zone, edges are not densified), typically
      10-25 km long, so a consumer must densify them before reprojecting, or a
      field near a boundary lands in the wrong AOI.
    * In each fan at least one (about half of all) shared boundaries is moved by a
      band of 3-8 % of the cluster's radius into the neighbour, so two AOIs overlap
      a little there and fields in the band lie in both (the first AOI by row
      position should win); about a fifth leave a thin gap of 1-3 % instead.
    * 2-3 star-shaped AOIs of 18-35 km radius lie away from every cluster: they
      contain no reference field and touch no prediction.
    * With the default clusters the sector AOIs lie in UTM zones 12, 13 and 14,
      and those of the first two clusters cross a zone boundary.
    * Columns: ``aoi_id`` (unique str ``"A00"``, ``"A01"``, ...; rows are shuffled
      and the ids are a permutation, so an id is not its row position) and
      ``name`` (a unique place-like name). All geometries are valid Polygons.

Annotated-area layer (``EPSG:4326``), from :func:`make_site_layers`
    A few Polygons (one or two per hub, and a piece a bite cut off; 5-10 with the
    default clusters) marking where the reference is complete: a star-shaped
    polygon 15-60 % wider than the hub's clusters, cut at least once into two
    halves that overlap in a band. From each cluster the area beyond one side of
    its reference bbox is cut away (from up to 12 % of its half size inside it; the
    side with the most false positives outside the cluster, which therefore lie
    outside the annotated area), and 1-2 round bites of 35-60 % of its smaller half
    side are taken out at the edge of its reference bbox. So 5-20 % of the
    predictions, some false positives among them, lie mostly outside the annotated
    area. Column ``area_id`` (unique int64, a permutation of ``0..n-1``).

Modules, one per section (the package re-exports the public names)
    :mod:`~evalcore.synth.constants` (the public constants and the codes the sections
    share), :mod:`~evalcore.synth.shapes` (items and their rings),
    :mod:`~evalcore.synth.layout` (cells in rows, clusters on the map),
    :mod:`~evalcore.synth.geometry` (geometries, repairs, reprojection),
    :mod:`~evalcore.synth.attributes` (``stratum``, ``crop``),
    :mod:`~evalcore.synth.predictions` (outcomes, merges, predicted geometries, scores),
    :mod:`~evalcore.synth.sites` (AOIs and the annotated area),
    :mod:`~evalcore.synth.layers` (the public functions, which call the others in order)
    and :mod:`~evalcore.synth.stream` (layers above 200,000 fields made one cluster at
    a time from seeds of their own and written as GeoParquet parts, in bounded memory:
    ``evalcore synth --part-rows``).
"""

from __future__ import annotations

from evalcore.synth.constants import (
    BAD_ROW_KINDS,
    ERROR_MIX,
    FALSE_POSITIVE_RATE,
    FIELDS_PER_CLUSTER,
    FORMATS,
    LAYER_NAMES,
    PRED_CRS,
    REF_CRS,
)
from evalcore.synth.layers import make_layers, make_site_layers, write_layers

__all__ = [
    "BAD_ROW_KINDS",
    "ERROR_MIX",
    "FALSE_POSITIVE_RATE",
    "FIELDS_PER_CLUSTER",
    "FORMATS",
    "LAYER_NAMES",
    "PRED_CRS",
    "REF_CRS",
    "make_layers",
    "make_site_layers",
    "write_layers",
]
