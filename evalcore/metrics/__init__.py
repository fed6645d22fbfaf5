"""The metric families: the interface (:mod:`~evalcore.metrics.base`), one module per
family, and the registry that lists them (:mod:`~evalcore.metrics.registry`).

Importing this package, or the interface, loads no family: the registry's names
(``FAMILIES``, ``registered``, ``enabled_families`` ...) are imported from
:mod:`evalcore.metrics.registry`.
"""
