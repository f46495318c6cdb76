"""``slang compress``: rank-k SVD truncation of a posterior's standard deviations, written as k-tied runs."""

from __future__ import annotations

import os

import click
from rich.table import Table

from slangcli.cli.options import SAMPLES, SEED, check_output, invocation
from slangcli.cli.output import Command, emit_json, needs_stdout, note, stderr
from slangcli.compress.runs import compress as compress_run
from slangcli.compress.runs import parse_ranks, rank_outputs
from slangcli.runfile.io import read_run, write_runs

SPARK = " ▁▂▃▄▅▆▇█"
SHOWN = 8  # singular values shown per layer


def _bar(fraction: float) -> str:
    return SPARK[min(len(SPARK) - 1, int(round(fraction * (len(SPARK) - 1))))]


def spectrum_table(layers, members: int = 1) -> Table:
    """Explained variance per singular value of each weight matrix: the first ones in percent, and a sparkline
    of the first SHOWN (one character each, full height = 100 %); a mixture's first member's (of ``members``)."""
    which = f" (member 1 of a mixture of {members}; every member's is in the files)" if members > 1 else ""
    table = Table(title=f"explained variance per singular value of the posterior standard deviations{which}",
                  title_justify="left", header_style="bold")
    for name in ("layer", "m x n", "1", "2", "3", f"first {SHOWN}"):
        table.add_column(name, justify="left" if name in ("layer", f"first {SHOWN}") else "right", no_wrap=True)
    for l, c in enumerate(layers):
        ev = c.explained_variance
        cells = [f"{100 * ev[i]:.3g} %" if i < ev.size else "" for i in range(3)]
        table.add_row(str(l + 1), f"{c.shape[0]} x {c.shape[1]}", *cells, "".join(_bar(x) for x in ev[:SHOWN]))
    return table


def results_table(source: dict, results) -> Table:
    """One row per posterior: variational parameters (and % of the source's), the largest relative
    reconstruction error of a layer, floored entries, and the scores when evaluated."""
    table = Table(title=f"k-tied compression of {source['path']} ({source['posterior']})", title_justify="left",
                  header_style="bold")
    scored = "scores" in source
    regression = scored and "rmse" in source["scores"].get("test", {})
    columns = ["rank", "params", "%", "max err", "floored"]
    if scored:
        columns += ["RMSE", "loglik"] if regression else ["acc", "NLL"]
        columns.append("-ELBO/N")
    for name in columns:
        table.add_column(name, justify="right", no_wrap=True)

    def score_cells(scores):
        if not scored:
            return []
        test, train = scores.get("test", {}), scores.get("train", {})
        keys = ("rmse", "loglik") if regression else ("accuracy", "nll")
        elbo = train.get("neg_elbo_per_example")
        return [f"{test[k]:.4f}" for k in keys] + ["-" if elbo is None else f"{elbo:.4f}"]

    table.add_row("source", str(source["params"]), "100.0", "0", "0", *score_cells(source.get("scores", {})))
    for r in results:
        after = r.run.compression["params_after"]
        table.add_row(str(r.rank), str(after), f"{100 * after / source['params']:.1f}",
                      f"{max(c.relative_error for c in r.all_layers):.3g}",
                      str(sum(c.n_floored for c in r.all_layers)),
                      *score_cells(r.scores or {}))
    return table


@click.command(cls=Command)
@click.argument("run_file", metavar="RUN.h5", type=click.Path(readable=False, dir_okay=False, path_type=str))
@click.option("--rank", "-k", "ranks", required=True, metavar="K[,K...]",
              help="Rank k of each weight matrix's standard deviations; several, comma-separated, write one file "
                   "each (OUT-k1.h5, OUT-k2.h5, ...). A layer with min(m, n) < k keeps its full rank.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, writable=True, path_type=str),
              help="Run file to write (HDF5); with several ranks, the base name of the files.")
@click.option("--evaluate", is_flag=True,
              help="Also score the source and every compressed posterior on the run's test data (accuracy and NLL, "
                   "or RMSE and log-likelihood) and training -ELBO / N.")
@click.option("--samples", "-S", type=SAMPLES, default=100, show_default=True,
              help="Monte-Carlo weight samples of --evaluate (the k-tied paper's Table 2 uses 100).")
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="Seed of the --evaluate samples (the same for every posterior: common random numbers).")
@click.option("--json", "as_json", is_flag=True, callback=needs_stdout, help="Print the spectrum and results as one JSON object on stdout.")
def compress(run_file, ranks, output, evaluate, samples, seed, as_json):
    """Compress the posterior in RUN.h5 to k-tied posteriors: for each weight matrix, the rank-k truncated SVD of
    its matrix of posterior standard deviations (floored at 1e-6 of its largest entry); means and bias standard
    deviations unchanged.

    Mean-field posteriors use their standard deviations, SLANG and full Gaussians their marginal standard
    deviations. A mixture of posteriors (slang fit --members) is compressed member by member. Each output records the source's sha256, the explained variance of every singular value, the
    relative reconstruction error per layer, and the variational parameter counts before and after.
    """
    rank_list = parse_ranks(ranks)
    if output in ("", "-"):  # (the names of several ranks are made from it: -k1, -k2 would be written instead)
        check_output(output, [run_file])
    outputs = rank_outputs(output, rank_list)
    for path in outputs:
        check_output(path, [run_file])
        if os.path.isdir(path):  # a derived name (OUT-kK.h5) is not checked by click's dir_okay=False
            raise click.BadParameter(f"{path} is a directory", param_hint="'-o'")
    run = read_run(run_file)
    source, results = compress_run(run, run_file, rank_list, outputs, evaluate=evaluate, samples=samples, seed=seed,
                                   command=invocation(), notify=note)
    write_runs([(r.path, r.run) for r in results])
    stderr.print(spectrum_table(results[0].layers, len(results[0].member_layers or [None])))
    stderr.print(results_table(source, results))
    if as_json:
        spectrum = [{"layer": l + 1, "index": l, "shape": list(c.shape), "singular_values": c.singular_values,
                     "explained_variance": c.explained_variance} for l, c in enumerate(results[0].layers)]
        emit_json({"source": source, "spectrum": spectrum, "floor_relative": results[0].run.compression[
            "floor_relative"], "outputs": [{"rank": r.rank, "path": r.path, **{k: r.run.compression[k] for k in (
                "params_before", "params_after", "layers")}, "metrics": r.scores} for r in results]})
