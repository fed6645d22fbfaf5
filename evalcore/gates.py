"""Acceptance gates: rules on a run's metrics and the content of ``acceptance-gates.json`` (SPEC 6.8).

A gates file is YAML::

    gates:
      - id: G-RECALL-STRATA            # unique, required
        metric: per_stratum.*.recall   # a path into the metrics; * expands over groups
        op: ">="                       # one of >=, >, <=, < (quoted: a bare > starts a YAML block)
        threshold: 0.6
        min_support: 30                # optional: fewer reference fields -> not_evaluable
        below_support: report          # optional: report (default) or block
        use: ci_lower                  # optional: value (default), ci_lower or ci_upper

Paths
-----
A path is a dotted list of keys into the metrics dict (``recall``,
``per_stratum.*.f1``, ``tiles.worst.f1.value``, ``aois.*.recall``). A whole segment
``*`` (at most one per path) expands over the keys of the mapping it reaches (or the
indices of a list), and each key it expands to is gated on its own, as the rule's
``group``. A segment that is a number indexes a list; keys holding dots (a stratum
``St. Louis``) are found by joining segments. Under ``aois`` and ``tiles``, ``*`` and
a unit key that is not a key of the block itself refer to the per-unit entries
(``aois.*.recall`` is ``aois.per_aoi.*.recall``). ``metrics.json`` holds no per-tile
entries (they are in the tile layer): ``evalcore gate`` and the flow add them from the
run's ``tiles.parquet`` (:func:`evalcore.evidence.gate_metrics`), so ``tiles.*.f1``
gates every tile; without them ``tiles.*`` is ``not_evaluable``.

A path no run can hold (its first segment no top-level key of any ``metrics.json``, its
last no key at all: ``recal``) is a mistake in the file, refused by :func:`load_gates`
(:func:`check_metric_paths`, naming the closest path); a path that only this run lacks
is ``not_evaluable``.

Outcome of a rule
-----------------
Each rule, and each group a ``*`` expands to, answers exactly one of ``pass``,
``fail`` and ``not_evaluable``. A ``review.*`` rule (the review statistics of
SPEC 6.12, from the run's ``review/review.json``) is ``"unreviewed"`` while the review
sample has no imported decisions, never ``pass``. The other reasons of
``not_evaluable``, checked in this order: ``"no metric at this path"`` (also a ``*`` that
expands to nothing), ``"value is null"`` (a null on the way), ``"support N below the
minimum M"`` (``"support unknown; the minimum is M"`` when the metric's entry states
none), ``"interval asked for but the run has no bootstrap"`` (or, with a bootstrap,
``"the run has no interval for this metric"``), ``"value is null"`` (the value, or the asked interval
bound, null or NaN), ``"value is not a number"`` (a mapping, a text, a boolean) and
``"value is not finite"``. A ``*`` under ``tiles`` says that the metrics have no
per-tile entries.

* The **value** is the number at the path; ``use: ci_lower``/``ci_upper`` takes the
  bound of its interval instead: ``ci[key]`` of the entry holding the metric (groups,
  AOIs), ``bootstrap.ci[key]`` for a top-level metric, or the entry's own ``ci`` pair
  for the ``value`` (or ``delta``) of an entry.
* The **support** of a metric is the ``support`` of the nearest entry on its path
  that has one (a stratum, size class, AOI, worst-group entry), else its
  ``count_reference``; a top-level metric's support is the run's ``count_reference``.
  It is recorded on every rule; only ``min_support`` makes it decide.

Below the support
-----------------
A group (or run) with fewer reference fields than ``min_support`` is not judged: its row
is ``not_evaluable`` with ``"support N below the minimum M"``, its value and support
recorded. What that row does to the decision is the rule's ``below_support``:
``report`` (the default) lists it without blocking (the row's ``blocks`` is false), so a
stratum of 3 fields or an AOI with no field neither fails nor holds up a run whose
well-supported groups pass; ``block`` makes it keep the decision from ``pass``, as any
other ``not_evaluable`` row does. Every other row blocks (``blocks`` true).

The decision is ``pass`` if every blocking row passes and at least one row passed,
``fail`` if a row fails, else ``not_evaluable``; :func:`exit_status` maps it to 0, 1
and 3. A run gated by no rule at all, or whose every row is a reported below-support
row (nothing was judged), is ``not_evaluable``, never a vacuous pass.
Limits
------
A gates file is a short list of rules, and :func:`load_gates` refuses, in one short line
naming it, anything far from that before it builds a value: a file over 1 MiB
(:data:`MAX_FILE_BYTES`), collections nested deeper than 32 levels (:data:`MAX_DEPTH`),
and more than 100,000 values once aliases are expanded (:data:`MAX_VALUES`), which
stops alias ("billion laughs") and merge-key bombs. Anchors and aliases themselves stay
allowed (``min_support: &n 30`` ... ``min_support: *n``). No message quotes more than
a few dozen characters of a value.

The module stays whole at about 800 lines: parsing a rule, finding its path in the
metrics and judging it all follow the one format specified here.
"""

from __future__ import annotations

import difflib
import math
import operator
import re
import reprlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from evalcore.errors import EvalInputError

__all__ = [
    "BELOW_SUPPORT",
    "OPS",
    "STATES",
    "USES",
    "Gate",
    "check_metric_paths",
    "counts_text",
    "evaluate_gates",
    "exit_status",
    "load_gates",
    "parse_gates",
]

OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
}
"""The comparisons a rule may use: ``observed OP threshold``."""

USES: tuple[str, ...] = ("value", "ci_lower", "ci_upper")
"""What of a metric a rule compares: its value or a bound of its bootstrap interval."""

STATES: tuple[str, ...] = ("pass", "fail", "not_evaluable")
"""The answers of a rule, and the decisions of a set of rules."""

BELOW_SUPPORT: tuple[str, ...] = ("report", "block")
"""What a row below a rule's ``min_support`` does to the decision (``report``: nothing)."""

EXIT_STATUS: dict[str, int] = {"pass": 0, "fail": 1, "not_evaluable": 3}
"""Exit status of ``evalcore gate`` / ``evalcore run --gates`` for each decision."""

_RULE_KEYS: tuple[str, ...] = ("id", "metric", "op", "threshold", "min_support", "below_support", "use")

MAX_FILE_BYTES = 1 << 20
"""A gates file larger than this (1 MiB) is refused unread: a few dozen rules take a few kB."""

MAX_DEPTH = 32
"""Deepest nesting of YAML collections a gates file may hold (a rule sits at depth 3)."""

MAX_VALUES = 100_000
"""Most YAML values a gates file may hold once every alias is expanded (the file's own
values included). Anchors and aliases (``&n 30`` ... ``*n``) stay allowed for sharing a
value between rules, but an alias counts as all it stands for, so nested aliases that
expand to billions of values (a "billion laughs" file) are refused before anything is
built from them."""

# Blocks whose ``*`` means their per-unit entries, and what the reason is when there are none.
_UNIT_BLOCKS: dict[str, tuple[str, str]] = {
    "aois": ("per_aoi", "the metrics have no per-AOI entries"),
    "tiles": ("per_tile", "the metrics have no per-tile entries (per-tile values are in the tile layer)"),
}

# The keys a metrics.json can hold, whatever the options (every family enabled, bootstrap,
# strata, size classes, AOIs, tiles, scores, study and training areas), taken from the
# paths of such runs with group names left out; tests/unit/test_gates_newcomer.py checks
# that a real run's paths stay within them. A rule whose first segment is not a top-level
# key, or whose last is no key at all, matches nothing in any run: a typo, refused.
_TOP_KEYS: frozenset[str] = frozenset((
    "annotated_fraction", "aois", "ap50", "ap50_95", "ap75", "ap_interval", "ap_iou_thresholds",
    "ap_per_threshold", "area_error_mean_m2", "area_error_signed_mean_m2", "area_weighted_f1",
    "area_weighted_precision", "area_weighted_recall", "aurc", "best_f1", "best_iou_mean",
    "bootstrap", "boundary_distance_mean_m", "boundary_distance_median_m", "boundary_f1",
    "boundary_precision", "boundary_recall", "boundary_sample_spacing_m",
    "boundary_sample_spacing_max_m", "boundary_tolerance_m", "calibration", "class_column", "classes",
    "count_boundary_errors", "count_fn", "count_fn_localisation", "count_fn_missed", "count_fp",
    "count_fp_background", "count_fp_duplicate", "count_fp_localisation",
    "count_fp_outside_annotation", "count_fp_unassigned", "count_merged_reference", "count_merges",
    "count_predicted", "count_predicted_dropped", "count_predicted_outside_study_area",
    "count_predicted_repaired", "count_ratio", "count_reference", "count_reference_dropped",
    "count_reference_no_stratum", "count_reference_outside_size_classes",
    "count_reference_outside_study_area", "count_reference_repaired", "count_split_predictions",
    "count_splits", "count_tp", "coverage_within_tolerance", "coverage_within_tolerance_area",
    "distance_crs", "equal_area_crs", "f1", "hausdorff_mean_m", "hausdorff_median_m", "iou_mean",
    "iou_sweep", "iou_threshold", "leakage", "majority_fraction", "matching", "median_area_ha",
    "operating_point", "over_segmentation", "oversegmentation_mean", "per_size_class",
    "per_stratum", "pixel", "pr_curve", "precision", "precision_annotated", "precision_touching",
    "pred_class_column", "predicted_area_ha", "recall", "reference_area_ha", "review", "risk_coverage", "score_column",
    "size_class_edges_ha", "strata_column", "study_area", "tiles", "under_segmentation",
    "undersegmentation_mean", "utm_epsg_codes", "warnings", "worst",
    # geometry quality (SPEC 6.11)
    "pq", "sq", "rq", "iou_distribution", "dice_mean", "area_bias", "matched_area_bias",
    "boundary_iou_mean", "boundary_iou_median", "boundary_iou_width_m",
))
_INNER_KEYS: frozenset[str] = frozenset((
    "accuracy", "area_bias_ha", "area_km2", "bins", "brier", "buffer_m", "ci", "ci_n_undefined", "code",
    "confidence_level", "count_aois", "count_aois_with_reference", "count_error", "count_pixels",
    "count_polygons", "count_predicted_audited", "count_predicted_within_buffer",
    "count_reference_audited", "count_reference_within_buffer", "count_tiles",
    "count_tiles_with_reference", "count_tiles_without_reference", "count_tn", "coverage", "curve",
    "completion", "confirmed_share", "confirmed_share_final", "critical_share", "drawn", "effective_n", "fleiss_kappa",
    "kappa", "major_or_worse_share", "n_decisions", "n_disagreements", "per_cell", "raw_agreement", "reviewed",
    "ece", "excluded", "fp_per_km2_reference_free", "fraction", "fraction_aois_with_fn",
    "fraction_predicted", "fraction_tiles_with_fn", "group", "gsd_m", "id_column",
    "insufficient_support", "iou", "lower", "lower_ha", "macro", "mcc", "mean_score", "met",
    "message", "method", "micro", "n", "n_errors", "n_undefined", "n_resamples", "n_retained", "n_units", "operating_points",
    "overall", "p10", "p25", "p50", "p75", "p90", "partition_size_m", "per_aoi", "per_tile",
    "precision_target", "precision_targets", "quantiles", "resampling", "risk", "rule", "score",
    "score_threshold", "seed", "support", "tile_km", "tolerance_px", "training_area_km2",
    "tversky", "tversky_alpha", "tversky_beta", "unit", "upper", "upper_ha", "value",
    # iou_distribution (SPEC 6.11)
    "count", "min", "q05", "q10", "q25", "median", "q75", "q90", "max",
    # classes (SPEC 6.10)
    "columns", "confusion", "count_matched_classified", "count_predicted_unclassified",
    "count_reference_unclassified", "counts", "kappa", "n_classes", "n_classes_ap", "overall_accuracy",
    "per_class", "pq", "precision_correct_class", "producers_accuracy", "recall_correct_class", "rows",
    "rq", "sq", "users_accuracy", "worst_class", "class", "min_support",
))

REASON_MISSING = "no metric at this path"
REASON_NULL = "value is null"
REASON_NO_BOOTSTRAP = "interval asked for but the run has no bootstrap"
REASON_NO_INTERVAL = "the run has no interval for this metric"
REASON_NOT_NUMBER = "value is not a number"
REASON_NOT_FINITE = "value is not finite"
REASON_UNREVIEWED = "unreviewed"
"""A ``review.*`` rule while the run's review sample has no imported decisions (SPEC 6.12):
never ``pass``, whatever the rule asks."""


@dataclass(frozen=True)
class Gate:
    """One rule of a gates file.

    Attributes
    ----------
    id : str
        Unique name of the rule.
    metric : str
        Dotted path into the metrics, with at most one ``*`` segment.
    op : str
        One of ``>=``, ``>``, ``<=``, ``<``; the rule passes when ``observed op threshold``.
    threshold : float
        The expected bound (finite).
    min_support : int or None
        Fewer reference fields than this make the rule ``not_evaluable``; ``None``: no minimum.
    use : str
        ``value``, ``ci_lower`` or ``ci_upper``.
    below_support : str
        ``report`` (a row below ``min_support`` is listed but does not block the
        decision) or ``block`` (it keeps the decision from ``pass``).
    """

    id: str
    metric: str
    op: str
    threshold: float
    min_support: int | None = None
    use: str = "value"
    below_support: str = "report"


# --------------------------------------------------------------------------- loading


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that refuses a key given twice in one mapping (PyYAML keeps the last)."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
        except TypeError:  # an unhashable key; construct_mapping reports it
            break
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {_shown(key)} appears twice in one mapping", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 2, 40, 40
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxdict = _SHOWN.maxset = 3


def _shown(value: object, limit: int = 60) -> str:
    """``repr`` of a value from the file, cut to ``limit`` characters: a message stays one
    short line whatever the file holds (a list of a million items, an alias bomb)."""
    text = " ".join(_SHOWN.repr(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _shown_keys(keys: Sequence[object]) -> str:
    """The first three keys, cut, and how many more."""
    text = ", ".join(_shown(k, 40) for k in keys[:3])
    return text + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")


def _one_line(text: object, limit: int = 160) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _shape_error(text: str) -> str | None:
    """Why the YAML ``text`` is too deep or expands to too many values, or None.

    A pass over the parser's events, before anything is built: the parser keeps its own
    stack (no recursion), the pass stops at the first collection deeper than
    :data:`MAX_DEPTH` (PyYAML's composer would recurse once per level, and its scanner
    slows down with every open bracket), and it adds up the values each alias stands
    for, so an exponential file is refused once it passes :data:`MAX_VALUES`. A syntax
    error is left to the loader, which reports it with its line.
    """
    # anchor -> values it stands for, once its collection is closed; an alias inside the
    # collection it names (a cycle, which PyYAML builds as one object) counts as one.
    expanded: dict[str, int] = {}
    stack: list[list] = []  # [anchor, values so far] of each open collection
    total = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            if len(stack) == MAX_DEPTH:
                return f"nests collections deeper than {MAX_DEPTH} levels"
            stack.append([event.anchor, 1])
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, values = stack.pop()
            if anchor is not None:
                expanded[anchor] = values
        elif isinstance(event, yaml.AliasEvent):
            values = expanded.get(event.anchor, 1)  # an unknown anchor: the loader reports it
        elif isinstance(event, yaml.ScalarEvent):
            values = 1
            if event.anchor is not None:
                expanded[event.anchor] = 1
        else:  # stream and document events
            continue
        if stack:
            stack[-1][1] += values
            values = stack[-1][1]
        else:
            total += values
            values = total
        if values > MAX_VALUES:
            return f"holds more than {MAX_VALUES:,} values once its aliases (*name) are expanded"
    return None


_BARE_OP = re.compile(r"^[ \t-]*op:[ \t]*(>=?[^\n#]*)$", re.MULTILINE)
"""An unquoted ``op: >=`` (or ``>``), which YAML reads as the start of a folded block."""


def load_gates(path: str | Path) -> list[Gate]:
    """Read and check a gates file.

    Parameters
    ----------
    path : str or pathlib.Path
        A YAML file with a top-level ``gates`` list of rules (see the module docstring
        and ``deploy/gates.example.yaml``).

    Returns
    -------
    list of Gate
        The rules in file order.

    Raises
    ------
    EvalInputError
        One short line naming the file, and the rule (by id, else by position) at fault
        (values from the file are cut to a few dozen characters): the file cannot be
        read, is larger than :data:`MAX_FILE_BYTES`, is not YAML, nests deeper than
        :data:`MAX_DEPTH` or holds more than :data:`MAX_VALUES` values once its aliases
        are expanded, it has no ``gates``
        list or an empty one, a
        rule is not a mapping, has no id, an id of another rule, an unknown key, no or a
        bad metric path or one no run can hold, an unknown comparison, a threshold that is not a finite
        number, a bad ``use`` or a ``min_support`` that is not an integer >= 0.
    """
    name = str(path)
    try:
        with open(path, "rb") as handle:
            # One byte more than the limit tells a file over it, whatever stat says (a pipe).
            raw = handle.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise EvalInputError(f"gates file {name!r} is larger than {MAX_FILE_BYTES >> 20} MiB; a gates file holds a few dozen rules.")
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EvalInputError(f"gates file {name!r} cannot be read: {_one_line(exc)}") from None
    try:
        shape = _shape_error(text)
        if shape is not None:
            raise EvalInputError(f"gates file {name!r} {shape}; a gates file is a flat list of rules.")
        # What yaml.load does, with a SafeLoader subclass (no arbitrary objects) named here.
        loader = _UniqueKeyLoader(text)
        try:
            data = loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        bare = _BARE_OP.search(text)
        if bare is not None:  # the raw error ("expected chomping or indentation indicators") says nothing useful
            raise EvalInputError(
                f"gates file {name!r} is not valid YAML at line {text.count(chr(10), 0, bare.start()) + 1}: "
                f"quote the comparison, op: \"{bare.group(1).strip()}\" (a bare > starts a YAML block)."
            ) from None
        raise EvalInputError(f"gates file {name!r} is not valid YAML: {_one_line(exc)}") from None
    gates = parse_gates(data, source=name)
    check_metric_paths(gates, source=name)
    return gates


def _unknown_segment(segments: Sequence[str]) -> tuple[int, frozenset[str]] | None:
    """The index of a segment no run can hold and the keys it should be among, or None.

    Only the first segment (a top-level key) and the last (a metric's name) are checked:
    those between may be group names (a stratum, an AOI, a tile key, keys with dots).
    """
    if segments[0] not in _TOP_KEYS:
        return 0, _TOP_KEYS
    last = segments[-1]
    if len(segments) > 1 and last != "*" and not last.lstrip("-").isdigit() and last not in _TOP_KEYS | _INNER_KEYS:
        return len(segments) - 1, _TOP_KEYS | _INNER_KEYS
    return None


def check_metric_paths(gates: Sequence[Gate], *, source: str = "<gates>") -> None:
    """Refuse a rule whose metric path matches nothing in any run (a typo such as ``recal``).

    A path that exists in the layout but is null or absent in one run (no bootstrap, a
    stratum that this run lacks) is left to :func:`evaluate_gates`, which answers
    ``not_evaluable`` for it.

    Parameters
    ----------
    gates : sequence of Gate
        The rules.
    source : str, default "<gates>"
        The file's name, for the message.

    Raises
    ------
    EvalInputError
        Naming the file, the rule and the closest path that a run can hold.
    """
    for position, gate in enumerate(gates, start=1):
        segments = gate.metric.split(".")
        unknown = _unknown_segment(segments)
        if unknown is None:
            continue
        index, keys = unknown
        closest = difflib.get_close_matches(segments[index], sorted(keys), n=1, cutoff=0.0)
        suggestion = ".".join([*segments[:index], closest[0], *segments[index + 1:]]) if closest else None
        raise EvalInputError(
            f"gates file {source!r}: rule {_shown(gate.id)} (#{position}): metric {_shown(gate.metric)} matches nothing a run can hold"
            + (f"; the closest path is {suggestion!r}." if suggestion else ".")
        )


def parse_gates(data: object, *, source: str = "<gates>") -> list[Gate]:
    """Check the parsed content of a gates file (``{"gates": [rule, ...]}``).

    Parameters
    ----------
    data : object
        What the YAML file holds (a mapping with one key, ``gates``).
    source : str, default "<gates>"
        The file's name, for the messages.

    Returns
    -------
    list of Gate
        The rules in order.

    Raises
    ------
    EvalInputError
        As :func:`load_gates`.
    """
    where = f"gates file {source!r}"
    if not isinstance(data, Mapping) or "gates" not in data:
        got = "is empty" if data is None else f"holds a {type(data).__name__}" if not isinstance(data, Mapping) else "has no 'gates' key"
        raise EvalInputError(f"{where} {got}; it needs a top-level 'gates:' list of rules (see deploy/gates.example.yaml).")
    extra = [k for k in data if k != "gates"]
    if extra:
        raise EvalInputError(f"{where}: unknown top-level key(s) {_shown_keys(extra)}; only 'gates' is allowed.")
    rules = data["gates"]
    if not isinstance(rules, list):
        raise EvalInputError(f"{where}: 'gates' must be a list of rules, but it is a {type(rules).__name__}.")
    if not rules:
        raise EvalInputError(f"{where}: 'gates' holds no rule; a run gated by nothing cannot pass.")
    gates: list[Gate] = []
    seen: dict[str, int] = {}
    for position, rule in enumerate(rules, start=1):
        gate = _parse_rule(rule, position, where)
        if gate.id in seen:
            raise EvalInputError(f"{where}: rule {_shown(gate.id)} (#{position}): the id is also rule #{seen[gate.id]}'s; ids must be unique.")
        seen[gate.id] = position
        gates.append(gate)
    return gates


def _parse_rule(rule: object, position: int, where: str) -> Gate:
    """One rule; every message names the file and the rule."""
    if not isinstance(rule, Mapping):
        raise EvalInputError(f"{where}: rule #{position} is a {type(rule).__name__}, not a mapping of id, metric, op, threshold.")
    rid = rule.get("id")
    if not isinstance(rid, str) or not rid.strip():
        shown = "has no id" if rid is None else f"has the id {_shown(rid)}, not a non-empty text (quote it)"
        raise EvalInputError(f"{where}: rule #{position} {shown}; every rule needs a unique id.")
    label = f"{where}: rule {_shown(rid)} (#{position})"
    unknown = [k for k in rule if k not in _RULE_KEYS]
    if unknown:
        raise EvalInputError(f"{label}: unknown key(s) {_shown_keys(unknown)}; a rule has {', '.join(_RULE_KEYS)}.")
    for key in ("metric", "op", "threshold"):
        if key not in rule or rule[key] is None:
            raise EvalInputError(f"{label} has no {key!r}.")

    metric = rule["metric"]
    if not isinstance(metric, str) or not metric.strip():
        raise EvalInputError(f"{label}: metric {_shown(metric)} is not a path such as 'recall' or 'per_stratum.*.f1'.")
    metric = metric.strip()
    segments = metric.split(".")
    if any(not s.strip() for s in segments):
        raise EvalInputError(f"{label}: metric {_shown(metric)} has an empty segment.")
    if sum(s == "*" for s in segments) > 1:
        raise EvalInputError(f"{label}: metric {_shown(metric)} has more than one '*'; a path expands over one grouping.")
    if any("*" in s and s != "*" for s in segments):
        raise EvalInputError(f"{label}: metric {_shown(metric)}: '*' must be a whole segment (like 'per_stratum.*.f1').")

    op = rule["op"]
    if not isinstance(op, str) or op.strip() not in OPS:
        raise EvalInputError(f"{label}: unknown comparison op {_shown(op)}; use one of {', '.join(OPS)} (quoted in YAML).")
    op = op.strip()

    threshold = _number(rule["threshold"])
    if threshold is None:
        raise EvalInputError(f"{label}: threshold {_shown(rule['threshold'])} is not a finite number.")

    use = rule.get("use", "value")
    if use is None:
        use = "value"
    if not isinstance(use, str) or use not in USES:
        raise EvalInputError(f"{label}: use {_shown(use)} is not one of {', '.join(USES)}.")

    min_support = rule.get("min_support")
    if min_support is not None:
        if isinstance(min_support, bool) or not isinstance(min_support, int) or min_support < 0:
            raise EvalInputError(f"{label}: min_support {_shown(min_support)} is not an integer >= 0.")
        min_support = int(min_support)

    below = rule.get("below_support", "report")
    if below is None:
        below = "report"
    if not isinstance(below, str) or below.strip() not in BELOW_SUPPORT:
        raise EvalInputError(f"{label}: below_support {_shown(below)} is not one of {', '.join(BELOW_SUPPORT)}.")
    if min_support is None and "below_support" in rule:
        raise EvalInputError(f"{label}: below_support is given without min_support; it says what a group below min_support does.")

    return Gate(id=rid.strip(), metric=metric, op=op, threshold=threshold, min_support=min_support, use=use,
                below_support=below.strip())


def _number(value: object) -> float | None:
    """A finite float from a YAML number (or a text such as '1e-3', which YAML 1.1 leaves a string)."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    return _finite(value)


# --------------------------------------------------------------------------- resolving paths


@dataclass(frozen=True)
class _Found:
    """A path resolved to an entry: the value, its key in its container, and the containers from the root."""

    group: str | None
    value: object
    key: str | int | None
    chain: tuple[object, ...]  # root, ..., the container of the value


@dataclass(frozen=True)
class _Missing:
    group: str | None
    reason: str


def _child(node: object, segments: Sequence[str], i: int) -> tuple[object, str | int, int] | None:
    """The child of ``node`` named by ``segments[i:]``: (child, key, segments consumed), or None.

    A mapping key is the segment itself, else the shortest join of the next segments
    (a key holding dots); a list index is a whole-number segment.
    """
    if isinstance(node, Mapping):
        for j in range(i + 1, len(segments) + 1):
            key = ".".join(segments[i:j])
            if key in node:
                return node[key], key, j - i
        seg = segments[i]
        if seg.lstrip("-").isdigit() and int(seg) in node:  # a dict built in Python with integer keys
            return node[int(seg)], int(seg), 1
        return None
    if isinstance(node, (list, tuple)):
        seg = segments[i]
        if seg.isdigit() and int(seg) < len(node):
            return node[int(seg)], int(seg), 1
    return None


def _children(node: object) -> list[tuple[str, object]]:
    if isinstance(node, Mapping):
        return [(str(k), v) for k, v in node.items()]
    if isinstance(node, (list, tuple)):
        return [(str(k), v) for k, v in enumerate(node)]
    return []


def _resolve(metrics: Mapping, segments: Sequence[str]) -> Iterator[_Found | _Missing]:
    """Every (group, entry) a path reaches; a path that reaches nothing yields one :class:`_Missing`."""

    def walk(node: object, i: int, chain: tuple[object, ...], key: str | int | None, group: str | None):
        if i == len(segments):
            yield _Found(group, node, key, chain)
            return
        if node is None or (isinstance(node, float) and math.isnan(node)):
            yield _Missing(group, REASON_NULL)  # a null entry on the way (e.g. no worst group)
            return
        seg = segments[i]
        # Under aois/tiles, '*' and unit keys mean the block's per-unit entries.
        if len(chain) == 1 and key in _UNIT_BLOCKS and isinstance(node, Mapping):
            per_unit, no_units = _UNIT_BLOCKS[key]
            units = node.get(per_unit)
            if seg == "*" and not isinstance(units, Mapping):
                yield _Missing(group, no_units)
                return
            if isinstance(units, Mapping) and (seg == "*" or _child(node, segments, i) is None):
                chain, key, node = (*chain, node), per_unit, units
        if seg == "*":
            last = i + 1 == len(segments)
            children = [(k, v) for k, v in _children(node) if last or isinstance(v, (Mapping, list, tuple)) or v is None]
            if not children:
                yield _Missing(group, REASON_MISSING)
                return
            for k, v in children:
                ckey: str | int = int(k) if isinstance(node, (list, tuple)) else k
                yield from walk(v, i + 1, (*chain, node), ckey, k)
            return
        found = _child(node, segments, i)
        if found is None:
            yield _Missing(group, REASON_MISSING)
            return
        value, ckey, used = found
        yield from walk(value, i + used, (*chain, node), ckey, group)

    yield from walk(metrics, 0, (), None, None)


def _finite(value: object) -> float | None:
    """A float, or None for null, NaN and infinities (JSON-safe)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _is_number(value: object) -> bool:
    if value is None or isinstance(value, (bool, str, Mapping, list, tuple)):
        return False
    try:
        float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return True


def _support(chain: tuple[object, ...]) -> int | None:
    """``support`` of the nearest entry on the path that states one, else its ``count_reference``."""
    for entry in reversed(chain):
        if isinstance(entry, Mapping):
            for key in ("support", "count_reference"):
                if key in entry:
                    number = _finite(entry[key])
                    return None if number is None else int(number)
    return None


def _has_bootstrap(metrics: Mapping) -> bool:
    block = metrics.get("bootstrap")
    return isinstance(block, Mapping) and bool(block.get("n_resamples", 1))


def _interval(metrics: Mapping, found: _Found) -> tuple[object, object] | None:
    """The [lo, hi] interval of the value at ``found``, or None when the run has none for it."""
    container = found.chain[-1] if found.chain else None
    key = found.key
    candidates: list[object] = []
    if isinstance(container, Mapping):
        ci = container.get("ci")
        if isinstance(ci, Mapping) and key in ci:
            candidates.append(ci[key])
        elif isinstance(ci, (list, tuple)) and key in ("value", "delta"):
            candidates.append(ci)
        if container is metrics:
            boot = metrics.get("bootstrap")
            boot_ci = boot.get("ci") if isinstance(boot, Mapping) else None
            if isinstance(boot_ci, Mapping) and key in boot_ci:
                candidates.append(boot_ci[key])
    for pair in candidates:
        if isinstance(pair, (list, tuple)) and len(pair) == 2:
            return pair[0], pair[1]
    return None


# --------------------------------------------------------------------------- evaluating


def _row(gate: Gate, group: str | None, observed: float | None, support: int | None, state: str, reason: str | None,
         blocks: bool = True) -> dict:
    return {
        "id": gate.id,
        "metric": gate.metric,
        "group": group,
        "observed": observed,
        "use": gate.use,
        "op": gate.op,
        "expected": float(gate.threshold),
        "support": support,
        "min_support": gate.min_support,
        "state": state,
        "reason": reason,
        "blocks": blocks,
    }


def _unreviewed(metrics: Mapping) -> bool:
    """No review statistics, or statistics of a sample without decisions."""
    review = metrics.get("review")
    return not isinstance(review, Mapping) or review.get("state") != "reviewed"


def _judge(metrics: Mapping, gate: Gate, entry: _Found | _Missing) -> dict:
    """The row of one rule in one group."""
    if gate.metric.split(".")[0] == "review" and _unreviewed(metrics):
        return _row(gate, entry.group, None, None, "not_evaluable", REASON_UNREVIEWED)
    if isinstance(entry, _Missing):
        return _row(gate, entry.group, None, None, "not_evaluable", entry.reason)
    support = _support(entry.chain)
    raw: object = entry.value
    no_interval = False
    if gate.use != "value" and (raw is None or _is_number(raw)):
        pair = _interval(metrics, entry)
        no_interval = pair is None
        raw = None if pair is None else pair[0] if gate.use == "ci_lower" else pair[1]
    observed = _finite(raw)
    # Support first: a group too small to judge (an AOI with no field has neither a
    # value nor an interval) is reported as such, not as a missing interval.
    if gate.min_support is not None and (support is None or support < gate.min_support):
        if support is None:
            return _row(gate, entry.group, observed, None, "not_evaluable", f"support unknown; the minimum is {gate.min_support}")
        return _row(gate, entry.group, observed, support, "not_evaluable",
                    f"support {support} below the minimum {gate.min_support}", blocks=gate.below_support == "block")
    if no_interval:
        reason = REASON_NO_INTERVAL if _has_bootstrap(metrics) else REASON_NO_BOOTSTRAP
        return _row(gate, entry.group, None, support, "not_evaluable", reason)
    if raw is None or (_is_number(raw) and math.isnan(float(raw))):  # type: ignore[arg-type]
        return _row(gate, entry.group, None, support, "not_evaluable", REASON_NULL)
    if not _is_number(raw):  # a mapping, a list, a text or a boolean
        return _row(gate, entry.group, None, support, "not_evaluable", REASON_NOT_NUMBER)
    if observed is None:  # an infinity, which JSON cannot hold
        return _row(gate, entry.group, None, support, "not_evaluable", REASON_NOT_FINITE)
    state = "pass" if OPS[gate.op](observed, float(gate.threshold)) else "fail"
    return _row(gate, entry.group, observed, support, state, None)


def evaluate_gates(
    metrics: Mapping[str, Any],
    gates: Sequence[Gate],
    *,
    evidence_file: str = "metrics.json",
    evidence_sha256: str | None = None,
) -> dict[str, Any]:
    """Check a run's metrics against rules: the content of ``acceptance-gates.json``.

    Parameters
    ----------
    metrics : mapping
        A metrics dict, as in ``metrics.json`` (JSON nulls) or as :func:`evalcore.evaluate`
        returns it (NaN is taken for null).
    gates : sequence of Gate
        The rules, e.g. from :func:`load_gates`.
    evidence_file : str, default "metrics.json"
        The file the metrics were read from, recorded as evidence.
    evidence_sha256 : str or None
        Its SHA-256 (hex), recorded as evidence.

    Returns
    -------
    dict
        ``{"decision", "rules", "evidence", "counts"}``: ``decision`` is ``pass``,
        ``fail`` or ``not_evaluable``; ``rules`` one entry per rule and per group a
        ``*`` expands to, with ``id``, ``metric``, ``group`` (the key ``*`` expanded
        to, else None), ``observed`` (the compared number, None when there is none),
        ``value`` (the metric's own value: ``observed`` unless ``use`` takes a bound), ``use``, ``op``, ``expected`` (the threshold), ``support``, ``min_support``,
        ``state``, ``reason`` (why not evaluable, else None) and ``blocks`` (false only
        for a row below ``min_support`` of a rule with ``below_support: report``: listed,
        not holding up the decision); ``evidence``
        ``{"file", "sha256"}``; ``counts`` the rows in each state. No NaN: the dict
        passes ``json.dumps(..., allow_nan=False)``.

    Notes
    -----
    Pure: reads nothing and writes nothing. The decision is ``pass`` if every blocking
    row passes and at least one row passed; ``fail`` if any fails; else (a blocking row
    not evaluable, no rule at all, or nothing judged) ``not_evaluable``.
    """
    rows: list[dict] = []
    for gate in gates:
        if not isinstance(gate, Gate):
            raise TypeError(f"evaluate_gates takes Gate rules (see load_gates), not {type(gate).__name__}")
        if gate.op not in OPS:
            raise ValueError(f"rule {gate.id!r}: unknown comparison op {gate.op!r}; use one of {', '.join(OPS)}")
        if gate.use not in USES:
            raise ValueError(f"rule {gate.id!r}: use {gate.use!r} is not one of {', '.join(USES)}")
        segments = gate.metric.split(".")
        for entry in _resolve(metrics, segments):
            row = _judge(metrics, gate, entry)
            # The metric's own value beside the bound a ci_lower/ci_upper rule compared.
            row["value"] = _finite(entry.value) if isinstance(entry, _Found) and _is_number(entry.value) else None
            rows.append(row)
    counts = {state: sum(row["state"] == state for row in rows) for state in STATES}
    blocking = [row for row in rows if row["blocks"]]
    if counts["fail"]:
        decision = "fail"
    elif counts["pass"] and all(row["state"] == "pass" for row in blocking):
        decision = "pass"
    else:
        decision = "not_evaluable"
    return {
        "decision": decision,
        "rules": rows,
        "evidence": {"file": evidence_file, "sha256": evidence_sha256},
        "counts": counts,
    }


def counts_text(result: Mapping[str, Any]) -> str:
    """The rows of a gates outcome in a few words, as the commands print them.

    Parameters
    ----------
    result : mapping
        What :func:`evaluate_gates` returns (or an ``acceptance-gates.json`` read back).

    Returns
    -------
    str
        ``"17 pass, 0 fail, 2 not evaluable"``, and ``", of which 2 below min_support, reported"``
        after it when rows below a rule's ``min_support`` were reported without blocking.
    """
    counts = result["counts"]
    text = f"{counts['pass']} pass, {counts['fail']} fail, {counts['not_evaluable']} not evaluable"
    reported = sum(not row.get("blocks", True) for row in result.get("rules", ()))
    return text + (f", of which {reported} below min_support, reported" if reported else "")


def exit_status(result: Mapping[str, Any]) -> int:
    """The exit status of a gates outcome: 0 pass, 1 fail, 3 not evaluable.

    Parameters
    ----------
    result : mapping
        What :func:`evaluate_gates` returns (or an ``acceptance-gates.json`` read back).

    Returns
    -------
    int
        0, 1 or 3.

    Raises
    ------
    ValueError
        When ``result["decision"]`` is none of ``pass``, ``fail``, ``not_evaluable``.
    """
    decision = result.get("decision")
    if decision not in EXIT_STATUS:
        raise ValueError(f"a gates outcome's decision is 'pass', 'fail' or 'not_evaluable', not {decision!r}")
    return EXIT_STATUS[decision]
