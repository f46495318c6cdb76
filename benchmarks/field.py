"""slang's default fit beside what a scientist with a table would pick instead: a deep ensemble and NGBoost.

    python benchmarks/field.py --sets boston,concrete,energy,yacht --process --json field.json
    python benchmarks/field.py --sets boston,yacht --splits 0-2 --process
    python benchmarks/field.py --sets boston --slang-options "--epochs 40 --batch-size 100"
    python benchmarks/field.py --sets none --sizes 10000,100000,1000000 --process
    python benchmarks/field.py --sets none --classification usps,australian --process

Three methods on the same rows (``--methods``, default all three):

- ``slang``: ``slang fit FOLDER --uci-split K --hidden 50``, nothing else (SLANG at its defaults, the noise precision
  learned, 1 000 evaluation samples), fitted in this process through the library's own doors: the command line's
  options made into ``DataOptions`` and ``FitOptions`` by ``slangcli.sweep.grid`` (as ``slang sweep`` and
  ``slang fit`` make them), the data read by ``slangcli.data.sources.load_training`` and the fit and its scoring by
  ``slangcli.training.fitting.fit_prepared``, the function ``slang fit`` calls. Its scores are the run's own test
  metrics. ``--slang-options "--epochs 40 --batch-size 100"`` adds ``slang fit`` options to every slang fit (a
  candidate default, measured beside the others the same way).
- ``ensemble``: the deep ensemble of Lakshminarayanan et al. (2017) in PyTorch: 5 networks, each one hidden layer of
  50 ReLU units with two outputs, the mean and the variance ``softplus(raw) + 1e-6``, trained on the Gaussian
  negative log-likelihood by Adam (``--ensemble-lr``, 0.01: of 0.001, 0.01 and 0.1 the best on boston and yacht
  splits 0-2, where 0.001 leaves yacht unfitted in 40 epochs, log-likelihood -3.33, and 0.1 takes boston's RMSE to
  29; generous to the ensemble, since it was chosen on test rows), 40 epochs (``--ensemble-epochs``) of shuffled
  minibatches of 100, PyTorch's default initialisation and float32, features and target standardised with the
  training rows' statistics, seeds derived from the split (network m of split K: ``torch.manual_seed`` of
  ``[K, m]`` hashed). The paper's appendix gives batch 100, Adam and 40 epochs for UCI, and adversarial training
  (the fast gradient sign, each batch's loss plus the loss at ``x + eps sign(grad_x loss)``, eps 1 % of each
  standardised input's training range): ``--adversarial`` turns that on; the default, and every table unless it
  says otherwise, is the plain ensemble without it. The prediction is the equal-weight mixture of the 5 Gaussians,
  scored in the target's units: the log-likelihood of the mixture density itself (the log of the mean of the 5
  densities, exact), the RMSE of its mean, and the coverage of its central 95 % and 90 % intervals, whose ends are
  the mixture's own quantiles (bisection on its CDF, to the rounding level: :func:`mixture_quantile`).
- ``ngboost``: ``NGBRegressor()`` at its defaults (Normal distribution, 500 trees of depth 3, rate 0.01; only
  ``random_state`` = the split and ``verbose`` off), on the features and target as read; the log-likelihood of its
  predicted Normal, the RMSE of its mean, the coverage of its central intervals.

Data (``--data-dir``, default ``$SLANG_DATA_DIR`` or ``../shared/datasets``): the Gal-layout UCI folders in
``DATA_DIR/uci`` (``--sets``: boston = bostonHousing, concrete, energy, yacht; ``none`` for none), their splits
``--splits`` (``0-19``, ``0,1,2``; default all 20). slang reads a folder with ``--uci-split K``; the ensemble and
NGBoost get the same rows from slang's reader of the layout (``slangcli.data.readers.read_uci_folder``: data.txt,
index_features.txt, index_target.txt, index_train_K.txt, index_test_K.txt).

CPU seconds: every method runs with one thread (``torch.set_num_threads(1)``; ``OPENBLAS_NUM_THREADS``,
``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` set to 1 before NumPy loads, unless they are set), one fit at a time.
``cpu_seconds`` is the fit and its scoring inside this running process (``time.process_time()`` around them: the
data already read, start-up and imports excluded; each method's code has run once before, untimed, on a small
piece of the data, so that its one-time costs of a first call count as start-up: :func:`warm_up`; the C
allocator keeps freed memory as the ``slang`` command has it keep it, ``slangcli.threads.keep_freed_memory``, for
every method): slang's training and 1 000-sample test scoring, the ensemble's
standardisation, training, prediction and mixture scores, NGBoost's fit and prediction. With ``--process`` every
fit also runs as a process of its own, and ``process_cpu_seconds`` is that process's whole CPU time (user and
system, from ``resource.getrusage(RUSAGE_CHILDREN)``: interpreter start-up, imports, reading the data, the fit,
the scores): slang's as ``python -m slangcli fit FOLDER --uci-split K --hidden 50 -o RUN.h5`` (what a user's
command costs, writing the run file included), the others' as this script's internal ``--one`` mode, which fits
one method on one split and prints its record. slang's process run also checks that its run file's test
log-likelihood is the one of the in-process fit (a difference is printed as a warning and recorded).

``--sizes 10000,100000,1000000``: synthetic regression tables of that many rows (8 standard-normal inputs, the
target a fixed random teacher network's mean, 8-32-1 tanh, plus noise whose standard deviation another output of
the teacher sets: heteroscedastic), written once to a temporary CSV pair (the last 10 % of the rows the test
file): ``slang fit TRAIN.csv --test TEST.csv --hidden 50`` beside the ensemble (``--size-methods``, default
``slang,ensemble``; add ``ngboost`` to time it too), one fit each, and the ratio of slang's CPU to the ensemble's
per size (in process, and whole process with ``--process``) with each method's growth from the size before.

``--classification usps,australian``: the LIBSVM files ``DATA_DIR/libsvm/usps_3vs5`` and ``australian_scale``,
three random halves (``--test-fraction 0.5 --split-seed K``, K = 0, 1, 2, the rows of slang's own split for every
method): slang's default for a classification network, ``slang fit FILE --hidden 50 --test-fraction 0.5
--split-seed K`` (one IVON posterior), beside the deep ensemble of 5 classifier networks (1 x 50 ReLU; a sigmoid
output for two classes, softmax for more; cross-entropy, Adam, the same epochs, batch and rate) whose prediction
is the mean of the 5 networks' probabilities, and NGBoost's ``NGBClassifier()`` (``--methods``). Reported: test
NLL, accuracy and the expected calibration error, all three by slang's own functions
(``slangcli.predictive.metrics.classification_scores`` and ``calibration``, 15 bins) for every method; and CPU.

Output: a table per data set on stdout (method, splits, test log-likelihood mean and standard error over the
splits, RMSE, 95 % and 90 % coverage, CPU seconds per fit, and with ``--process`` whole-process CPU seconds per
fit), then slang's CPU as a multiple of the ensemble's; ``--json FILE`` (``-``: stdout, the tables then go to
stderr) writes every per-split record and the summaries. torch and ngboost are this script's own requirements,
not slang's (``pip install torch ngboost``); a method whose package is missing is left out, saying so, and the
others run.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402
import shlex  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import scipy.special  # noqa: E402

from results import table_stream, write_json  # noqa: E402

METHODS = ("slang", "ensemble", "ngboost")
# where a method's package comes from, for the message when it is missing
REQUIRES = {"ensemble": ("torch", "pip install torch"), "ngboost": ("ngboost", "pip install ngboost")}
UCI_SETS = {"boston": "bostonHousing", "concrete": "concrete", "energy": "energy", "yacht": "yacht"}
LIBSVM_SETS = {"usps": "usps_3vs5", "australian": "australian_scale"}
CLASSIFICATION_SPLITS = (0, 1, 2)
LEVELS = (0.95, 0.9)
HIDDEN = 50
# the deep ensemble (Lakshminarayanan et al. 2017): networks, minibatch, the variance's floor, and the adversarial
# step (a fraction of each input's training range)
MEMBERS, BATCH, MIN_VARIANCE, ADVERSARIAL_EPS = 5, 100, 1e-6, 0.01
# the synthetic tables of --sizes: the teacher network's seed, the rows' seed, the test part
TEACHER_SEED, TABLE_SEED, SIZE_TEST_FRACTION = 2017, 0, 0.1


# ------------------------------------------------------------------------------------------ mixtures of Gaussians
def mixture_logpdf(y: np.ndarray, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    """``log((1/M) sum_m N(y_n | mean_mn, var_mn))`` per column n of ``mean, var : (M, N)``: the equal-weight
    mixture's exact log-density (summed in log space, so a far-out target does not underflow)."""
    logp = -0.5 * np.log(2 * np.pi * var) - 0.5 * (y - mean) ** 2 / var
    return scipy.special.logsumexp(logp, axis=0) - np.log(mean.shape[0])


def mixture_cdf(x: np.ndarray, mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """``(1/M) sum_m Phi((x_n - mean_mn) / sd_mn)`` per column n."""
    return scipy.special.ndtr((x - mean) / sd).mean(axis=0)


def mixture_quantile(p: float, mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """The ``p``-quantile ``(N,)`` of each column's equal-weight mixture of ``N(mean_m, sd_m^2)``, by bisection on its
    CDF (continuous and strictly increasing: one root), all columns at once. The root lies between the components'
    own ``p``-quantiles ``min_m`` and ``max_m`` of ``mean_m + sd_m z_p`` (at the first every component's CDF is at
    most p, at the second at least p); halving that bracket until it is within a few rounding units of the
    answer's scale (``|x| + min_m sd_m``) takes about 50 steps."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"a quantile level must lie strictly between 0 and 1, got {p}")
    ends = mean + sd * scipy.special.ndtri(p)
    lo, hi = ends.min(axis=0), ends.max(axis=0)
    scale = sd.min(axis=0)
    for _ in range(200):  # (each step halves the bracket: 200 reach any float64 resolution)
        mid = 0.5 * (lo + hi)
        below = mixture_cdf(mid, mean, sd) < p
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        if np.all(hi - lo <= 4 * np.finfo(float).eps * (np.abs(mid) + scale)):
            break
    return 0.5 * (lo + hi)


def mixture_scores(y: np.ndarray, mean: np.ndarray, var: np.ndarray) -> dict:
    """Test scores of the mixtures ``(M, N)`` in the target's units: the mean log-density, the RMSE of the mixture
    mean, and the coverage of the central intervals of ``LEVELS`` (ends: the mixture quantiles)."""
    sd = np.sqrt(var)
    out = {"loglik": float(np.mean(mixture_logpdf(y, mean, var))),
           "rmse": float(np.sqrt(np.mean((mean.mean(axis=0) - y) ** 2))), "n": int(len(y))}
    for c in LEVELS:
        lo, hi = mixture_quantile((1 - c) / 2, mean, sd), mixture_quantile((1 + c) / 2, mean, sd)
        out[f"coverage_{c:g}"] = float(np.mean((lo <= y) & (y <= hi)))
    return out


def mixture_moments(mean: np.ndarray, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mixture's mean and variance per column: ``mean of means``, ``mean of (var + mean^2) - mean^2``."""
    m = mean.mean(axis=0)
    return m, (var + mean**2).mean(axis=0) - m**2


# ------------------------------------------------------------------------------------------------------ the data
def parse_splits(text: str | None, count: int) -> list[int]:
    """``0-19``, ``0,1,2``, ``0-2,5`` (both ends of a range included); None: all ``count``."""
    if text is None:
        return list(range(count))
    out = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        lo, sep, hi = item.partition("-")
        out += list(range(int(lo), int(hi) + 1)) if sep else [int(item)]
    return out


def uci_count(folder: Path) -> int:
    return len(list(folder.glob("index_train_*.txt"))) or len(list(folder.glob("data/index_train_*.txt")))


def slang_params(job: dict, extra: dict) -> dict:
    """The ``slang fit`` options of ``job``'s fit (a sweep grid's parameters: option name -> text): the command of
    the default fit, then ``--slang-options``."""
    kind = job["kind"]
    if kind == "uci":
        params = {"data": job["folder"], "uci-split": str(job["split"])}
    elif kind == "table":
        params = {"data": job["train"], "test": job["test"]}
    else:
        params = {"data": job["file"], "test-fraction": "0.5", "split-seed": str(job["split"])}
    return {**params, "hidden": str(HIDDEN), **extra}


def parse_slang_options(text: str | None) -> dict:
    """``--slang-options`` as ``slang fit`` options (``slangcli.sweep.grid.params_of``: the names a sweep's grid
    takes, switches as ``--no-standardize``); a SystemExit naming what is not one."""
    from slangcli.sweep.grid import params_of

    words = shlex.split(text or "")
    params = params_of(["DATA", *words])
    if params is None:
        raise SystemExit(f"field.py: --slang-options {text!r}: not slang fit options (option value pairs of the "
                         "options a fit takes)")
    del params["data"]
    return params


def slang_point(job: dict, extra: dict):
    """The fit of ``job`` as a sweep's point: its ``slang fit`` arguments and its parameters, from which
    :func:`fit_slang` makes its options. A ConfigError (an invalid option) ends the script naming it."""
    from slangcli.errors import ConfigError
    from slangcli.sweep.grid import points_of

    try:
        points = points_of([slang_params(job, extra)])
    except ConfigError as exc:
        raise SystemExit(f"field.py: {exc}") from None
    if len(points) != 1:
        raise SystemExit("field.py: --slang-options must name one fit (no lists of values)")
    return points[0]


def read_arrays(job: dict) -> dict:
    """The training and test rows of ``job`` as read, for the ensemble and NGBoost: a UCI split by slang's reader of
    the layout; a table or a LIBSVM half by slang's data path without standardisation (the rows and codes of slang's
    own fit)."""
    if job["kind"] == "uci":
        from slangcli.data.readers import read_uci_folder

        table, train, test = read_uci_folder(job["folder"], job["split"])
        return {"X_train": table.X[train], "y_train": table.y[train], "X_test": table.X[test], "y_test": table.y[test],
                "likelihood": "gaussian", "n_outputs": 1}
    from slangcli.data.sources import DataOptions, load_training

    if job["kind"] == "table":
        opts = DataOptions.of(job["train"], test=job["test"], standardize=False)
    else:
        opts = DataOptions.of(job["file"], test_fraction=0.5, split_seed=job["split"], standardize=False)
    p = load_training(opts)
    return {"X_train": p.X_train, "y_train": p.y_train, "X_test": p.X_test, "y_test": p.y_test,
            "likelihood": p.likelihood, "n_outputs": p.n_outputs}


def teacher_table(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows of the synthetic regression task of ``--sizes``: 8 standard-normal inputs; the target the mean of a
    fixed random 8-32 tanh teacher plus Gaussian noise whose standard deviation (0.1 to about 1) a second output of
    the same teacher sets."""
    t = np.random.default_rng(TEACHER_SEED)
    W, b = t.normal(size=(8, 32)) / np.sqrt(8), 0.5 * t.normal(size=32)
    w_mean, w_sd = 2 * t.normal(size=32) / np.sqrt(32), t.normal(size=32) / np.sqrt(32)
    rng = np.random.default_rng([TABLE_SEED, n])
    X = rng.standard_normal((n, 8))
    h = np.tanh(X @ W + b)
    y = h @ w_mean + (0.1 + 0.5 * np.logaddexp(0, h @ w_sd)) * rng.standard_normal(n)
    return X, y


def write_table(folder: Path, n: int) -> dict:
    """The table of ``n`` rows as ``train.csv`` and ``test.csv`` (its last tenth) in ``folder``: a job."""
    X, y = teacher_table(n)
    cut = n - int(round(SIZE_TEST_FRACTION * n))
    header = ",".join([*(f"x{j}" for j in range(X.shape[1])), "y"])
    paths = {}
    for part, rows in (("train", slice(0, cut)), ("test", slice(cut, n))):
        paths[part] = str(folder / f"table{n}_{part}.csv")
        np.savetxt(paths[part], np.column_stack([X[rows], y[rows]]), fmt="%.8g", delimiter=",", header=header,
                   comments="")
    return {"kind": "table", "set": f"table{n}", "rows": n, **paths, "split": 0}


# --------------------------------------------------------------------------------------------------------- slang
def fit_slang(point) -> dict:
    """slang's fit of ``point`` in this process, as ``slang fit`` with its arguments does it
    (``slangcli.training.fitting.fit``: a UCI folder's target is Gaussian unless the options say otherwise, the
    features standardised as the options say), but with the data read first: ``cpu_seconds`` is the fit and its
    scoring (``fit_prepared``). The record's scores are the run's test metrics."""
    from slangcli.data.readers import is_uci_folder
    from slangcli.data.sources import load_training
    from slangcli.errors import SlangError
    from slangcli.sweep.grid import options_of
    from slangcli.training.fitting import fit_prepared
    from slangcli.training.options import AUTO

    data, options, _ = options_of(point.params)
    if options.likelihood == AUTO and (data.format == "uci" or is_uci_folder(data.path)):
        options = options.for_likelihood("gaussian")
    data = replace(data, standardize=bool(options.standardize))
    try:
        prepared = load_training(data, likelihood=options.likelihood)
        c0, w0 = time.process_time(), time.perf_counter()
        run = fit_prepared(prepared, options)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    except SlangError as exc:
        return {"failed": str(exc)}
    test = run.metrics["test"]
    out = {"cpu_seconds": cpu, "seconds": wall, "steps": run.metrics["steps"], "command": point.args}
    if "rmse" in test:
        out.update(loglik=test["loglik"], rmse=test["rmse"],
                   **{f"coverage_{c:g}": test["coverage"][f"{c:g}"] for c in LEVELS},
                   noise_precision=run.model.noise_precision)
    else:
        out.update(nll=test["nll"], accuracy=test["accuracy"], ece=test["ece"])
    return out


# ------------------------------------------------------------------------------------------------ deep ensemble
def _torch():
    """torch, with one intra-op and one inter-op thread."""
    import torch

    torch.set_num_threads(1)
    with contextlib.suppress(RuntimeError):  # (set already in this process)
        torch.set_num_interop_threads(1)
    return torch


def member_seed(split: int, member: int) -> int:
    """The torch seed of network ``member`` of split ``split`` (one stream each, independent of the others)."""
    return int(np.random.SeedSequence([split, member]).generate_state(1)[0])


def standardise(train: np.ndarray, *others):
    """``train`` and ``others`` scaled with ``train``'s column means and standard deviations (a constant column: 1)."""
    mu, sd = train.mean(axis=0), train.std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    return [(a - mu) / sd for a in (train, *others)], mu, sd


def fit_ensemble(arrays: dict, split: int, *, epochs: int, lr: float, adversarial: bool) -> dict:
    """The deep ensemble on ``arrays``: trained, its test predictive formed and scored; ``cpu_seconds`` covers all
    of that (the arrays already read)."""
    torch = _torch()
    c0, w0 = time.process_time(), time.perf_counter()
    regression = arrays["likelihood"] == "gaussian"
    (X, X_test), _, _ = standardise(arrays["X_train"], arrays["X_test"])
    X = torch.as_tensor(X, dtype=torch.float32)
    X_test = torch.as_tensor(X_test, dtype=torch.float32)
    if regression:
        (y,), y_mean, y_sd = standardise(arrays["y_train"])
        y = torch.as_tensor(y, dtype=torch.float32)
        outputs = 2
    else:
        y = torch.as_tensor(arrays["y_train"].astype(np.int64))
        outputs = 1 if arrays["likelihood"] == "bernoulli" else arrays["n_outputs"]
    # each standardised input's training range, for the adversarial step
    eps = ADVERSARIAL_EPS * (X.max(dim=0).values - X.min(dim=0).values)

    def loss_of(net, xb, yb):
        out = net(xb)
        if regression:
            var = torch.nn.functional.softplus(out[:, 1]) + MIN_VARIANCE
            return (0.5 * torch.log(var) + 0.5 * (yb - out[:, 0]) ** 2 / var).mean()
        if outputs == 1:
            return torch.nn.functional.binary_cross_entropy_with_logits(out[:, 0], yb.float())
        return torch.nn.functional.cross_entropy(out, yb)

    n = len(X)
    predictions = []
    for m in range(MEMBERS):
        torch.manual_seed(member_seed(split, m))
        net = torch.nn.Sequential(torch.nn.Linear(X.shape[1], HIDDEN), torch.nn.ReLU(),
                                  torch.nn.Linear(HIDDEN, outputs))
        opt = torch.optim.Adam(net.parameters(), lr=lr)
        for _ in range(epochs):
            order = torch.randperm(n)
            for lo in range(0, n, BATCH):
                idx = order[lo:lo + BATCH]
                xb, yb = X[idx], y[idx]
                if adversarial:  # Goodfellow et al.'s fast gradient sign: the loss at x and at the perturbed x
                    xb.requires_grad_(True)
                    loss = loss_of(net, xb, yb)
                    (grad,) = torch.autograd.grad(loss, xb, retain_graph=True)
                    loss = loss + loss_of(net, (xb + eps * grad.sign()).detach(), yb)
                else:
                    loss = loss_of(net, xb, yb)
                opt.zero_grad()
                loss.backward()
                opt.step()
        with torch.no_grad():
            predictions.append(net(X_test).double().numpy())
    out = np.stack(predictions)  # (M, N, outputs)
    y_test = arrays["y_test"]
    if regression:
        mean = y_mean + y_sd * out[..., 0]
        var = y_sd**2 * (np.logaddexp(0, out[..., 1]) + MIN_VARIANCE)  # (softplus in float64, as in training)
        scores = mixture_scores(y_test, mean, var)
    else:
        from slangcli.predictive import metrics

        if outputs == 1:
            p1 = scipy.special.expit(out[..., 0]).mean(axis=0)
            probs = np.column_stack([1 - p1, p1])
        else:
            probs = scipy.special.softmax(out, axis=-1).mean(axis=0)
        scores = {**metrics.classification_scores(probs, y_test),
                  "ece": metrics.calibration(probs, y_test)["ece"]}
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    return {"cpu_seconds": cpu, "seconds": wall, **scores}


# ------------------------------------------------------------------------------------------------------ NGBoost
def fit_ngboost(arrays: dict, split: int) -> dict:
    """NGBoost at its defaults on the rows as read; ``cpu_seconds``: its fit, prediction and scores."""
    import ngboost

    c0, w0 = time.process_time(), time.perf_counter()
    y_test = arrays["y_test"]
    if arrays["likelihood"] == "gaussian":
        model = ngboost.NGBRegressor(random_state=split, verbose=False)
        model.fit(arrays["X_train"], arrays["y_train"])
        dist = model.pred_dist(arrays["X_test"])
        loc, scale = np.asarray(dist.params["loc"]), np.asarray(dist.params["scale"])
        z = (y_test - loc) / scale
        scores = {"loglik": float(np.mean(-0.5 * np.log(2 * np.pi) - np.log(scale) - 0.5 * z**2)),
                  "rmse": float(np.sqrt(np.mean((loc - y_test) ** 2))), "n": int(len(y_test))}
        for c in LEVELS:  # the Normal's central interval, loc -+ scale z_{(1+c)/2}
            half = scale * scipy.special.ndtri((1 + c) / 2)
            scores[f"coverage_{c:g}"] = float(np.mean(np.abs(y_test - loc) <= half))
    else:
        from slangcli.predictive import metrics

        # (its default distribution, Bernoulli, for two classes; k_categorical for more)
        classes = {} if arrays["likelihood"] == "bernoulli" else {
            "Dist": ngboost.distns.k_categorical(arrays["n_outputs"])}
        model = ngboost.NGBClassifier(**classes, random_state=split, verbose=False)
        model.fit(arrays["X_train"], arrays["y_train"].astype(np.int64))
        probs = model.predict_proba(arrays["X_test"])
        scores = {**metrics.classification_scores(probs, y_test), "ece": metrics.calibration(probs, y_test)["ece"]}
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    return {"cpu_seconds": cpu, "seconds": wall, **scores}


def fit_other(method: str, job: dict, settings: dict) -> dict:
    arrays = read_arrays(job)
    if method == "ensemble":
        return fit_ensemble(arrays, job["split"], **settings)
    return fit_ngboost(arrays, job["split"])


# ------------------------------------------------------------------------------------------ whole-process CPU
def measured(args: list) -> tuple[float, float, str]:
    """Run ``args`` as a child process; its CPU seconds (user + system), wall seconds and standard output. A failed
    child ends the script with its last line."""
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        sys.exit(f"field.py: {shlex.join(args[:6])} ... failed (exit {proc.returncode}): {lines[-1] if lines else ''}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, proc.stdout


def slang_process(point, folder: Path) -> dict:
    """``slang fit`` with ``point``'s arguments as a process of its own: its CPU and its run file's test metrics."""
    from slangcli.runfile.io import read_run

    path = folder / "run.h5"
    path.unlink(missing_ok=True)
    cpu, wall, _ = measured([sys.executable, "-m", "slangcli", "fit", *point.args, "-o", str(path)])
    test = read_run(path).metrics["test"]
    path.unlink()
    return {"process_cpu_seconds": cpu, "process_seconds": wall,
            "process_score": test["loglik"] if "loglik" in test else test["nll"]}


def other_process(method: str, job: dict, settings: dict) -> dict:
    """This script's ``--one`` run of ``method`` on ``job`` as a process of its own: its CPU and its score."""
    spec = json.dumps({"method": method, "job": job, "settings": settings})
    cpu, wall, out = measured([sys.executable, str(Path(__file__).resolve()), "--one", spec])
    record = json.loads(out)
    return {"process_cpu_seconds": cpu, "process_seconds": wall,
            "process_score": record.get("loglik", record.get("nll"))}


# ------------------------------------------------------------------------------------------------------- summary
def mean_se(values) -> tuple[float, float]:
    v = np.asarray(values, dtype=float)
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0


def summarise(rows: list) -> list:
    """Per (set, method): the figures' means and standard errors over the splits."""
    out = []
    for key in dict.fromkeys((r["set"], r["method"]) for r in rows):
        ok = [r for r in rows if (r["set"], r["method"]) == key and "failed" not in r]
        s = {"set": key[0], "method": key[1], "splits": len(ok),
             "failed": sum(1 for r in rows if (r["set"], r["method"]) == key and "failed" in r)}
        for name in ("loglik", "rmse", "nll", "accuracy", "ece", "cpu_seconds", "process_cpu_seconds"):
            if ok and all(name in r for r in ok):
                s[name], s[name + "_se"] = mean_se([r[name] for r in ok])
        for c in LEVELS:
            if ok and all(f"coverage_{c:g}" in r for r in ok):
                s[f"coverage_{c:g}"] = float(np.mean([r[f"coverage_{c:g}"] for r in ok]))
        out.append(s)
    return out


def ratios(summary: list) -> list:
    """Per set: slang's CPU seconds per fit as a multiple of the ensemble's, in process and whole process."""
    out = []
    for name in dict.fromkeys(s["set"] for s in summary):
        by = {s["method"]: s for s in summary if s["set"] == name}
        if "slang" in by and "ensemble" in by and "cpu_seconds" in by["slang"] and "cpu_seconds" in by["ensemble"]:
            r = {"set": name, "cpu_ratio": by["slang"]["cpu_seconds"] / by["ensemble"]["cpu_seconds"]}
            if "process_cpu_seconds" in by["slang"] and "process_cpu_seconds" in by["ensemble"]:
                r["process_cpu_ratio"] = by["slang"]["process_cpu_seconds"] / by["ensemble"]["process_cpu_seconds"]
            out.append(r)
    return out


def print_table(summary: list, report, classification: bool = False) -> None:
    process = any("process_cpu_seconds" in s for s in summary)
    if classification:
        head = f"{'data set':<15} {'method':<9} {'splits':>6} {'test NLL':>16} {'accuracy':>8} {'ECE':>6}"
    else:
        head = (f"{'data set':<15} {'method':<9} {'splits':>6} {'test log-lik':>16} {'RMSE':>15} {'cov95':>6} "
                f"{'cov90':>6}")
    print(head + f" {'CPU s/fit':>9}" + (f" {'process CPU s':>13}" if process else ""), file=report)
    for s in summary:
        if not s["splits"]:
            print(f"{s['set']:<15} {s['method']:<9} {0:>6} all failed", file=report)
            continue
        if classification:
            line = (f"{s['set']:<15} {s['method']:<9} {s['splits']:>6} {s['nll']:>8.4f} +- {s['nll_se']:.4f} "
                    f"{s['accuracy']:>8.4f} {s['ece']:>6.4f}")
        else:
            line = (f"{s['set']:<15} {s['method']:<9} {s['splits']:>6} {s['loglik']:>8.3f} +- {s['loglik_se']:.3f} "
                    f"{s['rmse']:>7.3f} +- {s['rmse_se']:.3f} {s['coverage_0.95']:>6.3f} {s['coverage_0.9']:>6.3f}")
        line += f" {s['cpu_seconds']:>9.2f}"
        if process:
            line += f" {s['process_cpu_seconds']:>13.2f}" if "process_cpu_seconds" in s else f" {'-':>13}"
        if s["failed"]:
            line += f"  ({s['failed']} failed)"
        print(line, file=report)


# ---------------------------------------------------------------------------------------------------------- main
def available(methods: list[str]) -> list[str]:
    """``methods`` less those whose package is missing (each named on stderr with the install command)."""
    import importlib.util

    out = []
    for m in methods:
        package, install = REQUIRES.get(m, (None, None))
        if package is not None and importlib.util.find_spec(package) is None:
            print(f"field.py: {m} needs {package}, which is not installed ({install}); running the others",
                  file=sys.stderr)
            continue
        out.append(m)
    return out


# (method, kind of data) pairs whose code has run once in this process: see warm_up
_WARM: set = set()
WARM_ROWS = 200


def warm_up(method: str, job: dict, extra: dict, settings: dict) -> None:
    """Run ``method``'s code once, untimed, on a small piece of ``job``'s data before its first timed fit in this
    process: the first fit pays one-time costs that belong to start-up (PyTorch's first optimiser step and autograd
    set-up, about 1 s; modules that slang loads on first use, about 0.3 s). slang: the same fit for 3 steps with
    2 evaluation samples; the others: their fit on the first ``WARM_ROWS`` training rows (1 epoch for the
    ensemble)."""
    key = (method, job["kind"])
    if key in _WARM:
        return
    _WARM.add(key)
    if method == "slang":
        short = {k: v for k, v in extra.items() if k not in ("epochs", "iterations", "eval-samples")}
        fit_slang(slang_point(job, {**short, "iterations": "3", "eval-samples": "2"}))
        return
    arrays = read_arrays(job)
    small = {**arrays, "X_train": arrays["X_train"][:WARM_ROWS], "y_train": arrays["y_train"][:WARM_ROWS],
             "X_test": arrays["X_test"][:WARM_ROWS], "y_test": arrays["y_test"][:WARM_ROWS]}
    if method == "ensemble":
        fit_ensemble(small, 0, **{**settings, "epochs": 1})
    else:
        fit_ngboost(small, 0)


def run_jobs(jobs: list, methods: list, a, extra: dict, settings: dict, scratch: Path) -> list:
    """Every method on every job, one fit at a time (each method's code warmed up once first: :func:`warm_up`);
    the records, each printed on stderr as it is made."""
    rows = []
    for job in jobs:
        for method in methods:
            warm_up(method, job, extra, settings)
            record = {"set": job["set"], "split": job["split"], "method": method}
            if method == "slang":
                point = slang_point(job, extra)
                record.update(fit_slang(point))
                if a.process and "failed" not in record:
                    record.update(slang_process(point, scratch))
            else:
                record.update(fit_other(method, job, settings))
                if a.process:
                    record.update(other_process(method, job, settings))
            score = record.get("loglik", record.get("nll"))
            if a.process and "process_score" in record and "failed" not in record and method == "slang" \
                    and record["process_score"] != score:
                record["process_differs"] = True
                print(f"field.py: warning: {job['set']} split {job['split']}: slang fit's run file scores "
                      f"{record['process_score']!r}, the fit in this process {score!r}", file=sys.stderr)
            if "failed" in record:
                print(f"{job['set']} split {job['split']} {method}: failed: {record['failed']}", file=sys.stderr)
            else:
                name = "log-lik" if "loglik" in record else "NLL"
                cpu = f"{record['cpu_seconds']:.2f} s CPU" + (
                    f", {record['process_cpu_seconds']:.2f} s as a process" if "process_cpu_seconds" in record else "")
                print(f"{job['set']} split {job['split']} {method}: {name} {score:.4f} ({cpu})", file=sys.stderr)
            rows.append(record)
    return rows


def size_report(rows: list, report) -> list:
    """Per size: each method's CPU, its growth from the size before, and slang's CPU over the ensemble's."""
    out = []
    sizes = sorted({r["rows"] for r in rows})
    methods = list(dict.fromkeys(r["method"] for r in rows))
    print(f"{'rows':>8} {'method':<9} {'test log-lik':>12} {'RMSE':>7} {'cov95':>6} {'CPU s':>9} {'growth':>7}"
          + (f" {'process CPU s':>13}" if any("process_cpu_seconds" in r for r in rows) else ""), file=report)
    previous = {}
    for n in sizes:
        by = {r["method"]: r for r in rows if r["rows"] == n and "failed" not in r}
        for m in methods:
            if m not in by:
                continue
            r = by[m]
            growth = r["cpu_seconds"] / previous[m] if m in previous else None
            previous[m] = r["cpu_seconds"]
            print(f"{n:>8} {m:<9} {r['loglik']:>12.3f} {r['rmse']:>7.3f} {r['coverage_0.95']:>6.3f} "
                  f"{r['cpu_seconds']:>9.2f} {'' if growth is None else format(growth, '.2f'):>7}"
                  + (f" {r['process_cpu_seconds']:>13.2f}" if "process_cpu_seconds" in r else ""), file=report)
        if "slang" in by and "ensemble" in by:
            e = {"rows": n, "cpu_ratio": by["slang"]["cpu_seconds"] / by["ensemble"]["cpu_seconds"]}
            if "process_cpu_seconds" in by["slang"] and "process_cpu_seconds" in by["ensemble"]:
                e["process_cpu_ratio"] = by["slang"]["process_cpu_seconds"] / by["ensemble"]["process_cpu_seconds"]
            out.append(e)
            print(f"{n:>8} slang CPU / ensemble CPU: {e['cpu_ratio']:.2f}"
                  + (f" (whole process {e['process_cpu_ratio']:.2f})" if "process_cpu_ratio" in e else ""),
                  file=report)
    return out


def one(spec_text: str) -> None:
    """``--one``: one method on one job in this process, its record as one JSON line on stdout."""
    spec = json.loads(spec_text)
    record = fit_other(spec["method"], spec["job"], spec["settings"])
    json.dump(record, sys.stdout)
    sys.stdout.write("\n")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=os.environ.get("SLANG_DATA_DIR", "../shared/datasets"))
    p.add_argument("--sets", default="boston,concrete,energy,yacht",
                   help=f"UCI sets in DATA_DIR/uci: {', '.join(UCI_SETS)} (or a folder's name); none: no UCI set")
    p.add_argument("--splits", default=None, help="UCI splits: 0-19, 0,1,2 (default: all of each set)")
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated: {', '.join(METHODS)}")
    p.add_argument("--slang-options", default=None, metavar="OPTIONS",
                   help='slang fit options added to every slang fit, e.g. "--epochs 40 --batch-size 100"')
    p.add_argument("--ensemble-epochs", type=int, default=40, help="epochs of each ensemble network (40)")
    p.add_argument("--ensemble-lr", type=float, default=0.01, help="Adam's rate for the ensemble (0.01)")
    p.add_argument("--adversarial", action="store_true",
                   help="train the ensemble with the paper's adversarial examples (fast gradient sign, eps = 1 %% of "
                        "each input's range)")
    p.add_argument("--process", action="store_true",
                   help="also run every fit as a process of its own and report its whole CPU time")
    p.add_argument("--sizes", default=None, metavar="N,N,...",
                   help="synthetic regression tables of these row counts: the size-scaling table")
    p.add_argument("--size-methods", default="slang,ensemble", help="the methods of --sizes (slang,ensemble)")
    p.add_argument("--classification", default=None, metavar="SETS",
                   help=f"LIBSVM sets in DATA_DIR/libsvm: {', '.join(LIBSVM_SETS)} (three random halves each)")
    p.add_argument("--json", default=None, metavar="FILE", help="write every record and summary as JSON ('-': stdout)")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # (internal: one fit, for --process)
    a = p.parse_args(argv)
    from slangcli.threads import keep_freed_memory

    keep_freed_memory()  # as the slang command does, for every method here and in the --one processes
    if a.one is not None:
        return one(a.one)

    data_dir = Path(a.data_dir)
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    size_methods = [m.strip() for m in a.size_methods.split(",") if m.strip()]
    for m in {*methods, *size_methods} - set(METHODS):
        p.error(f"unknown method {m!r} (the methods: {', '.join(METHODS)})")
    if a.ensemble_epochs < 1 or not a.ensemble_lr > 0:
        p.error("--ensemble-epochs must be >= 1 and --ensemble-lr positive")
    methods, size_methods = available(methods), available(size_methods)
    extra = parse_slang_options(a.slang_options)
    settings = {"epochs": a.ensemble_epochs, "lr": a.ensemble_lr, "adversarial": a.adversarial}

    jobs = []
    for name in [s.strip() for s in a.sets.split(",") if s.strip() and s.strip() != "none"]:
        folder = data_dir / "uci" / UCI_SETS.get(name, name)
        if not folder.is_dir():
            p.error(f"{folder}: no such folder (--data-dir or SLANG_DATA_DIR)")
        jobs += [{"kind": "uci", "set": name, "folder": str(folder), "split": k}
                 for k in parse_splits(a.splits, uci_count(folder))]
    class_jobs = []
    for name in [s.strip() for s in (a.classification or "").split(",") if s.strip()]:
        path = data_dir / "libsvm" / LIBSVM_SETS.get(name, name)
        if not path.is_file():
            p.error(f"{path}: no such file (--data-dir or SLANG_DATA_DIR)")
        class_jobs += [{"kind": "libsvm", "set": name, "file": str(path), "split": k} for k in CLASSIFICATION_SPLITS]
    sizes = [int(s) for s in (a.sizes or "").split(",") if s.strip()]

    report = table_stream(a.json)
    record = {"methods": methods, "slang_options": a.slang_options, "ensemble": {**settings, "members": MEMBERS,
              "batch_size": BATCH, "hidden": HIDDEN}, "process": a.process,
              "threads": {v: os.environ[v] for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}}
    with tempfile.TemporaryDirectory(prefix="field-") as scratch:
        scratch = Path(scratch)
        if jobs:
            rows = run_jobs(jobs, methods, a, extra, settings, scratch)
            summary = summarise(rows)
            print_table(summary, report)
            for r in ratios(summary):
                print(f"{r['set']}: slang CPU / ensemble CPU {r['cpu_ratio']:.2f}"
                      + (f" (whole process {r['process_cpu_ratio']:.2f})" if "process_cpu_ratio" in r else ""),
                      file=report)
            record["regression"] = {"rows": rows, "summary": summary, "cpu_ratios": ratios(summary)}
        if class_jobs:
            rows = run_jobs(class_jobs, methods, a, extra, settings, scratch)
            summary = summarise(rows)
            print_table(summary, report, classification=True)
            record["classification"] = {"rows": rows, "summary": summary, "cpu_ratios": ratios(summary)}
        if sizes:
            size_rows = []
            for n in sizes:
                job = write_table(scratch, n)
                for r in run_jobs([job], size_methods, a, extra, settings, scratch):
                    size_rows.append({**r, "rows": n})
                for part in ("train", "test"):
                    Path(job[part]).unlink()
            record["sizes"] = {"methods": size_methods, "rows": size_rows,
                               "cpu_ratios": size_report(size_rows, report)}
    if a.json:
        write_json(record, a.json)


if __name__ == "__main__":
    main()
