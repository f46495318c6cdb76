"""Gradient SNR of the standard-deviation parameters during training, as the k-tied Normal paper measures it.

    python benchmarks/ktied_snr.py --steps 1000,5000,9000 --json ktied_snr.json

The paper (Figure 4, footnote 2) reports, for the second dense layer of the MNIST MLP, the mean over its
standard-deviation parameters (``log sigma_ij`` for mean field, ``log u_ik`` and ``log v_jk`` for the k-tied
Normal) of ``E[g^2] / Var[g^2]``, the moments taken over the gradients of the last 10 training batches, at steps
1000, 5000 and 9000. This script trains ``bbb`` and ``ktied`` (k from ``--ranks``) with the settings of
``ktied_mnist.py`` and, at each of ``--steps``, replays the last ``--window`` training steps: before each of them
the gradient of the standard-deviation parameters is taken with that step's own minibatch and weight noise (the
generator of step t, ``slangcli.training.loop``), so the window holds exactly the gradients the training used, each at
the parameters of its own step. Reported per method and step, for the chosen layer:

- ``window``: the paper's statistic over that window, and ``|E g| / std g`` over it;
- ``draws``: the same two statistics from ``--draws`` independent minibatch-and-noise draws at the parameters of
  the step (what ``slang fit --snr`` records), which separates gradient noise from the drift of the parameters
  over the window.

``--part likelihood`` takes the gradient of the expected log-likelihood alone, without the KL term, whose exact
gradient is deterministic and, while the standard deviations are small, dominates the mean-field gradient.

Each is averaged over the layer's parameters as ``slangcli.methods.reparam.snr`` does (parameters whose gradient
does not vary beyond rounding are left out). ``--seeds`` repeats everything per seed; the table shows mean and
standard error over seeds when there are several.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import ktied_mnist
from results import write_json
from slangcli import streams
from slangcli.methods import METHODS
from slangcli.methods.base import Problem
from slangcli.methods.reparam import snr
from slangcli.models import MLP
from slangcli.threads import blas_threads, keep_freed_memory
from slangcli.training import loop as train


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", type=Path, default=ktied_mnist.DEFAULT_DATA)
    p.add_argument("--steps", default="1000,5000,9000", help="training steps at which to measure")
    p.add_argument("--window", type=int, default=10, help="training batches per window (the paper's 10)")
    p.add_argument("--draws", type=int, default=10, help="independent draws at fixed parameters")
    p.add_argument("--ranks", default="1,2,3")
    p.add_argument("--layer", type=int, default=2, help="weight matrix, from 1 (the paper's 'Dense 2' is 2)")
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--samples", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--prior-std", type=float, default=0.2)
    p.add_argument("--init-std", type=float, default=0.01)
    p.add_argument("--kl-anneal-steps", type=int, default=0)
    p.add_argument("--train-subset", type=int, default=None, help="use only the first N training images")
    p.add_argument("--part", choices=["elbo", "likelihood"], default="elbo",
                   help="the gradient of the whole objective, or of its expected log-likelihood alone (no KL term)")
    p.add_argument("--seeds", default="0")
    p.add_argument("--json", type=Path, default=None, help="write the results as JSON to this file ('-': stdout)")
    return p.parse_args(argv)


def measure(name: str, module, hyper, problem: Problem, X, y, steps: list[int], a, seed: int):
    """Train to each of ``steps`` in turn, replaying the last ``window`` steps by hand to record their gradients.
    Returns the records and the final state (the state ``train.run`` reaches in as many steps)."""
    layer = a.layer - 1
    kl = 0.0 if a.part == "likelihood" else None  # None: the step's own KL weight
    n, batch = problem.n_data, min(a.batch_size, problem.n_data)
    state = history = None
    out = []
    with blas_threads(problem.model.n_params, hyper.samples, batch):
        for target in steps:
            start = max(target - a.window, 0 if state is None else state.t)
            if state is None or state.t < start:
                state, history = train.run(module, hyper, problem, X, y, seed=seed, batch_size=batch,
                                           n_steps=start, state=state, history=history)
            window = []
            while state.t < target:
                t = state.t
                idx = streams.batch_indices(seed, t, n, batch)
                # the gradient this step uses: the same generator draws the same weight noise first
                window.append(module.std_gradients(streams.derive_rng(seed, streams.STEP, t), state, problem, X[idx],
                                                   y[idx], hyper, kl)[layer])
                state, _ = module.step(streams.derive_rng(seed, streams.STEP, t), state, problem, X[idx], y[idx], hyper)
            ratio_w, paper_w = snr(np.stack(window)) if len(window) >= 2 else (float("nan"), float("nan"))
            ratios, papers = train.gradient_snr(module, hyper, problem, X, y, state, seed=seed, batch_size=batch,
                                                draws=a.draws, kl=kl)
            ratio_d, paper_d = ratios[layer], papers[layer]
            out.append({"method": name, "seed": seed, "step": target, "window": len(window),
                        "window_paper": paper_w, "window_snr": ratio_w,
                        "draws_paper": paper_d, "draws_snr": ratio_d})
            print(f"{name:9s} seed {seed} step {target:6d}: window E[g^2]/Var[g^2] {paper_w:10.4g}  "
                  f"|E g|/std g {ratio_w:8.3g}   draws {paper_d:10.4g}  {ratio_d:8.3g}",
                  file=sys.stderr, flush=True)
    return out, state


def main(argv=None):
    a = parse_args(argv)
    keep_freed_memory()  # as the slang command does
    steps = sorted(int(s) for s in a.steps.split(","))
    ranks = [int(k) for k in a.ranks.split(",") if k]
    (X, y), _, _ = ktied_mnist.load(argparse.Namespace(data_dir=a.data_dir, train_subset=a.train_subset,
                                                       test_subset=None))
    model = MLP(ktied_mnist.SIZES, activation="relu", likelihood="categorical")
    if not 1 <= a.layer <= len(model.sizes) - 1:
        raise SystemExit(f"--layer must be between 1 and {len(model.sizes) - 1}")
    lam = model.prior_precision(1.0 / a.prior_std**2, 1.0 / a.prior_std**2)
    problem = Problem(model, lam, len(X))
    common = {"samples": a.samples, "lr": a.lr, "init_std": a.init_std, "kl_anneal_steps": a.kl_anneal_steps}
    runs = [("bbb", METHODS["bbb"], METHODS["bbb"].Hyper(**common))]
    runs += [(f"ktied k={k}", METHODS["ktied"], METHODS["ktied"].Hyper(rank=k, **common)) for k in ranks]
    records, started = [], time.perf_counter()
    for seed in (int(s) for s in a.seeds.split(",")):
        for name, module, hyper in runs:
            records += measure(name, module, hyper, problem, X, y, steps, a, seed)[0]
    report(records)
    if a.json is not None:
        write_json({"config": {**vars(a), "data_dir": str(a.data_dir), "json": str(a.json) if a.json else None},
                    "records": records, "wall_seconds": time.perf_counter() - started}, a.json)


def report(records: list[dict]) -> None:
    """Mean (and standard error over seeds) per method and step, on stderr."""
    methods = list(dict.fromkeys(r["method"] for r in records))
    steps = sorted({r["step"] for r in records})
    print(f"{'':10s}" + "".join(f"{'step ' + str(s):>26s}" for s in steps), file=sys.stderr)
    for key, label in [("window_paper", "E[g^2]/Var[g^2] over the last training batches"),
                       ("draws_snr", "|E g|/std g over independent draws")]:
        print(label, file=sys.stderr)
        for m in methods:
            cells = []
            for s in steps:
                v = np.array([r[key] for r in records if r["method"] == m and r["step"] == s])
                se = f" ± {v.std(ddof=1) / np.sqrt(v.size):.3g}" if v.size > 1 else ""
                cells.append(f"{v.mean():.4g}{se}")
            print(f"{m:10s}" + "".join(f"{c:>26s}" for c in cells), file=sys.stderr)


if __name__ == "__main__":
    main()
