"""Matching of candidate pairs and home references (SPEC section 3).

Both are global decisions: a prediction on a partition seam can overlap reference
fields of two partitions. They run on the concatenated pair table of all
partitions, and every tie is broken by input position, so the result does not
depend on how the pairs were computed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evalcore._typing import BoolArray, IdArray
from evalcore.config import IOU_MATCH_RTOL, MATCHING_METHODS
from evalcore.pairtable import PairTable

__all__ = [
    "Resolution",
    "eligible_pairs",
    "eligible",
    "match_one_to_one",
    "match_many_to_one",
    "home_references",
    "resolve",
    "check_matching",
    "overlap_homes",
    "matched_homes",
]


def check_matching(matching: object) -> str:
    """Validate the ``matching`` argument against :data:`MATCHING_METHODS`."""
    if matching not in MATCHING_METHODS:
        raise ValueError(f"matching={matching!r} is not one of {', '.join(map(repr, MATCHING_METHODS))}.")
    return str(matching)


def eligible_pairs(pairs: PairTable, iou_threshold: float) -> BoolArray:
    """Pairs that can match: ``IoU >= iou_threshold * (1 - 1e-9)``.

    Examples
    --------
    >>> t = PairTable(np.array([0, 1]), np.array([0, 0]), np.array([1.0, 1.0]), np.array([0.5, 0.4999999999]))
    >>> eligible_pairs(t, 0.5).tolist()
    [True, True]
    """
    return eligible(pairs.iou, iou_threshold)


def eligible(iou: np.ndarray, iou_threshold: float) -> BoolArray:
    """``IoU >= iou_threshold * (1 - 1e-9)``, the one rule every threshold uses (NaN: False)."""
    return iou >= iou_threshold * (1.0 - IOU_MATCH_RTOL)


def match_one_to_one(pairs: PairTable, iou_threshold: float) -> BoolArray:
    """Greedy one-to-one matching; True for each accepted pair.

    Eligible pairs are visited by descending IoU, ties by reference position then
    prediction position; a pair is accepted when neither side is taken yet.
    """
    ok = np.flatnonzero(eligible_pairs(pairs, iou_threshold))
    order = ok[np.lexsort((pairs.pred_pos[ok], pairs.ref_pos[ok], -pairs.iou[ok]))]
    accepted = np.zeros(len(pairs), dtype=bool)
    ref_taken: set[int] = set()
    pred_taken: set[int] = set()
    for k, r, p in zip(order.tolist(), pairs.ref_pos[order].tolist(), pairs.pred_pos[order].tolist()):
        if r in ref_taken or p in pred_taken:
            continue
        ref_taken.add(r)
        pred_taken.add(p)
        accepted[k] = True
    return accepted


def _first_per_group(groups: IdArray, order: IdArray) -> IdArray:
    """Indices (from ``order``, already sorted by group then preference) of each group's first entry."""
    if len(order) == 0:
        return order
    g = groups[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = g[1:] != g[:-1]
    return order[first]


def match_many_to_one(pairs: PairTable, iou_threshold: float) -> BoolArray:
    """Each reference takes its highest-IoU eligible prediction (ties: first prediction position)."""
    ok = np.flatnonzero(eligible_pairs(pairs, iou_threshold))
    order = ok[np.lexsort((pairs.pred_pos[ok], -pairs.iou[ok], pairs.ref_pos[ok]))]
    accepted = np.zeros(len(pairs), dtype=bool)
    accepted[_first_per_group(pairs.ref_pos, order)] = True
    return accepted


def home_references(pairs: PairTable, is_match: BoolArray) -> tuple[IdArray, IdArray]:
    """The home reference of every prediction that has one.

    The home is the matched reference (several under many-to-one: the one with the
    highest IoU, ties: first reference position), else the reference with the
    largest intersection area (ties: first reference position).

    Returns
    -------
    pred_pos, ref_pos : ndarray of int64
        Sorted by prediction position; predictions without a candidate pair are absent.
    """
    match_pred, match_ref, _ = matched_homes(pairs, is_match)
    return _homes(match_pred, match_ref, *overlap_homes(pairs))


def _homes(match_pred: IdArray, match_ref: IdArray, overlap_pred: IdArray, overlap_ref: IdArray) -> tuple[IdArray, IdArray]:
    """The matched home where there is one, else the overlap home; sorted by prediction position."""
    home = overlap_ref.copy()
    home[np.searchsorted(overlap_pred, match_pred)] = match_ref  # every matched prediction has an overlap home
    return overlap_pred, home


def overlap_homes(pairs: PairTable) -> tuple[IdArray, IdArray]:
    """Each prediction's largest-intersection reference (ties: first reference position).

    Returns
    -------
    pred_pos, ref_pos : ndarray of int64, sorted by prediction position.
    """
    every = np.arange(len(pairs))
    chosen = _first_per_group(pairs.pred_pos, every[np.lexsort((pairs.ref_pos, -pairs.inter_m2, pairs.pred_pos))])
    return pairs.pred_pos[chosen], pairs.ref_pos[chosen]


def matched_homes(pairs: PairTable, is_match: BoolArray) -> tuple[IdArray, IdArray, IdArray]:
    """Each matched prediction's matched reference (several: highest IoU, ties first reference).

    Returns
    -------
    pred_pos, ref_pos : ndarray of int64, sorted by prediction position.
    pair : ndarray of int64
        Index of the chosen pair.
    """
    matched = np.flatnonzero(is_match)
    chosen = _first_per_group(
        pairs.pred_pos, matched[np.lexsort((pairs.ref_pos[matched], -pairs.iou[matched], pairs.pred_pos[matched]))]
    )
    return pairs.pred_pos[chosen], pairs.ref_pos[chosen], chosen


@dataclass(frozen=True, slots=True)
class Resolution:
    """The global outcome of matching.

    Attributes
    ----------
    pairs : PairTable
    is_eligible, is_match : ndarray of bool, one per pair
        At the main threshold.
    base_match : ndarray of bool, one per pair
        The matching at ``base_threshold`` (the lowest threshold the run needs); the
        matching at any higher threshold t is ``base_match & (IoU >= t (1 - 1e-9))``.
    base_home : (pred_pos, ref_pos, pair) of ndarray of int64
        Each matched prediction's home under ``base_match`` (:func:`matched_homes`).
    overlap_home : (pred_pos, ref_pos) of ndarray of int64
        Each prediction's largest-overlap reference (:func:`overlap_homes`).
    home_pred_pos, home_ref_pos : ndarray of int64
        Home reference of each prediction that has one, sorted by prediction position.
    matching : str
    iou_threshold, base_threshold : float
    """

    pairs: PairTable
    is_eligible: BoolArray
    is_match: BoolArray
    home_pred_pos: IdArray
    home_ref_pos: IdArray
    matching: str
    iou_threshold: float
    base_match: BoolArray | None = None
    base_threshold: float | None = None
    base_home: tuple[IdArray, IdArray, IdArray] | None = None
    overlap_home: tuple[IdArray, IdArray] | None = None


def resolve(pairs: PairTable, iou_threshold: float, matching: str, base_threshold: float | None = None) -> Resolution:
    """Match the pairs and find every prediction's home reference.

    With ``base_threshold`` below ``iou_threshold``, the matching is made once at the
    base threshold and restricted to the pairs eligible at ``iou_threshold``: greedy
    one-to-one visits pairs by descending IoU, so the pairs eligible at a higher
    threshold are a prefix of its order and get the same decisions; under many-to-one
    each reference keeps its best prediction while that reaches the threshold.
    """
    matching = check_matching(matching)
    base = float(iou_threshold) if base_threshold is None else min(float(base_threshold), float(iou_threshold))
    if matching == "one_to_one":
        base_match = match_one_to_one(pairs, base)
    else:
        base_match = match_many_to_one(pairs, base)
    is_eligible = eligible_pairs(pairs, iou_threshold)
    is_match = base_match & is_eligible
    overlap_pred, overlap_ref = overlap_homes(pairs)
    base_pred, base_ref, base_pair = matched_homes(pairs, base_match)
    # The matched home at the main threshold is the base one while its IoU reaches it:
    # the base home is the prediction's highest-IoU match, so if it falls below the
    # threshold every other match does too.
    kept = eligible(pairs.iou[base_pair], iou_threshold)
    home_pred, home_ref = _homes(base_pred[kept], base_ref[kept], overlap_pred, overlap_ref)
    return Resolution(
        pairs=pairs,
        is_eligible=is_eligible,
        is_match=is_match,
        home_pred_pos=home_pred,
        home_ref_pos=home_ref,
        matching=matching,
        iou_threshold=float(iou_threshold),
        base_match=base_match,
        base_threshold=base,
        base_home=(base_pred, base_ref, base_pair),
        overlap_home=(overlap_pred, overlap_ref),
    )
