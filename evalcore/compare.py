"""Paired comparison of a candidate and an incumbent prediction layer against one reference (SPEC 6.6).

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
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evalcore.bootstrap import percentile_intervals
from evalcore.levels import UNIT_COLUMNS, tile_key, unit_rates
from evalcore.metrics import finalize_all
from evalcore.options import EvalOptions, check_options

__all__ = ["compare", "compare_on_cluster", "paired_deltas", "HEADLINE", "UNIT_METRICS"]

HEADLINE: tuple[str, ...] = ("precision", "recall", "f1", "iou_mean")
"""Metrics compared overall and per stratum and size class."""

UNIT_METRICS: tuple[str, ...] = ("precision", "recall", "f1")
"""Metrics compared per tile and per AOI."""

SCORE_METRICS: tuple[str, ...] = ("ap50", "ap75", "ap50_95")
"""Compared overall when both layers have scores."""


def _value(v: object) -> float | None:
    if v is None:
        return None
    v = float(v)
    return v if np.isfinite(v) else None


def _delta(c: object, i: object, reps_c: tuple | None, reps_i: tuple | None) -> dict[str, object]:
    """One metric's entry: both values, the delta and its paired interval."""
    cv, iv = _value(c), _value(i)
    entry: dict[str, object] = {"candidate": cv, "incumbent": iv, "delta": None if cv is None or iv is None else cv - iv}
    if reps_c is not None and reps_i is not None:
        (vc, dc), (vi, di) = reps_c, reps_i
        delta = np.asarray(vc, dtype=np.float64) - np.asarray(vi, dtype=np.float64)
        ok = np.asarray(dc, dtype=bool) & np.asarray(di, dtype=bool) & ~np.isnan(delta)
        ci, n_undefined = percentile_intervals({"d": (delta, ok)})
        entry["ci"] = [_value(ci["d"][0]), _value(ci["d"][1])]
        if n_undefined["d"]:
            entry["ci_n_undefined"] = n_undefined["d"]
    return entry


def _group_replicates(merged: object, group: int, options: EvalOptions) -> dict:
    sums = merged.replicates.groups[group]
    return finalize_all({name: sums[:, j] for j, name in enumerate(merged.sums.columns)}, options)


def _unit_rates(values: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Precision, recall, F1 of per-unit sums (last axis: n_ref, tp, n_pred, n_pred_matched),
    as ``(value, defined)`` (:func:`evalcore.levels.unit_rates`)."""
    rates = unit_rates(values[..., 0], values[..., 1], values[..., 2], values[..., 3])
    return {name: (value, ~np.isnan(value)) for name, value in rates.items()}


def _aligned(units: object, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """A run's per-unit point sums (and replicates) on ``keys``; zeros for a unit it does not hold."""
    cols = [UNIT_COLUMNS.index(c) for c in ("n_ref", "tp", "n_pred", "n_pred_matched")]
    row = {tuple(k): i for i, k in enumerate(units.keys.tolist())}
    where = np.array([row.get(tuple(k), -1) for k in keys.tolist()], dtype=np.int64)
    have = where >= 0
    point = np.zeros((len(keys), 4))
    point[have] = units.values[where[have]][:, cols]
    reps = None
    if units.replicates is not None:
        reps = np.zeros((len(keys),) + units.replicates.shape[1:])
        reps[have] = units.replicates[where[have]]
    return point, reps


def _unit_level(c_units: object, i_units: object, key_name) -> dict[str, dict]:
    """Per-unit deltas over the union of both runs' units (a unit absent from a run holds nothing there)."""
    keys = np.unique(np.concatenate([c_units.keys, i_units.keys]), axis=0)
    (cp, cr), (ip, ir) = _aligned(c_units, keys), _aligned(i_units, keys)
    point_c, point_i = _unit_rates(cp), _unit_rates(ip)
    reps_c = _unit_rates(cr) if cr is not None else None
    reps_i = _unit_rates(ir) if ir is not None else None
    out = {}
    for u, key in enumerate(keys):
        name = key_name(key)
        if name is None:
            continue
        out[name] = {"support": int(cp[u, 0])}
        for m in UNIT_METRICS:
            rc = (reps_c[m][0][u], reps_c[m][1][u]) if reps_c else None
            ri = (reps_i[m][0][u], reps_i[m][1][u]) if reps_i else None
            out[name][m] = _delta(point_c[m][0][u], point_i[m][0][u], rc, ri)
    return out


def _undefine(level: dict) -> None:
    for entry in level.values():
        for m, e in entry.items():
            if isinstance(e, dict) and "ci" in e:
                e["ci"] = [None, None]
                e.pop("ci_n_undefined", None)


def paired_deltas(ev_c: object, ev_i: object, summary_c: dict, summary_i: dict, options: EvalOptions) -> dict[str, object]:
    """The comparison dict from the two runs' merged sums and summaries (same resamples).

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
    rc, ri = replicates(0)
    for m in HEADLINE:
        overall[m] = _delta(summary_c.get(m), summary_i.get(m), rc.get(m), ri.get(m))
    if "ap50" in summary_c and "ap50" in summary_i:
        for m in SCORE_METRICS:
            rc = mc.global_values.get("replicates", {}).get(m)
            ri = mi.global_values.get("replicates", {}).get(m)
            if rc is not None and ri is not None:
                overall[m] = _delta(summary_c.get(m), summary_i.get(m), (rc, ~np.isnan(rc)), (ri, ~np.isnan(ri)))
            else:
                overall[m] = _delta(summary_c.get(m), summary_i.get(m), None, None)
    out["overall"] = overall
    offset = 1
    for name, keys in ev_c.plan.groupings:
        level = {}
        for j, key in enumerate(keys):
            gc, gi = summary_c[name][key], summary_i[name][key]
            entry = {"support": gc["support"]}
            rc, ri = replicates(offset + j)
            for m in HEADLINE:
                entry[m] = _delta(gc.get(m), gi.get(m), rc.get(m), ri.get(m))
            level[key] = entry
        out[name] = level
        offset += len(keys)
    out["per_tile"] = _unit_level(mc.tiles, mi.tiles, lambda k: tile_key(*k))
    aois = ev_c.sites.aois
    if aois is not None:
        out["per_aoi"] = _unit_level(mc.aois, mi.aois, lambda k: aois.keys[int(k[0])] if k[0] >= 0 else None)
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
                if ci and ci[1] is not None and ci[1] < 0:
                    worse.append({"level": level, "unit": unit, "metric": m, "delta": entry[m]["delta"], "ci": ci,
                                  "support": entry["support"]})
    out["worse_units"] = worse
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
    from evalcore.api import _finish_run, _prepare_reference, _prepare_run, _read_if_path, _summarize
    from evalcore.engine import resolve_run
    from evalcore.levels import prepare_sites

    checked = check_options(**options)
    if checked.bootstrap <= 0:
        raise ValueError("a paired comparison needs bootstrap resamples: give bootstrap=N (1000 is usual).")
    candidate, incumbent = _read_if_path(candidate, "predicted"), _read_if_path(incumbent, "predicted")
    reference = _read_if_path(reference, "reference")
    sites = prepare_sites(checked, checked.equal_area_crs)
    shared = _prepare_reference(reference, strata, size_bins, checked, sites)
    runs = [_prepare_run(layer, reference, strata, size_bins, checked, shared, sites) for layer in (candidate, incumbent)]
    resolved = [resolve_run(p.results, checked) for p in runs]
    if checked.bootstrap_unit != "field":
        union = np.unique(np.concatenate([r.draws.unit_keys for r in resolved]), axis=0)
        resolved = [
            r if len(r.draws.unit_keys) == len(union) and np.array_equal(r.draws.unit_keys, union) else resolve_run(p.results, checked, union)
            for p, r in zip(runs, resolved)
        ]
    ev_c, ev_i = (_finish_run(p, r) for p, r in zip(runs, resolved))
    summary_c, summary_i = _summarize(ev_c, checked), _summarize(ev_i, checked)
    out: dict[str, object] = {
        "candidate": _label(candidate),
        "incumbent": _label(incumbent),
        "bootstrap": {
            "unit": checked.bootstrap_unit,
            "n_resamples": checked.bootstrap,
            "seed": checked.bootstrap_seed,
            "n_units": resolved[0].draws.n_units,
            "tile_km": checked.tile_km,
            "paired": True,
        },
        "metrics": list(HEADLINE),
    }
    out.update(paired_deltas(ev_c, ev_i, summary_c, summary_i, checked))
    if "note" in out:
        out["bootstrap"]["note"] = out.pop("note")
    out["candidate_summary"] = summary_c
    out["incumbent_summary"] = summary_i
    return out


@dataclass(frozen=True)
class _Run:
    """What :func:`paired_deltas` reads of a run: its merged sums, plan and sites."""

    merged: object
    plan: object
    sites: object


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
    import shutil
    import tempfile

    from evalcore.distributed.runner import (
        merge_sums,
        pairs_phase,
        plan_phase,
        prepare_phase,
        resolve_phase,
        start_run,
        summary_of,
        sums_phase,
    )
    from evalcore.distributed.sources import LayerSource

    checked = check_options(**options)
    if checked.bootstrap <= 0:
        raise ValueError("a paired comparison needs bootstrap resamples: give bootstrap=N (1000 is usual).")
    layers = layers or {}
    own = workdir is None
    work = Path(tempfile.mkdtemp(prefix="evalcore-compare-")) if own else Path(workdir)
    try:
        setups = [
            start_run(LayerSource(str(path), layers.get(name), "predicted"), LayerSource(str(reference), layers.get("reference"), "reference"),
                      checked, work / name, strata_column=strata, size_bins=size_bins)
            for name, path in (("candidate", candidate), ("incumbent", incumbent))
        ]
        indexes = [prepare_phase(client, setup) for setup in setups]
        plans = [plan_phase(setup, index) for setup, index in zip(setups, indexes)]
        pairs = [pairs_phase(client, setup, index) for setup, index in zip(setups, indexes)]
        resolved = [resolve_phase(s, i, p, plan) for s, i, p, plan in zip(setups, indexes, pairs, plans)]
        if checked.bootstrap_unit != "field":
            union = np.unique(np.concatenate([r.resolved.draws.unit_keys for r in resolved]), axis=0)
            resolved = [
                r if np.array_equal(r.resolved.draws.unit_keys, union) else resolve_phase(s, i, p, plan, union)
                for r, s, i, p, plan in zip(resolved, setups, indexes, pairs, plans)
            ]
        sums = [sums_phase(client, s, i, plan, r) for s, i, plan, r in zip(setups, indexes, plans, resolved)]
        merged = [merge_sums(s, i, plan, r, d) for s, i, plan, r, d in zip(setups, indexes, plans, resolved, sums)]
        summaries = [summary_of(s, i, plan, r, m) for s, i, plan, r, m in zip(setups, indexes, plans, resolved, merged)]
        runs = [_Run(m, plan, i.sites) for m, plan, i in zip(merged, plans, indexes)]
        out: dict[str, object] = {
            "candidate": str(candidate),
            "incumbent": str(incumbent),
            "bootstrap": {
                "unit": checked.bootstrap_unit,
                "n_resamples": checked.bootstrap,
                "seed": checked.bootstrap_seed,
                "n_units": resolved[0].resolved.draws.n_units,
                "tile_km": checked.tile_km,
                "paired": True,
            },
            "metrics": list(HEADLINE),
        }
        out.update(paired_deltas(runs[0], runs[1], summaries[0], summaries[1], checked))
        if "note" in out:
            out["bootstrap"]["note"] = out.pop("note")
        out["candidate_summary"], out["incumbent_summary"] = summaries
        return out
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)


def _label(layer: object) -> str:
    from evalcore.io import SOURCE_ATTR

    attrs = getattr(layer, "attrs", None) or {}
    return str(attrs.get(SOURCE_ATTR) or "in-memory layer")
