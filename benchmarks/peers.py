"""slang beside IVON's reference PyTorch implementation: test NLL and accuracy against seconds of training.

    OPENBLAS_NUM_THREADS=1 python benchmarks/peers.py --dataset usps --epochs 20,100 --json peers.json

Runs, on the same splits, the same network, the same initial mean and the same minibatches:

- ``ivon-ref``: the ``ivon-opt`` package's ``IVON`` optimiser on a PyTorch copy of the network (float32, as that
  package is used), ``ess`` = the training-set size, weight decay = prior precision / N per parameter group
  (weights, biases), the IVON hyperparameters of slang's ``ivon`` (``--hyper ivon:...`` sets both);
- any slang step method by its ``--method`` name (default: ``ivon`` and ``slang``), with its defaults and the
  ``--hyper`` overrides.

Regression's noise precision (on the standardised target) is ``--noise-precision``: 1 by default, fixed for every
method (nothing is tuned); ``auto`` lets slang's methods learn it as ``slang fit`` does by default (the learner of
``slangcli.training.learned`` attached to the training loop as the fit attaches it, and, for a network, the
natural-gradient rates ``slangcli.training.options.NETWORK_RATES`` unless ``--hyper`` gives them). The reference cannot
learn it; it uses ``--reference-noise-precision`` (repeatable: one reference variant each, named ``ivon-ref@...`` when
there are several):

- a number: that value;
- ``learned``: the value slang's ``--learned-from`` method (default ``slang``) learned on the same split and seed,
  at the same number of epochs if it ran them, else at its longest run (the reference is given the value it would
  otherwise have to find: generous to it);
- a comma list: for each split, seed and number of epochs, the value whose reference fit on four fifths of the
  training part has the best NLL on the remaining fifth (the ``--validation`` fold); then the fit on the whole
  training part.

Without ``--reference-noise-precision`` the reference uses ``--noise-precision`` when that is a number and
``learned`` with ``auto``. IVON's step on the mean is ``lr`` times the gradient of the loss, which scales with the
noise precision, while its preconditioner starts at ``hess_init`` whatever the loss (and moves 1 - beta2^t of the
way to the data's curvature): at lr 0.2 the reference diverges on Boston from a noise precision of about 2.
``--reference-rescale`` runs it at ``lr / tau`` and ``hess_init * tau`` instead, the steps on the mean of noise
precision 1 and an initial posterior width scaled as the likelihood's curvature (nothing changes at tau = 1).
Each run records the noise precision it ended with (``noise_precision``, the learned one for ``auto``) and how it
was set (``noise_rule``).

Every posterior, the reference's included (its mean and ``sigma = 1 / sqrt(ess (h + delta))``), is scored by the
same code (``slangcli.score``): the Monte-Carlo predictive of ``--eval-samples`` weight samples (the
test NLL per example and accuracy for classification; RMSE and the per-point log-likelihood in the target's units
for regression). Seconds are those of the training loop alone, in process CPU time (``cpu_seconds``, what a shared
machine does not inflate) and wall time (``seconds``), with one thread (``torch.set_num_threads(1)`` and one BLAS
thread; the script sets ``OPENBLAS_NUM_THREADS=1`` and the like unless they are set).

Data sets (``--data-dir``, default ``$SLANG_DATA_DIR`` or ``../shared/datasets``):

- ``usps``: LIBSVM USPS 3 vs 5, 256-50-1 ReLU, random 50/50 splits with split seeds 0, 1, 2;
- ``boston``, ``concrete``: the Gal-layout UCI folders, 1 x 50 ReLU, standardised features and target, splits 0-4,
  noise precision as above;
- ``mnist``: 784-400-400-10 ReLU on the training images, scored on a held-out sixth (10 000 validation images,
  split seed 0); the test images are never read.

``--validation`` trains on four fifths of each split's training part and scores on the remaining fifth: the way
to compare settings without the test data.

The mean and standard error of each figure are over the splits and ``--seeds`` (default: seed 0 only).
``--epochs`` applies to every method; ``--method-epochs METHOD:E,...`` gives one method (or every reference
variant, as ``ivon-ref``) its own training lengths, e.g. the length at which its CPU time matches another's.
``--pair A:EA,B:EB`` (repeatable) adds the NLL difference A - B paired by split and seed (mean and standard error).
A slang fit that diverges is recorded with ``diverged`` and NLL NaN, and left out of the means (the table counts
it); so is a reference fit whose posterior is not finite.
Prior precision ``--prior-precision`` (1) on the weights and 1e-5 on the biases (slang fit's defaults), batch size
32. slang's methods run at slang fit's defaults (SLANG here with L = 8, S = 4), the reference at
``REFERENCE_DEFAULTS``; ``--hyper ivon:KEY=VALUE`` sets both. torch and ivon-opt are this script's own
requirements (``pip install torch ivon-opt``), not slang's.
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
from dataclasses import asdict, dataclass, replace  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from results import table_stream, write_json  # noqa: E402
from slangcli import streams
from slangcli.data.sources import load_training
from slangcli.data.sources import DataOptions  # noqa: E402
from slangcli.errors import DivergenceError, SlangError  # noqa: E402
from slangcli.gaussian.posteriors import DiagonalGaussian  # noqa: E402
from slangcli.methods import METHODS  # noqa: E402
from slangcli.methods.base import Problem  # noqa: E402
from slangcli.models import MLP  # noqa: E402
from slangcli.predictive import evaluation
from slangcli.training import plan
from slangcli.training import loop as train  # noqa: E402
from slangcli.training.options import network_rates  # noqa: E402

# every bias, the hidden layers' too: the reference IVON takes one weight decay for all of them
BIAS_PRIOR = 1e-5
REFERENCE = "ivon-ref"
# the reference's hyperparameters unless --hyper ivon:... gives others (which slang's ivon then takes too): the
# package's defaults at the rate of the measurement that opened the comparison, 0.2, without clipping; slang's ivon
# runs at slang fit's defaults (rate 0.2, clipping radius 1, float32)
REFERENCE_DEFAULTS = {"lr": 0.2, "clip_radius": None}
AUTO = "auto"
LEARNED = "learned"
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
        p = load_training(opts)
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
def fit_slang(method: str, hyper: dict, s: Split, problem: Problem, *, seed: int, batch_size: int, n_steps: int,
              learn_noise: bool = False):
    """slang's ``method`` from its defaults and ``hyper``; with ``learn_noise`` (regression), the noise precision
    is learned from ``problem``'s as ``slang fit --noise-precision auto`` learns it: a network takes the rates of
    ``slangcli.training.options.network_rates`` that ``hyper`` does not give, and the fit's learner
    (``slangcli.training.plan.Plan.learner``) rides the training loop. Returns ``(posterior, problem it ended with,
    CPU s, wall s, hyperparameters used)``; raises DivergenceError as the loop does."""
    module = METHODS[method]
    learn_noise = learn_noise and problem.model.likelihood == "gaussian"
    if learn_noise and not problem.model.is_linear:
        hyper = {**network_rates(module), **hyper}
    h = module.Hyper(**hyper)
    learner = None
    if learn_noise:
        # the fit's plan, with the split in place of the prepared data (its training arrays)
        planned = plan.Plan(method, module, h, problem.model, problem, s, {"batch_size": batch_size}, [],
                                learn_noise=True)
        learner = planned.learner()
    with threadpool_limits(limits=1):
        c0, w0 = time.process_time(), time.perf_counter()
        state, _ = train.run(module, h, problem, s.X_train, s.y_train, seed=seed, batch_size=batch_size,
                             n_steps=n_steps, learner=learner)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    return module.posterior(state), learner.problem if learner else problem, cpu, wall, asdict(h)


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
    model = problem.model  # s.model with the noise precision of this fit
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
    """The held-out scores of ``posterior`` under ``problem.model`` (its noise precision: the one of the fit)."""
    out = evaluation.score(problem.model, posterior, problem.prior_precision, X_train=None, y_train=None,
                         X_test=s.X_test, y_test=s.y_test, target_scale=s.target_scale, predictive="mc",
                         samples=samples, seed=seed)
    test = out["test"]
    if problem.model.likelihood == "gaussian":
        return {"nll": -test["loglik"], "rmse": test["rmse"]}
    return {"nll": test["nll"], "accuracy": test["accuracy"]}


def mean_se(values) -> tuple[float, float]:
    v = np.asarray(values, dtype=float)
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0


def with_noise(problem: Problem, tau: float) -> Problem:
    """``problem`` with the noise precision ``tau`` (regression; classification is returned unchanged)."""
    if problem.model.likelihood != "gaussian":
        return problem
    return replace(problem, model=replace(problem.model, noise_precision=float(tau)))


def parse_noise(value: str) -> float | str:
    """``--noise-precision``: a positive number or ``auto``."""
    if value.strip() == AUTO:
        return AUTO
    tau = float(value)
    if not 0 < tau < math.inf:
        raise ValueError(f"a noise precision must be positive and finite, got {value}")
    return tau


def parse_reference_noise(value: str) -> float | str | tuple:
    """``--reference-noise-precision``: a number, ``learned``, or a comma list of numbers (a tuple: the one
    chosen on the validation fold)."""
    value = value.strip()
    if value == LEARNED:
        return LEARNED
    values = tuple(parse_noise(v) for v in value.split(",") if v.strip())
    if not values or AUTO in values:
        raise ValueError(f"expected a number, {LEARNED} or a comma list of numbers, got {value!r}")
    return values[0] if len(values) == 1 else values


def noise_label(rule) -> str:
    """The suffix of a reference variant's name: ``1``, ``learned``, ``val``."""
    if isinstance(rule, tuple):
        return "val"
    return rule if rule == LEARNED else f"{rule:g}"


def parse_method_epochs(items: list[str]) -> dict:
    """``["ivon-ref:20,150", ...]`` -> ``{"ivon-ref": [20, 150]}``."""
    out = {}
    for item in items:
        method, _, epochs = item.rpartition(":")
        out[method.strip()] = [int(e) for e in epochs.split(",") if e.strip()]
    return out


def parse_pair(item: str) -> tuple:
    """``"slang:20,ivon-ref:150"`` -> ``(("slang", 20), ("ivon-ref", 150))``."""
    sides = []
    for side in item.split(","):
        method, _, epochs = side.strip().rpartition(":")
        sides.append((method, int(epochs)))
    if len(sides) != 2:
        raise ValueError(f"expected METHOD:EPOCHS,METHOD:EPOCHS, got {item!r}")
    return tuple(sides)


def finite_posterior(posterior) -> bool:
    return bool(np.all(np.isfinite(posterior.mean)) and np.all(np.isfinite(posterior.log_sigma)))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=os.environ.get("SLANG_DATA_DIR", "../shared/datasets"))
    p.add_argument("--dataset", default="usps", help="comma-separated: usps, boston, concrete, mnist")
    p.add_argument("--methods", default=f"{REFERENCE},ivon,slang",
                   help=f"comma-separated: {REFERENCE} (the PyTorch reference) and slang --method names")
    p.add_argument("--hyper", action="append", default=[], metavar="METHOD:KEY=VALUE,...",
                   help="hyperparameters of a slang method (ivon's also set the reference's); repeatable")
    p.add_argument("--epochs", default="20", help="comma-separated training lengths (one fit each)")
    p.add_argument("--method-epochs", action="append", default=[], metavar="METHOD:E,...",
                   help=f"a method's own training lengths instead of --epochs ({REFERENCE}: every reference "
                        "variant); repeatable")
    p.add_argument("--splits", type=int, default=None, help="only the first N splits")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--prior-precision", type=float, default=1.0)
    p.add_argument("--noise-precision", default="1",
                   help=f"regression, on the standardised target: a number (fixed), or {AUTO} (slang's methods "
                        "learn it, as slang fit does by default)")
    p.add_argument("--reference-noise-precision", action="append", default=[], metavar="TAU|learned|TAU,TAU,...",
                   help=f"the reference's noise precision: a number, {LEARNED} (the one --learned-from learned on "
                        "the same split and seed) or a comma list (the best on the validation fold); repeatable, "
                        f"one reference variant each (default: --noise-precision, or {LEARNED} with {AUTO})")
    p.add_argument("--reference-rescale", action="store_true",
                   help="the reference at noise precision tau runs at lr / tau and hess_init * tau (its mean steps "
                        "those of tau = 1)")
    p.add_argument("--learned-from", default="slang",
                   help=f"the slang method whose learned noise precision the reference's {LEARNED} takes")
    p.add_argument("--eval-samples", type=int, default=100)
    p.add_argument("--validation", action="store_true",
                   help="hold out a fifth of each split's training part and score there (for choosing settings; "
                        "the test part is not used)")
    p.add_argument("--seeds", default="0", help="comma-separated seeds of initialisation, minibatches and samples "
                   "(one fit per seed and split)")
    p.add_argument("--pair", action="append", default=[], metavar="A:EA,B:EB",
                   help="report the NLL difference A - B paired by split and seed; repeatable")
    p.add_argument("--json", default=None, metavar="FILE", help="write the results as JSON ('-' for stdout)")
    a = p.parse_args(argv)

    defaults = {"slang": {"rank": 8, "samples": 4}}  # slang's ivon: slang fit's defaults
    hyper = {m: dict(defaults.get(m, {})) for m in METHODS}
    for m, values in parse_hyper(a.hyper).items():
        if m not in METHODS:
            p.error(f"--hyper: unknown method {m!r}")
        hyper[m].update(values)
    reference = {**REFERENCE_DEFAULTS, **hyper["ivon"]}  # the published settings, but for what --hyper ivon: gives
    try:
        noise = parse_noise(a.noise_precision)
        ref_rules = [parse_reference_noise(v) for v in a.reference_noise_precision]
        pairs = [parse_pair(v) for v in a.pair]
    except ValueError as exc:
        p.error(str(exc))
    if not ref_rules:
        ref_rules = [LEARNED if noise == AUTO else noise]
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    for m in methods:
        if m != REFERENCE and m not in METHODS:
            p.error(f"--methods: unknown method {m!r}")
    slang_methods = [m for m in methods if m != REFERENCE]
    # the reference's variants: (name, noise rule); one variant keeps the plain name
    variants = []
    if REFERENCE in methods:
        names = [REFERENCE] if len(ref_rules) == 1 else [f"{REFERENCE}@{noise_label(r)}" for r in ref_rules]
        if len(set(names)) != len(names):
            p.error("--reference-noise-precision: two variants of the same kind (at most one comma list)")
        variants = list(zip(names, ref_rules))
    if any(r == LEARNED for _, r in variants) and (noise != AUTO or a.learned_from not in slang_methods):
        p.error(f"--reference-noise-precision {LEARNED} needs --noise-precision {AUTO} and the --learned-from "
                f"method {a.learned_from!r} in --methods")
    if a.validation and any(isinstance(r, tuple) for _, r in variants):
        p.error("--reference-noise-precision: a list is chosen on the validation fold; not with --validation")
    epochs = [int(e) for e in a.epochs.split(",")]
    own_epochs = parse_method_epochs(a.method_epochs)
    for m in own_epochs:
        if m not in slang_methods and m not in (REFERENCE, *(name for name, _ in variants)):
            p.error(f"--method-epochs: {m!r} is not in --methods")

    def epochs_of(name: str) -> list[int]:
        return own_epochs.get(name, own_epochs.get(REFERENCE if name.startswith(REFERENCE) else name, epochs))

    seeds = [int(e) for e in a.seeds.split(",")]
    data_dir = Path(a.data_dir)
    reference_full = asdict(METHODS["ivon"].Hyper(**reference))

    def reference_hyper(tau: float) -> dict:
        """The reference's hyperparameters at noise precision ``tau`` (``--reference-rescale``)."""
        if not a.reference_rescale:
            return reference
        return {**reference, "lr": reference_full["lr"] / tau, "hess_init": reference_full["hess_init"] * tau}
    start_noise = 1.0 if noise == AUTO else noise  # slang fit starts a learned one from 1

    results = []
    for name in [d.strip() for d in a.dataset.split(",") if d.strip()]:
        splits = dataset_splits(name, data_dir, start_noise)[: a.splits]
        for opts, hidden, k in splits:
            s = load(name, opts, hidden, k, start_noise, a.validation)
            problem = Problem(s.model, s.model.prior_precision(a.prior_precision, BIAS_PRIOR), len(s.X_train))
            regression = s.model.likelihood == "gaussian"
            fold = None  # the validation fold of this split, for the reference's choice from a list

            def record(m, seed, n_epochs, n_steps, fitted, ended, cpu, wall, used, rule, **extra):
                """One run's record (scored unless the fit diverged), printed as it is made."""
                scores = (score(fitted, s, ended, samples=a.eval_samples, seed=seed)
                          if fitted is not None else {"nll": math.nan})
                r = {"dataset": name, "split": k, "seed": seed, "method": m, "epochs": n_epochs, "steps": n_steps,
                     "cpu_seconds": cpu, "seconds": wall, "hyper": used, "held_out": s.held_out,
                     "noise_precision": float(ended.model.noise_precision) if regression else None,
                     "noise_rule": rule if regression else None, **extra, **scores}
                if fitted is None:
                    r["diverged"] = True
                results.append(r)
                if fitted is None:
                    extra_text = "diverged"
                else:
                    extra_text = (f"accuracy {r['accuracy']:.4f}" if "accuracy" in r else
                                  f"RMSE {r['rmse']:.3f} tau {r['noise_precision']:.4g}")
                print(f"{name} split {k} seed {seed} {m} {n_epochs} epochs: {s.held_out} NLL {r['nll']:.4f} "
                      f"{extra_text} ({cpu:.2f} s CPU, {wall:.2f} s wall)", file=sys.stderr)
                return r

            for seed in seeds:
                learned_tau = {}  # epochs -> the noise precision --learned-from ended with, this split and seed
                for m in slang_methods:
                    for n_epochs in epochs_of(m):
                        n_steps = n_epochs * streams.steps_per_epoch(len(s.X_train), a.batch_size)
                        kw = dict(seed=seed, batch_size=a.batch_size, n_steps=n_steps)
                        try:
                            post, ended, cpu, wall, used = fit_slang(m, hyper[m], s, problem,
                                                                     learn_noise=noise == AUTO, **kw)
                        except DivergenceError:
                            post, ended, cpu, wall, used = None, problem, math.nan, math.nan, hyper[m]
                        rule = "learned" if noise == AUTO else "fixed"
                        r = record(m, seed, n_epochs, n_steps, post, ended, cpu, wall, used, rule)
                        if m == a.learned_from and post is not None:
                            learned_tau[n_epochs] = r["noise_precision"]
                for variant, rule in variants:
                    for n_epochs in epochs_of(variant):
                        n_steps = n_epochs * streams.steps_per_epoch(len(s.X_train), a.batch_size)
                        kw = dict(seed=seed, batch_size=a.batch_size, n_steps=n_steps)
                        extra, how = {}, "fixed"
                        if not regression:
                            tau = start_noise
                        elif rule == LEARNED:
                            if not learned_tau:
                                sys.exit(f"peers.py: {a.learned_from} diverged on {name} split {k} seed {seed}: "
                                         f"no learned noise precision for {variant}")
                            source = n_epochs if n_epochs in learned_tau else max(learned_tau)
                            tau, how = learned_tau[source], f"learned by {a.learned_from} in {source} epochs"
                            extra = {"noise_from": {"method": a.learned_from, "epochs": source}}
                        elif isinstance(rule, tuple):
                            if fold is None:
                                fold = load(name, opts, hidden, k, start_noise, validation=True)
                            fold_problem = Problem(fold.model, problem.prior_precision, len(fold.X_train))
                            fold_kw = dict(kw, n_steps=n_epochs * streams.steps_per_epoch(len(fold.X_train),
                                                                                          a.batch_size))
                            choice = {}
                            for candidate in rule:
                                cp = with_noise(fold_problem, candidate)
                                cpost, *_ = fit_reference(reference_hyper(candidate), fold, cp, **fold_kw)
                                nll = (score(cpost, fold, cp, samples=a.eval_samples, seed=seed)["nll"]
                                       if finite_posterior(cpost) else math.inf)
                                choice[f"{candidate:g}"] = nll if math.isfinite(nll) else None
                            finite = {c: v for c, v in zip(rule, choice.values()) if v is not None}
                            tau = min(finite, key=finite.get) if finite else rule[0]
                            how = "best on the validation fold"
                            extra = {"noise_validation_nll": choice}
                        else:
                            tau = rule
                        fp = with_noise(problem, tau)
                        post, cpu, wall, used = fit_reference(reference_hyper(tau) if regression else reference,
                                                              s, fp, **kw)
                        record(variant, seed, n_epochs, n_steps, post if finite_posterior(post) else None, fp, cpu,
                               wall, used, how, **extra)

    # the table: by data set, then epochs, then method, in the order given
    order = {m: i for i, m in enumerate([*slang_methods, *(v for v, _ in variants)])}
    keys = sorted(dict.fromkeys((r["dataset"], r["method"], r["epochs"]) for r in results),
                  key=lambda key: (key[2], order[key[1]]))
    datasets = list(dict.fromkeys(r["dataset"] for r in results))
    keys.sort(key=lambda key: datasets.index(key[0]))
    table = []
    for key in keys:
        rows = [r for r in results if (r["dataset"], r["method"], r["epochs"]) == key]
        ok = [r for r in rows if not r.get("diverged")]
        e = {"dataset": key[0], "method": key[1], "epochs": key[2], "runs": len(rows),
             "splits": len({r["split"] for r in rows}), "held_out": rows[0]["held_out"]}
        if len(ok) < len(rows):
            e["diverged"] = len(rows) - len(ok)
        for metric in ("nll", "accuracy", "rmse", "cpu_seconds", "seconds"):
            if ok and metric in ok[0]:
                e[metric], e[metric + "_se"] = mean_se([r[metric] for r in ok])
        if ok and ok[0]["noise_precision"] is not None:
            e["noise_precision_median"] = float(np.median([r["noise_precision"] for r in ok]))
        table.append(e)

    paired = []
    for (ma, ea), (mb, eb) in pairs:
        for dataset in datasets:
            runs_a = {(r["split"], r["seed"]): r for r in results
                      if (r["dataset"], r["method"], r["epochs"]) == (dataset, ma, ea) and not r.get("diverged")}
            runs_b = {(r["split"], r["seed"]): r for r in results
                      if (r["dataset"], r["method"], r["epochs"]) == (dataset, mb, eb) and not r.get("diverged")}
            both = sorted(set(runs_a) & set(runs_b))
            if not both:
                continue
            diff, diff_se = mean_se([runs_a[j]["nll"] - runs_b[j]["nll"] for j in both])
            paired.append({"dataset": dataset, "a": {"method": ma, "epochs": ea}, "b": {"method": mb, "epochs": eb},
                           "runs": len(both), "nll_difference": diff, "nll_difference_se": diff_se,
                           "cpu_seconds_a": float(np.mean([runs_a[j]["cpu_seconds"] for j in both])),
                           "cpu_seconds_b": float(np.mean([runs_b[j]["cpu_seconds"] for j in both]))})

    report = table_stream(a.json)
    width = max([9, *(len(e["method"]) for e in table)])
    print(f"{'data set':9s} {'method':{width}s} {'epochs':>6s} {'runs':>6s} {'NLL':>16s} {'acc / RMSE':>17s} "
          f"{'CPU s':>7s} {'wall s':>7s} {'tau':>8s}", file=report)
    for e in table:
        if "nll" not in e:
            print(f"{e['dataset']:9s} {e['method']:{width}s} {e['epochs']:6d} {e['runs']:6d} all diverged",
                  file=report)
            continue
        second = (f"{e['accuracy']:.4f}±{e['accuracy_se']:.4f}" if "accuracy" in e
                  else f"{e['rmse']:.3f}±{e['rmse_se']:.3f}")
        tau = f"{e['noise_precision_median']:8.4g}" if "noise_precision_median" in e else ""
        note = f" ({e['diverged']} diverged)" if "diverged" in e else ""
        print(f"{e['dataset']:9s} {e['method']:{width}s} {e['epochs']:6d} {e['runs']:6d} "
              f"{e['nll']:8.4f}±{e['nll_se']:.4f} {second:>17s} {e['cpu_seconds']:7.2f} {e['seconds']:7.2f} "
              f"{tau}{note}", file=report)
    for d in paired:
        print(f"{d['dataset']:9s} NLL {d['a']['method']} {d['a']['epochs']} epochs - {d['b']['method']} "
              f"{d['b']['epochs']} epochs: {d['nll_difference']:+.4f}±{d['nll_difference_se']:.4f} "
              f"({d['runs']} pairs; CPU s {d['cpu_seconds_a']:.2f} / {d['cpu_seconds_b']:.2f})", file=report)
    if a.json:
        write_json({"epochs": epochs, "method_epochs": own_epochs, "batch_size": a.batch_size,
                    "prior_precision": a.prior_precision, "bias_prior_precision": BIAS_PRIOR,
                    "noise_precision": noise,
                    "reference_noise_precision": {v: (list(r) if isinstance(r, tuple) else r) for v, r in variants},
                    "reference_rescale": a.reference_rescale, "learned_from": a.learned_from,
                    "eval_samples": a.eval_samples, "seeds": seeds,
                    "methods": methods, "table": table, "paired": paired, "runs": results}, a.json)


if __name__ == "__main__":
    main()
