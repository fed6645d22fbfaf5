"""Exact order statistics of values spread over partitions, found by counting.

The medians and quantiles of the summary (SPEC 4 and 6.11) are order statistics of
per-field values: not sums, so they do not merge by addition. Instead of gathering every
field's value on the client, each partition keeps its values sorted, per group and
column (:class:`SortedValues`, written to its own work-directory file on a cluster), and
the client finds each wanted element of the global sorted order in rounds
(:func:`select`):

1. every partition answers a query ``(series, lo, hi]`` with the number of its values
   at or below ``lo``, the number inside the interval, and either all of those (when
   few) or a few evenly spaced ones with their ranks inside its slice
   (:func:`answer`);
2. the samples bound the global count at or below any sampled value (a partition's
   count lies between the ranks of its samples on either side), so the client narrows
   the interval to the sampled values whose bounds bracket the wanted rank;
3. once every partition sends all its values inside the interval, the wanted element
   is picked from those.

The client holds ``partitions x samples`` numbers per query and round; with ``m``
samples an interval loses roughly a factor ``m / 2`` of its values each round. The
elements found are exactly those of the whole sorted column, so the statistics are
computed from them with numpy's own formulas (:func:`statistic_value`) and equal
:func:`numpy.median` and :func:`numpy.quantile` on the gathered values to the last bit,
whatever the partitioning (:func:`statistics_of` is that direct computation).

Statistics are named ``"count"``, ``"min"``, ``"max"``, ``"median"`` (:func:`numpy.median`:
the mean of the two middle elements for an even count) or given as a probability ``p``
in [0, 1] (:func:`numpy.quantile`'s default, linear interpolation). NaN values are
left out; without values every statistic but ``count`` is NaN.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from evalcore._typing import F64Array, IdArray

__all__ = [
    "Statistic",
    "SortedValues",
    "Queries",
    "Answers",
    "answer",
    "select",
    "select_local",
    "statistic_ranks",
    "statistic_value",
    "statistics_of",
]

Statistic = str | float
"""``"count"``, ``"min"``, ``"max"``, ``"median"`` or a quantile's probability."""

SAMPLES = 32
"""Evenly spaced values a partition sends per query while its interval holds many."""

MAX_ROUNDS = 200
"""A guard: every round narrows each interval (or asks for all its values), so this is never reached."""


@dataclass(frozen=True, slots=True)
class SortedValues:
    """One partition's non-NaN values of each column, sorted within each group.

    Series ``s = c * n_groups + g`` (column ``c`` of :attr:`columns`, group ``g`` of the
    flat group axis, 0 the overall group) occupies ``values[offsets[s]:offsets[s + 1]]``,
    in ascending order.

    Attributes
    ----------
    columns : tuple of str
    n_groups : int
    offsets : ndarray of int64, shape (len(columns) * n_groups + 1,)
    values : ndarray of float64
        In the columns' units.
    """

    columns: tuple[str, ...]
    n_groups: int
    offsets: IdArray
    values: F64Array

    def series(self, s: int) -> F64Array:
        """The sorted values of series ``s``."""
        return self.values[self.offsets[s]:self.offsets[s + 1]]

    @staticmethod
    def of_columns(columns: Mapping[str, F64Array], flat_groups: IdArray, n_groups: int) -> SortedValues:
        """Sort per-field columns into their groups.

        Parameters
        ----------
        columns : mapping of str to ndarray of float64
            Per-field values (NaN: none), in the order the series are numbered.
        flat_groups : ndarray of int64, shape (n, n_groupings)
            Each field's index on the flat group axis in every grouping (-1: none),
            :meth:`evalcore.options.RunPlan.flat_groups`; every field is also in group 0.
        n_groups : int
        """
        flat_groups = np.asarray(flat_groups, dtype=np.int64)
        if flat_groups.ndim == 1:
            flat_groups = flat_groups[:, None]
        pieces: list[F64Array] = []
        for values in columns.values():
            v = _without_negative_zero(values)
            keep = ~np.isnan(v)
            per_group: list[F64Array] = [np.sort(v[keep])] + [np.empty(0)] * (n_groups - 1)
            for codes in flat_groups.T:
                rows = keep & (codes > 0)
                # Sorted by group, then value: each group's slice comes out in order.
                order = np.lexsort((v[rows], codes[rows]))
                grouped, sorted_codes = v[rows][order], codes[rows][order]
                bounds = np.searchsorted(sorted_codes, np.arange(n_groups + 1))
                for g in np.unique(sorted_codes):
                    per_group[g] = grouped[bounds[g]:bounds[g + 1]]
            pieces.extend(per_group)
        offsets = np.zeros(len(pieces) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(p) for p in pieces])
        values = np.concatenate(pieces) if pieces else np.empty(0)
        return SortedValues(tuple(columns), int(n_groups), offsets, values)


@dataclass(frozen=True, slots=True)
class Queries:
    """One round's questions, the same for every partition.

    Query ``i`` asks about series ``series[i]`` in the interval ``(lo[i], hi[i]]``; an
    interval without ``has_lo`` starts before the smallest value, one without
    ``has_hi`` ends after the largest.

    Attributes
    ----------
    series : ndarray of int64
    lo, hi : ndarray of float64
    has_lo, has_hi, force : ndarray of bool
        ``force``: send every value inside, however many.
    samples : int
        Values sent for an interval holding more than ``limit``.
    limit : int
    """

    series: IdArray
    lo: F64Array
    hi: F64Array
    has_lo: np.ndarray
    has_hi: np.ndarray
    force: np.ndarray
    samples: int = SAMPLES
    limit: int = 2 * SAMPLES

    def __len__(self) -> int:
        return len(self.series)


@dataclass(frozen=True, slots=True)
class Answers:
    """One partition's answers to :class:`Queries`.

    Attributes
    ----------
    below : ndarray of int64
        Per query, the partition's values at or below ``lo`` (0 without ``has_lo``).
    inside : ndarray of int64
        Per query, its values in the interval.
    offsets : ndarray of int64
        Query ``i``'s sent values are ``values[offsets[i]:offsets[i + 1]]``.
    values : ndarray of float64
        Sorted; all the values inside, or evenly spaced ones (the first and last inside
        always among them).
    ranks : ndarray of int64
        Each sent value's rank among the partition's values inside (0-based).
    """

    below: IdArray
    inside: IdArray
    offsets: IdArray
    values: F64Array
    ranks: IdArray


def answer(sorted_values: SortedValues, queries: Queries) -> Answers:
    """A partition's :class:`Answers` to one round's :class:`Queries` (on the worker)."""
    n = len(queries)
    below = np.zeros(n, dtype=np.int64)
    inside = np.zeros(n, dtype=np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    values: list[F64Array] = []
    ranks: list[IdArray] = []
    m = max(2, int(queries.samples))
    for i in range(n):
        a = sorted_values.series(int(queries.series[i]))
        start = int(np.searchsorted(a, queries.lo[i], side="right")) if queries.has_lo[i] else 0
        stop = int(np.searchsorted(a, queries.hi[i], side="right")) if queries.has_hi[i] else len(a)
        stop = max(stop, start)
        below[i], inside[i] = start, stop - start
        k = stop - start
        if k == 0:
            r = np.empty(0, dtype=np.int64)
        elif queries.force[i] or k <= queries.limit:
            r = np.arange(k, dtype=np.int64)
        else:
            # Evenly spaced ranks, the first and the last included (they bound the slice).
            r = np.unique(np.arange(m, dtype=np.int64) * (k - 1) // (m - 1))
        values.append(a[start + r])
        ranks.append(r)
        offsets[i + 1] = offsets[i] + len(r)
    return Answers(
        below, inside, offsets,
        np.concatenate(values) if values else np.empty(0),
        np.concatenate(ranks) if ranks else np.empty(0, dtype=np.int64),
    )


# ---------------------------------------------------------------- the statistics' ranks


def _quantile_positions(n: int, p: float) -> tuple[int, int, np.ndarray]:
    """The two ranks and the weight of :func:`numpy.quantile`'s linear method, with its
    own arithmetic (virtual index ``(n - 1) p``; at or past the last rank both are the
    last, with weight ``(n - 1) p + 1``)."""
    virtual = (n - 1) * np.asarray([p], dtype=np.float64)
    previous = np.floor(virtual)
    following = previous + 1
    if virtual[0] >= n - 1:
        previous[:] = following[:] = -1
    if virtual[0] < 0:
        previous[:] = following[:] = 0
    prev_i, next_i = previous.astype(np.intp), following.astype(np.intp)
    gamma = np.asarray(virtual - prev_i, dtype=np.float64)
    return int(prev_i[0]) % n, int(next_i[0]) % n, gamma


def _lerp(a: float, b: float, gamma: np.ndarray) -> float:
    """:func:`numpy.quantile`'s interpolation, with the same operations in the same order."""
    a_, b_ = np.asarray([a], dtype=np.float64), np.asarray([b], dtype=np.float64)
    diff = b_ - a_
    out = np.add(a_, diff * gamma)
    np.subtract(b_, diff * (1 - gamma), out=out, where=gamma >= 0.5)
    return float(out[0])


def statistic_ranks(statistic: Statistic, n: int) -> tuple[int, ...]:
    """The 0-based ranks of the sorted values ``statistic`` needs among ``n`` values.

    Examples
    --------
    >>> statistic_ranks("median", 4), statistic_ranks("median", 5), statistic_ranks(0.25, 5)
    ((1, 2), (2,), (1, 2))
    """
    if n == 0 or statistic == "count":
        return ()
    if statistic == "min":
        return (0,)
    if statistic == "max":
        return (n - 1,)
    if statistic == "median":
        return (n // 2 - 1, n // 2) if n % 2 == 0 else ((n - 1) // 2,)
    if isinstance(statistic, str):
        raise ValueError(f"unknown statistic {statistic!r}: use 'count', 'min', 'max', 'median' or a probability")
    a, b, _ = _quantile_positions(n, float(statistic))
    return (a, b)


def statistic_value(statistic: Statistic, n: int, at: Mapping[int, float]) -> float | int:
    """``statistic`` of ``n`` values from the elements of their sorted order it needs.

    ``at`` maps the ranks of :func:`statistic_ranks` to the elements; the result is what
    numpy gives on the whole array (NaN without values; ``count`` is ``n``).
    """
    if statistic == "count":
        return int(n)
    if n == 0:
        return float("nan")
    ranks = statistic_ranks(statistic, n)
    if statistic in ("min", "max"):
        return float(at[ranks[0]])
    if statistic == "median":
        # numpy.median takes the mean of the middle one or two elements.
        return float(np.mean(np.asarray([at[r] for r in ranks], dtype=np.float64)))
    _, _, gamma = _quantile_positions(n, float(statistic))
    return _lerp(at[ranks[0]], at[ranks[1]], gamma)


def _without_negative_zero(values: object) -> F64Array:
    """The values as float64 with -0.0 made +0.0 (adding +0.0 does it, NaN stays NaN).

    The two zeros compare equal, so which of them a sort puts first, and so which one a
    minimum or an order statistic returns, would depend on how the values were split
    over partitions; with one zero the answer is the same bits whatever the split.
    """
    return np.asarray(values, dtype=np.float64) + 0.0


def statistics_of(values: np.ndarray, statistics: Iterable[Statistic]) -> dict[Statistic, float | int]:
    """The statistics of values held whole, with numpy directly (NaN values left out).

    Examples
    --------
    >>> statistics_of(np.array([3.0, np.nan, 1.0, 2.0, 10.0]), ("count", "median", 0.5, "max"))
    {'count': 4, 'median': 2.5, 0.5: 2.5, 'max': 10.0}
    """
    v = _without_negative_zero(values)
    v = v[~np.isnan(v)]
    out: dict[Statistic, float | int] = {}
    for stat in statistics:
        if stat == "count":
            out[stat] = int(len(v))
        elif not len(v):
            out[stat] = float("nan")
        elif stat == "min":
            out[stat] = float(v.min())
        elif stat == "max":
            out[stat] = float(v.max())
        elif stat == "median":
            out[stat] = float(np.median(v))
        else:
            out[stat] = float(np.quantile(v, [float(stat)])[0])
    return out


# ---------------------------------------------------------------- the client's rounds


@dataclass(slots=True)
class _Target:
    """One wanted rank of one series and the interval known to hold it."""

    series: int
    rank: int
    lo: float = -np.inf
    hi: float = np.inf
    has_lo: bool = False
    has_hi: bool = False
    force: bool = False
    value: float | None = None


def _narrow(target: _Target, parts: list[tuple[int, int, F64Array, IdArray]]) -> None:
    """Narrow ``target``'s interval from every partition's answer to its query, or set its value.

    ``parts`` holds, per partition, ``(below, inside, values, ranks)``.
    """
    c_lo = sum(p[0] for p in parts)
    n_in = sum(p[1] for p in parts)
    r = target.rank - c_lo  # the wanted element's rank inside the interval
    if not 0 <= r < n_in:
        raise RuntimeError(f"selection lost rank {target.rank} of series {target.series}: {c_lo} below, {n_in} inside")
    held = [p for p in parts if p[1] > 0]
    if all(len(p[2]) == p[1] for p in held):
        target.value = float(np.sort(np.concatenate([p[2] for p in held]))[r])
        return
    # Global count at or below x lies in [L(x), U(x)]: in a partition, between the rank
    # after its last sample <= x and the rank of its first sample > x.
    values = np.concatenate([p[2] for p in held])
    d_lower = np.concatenate([np.diff(p[3], prepend=-1) for p in held])
    d_upper = np.concatenate([np.diff(np.append(p[3], p[1])) for p in held])
    order = np.argsort(values, kind="stable")
    values = values[order]
    distinct, first = np.unique(values, return_index=True)
    last = np.append(first[1:], len(values)) - 1
    lower = np.cumsum(d_lower[order])[last]
    upper = np.cumsum(d_upper[order])[last]  # every partition's first rank is 0
    before = (target.lo, target.hi, target.has_lo, target.has_hi)
    j = int(np.searchsorted(upper, r, side="right"))  # the distinct values with U <= r: at most r below
    if j > 0:
        target.lo, target.has_lo = float(distinct[j - 1]), True
    j = int(np.searchsorted(lower, r + 1, side="left"))  # the first with L >= r + 1: the element is at or below
    if j < len(distinct):
        target.hi, target.has_hi = float(distinct[j]), True
    if target.has_hi and target.hi == distinct[0]:
        # Above lo, at most hi, and nothing inside is smaller than hi: it is hi (ties).
        target.value = float(distinct[0])
        return
    # No progress (coarse samples over many ties): ask for every value inside next time.
    target.force = before == (target.lo, target.hi, target.has_lo, target.has_hi)


def select(
    wanted: Mapping[int, Sequence[Statistic]],
    ask: Callable[[Queries], Sequence[Answers]],
    *,
    samples: int = SAMPLES,
    limit: int | None = None,
) -> dict[int, dict[Statistic, float | int]]:
    """The exact statistics of series spread over partitions, by rounds of :func:`answer`.

    Parameters
    ----------
    wanted : mapping of int to sequence of Statistic
        Per series (numbered as in :class:`SortedValues`), the statistics wanted.
    ask : callable
        Sends one round's :class:`Queries` to every partition and returns their
        :class:`Answers` (in any fixed order): on a cluster a task per partition, in one
        process :func:`answer` on each partition's values (:func:`select_local`).
    samples : int
        Values a partition sends per query while its interval holds many (at least 4).
    limit : int, optional
        A partition sends all its values inside an interval holding at most this many
        (default ``2 * samples``; at least ``samples``).

    Returns
    -------
    dict of int to dict
        Per series of ``wanted``, each statistic's value (NaN when the series has no
        value; ``count`` is an int).
    """
    series = np.asarray(sorted(wanted), dtype=np.int64)
    if not len(series):
        return {}
    # Fewer samples, or a limit below them, narrow too slowly to be useful.
    samples = max(int(samples), 4)
    limit = max(2 * samples if limit is None else int(limit), samples)
    n = len(series)
    first = ask(Queries(series, np.zeros(n), np.zeros(n), np.zeros(n, bool), np.zeros(n, bool), np.zeros(n, bool), samples, limit))
    counts = {int(s): int(sum(a.inside[i] for a in first)) for i, s in enumerate(series)}
    # Every target of a series starts from the first round's unbounded answer.
    targets: list[_Target] = []
    for i, s in enumerate(series.tolist()):
        ranks = sorted({r for stat in wanted[s] for r in statistic_ranks(stat, counts[s])})
        parts = [(int(a.below[i]), int(a.inside[i]), a.values[a.offsets[i]:a.offsets[i + 1]], a.ranks[a.offsets[i]:a.offsets[i + 1]]) for a in first]
        for r in ranks:
            target = _Target(s, r)
            _narrow(target, parts)
            targets.append(target)
    for _ in range(MAX_ROUNDS):
        active = [t for t in targets if t.value is None]
        if not active:
            break
        # Targets with the same interval share one query.
        keys: dict[tuple, int] = {}
        for t in active:
            keys.setdefault((t.series, t.has_lo, t.lo, t.has_hi, t.hi, t.force), len(keys))
        rows = list(keys)
        queries = Queries(
            np.asarray([k[0] for k in rows], dtype=np.int64),
            np.asarray([k[2] if k[1] else 0.0 for k in rows], dtype=np.float64),
            np.asarray([k[4] if k[3] else 0.0 for k in rows], dtype=np.float64),
            np.asarray([k[1] for k in rows], dtype=bool),
            np.asarray([k[3] for k in rows], dtype=bool),
            np.asarray([k[5] for k in rows], dtype=bool),
            samples,
            limit,
        )
        answers = ask(queries)
        for t in active:
            i = keys[(t.series, t.has_lo, t.lo, t.has_hi, t.hi, t.force)]
            _narrow(t, [(int(a.below[i]), int(a.inside[i]), a.values[a.offsets[i]:a.offsets[i + 1]], a.ranks[a.offsets[i]:a.offsets[i + 1]])
                        for a in answers])
    else:
        raise RuntimeError(f"the selection did not finish in {MAX_ROUNDS} rounds")
    found: dict[int, dict[int, float]] = {}
    for t in targets:
        found.setdefault(t.series, {})[t.rank] = t.value
    return {int(s): {stat: statistic_value(stat, counts[int(s)], found.get(int(s), {})) for stat in wanted[int(s)]} for s in series}


def select_local(
    wanted: Mapping[int, Sequence[Statistic]], partitions: Sequence[SortedValues], **kwargs: object
) -> dict[int, dict[Statistic, float | int]]:
    """:func:`select` over partitions held in this process."""
    return select(wanted, lambda queries: [answer(p, queries) for p in partitions], **kwargs)
