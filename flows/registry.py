"""The run registry: one row per evaluation, in SQLite by default or any SQLAlchemy database.

Two tables (SQLAlchemy Core, created when missing): ``claims``, one row per layer a
flow run has taken (its primary key makes the claim atomic, so two runs started
together never evaluate the same layer twice), and ``runs``:

=================  ============  ===================================================
column             type          meaning
=================  ============  ===================================================
id                 integer       primary key, increasing: the order runs started in
product            text          product name (one series of acquisitions)
pred_path          text          prediction layer as given (path or fsspec URL)
pred_sha256        varchar(64)   content SHA-256 of the prediction layer
ref_path           text          reference layer as given
ref_sha256         varchar(64)   content SHA-256 of the reference layer
params_hash        varchar(64)   SHA-256 of the metric parameters (canonical JSON)
parameters         text          the evaluation's EvaluateParams (metric options included), JSON
summary            text          headline metrics, intervals and counts, JSON (null
                                 until the run succeeds)
output_dir         text          the run directory
status             varchar(16)   ``running``, ``succeeded`` or ``failed``
error              text          why a failed run failed (the subflow's state message)
started            varchar(32)   UTC, ISO 8601 (``2025-06-01T12:00:00+00:00``)
finished           varchar(32)   UTC, ISO 8601; null while running
evalcore_version   varchar(32)   version of the engine that computed the numbers
flow_run_id        varchar(36)   Prefect flow run of the evaluation, if any
=================  ============  ===================================================

A layer counts as evaluated when a *succeeded* run with the same
``(pred_sha256, ref_sha256, params_hash)`` exists, so a new reference or new metric
options evaluate it again. Timestamps are text so that they sort and compare the same
way in every database. Parameters and summaries are JSON text, never pickles.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from evalcore.writers import to_jsonable
from evalcore.report import HEADLINE_KEYS

__all__ = [
    "Registry",
    "RunRecord",
    "open_registry",
    "default_registry_url",
    "run_summary",
    "compare_summaries",
    "STATUSES",
    "SUMMARY_COUNTS",
]

STATUSES: tuple[str, ...] = ("running", "succeeded", "failed")

#: Counts kept in a run's summary next to the headline metrics.
SUMMARY_COUNTS: tuple[str, ...] = (
    "count_reference",
    "count_predicted",
    "count_tp",
    "count_fp",
    "count_fn",
    "count_reference_dropped",
    "count_predicted_dropped",
)

_metadata = sa.MetaData()
runs_table = sa.Table(
    "runs",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("product", sa.Text, nullable=False),
    sa.Column("pred_path", sa.Text, nullable=False),
    sa.Column("pred_sha256", sa.String(64), nullable=False),
    sa.Column("ref_path", sa.Text, nullable=False),
    sa.Column("ref_sha256", sa.String(64), nullable=False),
    sa.Column("params_hash", sa.String(64), nullable=False),
    sa.Column("parameters", sa.Text, nullable=False),
    sa.Column("summary", sa.Text, nullable=True),
    sa.Column("output_dir", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("started", sa.String(32), nullable=False),
    sa.Column("finished", sa.String(32), nullable=True),
    sa.Column("evalcore_version", sa.String(32), nullable=False),
    sa.Column("flow_run_id", sa.String(36), nullable=True),
    sa.CheckConstraint("status IN ('running', 'succeeded', 'failed')", name="runs_status_valid"),
    sa.Index("ix_runs_key", "pred_sha256", "ref_sha256", "params_hash", "status"),
    sa.Index("ix_runs_product", "product", "id"),
)

claims_table = sa.Table(
    "claims",
    _metadata,
    # One row per (prediction, reference, metric parameters) being or having been
    # evaluated: the primary key makes the claim atomic in every database.
    sa.Column("key", sa.String(200), primary_key=True),
    sa.Column("owner", sa.String(64), nullable=False),
    sa.Column("claimed", sa.String(32), nullable=False),
)


def utc_now() -> str:
    """The current UTC time as ISO 8601 text, to the second."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def default_registry_url(output_root: str | Path) -> str:
    """``sqlite:///<output_root>/registry.sqlite`` (absolute path)."""
    return f"sqlite:///{(Path(output_root).resolve() / 'registry.sqlite').as_posix()}"


def _dumps(obj: object) -> str:
    return json.dumps(to_jsonable(obj), sort_keys=True, allow_nan=False)


def _check_status(status: str) -> str:
    if status not in STATUSES:
        raise ValueError(f"status must be one of {list(STATUSES)}, but got {status!r}.")
    return status


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One row of ``runs``, with ``parameters`` and ``summary`` decoded from JSON."""

    id: int
    product: str
    pred_path: str
    pred_sha256: str
    ref_path: str
    ref_sha256: str
    params_hash: str
    parameters: dict
    summary: dict | None
    output_dir: str
    status: str
    error: str | None
    started: str
    finished: str | None
    evalcore_version: str
    flow_run_id: str | None

    @classmethod
    def _from_row(cls, row: Mapping) -> RunRecord:
        values = dict(row)
        values["parameters"] = json.loads(values["parameters"])
        values["summary"] = json.loads(values["summary"]) if values["summary"] is not None else None
        return cls(**values)


@dataclass(frozen=True)
class Registry:
    """The run registry on one SQLAlchemy engine; open it with :func:`open_registry`.

    Every method is one short transaction, so several flows can share a registry
    (SQLite serialises the writers; PostgreSQL for teams with many writers).
    """

    engine: sa.Engine

    def close(self) -> None:
        """Release the engine's connections."""
        self.engine.dispose()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def has_run(self, pred_sha256: str, ref_sha256: str, params_hash: str) -> bool:
        """Whether a succeeded run of this prediction, reference and metric parameters exists."""
        t = runs_table
        query = (
            sa.select(t.c.id)
            .where(t.c.pred_sha256 == pred_sha256, t.c.ref_sha256 == ref_sha256, t.c.params_hash == params_hash, t.c.status == "succeeded")
            .limit(1)
        )
        with self.engine.connect() as conn:
            return conn.execute(query).first() is not None

    def claim(self, pred_sha256: str, ref_sha256: str, params_hash: str, owner: str) -> bool:
        """Claim the evaluation of a layer; False when another run holds (or finished) it.

        Atomic: the claim is an insert under a primary key, so of two flow runs started
        together exactly one gets each layer. A failed run releases its claim
        (:meth:`release`) so that the next run retries the layer.
        """
        key = f"{pred_sha256}:{ref_sha256}:{params_hash}"
        try:
            with self.engine.begin() as conn:
                conn.execute(sa.insert(claims_table).values(key=key, owner=owner, claimed=utc_now()))
        except sa.exc.IntegrityError:
            return False
        return True

    def release(self, pred_sha256: str, ref_sha256: str, params_hash: str, owner: str) -> None:
        """Give a claim back (only its owner can)."""
        key = f"{pred_sha256}:{ref_sha256}:{params_hash}"
        with self.engine.begin() as conn:
            conn.execute(sa.delete(claims_table).where(claims_table.c.key == key, claims_table.c.owner == owner))

    def record(
        self,
        *,
        product: str,
        pred_path: str,
        pred_sha256: str,
        ref_path: str,
        ref_sha256: str,
        params_hash: str,
        parameters: Mapping,
        output_dir: str,
        evalcore_version: str,
        status: str = "running",
        summary: Mapping | None = None,
        error: str | None = None,
        started: str | None = None,
        finished: str | None = None,
        flow_run_id: str | None = None,
    ) -> int:
        """Insert a run and return its id.

        The usual life of a row is ``record(status="running")`` before the evaluation
        and :meth:`finish` after it, so a run that dies midway stays visible as
        ``running``; a complete run can also be recorded in one call.
        """
        values = {
            "product": product,
            "pred_path": str(pred_path),
            "pred_sha256": pred_sha256,
            "ref_path": str(ref_path),
            "ref_sha256": ref_sha256,
            "params_hash": params_hash,
            "parameters": _dumps(parameters),
            "summary": _dumps(summary) if summary is not None else None,
            "output_dir": str(output_dir),
            "status": _check_status(status),
            "error": error,
            "started": started or utc_now(),
            "finished": finished if finished or status == "running" else utc_now(),
            "evalcore_version": evalcore_version,
            "flow_run_id": flow_run_id,
        }
        with self.engine.begin() as conn:
            result = conn.execute(sa.insert(runs_table).values(**values))
            return int(result.inserted_primary_key[0])

    def finish(
        self,
        run_id: int,
        *,
        status: str,
        summary: Mapping | None = None,
        error: str | None = None,
        flow_run_id: str | None = None,
        finished: str | None = None,
    ) -> RunRecord:
        """Set the outcome of run ``run_id`` (``succeeded`` or ``failed``) and return the row."""
        if _check_status(status) == "running":
            raise ValueError(f"finish() sets an outcome, 'succeeded' or 'failed', but got {status!r}.")
        values = {"status": status, "finished": finished or utc_now(), "error": error}
        if summary is not None:
            values["summary"] = _dumps(summary)
        if flow_run_id is not None:
            values["flow_run_id"] = flow_run_id
        with self.engine.begin() as conn:
            updated = conn.execute(sa.update(runs_table).where(runs_table.c.id == run_id).values(**values)).rowcount
        if updated != 1:
            raise KeyError(f"No run with id {run_id} in the registry {self.engine.url!r}.")
        return self.get(run_id)

    def get(self, run_id: int) -> RunRecord:
        """The run with this id (KeyError when there is none)."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(runs_table).where(runs_table.c.id == run_id)).mappings().first()
        if row is None:
            raise KeyError(f"No run with id {run_id} in the registry {self.engine.url!r}.")
        return RunRecord._from_row(row)

    def previous(self, product: str, before_id: int) -> RunRecord | None:
        """The latest succeeded run of ``product`` with an id below ``before_id``, or None."""
        t = runs_table
        query = (
            sa.select(t)
            .where(t.c.product == product, t.c.status == "succeeded", t.c.id < before_id)
            .order_by(t.c.id.desc())
            .limit(1)
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return RunRecord._from_row(row) if row is not None else None

    def runs(self, product: str | None = None, *, status: str | None = None) -> list[RunRecord]:
        """All runs (of one product, with one status), oldest first."""
        t = runs_table
        query = sa.select(t).order_by(t.c.id)
        if product is not None:
            query = query.where(t.c.product == product)
        if status is not None:
            query = query.where(t.c.status == _check_status(status))
        with self.engine.connect() as conn:
            return [RunRecord._from_row(row) for row in conn.execute(query).mappings()]


def open_registry(url: str) -> Registry:
    """Open (and create, if missing) the run registry at a SQLAlchemy URL.

    Parameters
    ----------
    url : str
        ``sqlite:///path/to/registry.sqlite``, ``postgresql+psycopg://user@host/db``, ...
        A SQLite file's directory is created when missing.

    Examples
    --------
    >>> with open_registry("sqlite://") as registry:  # in memory
    ...     registry.runs()
    []
    """
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(parsed)
    if parsed.get_backend_name() == "sqlite":
        # Concurrent flow runs share the file: wait for a writer instead of failing at once.
        @sa.event.listens_for(engine, "connect")
        def _busy_timeout(dbapi_connection, _record):  # noqa: ANN001
            dbapi_connection.execute("PRAGMA busy_timeout = 30000")

    for attempt in range(5):
        try:
            _metadata.create_all(engine, checkfirst=True)
            break
        except sa.exc.OperationalError as exc:
            # Two processes opening a new registry at once both find no table; the slower
            # CREATE fails with "already exists": check again (the tables are there now).
            if "already exists" not in str(exc) or attempt == 4:
                raise
    return Registry(engine)


def _finite(value: object) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def run_summary(metrics: Mapping) -> dict:
    """The part of a metrics dict the registry keeps and comparisons use.

    Returns
    -------
    dict
        ``metrics``: every headline metric (:data:`evalcore.report.HEADLINE_KEYS`:
        precision, recall, F1, IoU, area-weighted, segmentation, distance and boundary
        metrics), None where the run has none (boundary metrics without a tolerance) or
        it is NaN; ``ci``: their 95 % bootstrap intervals ``[lower, upper]``
        where the run had a bootstrap; ``counts``: :data:`SUMMARY_COUNTS`;
        ``bootstrap``: resamples, seed and confidence level, or None.
    """
    boot = metrics.get("bootstrap") or None
    cis = (boot or {}).get("ci") or {}
    values = {key: _finite(metrics.get(key)) for key, _ in HEADLINE_KEYS}
    ci = {}
    for key in values:
        bounds = cis.get(key)
        if bounds is not None:
            ci[key] = [_finite(b) for b in bounds]
    return {
        "metrics": values,
        "ci": ci,
        "counts": {key: metrics[key] for key in SUMMARY_COUNTS if key in metrics},
        "bootstrap": (
            {k: boot.get(k) for k in ("n_resamples", "seed", "confidence_level", "partition_size_m")} if boot else None
        ),
    }


def _overlap(a: list | None, b: list | None) -> bool | None:
    if not a or not b or any(v is None for v in (*a, *b)):
        return None
    return bool(a[0] <= b[1] and b[0] <= a[1])


def _run_info(run: RunRecord) -> dict:
    return {
        "run_id": run.id,
        "pred_path": run.pred_path,
        "pred_sha256": run.pred_sha256,
        "ref_sha256": run.ref_sha256,
        "params_hash": run.params_hash,
        "output_dir": run.output_dir,
        "finished": run.finished,
    }


def compare_summaries(current: RunRecord, previous: RunRecord | None) -> dict:
    """Metric by metric: previous, current, difference and whether the 95 % intervals overlap.

    ``difference`` is current minus previous (None when either is missing);
    ``intervals_overlap`` is None when either run has no interval for the metric.
    With no previous run every ``previous`` is None. ``same_reference`` and
    ``same_parameters`` say whether the two runs are comparable as they stand.
    """
    cur = current.summary or {}
    prev = (previous.summary or {}) if previous is not None else {}
    cur_values, prev_values = cur.get("metrics", {}), prev.get("metrics", {})
    table = {}
    for key, _ in HEADLINE_KEYS:
        if key not in cur_values and key not in prev_values:
            continue
        c, p = cur_values.get(key), prev_values.get(key)
        c_ci, p_ci = cur.get("ci", {}).get(key), prev.get("ci", {}).get(key)
        table[key] = {
            "previous": p,
            "current": c,
            "difference": c - p if c is not None and p is not None else None,
            "previous_ci": p_ci,
            "current_ci": c_ci,
            "intervals_overlap": _overlap(p_ci, c_ci),
        }
    return {
        "product": current.product,
        "current": _run_info(current),
        "previous": _run_info(previous) if previous is not None else None,
        "same_reference": previous.ref_sha256 == current.ref_sha256 if previous is not None else None,
        "same_parameters": previous.params_hash == current.params_hash if previous is not None else None,
        "confidence_level": ((cur.get("bootstrap") or {}).get("confidence_level")),
        "metrics": table,
    }
