"""The merge's order statistics on a cluster: the selection's rounds as worker tasks.

The medians and quantiles are found by :func:`evalcore.selection.select` without
gathering the per-field values: each partition's sums task left its gathered values
sorted per group and column beside its sums (``sums/<key>.values.arrays``); every round,
the client writes its queries to ``select/`` and one task per :data:`SELECT_BATCH` partitions
(:func:`evalcore.distributed.tasks.select_tasks`) answers all of them, for every group and column at once, from their files, and the
client narrows the intervals from the answers (a few counts and samples per
partition and query). Without a client the same tasks run in this process, one
partition's file at a time.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Sequence

from evalcore.bootstrap import PartitionKey
from evalcore.distributed import storage
from evalcore.distributed import workdir as wd
from evalcore.distributed.reliability import PartitionMissingError
from evalcore.distributed.tasks import SelectFailed, select_tasks
from evalcore.distributed.values import RunSetup
from evalcore.errors import EvalInputError
from evalcore.metrics.registry import order_statistics
from evalcore.options import RunPlan
from evalcore.selection import Answers, Queries, Statistic, select

__all__ = ["partition_rounds", "select_on_partitions"]

logger = logging.getLogger(__name__)


def partition_rounds(
    setup: RunSetup, keys: Sequence[PartitionKey], columns: tuple[str, ...], n_groups: int, client: object = None
) -> Callable[[Queries], list[Answers]]:
    """The ``ask`` of :func:`evalcore.selection.select` over the partitions' sorted values.

    Parameters
    ----------
    setup : RunSetup
    keys : sequence of PartitionKey
        The partitions holding reference fields, whose sums outputs are in ``sums/``.
    columns : tuple of str
    n_groups : int
        The gathered columns and groups the series are numbered by (checked by each task).
    client : distributed.Client, optional
        Run each round as a task per partition on the cluster (else in this process).

    Returns
    -------
    callable
        Queries to the partitions' answers, in ``keys`` order.
    """
    paths = [setup.workdir / "sums" / f"{storage.key_name(key)}.arrays" for key in keys]
    missing = [key for key, path in zip(keys, paths) if not wd.exists(storage.values_path(path))]
    if missing:
        raise PartitionMissingError(
            f"partition {storage.key_name(missing[0])} has no sorted values beside its sums in {setup.workdir / 'sums'}"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "") + "; rerun to recompute it."
        )
    call = uuid.uuid4().hex[:8]  # task keys unique to this selection, whatever ran before
    rounds = [0]

    def ask(queries: Queries) -> list[Answers]:
        rounds[0] += 1
        logger.info("select: round %d, %d queries to %d partitions", rounds[0], len(queries), len(paths))
        # The round's queries travel through the work directory, once: in the task graph
        # they would sit in the scheduler once per partition, and scattered data dies
        # with the worker holding it.
        asked = storage.write_queries(setup.workdir / "select" / f"{call}-{rounds[0]}.arrays", queries)
        try:
            if client is None:  # every partition in turn, in this process
                return _batch_answers(list(keys), lambda: select_tasks([str(p) for p in paths], str(asked), columns, n_groups))
            batches = [range(a, min(a + SELECT_BATCH, len(keys))) for a in range(0, len(keys), SELECT_BATCH)]
            futures = [
                client.submit(select_tasks, [str(paths[i]) for i in batch], str(asked), columns, n_groups,
                              key=setup.task_key("select", call, rounds[0], *keys[batch[0]]), retries=2)
                for batch in batches
            ]
            try:
                return [answers for batch, future in zip(batches, futures) for answers in _batch_answers([keys[i] for i in batch], future.result)]
            finally:
                for future in futures:
                    future.release()
        finally:
            wd.remove(asked)

    return ask


SELECT_BATCH = 8
"""Partitions answered by one select task (:func:`evalcore.distributed.tasks.select_tasks`)."""


def _batch_answers(keys: list[PartitionKey], result: Callable[[], list[Answers]]) -> list[Answers]:
    """A batch's answers; a failure that names no partition (a lost task) names the batch's."""
    try:
        answers = result()
    except (EvalInputError, PartitionMissingError, SelectFailed):
        raise
    except Exception as exc:
        names = ", ".join(storage.key_name(k) for k in keys)
        raise RuntimeError(f"select failed for the partitions {names}: {type(exc).__name__}: {exc}") from exc
    if len(answers) != len(keys):
        raise RuntimeError(f"select: {len(answers)} answers for the partitions {', '.join(storage.key_name(k) for k in keys)}")
    return answers


def select_on_partitions(
    setup: RunSetup, keys: Sequence[PartitionKey], plan: RunPlan, client: object = None
) -> Callable[[dict[int, tuple[Statistic, ...]]], dict]:
    """The ``select`` of :func:`evalcore.engine.sums.merge_partitions` for a run's partitions."""
    columns = tuple(order_statistics(setup.options))

    def run(wanted: dict[int, tuple[Statistic, ...]]) -> dict:
        try:
            return select(wanted, partition_rounds(setup, keys, columns, plan.n_groups, client))
        finally:
            with contextlib.suppress(OSError):  # every round removed its queries; another selection may be running
                (setup.workdir / "select").rmdir()

    return run
