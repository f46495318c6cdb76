"""Time one training step of a method at a given problem shape, on synthetic data.

    python benchmarks/step_time.py --features 256 --outputs 1 --batch-size 64 --samples 12 --rank 8 --json

``--method`` is any step method of slang, or one of two point-estimate baselines defined here for timing only:
``sgd`` (the minibatch gradient of the same network's negative log joint by the same back-propagation, no
sampling, and a plain SGD update; the "point estimate" row of the k-tied paper's Table 4) and ``adam`` (the same
gradient with slang's Adam update, to separate the cost of the variational parameters from that of the optimiser).

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
from dataclasses import dataclass
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np

from slangcli.methods import METHODS
from slangcli.methods.base import Problem, hyper_names, is_solver
from slangcli.methods.reparam import adam, adam_moments
from slangcli.models import MLP
from slangcli.streams import derive_rng
from slangcli.threads import blas_threads, keep_freed_memory


@dataclass(frozen=True)
class _SGDHyper:
    samples: int = 1  # no sampling: one pass at the point estimate (the field sizes the BLAS-thread policy)
    lr: float = 1e-3


@dataclass(frozen=True)
class _AdamHyper(_SGDHyper):
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8


class _PointState(NamedTuple):
    mu: np.ndarray
    m: np.ndarray
    v: np.ndarray
    t: int


def _point_init(rng, problem, hyper):
    D = problem.model.n_params
    return _PointState(problem.model.init_mean(rng), *adam_moments(D), 0)


def _point_gradient(state, problem, X, y):
    """One minibatch gradient of the negative log joint at the point estimate, ``(N / M) sum_i g_i + lambda mu``,
    by the same back-propagation as the variational methods (one 'sample', the mean)."""
    nll, fg = problem.model.per_example_grads(state.mu[None], X, y)
    return (problem.n_data / X.shape[0]) * fg.sum() + problem.prior_precision * state.mu, nll


def _sgd_step(rng, state, problem, X, y, hyper):
    grad, nll = _point_gradient(state, problem, X, y)
    return state._replace(mu=state.mu - hyper.lr * grad, t=state.t + 1), {"nll": float(nll.mean())}


def _adam_step(rng, state, problem, X, y, hyper):
    grad, nll = _point_gradient(state, problem, X, y)
    delta, m, v = adam(grad, state.m, state.v, state.t + 1, hyper)
    return _PointState(state.mu - delta, m, v, state.t + 1), {"nll": float(nll.mean())}


SGD = SimpleNamespace(Hyper=_SGDHyper, init=_point_init, step=_sgd_step)
ADAM = SimpleNamespace(Hyper=_AdamHyper, init=_point_init, step=_adam_step)
BASELINES = {"sgd": SGD, "adam": ADAM}
TIMED = {**{m: METHODS[m] for m in METHODS if not is_solver(METHODS[m])}, **BASELINES}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--features", type=int, required=True)
    p.add_argument("--hidden", default="", help="comma-separated hidden widths, empty for none")
    p.add_argument("--outputs", type=int, default=1)
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--samples", type=int, default=12)
    p.add_argument("--rank", type=int, default=1)
    p.add_argument("--method", default="slang", choices=sorted(TIMED))
    p.add_argument("--activation", default="relu")
    p.add_argument("--dtype", default="float64", choices=["float64", "float32"],
                   help="the method's --dtype (SLANG: the network passes and U; IVON: the network passes and "
                        "its state)")
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


def synthetic_problem(sizes, batch_size: int, n_data: int | None, seed: int, activation: str = "relu"):
    """A network of the given sizes (bernoulli for one output, categorical otherwise) and random data for it."""
    likelihood = "bernoulli" if sizes[-1] == 1 else "categorical"
    model = MLP(tuple(sizes), activation=activation, likelihood=likelihood)
    n_data = n_data or 10 * batch_size
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, (n_data, sizes[0]))
    y = rng.integers(0, max(sizes[-1], 2), n_data).astype(float if sizes[-1] == 1 else np.int64)
    return Problem(model, model.prior_precision(1.0, 1e-5), n_data), X, y


def time_steps(method, hyper, problem, X, y, *, batch_size: int, seed: int, min_time: float, min_repeats: int,
               inside=None, clock=time.perf_counter) -> dict:
    """Median time of ``method.step`` over warm repeats (the first fifth, at most 5 steps, discarded), inside the
    BLAS-thread policy of ``slang fit``. ``inside()``, if given, runs within that policy and its result is
    returned under ``"inside"`` (e.g. a GEMM rate or the thread count). ``clock`` measures each step (wall time by
    default; ``time.process_time``, the process's CPU time, is not inflated by other processes on a busy machine
    but counts every BLAS thread)."""
    times = []
    with blas_threads(problem.model.n_params, hyper.samples, batch_size):
        state = method.init(derive_rng(seed, 0), problem, hyper)
        t = 0
        while True:
            idx = derive_rng(seed, 1, t).integers(0, problem.n_data, batch_size)
            t0 = clock()
            state, _ = method.step(derive_rng(seed, 2, t), state, problem, X[idx], y[idx], hyper)
            times.append(clock() - t0)
            t += 1
            warm = times[min(5, len(times) // 5):]
            if len(warm) >= min_repeats and sum(warm) >= min_time:
                break
        extra = inside() if inside is not None else None
    warm = np.asarray(warm) * 1e3
    return {"median_ms": float(np.median(warm)), "p10_ms": float(np.percentile(warm, 10)),
            "p90_ms": float(np.percentile(warm, 90)), "repeats": int(warm.size), "inside": extra}


def main(argv=None):
    a = parse_args(argv)
    keep_freed_memory()  # as the slang command does
    hidden = tuple(int(h) for h in a.hidden.split(",") if h.strip())
    sizes = (a.features, *hidden, a.outputs)
    problem, X, y = synthetic_problem(sizes, a.batch_size, a.n_data, a.seed, a.activation)
    method = TIMED[a.method]
    given = {"rank": a.rank, "samples": a.samples, "dtype": a.dtype}
    if a.method in BASELINES:
        given.pop("samples")  # a point estimate: one network pass, whatever --samples says
    taken = hyper_names(method)
    refused = [k for k in ("dtype",) if k not in taken and given[k] != "float64"]
    if refused:
        raise SystemExit(f"--{refused[0]} does not apply to --method {a.method}")
    hyper = method.Hyper(**{k: v for k, v in given.items() if k in taken})
    D = problem.model.n_params
    gemm_shape = [a.batch_size, a.features, hyper.samples * sizes[1]]
    rng = np.random.default_rng(a.seed + 1)
    timing = time_steps(method, hyper, problem, X, y, batch_size=a.batch_size, seed=a.seed, min_time=a.min_time,
                        min_repeats=a.min_repeats, inside=lambda: gemm_gflops(*gemm_shape, rng))
    gflops = timing.pop("inside")
    out = {
        "method": a.method,
        "shape": {"sizes": list(sizes), "n_params": D, "batch_size": a.batch_size, "samples": hyper.samples,
                  "rank": a.rank, "dtype": a.dtype},
        **timing,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "gemm_gflops": gflops,
        "gemm_shape": gemm_shape,
    }
    if a.json:
        json.dump(out, sys.stdout)
        sys.stdout.write("\n")
    else:
        print(f"{a.method} sizes={sizes} D={D} M={a.batch_size} S={hyper.samples} L={a.rank}: "
              f"median {out['median_ms']:.3f} ms/step (p10 {out['p10_ms']:.3f}, p90 {out['p90_ms']:.3f}, "
              f"n={out['repeats']}), peak RSS {out['peak_rss_mb']:.0f} MB, GEMM {gflops:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
