"""numba kernel of the exact sums' digits (:func:`evalcore.exact.digits`).

numpy writes the six digits of a column of values in six passes of a multiplication, a
floor, a copy, a product and a difference each, plus the signs: about thirty trips over
memory. This kernel writes each value's digits in one, and those of a value below 2**24
(every count, area in hectares, rate or distance a run sums) with two truncations instead
of six chained floors. Every step is exact, so the digits are those of the numpy
definition to the bit (tests/unit/test_exact.py compares them on values of every
magnitude, zeros of both signs, NaN and infinity).

The aurc replicate kernel (:func:`evalcore._score_kernels._replicate_aurc_digits`) writes
the same split of a term below 2**24 again instead of calling one from here: numba's cache
does not follow a call into another module (a cached caller kept the old callee's result
after the callee's module changed, numba 0.68, tried 2026-12-07).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from evalcore.config import NUMBA_OPTIONS

__all__ = ["_digits_of"]


@njit(**NUMBA_OPTIONS)
def _digits_of(values: np.ndarray, units: np.ndarray) -> tuple[np.ndarray, float]:
    """The digits of each value (:func:`evalcore.exact.digits`), magnitudes below 2**72 or non-finite.

    Parameters
    ----------
    values : float64 (n,)
    units : float64 (6,)
        :data:`evalcore.exact._UNITS`: 2**-72, 2**-48, 2**-24, 1, 2**24, 2**48.

    Returns
    -------
    digits : float64 (n, 6)
        Digit k counts units of ``units[k]``, with the value's sign (a negative value's
        zero digits are -0.0, as the definition's negation makes them).
    largest : float
        The largest finite magnitude among the values (0.0: none), for the caller's
        range check (the digits of a magnitude of 2**72 or more are meaningless).
    """
    if units.shape[0] != 6 or not np.all(units == 2.0 ** (24.0 * np.arange(6) - 72.0)):
        raise ValueError("the digits kernel is written for six digits of 24 bits from 2**-72 (evalcore.exact)")
    n = values.shape[0]
    out = np.empty((n, 6))
    inverse = 1.0 / units  # powers of two: exact
    mask = np.int64(2**24 - 1)
    largest = 0.0
    for i in range(n):
        v = values[i]
        rest = abs(v)
        if rest < units[4]:
            # Below 2**24 (NaN is not): digits 5 and 4 are 0; rest * 2**24 is below 2**48
            # and exact, its truncation (a non-negative value's floor) holds digits 3 and
            # 2, and the fraction left times 2**48 (exact) holds digits 1 and 0.
            scaled = rest * inverse[2]
            high = np.int64(scaled)
            below = np.int64((scaled - np.float64(high)) * inverse[1])
            d = (np.float64(below & mask), np.float64(below >> 24), np.float64(high & mask), np.float64(high >> 24), 0.0, 0.0)
            for k in range(6):
                out[i, k] = d[k]
        else:
            if rest > largest and rest != np.inf:
                largest = rest
            # The definition's steps, digit 5 first (large values, NaN and infinity).
            for k in range(5, -1, -1):
                digit = np.floor(rest * inverse[k])
                out[i, k] = digit
                rest -= digit * units[k]
        if np.signbit(v):
            for k in range(6):
                out[i, k] = -out[i, k]
    return out, largest
