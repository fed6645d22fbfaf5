"""The resolve by connected components: what lets each partition resolve its own pairs.

Matching (greedy one-to-one, many-to-one, the optimal matcher, at every threshold of the
sweep), homes, merges and splits only couple pairs that are connected in the
candidate-pair graph (reference fields and predictions as nodes, each candidate pair an
edge): every decision about a pair reads only pairs sharing its reference or its
prediction, and so on transitively. Resolving the union of some components therefore
gives each of their pairs and predictions the values that resolving the whole run gives
them (``tests/unit/test_components.py`` holds that as a property).

A partition's pairs are those of its own reference fields, so a component can reach
another partition only through a prediction that both partitions' pairs hold: a halo
prediction of one (owned by a neighbour) that is an own prediction of the other or a
halo prediction of a third. :func:`label_partition` labels a partition's components and
names its halo predictions; :func:`own_connectors` answers, for the partitions that read
a partition's predictions, which of those halo predictions are its own and in which
component (together the *seam connectors*); :func:`seam_plan` unions the connectors of every
partition (they scale with the partitions' perimeter, not their area) into seam
components and names one owner partition per seam component, the partition holding the
component's smallest reference position. :func:`component_results` gathers the pairs a
partition resolves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from evalcore._typing import IdArray
from evalcore.bootstrap import PartitionKey
from evalcore.engine.pairing import PairResults, concat_pair_results

__all__ = ["NO_REFERENCE", "PartitionLabels", "label_partition", "own_connectors", "SeamPlan", "seam_plan", "component_results"]


NO_REFERENCE = np.iinfo(np.int64).max
"""The smallest reference position of a component without reference fields (a lone prediction)."""


@dataclass(frozen=True, slots=True)
class PartitionLabels:
    """A partition's connected components (:func:`label_partition`).

    Attributes
    ----------
    pair_label : ndarray of int64
        Component of each of the partition's pairs (in its pair table's order).
    pred_label : ndarray of int64
        Component of each of its own predictions (in ``results.pred_pos`` order); a
        prediction without a pair here has a component of its own.
    n_labels : int
    connector_pos, connector_label : ndarray of int64
        The seam connectors: predictions another partition's pairs may also hold, sorted
        by position, and their component here.
    connector_min_ref : ndarray of int64
        The smallest reference position of each connector's component
        (:data:`NO_REFERENCE`: none).
    label_min_ref : ndarray of int64
        The smallest reference position of each component (:data:`NO_REFERENCE`: none).
    """

    pair_label: IdArray
    pred_label: IdArray
    n_labels: int
    connector_pos: IdArray
    connector_label: IdArray
    connector_min_ref: IdArray
    label_min_ref: IdArray | None = None


def label_partition(results: PairResults, read_by_neighbours: IdArray | None = None) -> PartitionLabels:
    """Label a partition's connected components and name its seam connectors.

    Parameters
    ----------
    results : PairResults
        The partition's pairs phase output.
    read_by_neighbours : ndarray of int64, optional
        Positions of its own predictions that other partitions' pairs may hold: they are
        connectors too (default none: the halo predictions only; the own side is asked
        afterwards, :func:`own_connectors`).

    Returns
    -------
    PartitionLabels
    """
    from scipy.sparse import coo_matrix  # imported here: scipy is slow to load and only this step needs it
    from scipy.sparse.csgraph import connected_components

    pairs = results.pairs
    refs, ref_node = np.unique(pairs.ref_pos, return_inverse=True)
    # Prediction nodes: those of the pairs and every own prediction (one without a pair
    # here may still be paired by a neighbour, or be homeless).
    preds = np.union1d(pairs.pred_pos, results.pred_pos)
    pred_node = len(refs) + np.searchsorted(preds, pairs.pred_pos)
    n = len(refs) + len(preds)
    graph = coo_matrix((np.ones(len(pairs)), (np.asarray(ref_node, np.int64).ravel(), pred_node)), shape=(n, n))
    n_labels, node_label = connected_components(graph, directed=False)
    node_label = node_label.astype(np.int64)
    pair_label = node_label[np.asarray(ref_node, np.int64).ravel()]
    pred_label = node_label[len(refs) + np.searchsorted(preds, results.pred_pos)]
    min_ref = np.full(n_labels, NO_REFERENCE, dtype=np.int64)
    np.minimum.at(min_ref, pair_label, pairs.ref_pos)
    halo = np.setdiff1d(pairs.pred_pos, results.pred_pos)  # sorted, unique
    own_read = np.intersect1d(results.pred_pos, read_by_neighbours if read_by_neighbours is not None else np.empty(0, np.int64))
    connector_pos = np.union1d(halo, own_read)
    connector_label = node_label[len(refs) + np.searchsorted(preds, connector_pos)]
    return PartitionLabels(pair_label, pred_label, int(n_labels), connector_pos, connector_label, min_ref[connector_label], min_ref)


def own_connectors(pred_pos: IdArray, pred_label: IdArray, label_min_ref: IdArray, asked: IdArray) -> tuple[IdArray, IdArray, IdArray]:
    """The own side of the seam connectors: the partition's own predictions among ``asked``
    (halo predictions of the partitions that read its predictions), with their component
    and its smallest reference position.

    Parameters
    ----------
    pred_pos, pred_label : ndarray of int64
        The partition's own predictions (sorted) and their component (:class:`PartitionLabels`).
    label_min_ref : ndarray of int64
        :attr:`PartitionLabels.label_min_ref`.
    asked : ndarray of int64
        Positions (any order; others' predictions among them are ignored).
    """
    pos = np.intersect1d(pred_pos, asked)
    label = pred_label[np.searchsorted(pred_pos, pos)]
    return pos, label, label_min_ref[label]


@dataclass(frozen=True)
class SeamPlan:
    """Who resolves the components that cross seams (:func:`seam_plan`).

    Attributes
    ----------
    given_away : dict of PartitionKey to ndarray of int64
        Per partition, its component labels another partition resolves (sorted).
    borrowed : dict of PartitionKey to dict of PartitionKey to ndarray of int64
        Per resolving partition, the component labels of other partitions it resolves
        (``{source partition: sorted labels}``).
    n_seam_components : int
        Components spanning two partitions or more.
    """

    given_away: dict = field(default_factory=dict)
    borrowed: dict = field(default_factory=dict)
    n_seam_components: int = 0

    def sources(self, key: PartitionKey) -> dict:
        """``{partition: labels}`` that ``key`` resolves from other partitions."""
        return self.borrowed.get(key, {})


def seam_plan(connectors: dict) -> SeamPlan:
    """Union every partition's seam connectors into seam components and name their owners.

    Parameters
    ----------
    connectors : dict of PartitionKey to (pos, label, min_ref)
        Each partition's :attr:`PartitionLabels.connector_pos`, ``connector_label`` and
        ``connector_min_ref``.

    Returns
    -------
    SeamPlan
        A component whose connectors meet another partition's (the same prediction) is a
        seam component; it is resolved by the partition holding its smallest reference
        position (a reference field belongs to one partition, so the rule names one
        partition), or, without reference fields, by the first partition in key order.
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    keys = sorted(connectors)
    part = np.concatenate([np.full(len(connectors[k][0]), i, dtype=np.int64) for i, k in enumerate(keys)] or [np.empty(0, np.int64)])
    pos = np.concatenate([np.asarray(connectors[k][0], np.int64) for k in keys] or [np.empty(0, np.int64)])
    label = np.concatenate([np.asarray(connectors[k][1], np.int64) for k in keys] or [np.empty(0, np.int64)])
    min_ref = np.concatenate([np.asarray(connectors[k][2], np.int64) for k in keys] or [np.empty(0, np.int64)])
    if len(pos) == 0:
        return SeamPlan()
    nodes, node = np.unique(np.stack([part, label], axis=1), axis=0, return_inverse=True)
    node = np.asarray(node).ravel()
    node_min_ref = np.full(len(nodes), NO_REFERENCE, dtype=np.int64)
    np.minimum.at(node_min_ref, node, min_ref)
    # Two connectors of the same prediction join their components.
    order = np.argsort(pos, kind="stable")
    same = np.flatnonzero(pos[order][1:] == pos[order][:-1])
    a, b = node[order][same], node[order][same + 1]
    graph = coo_matrix((np.ones(len(a)), (a, b)), shape=(len(nodes), len(nodes)))
    n_groups, group = connected_components(graph, directed=False)
    size = np.bincount(group, minlength=n_groups)
    given_away: dict = {}
    borrowed: dict = {}
    n_seam = 0
    # Each group's nodes in increasing order, from one sort: a scan of every node per seam
    # component grows as seams x nodes, both proportional to the country.
    by_group = np.argsort(group, kind="stable")
    starts = np.concatenate([[0], np.cumsum(size)])
    for g in np.flatnonzero(size > 1).tolist():
        members = by_group[starts[g] : starts[g + 1]]
        # The owner: smallest reference position, then the first partition in key order.
        owner_node = members[np.lexsort((nodes[members, 0], node_min_ref[members]))[0]]
        owner = keys[int(nodes[owner_node, 0])]
        n_seam += 1
        for m in members.tolist():
            source = keys[int(nodes[m, 0])]
            if source == owner:
                continue
            given_away.setdefault(source, []).append(int(nodes[m, 1]))
            borrowed.setdefault(owner, {}).setdefault(source, []).append(int(nodes[m, 1]))
    given_away = {k: np.unique(np.asarray(v, np.int64)) for k, v in given_away.items()}
    borrowed = {k: {s: np.unique(np.asarray(v, np.int64)) for s, v in sources.items()} for k, sources in borrowed.items()}
    return SeamPlan(given_away, borrowed, n_seam)


def component_results(parts: list[tuple[PairResults, IdArray, IdArray, IdArray]]) -> tuple[PairResults, IdArray, IdArray]:
    """The pairs, reference rows and own predictions of some components of some partitions, as one run.

    Parameters
    ----------
    parts : list of (results, pair_label, pred_label, labels)
        Per source partition: its pairs phase output, its :class:`PartitionLabels`'
        ``pair_label`` and ``pred_label``, and the (sorted) labels to take.

    Returns
    -------
    results : PairResults
        In position order (:func:`~evalcore.engine.pairing.concat_pair_results`); the
        reference rows are those of the pairs taken.
    ref_part, pred_part : ndarray of int64
        Index in ``parts`` of each reference row's and each prediction row's partition.
    """
    taken = []
    for results, pair_label, pred_label, labels in parts:
        pair_rows = np.flatnonzero(np.isin(pair_label, labels))
        ref_rows = np.flatnonzero(np.isin(results.ref_pos, results.pairs.ref_pos[pair_rows]))
        pred_rows = np.flatnonzero(np.isin(pred_label, labels))
        taken.append(results.restrict(pair_rows, ref_rows, pred_rows))
    results, ref_part = concat_pair_results(taken)
    # Every prediction row is one source's own: its partition from the sorted positions.
    pred_source = np.concatenate([np.full(len(t.pred_pos), i, dtype=np.int64) for i, t in enumerate(taken)] or [np.empty(0, np.int64)])
    pred_pos = np.concatenate([t.pred_pos for t in taken] or [np.empty(0, np.int64)])
    pred_part = pred_source[np.argsort(pred_pos, kind="stable")]
    return results, ref_part, pred_part
