"""A metric family defined here, in the test, and registered: nothing else changes.

The toy family counts reference fields larger than an option's threshold and the
predictions homed in them, and reports their share. Registering it must give a new
option (library keyword, validation, CLI flag, flow parameter), new summary keys in
every group, and bootstrap intervals, without touching any other module.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import evalcore
from evalcore.metrics.registry import registered
from evalcore.metrics.base import NULL, GroupView, MetricFamily, Option, PredContext, RefContext, ratio
from evalcore.metrics.checks import positive
from tests.common import UTM, X0, Y0, layer, square


class LargeFields(MetricFamily):
    name = "large_fields"
    options = (Option("large_field_ha", 1.5, "fields larger than this many hectares are large (default 1.5)", positive, parse=float, annotation=float),)

    def columns(self, options):
        return ("n_large", "n_pred_in_large")

    def reference_columns(self, ctx: RefContext):
        large = ctx.fields["area_m2"].to_numpy() > ctx.options.large_field_ha * 1e4
        return {"n_large": large.astype(np.float64)}

    def prediction_columns(self, ctx: PredContext):
        # Each prediction adds 1 to its home; the reference side decides nothing here, so
        # the count is of all homed predictions of fields, filtered in finalize below.
        return {"home": {"n_pred_in_large": np.ones(len(ctx.preds))}}

    def finalize(self, s, options):
        return {"large_share": ratio(s["n_large"], s["n_ref"])}

    def interval_keys(self, options):
        return ("large_share",)

    def summarize(self, g: GroupView):
        return {"count_large": g.count("n_large"), "large_share": g.point("large_share", NULL)}


def _layers():
    # Three fields: 1 ha, 4 ha, 1 ha; each with an identical prediction.
    refs = [square(X0, Y0, 100), square(X0 + 500, Y0, 200), square(X0 + 1_000, Y0, 100)]
    return layer(refs, UTM), layer(refs, UTM)


def test_a_registered_family_adds_its_keys_everywhere():
    pred, ref = _layers()
    with registered(LargeFields()):
        m = evalcore.evaluate(pred, ref, strata=["a", "b", "b"], bootstrap=20)
        assert m["count_large"] == 1 and m["large_share"] == pytest.approx(1 / 3)
        assert m["per_stratum"]["a"]["count_large"] == 0 and m["per_stratum"]["a"]["large_share"] == 0.0
        assert m["per_stratum"]["b"]["count_large"] == 1 and m["per_stratum"]["b"]["large_share"] == 0.5
        lo, hi = m["bootstrap"]["ci"]["large_share"]
        assert 0.0 <= lo <= 1 / 3 <= hi <= 1.0
        assert m["per_stratum"]["a"]["ci"]["large_share"] == [0.0, 0.0]
        # Its option: a keyword of evaluate, validated by its own check.
        assert evalcore.evaluate(pred, ref, large_field_ha=5.0)["count_large"] == 0
        with pytest.raises(ValueError, match="large_field_ha"):
            evalcore.evaluate(pred, ref, large_field_ha=-1.0)
    # Unregistered again: the keys and the option are gone.
    m = evalcore.evaluate(pred, ref)
    assert "count_large" not in m
    with pytest.raises(TypeError, match="large_field_ha"):
        evalcore.evaluate(pred, ref, large_field_ha=5.0)


def test_a_registered_family_gets_a_cli_flag_and_a_flow_parameter():
    from evalcore import cli

    with registered(LargeFields()):
        parser = cli.build_parser()
        args = parser.parse_args(["evaluate", "-p", "p.parquet", "-r", "r.parquet", "-o", "m.json", "--large-field-ha", "3"])
        assert cli.metric_options(args)["large_field_ha"] == 3.0
        assert "--large-field-ha" in parser._subparsers._group_actions[0].choices["evaluate"].format_help()


def test_a_family_registered_before_the_flows_are_imported_is_a_flow_parameter():
    """The flow parameters are generated when flows.params is imported (a pydantic model)."""
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "from evalcore.metrics.registry import FAMILIES\n"
        "from tests.unit.metrics.test_registry import LargeFields\n"
        "FAMILIES.append(LargeFields())\n"
        "from flows.params import EvaluateParams\n"
        "p = EvaluateParams(predicted='p', reference='r', output_dir='o', large_field_ha=3.0)\n"
        "assert p.options().large_field_ha == 3.0\n"
        "try:\n"
        "    EvaluateParams(predicted='p', reference='r', output_dir='o', large_field_ha=-3.0)\n"
        "except ValueError as exc:\n"
        "    assert 'large_field_ha' in str(exc)\n"
        "else:\n"
        "    raise SystemExit('not validated')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parents[3], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_an_empty_group_of_a_registered_family_is_null():
    pred, ref = _layers()
    with registered(LargeFields()):
        m = evalcore.evaluate(pred, ref, size_bins=[0, 2, 10, 100])
    assert math.isnan(m["per_size_class"]["10-100"]["large_share"])
    assert m["per_size_class"]["2-10"]["large_share"] == 1.0
