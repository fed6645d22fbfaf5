"""The client's up-front checks of score and class columns read a chunk at a time.

``evalcore.io.iter_column_chunks`` numbers each chunk's rows by their position in the
layer, so the checks name the same row, and count the same bad rows, as a check of the
whole column (the messages below are worked out from the files' values by hand).
"""

from __future__ import annotations

import argparse
import functools

import geopandas
import numpy as np
import pandas as pd
import pytest
import shapely

import evalcore.io
from evalcore.errors import EvalInputError
from evalcore.io import describe_source, iter_column_chunks, read_columns


def _layer(n: int, **columns: object) -> geopandas.GeoDataFrame:
    geoms = [shapely.box(10 * i, 0, 10 * i + 5, 5) for i in range(n)]
    return geopandas.GeoDataFrame(dict(columns), geometry=geoms, crs="EPSG:32631")


@pytest.fixture()
def two_parts(tmp_path):
    """A GeoParquet directory of two parts, 5 and 4 rows, score ``0.0, 0.1, ... 0.8``."""
    d = tmp_path / "pred"
    d.mkdir()
    _layer(5, score=[0.0, 0.1, 0.2, 0.3, 0.4]).to_parquet(d / "part-0.parquet")
    _layer(4, score=[0.5, 0.6, 0.7, 0.8]).to_parquet(d / "part-1.parquet")
    return d


def test_parquet_chunks_are_numbered_across_parts(two_parts):
    chunks = list(iter_column_chunks(two_parts, ["score"], role="predicted", rows=3))
    # Batches do not cross a part: 3 + 2 rows of the first, 3 + 1 of the second.
    assert [list(c.index) for c in chunks] == [[0, 1, 2], [3, 4], [5, 6, 7], [8]]
    assert all(isinstance(c.index, pd.RangeIndex) for c in chunks)
    whole = pd.concat(chunks)["score"].to_numpy()
    np.testing.assert_array_equal(whole, read_columns(two_parts, ["score"], role="predicted")["score"].to_numpy())
    np.testing.assert_array_equal(whole, [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])


def test_gdal_chunks_are_numbered_by_position(tmp_path):
    path = tmp_path / "pred.gpkg"
    _layer(7, score=[0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1]).to_file(path, layer="fields")
    chunks = list(iter_column_chunks(path, ["score"], layer="fields", role="predicted", rows=3))
    assert [list(c.index) for c in chunks] == [[0, 1, 2], [3, 4, 5], [6]]
    np.testing.assert_array_equal(pd.concat(chunks)["score"].to_numpy(), [0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1])


def test_rows_must_be_positive(two_parts):
    with pytest.raises(ValueError, match="at least 1"):
        next(iter_column_chunks(two_parts, ["score"], rows=0))


def test_unreadable_column_names_the_layer(two_parts):
    with pytest.raises(EvalInputError, match="Cannot read columns \\['nope'\\] of the predicted"):
        list(iter_column_chunks(two_parts, ["nope"], role="predicted", rows=3))


def _args(pred, ref, **kw) -> argparse.Namespace:
    values = dict(reference=str(ref), ref_layer=None, predicted=str(pred), pred_layer=None, strata_column=None,
                  score_column=None, class_column=None, pred_class_column=None)
    return argparse.Namespace(**(values | kw))


@pytest.fixture()
def small_chunks(monkeypatch):
    """The checks read 3 rows at a time (they import the reader when they run)."""
    monkeypatch.setattr(evalcore.io, "iter_column_chunks", functools.partial(iter_column_chunks, rows=3))


def _check(args):
    from evalcore.cli.checks import check_columns_up_front

    check_columns_up_front(args)


def test_bad_scores_are_named_and_counted_over_every_chunk(tmp_path, small_chunks):
    ref = tmp_path / "ref.parquet"
    _layer(2).to_parquet(ref)
    pred = tmp_path / "pred.parquet"
    # Rows 4 (second chunk) and 7 (third chunk) are bad: 1.5 first, then a missing score.
    _layer(9, score=[0.1, 0.2, 0.3, 0.4, 1.5, 0.6, 0.7, np.nan, 0.9]).to_parquet(pred)
    with pytest.raises(EvalInputError) as info:
        _check(_args(pred, ref, score_column="score"))
    text = str(info.value)
    assert "--score-column 'score'" in text and "row 4 (0-based) holds 1.5, which is outside [0, 1]" in text
    assert "(2 of 9 rows are not finite numbers in [0, 1])" in text


def test_good_scores_pass_in_chunks(tmp_path, small_chunks):
    ref = tmp_path / "ref.parquet"
    _layer(2).to_parquet(ref)
    pred = tmp_path / "pred.parquet"
    _layer(8, score=[0.0, 0.2, 0.3, 0.4, 1.0, 0.6, 0.7, 0.5]).to_parquet(pred)
    _check(_args(pred, ref, score_column="score"))


@pytest.mark.parametrize(
    ("scores", "needle"),
    [
        # Parseable text in the first chunk, a word in the second: the word's row.
        (["0.5", "0.6", "0.7", "0.1", "high", "0.2"], "row 4 (0-based) holds 'high'"),
        # Nulls then parseable text: no word anywhere, so the column's first row (a null
        # of a text column reads as NaN).
        ([None, None, None, "0.1", "0.2", "0.3"], "row 0 (0-based) holds nan"),
        (["0.5", "0.6", "0.7", "0.1", "0.2", "0.3"], "row 0 (0-based) holds '0.5'"),
    ],
)
def test_text_scores_name_the_row_the_whole_column_would(tmp_path, small_chunks, scores, needle):
    from evalcore.metrics.scores import score_values

    ref = tmp_path / "ref.parquet"
    _layer(2).to_parquet(ref)
    pred = tmp_path / "pred.parquet"
    _layer(len(scores), score=pd.Series(scores, dtype=object)).to_parquet(pred)
    with pytest.raises(EvalInputError) as chunked:
        _check(_args(pred, ref, score_column="score"))
    assert needle in str(chunked.value) and "is not numeric" in str(chunked.value)
    # The same message as the check of the whole column, read the same way.
    with pytest.raises(EvalInputError) as whole:
        score_values(read_columns(pred, ["score"], role="predicted"), "score", describe_source(str(pred), None, "predicted"),
                     label="--score-column")
    assert str(whole.value) == str(chunked.value)


def test_class_column_of_nulls_in_every_chunk_is_refused_with_its_row_count(tmp_path, small_chunks):
    ref = tmp_path / "ref.parquet"
    _layer(7, crop=pd.Series([None] * 7, dtype=object)).to_parquet(ref)
    pred = tmp_path / "pred.parquet"
    _layer(3, crop=["a", "b", "a"]).to_parquet(pred)
    with pytest.raises(EvalInputError) as info:
        _check(_args(pred, ref, class_column="crop"))
    assert "--class-column 'crop'" in str(info.value) and "holds only nulls (7 rows)" in str(info.value)


def test_class_in_the_last_chunk_only_passes(tmp_path, small_chunks):
    ref = tmp_path / "ref.parquet"
    _layer(7, crop=pd.Series([None] * 6 + ["wheat"], dtype=object)).to_parquet(ref)
    pred = tmp_path / "pred.parquet"
    _layer(3, crop=["a", "b", "a"]).to_parquet(pred)
    _check(_args(pred, ref, class_column="crop"))
