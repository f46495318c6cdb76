"""``slang fit``: fit a posterior to a data file and write the run file."""

from __future__ import annotations

import os

import click

from slangcli.cli import main
from slangcli.cli.options import check_delimiter, check_output, invocation
from slangcli.cli.output import emit_json, metric_rows, metrics_table, note, progress_bar
from slangcli.io import write_run
from slangcli.methods import METHODS
from slangcli.models import ACTIVATIONS, LIKELIHOODS
from slangcli.workflow import DataOptions, fit as fit_run


def _target(value):
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return value


@main.command()
@click.argument("data", type=click.Path(path_type=str))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, writable=True, path_type=str),
              help="Run file to write (HDF5).")
@click.option("--format", "fmt", type=click.Choice(["auto", "csv", "libsvm", "idx", "uci"]), default="auto",
              show_default=True, help="Input format of DATA (and --test); a folder is read as a Gal-layout UCI set.")
@click.option("--uci-split", type=click.IntRange(min=0), default=None,
              help="Train/test split K of a Gal-layout UCI folder (index_train_K.txt, index_test_K.txt).")
@click.option("--target", default=None, help="Target column: a header name or a 0-based index (default: last).")
@click.option("--delimiter", default=None, callback=check_delimiter,
              help="CSV delimiter: ',', ';', 'tab' (or '\\t') or 'whitespace' (default: detect).")
@click.option("--header/--no-header", default=None, help="Whether the CSV has a header row (default: detect).")
@click.option("--n-features", type=click.IntRange(min=1), default=None,
              help="LIBSVM width (default: the highest index in the training and test files).")
@click.option("--test", "test_path", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Test data file (same format as DATA).")
@click.option("--test-fraction", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=None,
              help="Hold out this fraction of DATA as the test set.")
@click.option("--split-seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the --test-fraction split.")
@click.option("--standardize/--no-standardize", default=None,
              help="Standardise features with training statistics (stored and reapplied at evaluation). "
                   "Default: on for a UCI folder, off otherwise.")
@click.option("--prior-precision", type=float, default=1.0, show_default=True,
              help="Precision lambda of the Gaussian prior on the weights.")
@click.option("--bias-prior-precision", type=float, default=1e-5, show_default=True,
              help="Prior precision of the bias terms.")
@click.option("--hidden", default="", help="Hidden-layer widths, e.g. 50 or 400,400 (default: none, a linear model).")
@click.option("--activation", type=click.Choice(sorted(ACTIVATIONS)), default="relu", show_default=True,
              help="Activation of the hidden layers.")
@click.option("--likelihood", type=click.Choice(["auto", *LIKELIHOODS]), default="auto", show_default=True,
              help="auto: bernoulli for two label values, categorical for strings or a few integers, "
                   "gaussian (regression) otherwise.")
@click.option("--noise-precision", type=float, default=1.0, show_default=True,
              help="Gaussian likelihood: noise precision tau on the standardised target.")
@click.option("--method", type=click.Choice(sorted(METHODS)), default="slang", show_default=True)
@click.option("--rank", "-L", type=click.IntRange(min=0), default=5, show_default=True,
              help="SLANG rank L of the low-rank part of the precision (0: diagonal).")
@click.option("--samples", "-S", type=click.IntRange(min=1), default=12, show_default=True,
              help="Monte-Carlo weight samples per step.")
@click.option("--batch-size", "-M", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--epochs", type=click.IntRange(min=1), default=None, help="Passes over the training data [200].")
@click.option("--iterations", type=click.IntRange(min=1), default=None, help="Number of steps (instead of --epochs).")
@click.option("--lr", type=float, default=0.05, show_default=True, help="Initial rate alpha_0 of the mean.")
@click.option("--beta", type=float, default=0.05, show_default=True, help="Initial rate beta_0 of the precision.")
@click.option("--decay", type=float, default=0.51, show_default=True,
              help="Rates decay as r_0 / (1 + t^decay) at step t.")
@click.option("--momentum", type=float, default=0.9, show_default=True, help="Momentum of the gradient.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of initialisation, batches and samples.")
@click.option("--eval-samples", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Monte-Carlo samples of the final evaluation (where quadrature does not apply).")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a terminal only).")
@click.option("--json", "as_json", is_flag=True, help="Print the run summary as one JSON object on stdout.")
def fit(data, output, fmt, target, delimiter, header, n_features, test_path, test_fraction, split_seed, standardize,
        uci_split, hidden, activation, likelihood, noise_precision, prior_precision, bias_prior_precision, method,
        rank, samples, batch_size, epochs, iterations, lr, beta,
        decay, momentum, seed, eval_samples, progress, as_json):
    """Fit a Gaussian posterior to DATA and write it, with metrics, to OUTPUT.

    DATA is a CSV-like or LIBSVM file, an MNIST-style IDX images file (its labels file beside it), or a
    Gal-layout UCI folder (with --uci-split K).
    """
    check_output(output, [data, test_path])
    opts = DataOptions(path=data, format=fmt, target=_target(target), delimiter=delimiter, header=header,
                       n_features=n_features, test=test_path, test_fraction=test_fraction, split_seed=split_seed,
                       standardize=os.path.isdir(data) if standardize is None else standardize, uci_split=uci_split)
    hyper = {"rank": rank, "samples": samples, "lr": lr, "beta": beta, "decay": decay, "momentum": momentum}
    with progress_bar(progress, f"{method} L={rank}") as bar:
        run = fit_run(opts, method=method, hyper=hyper, hidden=hidden, activation=activation, likelihood=likelihood,
                      noise_precision=noise_precision, eval_samples=eval_samples, batch_size=batch_size, epochs=epochs, iterations=iterations,
                      seed=seed, prior_precision=prior_precision, bias_prior_precision=bias_prior_precision,
                      command=invocation(), progress=bar, notify=note)
    write_run(output, run)
    m = run.metrics
    metrics_table(f"{output}: {method}, {m['steps']} steps in {m['fit_seconds']:.1f} s", metric_rows(m))
    if as_json:
        emit_json({"output": output, "metrics": {k: m[k] for k in ("test", "train") if k in m},
                   "predictive": m["predictive"], "steps": m["steps"], "fit_seconds": m["fit_seconds"],
                   "config": run.config})
