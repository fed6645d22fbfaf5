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


__all__ = ["EvalInputError", "CRSError", "IncompatibleStatsError"]
