"""The bootstrap's AP and aurc by score ranges (issue 29): any cut into ranges gives the bits
of the whole run.

A replicate weighs each prediction by a small whole number (its home reference's or its
unit's draw count), so the weighted cumulative counts are exact in any grouping: pass 1
(:func:`replicate_counts`) gives each range's counts, their prefix sums go to pass 2
(:func:`replicate_shares`), and the shares merge by max and by digit sums. The values must
equal, to the bit, :func:`replicate_ap_and_aurc` (the single process) on the whole.
"""

from __future__ import annotations

import numpy as np
import pytest

from evalcore.metrics.score_ranges import (
    REPLICATE_CHUNK_BYTES, ReplicateCounts, ScoreRows, range_of, replicate_counts, replicate_shares, replicate_values, splitters,
)
from evalcore.metrics.scores import _RiskGroups, _weighted_curve, coco_ap, replicate_ap_and_aurc


def _run(seed: int, n: int = 400, n_rep: int = 23, n_strata: int = 2):
    """Rows in score order (many tied scores), each replicate's weights and reference count."""
    rng = np.random.default_rng(seed)
    score = np.round(rng.random(n), 1)  # ties, also across any cut
    pos = rng.permutation(n).astype(np.int64) * 3
    tp = np.sort(rng.random((10, n)) < 0.6, axis=0)[::-1]  # nested like real thresholds': fewer at higher IoU
    error = rng.random(n) < 0.3
    group = rng.integers(-1, n_strata, n).astype(np.int64)
    rows = ScoreRows(pos, score, tp, error, group).in_score_order()
    weights = rng.integers(0, 4, (n_rep, n)).astype(np.float64)
    weights[2] = 0.0  # a replicate drawing nothing: every aurc undefined, AP 0
    n_refs = rng.integers(1, 90, n_rep).astype(np.float64)
    n_refs[5] = 0.0  # a replicate without reference fields: AP undefined
    return rows, weights, n_refs, 1 + n_strata


def _single_process(rows: ScoreRows, weights: np.ndarray, n_refs: np.ndarray, n_groups: int):
    """:func:`replicate_ap_and_aurc` as the whole-run resolve calls it, on rows in input order."""
    back = np.argsort(rows.pos)  # input order: the single process sorts by score itself
    score, pos = rows.score[back], rows.pos[back]
    tp, error, group = rows.tp[:, back], rows.error[back], rows.group[back]
    order = np.lexsort((pos, -score))
    strata = [f"s{k}" for k in range(n_groups - 1)]
    home = np.arange(len(pos))
    ref_strata = np.array([strata[g] if g >= 0 else None for g in group], dtype=object)
    groups = _RiskGroups.of(score, ~error, home, ref_strata, strata)
    assert np.array_equal(groups.order, order)
    w = weights[:, back]

    def stream():
        yield from zip(w, n_refs)

    return replicate_ap_and_aurc(stream, tp[:, order], order, groups, True), (w, order, groups, tp)


def _by_ranges(rows: ScoreRows, weights: np.ndarray, n_refs: np.ndarray, n_groups: int, cuts: np.ndarray, chunk_bytes: int):
    which = range_of(rows.score, cuts)
    ranges = [np.flatnonzero(which == k) for k in range(len(cuts) + 1)]
    counts = [replicate_counts(rows.take(r), weights[:, r], n_groups, chunk_bytes) for r in ranges]
    before, total = [], ReplicateCounts.zero(len(weights), n_groups)
    for c in counts:
        before.append(total)
        total = total + c
    shares = [replicate_shares(rows.take(r), weights[:, r], b, n_refs, chunk_bytes) for r, b in zip(ranges, before)]
    merged = shares[-1]
    for s in shares[-2::-1]:  # merged in any order
        merged = s + merged
    return replicate_values(merged, total, n_refs)


@pytest.mark.parametrize("n_ranges", [1, 2, 3, 4])
def test_replicates_by_ranges_have_the_bits_of_the_whole(n_ranges):
    rows, weights, n_refs, n_groups = _run(n_ranges)
    (ap, aurc), _ = _single_process(rows, weights, n_refs, n_groups)
    cuts = splitters(rows.score, n_ranges)
    if n_ranges == 4:
        cuts = np.array([2.0, cuts[0], 0.55, cuts[-1]])  # an empty range first (above every score) and a cut between ties
    got_ap, got_aurc = _by_ranges(rows, weights, n_refs, n_groups, cuts, chunk_bytes=8 * len(rows) * 5)
    assert np.array_equal(got_ap, ap, equal_nan=True)
    assert np.array_equal(got_aurc, aurc, equal_nan=True)
    assert np.isnan(ap[5]).all() and (ap[2] == 0.0).all() and np.isnan(aurc[2]).all()
    assert np.isfinite(ap).sum() > 100 and np.isfinite(aurc).sum() > 40


def test_the_single_process_replicates_are_the_per_replicate_functions():
    """AP: :func:`coco_ap` (pycocotools' arithmetic) per replicate, to the bit; aurc: ``_weighted_curve``'s."""
    rows, weights, n_refs, n_groups = _run(7, n_strata=3)
    (ap, aurc), (w, order, groups, tp) = _single_process(rows, weights, n_refs, n_groups)
    expected_ap = np.array([coco_ap(tp[:, order], r, wb[order]) for wb, r in zip(w, n_refs)])
    assert np.array_equal(ap, expected_ap, equal_nan=True)
    expected_aurc = np.array([[_weighted_curve(groups.error[m], wb[order][m], last)[2]
                               for m, last in zip(groups.members, groups.last)] for wb in w])
    assert np.array_equal(aurc, expected_aurc, equal_nan=True)


def test_an_empty_range_and_integer_weights():
    rows, weights, n_refs, n_groups = _run(11, n=60, n_rep=7)
    none = rows.take(np.empty(0, np.int64))
    before = ReplicateCounts.zero(7, n_groups)
    assert np.array_equal(replicate_counts(none, np.zeros((7, 0), np.uint8), n_groups).group_n, np.zeros((7, n_groups)))
    empty = replicate_shares(none, np.zeros((7, 0), np.uint8), before, n_refs)
    whole = replicate_shares(rows, weights.astype(np.uint16), before, n_refs)
    total = replicate_counts(rows, weights.astype(np.uint8), n_groups)
    a = replicate_values(empty + whole, total, n_refs)
    b = replicate_values(replicate_shares(rows, weights, before, n_refs), total, n_refs)
    assert all(np.array_equal(x, y, equal_nan=True) for x, y in zip(a, b))


def _counts_by_loops(rows: ScoreRows, weights: np.ndarray, n_groups: int) -> tuple[list, list, list, list]:
    """The counts as the definition reads, in Python integers: per replicate, every prediction's weight
    added to the thresholds it is a true (or false) positive at, to the overall group and its stratum."""
    n_thr = rows.tp.shape[0]
    tp, fp, group_n, group_errors = [], [], [], []
    for w in weights.tolist():
        t, f, gn, ge = [0] * n_thr, [0] * n_thr, [0] * n_groups, [0] * n_groups
        for k, wk in enumerate(w):
            for i in range(n_thr):
                if rows.tp[i, k]:
                    t[i] += wk
                else:
                    f[i] += wk
            for g in [0] + ([1 + int(rows.group[k])] if rows.group[k] >= 0 else []):
                gn[g] += wk
                ge[g] += wk * int(rows.error[k])
        tp.append(t), fp.append(f), group_n.append(gn), group_errors.append(ge)
    return tp, fp, group_n, group_errors


def test_replicate_counts_hand_worked():
    """Three predictions, two replicates, one stratum: counted by hand."""
    tp = np.zeros((10, 3), dtype=bool)
    tp[:4, 0] = True   # the first is a true positive at the four lowest thresholds
    tp[:, 2] = True    # the third at every threshold
    rows = ScoreRows(np.array([5, 1, 9]), np.array([0.9, 0.5, 0.2]), tp, np.array([False, True, False]), np.array([0, -1, 0]))
    weights = np.array([[2, 1, 0], [0, 3, 1]], dtype=np.uint8)
    got = replicate_counts(rows, weights, 2)
    assert got.tp[0].tolist() == [2.0] * 4 + [0.0] * 6 and got.fp[0].tolist() == [1.0] * 4 + [3.0] * 6
    assert got.tp[1].tolist() == [1.0] * 10 and got.fp[1].tolist() == [3.0] * 10
    assert got.group_n.tolist() == [[3.0, 2.0], [4.0, 1.0]]
    assert got.group_errors.tolist() == [[1.0, 0.0], [3.0, 0.0]]


@pytest.mark.parametrize("chunk_bytes", [1, 8 * 5 * 3, 2**25])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.float64])
def test_replicate_counts_are_the_definitions_sums(chunk_bytes, dtype):
    """Any block of rows, any weight type: the exact whole-number sums of the definition."""
    rows, weights, _, n_groups = _run(3, n=97, n_rep=7, n_strata=3)
    weights = (weights * 37).astype(dtype)  # large enough that float32 or wrapped integers would show
    got = replicate_counts(rows, weights, n_groups, chunk_bytes)
    expected = _counts_by_loops(rows, weights, n_groups)
    for name, want in zip(("tp", "fp", "group_n", "group_errors"), expected):
        assert getattr(got, name).tolist() == [[float(v) for v in r] for r in want], name


@pytest.mark.parametrize("bad", [0.5, -1.0, 2.0**52])
def test_replicate_counts_refuse_weights_that_are_not_small_whole_numbers(bad):
    rows, weights, _, n_groups = _run(4, n=20, n_rep=7)
    weights[1, 7] = bad
    with pytest.raises(ValueError, match="whole numbers"):
        replicate_counts(rows, weights, n_groups)


def _aurc_digits_by_definition(error, weights, members, member_start, last, retained_before, errors_before):
    """The aurc terms of every replicate and group, each written by :func:`evalcore.exact.digits`
    and the digits summed in Python integers."""
    from evalcore.exact import N_DIGITS, digits

    out = np.zeros((len(weights), len(member_start) - 1, N_DIGITS))
    for b, w in enumerate(weights):
        for g in range(len(member_start) - 1):
            retained = retained_before[b, g]
            errors = errors_before[b, g]
            previous = retained
            terms = []
            for j in range(member_start[g], member_start[g + 1]):
                k = members[j]
                retained += w[k]
                errors += w[k] * error[k]
                if last[j]:
                    risk = errors / retained if retained > 0.0 else 0.0
                    terms.append((retained - previous) * risk)
                    previous = retained
            d = digits(np.array(terms)).astype(np.int64) if terms else np.zeros((0, N_DIGITS), np.int64)
            out[b, g] = [sum(int(x) for x in d[:, i]) for i in range(N_DIGITS)]
    return out


def _exact_value(digit_sums):
    """``sum_k D_k 2**(24 k - 72)`` of a digit vector, times 2**72, as a Python integer."""
    assert all(float(d).is_integer() and abs(d) < 2.0**53 for d in digit_sums)
    return sum(int(d) << (24 * k) for k, d in enumerate(digit_sums))


def test_aurc_digits_kernel_keeps_the_value_across_its_blocks_of_terms():
    """More than 2**15 terms in a group (the kernel cuts its two 48-bit sums into digits
    every 2**15 terms, so that they never reach 2**63): the value is still the definition's."""
    from evalcore._score_kernels import _replicate_aurc_digits
    from evalcore.exact import _UNITS
    from evalcore.metrics.score_ranges import group_members

    rng = np.random.default_rng(5)
    n = 2**15 * 2 + 1234
    score = np.sort(rng.random(n))[::-1]
    error = (rng.random(n) < 0.3).astype(np.float64)
    weights = rng.integers(0, 4, (2, n)).astype(np.uint8)
    members, member_start, last = group_members(np.full(n, -1, dtype=np.int64), score, 1)
    before = np.zeros((2, 1))
    got = _replicate_aurc_digits(error, weights, members, member_start, last, before, before, np.asarray(_UNITS))
    expected = _aurc_digits_by_definition(error, weights.astype(np.float64), members, member_start, last, before, before)
    assert [_exact_value(v) for v in got.reshape(-1, 6)] == [_exact_value(v) for v in expected.reshape(-1, 6)]


def test_aurc_digits_kernel_is_the_definition_with_zero_and_huge_weights():
    """The kernel's digit sums (kept in registers, a weight of 0 not skipped, digits 4 and 5
    only for terms of 2**24 or more, digits 3 to 0 summed as two numbers of 48 bits and cut
    by bits) have exactly the value of the definition's: terms from weights of 0, of a few
    and of tens of millions (a term above 2**24, so digits 4 and 5 are used), ties and none.
    The digits themselves may differ (a carry from digit 2 into digit 3), not their value."""
    from evalcore._score_kernels import _replicate_aurc_digits
    from evalcore.exact import _UNITS
    from evalcore.metrics.score_ranges import group_members

    rng = np.random.default_rng(11)
    n, n_rep, n_groups = 300, 9, 3
    score = np.sort(np.round(rng.random(n), 2))[::-1]
    error = (rng.random(n) < 0.4).astype(np.float64)
    group = rng.integers(-1, n_groups - 1, n).astype(np.int64)
    weights = rng.integers(0, 3, (n_rep, n)).astype(np.float64)
    weights[3, rng.integers(0, n, 5)] = 3.0e7  # terms of about 2**24 and above
    weights[4] = 0.0
    members, member_start, last = group_members(group, score, n_groups)
    retained_before = rng.integers(0, 50, (n_rep, n_groups)).astype(np.float64)
    errors_before = np.floor(retained_before * rng.random((n_rep, n_groups)))
    got = _replicate_aurc_digits(error, weights, members, member_start, last, retained_before, errors_before,
                                 np.asarray(_UNITS))
    expected = _aurc_digits_by_definition(error, weights, members, member_start, last, retained_before, errors_before)
    assert got.shape == expected.shape
    assert [_exact_value(v) for v in got.reshape(-1, got.shape[-1])] == [_exact_value(v) for v in expected.reshape(-1, got.shape[-1])]
    assert np.array_equal(got[..., 4:], expected[..., 4:])  # the large terms' digits, made one at a time
    assert (got[3, :, 4] != 0).any()  # the large terms did reach digit 4
    assert (got[4] == 0).all() and (got[0, :, 3] != 0).any()


def test_counts_in_their_smallest_type():
    from evalcore.metrics.score_ranges import as_counts

    assert as_counts(np.array([[0.0, 3.0, 255.0]])).dtype == np.uint8
    assert as_counts(np.array([[0.0, 256.0]])).dtype == np.uint16
    assert as_counts(np.array([[70_000]], dtype=np.int64)).dtype == np.uint32
    for bad in ([[0.5, 1.0]], [[-1.0, 2.0]], [[np.nan, 1.0]], [[2.0**33]]):
        kept = as_counts(np.array(bad))
        assert kept.dtype == np.float64 and np.array_equal(kept, np.array(bad), equal_nan=True)
    u = np.array([[1, 2]], dtype=np.uint32)
    assert as_counts(u) is u
    assert as_counts(np.array([[1.0, 2.0]])).tolist() == [[1, 2]]


def test_the_envelope_kernel_reads_counts_of_any_type_and_refuses_fractions():
    from evalcore._score_kernels import _replicate_envelope
    from evalcore.metrics.score_ranges import EPS, NO_POINT, REC_THRS

    rows, weights, n_refs, _ = _run(13, n=300, n_rep=9)
    flags = np.ascontiguousarray(rows.tp, dtype=np.float64)
    before = np.floor(np.random.default_rng(2).random((9, 10)) * 7)
    outs = [_replicate_envelope(flags, np.ascontiguousarray(weights.astype(t)), n_refs, before, before, REC_THRS, EPS, NO_POINT)
            for t in (np.float64, np.uint8, np.uint16, np.int64)]
    assert all(o.tobytes() == outs[0].tobytes() for o in outs[1:])
    assert (outs[0] != NO_POINT).sum() > 1000
    fractional = weights.copy()
    fractional[3, 7] = 0.5
    with pytest.raises(ValueError, match="whole numbers"):
        _replicate_envelope(flags, fractional, n_refs, before, before, REC_THRS, EPS, NO_POINT)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.float64])
@pytest.mark.parametrize("shape", [(0, 7), (1, 1), (63, 65), (130, 200), (3, 1000)])
def test_the_tiled_transposition_is_the_transpose(dtype, shape):
    from evalcore._score_kernels import _transposed

    a = np.random.default_rng(sum(shape)).integers(0, 250, shape).astype(dtype)
    got = _transposed(a)
    assert got.dtype == a.dtype and got.flags.c_contiguous and got.shape == shape[::-1]
    assert got.tobytes() == np.ascontiguousarray(a.T).tobytes()
    assert np.array_equal(_transposed(a[::2, 1:]), a[::2, 1:].T)  # any strides


@pytest.mark.parametrize("chunk_bytes", [1, 2_000, REPLICATE_CHUNK_BYTES])
def test_weights_stored_by_row_give_the_bits_of_weights_by_replicate(chunk_bytes):
    """A score range's weights are stored rows x replicates and handed transposed: both
    passes read them in tiles or row blocks, with the bits of the same weights laid out
    replicates x rows."""
    rows, weights, n_refs, n_groups = _run(29, n=700, n_rep=70)
    counts = weights.astype(np.uint8)  # (replicates, rows), C order
    stored = np.ascontiguousarray(counts.T)  # as a range file holds them
    from evalcore.bootstrap import _by_row

    assert _by_row(stored.T) and not _by_row(counts)  # the two paths of both passes
    want = replicate_counts(rows, counts, n_groups, chunk_bytes)
    got = replicate_counts(rows, stored.T, n_groups, chunk_bytes)
    for name in ("tp", "fp", "group_n", "group_errors"):
        assert getattr(got, name).tobytes() == getattr(want, name).tobytes()
    before = ReplicateCounts.zero(70, n_groups)
    a = replicate_shares(rows, counts, before, n_refs, chunk_bytes)
    b = replicate_shares(rows, stored.T, before, n_refs, chunk_bytes)
    assert a.envelope.tobytes() == b.envelope.tobytes() and a.aurc_digits.tobytes() == b.aurc_digits.tobytes()
