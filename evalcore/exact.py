"""Sums of floats that do not depend on how the rows were split or ordered.

A float sum depends on the order of its additions, so the same fields summed per
partition of 5 km and per partition of 50 km give totals that differ in the last bits.
Here every value is first written exactly as six signed integer *digits* of 24 bits,
``v = sum_k d_k 2**(24 k - 72)`` for ``k = 0 .. 5`` (its magnitude truncated to a
multiple of 2**-72, about 2e-22, the same way wherever the value is summed). Digits
are whole numbers below 2**24, so adding them in float64 is exact as long as fewer
than 2**29 (536 million) rows meet in one sum: digit sums merge by plain addition in
any order and any grouping, and the total is a function of the set of rows only.
:func:`value_of` turns digit sums into the correctly rounded float of their exact
total.

Values must be finite with a magnitude below 2**72 (about 4.7e21: square metres of a
country's fields are below 1e13); NaN or infinity in a column makes its sum NaN.
"""

from __future__ import annotations

import math

import numpy as np

from evalcore._typing import F64Array

__all__ = ["DIGIT_BITS", "N_DIGITS", "LOWEST_EXPONENT", "MAX_MAGNITUDE", "ONES_DIGIT", "digits", "value_of"]

DIGIT_BITS = 24
"""Bits per digit."""
N_DIGITS = 6
"""Digits per value: 144 bits, from 2**-72 to 2**72."""
LOWEST_EXPONENT = -72
"""The lowest digit counts units of 2**LOWEST_EXPONENT."""
MAX_MAGNITUDE = 2.0 ** (LOWEST_EXPONENT + DIGIT_BITS * N_DIGITS)
"""Values must be smaller than this in magnitude (2**72)."""

_UNITS = tuple(2.0 ** (LOWEST_EXPONENT + DIGIT_BITS * k) for k in range(N_DIGITS))
ONES_DIGIT = -LOWEST_EXPONENT // DIGIT_BITS
"""The digit that counts units of 1."""


def digits(values: F64Array) -> F64Array:
    """The exact digits of each value, along a new last axis of length :data:`N_DIGITS`.

    Parameters
    ----------
    values : array_like of float64
        Finite values of magnitude below :data:`MAX_MAGNITUDE`; NaN and infinity give NaN
        digits (so the sum they enter is NaN).

    Returns
    -------
    ndarray of float64, shape ``values.shape + (N_DIGITS,)``
        Whole numbers of magnitude below 2**24, with the sign of the value; digit ``k``
        counts units of ``2**(24 k - 72)``.

    Raises
    ------
    ValueError
        A finite value of magnitude 2**72 or more.

    Examples
    --------
    >>> d = digits(np.array([1.5, -2.0**-60]))
    >>> [int(x) for x in d[0]]  # 1 unit of 2**0 and 2**23 units of 2**-24
    [0, 0, 8388608, 1, 0, 0]
    >>> [int(x) for x in d[1]]  # 2**12 units of 2**-72
    [-4096, 0, 0, 0, 0, 0]
    """
    from evalcore._exact_kernels import _digits_of

    v = np.asarray(values, dtype=np.float64)
    out, largest = _digits_of(np.ascontiguousarray(v).reshape(-1), np.asarray(_UNITS))
    if largest >= MAX_MAGNITUDE:
        raise ValueError(
            f"a summed value of magnitude {largest:.6g} is beyond the exact sums' range (below 2**72 = {MAX_MAGNITUDE:.3g})"
        )
    return out.reshape(v.shape + (N_DIGITS,))


def value_of(digit_sums: F64Array) -> F64Array:
    """The correctly rounded float of ``sum_k D_k 2**(24 k - 72)`` for every digit vector.

    Parameters
    ----------
    digit_sums : ndarray of float64, shape ``(..., N_DIGITS)``
        Sums of :func:`digits` (whole numbers of magnitude below 2**53).

    Returns
    -------
    ndarray of float64, shape ``digit_sums.shape[:-1]``

    Examples
    --------
    >>> rows = np.array([0.1, 0.2, 0.3])
    >>> float(value_of(digits(rows).sum(axis=0))) == math.fsum(rows)
    True
    """
    d = np.asarray(digit_sums, dtype=np.float64)
    terms = d * np.asarray(_UNITS)  # each term exact: a whole number below 2**53 times a power of two
    flat = terms.reshape(-1, N_DIGITS)
    out = np.empty(len(flat))
    finite = np.isfinite(flat).all(axis=1)
    out[~finite] = np.nan
    exactly_float = finite & (np.count_nonzero(flat, axis=1) <= 1)
    out[exactly_float] = flat[exactly_float].sum(axis=1)  # one term (or none): nothing to round
    for i in np.flatnonzero(finite & ~exactly_float):
        out[i] = math.fsum(flat[i])
    return out.reshape(d.shape[:-1])
