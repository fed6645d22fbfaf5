"""Classes (SPEC 6.10, seed 004 §5.1 and §5.3): crop types and multi-class evaluation.

With a class column on the reference fields (``class_column``, e.g. ``crop``) and on the
predictions (``pred_class_column``, default the same name), two views of the run, both in
one ``classes`` block of the summary:

* **Classification of the matched fields.** The main matching (section 3) is left as it
  is; each of its matched pairs with a class on both sides is one entry of the confusion
  matrix (rows: reference class, columns: predicted class; counts and the reference
  field's area in hectares). From it: ``overall_accuracy`` (diagonal / entries), per
  class ``producers_accuracy`` (diagonal / row), ``users_accuracy`` (diagonal / column),
  ``recall_correct_class`` (diagonal / reference fields of the class) and
  ``precision_correct_class`` (diagonal / predictions of the class), and Cohen's (1960)
  ``kappa`` of the entries: (p_o − p_e) / (1 − p_e) with p_e = Σ_c row_c · column_c / n².
* **Class-aware matching** (``per_class``). The main matching's rule restricted to the
  pairs whose classes agree. Greedy one-to-one matching decomposes by class (a field and
  a prediction of one class never compete with another class's pairs), so one matching
  over the same-class pairs gives, for every class c, exactly the matching that
  ``evaluate(pred[pred_class == c], ref[ref_class == c])`` makes; its counts, precision,
  recall, F1 and mean IoU are that call's, with section 4's conventions (0.0 when
  undefined), and ``pq``, ``sq``, ``rq`` those of :func:`evalcore.rates.panoptic_quality`.
  ``macro`` averages them over the listed classes (panopticapi's mPQ). With a score
  column, each class with reference fields gets COCO AP on its subsets (the scores
  family's :func:`~evalcore.metrics.scores.coco_true_positives` and
  :func:`~evalcore.metrics.scores.coco_ap`) and ``macro`` their mean (COCO's mAP over
  categories).

Class values are compared as strings: ``str(value)``, and a float holding an integer
as that integer (a column of integers with a null reads as floats: 3.0 is the class
"3"). A null class keeps its row in every class-free key; it is counted in
``count_reference_unclassified`` / ``count_predicted_unclassified`` and left out of
every class key.

Everything is computed once, centrally, from the pairs, the matching and one class per
row (:meth:`Classes.global_values`), like AP: the classes are not known before the data
is read, so they cannot be summed columns. Bootstrap intervals hold both matchings fixed
and weigh every reference field by its draws and every prediction as its home reference
(:attr:`GlobalContext.replicate_draws`), the weights of section 5 and 6.5.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from evalcore.arrays import index_of
from evalcore.bootstrap import percentile_intervals
from evalcore.errors import EvalInputError
from evalcore.matching import match
from evalcore.metrics.base import GlobalContext, MetricFamily, Option, count_rates, ratio
from evalcore.metrics.checks import optional_text
from evalcore.metrics.scores import AP_KEYS, AP_THRESHOLDS, coco_ap, coco_true_positives
from evalcore.pairtable import PairTable
from evalcore.present import OVERALL, Row, Shown, markdown_text, number, with_interval
from evalcore.exact import value_of
from evalcore.rates import panoptic_quality
from evalcore.stats import exact_group_sums

__all__ = [
    "Classes",
    "class_values",
    "class_layer_columns",
    "check_only_nulls",
    "only_nulls_error",
    "class_codes",
    "class_matching",
    "cohen_kappa",
    "class_rates",
    "CLASS_KEYS",
    "MACRO_KEYS",
]

CLASS_KEYS: tuple[str, ...] = ("precision", "recall", "f1", "iou_mean", "pq", "sq", "rq")
"""Per-class rates of the class-aware matching, averaged by ``macro``."""
CLASSIFICATION_KEYS: tuple[str, ...] = ("producers_accuracy", "users_accuracy", "recall_correct_class", "precision_correct_class")
"""Per-class rates of the classification of the matched fields."""
COUNT_KEYS: tuple[str, ...] = ("count_tp", "count_fp", "count_fn", "count_predicted", "count_reference")
MACRO_KEYS: tuple[str, ...] = CLASS_KEYS + AP_KEYS
_EVALUATE_RATES = ("precision", "recall", "f1", "iou_mean")
"""The keys that equal ``evaluate`` on the class subsets: section 4's 0.0 when undefined."""


def class_values(layer: object, column: str, where: str, *, label: str = "class column") -> np.ndarray:
    """The class of every row of a layer as ``str`` (None where null).

    Parameters
    ----------
    layer : GeoDataFrame or DataFrame
    column : str
    where : str
        How messages name the layer.

    Returns
    -------
    ndarray of object, shape (len(layer),)

    Raises
    ------
    EvalInputError
        When the column is missing (the message lists the layer's columns).

    Examples
    --------
    >>> class_values(pd.DataFrame({"c": [3, None, "3", 2.0]}), "c", "layer").tolist()
    ['3', None, '3', '2']
    """
    geometry = getattr(getattr(layer, "geometry", None), "name", None)
    columns = [str(c) for c in getattr(layer, "columns", []) if c != geometry]
    if column not in columns:
        raise EvalInputError(
            f"{label} {column!r} is not a column of the {where}; its columns are: {', '.join(map(repr, columns)) or '(none)'}."
        )
    values = pd.Series(layer[column]).to_numpy(dtype=object)
    missing = pd.isna(pd.Series(values, dtype=object)).to_numpy()
    out = np.full(len(values), None, dtype=object)
    out[~missing] = [_class_text(v) for v in values[~missing]]
    return out


def _class_text(value: object) -> str:
    """``str`` of a class value; a float holding an integer as that integer (3.0 -> "3")."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    if isinstance(value, np.generic):
        value = value.item()
    return str(value)


def class_layer_columns(options: object) -> tuple[str | None, str | None]:
    """The reference's and the predictions' class columns ((None, None) without classes)."""
    column = getattr(options, "class_column", None)
    if column is None:
        return None, None
    return column, options.pred_class_column or column


def check_only_nulls(values: np.ndarray, column: str, where: str, *, label: str = "class column") -> None:
    """Refuse a class column whose every row is null (nothing to evaluate by class).

    A class is a str; anything else (None, or the NaN a frame may turn it into) is null,
    as in :func:`class_codes`.
    """
    if len(values) and not any(isinstance(v, str) for v in values):
        raise only_nulls_error(len(values), column, where, label=label)


def only_nulls_error(n_rows: int, column: str, where: str, *, label: str = "class column") -> EvalInputError:
    """The error of a class column whose ``n_rows`` rows are all null (:func:`check_only_nulls`;
    the command line's check counts them a chunk at a time)."""
    return EvalInputError(
        f"{label} {column!r} of the {where} holds only nulls ({n_rows} rows): give a column with classes, "
        "or run without classes."
    )


def class_codes(ref_class: np.ndarray, pred_class: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The sorted classes of both layers and each row's code among them (-1: null).

    Examples
    --------
    >>> names, r, p = class_codes(np.array(["b", None, "a"], dtype=object), np.array(["c"], dtype=object))
    >>> names, r.tolist(), p.tolist()
    (['a', 'b', 'c'], [1, -1, 0], [2])
    """
    # A class is a str; anything else (None, or the NaN a frame may turn it into) is null.
    names = sorted({v for v in ref_class.tolist() if isinstance(v, str)} | {v for v in pred_class.tolist() if isinstance(v, str)})
    lookup = {name: k for k, name in enumerate(names)}

    def codes(values: np.ndarray) -> np.ndarray:
        return np.array([lookup[v] if isinstance(v, str) else -1 for v in values.tolist()], dtype=np.int64)

    return names, codes(ref_class), codes(pred_class)


def class_matching(pairs: PairTable, same_class: np.ndarray, iou_threshold: float, matching: str) -> np.ndarray:
    """The class-aware matching: the main matching's rule over the pairs whose classes agree.

    Parameters
    ----------
    pairs : PairTable
        Every candidate pair of the run.
    same_class : ndarray of bool
        Per pair, both classes are known and equal.

    Returns
    -------
    ndarray of bool
        Per pair, accepted by the class-aware matching (False for every other pair).
    """
    keep = np.flatnonzero(same_class)
    out = np.zeros(len(pairs), dtype=bool)
    out[keep] = match(pairs.take(keep), iou_threshold, matching)  # the run's matcher, max_weight included
    return out


def cohen_kappa(confusion: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cohen's (1960) kappa of confusion matrices (..., K, K): ``(value, defined)``.

    Undefined without entries or when chance agreement is 1 (one class on both sides).

    Examples
    --------
    >>> [float(v) for v in cohen_kappa(np.array([[2.0, 1.0], [0.0, 3.0]]))]  # p_o = 5/6, p_e = 1/2: 2/3
    [0.6666666666666667, 1.0]
    >>> bool(cohen_kappa(np.array([[4.0]]))[1])
    False
    """
    c = np.asarray(confusion, dtype=np.float64)
    n = c.sum(axis=(-2, -1))
    observed = np.trace(c, axis1=-2, axis2=-1)
    chance = np.einsum("...i,...i->...", c.sum(axis=-1), c.sum(axis=-2))
    n2 = n * n
    with np.errstate(divide="ignore", invalid="ignore"):
        po = np.where(n > 0, observed / np.where(n > 0, n, 1.0), np.nan)
        pe = np.where(n > 0, chance / np.where(n2 > 0, n2, 1.0), np.nan)
        defined = (n > 0) & (pe < 1.0)
        value = np.where(defined, (po - pe) / np.where(defined, 1.0 - pe, 1.0), np.nan)
    return value, defined


def class_rates(t: Mapping[str, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every class key as ``(value, defined)`` from weighted tallies, element-wise over replicates.

    Parameters
    ----------
    t : mapping
        ``n_ref``, ``tp``, ``iou``, ``n_pred``, ``pred_matched`` of shape (..., K) (the
        class-aware matching's tallies per class) and ``confusion`` of shape (..., K, K).

    Returns
    -------
    dict
        Per class (shape (..., K)): :data:`CLASS_KEYS` and :data:`CLASSIFICATION_KEYS`;
        overall (shape (...)): ``overall_accuracy``, ``kappa`` and ``macro.<key>`` for
        :data:`CLASS_KEYS` (the mean over the classes present in the tallies, with
        section 4's 0.0 where a class's rate is undefined, as ``evaluate`` reports it).
    """
    n_ref, tp, iou, n_pred = (np.asarray(t[k], dtype=np.float64) for k in ("n_ref", "tp", "iou", "n_pred"))
    fp = n_pred - np.asarray(t["pred_matched"], dtype=np.float64)
    fn = n_ref - tp
    out: dict[str, tuple[np.ndarray, np.ndarray]] = dict(zip(("precision", "recall", "f1"), count_rates(tp, fp, fn)))
    out["iou_mean"] = ratio(iou, tp)
    pq, sq, rq = panoptic_quality(iou, tp, fp, fn)
    for key, value in (("pq", pq), ("sq", sq), ("rq", rq)):
        out[key] = (value, ~np.isnan(value))
    confusion = np.asarray(t["confusion"], dtype=np.float64)
    diagonal = np.diagonal(confusion, axis1=-2, axis2=-1)
    out["producers_accuracy"] = ratio(diagonal, confusion.sum(axis=-1))
    out["users_accuracy"] = ratio(diagonal, confusion.sum(axis=-2))
    out["recall_correct_class"] = ratio(diagonal, n_ref)
    out["precision_correct_class"] = ratio(diagonal, n_pred)
    out["overall_accuracy"] = ratio(diagonal.sum(axis=-1), confusion.sum(axis=(-2, -1)))
    out["kappa"] = cohen_kappa(confusion)
    present = (n_ref + n_pred) > 0
    n_present = present.sum(axis=-1)
    for key in CLASS_KEYS:
        value, defined = out[key]
        # evaluate's convention on a class's subsets: 0.0 where undefined (section 4).
        shown = np.where(defined, value, 0.0) if key in _EVALUATE_RATES else value
        total = np.where(present, shown, 0.0).sum(axis=-1)
        out[f"macro.{key}"] = ratio(total, n_present)
    return out


def _none(value: float) -> float | None:
    return None if value is None or not np.isfinite(value) else float(value)


def _exact_per_class(codes: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Sums of ``values`` per code in ``range(n)``, exact whatever the order (evalcore.exact)."""
    return value_of(exact_group_sums(np.asarray(values, dtype=np.float64)[:, None], [np.asarray(codes, dtype=np.int64)], n))[:, 0]

class _Run:
    """One run's classes, rows and both matchings, with the weighted tallies of any replicate."""

    def __init__(self, ctx: GlobalContext) -> None:
        options = ctx.options
        preds = ctx.preds
        pairs = ctx.pairs
        self.ref_pos = np.asarray(ctx.ref_pos, dtype=np.int64)
        self.pred_pos = preds.index.to_numpy(np.int64)
        ref_class = np.asarray(ctx.ref_class, dtype=object) if ctx.ref_class is not None else np.full(len(self.ref_pos), None, object)
        pred_class = preds["class"].to_numpy(dtype=object) if "class" in preds.columns else np.full(len(preds), None, object)
        self.ref_class, self.pred_class = ref_class, pred_class
        self.names, self.ref_code, self.pred_code = class_codes(ref_class, pred_class)
        K = self.K = len(self.names)
        pair_ref = index_of(self.ref_pos, pairs.ref_pos)
        pair_pred = index_of(self.pred_pos, pairs.pred_pos)
        rc, pc = self.ref_code[pair_ref], self.pred_code[pair_pred]
        same = (rc >= 0) & (rc == pc)
        self.same = same
        self.class_match = class_matching(pairs, same, options.iou_threshold, options.matching)
        # Tallies per row, to weigh by the replicates' draws.
        m = self.class_match
        self.ref_tp = np.zeros(len(self.ref_pos))
        self.ref_tp[pair_ref[m]] = 1.0
        self.ref_iou = np.zeros(len(self.ref_pos))
        np.add.at(self.ref_iou, pair_ref[m], pairs.iou[m])
        self.pred_matched = np.zeros(len(self.pred_pos))
        self.pred_matched[pair_pred[m]] = 1.0
        # The main matching's classified pairs: the confusion matrix's entries.
        main = np.asarray(ctx.pair_values["is_match"], dtype=bool) & (rc >= 0) & (pc >= 0)
        self.entry_ref_row = pair_ref[main]
        self.entry_cell = rc[main] * K + pc[main]
        self.entry_area_ha = np.asarray(ctx.ref_area_of_pair, dtype=np.float64)[main] / 1e4
        self.pairs, self.pair_ref, self.pair_pred = pairs, pair_ref, pair_pred

    def tallies(self, ref_w: np.ndarray | None = None, pred_w: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The per-class tallies with every reference row and prediction weighed (default 1)."""
        K = self.K
        rw = np.ones(len(self.ref_pos)) if ref_w is None else np.asarray(ref_w, dtype=np.float64)
        pw = np.ones(len(self.pred_pos)) if pred_w is None else np.asarray(pred_w, dtype=np.float64)
        r, p = self.ref_code >= 0, self.pred_code >= 0

        def per_class(codes: np.ndarray, weights: np.ndarray) -> np.ndarray:
            return np.bincount(codes, weights=weights, minlength=K)[:K].astype(np.float64)

        return {
            "n_ref": per_class(self.ref_code[r], rw[r]),
            "tp": per_class(self.ref_code[r], (rw * self.ref_tp)[r]),
            # Summed exactly, as evaluate sums a layer's IoU (evalcore.exact): a class's
            # iou_mean equals evaluate's on the class's subsets to the last bit.
            "iou": _exact_per_class(self.ref_code[r], (rw * self.ref_iou)[r], K),
            "n_pred": per_class(self.pred_code[p], pw[p]),
            "pred_matched": per_class(self.pred_code[p], (pw * self.pred_matched)[p]),
            "confusion": np.bincount(self.entry_cell, weights=rw[self.entry_ref_row], minlength=K * K)[: K * K].reshape(K, K),
        }

    def confusion_area_ha(self) -> np.ndarray:
        K = self.K
        return _exact_per_class(self.entry_cell, self.entry_area_ha, K * K).reshape(K, K)

    def class_ap(self, score: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, np.ndarray] | None]:
        """Per class with reference fields: (prediction rows in score order, their TP flags per
        threshold, the class's reference rows); None for a class without reference fields."""
        out = []
        for k in range(self.K):
            refs = np.flatnonzero(self.ref_code == k)
            if len(refs) == 0:
                out.append(None)
                continue
            rows = np.flatnonzero(self.pred_code == k)
            keep = np.flatnonzero(self.same & (self.ref_code[self.pair_ref] == k))
            order, tp = coco_true_positives(score[rows], self.pred_pos[rows], self.ref_pos[refs], self.pairs.take(keep))
            out.append((rows[order], tp, refs))
        return out


class Classes(MetricFamily):
    name = "classes"
    options = (
        Option(
            "class_column", None,
            "reference column of classes (e.g. crop): confusion matrix, kappa, per-class and macro metrics (default: none)",
            optional_text, annotation=str | None,
        ),
        Option(
            "pred_class_column", None,
            "predicted column of classes (default: the same name as --class-column; needs --class-column)",
            optional_text, annotation=str | None,
        ),
    )

    # Keys inside the classes block (dotted paths): compare pairs them overall with their
    # replicates (global_values "replicates"); the terminal and report lines are bespoke.
    shown = tuple(
        Shown(f"classes.macro.{key}", label, headline=False, compared=OVERALL)
        for key, label in (("pq", "Macro PQ over classes (mPQ)"), ("sq", "Macro SQ over classes"), ("rq", "Macro RQ over classes"),
                           ("f1", "Macro F1 over classes"), ("precision", "Macro precision over classes"),
                           ("recall", "Macro recall over classes"), ("iou_mean", "Macro mean IoU over classes"),
                           ("ap50", "Macro AP50 over classes"), ("ap75", "Macro AP75 over classes"),
                           ("ap50_95", "Macro AP50:95 over classes (COCO mAP)"))
    )

    def enabled(self, options: object) -> bool:
        return options.class_column is not None

    def check_options(self, values: Mapping[str, object]) -> None:
        if values.get("pred_class_column") is not None and values.get("class_column") is None:
            raise ValueError(
                f"pred_class_column (--pred-class-column) {values['pred_class_column']!r} needs class_column (--class-column): "
                "name the reference's class column too."
            )

    def run_keys(self, options: object) -> dict[str, object]:
        ref_column, pred_column = class_layer_columns(options)
        return {"class_column": ref_column, "pred_class_column": pred_column}

    def global_values(self, ctx: GlobalContext) -> dict[str, object]:
        """The ``classes`` block (SPEC 6.10), its intervals and the macro replicates (for ``compare``)."""
        options = ctx.options
        ref_column, pred_column = class_layer_columns(options)
        run = _Run(ctx)
        check_only_nulls(run.ref_class, ref_column, "reference layer")
        check_only_nulls(run.pred_class, pred_column, "predicted layer")
        scored = getattr(options, "score_column", None) is not None
        score = ctx.preds["score"].to_numpy(np.float64) if scored else None
        ap_parts = run.class_ap(score) if scored else []
        tallies = run.tallies()
        point = class_rates(tallies)
        ap_point = self._ap(ap_parts, run, None, None) if scored else {}

        ci: dict[str, list[float]] = {}
        undefined: dict[str, int] = {}
        replicates: dict[str, np.ndarray] = {}
        if ctx.replicate_draws is not None:
            reps: dict[str, list[np.ndarray]] = {}
            for pred_w, ref_w in ctx.replicate_draws():
                values = {k: v for k, (v, _) in class_rates(run.tallies(ref_w, pred_w)).items()}
                if scored:
                    values |= self._ap(ap_parts, run, ref_w, pred_w)
                for k, v in values.items():
                    reps.setdefault(k, []).append(np.asarray(v, dtype=np.float64))
            stacked = {k: np.stack(v) for k, v in reps.items()}
            ci, undefined = percentile_intervals({k: (v, ~np.isnan(v)) for k, v in _flatten(stacked, run.names).items()})
            replicates = {f"classes.{k}": v for k, v in stacked.items() if k.startswith("macro.")}
        block = self._block(run, tallies, point, ap_point, ci, undefined, options)
        return {"keys": {"classes": block}, "replicates": replicates}

    @staticmethod
    def _ap(parts: list, run: _Run, ref_w: np.ndarray | None, pred_w: np.ndarray | None) -> dict[str, np.ndarray]:
        """Per class (shape (K,)) ``ap50``, ``ap75``, ``ap50_95`` and their ``macro.`` means over
        the classes with reference fields (in this replicate)."""
        K = run.K
        ap = np.full((K, len(AP_THRESHOLDS)), np.nan)
        for k, part in enumerate(parts):
            if part is None:
                continue
            rows, tp, refs = part
            n_ref = float(len(refs)) if ref_w is None else float(np.asarray(ref_w)[refs].sum())
            weights = None if pred_w is None else np.asarray(pred_w, dtype=np.float64)[rows]
            ap[k] = coco_ap(tp, n_ref, weights)
        i75 = AP_THRESHOLDS.index(0.75)
        per = {"ap50": ap[:, 0], "ap75": ap[:, i75], "ap50_95": ap.mean(axis=1)}
        out = dict(per)
        for key, values in per.items():
            ok = ~np.isnan(values)
            out[f"macro.{key}"] = np.asarray(values[ok].mean() if ok.any() else np.nan)
        return out

    @staticmethod
    def _block(run: _Run, t: dict, point: dict, ap_point: dict, ci: dict, undefined: dict, options: object) -> dict[str, object]:
        names = run.names
        confusion = t["confusion"]
        per_class: dict[str, dict[str, object]] = {}
        for k, name in enumerate(names):
            tp, n_ref, n_pred = int(t["tp"][k]), int(t["n_ref"][k]), int(t["n_pred"][k])
            entry: dict[str, object] = {}
            for key in _EVALUATE_RATES:
                value, defined = point[key]
                entry[key] = float(value[k]) if defined[k] else 0.0
            entry |= {
                "count_tp": tp,
                "count_fp": n_pred - int(t["pred_matched"][k]),
                "count_fn": n_ref - tp,
                "count_predicted": n_pred,
                "count_reference": n_ref,
            }
            for key in ("pq", "sq", "rq") + CLASSIFICATION_KEYS:
                entry[key] = _none(point[key][0][k])
            for key in AP_KEYS if ap_point else ():
                entry[key] = _none(ap_point[key][k])
            _intervals(entry, ci, undefined, f"per_class.{name}.", CLASS_KEYS + CLASSIFICATION_KEYS + (AP_KEYS if ap_point else ()))
            per_class[name] = entry
        macro: dict[str, object] = {key: _none(point[f"macro.{key}"][0]) for key in CLASS_KEYS}
        macro["n_classes"] = int(((t["n_ref"] + t["n_pred"]) > 0).sum())
        if ap_point:
            macro |= {key: _none(ap_point[f"macro.{key}"]) for key in AP_KEYS}
            macro["n_classes_ap"] = int((t["n_ref"] > 0).sum())
        _intervals(macro, ci, undefined, "macro.", MACRO_KEYS if ap_point else CLASS_KEYS)
        block: dict[str, object] = {
            "classes": list(names),
            "count_reference_unclassified": int((run.ref_code < 0).sum()),
            "count_predicted_unclassified": int((run.pred_code < 0).sum()),
            "confusion": {
                "rows": "reference class",
                "columns": "predicted class",
                "classes": list(names),
                "counts": confusion.astype(np.int64).tolist(),
                "reference_area_ha": run.confusion_area_ha().tolist(),
            },
            "count_matched_classified": int(confusion.sum()),
            "overall_accuracy": _none(point["overall_accuracy"][0]),
            "kappa": _none(point["kappa"][0]),
            "per_class": per_class,
            "macro": macro,
        }
        _intervals(block, ci, undefined, "", ("overall_accuracy", "kappa"))
        worst = worst_class(block, options.min_support)
        block["worst_class"] = None if worst is None else {
            "class": worst[0], "f1": worst[1]["f1"], "count_reference": worst[1]["count_reference"], "min_support": options.min_support,
        }
        return block

    # -- presentation -------------------------------------------------------------------

    def summary_lines(self, metrics: Mapping[str, object]) -> list[str]:
        """The macro values with their intervals and the worst class by F1 (among those with support)."""
        block = metrics.get("classes")
        if not block:
            return []
        macro = block["macro"]
        parts = [f"{label} {with_interval(macro, key)}" for key, label in (("pq", "mPQ"), ("f1", "macro F1"), ("precision", "macro precision"),
                                                                         ("recall", "macro recall"))]
        if "ap50_95" in macro:
            parts.append(f"mAP50:95 {with_interval(macro, 'ap50_95')}")
        lines = [f"classes ({macro['n_classes']}): " + "  ".join(parts) + f";  overall accuracy {number(block['overall_accuracy'])}  "
                 f"kappa {number(block['kappa'])}"]
        worst = block.get("worst_class")
        if worst is not None:
            entry = block["per_class"][worst["class"]]
            lines.append(f"worst class: {worst['class']} F1 {with_interval(entry, 'f1')}  PQ {number(entry['pq'])}  "
                         f"({entry['count_reference']} reference fields)")
        return lines

    def headline_rows(self, metrics: Mapping[str, object]) -> list[Row]:
        block = metrics.get("classes")
        if not block:
            return []
        macro = block["macro"]
        rows = [Row(f"classes.macro.{k}", label, macro.get(k), (macro.get("ci") or {}).get(k))
                for k, label in (("pq", "Macro PQ (mPQ) over classes"), ("f1", "Macro F1 over classes"))]
        rows.append(Row("classes.kappa", "Cohen's kappa of the matched fields' classes", block.get("kappa"), (block.get("ci") or {}).get("kappa")))
        return rows

    def report_lines(self, metrics: Mapping[str, object]) -> list[str]:
        """The confusion matrix and the per-class table (Markdown)."""
        block = metrics.get("classes")
        if not block:
            return []

        def num(value: object) -> str:
            return number(value, missing="–", text=markdown_text)

        names = block["classes"]
        counts = block["confusion"]["counts"]
        lines = [
            "## Classes",
            "",
            f"Classes from {markdown_text(metrics.get('class_column'))} (predicted: {markdown_text(metrics.get('pred_class_column'))}); "
            f"{block['count_reference_unclassified']} reference fields and {block['count_predicted_unclassified']} predictions "
            f"without a class. Overall accuracy {num(block['overall_accuracy'])}, kappa {num(block['kappa'])} over "
            f"{block['count_matched_classified']} matched fields.",
            "",
            "| reference \\ predicted | " + " | ".join(markdown_text(n) for n in names) + " |",
            "|---|" + "---:|" * len(names),
        ]
        for name, row in zip(names, counts):
            lines.append(f"| {markdown_text(name)} | " + " | ".join(str(v) for v in row) + " |")
        lines += [
            "",
            "| class | reference | predicted | precision | recall | F1 | PQ | producer's acc. | user's acc. |",
            "|---|---:|---:|---|---|---|---|---|---|",
        ]
        for name, e in block["per_class"].items():
            lines.append(
                f"| {markdown_text(name)} | {e['count_reference']} | {e['count_predicted']} | {num(e['precision'])} | {num(e['recall'])} | "
                f"{num(e['f1'])} | {num(e['pq'])} | {num(e['producers_accuracy'])} | {num(e['users_accuracy'])} |"
            )
        return lines + [""]


def worst_class(block: Mapping[str, object], min_support: int) -> tuple[str, Mapping[str, object]] | None:
    """The class of lowest F1 among those with at least ``min_support`` reference fields (ties: first name).

    Like the worst group (SPEC 6.3), a class with fewer reference fields is never the
    worst; None when no class has enough.
    """
    candidates = [(e["f1"], name, e) for name, e in block.get("per_class", {}).items() if e["count_reference"] >= max(int(min_support), 1)]
    if not candidates:
        return None
    f1, name, entry = min(candidates, key=lambda c: (c[0], c[1]))
    return name, entry


def _flatten(stacked: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
    """Replicate arrays keyed by their place in the block: ``per_class.<name>.<key>``, ``macro.<key>``, ``<key>``."""
    out = {}
    for key, values in stacked.items():
        if values.ndim == 2:  # (replicates, classes)
            for k, name in enumerate(names):
                out[f"per_class.{name}.{key}"] = values[:, k]
        else:
            out[key] = values
    return out


def _intervals(entry: dict, ci: dict, undefined: dict, prefix: str, keys: tuple[str, ...]) -> None:
    """Put the intervals of ``keys`` (found under ``prefix``) into ``entry['ci']`` (SPEC 5.1's layout)."""
    found = {k: ci[prefix + k] for k in keys if prefix + k in ci}
    if not found:
        return
    entry["ci"] = {k: [_none(v) for v in bounds] for k, bounds in found.items()}
    missing = {k: undefined[prefix + k] for k in keys if undefined.get(prefix + k)}
    if missing:
        entry["ci_n_undefined"] = missing
