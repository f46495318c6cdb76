"""Bayesian neural-network regression on Gal-layout UCI folders: SLANG (L = 1) and Bayes by Backprop, every split.

    python benchmarks/uci.py --data-dir ../shared/datasets/uci --jobs 2 --runs uci-runs --json uci.json

Every folder of ``--data-dir`` holding a Gal-layout data set (``data.txt``, ``index_features.txt``,
``index_target.txt``, ``index_train_K.txt`` / ``index_test_K.txt``) is run on all its splits (or the first
``--splits``), so the script works unchanged on any such collection. Protocol (``../shared/reference/README.md``,
SLANG paper Table 2): one hidden layer of 50 ReLU units, Gaussian likelihood with a fixed noise precision, features
and target standardised with training statistics, metrics in the original units; M = 10, 120 epochs; SLANG with
L = 1, alpha = beta = 0.08 without decay, momentum 0.9, S = 4 (S = 2 and rates 0.005 for sets of more than 5 000
rows, as the authors ran kin8nm, naval and power); BBB with S = 4 (2), Adam at its default rate; bias prior
precision 1e-6; test metrics with ``--eval-samples`` weight samples (the paper's 20).

Hyperparameters from the training part only (``slang fit --tune``, cross-validated held-out log-likelihood). SLANG
(``--slang-tune*``): the prior precision, the noise precision, and the rates lr and beta (the noise precision
jointly with beta: a high noise precision fails with the protocol's fast precision average), each candidate
trained for the full 120 epochs on 4/5 of the training rows and scored on the fifth (one round of 5-fold
cross-validation; the candidates of a sweep train stacked, several times faster than one by one); the final fit
is made ``--slang-restarts`` times (3) from different seeds and the lowest training -ELBO kept, since at high
noise precisions about one SLANG fit in seven from a given seed ends far from the others (training NLL per
example above 2 where the rest reach about -1). BBB (``--bbb-tune*``): the two precisions, 3-fold, 30-epoch tuning
fits. The paper used 30 rounds of Bayesian optimisation with 5 folds and full-length fits for both.

The fits run as a ``slang sweep`` (one ``slang fit`` each, on a local Dask cluster of ``--jobs`` processes or the
cluster at ``--scheduler``); with ``--runs DIR`` their run files stay in DIR and a rerun does only the missing ones.

Reports per data set and method: test RMSE and per-point predictive log-likelihood, mean +- standard error over
splits, beside the paper's (``../shared/reference/slang_table2_uci.csv``, found next to the data directory or given
with ``--paper``, matched by folder name), and the wall time.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import time
from pathlib import Path

import numpy as np

from results import add_sweep_arguments, sweep_results, table_stream, write_json
from slangcli.runfile.io import read_run

LARGE = 5000  # rows above which the authors used S = 2 and rates 0.005


def gal_folders(root: Path) -> list[Path]:
    """The Gal-layout data sets under ``root`` (the folder itself, or its sub-folders)."""
    def is_gal(p: Path) -> bool:
        return (p / "data.txt").is_file() and any(p.glob("index_train_*.txt"))
    if is_gal(root):
        return [root]
    return sorted(p for p in root.iterdir() if p.is_dir() and is_gal(p))


def n_splits(folder: Path) -> int:
    return len(list(folder.glob("index_train_*.txt")))


def read_paper(path: Path) -> dict:
    """``{(gal_folder, method): (rmse, rmse_se, loglik, loglik_se)}``."""
    if not path.exists():
        return {}
    with open(path, newline="") as fh:
        return {(r["gal_folder"], r["method"]): tuple(float(r[k]) for k in ("rmse_mean", "rmse_se", "loglik_mean",
                                                                             "loglik_se"))
                for r in csv.DictReader(fh)}


def fit_options(job: dict) -> dict:
    """The ``slang fit`` options of one (folder, split, method) fit of the protocol."""
    folder, split, method = Path(job["folder"]), job["split"], job["method"]
    rows = sum(1 for _ in open(folder / "data.txt"))
    large = rows > LARGE
    samples = 2 if large else 4
    if method == "slang":
        rate = 0.005 if large else 0.08
        beta = job["slang_beta"] if job["slang_beta"] is not None else rate
        hyper = {"rank": 1, "samples": samples, "lr": rate, "beta": beta, "decay": 0.0, "momentum": 0.9}
    else:
        hyper = {"samples": samples}
    tune = job["tune"][method]
    options = {"data": str(folder), "uci-split": split, "standardize": True, "method": method, **hyper,
               "hidden": "50", "activation": "relu", "likelihood": "gaussian", "batch-size": 10,
               "epochs": job["epochs"], "seed": split,
               # the paper's nearly flat prior on every bias, the hidden layer's too
               "bias-prior-precision": 1e-6, "hidden-bias-prior-precision": 1e-6,
               "eval-samples": job["eval_samples"], "restarts": tune["restarts"],
               # the protocol's fixed noise precision, 1 unless tuned (from 1): not the learned default
               "noise-precision": 1.0}
    if tune["params"]:
        options.update({"tune": tune["params"], "tune-folds": tune["folds"]})
        options.update({f"tune-{k}": tune[k] for k in ("rounds", "epochs") if tune[k] is not None})
    return options


def result_row(job: dict, record: dict, path: Path) -> dict:
    """The script's row of one finished fit: its record in the sweep's table and what its run file chose."""
    run = read_run(path)
    return {"folder": Path(job["folder"]).name, "split": job["split"], "method": job["method"],
            "rmse": record["test_rmse"], "loglik": record["test_loglik"],
            "prior_precision": run.config["prior_precision"], "noise_precision": run.model.noise_precision,
            "lr": run.config["hyper"].get("lr"), "beta": run.config["hyper"].get("beta"),
            "seconds": record["seconds"] if record["seconds"] is not None else run.metrics["fit_seconds"]}


def mean_se(values) -> tuple[float, float]:
    v = np.asarray(values, dtype=float)
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_dir = Path(os.environ.get("SLANG_DATA_DIR", "../shared/datasets")) / "uci"
    p.add_argument("--data-dir", default=str(default_dir), help="a Gal-layout folder or a folder of them")
    p.add_argument("--paper", default=None, help="the paper's Table 2 CSV (default: beside the data directory)")
    p.add_argument("--splits", type=int, default=None, help="only the first N splits of each set")
    p.add_argument("--methods", default="slang,bbb")
    p.add_argument("--epochs", type=int, default=120)
    p.add_argument("--eval-samples", type=int, default=20)
    p.add_argument("--slang-tune", default="prior-precision,noise-precision,lr,beta",
                   help="what SLANG's cross-validation chooses")
    p.add_argument("--slang-tune-folds", type=int, default=5)
    p.add_argument("--slang-tune-rounds", type=int, default=1, help="folds scored")
    p.add_argument("--slang-tune-epochs", type=int, default=None, help="(default: the fit's own length)")
    p.add_argument("--slang-restarts", type=int, default=3,
                   help="final SLANG fits from different seeds, the lowest training -ELBO kept")
    p.add_argument("--bbb-tune", default="prior-precision,noise-precision")
    p.add_argument("--bbb-tune-folds", type=int, default=3)
    p.add_argument("--bbb-tune-rounds", type=int, default=None)
    p.add_argument("--bbb-tune-epochs", type=int, default=30)
    p.add_argument("--bbb-restarts", type=int, default=1)
    p.add_argument("--slang-beta", type=float, default=None,
                   help="SLANG's precision rate beta, or the start of its search (default: the protocol's, equal "
                        "to its rate alpha)")
    add_sweep_arguments(p)
    p.add_argument("--json", default=None, metavar="FILE", help="write the results as JSON ('-' for stdout)")
    return p


def tune_settings(a) -> dict:
    """Per method, how its hyperparameters are tuned, from the parsed options."""
    return {m: {"params": getattr(a, f"{m}_tune"), "folds": getattr(a, f"{m}_tune_folds"),
                "rounds": getattr(a, f"{m}_tune_rounds"), "epochs": getattr(a, f"{m}_tune_epochs"),
                "restarts": getattr(a, f"{m}_restarts")}
            for m in ("slang", "bbb")}


def protocol_job(folder, split: int, method: str, a, tune: dict) -> dict:
    """The job (for :func:`fit_options`) of one tuned fit of the protocol, from the parsed options."""
    return {"folder": str(folder), "split": split, "method": method, "epochs": a.epochs,
            "eval_samples": a.eval_samples, "tune": tune, "slang_beta": a.slang_beta}


def main(argv=None):
    p = build_parser()
    a = p.parse_args(argv)

    root = Path(a.data_dir)
    folders = gal_folders(root) if root.is_dir() else []
    if not folders:
        p.error(f"no Gal-layout data set under {root}")
    # the shared mirror keeps the paper's tables in reference/ beside datasets/: look upwards for it
    candidates = [q / "reference" / "slang_table2_uci.csv" for q in root.resolve().parents]
    paper_path = Path(a.paper) if a.paper else next((c for c in candidates if c.exists()), candidates[0])
    paper = read_paper(paper_path)
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    tune = tune_settings(a)
    jobs = [protocol_job(f, k, m, a, tune)
            for f in folders for k in range(min(n_splits(f), a.splits or n_splits(f))) for m in methods]
    started = time.perf_counter()
    results, swept = sweep_results("uci.py", jobs, fit_options, result_row,
                                   lambda r: f"RMSE {r['test_rmse']:.3f} loglik {r['test_loglik']:.3f} "
                                             f"({r['seconds']:.1f} s)",
                                   runs=a.runs, prefix="uci-runs-", scheduler=a.scheduler, workers=a.jobs)
    wall = time.perf_counter() - started

    table = []
    for f in folders:
        for m in methods:
            rows = [r for r in results if r["folder"] == f.name and r["method"] == m]
            e = {"folder": f.name, "method": m, "splits": len(rows),
                 "seconds": float(sum(r["seconds"] for r in rows))}
            e["rmse"], e["rmse_se"] = mean_se([r["rmse"] for r in rows])
            e["loglik"], e["loglik_se"] = mean_se([r["loglik"] for r in rows])
            ref = paper.get((f.name, "SLANG_L1" if m == "slang" else m.upper()))
            if ref:
                e["paper_rmse"], e["paper_rmse_se"], e["paper_loglik"], e["paper_loglik_se"] = ref
                # within one standard error of the paper's log-likelihood, or better
                e["loglik_within_1se_or_better"] = bool(e["loglik"] >= ref[2] - ref[3])
            table.append(e)

    report = table_stream(a.json)
    print(f"{'data set':16s} {'method':6s} {'RMSE ours':>14s} {'paper':>12s} {'loglik ours':>15s} {'paper':>13s} "
          f"{'ok':>3s} {'time':>7s}", file=report)
    for e in table:
        pr = f"{e['paper_rmse']:.2f}±{e['paper_rmse_se']:.2f}" if "paper_rmse" in e else "-"
        pl = f"{e['paper_loglik']:.2f}±{e['paper_loglik_se']:.2f}" if "paper_loglik" in e else "-"
        ok = ("yes" if e["loglik_within_1se_or_better"] else "no") if "paper_loglik" in e else "-"
        print(f"{e['folder']:16s} {e['method']:6s} {e['rmse']:7.3f}±{e['rmse_se']:.3f} {pr:>12s} "
              f"{e['loglik']:8.3f}±{e['loglik_se']:.3f} {pl:>13s} {ok:>3s} {e['seconds']:6.0f}s", file=report)
    where = f"on {a.scheduler}" if a.scheduler else f"{a.jobs} at a time"
    print(f"wall time {wall:.0f} s ({len(jobs)} fits with tuning, {where}; {swept.skipped} already complete)",
          file=report)
    if a.json:
        out = {"epochs": a.epochs, "eval_samples": a.eval_samples, "slang_beta": a.slang_beta,
               "tune": tune, "jobs": a.jobs, "scheduler": a.scheduler, "wall_seconds": wall,
               "fits_run": swept.ran, "fits_already_complete": swept.skipped,
               "table": table, "runs": results}
        write_json(out, a.json)


if __name__ == "__main__":
    main()
