"""slang beside IVON's reference PyTorch implementation: test NLL and accuracy against seconds of training.

    OPENBLAS_NUM_THREADS=1 python benchmarks/peers.py --dataset usps --epochs 20,100 --json peers.json

Runs, on the same splits, the same network, the same initial mean and the same minibatches:

- ``ivon-ref``: the ``ivon-opt`` package's ``IVON`` optimiser on a PyTorch copy of the network (float32, as that
  package is used), ``ess`` = the training-set size, weight decay = prior precision / N per parameter group
  (weights, biases), the IVON hyperparameters of slang's ``ivon`` (``--hyper ivon:...`` sets both);
- any slang step method by its ``--method`` name (default: ``ivon`` and ``slang``), with its defaults and the
  ``--hyper`` overrides.

Every posterior, the reference's included (its mean and ``sigma = 1 / sqrt(ess (h + delta))``), is scored by the
same code (``slangcli.workflow.score``): the Monte-Carlo predictive of ``--eval-samples`` weight samples (the
test NLL per example and accuracy for classification; RMSE and the per-point log-likelihood in the target's units
for regression). Seconds are those of the training loop alone, in process CPU time (``cpu_seconds``, what a shared
machine does not inflate) and wall time (``seconds``), with one thread (``torch.set_num_threads(1)`` and one BLAS
thread; the script sets ``OPENBLAS_NUM_THREADS=1`` and the like unless they are set).

Data sets (``--data-dir``, default ``$SLANG_DATA_DIR`` or ``../shared/datasets``):

- ``usps``: LIBSVM USPS 3 vs 5, 256-50-1 ReLU, random 50/50 splits with split seeds 0, 1, 2;
- ``boston``, ``concrete``: the Gal-layout UCI folders, 1 x 50 ReLU, standardised features and target, splits 0-4,
  noise precision ``--noise-precision`` on the standardised target (fixed: nothing is tuned here);
- ``mnist``: 784-400-400-10 ReLU on the training images, scored on a held-out sixth (10 000 validation images,
  split seed 0); the test images are never read.

``--validation`` trains on four fifths of each split's training part and scores on the remaining fifth: the way
to compare settings without the test data.

The mean and standard error of each figure are over the splits and ``--seeds`` (default: seed 0 only).
Prior precision ``--prior-precision`` (1) on the weights and 1e-5 on the biases (slang fit's defaults), batch size
32. torch and ivon-opt are this script's own requirements (``pip install torch ivon-opt``), not slang's.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import itertools  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from results import table_stream, write_json  # noqa: E402
from slangcli import streams, train, workflow  # noqa: E402
from slangcli.errors import SlangError  # noqa: E402
from slangcli.methods import METHODS  # noqa: E402
from slangcli.methods.base import Problem  # noqa: E402
from slangcli.models import MLP  # noqa: E402
from slangcli.posteriors import DiagonalGaussian  # noqa: E402
from slangcli.workflow import DataOptions  # noqa: E402

BIAS_PRIOR = 1e-5
REFERENCE = "ivon-ref"
VALIDATION_SEED = 2024  # of --validation's hold-out fifth of each training part


@dataclass
class Split:
    """One train/test split, read and coded by slang's own data path, and the network to fit on it."""

    name: str
    split: int
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    model: MLP
    target_scale: float
    held_out: str  # "test" or "validation"


def dataset_splits(name: str, data_dir: Path, noise_precision: float) -> list[tuple[DataOptions, tuple, int]]:
    """``(options, hidden widths, split number)`` of every split of data set ``name``."""
    if name == "usps":
        path = data_dir / "libsvm" / "usps_3vs5"
        return [(DataOptions(path=str(path), test_fraction=0.5, split_seed=k), (50,), k) for k in range(3)]
    if name in ("boston", "concrete"):
        path = data_dir / "uci" / {"boston": "bostonHousing", "concrete": "concrete"}[name]
        return [(DataOptions(path=str(path), uci_split=k, standardize=True), (50,), k) for k in range(5)]
    if name == "mnist":
        path = data_dir / "mnist" / "train-images-idx3-ubyte.gz"
        return [(DataOptions(path=str(path), test_fraction=1 / 6, split_seed=0), (400, 400), 0)]
    raise SystemExit(f"peers.py: unknown data set {name!r} (usps, boston, concrete, mnist)")


def load(name: str, opts: DataOptions, hidden: tuple, k: int, noise_precision: float,
         validation: bool = False) -> Split:
    """Split ``k`` of data set ``name``; with ``validation``, a seeded fifth of its training part is held out
    and scored instead of its test part (which is then not used at all)."""
    try:
        p = workflow.load_training(opts)
    except SlangError as exc:
        raise SystemExit(f"peers.py: {exc} (--data-dir or SLANG_DATA_DIR)") from None
    sizes = (p.X_train.shape[1], *hidden, p.n_outputs)
    model = MLP(sizes, "relu", p.likelihood, noise_precision=noise_precision)
    scale = float(p.arrays["target_scale"][0]) if "target_scale" in p.arrays else 1.0
    X_train, y_train, X_test, y_test = p.X_train, p.y_train, p.X_test, p.y_test
    held_out = "validation" if name == "mnist" else "test"
    if validation:
        order = np.random.default_rng([VALIDATION_SEED, k]).permutation(len(X_train))
        cut = len(X_train) // 5
        X_test, y_test = X_train[order[:cut]], y_train[order[:cut]]
        X_train, y_train = X_train[order[cut:]], y_train[order[cut:]]
        held_out = "validation"
    return Split(name, k, X_train, y_train, X_test, y_test, model, scale, held_out)


def parse_hyper(items: list[str]) -> dict:
    """``["ivon:lr=0.2,samples=1", ...]`` -> ``{"ivon": {"lr": 0.2, "samples": 1}}`` (whole numbers written
    without a point or exponent are ints; what is not a number stays a string)."""
    out: dict = {}
    for item in items:
        method, _, pairs = item.partition(":")
        for pair in filter(None, pairs.split(",")):
            key, _, value = pair.partition("=")
            try:
                number = float(value)
            except ValueError:  # a word, e.g. slang:dtype=float32
                parsed = value.strip()
            else:
                whole = number.is_integer() and not any(c in value.lower() for c in ".e")
                parsed = int(number) if whole else number
            out.setdefault(method, {})[key.strip().replace("-", "_")] = parsed
    return out


# ---------------------------------------------------------------------------------------------- slang's methods
def fit_slang(method: str, hyper: dict, s: Split, problem: Problem, *, seed: int, batch_size: int, n_steps: int):
    module = METHODS[method]
    h = module.Hyper(**hyper)
    with threadpool_limits(limits=1):
        c0, w0 = time.process_time(), time.perf_counter()
        state, _ = train.run(module, h, problem, s.X_train, s.y_train, seed=seed, batch_size=batch_size,
                             n_steps=n_steps)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    return module.posterior(state), cpu, wall, asdict(h)


# ---------------------------------------------------------------------------------------------- the reference
def fit_reference(hyper: dict, s: Split, problem: Problem, *, seed: int, batch_size: int, n_steps: int):
    """IVON's reference implementation from the same initial mean and minibatches; its posterior in slang's
    parameter layout (``W`` of each layer as ``(n_in, n_out)`` rows, then ``b``)."""
    try:
        import torch
        import ivon as ivon_opt
    except ImportError as exc:
        raise SystemExit(f"peers.py: the {REFERENCE} runs need torch and ivon-opt ({exc}); "
                         "pip install torch ivon-opt, or leave ivon-ref out of --methods") from None
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    h = METHODS["ivon"].Hyper(**hyper)
    model = s.model
    mean0 = model.init_mean(streams.derive_rng(seed, streams.INIT))  # what slang's methods start from
    layers, acts = [], []
    for (W, b), lay in zip(model.layout.unflatten(mean0), model.layout.layers):
        lin = torch.nn.Linear(lay.n_in, lay.n_out)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(np.ascontiguousarray(W.T)))
            lin.bias.copy_(torch.from_numpy(b))
        layers.append(lin)
        acts += [lin, torch.nn.ReLU()]
    net = torch.nn.Sequential(*acts[:-1])
    n = len(s.X_train)
    lam = problem.prior_precision  # one value for the weights, one for the biases
    lam_w, lam_b = float(lam[~model.layout.bias_mask()][0]), float(lam[model.layout.bias_mask()][0])
    groups = [{"params": [lin.weight for lin in layers], "weight_decay": lam_w / n},
              {"params": [lin.bias for lin in layers], "weight_decay": lam_b / n}]
    opt = ivon_opt.IVON(groups, lr=h.lr, ess=n, hess_init=h.hess_init, beta1=h.beta1, beta2=h.beta2,
                        mc_samples=h.samples, clip_radius=h.clip_radius if h.clip_radius is not None else math.inf)
    X = torch.from_numpy(s.X_train.astype(np.float32))
    if model.likelihood == "categorical":
        y = torch.from_numpy(s.y_train.astype(np.int64))
        loss_fn = torch.nn.functional.cross_entropy
    elif model.likelihood == "bernoulli":
        y = torch.from_numpy(s.y_train.astype(np.float32))
        def loss_fn(f, t):
            return torch.nn.functional.binary_cross_entropy_with_logits(f[:, 0], t)
    else:
        y = torch.from_numpy(s.y_train.astype(np.float32))
        tau = model.noise_precision
        def loss_fn(f, t):
            return 0.5 * tau * ((f[:, 0] - t) ** 2).mean()
    c0, w0 = time.process_time(), time.perf_counter()
    for t in range(n_steps):
        idx = torch.from_numpy(streams.batch_indices(seed, t, n, batch_size))
        Xb, yb = X[idx], y[idx]
        for _ in range(h.samples):
            with opt.sampled_params(train=True):
                opt.zero_grad()
                loss_fn(net(Xb), yb).backward()
        opt.step()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    # the posterior: sigma = 1 / sqrt(ess (h + delta)) per parameter, in the optimiser's flat order per group
    where = {id(lin.weight): lay.W for lin, lay in zip(layers, model.layout.layers)}
    where.update({id(lin.bias): lay.b for lin, lay in zip(layers, model.layout.layers)})
    mean, sigma = np.empty(model.n_params), np.empty(model.n_params)
    for group in opt.param_groups:
        sd = (1.0 / torch.sqrt(n * (group["hess"] + group["weight_decay"]))).double().numpy()
        offset = 0
        for param in group["params"]:
            values = param.detach().double().numpy()
            sds = sd[offset:offset + param.numel()].reshape(param.shape)
            offset += param.numel()
            if param.dim() == 2:  # torch keeps W as (n_out, n_in)
                values, sds = values.T, sds.T
            mean[where[id(param)]], sigma[where[id(param)]] = values.ravel(), sds.ravel()
    return DiagonalGaussian(mean=mean, log_sigma=np.log(sigma)), cpu, wall, asdict(h)


def score(posterior, s: Split, problem: Problem, *, samples: int, seed: int) -> dict:
    out = workflow.score(s.model, posterior, problem.prior_precision, X_train=None, y_train=None, X_test=s.X_test,
                         y_test=s.y_test, target_scale=s.target_scale, predictive="mc", samples=samples, seed=seed)
    test = out["test"]
    if s.model.likelihood == "gaussian":
        return {"nll": -test["loglik"], "rmse": test["rmse"]}
    return {"nll": test["nll"], "accuracy": test["accuracy"]}


def mean_se(values) -> tuple[float, float]:
    v = np.asarray(values, dtype=float)
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=os.environ.get("SLANG_DATA_DIR", "../shared/datasets"))
    p.add_argument("--dataset", default="usps", help="comma-separated: usps, boston, concrete, mnist")
    p.add_argument("--methods", default=f"{REFERENCE},ivon,slang",
                   help=f"comma-separated: {REFERENCE} (the PyTorch reference) and slang --method names")
    p.add_argument("--hyper", action="append", default=[], metavar="METHOD:KEY=VALUE,...",
                   help="hyperparameters of a slang method (ivon's also set the reference's); repeatable")
    p.add_argument("--epochs", default="20", help="comma-separated training lengths (one fit each)")
    p.add_argument("--splits", type=int, default=None, help="only the first N splits")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--prior-precision", type=float, default=1.0)
    p.add_argument("--noise-precision", type=float, default=1.0, help="regression, on the standardised target")
    p.add_argument("--eval-samples", type=int, default=100)
    p.add_argument("--validation", action="store_true",
                   help="hold out a fifth of each split's training part and score there (for choosing settings; "
                        "the test part is not used)")
    p.add_argument("--seeds", default="0", help="comma-separated seeds of initialisation, minibatches and samples "
                   "(one fit per seed and split)")
    p.add_argument("--json", default=None, metavar="FILE", help="write the results as JSON ('-' for stdout)")
    a = p.parse_args(argv)

    defaults = {"ivon": {"lr": 0.2}, "slang": {"rank": 8, "samples": 4}}
    hyper = {m: dict(defaults.get(m, {})) for m in METHODS}
    for m, values in parse_hyper(a.hyper).items():
        if m not in METHODS:
            p.error(f"--hyper: unknown method {m!r}")
        hyper[m].update(values)
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    for m in methods:
        if m != REFERENCE and m not in METHODS:
            p.error(f"--methods: unknown method {m!r}")
    epochs = [int(e) for e in a.epochs.split(",")]
    seeds = [int(e) for e in a.seeds.split(",")]
    data_dir = Path(a.data_dir)

    results = []
    for name in [d.strip() for d in a.dataset.split(",") if d.strip()]:
        splits = dataset_splits(name, data_dir, a.noise_precision)[: a.splits]
        for opts, hidden, k in splits:
            s = load(name, opts, hidden, k, a.noise_precision, a.validation)
            problem = Problem(s.model, s.model.prior_precision(a.prior_precision, BIAS_PRIOR), len(s.X_train))
            for n_epochs, seed, m in itertools.product(epochs, seeds, methods):
                n_steps = n_epochs * streams.steps_per_epoch(len(s.X_train), a.batch_size)
                kw = dict(seed=seed, batch_size=a.batch_size, n_steps=n_steps)
                if m == REFERENCE:
                    post, cpu, wall, used = fit_reference(hyper["ivon"], s, problem, **kw)
                else:
                    post, cpu, wall, used = fit_slang(m, hyper[m], s, problem, **kw)
                r = {"dataset": name, "split": k, "seed": seed, "method": m, "epochs": n_epochs, "steps": n_steps,
                     "cpu_seconds": cpu, "seconds": wall, "hyper": used, "held_out": s.held_out,
                     **score(post, s, problem, samples=a.eval_samples, seed=seed)}
                results.append(r)
                extra = f"accuracy {r['accuracy']:.4f}" if "accuracy" in r else f"RMSE {r['rmse']:.3f}"
                print(f"{name} split {k} seed {seed} {m} {n_epochs} epochs: {s.held_out} NLL {r['nll']:.4f} "
                      f"{extra} ({cpu:.2f} s CPU, {wall:.2f} s wall)", file=sys.stderr)

    table = []
    for key in dict.fromkeys((r["dataset"], r["method"], r["epochs"]) for r in results):
        rows = [r for r in results if (r["dataset"], r["method"], r["epochs"]) == key]
        e = {"dataset": key[0], "method": key[1], "epochs": key[2], "runs": len(rows),
             "splits": len({r["split"] for r in rows}), "held_out": rows[0]["held_out"]}
        for metric in ("nll", "accuracy", "rmse", "cpu_seconds", "seconds"):
            if metric in rows[0]:
                e[metric], e[metric + "_se"] = mean_se([r[metric] for r in rows])
        table.append(e)

    report = table_stream(a.json)
    print(f"{'data set':9s} {'method':9s} {'epochs':>6s} {'runs':>6s} {'NLL':>16s} {'acc / RMSE':>17s} "
          f"{'CPU s':>7s} {'wall s':>7s}", file=report)
    for e in table:
        second = (f"{e['accuracy']:.4f}±{e['accuracy_se']:.4f}" if "accuracy" in e
                  else f"{e['rmse']:.3f}±{e['rmse_se']:.3f}")
        print(f"{e['dataset']:9s} {e['method']:9s} {e['epochs']:6d} {e['runs']:6d} "
              f"{e['nll']:8.4f}±{e['nll_se']:.4f} {second:>17s} {e['cpu_seconds']:7.2f} {e['seconds']:7.2f}",
              file=report)
    if a.json:
        write_json({"epochs": epochs, "batch_size": a.batch_size, "prior_precision": a.prior_precision,
                    "bias_prior_precision": BIAS_PRIOR, "noise_precision": a.noise_precision,
                    "eval_samples": a.eval_samples, "seeds": seeds, "methods": methods, "table": table,
                    "runs": results}, a.json)


if __name__ == "__main__":
    main()
