"""Reproduce Table 1 of the SLANG paper: Bayesian logistic regression on four LIBSVM sets, every method.

    python benchmarks/logreg_table1.py --data-dir ../shared/datasets --splits 5 --epochs 2000 --json out.json

Protocol (``../shared/reference/README.md``): per data set, random 50/50 train/test splits seeded by the split
number (a1a: its own train and test files, one split); prior precision 1e-5 (australian), 1 (breast-cancer),
2.8072 (a1a), 25 (USPS 3 vs 5), the bias always 1e-5; S = 12 weight samples, alpha_0 = beta_0 = 0.05, decay
0.51, minibatch 32 / 32 / 128 / 64. Methods: mean-field natural gradient with the empirical Fisher (``mf-ef``) and
the Hessian (``mf-hessian``), the exact mean-field optimum (``exact-mf``), SLANG with L = 1, 2, 5, 10, the
full-Gaussian natural gradient (``full-ef``, ``full-hessian``) and the exact full-Gaussian optimum
(``exact-full``). Minibatches visit each epoch in a fresh random order (the authors drew them with replacement).

Metrics per split, then mean and standard error (std / sqrt(#splits)) over splits:

- ``elbo``: -ELBO / N_train of the final posterior, exact by one-dimensional quadrature. The authors' ELBO
  leaves out the bias prior's log-determinant, -0.5 log(1e-5) / N_train; their value plus that offset is shown
  beside ours (``authors_elbo_true``), so like is compared with like.
- ``nll``: test NLL in nats per example under the exact predictive.
- ``kl``: symmetric KL (KL(p||q) + KL(q||p)) / 2 to the ``exact-full`` posterior of the same split.

The table prints ours beside the authors' (``../shared/reference/slang_table1_authors.csv``, found next to the
data directory or given with ``--authors``), and for ELBO and NLL how many combined standard errors
sqrt(se_ours^2 + se_authors^2) apart they are (a1a has one split, so there the relative difference is shown).
USPS 3 vs 5 is a substitute for the authors' file (see the data mirror's README): compare, but do not tune to it.
The fits run as a ``slang sweep`` (one ``slang fit`` each) on a local Dask cluster of ``--jobs`` processes (each
fit uses one core at these sizes) or on the cluster at ``--scheduler``; ``--runs DIR`` keeps their run files, and a
rerun with the same DIR does only the missing fits.
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
from slangcli.gaussian.divergence import symmetric_kl
from slangcli.runfile.io import read_run

BIAS_PRIOR = 1e-5
SETS = {  # name: (prior precision, minibatch size, test file or None for 50/50 splits, authors' row label)
    "australian_scale": (1e-5, 32, None, "Australian"),
    "breast-cancer_scale": (1.0, 32, None, "Breast Cancer"),
    "a1a": (2.8072, 128, "a1a.t", "a1a"),
    "usps_3vs5": (25.0, 64, None, "USPS 3vs5"),
}
# our method name, its hyperparameters, the authors' column
METHODS = [
    ("mf-ef", {}, "Mean-Field EF"),
    ("mf-hessian", {}, "Mean-Field Hessian"),
    ("exact-mf", {}, "Mean-Field Exact"),
    ("slang", {"rank": 1}, "SLANG L = 1"),
    ("slang", {"rank": 2}, "SLANG L = 2"),
    ("slang", {"rank": 5}, "SLANG L = 5"),
    ("slang", {"rank": 10}, "SLANG L = 10"),
    ("full-ef", {}, "Full-Gaussian EF"),
    ("full-hessian", {}, "Full-Gaussian Hessian"),
    ("exact-full", {}, "Full-Gaussian Exact"),
]
STEP_HYPER = {"samples": 12, "lr": 0.05, "beta": 0.05, "decay": 0.51}


def read_authors(path: Path) -> dict:
    """``{(row label, metric): {column: (mean, se)}}`` from the authors' two-header-row CSV."""
    with open(path, newline="") as fh:
        rows = [[c.strip() for c in r] for r in csv.reader(fh)]
    # the group labels of the first row are centred over their columns, so assign groups by order instead:
    # mean-field columns come before the "L = k" (SLANG) ones, full-Gaussian after
    sub = rows[1]
    columns, seen_slang = [], False
    for j in range(2, len(sub)):
        if sub[j].endswith("(mean)"):
            name = sub[j][: -len("(mean)")].strip()
            if name.startswith("L ="):
                seen_slang, group = True, "SLANG"
            else:
                group = "Full-Gaussian" if seen_slang else "Mean-Field"
            columns.append((j, f"{group} {name}"))
    # each data set is three rows (ELBO, NLL, KL) with its name on one of them (the middle one)
    body = [r for r in rows[2:] if len(r) > 2 and r[1]]
    out = {}
    for lo in range(0, len(body), 3):
        block = body[lo : lo + 3]
        label = next(r[0] for r in block if r[0])
        for r in block:
            out[(label, r[1])] = {name: (float(r[j]), float(r[j + 1])) for j, name in columns}
    return out


def method_label(method: str, hyper: dict) -> str:
    return f"slang-L{hyper['rank']}" if method == "slang" else method


def fit_options(job: dict) -> dict:
    """The ``slang fit`` options of one (data set, split, method) fit of the protocol."""
    libsvm = Path(job["data_dir"]) / "libsvm"
    lam, batch, test, _ = SETS[job["set"]]
    method, hyper = job["method"], dict(job["hyper"])
    options = {"data": str(libsvm / job["set"]), "format": "libsvm", "method": method, "seed": job["split"],
               "prior-precision": lam, "bias-prior-precision": BIAS_PRIOR, "likelihood": "bernoulli",
               "standardize": False}  # the paper's protocol: the files' features as given
    if test:
        options["test"] = str(libsvm / test)
    else:
        options.update({"test-fraction": 0.5, "split-seed": job["split"]})
    if not method.startswith("exact"):  # the step methods' schedule and rates
        hyper.update(STEP_HYPER)
        options.update({"batch-size": batch, "epochs": job["epochs"]})
    return {**options, **hyper}


def result_row(job: dict, record: dict, path: Path) -> dict:
    """The script's row of one finished fit: its metrics from the sweep's table, its posterior (for the KL)."""
    run = read_run(path)
    return {"set": job["set"], "split": job["split"], "method": method_label(job["method"], job["hyper"]),
            "elbo": record["train_neg_elbo_per_example"], "nll": record["test_nll"],
            "accuracy": record["test_accuracy"], "n_train": record["train_n"],
            "seconds": record["seconds"] if record["seconds"] is not None else run.metrics["fit_seconds"],
            "posterior": run.posterior}


def mean_se(values) -> tuple[float, float]:
    v = np.asarray(values, dtype=float)
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=os.environ.get("SLANG_DATA_DIR", "../shared/datasets"))
    p.add_argument("--authors", default=None, help="the authors' Table 1 CSV (default: beside the data dir)")
    p.add_argument("--datasets", default=",".join(SETS), help="comma-separated subset of " + ", ".join(SETS))
    p.add_argument("--splits", type=int, default=20, help="random splits per data set (a1a always has one)")
    p.add_argument("--epochs", type=int, default=10000, help="epochs of every iterative method")
    p.add_argument("--methods", default=None, help="comma-separated subset (e.g. slang-L1,mf-ef,exact-full)")
    add_sweep_arguments(p)
    p.add_argument("--json", default=None, metavar="FILE", help="write the table as JSON ('-' for stdout)")
    a = p.parse_args(argv)

    sets = [s.strip() for s in a.datasets.split(",") if s.strip()]
    for s in sets:
        if s not in SETS:
            p.error(f"unknown data set {s!r}")
    methods = METHODS
    if a.methods:
        wanted = set(a.methods.split(","))
        methods = [m for m in METHODS if method_label(m[0], m[1]) in wanted]
        if not any(m[0] == "exact-full" for m in methods):
            methods.append(next(m for m in METHODS if m[0] == "exact-full"))  # the KL reference
    authors_path = Path(a.authors) if a.authors else Path(a.data_dir).resolve().parent / "reference" / \
        "slang_table1_authors.csv"
    authors = read_authors(authors_path) if authors_path.exists() else {}

    jobs = [{"data_dir": a.data_dir, "set": s, "split": k, "method": m, "hyper": h, "epochs": a.epochs}
            for s in sets for k in range(1 if SETS[s][2] else a.splits) for m, h, _ in methods]
    started = time.perf_counter()
    results, swept = sweep_results("logreg_table1.py", jobs, fit_options, result_row,
                                   lambda r: f"-ELBO/N {r['train_neg_elbo_per_example']:.6f} NLL {r['test_nll']:.6f} "
                                             f"({r['seconds']:.1f} s)",
                                   runs=a.runs, prefix="table1-", scheduler=a.scheduler, workers=a.jobs)
    wall = time.perf_counter() - started

    reference = {(r["set"], r["split"]): r["posterior"] for r in results if r["method"] == "exact-full"}
    for r in results:
        r["kl"] = symmetric_kl(r["posterior"], reference[(r["set"], r["split"])])

    table = []
    for s in sets:
        label = SETS[s][3]
        for m, h, column in methods:
            rows = [r for r in results if r["set"] == s and r["method"] == method_label(m, h)]
            entry = {"set": s, "method": method_label(m, h), "splits": len(rows),
                     "seconds_mean": float(np.mean([r["seconds"] for r in rows]))}
            offset = -0.5 * math.log(BIAS_PRIOR) / rows[0]["n_train"]
            for metric in ("elbo", "nll", "kl", "accuracy"):
                entry[metric], entry[f"{metric}_se"] = mean_se([r[metric] for r in rows])
                theirs = authors.get((label, metric.upper()), {}).get(column)
                if theirs is None:
                    continue
                t_mean, t_se = theirs
                if metric == "elbo":
                    t_mean += offset
                entry[f"authors_{metric}"], entry[f"authors_{metric}_se"] = t_mean, t_se
                if metric in ("elbo", "nll"):
                    se = math.sqrt(entry[f"{metric}_se"] ** 2 + t_se**2)
                    entry[f"{metric}_diff_se"] = (entry[metric] - t_mean) / se if se > 0 else None
                    entry[f"{metric}_diff_rel"] = (entry[metric] - t_mean) / abs(t_mean)
            table.append(entry)

    def fmt(x, se, digits=4):
        return f"{x:.{digits}f}±{se:.{digits}f}"

    report = table_stream(a.json)
    print(f"{'set':20s} {'method':13s} {'-ELBO/N ours':>16s} {'authors':>16s} {'dSE':>5s} "
          f"{'NLL ours':>16s} {'authors':>16s} {'dSE':>5s} {'symKL ours':>11s} {'authors':>11s}", file=report)
    for e in table:
        def diff(metric):
            if e.get(f"{metric}_diff_se") is not None:
                return f"{e[f'{metric}_diff_se']:5.1f}"
            if f"{metric}_diff_rel" in e:
                return f"{100 * e[f'{metric}_diff_rel']:4.1f}%"
            return "    -"
        a_elbo = fmt(e["authors_elbo"], e["authors_elbo_se"]) if "authors_elbo" in e else "-"
        a_nll = fmt(e["authors_nll"], e["authors_nll_se"]) if "authors_nll" in e else "-"
        a_kl = f"{e['authors_kl']:.3g}" if "authors_kl" in e else "-"
        print(f"{e['set']:20s} {e['method']:13s} {fmt(e['elbo'], e['elbo_se']):>16s} {a_elbo:>16s} {diff('elbo')} "
              f"{fmt(e['nll'], e['nll_se']):>16s} {a_nll:>16s} {diff('nll')} {e['kl']:11.3g} {a_kl:>11s}",
              file=report)
    where = f"on {a.scheduler}" if a.scheduler else f"{a.jobs} at a time"
    print(f"wall time {wall:.0f} s ({len(jobs)} fits, {where}, {a.epochs} epochs; {swept.skipped} already complete)",
          file=report)
    if a.json:
        out = {"epochs": a.epochs, "splits": a.splits, "jobs": a.jobs, "scheduler": a.scheduler,
               "wall_seconds": wall, "fits_run": swept.ran, "fits_already_complete": swept.skipped, "table": table,
               "runs": [{k: v for k, v in r.items() if k != "posterior"} for r in results]}
        write_json(out, a.json)


if __name__ == "__main__":
    main()
