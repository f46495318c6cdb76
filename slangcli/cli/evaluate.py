"""``slang evaluate``: score a saved posterior."""

from __future__ import annotations

import click

from slangcli.cli.options import BINS, SAMPLES, SEED
from slangcli.cli.output import (Command, calibration_table, checkpoint_note, emit_json, metric_rows, metrics_table,
                                 needs_stdout, note, predictive_said, progress_bar, unused_draws)
from slangcli.data.columns import LAYOUTS
from slangcli.data.readers import MISSING_POLICIES
from slangcli.predictive import conformal
from slangcli.predictive.evaluation import evaluate as evaluate_run
from slangcli.predictive.metrics import PREDICTIVES, drawn
from slangcli.runfile.io import read_run


@click.command(cls=Command)
@click.argument("run_file", metavar="RUN.h5", type=click.Path(readable=False, dir_okay=False, path_type=str))
@click.argument("data", required=False, type=click.Path(readable=False, path_type=str))
@click.option("--predictive", type=click.Choice(PREDICTIVES), default="auto", show_default=True,
              help="Posterior predictive: exact 1-D quadrature (logistic regression; 'auto' picks it there) "
                   "or Monte Carlo.")
@click.option("--samples", "-S", type=SAMPLES, default=None,
              help="Monte-Carlo weight samples.  [default: those of the run's stored scores: the fit's --eval-samples, "
                   "1000 unless it was given, or slang compress --evaluate's --samples]")
@click.option("--seed", type=SEED, default=None,
              help="Seed of the Monte-Carlo samples.  [default: that of the run's stored scores, the fit's --seed or "
                   "slang compress --evaluate's, so that the run's own test data get the scores it stores]")
@click.option("--bins", type=BINS, default=15, show_default=True,
              help="Equal-width confidence bins of the expected calibration error (classification).")
@click.option("--reference", "reference_file", metavar="OTHER.h5", default=None,
              type=click.Path(readable=False, dir_okay=False, path_type=str),
              help="A run of the same model on the same training data: also report the symmetric KL divergence "
                   "between the two posteriors and both directed KLs.")
@click.option("--missing", type=click.Choice(MISSING_POLICIES), default=None,
              help="A row of DATA with a missing value: an error, left out, or imputed as the fit would (a row "
                   "without its target is left out) (default: as in the fit).")
@click.option("--header/--no-header", default=None,
              help="Whether a CSV DATA file has a header row.  [default: as the fit was told, else detected; a first "
                   "row holding every feature name of the run is one]")
@click.option("--layout", type=click.Choice(LAYOUTS), default=None,
              help="A CSV file without a header row holds the training file's columns (full) or the model's "
                   "features alone (features), then the target; needed only when its width fits both.")
@click.option("--json", "as_json", is_flag=True, callback=needs_stdout, help="Print the scores as one JSON object on stdout.")
def evaluate(run_file, data, predictive, samples, seed, bins, reference_file, missing, header, layout,
             as_json):
    """Score the posterior in RUN.h5 on DATA (default: the run's own test data).

    Reports, under the posterior predictive, test NLL (nats per example) and accuracy for classification, or
    RMSE and per-point log-likelihood (original units) for regression; and the training -ELBO / N. Calibration:
    the expected calibration error over --bins confidence bins (classification), or the fraction of test targets
    inside the central 50%, 90% and 95% predictive intervals (regression). With --reference, the KL divergences
    KL(run || reference), KL(reference || run) and their mean, the symmetric KL.
    """
    if data is None and (header is not None or layout is not None or missing is not None):
        flag = "--header/--no-header" if header is not None else "--layout" if layout is not None else "--missing"
        raise click.UsageError(f"{flag} applies to a DATA file; the run's own test data are read as the fit read them")
    run = read_run(run_file)
    if said := checkpoint_note(run, run_file):
        note(said)
    reference = read_run(reference_file) if reference_file is not None else None
    with progress_bar(None, "evaluate"):
        out = evaluate_run(run, run_file, data, predictive=predictive, samples=samples, seed=seed, bins=bins,
                           reference=reference, reference_name=reference_file, missing=missing, layout=layout,
                           header=header, notify=note)
    if said := unused_draws(samples, seed, out["predictive"]):
        note(said + " (--predictive mc uses them)")
    if run.calibration and out["predictive"] == "mc":
        differs = conformal.predictive_differs(run.calibration, out["samples"], out["seed"])
        if differs:
            note(f"calibrated coverage: {differs}")
    if (out.get("test") or {}).get("calibrated_infinite"):
        note(f"calibrated coverage: {conformal.too_few(run.calibration['n'], run.model.likelihood)}")
    draws = drawn(run.posterior, out["samples"]) if out["samples"] else None
    how = predictive_said(out["predictive"], out["samples"], draws, out["seed"], getattr(run.posterior, "n_members", 1))
    metrics_table(f"{run_file} ({how})", metric_rows(out))
    calibration_table(out)
    if as_json:
        emit_json({"run": run_file, "status": run.status,
                   "metrics": {k: out[k] for k in ("test", "train", "reference") if k in out},
                   "predictive": out["predictive"], "samples": out["samples"],
                   "draws": draws,
                   "seed": out["seed"] if out["samples"] else None, "data": out["data"]})
