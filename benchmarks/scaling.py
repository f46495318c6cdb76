"""Measure how the time of one SLANG step grows with the parameter count D, the minibatch size M and the rank L.

    python benchmarks/scaling.py                       # all three sweeps, default shapes (about a minute)
    python benchmarks/scaling.py --sweep D --json      # one sweep, one JSON object on stdout
    python benchmarks/scaling.py --quick               # small shapes, a smoke run of a few seconds

Each sweep varies one quantity and holds the others fixed, on an MLP ``features -> hidden... -> outputs`` with a
categorical likelihood (bernoulli when ``--outputs 1``) and synthetic data, as ``benchmarks/step_time.py`` does:

- ``D``: every hidden width is set to each of ``--widths`` (so the depth of ``--base-hidden`` is kept), which
  moves D over about 1.5 orders of magnitude with the defaults; M, S, L fixed.
- ``M``: the minibatch size takes each of ``--batch-sizes``; the network (D), S and L fixed.
- ``L``: the rank takes each of ``--ranks``; the network (D), M and S fixed.

Every point is timed the way ``step_time.py`` times a step: ``slang.step`` is called repeatedly on fresh
minibatches from the same derived random streams, inside the BLAS-thread policy of ``slang fit``
(``slangcli.threads.blas_threads``); the first ``min(5, n // 5)`` steps are warm-up and discarded, and steps run
until the warm ones total ``--min-time`` seconds and number ``--min-repeats``. A point reports the median and the
10th/90th percentiles of the warm steps in milliseconds.

Reading the exponents: for each sweep the slope ``b`` of the least-squares line ``log t = a + b log x`` (x = D, M
or L) is printed with its standard error, so ``t ~ x^b`` over the range measured. ``b`` near 1 means linear,
near 0 means the quantity barely matters, 2 quadratic. The fit uses exactly the points given: a step also has a
fixed cost (Python overhead, small BLAS calls, the eigendecomposition of the small Gram matrix) that does not
grow with x, and at small shapes it dominates, pulling the fitted exponent below the asymptotic one; the
``local`` column (slope between neighbouring points) shows whether the exponent is still rising at the large end.
Two switches inside a step can also bend the curve, and each point records them: ``threads`` (the BLAS threads
``blas_threads`` allowed: 1 below D S M = 2e7, all cores above) and ``G`` (``dense`` when the D x columns gradient
matrix is small enough to materialise, else ``factored``). The standard error is the ordinary least-squares one
and says how straight the log-log line is, not how noisy the machine was; rerun on a quiet machine for figures to
quote.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_info

sys.path.insert(0, str(Path(__file__).resolve().parent))
import step_time  # noqa: E402  (benchmarks/step_time.py: its defaults define the repeat rule shared here)

from slangcli.methods import slang  # noqa: E402
from slangcli.models import MLP, Layout  # noqa: E402
from slangcli.threads import keep_freed_memory  # noqa: E402

_STEP_TIME_DEFAULTS = step_time.parse_args(["--features", "1", "--batch-size", "1"])

DEFAULTS = {
    "base_features": 100,
    "base_hidden": "100,100",
    "outputs": 10,
    "base_batch_size": 50,
    "samples": 4,
    "base_rank": 4,
    "widths": "50,100,200,400",
    "batch_sizes": "25,50,100,200",
    "ranks": "1,2,4,8,16,32",
    "min_time": 1.0,
    "min_repeats": _STEP_TIME_DEFAULTS.min_repeats,
}
QUICK = {
    "base_features": 20,
    "base_hidden": "32,32",
    "outputs": 10,
    "base_batch_size": 16,
    "samples": 4,
    "base_rank": 2,
    "widths": "16,32,64,128",
    "batch_sizes": "8,16,32,64",
    "ranks": "1,2,4,8",
    "min_time": 0.1,
    "min_repeats": 10,
}


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sweep", default="all", choices=["D", "M", "L", "all"])
    p.add_argument("--base-features", type=int, help=f"input features (default {DEFAULTS['base_features']})")
    p.add_argument("--base-hidden", help=f"comma-separated hidden widths, empty for none "
                                         f"(default {DEFAULTS['base_hidden']})")
    p.add_argument("--outputs", type=int, help=f"outputs, 1 for bernoulli (default {DEFAULTS['outputs']})")
    p.add_argument("--base-batch-size", type=int, help=f"M outside the M sweep (default {DEFAULTS['base_batch_size']})")
    p.add_argument("--samples", type=int, help=f"S, weight samples per step (default {DEFAULTS['samples']})")
    p.add_argument("--base-rank", type=int, help=f"L outside the L sweep (default {DEFAULTS['base_rank']})")
    p.add_argument("--widths", help=f"hidden widths of the D sweep (default {DEFAULTS['widths']})")
    p.add_argument("--batch-sizes", help=f"minibatch sizes of the M sweep (default {DEFAULTS['batch_sizes']})")
    p.add_argument("--ranks", help=f"ranks of the L sweep (default {DEFAULTS['ranks']})")
    p.add_argument("--min-time", type=float, help=f"seconds of warm steps per point at least "
                                                  f"(default {DEFAULTS['min_time']})")
    p.add_argument("--min-repeats", type=int, help=f"warm steps per point at least (default "
                                                   f"{DEFAULTS['min_repeats']}, as step_time.py)")
    p.add_argument("--seed", type=int, default=_STEP_TIME_DEFAULTS.seed)
    p.add_argument("--quick", action="store_true", help="small shapes and short timing, for a smoke run "
                                                        "(explicit options still win)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    a = p.parse_args(argv)
    for key, value in (QUICK if a.quick else DEFAULTS).items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    a.base_hidden = tuple(ints(a.base_hidden))
    a.widths, a.batch_sizes, a.ranks = ints(a.widths), ints(a.batch_sizes), ints(a.ranks)
    if a.sweep in ("D", "all") and not a.base_hidden:
        p.error("the D sweep varies the hidden widths: --base-hidden must name at least one hidden layer")
    for name in ("base_features", "outputs", "base_batch_size", "samples", "min_repeats"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.base_rank < 0 or any(v < 1 for v in a.widths + a.batch_sizes + a.ranks):
        p.error("widths, batch sizes and ranks must be >= 1 (and --base-rank >= 0)")
    return a


def _blas_thread_count() -> int:
    return max((i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"), default=1)


def _g_route(model: MLP, samples: int, batch_size: int) -> str:
    """Which representation of the per-example gradients ``slang.update`` takes at this shape."""
    K = model.sizes[-1]
    if model.is_linear:  # combine_samples: one column per example (binary), K (S > K) or S otherwise
        cols = batch_size * (1 if K == 1 else (K if samples > K else samples))
    else:
        cols = samples * batch_size
    return "dense" if model.n_params * cols <= slang.DENSE_G_MAX_ENTRIES else "factored"


def time_point(sizes: tuple[int, ...], batch_size: int, samples: int, rank: int, a) -> dict:
    """Time ``slang.step`` at one shape with ``benchmarks/step_time.py``'s loop (same streams, same repeat rule)."""
    problem, X, y = step_time.synthetic_problem(sizes, batch_size, None, a.seed)
    model = problem.model
    if rank > model.n_params:
        raise SystemExit(f"rank {rank} exceeds D = {model.n_params} at sizes {sizes}")
    hyper = slang.Hyper(rank=rank, samples=samples)
    timing = step_time.time_steps(slang, hyper, problem, X, y, batch_size=batch_size, seed=a.seed,
                                  min_time=a.min_time, min_repeats=a.min_repeats, inside=_blas_thread_count)
    threads = timing.pop("inside")
    return {"D": model.n_params, "sizes": list(sizes), **timing, "threads": threads,
            "G": _g_route(model, samples, batch_size)}


def fit_exponent(x, t) -> tuple[float, float]:
    """Least-squares slope of ``log t`` on ``log x`` and its standard error (nan with fewer than 3 points)."""
    lx, lt = np.log(np.asarray(x, float)), np.log(np.asarray(t, float))
    if lx.size < 2 or np.ptp(lx) == 0:
        return math.nan, math.nan
    xc = lx - lx.mean()
    sxx = float(xc @ xc)
    slope = float(xc @ (lt - lt.mean()) / sxx)
    if lx.size < 3:
        return slope, math.nan
    resid = lt - lt.mean() - slope * xc
    return slope, math.sqrt(float(resid @ resid) / (lx.size - 2) / sxx)


def run_sweep(name: str, a, progress) -> dict:
    F, H, K = a.base_features, a.base_hidden, a.outputs
    base_sizes = (F, *H, K)
    S, M, L = a.samples, a.base_batch_size, a.base_rank
    if name == "D":
        varied = "D, by setting every hidden width to the value"
        fixed = {"features": F, "hidden_layers": len(H), "outputs": K, "batch_size": M, "samples": S, "rank": L}
        shapes = [(w, (F, *([w] * len(H)), K), M, L) for w in a.widths]
    elif name == "M":
        varied = "M, the minibatch size"
        fixed = {"sizes": list(base_sizes), "D": Layout(tuple(base_sizes)).n_params, "samples": S, "rank": L}
        shapes = [(m, base_sizes, m, L) for m in a.batch_sizes]
    else:
        varied = "L, the rank"
        fixed = {"sizes": list(base_sizes), "D": Layout(tuple(base_sizes)).n_params, "batch_size": M, "samples": S}
        shapes = [(r, base_sizes, M, r) for r in a.ranks]
    points = []
    for value, sizes, m, r in shapes:
        progress(f"  {name} sweep: value {value}, sizes {sizes}, M {m}, L {r} ...")
        points.append({"value": value, **time_point(sizes, m, S, r, a)})
    x = [p["D"] if name == "D" else p["value"] for p in points]
    for i, p in enumerate(points):
        p["local_exponent"] = (None if i == 0 else
                               math.log(p["median_ms"] / points[i - 1]["median_ms"]) / math.log(x[i] / x[i - 1]))
    slope, se = fit_exponent(x, [p["median_ms"] for p in points])
    return {"varied": varied, "points": points, "exponent": _num(slope), "exponent_se": _num(se), "fixed": fixed}


def _num(v: float):
    return None if v is None or not math.isfinite(v) else v


def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def print_sweep(name: str, sw: dict) -> None:
    fixed = ", ".join(f"{k}={v}" for k, v in sw["fixed"].items())
    print(f"{name} sweep: varies {sw['varied']}; fixed {fixed}")
    head = {"D": "width", "M": "M", "L": "L"}[name]
    print(f"  {head:>6} {'D':>8} {'median ms':>10} {'p10':>9} {'p90':>9} {'n':>5} {'thr':>3} {'G':>8} {'local':>6}")
    for p in sw["points"]:
        print(f"  {p['value']:>6} {p['D']:>8} {p['median_ms']:>10.3f} {p['p10_ms']:>9.3f} {p['p90_ms']:>9.3f} "
              f"{p['repeats']:>5} {p['threads']:>3} {p['G']:>8} {_fmt(p['local_exponent'], '6.2f'):>6}")
    print(f"  time ~ {name}^b: b = {_fmt(sw['exponent'], '.3f')} +- {_fmt(sw['exponent_se'], '.3f')} "
          f"(least squares on log-log, {len(sw['points'])} points)")
    for key, what in (("G", "gradient route"), ("threads", "BLAS thread count")):
        seen = [p[key] for p in sw["points"]]
        if len(set(seen)) > 1:
            print(f"  note: the {what} changes within this sweep ({' -> '.join(map(str, seen))}), so b mixes "
                  f"code paths; fit a range of one route with --widths/--batch-sizes/--ranks to separate them")


def main(argv=None):
    a = parse_args(argv)
    keep_freed_memory()  # as the slang command does
    names = ["D", "M", "L"] if a.sweep == "all" else [a.sweep]
    verbose = sys.stderr.isatty()

    def progress(msg):
        if verbose:
            print(msg, file=sys.stderr, flush=True)

    out = {"sweeps": {}, "machine": {"cores": os.cpu_count()}}
    for name in names:
        out["sweeps"][name] = sw = run_sweep(name, a, progress)
        if not a.json:
            print_sweep(name, sw)
            sys.stdout.flush()
    if a.json:
        json.dump(out, sys.stdout)
        sys.stdout.write("\n")
    else:
        print(f"machine: {os.cpu_count()} cores; min time {a.min_time} s and {a.min_repeats} warm steps per point")


if __name__ == "__main__":
    main()
