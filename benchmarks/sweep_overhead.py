"""What ``slang sweep`` costs and gains: a grid of small fits as separate ``slang fit`` processes, one after
another, and as ``slang sweep`` on local clusters of 1 and 2 workers.

    OPENBLAS_NUM_THREADS=1 python benchmarks/sweep_overhead.py --rounds 3 --json sweep_overhead.json

The grid: the shipped Breast Cancer Wisconsin data (569 rows, 30 features, standardised, 30 % held out), SLANG
with L = 1, 2, 4, 8 and seeds 0-3 (16 fits), ``--epochs`` each. Per way of running and round: the wall time, the
sum of the fits' own ``fit_seconds`` (training and scoring, from their run files) and the difference per fit,
the overhead (for the ways that run one fit at a time): process start and imports, data reading, run-file
writing, and for a sweep the local cluster's start and stop and the task round trips. Each sweep starts in an empty directory (nothing skipped). Medians over
``--rounds``, the ways interleaved within a round. Run it with one BLAS thread (the workers get one anyway).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py

from results import write_json

DATA = Path(__file__).resolve().parents[1] / "datasets" / "breast_cancer_wisconsin.csv"


def grid_args(epochs: int) -> list[str]:
    return ["--standardize", "--test-fraction", "0.3", "--epochs", str(epochs)]


def fit_seconds(directory: Path) -> float:
    total = 0.0
    for path in directory.glob("*.h5"):
        with h5py.File(path, "r") as f:
            total += json.loads(f["metrics"].attrs["metrics"])["fit_seconds"]
    return total


def run_processes(directory: Path, ranks, seeds, epochs) -> float:
    started = time.perf_counter()
    for rank in ranks:
        for seed in seeds:
            subprocess.run([sys.executable, "-m", "slangcli", "fit", str(DATA), *grid_args(epochs), "--rank",
                            str(rank), "--seed", str(seed), "-o", str(directory / f"r{rank}s{seed}.h5")],
                           check=True, capture_output=True)
    return time.perf_counter() - started


def run_sweep(directory: Path, ranks, seeds, epochs, workers) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "slangcli", "sweep", str(DATA), *grid_args(epochs), "--rank",
                    ",".join(map(str, ranks)), "--seed", ",".join(map(str, seeds)), "-o", str(directory),
                    "--workers", str(workers)], check=True, capture_output=True)
    return time.perf_counter() - started


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", default=None, metavar="FILE")
    a = p.parse_args(argv)
    ranks, seeds = [1, 2, 4, 8], [0, 1, 2, 3]
    n = len(ranks) * len(seeds)
    ways = {"slang fit x16": lambda d: run_processes(d, ranks, seeds, a.epochs),
            "sweep, 1 worker": lambda d: run_sweep(d, ranks, seeds, a.epochs, 1),
            "sweep, 2 workers": lambda d: run_sweep(d, ranks, seeds, a.epochs, 2)}
    rows = {name: [] for name in ways}
    for r in range(a.rounds):
        for name, way in ways.items():
            with tempfile.TemporaryDirectory() as tmp:
                wall = way(Path(tmp))
                fits = fit_seconds(Path(tmp))
            rows[name].append({"wall": wall, "fit_seconds": fits, "overhead_per_fit": (wall - fits) / n})
            print(f"round {r + 1} {name}: wall {wall:.1f} s, fits {fits:.1f} s, load average "
                  f"{Path('/proc/loadavg').read_text().split()[0] if Path('/proc/loadavg').exists() else '?'}",
                  file=sys.stderr)
    summary = {name: {k: statistics.median(x[k] for x in v) for k in v[0]} for name, v in rows.items()}
    base = summary["sweep, 1 worker"]["wall"]
    for name, s in summary.items():
        # with fits in parallel, wall time minus the fits' own time is no longer an overhead
        overhead = f"{s['overhead_per_fit']:.2f} s/fit" if "2 workers" not in name else "(parallel)"
        print(f"{name:18s} wall {s['wall']:6.1f} s  fits {s['fit_seconds']:6.1f} s  overhead {overhead:>12s}  "
              f"speed-up over 1 worker {base / s['wall']:.2f}")
    if a.json:
        write_json({"epochs": a.epochs, "fits": n, "rounds": rows, "median": summary}, a.json)


if __name__ == "__main__":
    main()
