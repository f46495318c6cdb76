"""``slang plot``: figures of run files (matplotlib, the optional extra ``plot``)."""

from __future__ import annotations

import functools
import os

import click
import numpy as np

from slangcli.cli.options import BINS, SAMPLES, SEED, check_output
from slangcli.cli.output import Command, emit_json, needs_stdout, note
from slangcli.errors import FormatError, MissingExtra

KINDS = ("training", "calibration", "spectrum", "posterior", "sweep")
FORMATS = (".png", ".pdf", ".svg")
INSTALL = "slang plot needs matplotlib, an optional extra: pip install 'slangcli[plot]'"


def _figures():
    """The drawing module, or None when matplotlib is not installed (imported here, not at start-up, so that the
    other commands neither need matplotlib nor pay for importing it)."""
    # (the figures are drawn on Agg canvases, whatever the backend: MPLBACKEND is left out of matplotlib's import,
    # where a value it does not know, MPLBACKEND=bogus, ended in a ValueError traceback)
    backend = os.environ.pop("MPLBACKEND", None)
    try:
        from slangcli.plot import figures
    except ImportError as exc:
        if (exc.name or "").split(".")[0] != "matplotlib":
            raise
        return None
    finally:
        if backend is not None:
            os.environ["MPLBACKEND"] = backend
    return figures


# the options that say how one kind of figure is drawn: given with another kind, they are refused (they were ignored)
APPLIES_TO = {"data": ("calibration",), "bins": ("calibration",), "samples": ("calibration",),
              "seed": ("calibration",), "metric": ("sweep",), "param": ("sweep",), "block": ("posterior",),
              "top": ("spectrum",), "log": ("training", "sweep")}


@click.command(cls=Command)
@click.argument("runs", nargs=-1, required=True, metavar="RUN.h5|DIR...", type=click.Path(readable=False, path_type=str))
@click.option("--kind", type=click.Choice(KINDS), required=True,
              help="training: the training record per epoch or solver iteration; calibration: reliability "
                   "diagram (classification) or interval coverage (regression); spectrum: explained variance per "
                   "singular value of each weight matrix's standard deviations; posterior: means, variances and "
                   "covariances against --reference; sweep: --metric against a swept parameter, one line per "
                   "method.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="Figure to write: .png, .pdf or .svg.")
@click.option("--reference", metavar="EXACT.h5", type=click.Path(readable=False, dir_okay=False, path_type=str), default=None,
              help="posterior: the run to compare against (e.g. exact-full), same model and training data.")
@click.option("--data", metavar="DATA", type=click.Path(readable=False, path_type=str), default=None,
              help="calibration: score on this data file (default: each run's own test data).")
@click.option("--bins", type=BINS, default=None,
              help="calibration: equal-width confidence bins (default: the 15 stored at fit time).")
@click.option("--samples", "-S", type=SAMPLES, default=None,
              help="calibration: Monte-Carlo weight samples when predictions are recomputed.  [default: as slang "
                   "evaluate's, those of each run's stored scores]")
@click.option("--seed", type=SEED, default=None,
              help="calibration: seed of those samples.  [default: as slang evaluate's]")
@click.option("--metric", default=None,
              help="sweep: nll, accuracy, error, ece, rmse, loglik, elbo, fit_seconds, or a dotted path into the "
                   "run's metrics (e.g. test.coverage.0.9). Default: nll, or rmse for regression.")
@click.option("--param", default=None,
              help="sweep: the swept setting (rank, prior_precision, lr, ...; default: the one that varies "
                   "besides the method, seed and split).")
@click.option("--block", type=click.IntRange(min=2), default=64, show_default=True,
              help="posterior: covariances drawn among this many weights (the first ones).")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True,
              help="spectrum: singular values shown per weight matrix.")
@click.option("--label", "labels", multiple=True,
              help="Legend label of each run, in order (repeat the option; runs after the last one given keep their "
                   "own label).")
@click.option("--title", default=None, help="Figure title (default: one naming what is shown).")
@click.option("--dpi", type=click.IntRange(min=20, max=1200), default=200, show_default=True,
              help="Pixels per inch of a PNG (a paper column is 3.4 in wide).")
@click.option("--log", "log", type=click.Choice(("auto", "none", "x", "y", "xy")), default="auto",
              show_default=True, help="training, sweep: logarithmic axes (auto: where values span decades).")
@click.option("--json", "as_json", is_flag=True, callback=needs_stdout,
              help="Print what was drawn (the figure, its kind and runs) as one JSON object on stdout.")
def plot(runs, kind, output, reference, data, bins, samples, seed, metric, param, block, top, labels, title, dpi, log,
         as_json):
    """Draw a figure of the runs in RUN.h5 files (a directory stands for every run file under it).

    \b
    slang plot a.h5 b.h5 --kind training -o train.png
    slang plot run.h5 --kind calibration -o reliability.pdf
    slang plot bbb-k2.h5 --kind spectrum -o spectrum.png
    slang plot slang.h5 mf.h5 --kind posterior --reference exact.h5 -o posterior.png
    slang plot SWEEP_DIR --kind sweep --metric nll -o sweep.svg
    """
    if os.path.splitext(output)[1].lower() not in FORMATS:
        raise click.BadParameter(f"{output}: the figure's name must end in .png, .pdf or .svg", param_hint="'-o'")
    if (reference is not None) != (kind == "posterior"):
        raise click.UsageError("--reference is required by --kind posterior, and only by it")
    ctx = click.get_current_context()
    for name, kinds in APPLIES_TO.items():
        if kind not in kinds and ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE:
            flag = next(opt for param in ctx.command.params if param.name == name for opt in param.opts
                        if opt.startswith("--"))
            raise click.UsageError(f"{flag} applies to --kind {' and '.join(kinds)}, not to --kind {kind}")
    figures = _figures()
    if figures is None:
        raise MissingExtra(INSTALL)
    from slangcli.plot import plotdata

    check_output(output, [*runs, reference, data])
    loaded = plotdata.load_runs(runs, notify=note)
    names = plotdata.labels_for(loaded, labels)
    if kind == "training":
        curves = [plotdata.training_curve(run, label, path) for (path, run), label in zip(loaded, names)]
        draw = functools.partial(figures.training_figure, curves, title=title, log=log)
    elif kind == "calibration":
        items = [plotdata.calibration(run, path, label, data, bins=bins, samples=samples, seed=seed)
                 for (path, run), label in zip(loaded, names)]
        if len({type(it) for it in items}) > 1:
            raise click.UsageError("calibration: mix of classification and regression runs; plot them apart")
        draw = functools.partial(figures.calibration_figure, items, title=title)
    elif kind == "spectrum":
        spectra = [plotdata.spectrum(run, label, path) for (path, run), label in zip(loaded, names)]
        if len({tuple(s.shapes) for s in spectra}) > 1:
            raise click.UsageError("spectrum: the runs' networks differ in shape; plot them apart")
        draw = functools.partial(figures.spectrum_figure, spectra, top=top, title=title)
    elif kind == "posterior":
        ref = plotdata.load_runs([reference])[0][1]
        comparisons = [plotdata.compare_posterior(run, path, label, ref, reference, block)
                       for (path, run), label in zip(loaded, names)]
        summary = plotdata.summarize_posterior(ref, plotdata.method_label(ref), block, run_name=reference)
        draw = functools.partial(figures.posterior_figure, summary, comparisons, title=title)
    else:
        if metric is None:
            metric = "rmse" if loaded[0][1].model.likelihood == "gaussian" else "nll"
        result = plotdata.sweep(loaded, metric, param)
        draw = functools.partial(figures.sweep_figure, result, plotdata.metric_label(metric), title=title,
                                 log=log)
    _draw_and_save(draw, figures, output, dpi, [path for path, _ in loaded] + ([reference] if reference else []))
    note(f"wrote {output}")
    if as_json:
        emit_json({"output": output, "kind": kind, "runs": [path for path, _ in loaded], "labels": list(names),
                   **({"reference": reference} if reference else {}), **({"data": data} if data else {}),
                   **({"metric": metric, "series": [series.label for series in result.series]}
                      if kind == "sweep" else {})})


def _draw_and_save(draw, figures, output, dpi, run_names) -> None:
    """Draw the figure and write it. The values drawn are finite (plotdata checks what it computes), but values
    near float64's limits (variances of 1e250, a log axis spanning 300 decades) overflow matplotlib's tick and
    layout arithmetic: NumPy's warnings stay quiet, and an overflow is one line naming the run files."""
    try:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            figures.save_figure(draw(), output, dpi)
    except OverflowError as exc:
        raise FormatError(f"{', '.join(run_names)}: values too large to draw in a figure (matplotlib: {exc})") \
            from None
