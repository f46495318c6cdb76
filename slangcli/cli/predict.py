"""``slang predict``: per-example predictions with their uncertainty."""

from __future__ import annotations

import os

import click
import numpy as np
from click.core import ParameterSource

from slangcli.cli.options import FloatRange, SAMPLES, SEED, check_output, invocation
from slangcli.cli.output import (Command, check_stdout, checkpoint_note, emit_json, needs_stdout, note, predictive_said,
                                 progress_bar, unused_draws)
from slangcli.data.columns import LAYOUTS
from slangcli.data.readers import sha256_file
from slangcli.data.sources import PREDICT_MISSING
from slangcli.predictive import conformal
from slangcli.predictive.evaluation import predict as predict_run
from slangcli.predictive.tables import GZIP_SUFFIX, HDF5_SUFFIXES, csv_header, write_predictions
from slangcli.runfile.io import read_run


@click.command(cls=Command)
@click.argument("run_file", metavar="RUN.h5", type=click.Path(readable=False, dir_okay=False, path_type=str))
@click.argument("data", type=click.Path(readable=False, path_type=str))
@click.option("-o", "--output", required=True, metavar="OUT", type=click.Path(path_type=str),
              help="Where to write: OUT.csv (CSV), OUT.csv.gz (gzip-compressed CSV), OUT.h5 or OUT.hdf5 (HDF5 "
                   "datasets), or - (CSV on stdout).")
@click.option("--samples", "-S", type=SAMPLES, default=None,
              help="Monte-Carlo weight samples (networks and regression; logistic regression is exact).  [default: "
                   "those of the run's stored scores: the fit's --eval-samples, 1000 unless it was given, or slang "
                   "compress --evaluate's --samples]")
@click.option("--seed", type=SEED, default=None,
              help="Seed of the Monte-Carlo weight samples.  [default: that of the run's stored scores: the fit's "
                   "--seed, or slang compress --evaluate's]")
@click.option("--interval", type=FloatRange(0.0, 1.0, min_open=True, max_open=True), default=0.95,
              show_default=True, help="Probability of the central predictive interval (regression), and the "
                                      "level of a calibrated run's intervals or prediction sets (fit --calibrate).")
@click.option("--missing", type=click.Choice(PREDICT_MISSING), default=None,
              help="A row of DATA with a missing value: kept, its predictions empty; left out (the row column "
                   "says which rows are there); an error; or imputed as the fit would (the training rows' mean or "
                   "most frequent value).  [default: impute when the fit imputed, else keep]")
@click.option("--header/--no-header", default=None,
              help="Whether a CSV DATA file has a header row.  [default: as the fit was told, else detected; a first "
                   "row holding every feature name of the run is one]")
@click.option("--layout", type=click.Choice(LAYOUTS), default=None,
              help="A CSV file without a header row holds the training file's columns (full) or the model's "
                   "features alone (features), with or without the target; needed only when its width fits both.")
@click.option("--json", "as_json", is_flag=True, callback=needs_stdout, help="Print a summary as one JSON object on stdout.")
def predict(run_file, data, output, samples, seed, interval, missing, header, layout,
            as_json):
    """Predict every example of DATA with the posterior in RUN.h5, with its uncertainty.

    \b
    row: the 0-based data row (after any header) predicted; of a UCI folder, the row of its data.txt.
    Classification: p_<label> per class, predicted (label), entropy_total (predictive entropy),
      entropy_aleatoric (expected entropy), entropy_epistemic (mutual information), in nats.
    Regression: mean, std_total, std_aleatoric, std_epistemic, lower_<level>, upper_<level> (the exact quantiles
      of the Monte-Carlo predictive mixture), in the target's units.
    A run fitted with --calibrate adds its split-conformal intervals, calibrated_lower_<level> and
      calibrated_upper_<level> (regression), or prediction sets, calibrated_set_<level>_<label> (1 for the
      classes in the set) and calibrated_set_size_<level> (classification), and states their guarantee.
    Plus target, when DATA carries the target column. A CSV file's columns are matched to the model's features
    by header name (other columns are ignored); without a header row, by position, as the training file's
    columns or the model's features alone, with or without the target.
    """
    if output == "-" and as_json:
        raise click.UsageError("-o - writes the predictions on stdout; --json would mix a summary into them")
    if output == "-":
        check_stdout("the predictions")
    else:
        _check_format(output)
        check_output(output, [run_file, data])
    run = read_run(run_file)
    if said := checkpoint_note(run, run_file, "predictions"):
        note(said)
    with progress_bar(None, "predict"):
        predictions = predict_run(run, run_file, data, samples=samples, seed=seed, interval=interval,
                                  missing=missing, layout=layout, header=header, notify=note)
    # which run made them, by its bytes (its path may be refitted or overwritten), and how
    predictions.info.update(run_sha256=sha256_file(run_file), command=invocation())
    write_predictions(output, predictions)
    info, arrays = predictions.info, predictions.arrays
    if said := unused_draws(samples, seed, info["predictive"]):
        note(said)
    if info["likelihood"] != "gaussian" and not info.get("calibration") and \
            click.get_current_context().get_parameter_source("interval") == ParameterSource.COMMANDLINE:
        note(f"--interval {interval:g} not used: a classification run has no intervals, and this one no "
             "calibrated prediction sets (slang fit --calibrate) whose level it would set")
    how = predictive_said(info["predictive"], info["samples"], info["draws"], info["seed"],
                          getattr(run.posterior, "n_members", 1))
    where = "stdout" if output == "-" else output
    rows, empty = info["data"]["rows"], info["data"].get("rows_missing", 0)
    kept = f"; {empty} row{'s' if empty > 1 else ''} of {rows} left empty" if empty else ""
    note(f"{rows - empty} predictions of {data} ({how}) written to {where}{kept}")
    # means over the rows predicted (a row left empty for a missing value holds NaN)
    mean = {name: float(np.nanmean(values)) for name, values in arrays.items() if name.startswith(("entropy", "std"))}
    if "entropy_total" in arrays:
        note(f"mean entropy {mean['entropy_total']:.4g} nats: aleatoric {mean['entropy_aleatoric']:.4g}, "
             f"epistemic {mean['entropy_epistemic']:.4g}")
    else:
        note(f"mean predictive std {mean['std_total']:.4g}: aleatoric {mean['std_aleatoric']:.4g}, "
             f"epistemic {mean['std_epistemic']:.4g} (mean over examples)")
    if info.get("calibration"):
        note(conformal.guarantee(info["calibration"], info["likelihood"], info["samples"], info["seed"]))
    if as_json:
        hdf5 = output.lower().endswith(HDF5_SUFFIXES)
        emit_json({"output": output, "status": run.status, "format": "hdf5" if hdf5 else "csv",
                   **({"compressed": "gzip"} if output.lower().endswith(GZIP_SUFFIX) else {}), **info,
                   "columns": list(arrays) if hdf5 else csv_header(predictions), "classes": predictions.classes})


# names of formats predict does not write: such an OUT would hold CSV under the name of another format
OTHER_FORMATS = (".json", ".jsonl", ".ndjson", ".parquet", ".pq", ".feather", ".arrow", ".xls", ".xlsx", ".npy",
                 ".npz", ".pkl", ".pickle", ".tsv", ".zip", ".bz2", ".xz", ".zst")


def _check_format(output: str) -> None:
    """Refuse an OUT named for a format predict does not write (``-o out.json`` silently held CSV)."""
    suffix = os.path.splitext(output.lower())[1]
    if suffix in OTHER_FORMATS:
        raise click.BadParameter(f"{output!r}: predict writes CSV (OUT.csv, OUT.csv.gz, - for stdout) or HDF5 "
                                 f"(OUT.h5, OUT.hdf5), not {suffix[1:]}", param_hint="'-o'")
