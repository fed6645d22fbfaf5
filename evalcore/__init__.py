"""evalcore: exact object-level evaluation of predicted polygons against a reference layer.

The public API is a drop-in for ``agribound.evaluate``: :func:`evaluate`,
:func:`evaluate_frame`, :func:`pixels_per_field` and the constants below.

The API's names are loaded on first use (PEP 562): ``import evalcore.metrics.base``
or any other submodule runs this file first, and must not load the whole engine with
it. ``evalcore.evaluate(...)`` and ``from evalcore import evaluate`` work as before.
"""

from evalcore._version import __version__
from evalcore.config import (
    BOOTSTRAP_CONFIDENCE_LEVEL,
    BOUNDARY_MAX_SAMPLES,
    BOUNDARY_SAMPLE_SPACING_M,
    MATCHING_METHODS,
)
from evalcore.errors import CRSError, EvalInputError, IncompatibleStatsError

_API_NAMES = ("evaluate", "evaluate_frame", "evaluate_tables", "EvaluationTables", "pixels_per_field")

__all__ = [
    *_API_NAMES,
    "MATCHING_METHODS",
    "BOUNDARY_SAMPLE_SPACING_M",
    "BOUNDARY_MAX_SAMPLES",
    "BOOTSTRAP_CONFIDENCE_LEVEL",
    "CRSError",
    "EvalInputError",
    "IncompatibleStatsError",
    "__version__",
]


def __getattr__(name: str) -> object:
    if name in _API_NAMES:
        # Imported here, not above, so that importing a submodule does not load the API.
        from evalcore import api

        return getattr(api, name)
    raise AttributeError(f"module 'evalcore' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API_NAMES))
