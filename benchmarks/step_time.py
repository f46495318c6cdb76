"""Time one training step of a method at a given problem shape, on synthetic data.

    python benchmarks/step_time.py --features 256 --outputs 1 --batch-size 64 --samples 12 --rank 8 --json

Prints the median time per step over repeated steps (after warm-up), the peak resident memory of the process,
and the rate of the largest dense matrix product in the step (the first layer's forward GEMM) measured in the
same process, so a figure can be read against what this machine's BLAS delivers. Steps run inside the same
BLAS-thread policy as ``slang fit``.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

import numpy as np

from slangcli.methods import METHODS
from slangcli.methods.base import Problem
from slangcli.models import MLP
from slangcli.threads import blas_threads
from slangcli.train import derive_rng


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--features", type=int, required=True)
    p.add_argument("--hidden", default="", help="comma-separated hidden widths, empty for none")
    p.add_argument("--outputs", type=int, default=1)
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--samples", type=int, default=12)
    p.add_argument("--rank", type=int, default=1)
    p.add_argument("--method", default="slang", choices=sorted(METHODS))
    p.add_argument("--activation", default="relu")
    p.add_argument("--dtype", default="float64", choices=["float64"])
    p.add_argument("--n-data", type=int, default=None, help="training-set size N (default 10 M)")
    p.add_argument("--min-time", type=float, default=2.0, help="seconds of timed steps at least")
    p.add_argument("--min-repeats", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


def gemm_gflops(m: int, k: int, n: int, rng) -> float:
    A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    A @ B
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.5 or reps < 3:
        A @ B
        reps += 1
    return 2.0 * m * k * n * reps / (time.perf_counter() - t0) / 1e9


def main(argv=None):
    a = parse_args(argv)
    hidden = tuple(int(h) for h in a.hidden.split(",") if h.strip())
    sizes = (a.features, *hidden, a.outputs)
    likelihood = "bernoulli" if a.outputs == 1 else "categorical"
    model = MLP(sizes, activation=a.activation, likelihood=likelihood)
    n_data = a.n_data or 10 * a.batch_size
    rng = np.random.default_rng(a.seed)
    X = rng.uniform(-1.0, 1.0, (n_data, a.features))
    y = rng.integers(0, max(a.outputs, 2), n_data).astype(float if a.outputs == 1 else np.int64)
    method = METHODS[a.method]
    hyper = method.Hyper(rank=a.rank, samples=a.samples)
    problem = Problem(model, model.prior_precision(1.0, 1e-5), n_data)
    D = model.n_params

    times = []
    with blas_threads(D, a.samples, a.batch_size):
        state = method.init(derive_rng(a.seed, 0), problem, hyper)
        t = 0
        while True:
            idx = derive_rng(a.seed, 1, t).integers(0, n_data, a.batch_size)
            t0 = time.perf_counter()
            state, _ = method.step(derive_rng(a.seed, 2, t), state, problem, X[idx], y[idx], hyper)
            times.append(time.perf_counter() - t0)
            t += 1
            warm = times[min(5, len(times) // 5):]
            if len(warm) >= a.min_repeats and sum(warm) >= a.min_time:
                break
        n1 = sizes[1]
        gflops = gemm_gflops(a.batch_size, a.features, a.samples * n1, rng)
    warm = np.asarray(warm) * 1e3
    out = {
        "method": a.method,
        "shape": {"sizes": list(sizes), "n_params": D, "batch_size": a.batch_size, "samples": a.samples,
                  "rank": a.rank, "dtype": a.dtype},
        "median_ms": float(np.median(warm)),
        "p10_ms": float(np.percentile(warm, 10)),
        "p90_ms": float(np.percentile(warm, 90)),
        "repeats": int(warm.size),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "gemm_gflops": gflops,
        "gemm_shape": [a.batch_size, a.features, a.samples * n1],
    }
    if a.json:
        json.dump(out, sys.stdout)
        sys.stdout.write("\n")
    else:
        print(f"{a.method} sizes={sizes} D={D} M={a.batch_size} S={a.samples} L={a.rank}: "
              f"median {out['median_ms']:.3f} ms/step (p10 {out['p10_ms']:.3f}, p90 {out['p90_ms']:.3f}, "
              f"n={out['repeats']}), peak RSS {out['peak_rss_mb']:.0f} MB, GEMM {gflops:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
