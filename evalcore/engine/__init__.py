"""The phases of one evaluation, as pure functions from frozen inputs to frozen outputs.

ARCHITECTURE.md's four phases, here without any cluster code, one module each:

1. prepare and key: :func:`evalcore.prepare.prepare_layer` (per input chunk);
2. pairs (:mod:`~evalcore.engine.pairing`): :func:`compute_pairs`, for the reference
   fields and predictions a partition owns, against the other layer's polygons near them
   (its own and a halo);
3. resolve (:mod:`~evalcore.engine.resolve`): :func:`resolve_run` on every pair of the
   run (:func:`concat_pair_results`): the global matching, the families' global per-pair
   values and what every prediction adds to which reference row; then :func:`route` says
   which partition gets which pairs and rows;
4. sums (:mod:`~evalcore.engine.sums`): :func:`summarize_partition` per partition, and
   :func:`merge_partitions`.

The per-field and per-prediction tables are drawn from the phases' columns by
:mod:`~evalcore.engine.tables`.

The single-process :func:`evalcore.evaluate` runs the same functions with phase 2 once
over everything; the distributed runner (:mod:`evalcore.distributed.runner`) runs
phases 2 and 4 per partition on Dask workers. Both route with :func:`route` and merge in
partition-key order, so they give the same bits.

The project imports each name from its phase's module. The names are also handed on from
here on first use (PEP 562), so importing one phase does not load the others.
"""

from __future__ import annotations

import importlib

_MODULE_OF = {
    **dict.fromkeys(
        ("PAIR_ARRAYS", "REF_ARRAYS", "PRED_ARRAYS", "partition_keys", "PairResults", "compute_pairs",
         "concat_pair_results"),
        "pairing",
    ),
    **dict.fromkeys(("Resolved", "resolve_run", "run_draws", "Routing", "route"), "resolve"),
    **dict.fromkeys(("RefRows", "PartitionSummary", "summarize_partition", "MergedSums", "merge_partitions"), "sums"),
    **dict.fromkeys(("field_table", "prediction_table"), "tables"),
}

__all__ = list(_MODULE_OF)


def __getattr__(name: str) -> object:
    if name in _MODULE_OF:
        return getattr(importlib.import_module(f"evalcore.engine.{_MODULE_OF[name]}"), name)
    raise AttributeError(f"module 'evalcore.engine' has no attribute {name!r}")
