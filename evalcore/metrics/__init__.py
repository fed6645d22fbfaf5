"""The metric families: the interface (:mod:`~evalcore.metrics.base`), one module per
family, and the registry that lists them (:mod:`~evalcore.metrics.registry`).

Importing this package, or the interface, loads no family. The registry's names are
handed on from here on first use (PEP 562) for callers that name the package
(``from evalcore.metrics import registered``); the project imports them from
:mod:`evalcore.metrics.registry`.
"""

from __future__ import annotations

_REGISTRY_NAMES = (
    "FAMILIES",
    "MetricFamily",
    "registered",
    "enabled_families",
    "family_options",
    "quantity_columns",
    "max_columns",
    "finalize_all",
    "interval_keys",
    "unit_columns",
    "unit_replicate_columns",
)

__all__ = list(_REGISTRY_NAMES)


def __getattr__(name: str) -> object:
    if name in _REGISTRY_NAMES:
        # Imported on use: the registry imports every family, which the interface must not.
        from evalcore.metrics import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'evalcore.metrics' has no attribute {name!r}")
