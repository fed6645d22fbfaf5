"""Paired comparison of prediction layers against one reference (SPEC 6.6, 6.9).

Both layers are evaluated against the same reference with the same bootstrap resamples:
the field draws depend only on the reference (its pools and reporting tiles), and the
block draws on the sorted unit keys, here the union of both runs' units. So each
resample is applied to both layers at once, and the interval of a delta (candidate −
incumbent) is the percentile interval of the replicate deltas, not a comparison of two
separate intervals (which overlap far more often than the layers truly differ).

:func:`compare` returns, for each headline metric, ``{"candidate", "incumbent",
"delta", "ci"}`` overall, per stratum, per size class, per tile and per AOI, and
``worse_units``: the strata, tiles and AOIs where the candidate is worse with the
delta's interval below zero.

:func:`compare_models` does the same for any number of named layers (seed 000, example
20: several sensors and engines on one registry): the reference is prepared once, every
layer is evaluated on the same resamples, and the result is one table (a row per model:
the headline metrics with their intervals, AP and aurc with scores, the worst group of
each grouping) and the paired deltas of every model against a chosen baseline. Under a
block bootstrap the units drawn are the union of every layer's units, so each model's
intervals are those of that union (a separate run of one layer draws its own units).
See docs/compare.md.

The module stays whole at about 580 lines: the pair and the many-model comparisons, in
process or on a cluster, share the one paired-delta rule (:func:`paired_deltas`) and
differ only in how the runs are made.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evalcore.bootstrap import bias_corrected_intervals, percentile_intervals
from evalcore.levels import UNITS_PER_BLOCK, replicate_rows, tile_key
from evalcore.rates import F1_HARMONIC_POSITIVE, detection_rates
from evalcore.metrics.registry import FAMILIES, finalize_replicates
from evalcore.metrics.scores import AP_KEYS
from evalcore.options import EvalOptions, check_options
from evalcore.present import GROUPS, OVERALL, better_of, compared_keys, is_worse

__all__ = [
    "compare", "compare_on_cluster", "compare_models", "compare_models_on_cluster", "paired_deltas", "headline_metrics",
    "overall_metrics", "UNIT_METRICS",
]

UNIT_METRICS: tuple[str, ...] = ("precision", "recall", "f1")
"""Metrics compared per tile and per AOI (the levels' rates, not a family's keys)."""


def headline_metrics() -> tuple[str, ...]:
    """Keys compared overall and per stratum and size class: those the registered families declare so
    (:data:`evalcore.present.GROUPS`; precision, recall, F1 and mean IoU)."""
    return compared_keys(FAMILIES, GROUPS)


def overall_metrics() -> tuple[str, ...]:
    """Keys compared overall only, when both runs have them (:data:`evalcore.present.OVERALL`; AP and aurc with scores)."""
    return compared_keys(FAMILIES, OVERALL)



def _value(v: object) -> float | None:
    if v is None:
        return None
    v = float(v)
    return v if np.isfinite(v) else None


_MISSING = object()


def _at(summary: dict, key: str, default: object = None) -> object:
    """The value of a compared key: a top-level key, or a dotted path into a block (``classes.macro.f1``)."""
    if key in summary:
        return summary[key]
    value: object = summary
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return default
        value = value[part]
    return value


def _has(summary: dict, key: str) -> bool:
    return _at(summary, key, _MISSING) is not _MISSING


def _ci_at(summary: dict, key: str) -> list | None:
    """The interval of a compared key: ``bootstrap.ci`` of a top-level key, its block's ``ci`` for a dotted one."""
    if key in summary or "." not in key:
        return summary.get("bootstrap", {}).get("ci", {}).get(key)
    parent, _, leaf = key.rpartition(".")
    block = _at(summary, parent)
    return (block.get("ci") or {}).get(leaf) if isinstance(block, dict) else None


PAIR_LABELS: tuple[str, str] = ("candidate", "incumbent")
"""Names of the two values in a delta entry of :func:`compare`; :func:`compare_models` uses ("model", "baseline")."""


def _delta(c: object, i: object, reps_c: tuple | None, reps_i: tuple | None, labels: tuple[str, str] = PAIR_LABELS,
           bias_corrected: bool = False) -> dict[str, object]:
    """One metric's entry: both values, the delta and its paired interval.

    ``bias_corrected`` (an AP delta under ``ap_interval="bc"``): the interval is the
    bias-corrected one about the point delta (:func:`~evalcore.bootstrap.bias_corrected_intervals`),
    and the entry also holds ``ci_percentile`` and ``point_quantile``, as the run's
    ``ap_interval`` block does.
    """
    cv, iv = _value(c), _value(i)
    entry: dict[str, object] = {labels[0]: cv, labels[1]: iv, "delta": None if cv is None or iv is None else cv - iv}
    if reps_c is not None and reps_i is not None:
        (vc, dc), (vi, di) = reps_c, reps_i
        delta = np.asarray(vc, dtype=np.float64) - np.asarray(vi, dtype=np.float64)
        ok = np.asarray(dc, dtype=bool) & np.asarray(di, dtype=bool) & ~np.isnan(delta)
        ci, n_undefined = percentile_intervals({"d": (delta, ok)})
        entry["ci"] = [_value(ci["d"][0]), _value(ci["d"][1])]
        if bias_corrected:
            point = np.nan if entry["delta"] is None else float(entry["delta"])
            bc, _, where = bias_corrected_intervals({"d": (delta, ok)}, {"d": point})
            entry["ci_percentile"] = entry["ci"]
            entry["ci"] = [_value(bc["d"][0]), _value(bc["d"][1])]
            entry["point_quantile"] = _value(where["d"])
        if n_undefined["d"]:
            entry["ci_n_undefined"] = n_undefined["d"]
    return entry


def _group_replicates(merged: object, group: int, options: EvalOptions) -> dict:
    return finalize_replicates(merged.replicates.groups[group], options)


_UNIT_COUNTS = ("n_ref", "tp", "n_pred", "n_pred_matched")
"""The detection family's unit columns the per-unit deltas need, in this order."""


def _unit_rates(values: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Precision, recall, F1 of per-unit sums (last axis: :data:`_UNIT_COUNTS`), as ``(value,
    defined)``, by the tiles' and AOIs' F1 rule (:data:`evalcore.rates.F1_HARMONIC_POSITIVE`)."""
    n_ref, tp, n_pred, n_matched = (values[..., j] for j in range(4))
    rates = detection_rates(tp, n_pred - n_matched, n_ref - tp, f1=F1_HARMONIC_POSITIVE)
    return {name: (value, ~np.isnan(value)) for name, value in zip(("precision", "recall", "f1"), rates)}


def _aligned(units: object, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A run's per-unit point sums on ``keys`` (zeros for a unit it does not hold), and each
    key's row among the run's units (-1 where it holds none)."""
    cols = [units.columns.index(c) for c in _UNIT_COUNTS]
    row = {tuple(k): i for i, k in enumerate(units.keys.tolist())}
    where = np.array([row.get(tuple(k), -1) for k in keys.tolist()], dtype=np.int64)
    have = where >= 0
    point = np.zeros((len(keys), 4))
    point[have] = units.values[where[have]][:, cols]
    return point, where


def _aligned_replicates(units: object, where: np.ndarray) -> Iterator[np.ndarray | None]:
    """A run's replicates on the keys ``where`` places, :data:`UNITS_PER_BLOCK` keys at a time
    (zeros for a unit it does not hold); ``None`` for each block without a bootstrap.

    A run on a cluster holds its tiles' replicates as a
    :class:`~evalcore.levels.BlockedReplicates`, read a block at a time here too, so the
    comparison never holds every tile's replicates of either run.
    """
    block_wheres = [where[s : s + UNITS_PER_BLOCK] for s in range(0, len(where), UNITS_PER_BLOCK)]
    if units.replicates is None:
        yield from (None for _ in block_wheres)
        return
    rep_cols = [units.replicate_columns.index(c) for c in _UNIT_COUNTS]
    held = (w[w >= 0] for w in block_wheres)
    for block_where, rows in zip(block_wheres, replicate_rows(units.replicates, held), strict=True):
        block = np.zeros((len(block_where), units.replicates.shape[1], 4))
        block[block_where >= 0] = rows[:, :, rep_cols]
        yield block


def _unit_level(c_units: object, i_units: object, key_name, labels: tuple[str, str] = PAIR_LABELS) -> dict[str, dict]:
    """Per-unit deltas over the union of both runs' units (a unit absent from a run holds nothing there)."""
    keys = np.unique(np.concatenate([c_units.keys, i_units.keys]), axis=0)
    (cp, c_where), (ip, i_where) = _aligned(c_units, keys), _aligned(i_units, keys)
    point_c, point_i = _unit_rates(cp), _unit_rates(ip)
    out = {}
    blocks = zip(range(0, len(keys), UNITS_PER_BLOCK), _aligned_replicates(c_units, c_where),
                 _aligned_replicates(i_units, i_where), strict=True)
    for start, cr, ir in blocks:
        reps_c = _unit_rates(cr) if cr is not None else None
        reps_i = _unit_rates(ir) if ir is not None else None
        for u in range(start, min(start + UNITS_PER_BLOCK, len(keys))):
            name = key_name(keys[u])
            if name is None:
                continue
            b = u - start
            out[name] = {"support": int(cp[u, 0])}
            for m in UNIT_METRICS:
                rc = (reps_c[m][0][b], reps_c[m][1][b]) if reps_c else None
                ri = (reps_i[m][0][b], reps_i[m][1][b]) if reps_i else None
                out[name][m] = _delta(point_c[m][0][u], point_i[m][0][u], rc, ri, labels)
    return out


def _undefine(level: dict) -> None:
    for entry in level.values():
        for m, e in entry.items():
            if isinstance(e, dict) and "ci" in e:
                e["ci"] = [None, None]
                e.pop("ci_n_undefined", None)


def paired_deltas(
    ev_c: object, ev_i: object, summary_c: dict, summary_i: dict, options: EvalOptions, labels: tuple[str, str] = PAIR_LABELS
) -> dict[str, object]:
    """The comparison dict from the two runs' merged sums and summaries (same resamples).

    ``labels`` name the two values of every entry (first − second is the delta).

    Under a block bootstrap, a unit of the drawn kind comes whole in every resample, so
    its own delta never varies: those intervals are left null (``unit_ci_note``) and such
    units are never listed in ``worse_units`` on that ground.
    """
    mc, mi = ev_c.merged, ev_i.merged
    with_ci = mc.replicates is not None and mi.replicates is not None

    def replicates(group: int) -> tuple[dict, dict]:
        if not with_ci:
            return {}, {}
        return _group_replicates(mc, group, options), _group_replicates(mi, group, options)

    out: dict[str, object] = {}
    overall = {}
    headline = headline_metrics()
    rc, ri = replicates(0)
    for m in headline:
        overall[m] = _delta(summary_c.get(m), summary_i.get(m), rc.get(m), ri.get(m), labels)
    for m in overall_metrics():
        if not (_has(summary_c, m) and _has(summary_i, m)):
            continue
        vc, vi = _at(summary_c, m), _at(summary_i, m)
        # A sum family's replicates come from the group sums, a run-level one's (AP, classes) from its global values.
        gc = mc.global_values.get("replicates", {}).get(m)
        gi = mi.global_values.get("replicates", {}).get(m)
        if gc is not None and gi is not None:
            bc = options.ap_interval == "bc" and m in AP_KEYS
            overall[m] = _delta(vc, vi, (gc, ~np.isnan(gc)), (gi, ~np.isnan(gi)), labels, bias_corrected=bc)
        elif m in rc and m in ri:
            overall[m] = _delta(vc, vi, rc[m], ri[m], labels)
        else:
            overall[m] = _delta(vc, vi, None, None, labels)
    out["overall"] = overall
    offset = 1
    for name, keys in ev_c.plan.groupings:
        level = {}
        for j, key in enumerate(keys):
            gc, gi = summary_c[name][key], summary_i[name][key]
            entry = {"support": gc["support"]}
            rc, ri = replicates(offset + j)
            for m in headline:
                entry[m] = _delta(gc.get(m), gi.get(m), rc.get(m), ri.get(m), labels)
            level[key] = entry
        out[name] = level
        offset += len(keys)
    out["per_tile"] = _unit_level(mc.tiles, mi.tiles, lambda k: tile_key(*k), labels)
    aois = ev_c.sites.aois
    if aois is not None:
        out["per_aoi"] = _unit_level(mc.aois, mi.aois, lambda k: aois.keys[int(k[0])] if k[0] >= 0 else None, labels)
    drawn_level = {"tile": "per_tile", "aoi": "per_aoi"}.get(options.bootstrap_unit)
    if drawn_level in out:
        _undefine(out[drawn_level])
        out["unit_ci_note"] = (
            f"with bootstrap_unit={options.bootstrap_unit!r} each {options.bootstrap_unit} comes whole in every resample, so its "
            f"own delta does not vary: the {drawn_level} intervals are undefined (use bootstrap_unit='field' for them)"
        )
    n_units = ev_c.merged.n_units
    if options.bootstrap_unit != "field" and n_units is not None and n_units < 2:
        for level in ("per_stratum", "per_size_class", "per_tile", "per_aoi"):
            _undefine(out.get(level, {}))
        _undefine({"overall": out["overall"]})
        out["note"] = (
            f"only {n_units} {options.bootstrap_unit} unit(s) to draw from: every resample is that unit again, so the "
            "deltas' intervals say nothing about sampling variability and are left undefined"
        )
    worse = []
    for level in ("per_stratum", "per_size_class", "per_tile", "per_aoi"):
        for unit, entry in out.get(level, {}).items():
            for m in UNIT_METRICS:
                ci = entry[m].get("ci")
                if is_worse(better_of(FAMILIES, m), ci):
                    worse.append({"level": level, "unit": unit, "metric": m, "delta": entry[m]["delta"], "ci": ci,
                                  "support": entry["support"]})
    out["worse_units"] = worse
    return out


def _named_layers(predictions: object, baseline: str | None) -> tuple[list[tuple[str, object]], str]:
    """The models as ``[(name, layer)]`` in the given order, checked, and the baseline's name."""
    from collections.abc import Mapping

    items = list(predictions.items()) if isinstance(predictions, Mapping) else list(predictions)
    if not all(isinstance(item, tuple) and len(item) == 2 for item in items):
        raise ValueError("predictions must be a mapping {name: layer} or a sequence of (name, layer) pairs.")
    names = [name for name, _ in items]
    bad = [name for name in names if not isinstance(name, str) or not name.strip()]
    if bad:
        raise ValueError(f"predictions: every model needs a non-empty name, but got {bad[0]!r}.")
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"predictions: two models are named {name!r}; give each model its own name.")
        seen.add(name)
    if len(items) < 2:
        raise ValueError(f"predictions: a comparison needs at least two models, but got {len(items)}.")
    if baseline is None:
        baseline = names[0]
    elif baseline not in seen:
        raise ValueError(f"baseline {baseline!r} is not one of the models: {', '.join(map(repr, names))}.")
    return items, baseline


def _checked(options: dict) -> EvalOptions:
    checked = check_options(**options)
    if checked.bootstrap <= 0:
        raise ValueError("a paired comparison needs bootstrap resamples: give bootstrap=N (1000 is usual).")
    return checked


def _bootstrap_block(checked: EvalOptions, n_units: int | None) -> dict[str, object]:
    return {
        "unit": checked.bootstrap_unit,
        "n_resamples": checked.bootstrap,
        "seed": checked.bootstrap_seed,
        "n_units": n_units,
        "tile_km": checked.tile_km,
        "paired": True,
    }


def _evaluate_in_process(layers: list[object], reference: object, strata: object, size_bins: object, checked: EvalOptions):
    """Every layer against one reference, prepared once, on the same resamples: their evaluations and summaries."""
    from evalcore.api import _finish_run, _prepare_reference, _prepare_run, _summarize
    from evalcore.engine.resolve import resolve_run
    from evalcore.levels import prepare_sites
    from evalcore.study import prepare_study

    sites = prepare_sites(checked, checked.equal_area_crs)
    study = prepare_study(checked, checked.equal_area_crs)  # once, like the sites and the reference
    shared = _prepare_reference(reference, strata, size_bins, checked, sites, study)
    runs = [_prepare_run(layer, reference, strata, size_bins, checked, shared, sites, study) for layer in layers]
    if checked.bootstrap_unit == "field":
        # The field draws depend only on the reference: every run draws the same resamples.
        evaluations = [_finish_run(p) for p in runs]
    else:
        # Block draws are keyed by the sorted unit keys: draw every layer over the union of their units.
        resolved = [resolve_run(p.results, checked, strata_names=p.plan.strata_names, sizes=p.plan.sizes) for p in runs]
        union = np.unique(np.concatenate([r.draws.unit_keys for r in resolved]), axis=0)
        resolved = [
            r if len(r.draws.unit_keys) == len(union) and np.array_equal(r.draws.unit_keys, union) else resolve_run(p.results, checked, union, p.plan.strata_names, p.plan.sizes)
            for p, r in zip(runs, resolved)
        ]
        evaluations = [_finish_run(p, r) for p, r in zip(runs, resolved)]
    return evaluations, [_summarize(ev, checked) for ev in evaluations], evaluations[0].merged.n_units


def _pair_result(names: tuple[str, str], ev_c: object, ev_i: object, summary_c: dict, summary_i: dict, checked: EvalOptions,
                 n_units: int | None) -> dict[str, object]:
    """The layout of :func:`compare` (two layers)."""
    out: dict[str, object] = {"candidate": names[0], "incumbent": names[1], "bootstrap": _bootstrap_block(checked, n_units),
                              "metrics": list(headline_metrics())}
    out.update(paired_deltas(ev_c, ev_i, summary_c, summary_i, checked))
    if "note" in out:
        out["bootstrap"]["note"] = out.pop("note")
    out["candidate_summary"] = summary_c
    out["incumbent_summary"] = summary_i
    return out


def compare(
    candidate: object,
    incumbent: object,
    reference: object,
    *,
    strata: object = None,
    size_bins: object = None,
    **options: object,
) -> dict[str, object]:
    """Paired comparison of two prediction layers against one reference (SPEC 6.6).

    Parameters
    ----------
    candidate, incumbent : GeoDataFrame, GeoSeries or path
        The two prediction layers (their CRSs may differ).
    reference : GeoDataFrame, GeoSeries or path
        Prepared once and shared by both evaluations.
    strata, size_bins, **options
        As :func:`evalcore.evaluate`; ``bootstrap`` must be positive (the deltas'
        intervals come from the shared resamples), ``bootstrap_unit`` chooses the unit.

    Returns
    -------
    dict
        ``bootstrap`` (unit, resamples, seed, units), ``overall``, ``per_stratum``,
        ``per_size_class``, ``per_tile``, ``per_aoi`` (metric: ``{"candidate",
        "incumbent", "delta", "ci"}``), ``worse_units``, and both runs' summaries
        under ``candidate_summary`` and ``incumbent_summary``.

    Raises
    ------
    ValueError
        Without bootstrap resamples.
    """
    from evalcore.api import _read_if_path

    checked = _checked(options)
    candidate, incumbent = _read_if_path(candidate, "predicted"), _read_if_path(incumbent, "predicted")
    reference = _read_if_path(reference, "reference")
    (ev_c, ev_i), (summary_c, summary_i), n_units = _evaluate_in_process([candidate, incumbent], reference, strata, size_bins, checked)
    return _pair_result((_label(candidate), _label(incumbent)), ev_c, ev_i, summary_c, summary_i, checked, n_units)


def _table_row(summary: dict) -> dict[str, object]:
    """One model's row: the headline (and score) metrics with their intervals, the counts, the worst groups (F1)."""
    row: dict[str, object] = {k: summary.get(k) for k in ("count_predicted", "count_reference", "count_tp", "count_fp", "count_fn")}
    for m in headline_metrics() + tuple(m for m in overall_metrics() if _has(summary, m)):
        bounds = _ci_at(summary, m)
        row[m] = {"value": _value(_at(summary, m)), "ci": [_value(bounds[0]), _value(bounds[1])] if bounds is not None else None}
    worst: dict[str, object] = {}
    for grouping, block in (summary.get("worst") or {}).items():  # per_stratum, per_size_class
        worst[grouping] = None if block is None else block.get("f1")
    for level in ("tiles", "aois"):
        if isinstance(summary.get(level), dict) and "worst" in summary[level]:
            block = summary[level]["worst"]
            worst[level] = None if block is None else block.get("f1")
    row["worst_f1"] = worst
    return row


def _models_result(names: list[str], sources: list[str], reference: str, baseline: str, runs: list[object], summaries: list[dict],
                   checked: EvalOptions, n_units: int | None) -> dict[str, object]:
    """The layout of :func:`compare_models`."""
    base = names.index(baseline)
    out: dict[str, object] = {
        "reference": reference,
        "models": dict(zip(names, sources)),
        "baseline": baseline,
        "bootstrap": _bootstrap_block(checked, n_units),
        "metrics": list(headline_metrics()) + [m for m in overall_metrics() if _has(summaries[0], m)],
        "table": {name: _table_row(summary) for name, summary in zip(names, summaries)},
        "deltas": {},
    }
    for k, name in enumerate(names):
        if k == base:
            continue
        deltas = paired_deltas(runs[k], runs[base], summaries[k], summaries[base], checked, labels=("model", "baseline"))
        note = deltas.pop("note", None)
        if note is not None:
            out["bootstrap"]["note"] = note
        out["deltas"][name] = deltas
    out["summaries"] = dict(zip(names, summaries))
    return out


def compare_models(
    predictions: object,
    reference: object,
    *,
    baseline: str | None = None,
    strata: object = None,
    size_bins: object = None,
    **options: object,
) -> dict[str, object]:
    """Several prediction layers against one reference, on the same resamples (SPEC 6.9).

    Parameters
    ----------
    predictions : mapping of str to layer, or sequence of (name, layer)
        Two or more models (GeoDataFrame, GeoSeries or path each), named; their CRSs
        may differ. Names must be distinct.
    reference : GeoDataFrame, GeoSeries or path
        Read and prepared once, shared by every evaluation.
    baseline : str, optional
        The model every other one is compared with (default: the first).
    strata, size_bins, **options
        As :func:`evalcore.evaluate`; ``bootstrap`` must be positive.

    Returns
    -------
    dict
        ``models`` (name: source), ``baseline``, ``bootstrap``, ``metrics``, ``table``
        (name: the row of :func:`_table_row`: counts, ``{"value", "ci"}`` per metric,
        ``worst_f1`` per grouping), ``deltas`` (each other model's paired deltas
        against the baseline, in the layout of :func:`compare` with the entries'
        values named ``model`` and ``baseline``), and every model's summary under
        ``summaries`` (each equal to :func:`evalcore.evaluate` of that layer with a field
        bootstrap).

    Raises
    ------
    ValueError
        Fewer than two models, a repeated or empty name, an unknown baseline, no
        bootstrap resamples.
    """
    from evalcore.api import _read_if_path

    items, baseline = _named_layers(predictions, baseline)
    checked = _checked(options)
    layers = [_read_if_path(layer, "predicted") for _, layer in items]
    reference = _read_if_path(reference, "reference")
    runs, summaries, n_units = _evaluate_in_process(layers, reference, strata, size_bins, checked)
    names = [name for name, _ in items]
    return _models_result(names, [_label(layer) for layer in layers], _label(reference), baseline, runs, summaries, checked, n_units)


@dataclass(frozen=True)
class _Run:
    """What :func:`paired_deltas` reads of a run: its merged sums, plan and sites."""

    merged: object
    plan: object
    sites: object


def _evaluate_on_cluster(
    paths: list[tuple[str, str]], reference: str, client: object, checked: EvalOptions, work: Path, strata: str | None,
    size_bins: object, layers: dict,
) -> tuple[list[_Run], list[dict], int | None]:
    """Every layer's distributed phases in ``work/<directory>``; the resolve phases share the block units.

    Each run resolves where :func:`evalcore.distributed.runner.resolves_on_workers` says,
    on the workers by connected components as a single run does; under a block bootstrap a
    run whose units are not the union of all runs' units has its draws made again over the
    union (on the workers, its ``homeless-paired`` task alone).
    """
    from evalcore.distributed.runner import (
        merge_sums,
        pairs_phase,
        plan_phase,
        prepare_phase,
        resolve_phase,
        summary_of,
        sums_phase,
    )
    from evalcore.distributed.sources import LayerSource
    from evalcore.distributed.staging import start_run

    setups = [
        start_run(LayerSource(str(path), layers.get(name), "predicted"), LayerSource(str(reference), layers.get("reference"), "reference"),
                  checked, work / directory, strata_column=strata, size_bins=size_bins)
        for (name, path), directory in zip(paths, _directories(paths))
    ]
    indexes = [prepare_phase(client, setup) for setup in setups]
    plans = [plan_phase(setup, index) for setup, index in zip(setups, indexes)]
    pairs = [pairs_phase(client, setup, index) for setup, index in zip(setups, indexes)]
    # On the workers where resolves_on_workers allows (as evalcore run), else on the client.
    resolved = [resolve_phase(s, i, p, plan, client=client) for s, i, p, plan in zip(setups, indexes, pairs, plans)]
    if checked.bootstrap_unit != "field":
        # Block draws over the union of the runs' units (a few per partition): a run whose own
        # units differ draws again over the union; on the workers only its homeless task is redone.
        union = np.unique(np.concatenate([r.resolved.draws.unit_keys for r in resolved]), axis=0)
        resolved = [
            r if np.array_equal(r.resolved.draws.unit_keys, union) else resolve_phase(s, i, p, plan, union, client=client, previous=r)
            for r, s, i, p, plan in zip(resolved, setups, indexes, pairs, plans)
        ]
    sums = [sums_phase(client, s, i, plan, r) for s, i, plan, r in zip(setups, indexes, plans, resolved)]
    merged = [merge_sums(s, i, plan, r, d) for s, i, plan, r, d in zip(setups, indexes, plans, resolved, sums)]
    summaries = [summary_of(s, i, plan, r, m) for s, i, plan, r, m in zip(setups, indexes, plans, resolved, merged)]
    runs = [_Run(m, plan, i.sites) for m, plan, i in zip(merged, plans, indexes)]
    return runs, summaries, resolved[0].resolved.draws.n_units


def _directories(paths: list[tuple[str, str]]) -> list[str]:
    """A work subdirectory per model: the two-model names as before, else ``model-<k>`` (names need not be file names)."""
    names = [name for name, _ in paths]
    if names == list(PAIR_LABELS):
        return names
    return [f"model-{k}" for k in range(len(paths))]


def compare_on_cluster(
    candidate: str,
    incumbent: str,
    reference: str,
    client: object,
    *,
    strata: str | None = None,
    size_bins: object = None,
    workdir: str | os.PathLike | None = None,
    layers: dict | None = None,
    **options: object,
) -> dict[str, object]:
    """:func:`compare` on a Dask cluster, for layer files: the same result.

    Each layer runs the distributed phases in its own work directory; the two resolve
    phases share the block bootstrap's units, so the resamples are the same.
    """
    checked = _checked(options)
    with _work_directory(workdir) as work:
        runs, summaries, n_units = _evaluate_on_cluster(
            [("candidate", str(candidate)), ("incumbent", str(incumbent))], reference, client, checked, work, strata, size_bins,
            layers or {},
        )
    return _pair_result((str(candidate), str(incumbent)), runs[0], runs[1], summaries[0], summaries[1], checked, n_units)


def compare_models_on_cluster(
    predictions: object,
    reference: str,
    client: object,
    *,
    baseline: str | None = None,
    strata: str | None = None,
    size_bins: object = None,
    workdir: str | os.PathLike | None = None,
    layers: dict | None = None,
    **options: object,
) -> dict[str, object]:
    """:func:`compare_models` on a Dask cluster, for layer files: the same result.

    ``predictions`` maps names to paths; ``layers`` optionally maps a name (or
    ``"reference"``) to the layer inside its file. Each model runs the distributed phases
    in ``workdir/model-<k>``; the resolve phases share the block bootstrap's units.
    """
    items, baseline = _named_layers(predictions, baseline)
    checked = _checked(options)
    paths = [(name, str(path)) for name, path in items]
    with _work_directory(workdir) as work:
        runs, summaries, n_units = _evaluate_on_cluster(paths, reference, client, checked, work, strata, size_bins, layers or {})
    names = [name for name, _ in paths]
    return _models_result(names, [path for _, path in paths], str(reference), baseline, runs, summaries, checked, n_units)


@contextmanager
def _work_directory(workdir: str | os.PathLike | None) -> Iterator[Path]:
    """The given work directory, or a temporary one removed afterwards."""
    if workdir is not None:
        yield Path(workdir)
        return
    path = Path(tempfile.mkdtemp(prefix="evalcore-compare-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _label(layer: object) -> str:
    from evalcore.io import SOURCE_ATTR

    attrs = getattr(layer, "attrs", None) or {}
    return str(attrs.get(SOURCE_ATTR) or "in-memory layer")
