"""Array aliases used in signatures across the engine."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

GeomArray = NDArray[np.object_]
"""A 1-D array of shapely geometries (``None`` for missing)."""
IdArray = NDArray[np.int64]
"""A 1-D array of integer positions or ids."""
F64Array = NDArray[np.float64]
"""A float64 array."""
BoolArray = NDArray[np.bool_]

__all__ = ["GeomArray", "IdArray", "F64Array", "BoolArray"]
