"""The statistics of a reviewed sample (SPEC 6.12): completion, the weighted confirmed
share with its Wilson interval, severe-error prevalence, agreement between reviewers.

Pure functions of the sample and the decisions; :func:`review_statistics` gives the
content of ``review.json``. Undefined values are NaN (null in JSON), never 0 or 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

__all__ = [
    "Z95",
    "wilson_interval",
    "weighted_share",
    "cohen_kappa",
    "fleiss_kappa",
    "review_statistics",
]

Z95 = 1.959963984540054
"""The standard normal's 97.5 % quantile: the two-sided 95 % Wilson interval."""

MAX_DISAGREEMENTS = 500
"""Disagreements listed in ``review.json`` (the most weighted first); the count is always whole."""


def wilson_interval(p: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a share ``p`` observed on ``n`` (possibly effective) items.

    Examples
    --------
    >>> [round(v, 4) for v in wilson_interval(0.5, 4)]
    [0.15, 0.85]
    >>> wilson_interval(float("nan"), 0)
    (nan, nan)
    """
    if not n > 0 or math.isnan(p):
        return (math.nan, math.nan)
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return (max(0.0, centre - half), min(1.0, centre + half))


def weighted_share(hit: np.ndarray, weight: np.ndarray) -> dict[str, object]:
    """Σ w·hit / Σ w with its Wilson 95 % interval at the effective size (Σ w)² / Σ w².

    Returns
    -------
    dict
        ``value``, ``ci`` [lower, upper], ``numerator`` (Σ w·hit), ``denominator`` (Σ w),
        ``effective_n`` and ``support`` (the items counted); NaN when there are none.
    """
    hit = np.asarray(hit, dtype=float)
    weight = np.asarray(weight, dtype=float)
    sw = float(weight.sum())
    num = float((weight * hit).sum())
    if len(weight) == 0 or sw <= 0:
        return {"value": math.nan, "ci": [math.nan, math.nan], "numerator": num, "denominator": sw, "effective_n": math.nan, "support": int(len(weight))}
    value = num / sw
    n_eff = sw * sw / float((weight * weight).sum())
    lo, hi = wilson_interval(value, n_eff)
    return {"value": value, "ci": [lo, hi], "numerator": num, "denominator": sw, "effective_n": n_eff, "support": int(len(weight))}


def cohen_kappa(a: Sequence[str], b: Sequence[str]) -> float:
    """Cohen's kappa of two raters' labels of the same items (NaN: no items, or chance
    agreement 1 so kappa is undefined).

    Examples
    --------
    >>> cohen_kappa(["x", "x", "y", "y"], ["x", "y", "y", "y"])
    0.5
    """
    a = np.asarray(a, dtype=object)
    b = np.asarray(b, dtype=object)
    if len(a) == 0:
        return math.nan
    labels = sorted(set(a) | set(b))
    p_o = float(np.mean(a == b))
    p_e = sum(float(np.mean(a == k)) * float(np.mean(b == k)) for k in labels)
    return math.nan if p_e >= 1.0 else (p_o - p_e) / (1.0 - p_e)


def fleiss_kappa(counts: np.ndarray) -> float:
    """Fleiss' kappa of an (items, categories) table of how many raters chose each
    category; every item must have the same number of raters (NaN: undefined).

    Examples
    --------
    >>> round(fleiss_kappa(np.array([[3, 0], [0, 3], [2, 1]])), 4)
    0.55
    """
    counts = np.asarray(counts, dtype=float)
    if counts.ndim != 2 or counts.shape[0] == 0:
        return math.nan
    m = counts.sum(axis=1)
    if not np.all(m == m[0]) or m[0] < 2:
        return math.nan
    m = float(m[0])
    p_j = counts.sum(axis=0) / counts.sum()
    p_i = ((counts * counts).sum(axis=1) - m) / (m * (m - 1))
    p_bar = float(p_i.mean())
    p_e = float((p_j * p_j).sum())
    return math.nan if p_e >= 1.0 else (p_bar - p_e) / (1.0 - p_e)


def _share_block(frame: pd.DataFrame) -> dict[str, object]:
    """Completion and the weighted shares of one cell (or of the whole sample)."""
    drawn = len(frame)
    reviewed = frame[frame["n_reviewers"] > 0]
    w = 1.0 / reviewed["inclusion_probability"].to_numpy(float)
    return {
        "drawn": drawn,
        "reviewed": int(len(reviewed)),
        "completion": len(reviewed) / drawn if drawn else math.nan,
        "confirmed_share": weighted_share(reviewed["confirmed"].to_numpy(bool), w),
        "critical_share": weighted_share((reviewed["severity"] == "critical").to_numpy(bool), w),
        "major_or_worse_share": weighted_share(reviewed["severity"].isin(["major", "critical"]).to_numpy(bool), w),
    }


def _gate_view(block: dict) -> dict:
    """A block's values as gates read them: numbers at the top, ``ci`` and ``support`` beside."""
    out = {"support": block["reviewed"], "drawn": block["drawn"], "reviewed": block["reviewed"], "completion": block["completion"], "ci": {}}
    for key in ("confirmed_share", "critical_share", "major_or_worse_share"):
        out[key] = block[key]["value"]
        out["ci"][key] = block[key]["ci"]
        out[f"{key}_detail"] = {k: v for k, v in block[key].items() if k not in ("value", "ci")}
    return out


def review_statistics(sample: pd.DataFrame, decisions: pd.DataFrame, adjudication: pd.DataFrame | None = None) -> dict:
    """The content of ``review.json`` (before its file facts are added).

    Parameters
    ----------
    sample : DataFrame
        The sample (``item_id``, ``cell``, ``code``, ``inclusion_probability``).
    decisions : DataFrame
        Valid decisions (``item_id``, ``reviewer``, ``code``, ``severity``, ``comment``),
        at most one per reviewer and item.
    adjudication : DataFrame or None
        Final codes (``item_id``, ``final_code``, ``adjudicator``, ``comment``), or None.

    Returns
    -------
    dict
        ``state`` (``reviewed`` or ``unreviewed``), the overall values as gates read them
        (``completion``, ``confirmed_share``, ``critical_share``,
        ``major_or_worse_share``, each share's ``ci`` and details, ``support``),
        ``agreement`` (``raw_agreement``, ``kappa`` and their items), ``per_cell`` (the
        same per cell), ``disagreements`` and, with an adjudication, the final
        confirmed share.
    """
    decisions = decisions.sort_values(["item_id", "reviewer"], kind="stable")
    first = decisions.drop_duplicates("item_id", keep="first").set_index("item_id")
    n_reviewers = decisions.groupby("item_id")["reviewer"].size()
    items = sample[["item_id", "cell", "code", "inclusion_probability"]].copy()
    items["n_reviewers"] = items["item_id"].map(n_reviewers).fillna(0).astype(int)
    items["review_code"] = items["item_id"].map(first["code"]) if len(first) else None
    items["severity"] = items["item_id"].map(first["severity"]).fillna("") if len(first) else ""
    items["confirmed"] = items["review_code"] == items["code"]

    overall = _gate_view(_share_block(items))
    per_cell = {name: _gate_view(_share_block(group)) for name, group in items.groupby("cell", sort=True)}

    # Agreement: items seen by exactly two reviewers (Cohen), by three or more (Fleiss,
    # over the items that share the largest number of reviewers, as Fleiss needs).
    codes_by_item = decisions.groupby("item_id")["code"].apply(list)
    two = codes_by_item[codes_by_item.map(len) == 2]
    agreement: dict[str, object] = {
        "n_items_two_reviewers": int(len(two)),
        "raw_agreement": float(np.mean([a == b for a, b in two])) if len(two) else math.nan,
        "kappa": cohen_kappa([p[0] for p in two], [p[1] for p in two]),
        "kappa_method": "cohen",
    }
    more = codes_by_item[codes_by_item.map(len) > 2]
    if len(more):
        m = int(more.map(len).max())
        rated = more[more.map(len) == m]
        labels = sorted({c for codes in rated for c in codes})
        table = np.array([[codes.count(k) for k in labels] for codes in rated], dtype=float)
        agreement.update({
            "n_items_more_reviewers": int(len(rated)),
            "reviewers_per_item": m,
            "fleiss_kappa": fleiss_kappa(table),
            "raw_agreement_more": float(np.mean([len(set(codes)) == 1 for codes in rated])),
        })
        if not len(two):
            agreement["kappa"] = agreement["fleiss_kappa"]
            agreement["kappa_method"] = "fleiss"
            agreement["raw_agreement"] = agreement["raw_agreement_more"]

    # Disagreements: reviewers who differ from each other, or a first reviewer who does
    # not confirm the automatic code; most weighted first, then by item id.
    final = adjudication.set_index("item_id")["final_code"] if adjudication is not None and len(adjudication) else pd.Series(dtype=object)
    listed = []
    for row in items.itertuples(index=False):
        if row.n_reviewers == 0:
            continue
        codes = codes_by_item[row.item_id]
        between = len(set(codes)) > 1
        if not between and row.confirmed:
            continue
        its = decisions[decisions["item_id"] == row.item_id]
        listed.append({
            "item_id": row.item_id, "cell": row.cell, "automatic_code": row.code, "weight": 1.0 / row.inclusion_probability,
            "kind": "reviewers" if between else "automatic",
            "decisions": [{"reviewer": r.reviewer, "code": r.code, "severity": r.severity, "comment": r.comment} for r in its.itertuples(index=False)],
            "final_code": final.get(row.item_id),
        })
    listed.sort(key=lambda d: (-d["weight"], d["item_id"]))
    reviewed = int((items["n_reviewers"] > 0).sum())
    out = {
        "state": "reviewed" if reviewed else "unreviewed",
        **overall,
        "n_decisions": int(len(decisions)),
        "reviewers": sorted(decisions["reviewer"].unique().tolist()),
        "agreement": agreement,
        "per_cell": per_cell,
        "n_disagreements": len(listed),
        "disagreements": listed[:MAX_DISAGREEMENTS],
    }
    if len(final):
        adjudicated = items[items["n_reviewers"] > 0].copy()
        code_final = adjudicated["item_id"].map(final).fillna(adjudicated["review_code"])
        w = 1.0 / adjudicated["inclusion_probability"].to_numpy(float)
        block = weighted_share((code_final == adjudicated["code"]).to_numpy(bool), w)
        out["adjudicated_items"] = int(len(final))
        out["confirmed_share_final"] = block["value"]
        out["ci"]["confirmed_share_final"] = block["ci"]
    return out
