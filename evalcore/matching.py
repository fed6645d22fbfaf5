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
    "match_max_weight",
    "match",
    "home_references",
    "resolve",
    "check_matching",
    "overlap_homes",
    "matched_homes",
]


def check_matching(matching: object) -> str:
    """Validate the ``matching`` argument against :data:`MATCHING_METHODS`."""
    if matching not in MATCHING_METHODS:
        raise ValueError(f"matching={matching!r} (--matching) is not one of {', '.join(map(repr, MATCHING_METHODS))}.")
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


def match_max_weight(pairs: PairTable, iou_threshold: float) -> BoolArray:
    """Optimal one-to-one matching (SPEC 6.11); True for each accepted pair.

    Among the one-to-one sets of eligible pairs, the one with the largest total IoU; of
    equal totals the one with the most pairs, then the one whose sorted list of
    (reference position, prediction position) is lexicographically smallest.

    The total is the exact sum of the IoU values (the real number the doubles add up to,
    not a rounded float sum, whose bits would depend on the order of the additions), so
    ties are decided by the rule and never by rounding. The problem splits into the
    connected components of the eligible pairs; a component of one pair is accepted
    outright (the common case: vectorised), each other component is solved exactly on
    integer weights that encode the three criteria in order (:func:`_best_in_component`):
    a tree (chains of contiguous fields) by dynamic programming, a component with cycles
    by the Hungarian method (:func:`_assign_exact`).
    A component's decision depends only on its own (position, position, IoU) triples,
    so it does not depend on how the work was partitioned.

    Examples
    --------
    Greedy takes (0, 0) at 0.9 and blocks both others; the optimum takes the two others
    (total 1.65 > 0.9):

    >>> t = PairTable(np.array([0, 0, 1]), np.array([0, 1, 0]), np.ones(3), np.array([0.9, 0.85, 0.8]))
    >>> match_max_weight(t, 0.5).tolist()
    [False, True, True]
    """
    ok = np.flatnonzero(eligible_pairs(pairs, iou_threshold))
    accepted = np.zeros(len(pairs), dtype=bool)
    if len(ok) == 0:
        return accepted
    label = _components(pairs.ref_pos[ok], pairs.pred_pos[ok])
    size = np.bincount(label)
    accepted[ok[size[label] == 1]] = True  # a component of one pair: nothing to choose
    big = np.flatnonzero(size[label] > 1)
    if len(big) == 0:
        return accepted
    big = big[np.argsort(label[big], kind="stable")]
    bounds = np.flatnonzero(np.diff(label[big])) + 1
    for members in np.split(ok[big], bounds):
        accepted[members[_best_in_component(pairs.ref_pos[members], pairs.pred_pos[members], pairs.iou[members])]] = True
    return accepted


def _components(ref_pos: IdArray, pred_pos: IdArray) -> IdArray:
    """Connected component of each pair in the bipartite graph of the given pairs."""
    # Imported here: only the optimal matcher needs scipy.sparse, and every command loads this module.
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    refs, ref_node = np.unique(ref_pos, return_inverse=True)
    preds, pred_node = np.unique(pred_pos, return_inverse=True)
    n = len(refs) + len(preds)
    graph = coo_matrix((np.ones(len(ref_pos)), (ref_node.ravel(), len(refs) + pred_node.ravel())), shape=(n, n))
    _, node_label = connected_components(graph, directed=False)
    return node_label[ref_node.ravel()].astype(np.int64)


def _exact_integers(values: np.ndarray) -> list[int]:
    """Non-negative finite doubles as integers on one common scale: ``values == ints * 2**e``.

    Each double is ``m * 2**(e - 53)`` with an integer mantissa ``m < 2**53``; shifting
    every mantissa to the smallest exponent makes sums and comparisons exact.
    """
    fraction, exponent = np.frexp(values)
    mantissa = (fraction * 2.0**53).astype(np.int64)  # exact: fraction has 53 significant bits
    shift = exponent - exponent.min()
    return [int(m) << int(s) for m, s in zip(mantissa.tolist(), shift.tolist())]


def _best_in_component(ref_pos: IdArray, pred_pos: IdArray, iou: np.ndarray) -> BoolArray:
    """The SPEC 6.11 choice among the pairs of one connected component.

    One integer weight per pair encodes the three criteria lexicographically: with n
    pairs ranked 0..n-1 by (reference, prediction) position,
    ``w = iou_int * (n + 2) * 2**n + 2**n + 2**(n - 1 - rank)``. The last term sums to
    less than ``2**n`` over any set, so the count term (``2**n`` per pair) decides before
    it; both sum to less than ``(n + 2) * 2**n``, one unit of IoU, so the exact IoU total
    decides first. Among sets with equal IoU total and count, the largest sum of
    ``2**(n - 1 - rank)`` is the set holding the smallest pair where two sets differ,
    which is the lexicographically smallest sorted list. Every set of pairs has a
    different weight, so the maximum is unique and the solver's own tie handling never
    matters.
    """
    row, col, n_refs, n_preds, weight = _component_weights(ref_pos, pred_pos, iou)
    if len(weight) == n_refs + n_preds - 1:  # a connected graph with one edge fewer than nodes: a tree
        return _tree_best(row, col, n_refs, weight)
    return _dense_best(row, col, n_refs, n_preds, weight)


def _component_weights(ref_pos: IdArray, pred_pos: IdArray, iou: np.ndarray) -> tuple[IdArray, IdArray, int, int, list[int]]:
    """Each pair's reference and prediction index in the component, their counts, and its exact weight."""
    n = len(iou)
    order = np.lexsort((pred_pos, ref_pos))
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    unit = (n + 2) << n
    weight = [v * unit + (1 << n) + (1 << (n - 1 - k)) for v, k in zip(_exact_integers(iou), rank.tolist())]
    refs, row = np.unique(ref_pos, return_inverse=True)
    preds, col = np.unique(pred_pos, return_inverse=True)
    return row.ravel(), col.ravel(), len(refs), len(preds), weight


def _tree_best(row: IdArray, col: IdArray, n_refs: int, weight: list[int]) -> BoolArray:
    """Maximum-weight matching of a tree component by dynamic programming, O(pairs).

    Chains (contiguous fields, each prediction over its own field and the next one)
    are trees, and the dense solver would need a square matrix for them. Nodes are the
    references (0 .. n_refs - 1) and then the predictions; pair k joins ``row[k]`` and
    ``n_refs + col[k]``. Bottom-up, ``free[v]`` is the best weight of v's subtree with v
    left to its parent, ``best[v]`` the best with v free to take a child; the weights
    are the exact integers of :func:`_best_in_component`, so there are no ties.
    """
    n_nodes = n_refs + int(col.max()) + 1
    edges: list[list[tuple[int, int]]] = [[] for _ in range(n_nodes)]
    for k, (r, p) in enumerate(zip(row.tolist(), col.tolist())):
        edges[r].append((n_refs + p, k))
        edges[n_refs + p].append((r, k))
    parent = [-1] * n_nodes
    visit = [0]
    for v in visit:  # breadth first from node 0; the list grows while it is read
        for c, _ in edges[v]:
            if c != parent[v] and c != 0 and parent[c] == -1:
                parent[c] = v
                visit.append(c)
    free = [0] * n_nodes
    best = [0] * n_nodes
    pick = [-1] * n_nodes  # the pair matching v to a child in v's best, -1: none
    for v in reversed(visit):
        children = [(c, k) for c, k in edges[v] if c != parent[v]]
        free[v] = sum(best[c] for c, _ in children)
        best[v] = free[v]
        for c, k in children:
            taken = free[v] - best[c] + free[c] + weight[k]
            if taken > best[v]:
                best[v], pick[v] = taken, k
    chosen = np.zeros(len(weight), dtype=bool)
    matched_to_parent = [False] * n_nodes
    for v in visit:  # top down: a node taken by its parent leaves its children free
        k = -1 if matched_to_parent[v] else pick[v]
        if k >= 0:
            chosen[k] = True
            child = n_refs + int(col[k]) if int(row[k]) == v else int(row[k])
            matched_to_parent[child] = True
    return chosen


def _dense_best(row: IdArray, col: IdArray, n_refs: int, n_preds: int, weight: list[int]) -> BoolArray:
    """Maximum-weight matching of a component with cycles by the exact assignment solver."""
    n = len(weight)
    transposed = n_refs > n_preds
    if transposed:  # the solver assigns every row: rows are the smaller side
        row, col = col, row
    n_rows, n_cols = (n_preds, n_refs) if transposed else (n_refs, n_preds)
    matrix = [[0] * n_cols for _ in range(n_rows)]
    pair_at: dict[tuple[int, int], int] = {}
    for k, (i, j) in enumerate(zip(row.tolist(), col.tolist())):
        matrix[i][j] = weight[k]
        pair_at[(i, j)] = k
    chosen = np.zeros(n, dtype=bool)
    for i, j in enumerate(_assign_exact(matrix, n_cols)):
        k = pair_at.get((i, j))
        if k is not None:  # a row sent to a column it has no pair with takes nothing
            chosen[k] = True
    return chosen


def _assign_exact(weight: list[list[int]], n_cols: int) -> list[int]:
    """Column of each row in a maximum-weight assignment of every row, in exact integers.

    The Hungarian method with potentials (shortest augmenting paths, Kuhn-Munkres as
    Jonker and Volgenant organise it) on the costs ``-weight``; O(rows² · columns).
    Python integers keep every potential exact, which float solvers
    (``scipy.optimize.linear_sum_assignment``) cannot promise for weights this wide.
    Weights are non-negative and a missing pair weighs 0, so the assignment's pairs of
    positive weight are a maximum-weight matching.
    """
    n_rows = len(weight)
    u = [0] * (n_rows + 1)  # row potentials, 1-based; index 0 unused
    v = [0] * (n_cols + 1)  # column potentials; column 0 is the virtual start
    owner = [0] * (n_cols + 1)  # row holding each column (0: free)
    way = [0] * (n_cols + 1)
    for i in range(1, n_rows + 1):
        owner[0] = i
        j0 = 0
        least = [None] * (n_cols + 1)  # None: not reached yet (infinite)
        used = [False] * (n_cols + 1)
        while True:
            used[j0] = True
            i0 = owner[j0]
            costs = weight[i0 - 1]
            delta = None
            j1 = 0
            for j in range(1, n_cols + 1):
                if used[j]:
                    continue
                reduced = -costs[j - 1] - u[i0] - v[j]
                if least[j] is None or reduced < least[j]:
                    least[j] = reduced
                    way[j] = j0
                if delta is None or least[j] < delta:
                    delta = least[j]
                    j1 = j
            for j in range(n_cols + 1):
                if used[j]:
                    u[owner[j]] += delta
                    v[j] -= delta
                else:
                    least[j] -= delta
            j0 = j1
            if owner[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            owner[j0] = owner[j1]
            j0 = j1
    column_of = [0] * n_rows
    for j in range(1, n_cols + 1):
        if owner[j]:
            column_of[owner[j] - 1] = j - 1
    return column_of


def match(pairs: PairTable, iou_threshold: float, matching: str) -> BoolArray:
    """The matching of the given method at one threshold; True for each accepted pair."""
    if matching == "one_to_one":
        return match_one_to_one(pairs, iou_threshold)
    if matching == "many_to_one":
        return match_many_to_one(pairs, iou_threshold)
    return match_max_weight(pairs, iou_threshold)


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
        The matching at ``base_threshold`` (the lowest threshold the run needs); under
        the greedy matchers the matching at any higher threshold t is
        ``base_match & (IoU >= t (1 - 1e-9))``. Under ``max_weight`` it is not, and
        ``base_threshold`` is the main threshold.
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
    each reference keeps its best prediction while that reaches the threshold. Under
    ``max_weight`` that shortcut does not hold, so ``base_threshold`` is ignored and the
    base matching is the main one.
    """
    matching = check_matching(matching)
    base = float(iou_threshold) if base_threshold is None else min(float(base_threshold), float(iou_threshold))
    if matching == "max_weight":
        # The optimum at a higher threshold is not the optimum at a lower one restricted
        # (a pair it dropped for two lighter ones may come back): the base is the main
        # threshold, and a family that needs another threshold solves it (match()).
        base = float(iou_threshold)
    base_match = match(pairs, base, matching)
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
