"""Step time of Bayes by Backprop, k-tied training and a point estimate on the same network and minibatch (the
k-tied Normal paper's Table 4).

    python benchmarks/ktied_step_time.py --min-time 3 --json

Two shapes: the paper's "simple model architecture with two dense layers" (its footnote 5: the TensorFlow
classification tutorial, 784-128-10 with ReLU and Keras's default batch of 32) and the MNIST MLP 784-400-400-10 with
batch 200. Methods, each with one weight sample per step (as the paper's GMFVI steps): ``sgd`` (the point-estimate
baseline of ``step_time.py``: the minibatch gradient by the same back-propagation, no sampling, an SGD update),
``adam`` (the same with Adam), ``bbb``, and ``ktied`` with ``--rank`` (default 2). Each is timed by
``step_time.time_steps`` (median and 10th percentile of warm steps, inside slang's BLAS-thread policy) on the
same synthetic data; ``--rounds R`` repeats the sequence of methods and keeps, per method, the round with the
lowest median, which damps the drift of a busy machine; ``--threads 1`` holds BLAS to one thread throughout
(slang's policy gives the MNIST shape both cores, which other processes on a busy machine make erratic), and
``--clock cpu`` times steps in process CPU time instead of wall time (with one thread, the work of the step
without the time other processes take from it). Reported: the times, the ratios bbb / sgd (target <= 3)
and ktied / bbb (target <= 1), and the paper's Table 4 (``../shared/reference/ktied_step_time.csv`` when found)
for comparison: 2.00 / 7.17 / 6.14 ms, ratios 3.59 and 0.86.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import sys
import time
from pathlib import Path

from threadpoolctl import threadpool_limits

from slangcli.threads import keep_freed_memory
from step_time import TIMED, synthetic_problem, time_steps

SHAPES = {"two-dense": ((784, 128, 10), 32), "mnist": ((784, 400, 400, 10), 200)}
REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "ktied_step_time.csv"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="two-dense,mnist", help=f"comma-separated, from {', '.join(SHAPES)}")
    p.add_argument("--rank", type=int, default=2, help="k of ktied")
    p.add_argument("--min-time", type=float, default=3.0, help="seconds of timed steps per method and round")
    p.add_argument("--min-repeats", type=int, default=10)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="BLAS threads (default: slang's policy)")
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    p.add_argument("--reference", type=Path, default=REFERENCE)
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


def reference(path: Path) -> dict | None:
    if not path.exists():
        return None
    with open(path) as f:
        rows = {r["method"]: float(r["step_ms"]) for r in csv.DictReader(line for line in f if not line.startswith("#"))}
    return {"ms": rows, "bbb_over_point": rows["standard_gmfvi"] / rows["point_estimate"],
            "ktied_over_bbb": rows["ktied_gmfvi"] / rows["standard_gmfvi"]}


def main(argv=None):
    a = parse_args(argv)
    keep_freed_memory()  # as the slang command does
    methods = {"sgd": {}, "adam": {}, "bbb": {"samples": 1}, "ktied": {"samples": 1, "rank": a.rank}}
    out = {"shapes": {}, "reference": reference(a.reference), "rank": a.rank, "threads": a.threads, "clock": a.clock}
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    for name in a.shapes.split(","):
        sizes, batch = SHAPES[name]
        problem, X, y = synthetic_problem(sizes, batch, None, a.seed)
        best: dict = {}
        for _ in range(a.rounds):
            for method, hyper in methods.items():
                module = TIMED[method]
                limit = threadpool_limits(limits=a.threads, user_api="blas") if a.threads else contextlib.nullcontext()
                with limit:
                    timing = time_steps(module, module.Hyper(**hyper), problem, X, y, batch_size=batch, seed=a.seed,
                                        min_time=a.min_time, min_repeats=a.min_repeats, clock=clock)
                timing.pop("inside")
                if method not in best or timing["median_ms"] < best[method]["median_ms"]:
                    best[method] = timing
        ratios = {
            "bbb_over_sgd": best["bbb"]["median_ms"] / best["sgd"]["median_ms"],
            "bbb_over_adam": best["bbb"]["median_ms"] / best["adam"]["median_ms"],
            "ktied_over_bbb": best["ktied"]["median_ms"] / best["bbb"]["median_ms"],
            "bbb_over_sgd_p10": best["bbb"]["p10_ms"] / best["sgd"]["p10_ms"],
            "ktied_over_bbb_p10": best["ktied"]["p10_ms"] / best["bbb"]["p10_ms"],
        }
        out["shapes"][name] = {"sizes": list(sizes), "batch_size": batch, "n_params": problem.model.n_params,
                               "methods": best, "ratios": ratios}
        if not a.json:
            print(f"{name}: sizes {sizes}, batch {batch}, D = {problem.model.n_params}")
            for method, t in best.items():
                print(f"  {method:6s} median {t['median_ms']:8.3f} ms  p10 {t['p10_ms']:8.3f} ms  (n = {t['repeats']})")
            print(f"  bbb / sgd {ratios['bbb_over_sgd']:.2f} (target <= 3; p10 {ratios['bbb_over_sgd_p10']:.2f}), "
                  f"bbb / adam {ratios['bbb_over_adam']:.2f}, ktied / bbb {ratios['ktied_over_bbb']:.2f} "
                  f"(target <= 1; p10 {ratios['ktied_over_bbb_p10']:.2f})")
    ref = out["reference"]
    if a.json:
        json.dump(out, sys.stdout)
        sys.stdout.write("\n")
    elif ref is not None:
        print(f"paper (Table 4, two dense layers): point {ref['ms']['point_estimate']} ms, GMFVI "
              f"{ref['ms']['standard_gmfvi']} ms, k-tied {ref['ms']['ktied_gmfvi']} ms: GMFVI / point "
              f"{ref['bbb_over_point']:.2f}, k-tied / GMFVI {ref['ktied_over_bbb']:.2f}")


if __name__ == "__main__":
    main()
