"""BNN regression on Gal-layout UCI folders with slang fit's defaults: no hyperparameter options, nothing tuned.

    python benchmarks/uci_defaults.py --data-dir ../shared/datasets/uci --jobs 2 --json uci-defaults.json

Every folder of ``--data-dir`` holding a Gal-layout data set is run on all its splits (or ``--splits``), with

    slang fit FOLDER --uci-split K --hidden 50 --method slang --rank 1   --batch-size 10 --epochs 120 --samples 4
    slang fit FOLDER --uci-split K --hidden 50 --method bbb              --batch-size 10 --epochs 120 --samples 4

(the protocol's budget: minibatches of 10, 120 epochs, 4 weight samples per step; everything else at its default:
the noise precision learned, the prior precision 1 or ``--prior auto``, features and target standardised, seed
0, 1 000 evaluation samples). Each fit is one ``slang fit`` process with one BLAS thread; its CPU time is the
process's own (user + system, from ``wait4``). Reports per data set and method the test log-likelihood and RMSE
(mean +- standard error over splits), the 95 % interval coverage, the learned noise precision (median) and the CPU
seconds per fit, beside the tuned figures of the README for the four development sets.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

# the README's tuned SLANG (L = 1) test log-likelihoods (energy: its 19 good splits) and CPU seconds per split of
# that tuned run (4 450 s of SLANG fits over 80 splits)
TUNED = {"bostonHousing": -2.60, "concrete": -3.15, "energy": -1.10, "yacht": -1.79}
TUNED_CPU_PER_SPLIT = 4450 / 80


def gal_folders(root: Path) -> list[Path]:
    def is_gal(p: Path) -> bool:
        return (p / "data.txt").is_file() and any(p.glob("index_train_*.txt"))
    if is_gal(root):
        return [root]
    return sorted(p for p in root.iterdir() if p.is_dir() and is_gal(p))


def command(folder: Path, split: int, method: str, output: Path, prior: str | None) -> list[str]:
    cmd = [sys.executable, "-m", "slangcli", "fit", str(folder), "--uci-split", str(split), "--hidden", "50",
           "--method", method, "--batch-size", "10", "--epochs", "120", "--samples", "4", "-o", str(output),
           "--json", "--no-progress", "--checkpoint-seconds", "0"]
    if method == "slang":
        cmd += ["--rank", "1"]
    if prior:
        cmd += ["--prior-precision", prior]
    return cmd


def run_one(job) -> dict:
    folder, split, method, out_dir, prior = job
    output = Path(out_dir) / f"{folder.name}-{method}-{split}.h5"
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.Popen(command(folder, split, method, output, prior), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    stdout, stderr = proc.stdout.read(), proc.stderr.read()
    if status != 0:
        return {"folder": folder.name, "split": split, "method": method, "error": stderr.strip()[-500:]}
    out = json.loads(stdout)
    test = out["metrics"]["test"]
    return {"folder": folder.name, "split": split, "method": method, "rmse": test["rmse"], "loglik": test["loglik"],
            "coverage_95": test["coverage"]["0.95"], "noise_precision": out["config"]["model"]["noise_precision"],
            "cpu_seconds": usage.ru_utime + usage.ru_stime, "fit_seconds": out["fit_seconds"],
            "warnings": [line for line in stderr.splitlines() if "warning" in line]}


def mean_se(values) -> tuple[float, float]:
    v = np.asarray(values, dtype=float)
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=str(Path(os.environ.get("SLANG_DATA_DIR", "../shared/datasets")) / "uci"))
    p.add_argument("--splits", default=None, help="splits to run: N (the first N) or a comma list (default: all)")
    p.add_argument("--methods", default="slang,bbb")
    p.add_argument("--prior", default=None, help="--prior-precision of every fit (default: slang fit's)")
    p.add_argument("--jobs", type=int, default=1, help="fits run at once (one core each)")
    p.add_argument("--json", default=None, metavar="FILE", help="write the rows and summary as JSON ('-': stdout)")
    a = p.parse_args(argv)
    folders = gal_folders(Path(a.data_dir))
    if not folders:
        p.error(f"{a.data_dir}: no Gal-layout UCI folder")
    jobs = []
    with tempfile.TemporaryDirectory() as tmp:
        for folder in folders:
            n = len(list(folder.glob("index_train_*.txt")))
            if a.splits is None:
                splits = range(n)
            elif "," in a.splits:
                splits = [int(s) for s in a.splits.split(",")]
            else:
                splits = range(min(int(a.splits), n))
            jobs += [(folder, k, m, tmp, a.prior) for m in a.methods.split(",") for k in splits]
        with ThreadPoolExecutor(a.jobs) as pool:
            rows = list(pool.map(run_one, jobs))
    summary = []
    print(f"{'data set':<14} {'method':<6} {'splits':>6} {'test log-lik':>16} {'tuned':>6} {'RMSE':>14} "
          f"{'cov 95':>6} {'tau':>7} {'CPU s/fit':>9}")
    for folder in folders:
        for method in a.methods.split(","):
            ok = [r for r in rows if r["folder"] == folder.name and r["method"] == method and "error" not in r]
            failed = [r for r in rows if r["folder"] == folder.name and r["method"] == method and "error" in r]
            if not ok:
                continue
            ll, ll_se = mean_se([r["loglik"] for r in ok])
            rmse, rmse_se = mean_se([r["rmse"] for r in ok])
            s = {"folder": folder.name, "method": method, "splits": len(ok), "failed": len(failed),
                 "loglik": ll, "loglik_se": ll_se, "rmse": rmse, "rmse_se": rmse_se,
                 "coverage_95": float(np.mean([r["coverage_95"] for r in ok])),
                 "noise_precision_median": float(np.median([r["noise_precision"] for r in ok])),
                 "cpu_seconds_per_fit": float(np.mean([r["cpu_seconds"] for r in ok])),
                 "tuned_loglik": TUNED.get(folder.name)}
            summary.append(s)
            tuned = f"{s['tuned_loglik']:.2f}" if s["tuned_loglik"] is not None else "-"
            print(f"{folder.name:<14} {method:<6} {len(ok):>6} {ll:>8.3f} +- {ll_se:.3f} {tuned:>6} "
                  f"{rmse:>6.2f} +- {rmse_se:.2f} {s['coverage_95']:>6.3f} {s['noise_precision_median']:>7.1f} "
                  f"{s['cpu_seconds_per_fit']:>9.2f}")
    print(f"(tuned SLANG run: {TUNED_CPU_PER_SPLIT:.1f} CPU s per split on average; 1/20 of it is "
          f"{TUNED_CPU_PER_SPLIT / 20:.2f} s)")
    if a.json:
        text = json.dumps({"rows": rows, "summary": summary, "tuned_cpu_per_split": TUNED_CPU_PER_SPLIT}, indent=2)
        print(text) if a.json == "-" else Path(a.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
