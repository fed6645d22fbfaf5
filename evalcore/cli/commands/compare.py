"""``evalcore compare``: prediction layers (models) against one reference on the same resamples.

Two forms: several named models (``-p NAME=PATH``, each against a baseline) or the
two-model form ``-p CANDIDATE -i INCUMBENT``; the arguments of each are checked here
before any layer is read.
"""

from __future__ import annotations

import argparse
import time

from evalcore.cli.checks import check_output_file, check_read_columns, check_site_layers
from evalcore.cli.cluster import compare_on_cluster, dashboard_address
from evalcore.cli.parser import metric_options
from evalcore.cli.text import format_comparison
from evalcore.errors import EvalInputError
from evalcore.outputs import check_not_inputs

__all__ = ["compare_command"]


def compare_command(args: argparse.Namespace) -> int:
    """``evalcore compare``: several named models (:func:`evalcore.compare.compare_models`), or the
    two-model form ``-p CANDIDATE -i INCUMBENT`` (:func:`evalcore.compare.compare`)."""
    from evalcore.compare import compare, compare_models
    from evalcore.io import read_layer
    from evalcore.writers import write_json
    from evalcore.options import check_options

    started = time.perf_counter()
    pair = args.incumbent is not None
    if pair:
        if len(args.predicted) != 1:
            raise EvalInputError("-i/--incumbent is the two-model form -p CANDIDATE -i INCUMBENT: give one -p with it, or name every model (-p A=PATH -p B=PATH) without -i.")
        if args.baseline is not None or args.pred_layer:
            raise EvalInputError("--baseline and --pred-layer belong to the form -p NAME=PATH; with -i the incumbent is the baseline.")
        models = [("candidate", args.predicted[0][1]), ("incumbent", args.incumbent)]
        baseline, layers = "incumbent", {"candidate": args.candidate_layer, "incumbent": args.incumbent_layer}
    else:
        models, baseline, layers = _compare_models_arguments(args)
    options = metric_options(args)
    checked = check_options(**options)
    if checked.bootstrap <= 0:
        raise EvalInputError("evalcore compare needs resamples for the deltas' intervals: add --bootstrap N (1000 is usual).")
    check_output_file(args.output, "-o/--output")
    flags = {"candidate": "-p/--candidate", "incumbent": "-i/--incumbent"} if pair else {name: f"-p {name}" for name, _ in models}
    check_not_inputs(
        {**{flags[name]: path for name, path in models}, "-r/--reference": args.reference, "--aoi": args.aoi},
        {"-o/--output": args.output},
        directories=set(),
    )
    check_site_layers(args)
    dashboard_address(args)
    if args.cluster:
        result = compare_on_cluster(args, options, models, baseline, layers, pair)
    else:
        reference = read_layer(args.reference, layer=args.ref_layer, role="reference")
        check_read_columns(args, reference)
        read = {name: read_layer(path, layer=layers.get(name), role=name if pair else f"model {name!r}") for name, path in models}
        if pair:
            result = compare(read["candidate"], read["incumbent"], reference, strata=args.strata_column, size_bins=args.size_bins, **options)
        else:
            result = compare_models(read, reference, baseline=baseline, strata=args.strata_column, size_bins=args.size_bins, **options)
    from evalcore.outputs import OutputSet

    with OutputSet() as outputs:  # a URL is written locally, then put whole
        write_json(outputs.file(args.output), result)
        outputs.commit()
    if not args.quiet:
        print(format_comparison(result))
        print(f"wrote {args.output} in {time.perf_counter() - started:.1f} s")
    return 0


def _compare_models_arguments(args: argparse.Namespace) -> tuple[list[tuple[str, str]], str, dict[str, str]]:
    """The NAME=PATH form: the models, the baseline and the layer names, checked."""
    models = list(args.predicted)
    names = [name for name, _ in models]
    for k, name in enumerate(names):
        if name in names[:k]:
            raise EvalInputError(f"-p/--predicted: two models are named {name!r}; give each model its own NAME (-p NAME=PATH).")
    if len(models) < 2:
        raise EvalInputError(
            "-p/--predicted: evalcore compare needs two or more models (-p A=PATH -p B=PATH), or the two-model form -p CANDIDATE -i INCUMBENT."
        )
    baseline = args.baseline if args.baseline is not None else names[0]
    if baseline not in names:
        raise EvalInputError(f"--baseline {baseline!r} is not a model name; the models are: {', '.join(map(repr, names))}.")
    layers: dict[str, str] = {}
    for name, layer in args.pred_layer:
        if name not in names or name in layers:
            raise EvalInputError(f"--pred-layer {name}={layer}: {name!r} is {'given twice' if name in layers else 'not a model name'}; the models are: {', '.join(map(repr, names))}.")
        layers[name] = layer
    if args.candidate_layer is not None or args.incumbent_layer is not None:
        raise EvalInputError("--candidate-layer and --incumbent-layer belong to the form -p CANDIDATE -i INCUMBENT; use --pred-layer NAME=LAYER.")
    return models, baseline, layers

