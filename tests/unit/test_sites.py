"""The site layers' rules (:mod:`evalcore.sites`): the id-column rule, the CRS check and
the geometry each kind of site layer asks for.

Every case is written by hand: a few boxes in UTM zone 13N around (X0, Y0) (see
tests/common.py), and the message each must give, worked out from the layer.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import geopandas
import numpy as np
import pandas as pd
import pytest
import shapely
from shapely.geometry import GeometryCollection, LineString, Point, box

from evalcore.errors import EvalInputError
from evalcore.prepare import prepare_layer
from evalcore.sites import (
    ANNOTATED_AREA,
    AOI,
    SITE_LAYERS,
    STUDY_AREA,
    TRAINING_AREA,
    LayerInput,
    check_id_column,
    check_ids,
    check_site_layers,
    layer_ids,
    layer_input,
    prepare_site_layer,
)
from tests.common import UTM, X0, Y0

A = box(X0, Y0, X0 + 1_000, Y0 + 1_000)
B = box(X0 + 2_000, Y0, X0 + 3_000, Y0 + 1_000)
C = box(X0 + 4_000, Y0, X0 + 5_000, Y0 + 1_000)


def frame(geoms: list, crs: object = UTM, **columns: object) -> geopandas.GeoDataFrame:
    return geopandas.GeoDataFrame(columns, geometry=geopandas.GeoSeries(geoms, crs=crs), crs=crs)


def options(**given: object) -> SimpleNamespace:
    """What :func:`prepare_site_layer` reads of a run's options: every site option, None unless given."""
    values: dict[str, object] = {}
    for kind in SITE_LAYERS:
        values[kind.option] = None
        values[kind.layer_option] = None
    values["aoi_id_column"] = None
    for name, value in given.items():
        values[name] = layer_input(name, value) if name in {kind.option for kind in SITE_LAYERS} else value
    return SimpleNamespace(**values)


# --------------------------------------------------------------------------- option values


def test_layer_input_takes_paths_and_frames():
    assert layer_input("aoi", None) is None
    assert layer_input("aoi", Path("a/b.gpkg")) == "a/b.gpkg"
    held = layer_input("aoi", frame([A]))
    assert isinstance(held, LayerInput) and repr(held) == "<in-memory layer of 1 rows>"
    assert layer_input("aoi", held) is held
    with pytest.raises(ValueError, match="aoi must be a path or a GeoDataFrame, but got int"):
        layer_input("aoi", 3)


# --------------------------------------------------------------------------- the id-column rule


def test_an_id_column_that_is_not_there_lists_the_columns():
    with pytest.raises(EvalInputError) as info:
        check_id_column("nope", ["name", "area"], "--aoi-id-column", "AOI layer file 'a.gpkg'")
    assert str(info.value) == (
        "--aoi-id-column 'nope' is not a column of the AOI layer file 'a.gpkg'; its columns are: 'name', 'area'."
    )
    with pytest.raises(EvalInputError, match=r"its columns are: \(none\)\."):
        check_id_column("nope", [], "--aoi-id-column", "AOI layer file 'a.gpkg'")


def test_the_geometry_column_is_not_an_id_column():
    with pytest.raises(EvalInputError) as info:
        check_id_column("geometry", ["name"], "--ref-id-column", "reference file 'r.gpkg'", geometry={"geometry"})
    assert str(info.value) == (
        "--ref-id-column 'geometry' is the geometry column of the reference file 'r.gpkg', not an attribute; "
        "choose one of: 'name'."
    )


def test_a_row_without_an_id_is_named():
    ids = pd.Series(["a", None, "c", None])
    with pytest.raises(EvalInputError) as info:
        check_ids(ids, "name", "--aoi-id-column", "AOI layer (in memory)")
    assert str(info.value) == "--aoi-id-column 'name' of the AOI layer (in memory): row 1 (0-based) has no id; every row needs one."
    with pytest.raises(EvalInputError, match="row 2 "):
        check_ids(pd.Series([1.0, 2.0, np.nan]), "id", "--ref-id-column", "reference file 'r.gpkg'")


def test_the_first_repeated_id_is_named_with_both_rows():
    # A, B, B, A: row 2 is the first to repeat an id (B, first at row 1); rows 0 and 3
    # share A too, but row 3 comes later.
    with pytest.raises(EvalInputError) as info:
        check_ids(pd.Series(["A", "B", "B", "A"]), "name", "--aoi-id-column", "AOI layer (in memory)")
    assert str(info.value) == (
        "--aoi-id-column 'name' of the AOI layer (in memory): rows 1 and 2 (0-based) share the id 'B'; ids must be unique."
    )
    # Integer ids print as Python ints, whatever the index of the series.
    with pytest.raises(EvalInputError, match=r"rows 0 and 2 \(0-based\) share the id 7;"):
        check_ids(pd.Series([7, 8, 7], index=[10, 20, 30], dtype=np.int64), "id", "--ref-id-column", "reference file 'r.gpkg'")


def test_ids_equal_as_values_or_as_text_are_repeated():
    # 1 and 1.0 are one value (pandas hashes them alike) though they print apart.
    with pytest.raises(EvalInputError, match=r"rows 0 and 1 \(0-based\) share the id 1;"):
        check_ids(pd.Series([1, 1.0], dtype=object), "id", "--aoi-id-column", "AOI layer (in memory)")
    # 1 and "1" are two values, one key in the outputs.
    with pytest.raises(EvalInputError) as info:
        check_ids(pd.Series([1, "1", 2], dtype=object), "id", "--aoi-id-column", "AOI layer (in memory)")
    assert "rows 0 and 1 (0-based) have the ids 1 and '1', which read the same as text ('1')" in str(info.value)


def test_unique_ids_pass():
    check_ids(pd.Series(["a", "b", "c"]), "name", "--aoi-id-column", "AOI layer (in memory)")
    check_ids(pd.Series([1, 2, 3]), "id", "--ref-id-column", "reference file 'r.gpkg'")
    check_ids(pd.Series([], dtype=object), "id", "--ref-id-column", "reference file 'r.gpkg'")
    check_ids(pd.Series([1, "2", 3.5], dtype=object), "id", "--ref-id-column", "reference file 'r.gpkg'")


def test_layer_ids_of_a_frame_and_of_a_series():
    ids = layer_ids(frame([A, B], name=["north", "south"]), "name", "--aoi-id-column", "AOI layer (in memory)")
    assert ids.tolist() == ["north", "south"]
    with pytest.raises(EvalInputError, match="'geometry' is the geometry column of the AOI layer"):
        layer_ids(frame([A], name=["north"]), "geometry", "--aoi-id-column", "AOI layer (in memory)")
    # A GeoSeries has no attribute column at all.
    with pytest.raises(EvalInputError, match=r"'name' is not a column of the AOI layer \(in memory\); its columns are: \(none\)"):
        layer_ids(geopandas.GeoSeries([A], crs=UTM), "name", "--aoi-id-column", "AOI layer (in memory)")


# --------------------------------------------------------------------------- preparing: CRS and ids


def test_an_aoi_layer_needs_its_id_column():
    with pytest.raises(EvalInputError, match=r"an AOI layer needs its id column \(--aoi-id-column / aoi_id_column\)"):
        prepare_site_layer(options(aoi=frame([A], name=["north"])), AOI)


def test_the_aoi_id_rule_applies_before_the_geometry():
    # Row 1 is a point and has no id: the id is what is named.
    given = options(aoi=frame([A, Point(X0, Y0)], name=["north", None]), aoi_id_column="name")
    with pytest.raises(EvalInputError, match=r"--aoi-id-column 'name' of the AOI layer \(in memory\): row 1 \(0-based\) has no id"):
        prepare_site_layer(given, AOI)
    given = options(aoi=frame([A, B], name=["north", "north"]), aoi_id_column="name")
    with pytest.raises(EvalInputError, match="rows 0 and 1 .* share the id 'north'"):
        prepare_site_layer(given, AOI)


@pytest.mark.parametrize("kind", SITE_LAYERS, ids=lambda k: k.option)
def test_a_site_layer_without_a_crs_is_refused(kind):
    given = options(**{kind.option: frame([A, B], crs=None, name=["north", "south"])}, aoi_id_column="name")
    with pytest.raises(EvalInputError) as info:
        prepare_site_layer(given, kind)
    assert str(info.value).startswith(f"The {kind.what} (in memory) has 2 geometries but no CRS.")
    assert "set_crs" in str(info.value)


def test_a_site_layer_in_a_file_is_named_by_its_file(tmp_path):
    path = tmp_path / "aoi.gpkg"
    frame([A, Point(X0, Y0)], name=["north", "spot"]).to_file(path)
    with pytest.raises(EvalInputError) as info:
        prepare_site_layer(options(aoi=str(path), aoi_id_column="name"), AOI)
    assert str(info.value) == (
        f"Every AOI must be a polygon: row 1 (0-based, id 'spot') of the AOI layer file {str(path)!r} is not a polygon "
        "with an area (1 such rows)."
    )
    with pytest.raises(EvalInputError, match=f"--aoi-id-column 'nope' is not a column of the AOI layer file {str(path)!r}; its columns are: 'name'"):
        prepare_site_layer(options(aoi=str(path), aoi_id_column="nope"), AOI)


# --------------------------------------------------------------------------- preparing: geometry types


def test_rows_that_are_not_polygons_are_refused_where_every_row_counts():
    line = LineString([(X0, Y0), (X0 + 10, Y0 + 10)])
    for kind in (AOI, STUDY_AREA, TRAINING_AREA):
        given = options(**{kind.option: frame([A, B, line, Point(X0, Y0)], id=["a", "b", "c", "d"])}, aoi_id_column="id")
        with pytest.raises(EvalInputError) as info:
            prepare_site_layer(given, kind)
        id_text = ", id 'c'" if kind is AOI else ""
        assert str(info.value) == (
            f"Every {kind.row} must be a polygon: row 2 (0-based{id_text}) of the {kind.what} (in memory) is not a polygon "
            "with an area (2 such rows)."
        )


def test_a_study_or_training_area_needs_a_polygon():
    for kind in (STUDY_AREA, TRAINING_AREA):
        with pytest.raises(EvalInputError) as info:
            prepare_site_layer(options(**{kind.option: frame([Point(X0, Y0), None])}), kind)
        assert str(info.value) == (
            f"The {kind.what} (in memory) has no polygon (2 rows, none a polygon with an area); give polygons."
        )
    # An empty AOI layer is allowed: it has no AOI.
    layer = prepare_site_layer(options(aoi=frame([], name=pd.Series([], dtype=object)), aoi_id_column="name"), AOI)
    assert len(layer) == 0 and layer.keys == []


def test_the_annotated_area_keeps_what_is_polygonal():
    # A point, an empty row and a zero-area polygon add nothing to the annotated union.
    flat = shapely.Polygon([(X0, Y0), (X0 + 10, Y0), (X0 + 20, Y0)])
    layer = prepare_site_layer(options(annotated_area=frame([A, Point(X0, Y0), None, flat, B])), ANNOTATED_AREA)
    assert layer.n_input == 5 and len(layer) == 2
    assert shapely.equals(layer.geoms_source[0], A) and shapely.equals(layer.geoms_source[1], B)


def test_a_collection_keeps_its_polygonal_part_and_an_invalid_polygon_is_repaired():
    # The collection's line is dropped; the bow tie becomes two triangles of 500 m x 500 m / 2 each.
    bow_tie = shapely.Polygon([(X0, Y0), (X0 + 1_000, Y0 + 1_000), (X0 + 1_000, Y0), (X0, Y0 + 1_000)])
    given = options(aoi=frame([GeometryCollection([B, LineString([(X0, Y0), (X0, Y0 + 5)])]), bow_tie], id=["b", "t"]),
                    aoi_id_column="id")
    layer = prepare_site_layer(given, AOI)
    assert layer.keys == ["b", "t"]
    assert shapely.equals(layer.geoms_source[0], B)
    assert shapely.area(layer.geoms_source[1]) == pytest.approx(2 * 0.5 * 1_000 * 500)


def test_a_site_layer_is_prepared_as_an_evaluated_layer_would_be():
    # The same SPEC 2 steps: the equal-area polygons are bit for bit the prepared layer's.
    given = frame([A, B, C], id=[3, 1, 2])
    layer = prepare_site_layer(options(aoi=given, aoi_id_column="id"), AOI)
    prepared = prepare_layer(given, "reference")
    assert layer.crs == prepared.crs and layer.n_input == 3
    assert shapely.to_wkb(layer.geoms_ea).tolist() == shapely.to_wkb(prepared.geoms_ea).tolist()
    assert shapely.to_wkb(layer.geoms_source).tolist() == shapely.to_wkb(prepared.geoms_source).tolist()
    assert layer.ids.tolist() == [3, 1, 2] and layer.keys == ["3", "1", "2"]


def test_check_site_layers_checks_every_kind_given():
    check_site_layers(options())  # nothing given, nothing read
    good = frame([A], id=["a"])
    check_site_layers(options(aoi=good, aoi_id_column="id", annotated_area=good, study_area=good, training_area=good))
    with pytest.raises(EvalInputError, match="training-area layer .*no polygon"):
        check_site_layers(options(aoi=good, aoi_id_column="id", training_area=frame([Point(X0, Y0)])))
