"""Test configuration: hypothesis profiles, and tests/ on sys.path for ``tests.common``.

Profiles
--------
``ci`` (default): 50 examples per property, no deadline (the first call of a numba
kernel compiles). ``slow``: 10 000 examples; select it with
``HYPOTHESIS_PROFILE=slow``.

Tests marked ``slow`` (pyproject.toml) are skipped unless ``EVALCORE_SLOW=1``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

settings.register_profile(
    "ci",
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "slow",
    max_examples=10_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("EVALCORE_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: set EVALCORE_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
