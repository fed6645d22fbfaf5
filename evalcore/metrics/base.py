"""The metric family interface: what a family adds to each reference row, how it
merges, and how its numbers come out of the merged sums.

A family (one module of :mod:`evalcore.metrics`) declares:

* ``options``: its parameters (:class:`Option`), from which the library's
  validation, the CLI flags and the flow parameters are generated, and
  ``check_options(values)``: its checks across options (each checked alone first);
* ``columns(options)``: the per-reference quantity columns it sums (they merge by
  addition across partitions, strata, size classes and bootstrap replicates);
* ``reference_columns(ctx)``: those columns for the reference fields of one partition
  (on the workers, from :class:`RefContext`);
* ``prediction_columns(ctx)``: what each prediction adds to a reference row, by target
  (its home reference, or the homes it has at other IoU thresholds), computed once
  centrally from :class:`PredContext`; predictions without a target form the
  unassigned row;
* ``pair_values(ctx)``: optional per-pair values that need every pair of a prediction
  (a global step next to the matching), sliced to the partitions like the matching;
* ``gathered(ctx)``: optional per-field values whose order statistics the family
  reports, and ``order_statistics(options)``: which (median, quantiles, min, max;
  :mod:`evalcore.selection`); each partition keeps them sorted and the merge selects
  the wanted elements without gathering them. ``maxima``: columns that merge by ``max``
  instead of ``+``;
* ``finalize(s, options)``: its metrics as ``(value, defined)`` from column sums,
  element-wise on arrays of bootstrap replicates;
* ``summarize(group)``: the keys it writes into a group's entry of the summary, with
  the empty-denominator conventions applied (:func:`convention`), and ``run_keys``: the
  settings it reports once, at the top level;
* ``unit_columns(options)`` and ``unit_values(s, options)``: which of its sums a
  reporting tile or AOI carries, and its columns of the per-unit tables from them
  (``unit_interval_keys``: those with per-AOI intervals).
* how it is shown (:mod:`evalcore.present`): ``shown``, its keys' labels with units,
  directions and whether ``compare`` pairs them; ``summary_lines(metrics)``, its lines
  of the terminal summary; ``report_lines(metrics)``, its section of ``report.md``;
  ``section``, the title of the section of ``report.html`` built from ``shown`` (None:
  none, or a bespoke one).

Nothing else in the engine knows a family's columns or keys: the quantity table, the
sums, the bootstrap, the arrays codec and the output layout loop over the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from evalcore._typing import F64Array, IdArray
from evalcore.rates import F1_HARMONIC, detection_rates
from evalcore.present import Row, Shown, row_text, with_interval

__all__ = [
    "Option",
    "MetricFamily",
    "RefContext",
    "PredContext",
    "PairContext",
    "GlobalContext",
    "GroupView",
    "Value",
    "Shown",
    "ratio",
    "harmonic",
    "count_rates",
    "convention",
    "RATE",
    "ZERO",
    "MEAN",
    "NULL",
]

Value = tuple[F64Array, F64Array]
"""A metric as ``(value, defined)``; ``value`` is NaN where ``defined`` is False."""

RATE = "rate"
"""Section 4 rate: 0.0 when undefined, 1.0 when both layers are empty."""
ZERO = "zero"
"""Section 4 legacy key (agribound 0.1.x): 0.0 when undefined."""
MEAN = "mean"
"""Section 4 mean or distance: NaN when undefined."""
NULL = "null"
"""Section 6 value: NaN (null in JSON) when undefined, never 0 or 1."""


@dataclass(frozen=True, slots=True)
class Option:
    """One evaluation parameter, declared once.

    Attributes
    ----------
    name : str
        Keyword argument of :func:`evalcore.evaluate` and flow parameter name.
    default : object
    help : str
        One line for ``--help`` and the flow parameter's description, with the unit.
    check : callable(name, value) -> value
        Validates and normalises a value; raises ValueError naming the option.
    parse : callable(text) -> value
        Turns the command-line text into a value (before ``check``).
    flag : str, optional
        Command-line flag (default ``--`` + name with dashes).
    cli_default : object, optional
        Default shown and used on the command line when it differs in unit from
        ``default`` (``--partition-km 50`` for ``partition_size_m=50000``).
    to_option : callable, optional
        Converts the command-line value to the library value (km to m).
    annotation : object
        Type of the flow parameter (pydantic).
    choices : tuple, optional
    """

    name: str
    default: object
    help: str
    check: Callable[[str, object], object]
    parse: Callable[[str], object] = str
    flag: str | None = None
    cli_default: object = None
    to_option: Callable[[object], object] | None = None
    annotation: object = object
    choices: tuple | None = None

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")


@dataclass(frozen=True, slots=True)
class PairContext:
    """Every candidate pair of the run, for a family's global per-pair step.

    Attributes
    ----------
    pairs : evalcore.pairtable.PairTable
    ref_area_m2, pred_area_m2 : ndarray of float64
        Area of each pair's reference field and prediction, m².
    base_match : ndarray of bool
        The matching at the lowest threshold any family needs (under ``max_weight``:
        at the main threshold, see :class:`evalcore.matching.Resolution`).
    options : EvalOptions
    ref_groups : mapping of str to ndarray of int64
        Per grouping of the run (``"per_stratum"``, ``"per_size_class"``; absent when the
        run has none), each pair's reference group code (-1: in no group): what a
        per-prediction count needs to count a prediction once per group.
    """

    pairs: object
    ref_area_m2: F64Array
    pred_area_m2: F64Array
    base_match: np.ndarray
    options: object
    ref_groups: Mapping[str, IdArray] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RefContext:
    """What a family may read to build the quantity columns of one partition's fields.

    Attributes
    ----------
    fields : pandas.DataFrame
        Per-field facts indexed by reference position (increasing): the matching
        outcome, IoU, overlaps, areas, distances (see :mod:`evalcore.quantities`).
    pairs : evalcore.pairtable.PairTable
        Every candidate pair of these fields.
    row_of_pair : ndarray of int64
        Row of ``fields`` of each pair's reference field.
    ref_area_m2, pred_area_m2 : ndarray of float64
        Per pair, m².
    pair_values : mapping of str to ndarray
        The global matching's and the families' per-pair values, for these pairs
        (``is_match``, ``is_eligible``, ``base_match`` and each family's own).
    options : EvalOptions
    """

    fields: pd.DataFrame
    pairs: object
    row_of_pair: IdArray
    ref_area_m2: F64Array
    pred_area_m2: F64Array
    pair_values: Mapping[str, np.ndarray]
    options: object

    @property
    def n(self) -> int:
        return len(self.fields)


@dataclass(frozen=True, slots=True)
class PredContext:
    """Every prediction of the run after the global matching (computed centrally).

    Attributes
    ----------
    preds : pandas.DataFrame
        Indexed by prediction position (increasing): ``matched``, ``n_eligible_ref``,
        ``home_ref_pos`` (-1: none), ``area_m2``, ``perimeter_m``,
        ``boundary_within_tolerance_m``, ``base_home_ref_pos`` (the matched home at
        the base threshold, -1: none), ``base_home_iou`` and ``overlap_ref_pos`` (the
        largest-overlap reference, -1: no candidate pair).
    pairs : evalcore.pairtable.PairTable
    pair_values : mapping of str to ndarray
    options : EvalOptions
    """

    preds: pd.DataFrame
    pairs: object
    pair_values: Mapping[str, np.ndarray]
    options: object

    def target(self, name: str) -> IdArray:
        """Reference position each prediction adds to under a target name (-1: none)."""
        column = {"home": "home_ref_pos", "base_home": "base_home_ref_pos", "overlap": "overlap_ref_pos"}[name]
        return self.preds[column].to_numpy(np.int64)


@dataclass(frozen=True, slots=True)
class GlobalContext:
    """Every prediction and pair of the run, for a family's run-level values (AP).

    Attributes
    ----------
    preds : pandas.DataFrame
        As in :class:`PredContext` (with ``score`` when a score column is given).
    pairs : evalcore.pairtable.PairTable
    ref_pos : ndarray of int64
        Every reference position of the run, increasing.
    home_ref_row : ndarray of int64
        Row in ``ref_pos`` of each prediction's home (-1: none).
    options : EvalOptions
    replicate_weights : callable, optional
        Returns an iterator over the bootstrap replicates of ``(weight of every
        prediction, number of reference fields)``: the predictions weighed as their
        home reference (field draws, homeless ones 1) or their unit (block draws) is
        drawn; None without a bootstrap.
    ref_strata : ndarray of object, optional
        Stratum name (str) of each reference row of ``ref_pos``, None where it is
        missing; None for a run without strata (or a caller that does not give them).
    pair_values : mapping of str to ndarray, optional
        The global matching's per-pair values (``is_match``, ``is_eligible``, ...), in
        the order of ``pairs``.
    ref_area_of_pair : ndarray of float64, optional
        Area of each pair's reference field, m².
    ref_class : ndarray of object, optional
        Class (str, None where null) of each reference row of ``ref_pos`` (SPEC 6.10).
    replicate_draws : callable, optional
        Like ``replicate_weights`` but yielding, per replicate, ``(weight of every
        prediction, weight of every reference row of ref_pos)``; None without a bootstrap.
    strata_names : tuple of str, optional
        The run's strata (:attr:`RunPlan.strata_names`), sorted: a resolve of some
        components sees only some of them in ``ref_strata``.
    """

    preds: pd.DataFrame
    pairs: object
    ref_pos: IdArray
    home_ref_row: IdArray
    options: object
    replicate_weights: Callable[[], object] | None = None
    ref_strata: np.ndarray | None = None
    pair_values: Mapping[str, np.ndarray] | None = None
    ref_area_of_pair: F64Array | None = None
    ref_class: np.ndarray | None = None
    replicate_draws: Callable[[], object] | None = None
    strata_names: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class GroupView:
    """One group (overall, a stratum, a size class) as a family sees it when summarising.

    Attributes
    ----------
    sums : mapping of str to float
        Column sums of the group's quantity rows.
    maxima : mapping of str to float
        Max-merged columns (NaN when no row has a value).
    order : mapping of str to mapping
        The group's order statistics of each gathered column: ``{column: {statistic:
        value}}`` as declared by the families' ``order_statistics`` (NaN without values).
    values : mapping of str to Value
        Every family's finalised metrics for the group.
    ci, n_undefined : mapping
        Bootstrap intervals ``[lower, upper]`` and undefined-resample counts of the
        interval keys (empty without a bootstrap).
    both_empty : bool
        Both layers are empty (section 4: rates are 1.0).
    empty_group : bool
        A size class or stratum without reference fields (every metric NaN).
    options : EvalOptions
    grouping : str, optional
        The grouping the group belongs to (``"per_stratum"``, ``"per_size_class"``);
        None for the overall group.
    """

    sums: Mapping[str, float]
    maxima: Mapping[str, float]
    order: Mapping[str, Mapping[object, float]]
    values: Mapping[str, Value]
    ci: Mapping[str, list[float]] = field(default_factory=dict)
    n_undefined: Mapping[str, int] = field(default_factory=dict)
    both_empty: bool = False
    empty_group: bool = False
    options: object = None
    grouping: str | None = None

    def count(self, column: str) -> int:
        return int(round(float(self.sums[column])))

    def point(self, key: str, kind: str) -> float:
        """A finalised metric with the reporting convention of its kind applied."""
        value, defined = self.values[key]
        return convention(float(value), bool(defined), kind, both_empty=self.both_empty, empty_group=self.empty_group)

    def statistics(self, column: str) -> Mapping[object, float]:
        """The order statistics of a gathered column in this group (empty when not gathered)."""
        return self.order.get(column, {})

    def median(self, column: str) -> float:
        """:func:`numpy.median` of a gathered column's non-NaN values in this group (NaN: none)."""
        return float(self.statistics(column).get("median", float("nan")))


class MetricFamily:
    """Base of every metric family; the defaults describe a family that adds nothing."""

    name: str = ""
    options: tuple[Option, ...] = ()
    maxima: tuple[str, ...] = ()
    shown: tuple[Shown, ...] = ()
    """How the family's keys are shown (:class:`evalcore.present.Shown`), in output order."""
    section: str | None = None
    """Title of the section of ``report.html`` built from :attr:`shown` (None: none or a bespoke one)."""

    def enabled(self, options: object) -> bool:
        return True

    def check_options(self, values: Mapping[str, object]) -> None:
        """Checks across options (each checked alone first); raises ValueError naming the option."""

    def columns(self, options: object) -> tuple[str, ...]:
        return ()

    def lowest_threshold(self, options: object) -> float | None:
        """The lowest IoU threshold at which the family needs the matching (None: the main one)."""
        return None

    def pair_values(self, ctx: PairContext) -> dict[str, np.ndarray]:
        return {}

    def reference_columns(self, ctx: RefContext) -> dict[str, F64Array]:
        return {}

    def prediction_columns(self, ctx: PredContext) -> dict[str, dict[str, F64Array]]:
        """``{target name: {column: values per prediction}}``; targets as in :meth:`PredContext.target`."""
        return {}

    def gathered(self, ctx: RefContext) -> dict[str, F64Array]:
        """Per-field values (NaN: none) of the columns of :meth:`order_statistics`."""
        return {}

    def order_statistics(self, options: object) -> dict[str, tuple[object, ...]]:
        """``{gathered column: statistics}``, each ``"count"``, ``"min"``, ``"max"``, ``"median"``
        (:func:`numpy.median`) or a probability (:func:`numpy.quantile`'s default), found
        exactly for every group at the merge (:func:`evalcore.selection.select`)."""
        return {}

    def maximum_values(self, ctx: RefContext) -> dict[str, F64Array]:
        """Per-field values of the :attr:`maxima` columns (NaN: none)."""
        return {}

    def finalize(self, s: Mapping[str, F64Array], options: object) -> dict[str, Value]:
        return {}

    def interval_keys(self, options: object) -> tuple[str, ...]:
        """Finalised keys that get bootstrap intervals."""
        return ()

    def block_interval_keys(self, options: object) -> tuple[str, ...]:
        """The interval keys published in the group's ``ci`` block (SPEC 5.1)."""
        return self.interval_keys(options)

    def replicate_columns(self, options: object) -> tuple[str, ...]:
        """The family's :meth:`columns` whose bootstrap replicate sums :meth:`finalize` reads
        for the interval keys (of any family; the compared keys are among them).

        Only these columns are summed per replicate (1000 sums per column, group and
        partition): a column no interval reads is summed once. The default, every column
        of a family with interval keys, is always right; a family narrows it to skip
        work. ``tests/unit/test_replicate_columns.py`` checks that the intervals do not
        read a column left out.
        """
        return self.columns(options) if self.interval_keys(options) else ()

    def summarize(self, group: GroupView) -> dict[str, object]:
        return {}

    def unit_columns(self, options: object) -> tuple[str, ...]:
        """The summed columns a reporting tile or AOI carries (SPEC 6.3).

        A unit is one more grouping of the quantity rows (a field with its home
        predictions; a prediction without a home in its own unit), so a unit's sums are
        these columns' sums over its rows. Columns of other families a family reads in
        :meth:`unit_values` are declared by their own family.
        """
        return ()

    def unit_values(self, s: Mapping[str, F64Array], options: object) -> dict[str, F64Array]:
        """The family's columns of the per-tile and per-AOI tables from the units' sums
        (:meth:`unit_columns` of every enabled family), element-wise on arrays over units
        (or units x bootstrap replicates); NaN where undefined."""
        return {}

    def unit_interval_keys(self, options: object) -> tuple[str, ...]:
        """Keys of :meth:`unit_values` that get per-AOI bootstrap intervals; the replicates
        then carry the family's :meth:`unit_columns`."""
        return ()

    def run_keys(self, options: object) -> dict[str, object]:
        """Keys written once, at the top level only (the settings the family ran with)."""
        return {}

    def summary_lines(self, metrics: Mapping[str, object]) -> list[str]:
        """The family's lines of the terminal summary.

        By default one line of the :attr:`shown` keys that have a ``short`` label and are
        in ``metrics``: ``name: label value [lower, upper]  ...``.
        """
        parts = [f"{s.short} {with_interval(metrics, s.key, s.digits)}" for s in self.shown if s.short is not None and s.key in metrics]
        parts += [f"{r.label.lower()} {row_text(r)}" for r in self.headline_rows(metrics)]
        return [f"{self.name}: " + "  ".join(parts)] if parts else []

    def headline_rows(self, metrics: Mapping[str, object]) -> list[Row]:
        """Headline rows beyond the :attr:`shown` keys: values nested in a block of ``metrics``.

        ``report.md`` and ``report.html`` put them in their headline table after the
        declared keys; the default :meth:`summary_lines` puts them on the family's line.
        """
        return []

    def report_lines(self, metrics: Mapping[str, object]) -> list[str]:
        """The family's section of ``report.md`` beyond its headline rows (Markdown lines)."""
        return []

    def global_values(self, ctx: GlobalContext) -> dict[str, object]:
        """Run-level values that are not sums (AP), computed once centrally after the matching.

        Returns ``{"keys": top-level keys, "ci": intervals, "n_undefined": counts,
        "tables": {name: DataFrame}}`` (empty: nothing).
        """
        return {}

    def run_level_on_workers(self, options: object) -> bool:
        """Whether the workers compute this family's run-level values (:meth:`run_level_rows`
        on each resolve of some components, merged by the distributed run) instead of the
        client from every prediction and pair (:meth:`global_values`)."""
        return False

    def run_level_rows(self, ctx: GlobalContext) -> dict[str, np.ndarray] | None:
        """What a resolve of some components hands on for the run-level values, as plain arrays
        (with :meth:`run_level_on_workers`); None: nothing."""
        return None


def ratio(num: F64Array, den: F64Array) -> Value:
    """``num / den``, defined where ``den != 0``.

    Examples
    --------
    >>> ratio(1.0, 4.0)
    (array(0.25), array(True))
    >>> ratio(np.array([1.0, 1.0]), np.array([0.0, 2.0]))[0].tolist()
    [nan, 0.5]
    """
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    defined = den != 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(defined, num / np.where(defined, den, 1.0), np.nan)
    return value, defined


def harmonic(p: Value, r: Value) -> Value:
    """Harmonic mean of two rates; 0 when both are 0, defined when both are."""
    (pv, pd_), (rv, rd) = p, r
    defined = pd_ & rd
    pv0 = np.where(defined, pv, 0.0)
    rv0 = np.where(defined, rv, 0.0)
    s = pv0 + rv0
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(s > 0.0, 2.0 * pv0 * rv0 / np.where(s > 0.0, s, 1.0), 0.0)
    return np.where(defined, value, np.nan), defined


def count_rates(tp: F64Array, fp: F64Array, fn: F64Array) -> tuple[Value, Value, Value]:
    """Section 4's precision, recall and F1 of counts (:func:`evalcore.rates.detection_rates`,
    ``F1_HARMONIC``: 0 when both rates are 0), as :data:`Value` pairs."""
    return tuple((v, ~np.isnan(v)) for v in detection_rates(tp, fp, fn, f1=F1_HARMONIC))


def convention(value: float, defined: bool, kind: str, *, both_empty: bool, empty_group: bool) -> float:
    """The reporting value of a metric (SPEC section 4 and section 6).

    Examples
    --------
    >>> convention(float("nan"), False, RATE, both_empty=False, empty_group=False)
    0.0
    >>> convention(float("nan"), False, RATE, both_empty=True, empty_group=False)
    1.0
    >>> convention(float("nan"), False, NULL, both_empty=True, empty_group=False)
    nan
    >>> convention(0.5, True, RATE, both_empty=False, empty_group=True)
    nan
    """
    if empty_group:
        return float("nan")
    if defined:
        return float(value)
    if kind == RATE:
        return 1.0 if both_empty else 0.0
    if kind == ZERO:
        return 0.0
    return float("nan")

