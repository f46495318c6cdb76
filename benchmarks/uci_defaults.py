"""BNN regression on Gal-layout UCI folders with slang fit's defaults: no hyperparameter options, nothing tuned.

    python benchmarks/uci_defaults.py --data-dir ../shared/datasets/uci --jobs 2 --runs uci-defaults-runs \
        --json uci-defaults.json

Every folder of ``--data-dir`` holding a Gal-layout data set is run on all its splits (or ``--splits``), with

    slang fit FOLDER --uci-split K --hidden 50 --method slang --rank 1   --batch-size 10 --epochs 120 --samples 4
    slang fit FOLDER --uci-split K --hidden 50 --method bbb              --batch-size 10 --epochs 120 --samples 4

(the protocol's budget: minibatches of 10, 120 epochs, 4 weight samples per step; everything else at its default:
the noise precision learned, the prior precision 1 or ``--prior auto``, features and target standardised, seed
0, 1 000 evaluation samples). The fits run as a ``slang sweep`` (one ``slang fit`` each, on a local Dask cluster
of ``--jobs`` single-threaded worker processes with one BLAS thread each, or on the cluster at ``--scheduler``);
with ``--runs DIR`` their run files stay in DIR and a rerun does only the missing ones. A fit's seconds are its
task's on its worker (reading the data, training, the 1 000-sample scoring and writing the run file; no
interpreter start-up, which the sweep's worker processes pay once): wall time on one thread, so it is the fit's
CPU time only when the machine has a core free for every worker. Reports per data set and method the test
log-likelihood and RMSE (mean +- standard error over splits), the 95 % interval coverage, the learned noise
precision (median) and the seconds per fit, beside the tuned figures of the README for the four development sets.

Choosing a default without the test rows: with ``--validation`` every split's test rows are left out altogether and
a seeded 20 % of its training rows (``--validation-fraction``, ``--validation-seed``) is held out instead: the fits
run on a copy of each folder (``data.txt`` linked, the index files of the split rewritten: the other training rows
as ``index_train_K.txt``, the held-out ones as ``index_test_K.txt``), and the table's "test" columns are those
held-out training rows. ``--extra-options "--init-precision 10 --beta 0.01"`` adds options to every fit (a
candidate default, measured against the same fits without it).

CPU time: with ``--cpu`` the fits run one at a time, each ``slang fit`` in a process of its own, and the seconds
are each process's CPU time (start-up, data, training, scoring and the run file: what a user's ``slang fit`` costs).
``--tuned-splits N`` (with ``--cpu``) then also runs the README's tuned SLANG fit (``uci.py``'s command: 5-fold
tuning of four hyperparameters, three restarts) on the first N splits of each data set the same way, and reports
each data set's default SLANG fit as a fraction of the tuned one's CPU time, both measured in the same run:

    python benchmarks/uci_defaults.py --data-dir ../shared/datasets/uci --cpu --tuned-splits 2 --json cpu.json
"""

from __future__ import annotations

import argparse
import json
import contextlib
import math
import os
import shlex
import tempfile
from pathlib import Path

import numpy as np

import uci
from results import add_sweep_arguments, sweep_results, table_stream, timed_fits
from slangcli.runfile.io import read_run
from slangcli.training.fitting import far_worse

# the README's tuned SLANG (L = 1) test log-likelihoods (energy: its 19 good splits) and seconds per split of that
# tuned run (4 450 s of SLANG fits over 80 splits, on a machine loaded differently: --tuned-splits measures it
# beside the defaults instead)
TUNED = {"bostonHousing": -2.60, "concrete": -3.15, "energy": -1.10, "yacht": -1.79}
TUNED_CPU_PER_SPLIT = 4450 / 80


def gal_folders(root: Path) -> list[Path]:
    def is_gal(p: Path) -> bool:
        return (p / "data.txt").is_file() and any(p.glob("index_train_*.txt"))
    if is_gal(root):
        return [root]
    return sorted(p for p in root.iterdir() if p.is_dir() and is_gal(p))


def split_count(folder: Path) -> int:
    return len(list(folder.glob("index_train_*.txt")))


def read_index(path: Path) -> np.ndarray:
    return np.loadtxt(path, dtype=float, ndmin=1).astype(np.int64)


def validation_folder(folder: Path, dest: Path, splits, fraction: float, seed: int) -> Path:
    """A Gal-layout copy of ``folder`` in ``dest/<name>`` whose split K trains on a seeded ``1 - fraction`` of
    split K's training rows and is scored on the rest (its test rows appear nowhere): ``data.txt`` and the column
    files are linked, ``index_train_K.txt`` and ``index_test_K.txt`` rewritten. The held-out rows of split K are
    ``default_rng([seed, K])``'s choice, so they are the same for every fit and every run."""
    out = dest / folder.name
    out.mkdir(parents=True, exist_ok=True)
    for name in ("data.txt", "index_features.txt", "index_target.txt"):
        link = out / name
        if not link.exists():
            link.symlink_to((folder / name).resolve())
    (out / "n_splits.txt").write_text(f"{split_count(folder)}\n")
    for k in splits:
        train = read_index(folder / f"index_train_{k}.txt")
        held = np.zeros(train.size, dtype=bool)
        held[np.random.default_rng([seed, k]).choice(train.size, int(round(fraction * train.size)), replace=False)] = True
        np.savetxt(out / f"index_train_{k}.txt", train[~held], fmt="%d")
        np.savetxt(out / f"index_test_{k}.txt", train[held], fmt="%d")
    return out


def parse_extra(text: str | None) -> dict:
    """``--key value``, ``--key=value`` and ``--flag`` (True) pairs of ``--extra-options`` as sweep options."""
    options, words = {}, shlex.split(text or "")
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("--"):
            raise ValueError(f"--extra-options: expected an option, got {word!r}")
        if "=" in word:
            key, value = word[2:].split("=", 1)
        elif i + 1 < len(words) and not words[i + 1].startswith("--"):
            key, value = word[2:], words[i + 1]
            i += 1
        else:
            key, value = word[2:], True
        options[key] = value
        i += 1
    return options


def fit_options(job: dict) -> dict:
    """The ``slang fit`` options of one (folder, split, method) fit: the protocol's budget, nothing else (but the
    job's ``extra`` options, if any)."""
    options = {"data": job["folder"], "uci-split": job["split"], "hidden": "50", "method": job["method"],
               "batch-size": 10, "epochs": job["epochs"], "samples": 4}
    if job["method"] == "slang":
        options["rank"] = 1
    if job["prior"]:
        options["prior-precision"] = job["prior"]
    options.update(job.get("extra") or {})
    return options


def result_row(job: dict, record: dict, path: Path) -> dict:
    """The script's row of one finished fit, from its record in the sweep's table and its run file; ``warnings``
    holds the fit's warning of test scores far worse than a constant predictor's, if it gave one."""
    run = read_run(path)
    test = run.metrics["test"]
    warning = far_worse(test, run.metrics["constant"]) if "constant" in run.metrics else None
    return {"folder": Path(job["folder"]).name, "split": job["split"], "method": job["method"],
            "rmse": test["rmse"], "loglik": test["loglik"], "coverage_95": test["coverage"]["0.95"],
            "noise_precision": run.model.noise_precision,
            # (a fit complete in --runs from an earlier sweep whose table was lost has no seconds of its own)
            "seconds": record["seconds"] if record["seconds"] is not None else run.metrics["fit_seconds"],
            "fit_seconds": run.metrics["fit_seconds"], "warnings": [warning] if warning else [],
            **({"cpu_seconds": record["cpu_seconds"]} if "cpu_seconds" in record else {})}


def tuned_row(job: dict, record: dict, path: Path) -> dict:
    """The row of one tuned fit run for its CPU time."""
    return {"folder": Path(job["folder"]).name, "split": job["split"], "cpu_seconds": record["cpu_seconds"],
            "seconds": record["seconds"], "loglik": read_run(path).metrics["test"]["loglik"]}


def mean_se(values) -> tuple[float, float]:
    v = np.asarray(values, dtype=float)
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=str(Path(os.environ.get("SLANG_DATA_DIR", "../shared/datasets")) / "uci"))
    p.add_argument("--splits", default=None, help="splits to run: N (the first N) or a comma list (default: all)")
    p.add_argument("--methods", default="slang,bbb")
    p.add_argument("--prior", default=None, help="--prior-precision of every fit (default: slang fit's)")
    p.add_argument("--epochs", type=int, default=120, help="the protocol's 120 (fewer: a smoke run)")
    add_sweep_arguments(p)
    p.add_argument("--json", default=None, metavar="FILE", help="write the rows and summary as JSON ('-': stdout)")
    p.add_argument("--validation", action="store_true",
                   help="score on held-out training rows instead of the test rows (which no fit then sees)")
    p.add_argument("--validation-fraction", type=float, default=0.2, help="the training rows held out (0.2)")
    p.add_argument("--validation-seed", type=int, default=0, help="seed of the held-out rows (split K: [seed, K])")
    p.add_argument("--extra-options", default=None, metavar="OPTIONS",
                   help='slang fit options added to every fit, e.g. "--init-precision 10"')
    p.add_argument("--cpu", action="store_true",
                   help="run the fits one at a time, each in its own process, and report its CPU seconds (every fit "
                        "runs again, also those complete in --runs)")
    p.add_argument("--tuned-splits", type=int, default=0, metavar="N",
                   help="with --cpu: also time the README's tuned SLANG fit on the first N splits of each set")
    a = p.parse_args(argv)
    if a.tuned_splits and not a.cpu:
        p.error("--tuned-splits needs --cpu (both are timed the same way)")
    if a.tuned_splits and a.validation:
        p.error("--tuned-splits times the tuned fit on the test split: not with --validation's fewer rows")
    if a.cpu and (a.scheduler or a.jobs != 1):
        p.error("--cpu runs the fits one at a time on this machine: it takes neither --scheduler nor --jobs")
    folders = gal_folders(Path(a.data_dir))
    if not folders:
        p.error(f"{a.data_dir}: no Gal-layout UCI folder")
    if not 0 < a.validation_fraction < 1:
        p.error("--validation-fraction must be in (0, 1)")
    try:
        extra = parse_extra(a.extra_options)
    except ValueError as e:
        p.error(str(e))
    with contextlib.ExitStack() as stack:
        if a.validation:  # the copies live beside the run files (a rerun finds the same paths), else temporarily
            dest = (Path(a.runs) / "validation-data" if a.runs
                    else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="uci-validation-"))))
        jobs = []
        for folder in folders:
            n = split_count(folder)
            if a.splits is None:
                splits = range(n)
            elif "," in a.splits:
                splits = [int(s) for s in a.splits.split(",")]
            else:
                splits = range(min(int(a.splits), n))
            data = (validation_folder(folder, dest, splits, a.validation_fraction, a.validation_seed)
                    if a.validation else folder)
            jobs += [{"folder": str(data), "split": k, "method": m, "epochs": a.epochs, "prior": a.prior,
                      "extra": extra} for m in a.methods.split(",") for k in splits]
        report_runs(a, folders, jobs, tuned_jobs(a, folders))


def tuned_jobs(a, folders) -> list:
    """The README's tuned SLANG fits of the first ``--tuned-splits`` splits of each folder (uci.py's defaults, at
    this script's ``--epochs``), for their CPU time."""
    ua = uci.build_parser().parse_args(["--epochs", str(a.epochs)])
    tune = uci.tune_settings(ua)
    return [uci.protocol_job(f, k, "slang", ua, tune) for f in folders
            for k in range(min(a.tuned_splits, split_count(f)))]


def report_runs(a, folders, jobs, tuned):
    if a.cpu:
        rows = timed_fits("uci_defaults.py", jobs, fit_options, result_row, runs=a.runs, prefix="uci-defaults-runs-")
        tuned_rows = timed_fits("uci_defaults.py", tuned, uci.fit_options, tuned_row,
                                runs=Path(a.runs) / "tuned" if a.runs else None, prefix="uci-tuned-runs-")
    else:
        # a failed fit stops the script, naming it (the sweep's table in --runs has every fit's message)
        rows, _ = sweep_results("uci_defaults.py", jobs, fit_options, result_row,
                                lambda r: f"RMSE {r['test_rmse']:.3f} loglik {r['test_loglik']:.3f} "
                                          f"({r['seconds']:.1f} s)",
                                runs=a.runs, prefix="uci-defaults-runs-", scheduler=a.scheduler, workers=a.jobs)
        tuned_rows = []
    summary = []
    report = table_stream(a.json)  # stdout, unless --json - claims it
    print(f"{'data set':<14} {'method':<6} {'splits':>6} {'test log-lik':>16} {'tuned':>6} {'RMSE':>14} "
          f"{'cov 95':>6} {'tau':>7} {'CPU s/fit' if a.cpu else 's/fit':>9}"
          + (f" {'tuned CPU s':>11} {'fraction':>8}" if tuned_rows else ""), file=report)
    for folder in folders:
        for method in a.methods.split(","):
            ok = [r for r in rows if r["folder"] == folder.name and r["method"] == method]
            if not ok:
                continue
            ll, ll_se = mean_se([r["loglik"] for r in ok])
            rmse, rmse_se = mean_se([r["rmse"] for r in ok])
            s = {"folder": folder.name, "method": method, "splits": len(ok),
                 "loglik": ll, "loglik_se": ll_se, "rmse": rmse, "rmse_se": rmse_se,
                 "coverage_95": float(np.mean([r["coverage_95"] for r in ok])),
                 "noise_precision_median": float(np.median([r["noise_precision"] for r in ok])),
                 "seconds_per_fit": float(np.mean([r["seconds"] for r in ok])),
                 "tuned_loglik": TUNED.get(folder.name)}
            if a.cpu:
                s["cpu_seconds_per_fit"] = float(np.mean([r["cpu_seconds"] for r in ok]))
            mine = [r["cpu_seconds"] for r in tuned_rows if r["folder"] == folder.name]
            if mine:  # the tuned fit's CPU seconds per split, measured here, and this fit's fraction of it
                s["tuned_cpu_seconds"] = float(np.mean(mine))
                s["tuned_splits"] = len(mine)
                s["cpu_fraction_of_tuned"] = s["cpu_seconds_per_fit"] / s["tuned_cpu_seconds"]
            summary.append(s)
            tuned = f"{s['tuned_loglik']:.2f}" if s["tuned_loglik"] is not None else "-"
            print(f"{folder.name:<14} {method:<6} {len(ok):>6} {ll:>8.3f} +- {ll_se:.3f} {tuned:>6} "
                  f"{rmse:>6.2f} +- {rmse_se:.2f} {s['coverage_95']:>6.3f} {s['noise_precision_median']:>7.1f} "
                  f"{s['cpu_seconds_per_fit' if a.cpu else 'seconds_per_fit']:>9.2f}"
                  + (f" {s['tuned_cpu_seconds']:>11.1f} {'1/' + format(1 / s['cpu_fraction_of_tuned'], '.1f'):>8}"
                     if mine else ""), file=report)
    if not tuned_rows:
        print(f"(the README's tuned SLANG run: {TUNED_CPU_PER_SPLIT:.1f} s per split on average, on a machine loaded "
              "differently; --cpu --tuned-splits N measures it beside the defaults)", file=report)
    if a.validation:
        print(f"(scored on a held-out {a.validation_fraction:g} of each split's training rows, seed "
              f"{a.validation_seed}; the tuned figures are test scores)", file=report)
    if a.json:
        record = {"rows": rows, "summary": summary, "tuned_cpu_per_split": TUNED_CPU_PER_SPLIT}
        if tuned_rows:
            record["tuned_rows"] = tuned_rows
        text = json.dumps(record, indent=2)
        print(text) if a.json == "-" else Path(a.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
