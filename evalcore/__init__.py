"""evalcore: exact object-level evaluation of predicted polygons against a reference layer.

The public API is a drop-in for ``agribound.evaluate``: :func:`evaluate`,
:func:`evaluate_frame`, :func:`pixels_per_field` and the constants below.
"""

from evalcore.api import EvaluationTables, evaluate, evaluate_frame, evaluate_tables, pixels_per_field
from evalcore.config import (
    BOOTSTRAP_CONFIDENCE_LEVEL,
    BOUNDARY_MAX_SAMPLES,
    BOUNDARY_SAMPLE_SPACING_M,
    MATCHING_METHODS,
)
from evalcore.errors import CRSError, EvalInputError, IncompatibleStatsError

__version__ = "0.1.0"

__all__ = [
    "evaluate",
    "evaluate_frame",
    "evaluate_tables",
    "EvaluationTables",
    "pixels_per_field",
    "MATCHING_METHODS",
    "BOUNDARY_SAMPLE_SPACING_M",
    "BOUNDARY_MAX_SAMPLES",
    "BOOTSTRAP_CONFIDENCE_LEVEL",
    "CRSError",
    "EvalInputError",
    "IncompatibleStatsError",
    "__version__",
]
