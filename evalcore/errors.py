"""Exceptions raised at the public boundary of evalcore."""

from __future__ import annotations


class EvalInputError(ValueError):
    """An input layer, file or parameter that evalcore cannot evaluate.

    The message names the file, layer, row, column or argument at fault.
    """


class CRSError(EvalInputError):
    """A layer without a CRS, or a CRS that cannot be used for the asked purpose."""


class IncompatibleStatsError(ValueError):
    """Two partial results built with different settings were asked to merge."""


_GDAL_NOISE = ("sqlite3_prepare", "It might help to specify the correct driver")


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name when it has none), without a final period.

    GDAL joins several messages with ``"; "``; repeated ones, SQL statements and the hint
    about driver prefixes are left out.
    """
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    parts: list[str] = []
    for part in text.splitlines()[0].split("; "):
        part = part.strip().rstrip(".")
        if part and part not in parts:
            parts.append(part)
    useful = [p for p in parts if not any(noise in p for noise in _GDAL_NOISE)]
    return "; ".join(useful or parts) or type(exc).__name__


__all__ = ["EvalInputError", "CRSError", "IncompatibleStatsError", "first_line"]
