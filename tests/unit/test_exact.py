"""Exact digit sums (evalcore.exact): hand-worked digits, and sums that ignore order and grouping."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalcore.exact import _UNITS, MAX_MAGNITUDE, N_DIGITS, digits, value_of
from evalcore.stats import GroupSums, group_sums


def test_digits_by_hand():
    # 3 * 2**24 + 5 + 2**-24: digit 4 (units of 2**24) 3, digit 3 (units of 1) 5, digit 2 (2**-24) 1.
    d = digits(np.array([3 * 2.0**24 + 5 + 2.0**-24]))[0]
    assert d.tolist() == [0.0, 0.0, 1.0, 5.0, 3.0, 0.0]
    # The largest digit: 2**71 is 2**23 units of 2**48.
    assert digits(np.array([2.0**71]))[0].tolist() == [0.0, 0.0, 0.0, 0.0, 0.0, 2.0**23]
    # A negative value has negative digits.
    assert (digits(np.array([-0.75]))[0] == -digits(np.array([0.75]))[0]).all()


def _digits_by_definition(values):
    """The digits as the module's text defines them, digit 5 first: ``d = floor(rest / unit)``,
    ``rest -= d * unit`` on the magnitude, then the value's sign on every digit (numpy, slow)."""
    v = np.asarray(values, dtype=np.float64)
    rest = np.abs(v)
    out = np.empty(v.shape + (N_DIGITS,))
    with np.errstate(invalid="ignore"):  # inf - inf: an infinite value's digits are NaN from there on
        for k in range(N_DIGITS - 1, -1, -1):
            d = np.floor(rest * (1.0 / _UNITS[k]))
            out[..., k] = d
            rest = rest - d * _UNITS[k]
    return np.where(np.signbit(v)[..., None], -out, out)


def test_digits_kernel_is_the_definition_to_the_bit():
    """Values of every magnitude the sums take (2**-80 to 2**71), zeros of both signs, the
    edges of the kernel's short path (2**24 and just below), subnormals, NaN and infinity:
    the same bits, the sign of every zero digit included."""
    rng = np.random.default_rng(7)
    x = np.concatenate([
        rng.standard_normal(20_000) * 2.0 ** rng.integers(-80, 70, 20_000),
        rng.integers(0, 2**24, 1000).astype(np.float64) * rng.choice([-1.0, 1.0], 1000),
        [0.0, -0.0, np.nan, np.inf, -np.inf, 2.0**24, -(2.0**24), 2.0**24 - 2.0**-29, 2.0**-72, 2.0**-73,
         3 * 2.0**-73, 2.0**71, -(2.0**71), 5e-324, -5e-324, 1.0, -1.0, 0.1, -0.1],
    ])
    got, expected = digits(x), _digits_by_definition(x)
    assert got.tobytes() == expected.tobytes()
    assert digits(x[:21_014].reshape(-1, 7)).tobytes() == expected[:21_014].reshape(-1, 7, N_DIGITS).tobytes()  # any shape
    assert digits(np.float64(-0.75)).tolist() == [-0.0, -0.0, -(2.0**23) - 2.0**22, -0.0, -0.0, -0.0]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not abs(x) >= MAX_MAGNITUDE or math.isinf(x)),
                min_size=0, max_size=20))
def test_digits_kernel_is_the_definition_for_any_float(values):
    a = np.array(values, dtype=np.float64)
    assert digits(a).tobytes() == _digits_by_definition(a).tobytes()


def test_bits_below_the_lowest_digit_are_dropped_the_same_way_everywhere():
    tiny = 2.0**-80
    assert value_of(digits(np.array([tiny]))[0]) == 0.0
    assert value_of(digits(np.array([1.0 + 2.0**-52 + 0.0]))[0]) == 1.0 + 2.0**-52


def test_sum_is_correctly_rounded_where_plain_addition_is_not():
    values = np.array([1.0, 2.0**-53, 2.0**-53])  # left to right in float: 1.0; exactly: 1 + 2**-52
    assert (values[0] + values[1]) + values[2] == 1.0
    assert value_of(digits(values).sum(axis=0)) == 1.0 + 2.0**-52


def test_out_of_range_and_non_finite():
    with pytest.raises(ValueError, match="beyond the exact sums' range"):
        digits(np.array([1.0, MAX_MAGNITUDE]))
    assert math.isnan(value_of(digits(np.array([1.0, np.nan])).sum(axis=0)))
    assert digits(np.zeros((2, 3))).shape == (2, 3, N_DIGITS)


finite = st.floats(min_value=-1e15, max_value=1e15, allow_nan=False).filter(lambda x: x == 0.0 or abs(x) >= 2.0**-19)


@settings(max_examples=200, deadline=None)
@given(st.lists(finite, min_size=1, max_size=60), st.randoms(use_true_random=False))
def test_any_split_and_order_gives_the_correctly_rounded_sum(values, rnd):
    # Every bit of these values is at or above 2**-72, so nothing is dropped and the
    # result must be math.fsum's correctly rounded total, whatever the grouping.
    a = np.array(values)
    expected = math.fsum(values)
    order = list(range(len(a)))
    rnd.shuffle(order)
    cut = rnd.randrange(len(a) + 1)
    parts = [a[order[:cut]], a[order[cut:]]]
    total = sum(digits(p).sum(axis=0) for p in parts)
    assert value_of(total) == expected


def test_group_sums_merge_in_any_order_to_the_same_bits():
    rng = np.random.default_rng(7)
    values = rng.uniform(0, 1, size=(1000, 2)) * np.array([1.0, 1e6])
    codes = rng.integers(0, 4, size=(1000, 1))
    codes[codes == 0] = -1  # group 0 is every row; a grouping's groups are 1..3, -1 none
    cols = ("a", "b")
    whole = group_sums(values, np.empty((1000, 0)), codes, 4, cols, ())
    merged = GroupSums.empty(cols, (), 4)
    for chunk in np.array_split(rng.permutation(1000), 7):
        merged = merged.merge(group_sums(values[chunk], np.empty((len(chunk), 0)), codes[chunk], 4, cols, ()))
    assert (merged.sums == whole.sums).all()
    assert merged.sums[0, 1] == math.fsum(values[:, 1])
    inside = codes[:, 0] == 3
    assert merged.sums[3, 0] == math.fsum(values[inside, 0])
