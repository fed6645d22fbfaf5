"""Validation of option values: each check names the option and the value it got."""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral, Real

__all__ = ["unit_interval", "open_unit_interval", "positive", "positive_or_none", "non_negative_int", "positive_int", "thresholds", "any_value", "optional_text", "fraction", "choice"]


def _is_real(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, Real)


def unit_interval(name: str, value: object) -> float:
    """A number in (0, 1]."""
    if not _is_real(value) or not (0.0 < float(value) <= 1.0):
        raise ValueError(f"{name} must be in (0, 1], but got {value!r}.")
    return float(value)


def open_unit_interval(name: str, value: object) -> float:
    """A number in (0, 1), ends excluded."""
    if not _is_real(value) or not (0.0 < float(value) < 1.0):
        raise ValueError(f"{name} must be in the open interval (0, 1), but got {value!r}.")
    return float(value)


def positive(name: str, value: object) -> float:
    if not _is_real(value) or not math.isfinite(float(value)) or float(value) <= 0:
        raise ValueError(f"{name} must be a positive finite number, but got {value!r}.")
    return float(value)


def positive_or_none(name: str, value: object) -> float | None:
    if value is None:
        return None
    try:
        return positive(name, value)
    except ValueError:
        raise ValueError(f"{name} must be a positive finite number or None, but got {value!r}.") from None


def non_negative_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, but got {value!r}.")
    return int(value)


def positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, but got {value!r}.")
    return int(value)


def thresholds(name: str, value: object) -> tuple[float, ...] | None:
    """None, or a non-empty strictly increasing sequence of numbers in (0, 1]."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(f"{name} must be a list of IoU thresholds in (0, 1] or None, but got {value!r}.")
    values = list(value)
    if not values:
        raise ValueError(f"{name} must hold at least one threshold, but got an empty list.")
    if not all(_is_real(v) and 0.0 < float(v) <= 1.0 for v in values):
        raise ValueError(f"{name} must hold thresholds in (0, 1], but got {value!r}.")
    if any(float(b) <= float(a) for a, b in zip(values, values[1:])):
        raise ValueError(f"{name} must be strictly increasing, but got {value!r}.")
    return tuple(float(v) for v in values)


def any_value(name: str, value: object) -> object:
    return value


def optional_text(name: str, value: object) -> str | None:
    """None or a non-empty string (a column or layer name)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string or None, but got {value!r}.")
    return value


def fraction(name: str, value: object) -> float:
    """A number in [0, 1)."""
    if not _is_real(value) or not (0.0 <= float(value) < 1.0):
        raise ValueError(f"{name} must be in [0, 1), but got {value!r}.")
    return float(value)


def choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    """One of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, but got {value!r}.")
    return str(value)
