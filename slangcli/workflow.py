"""The library functions behind the commands: data files -> prepared arrays -> fitted run -> scores.

The command-line layer parses options into :class:`DataOptions` and keyword arguments and calls :func:`fit` and
:func:`evaluate`; everything here works without click or rich (progress and notes arrive as callbacks).

Targets by likelihood: ``bernoulli`` codes two label values as 0/1 and ``categorical`` K values as 0..K-1 (the
label map is stored); ``gaussian`` (regression) standardises the target with training statistics, so the noise
precision acts on the standardised scale, and reports RMSE and log-likelihood in the original units.
"""

from __future__ import annotations

import datetime
import os
import platform
import time
from dataclasses import asdict, dataclass, fields
from typing import Callable

import h5py
import numpy as np
import scipy

from slangcli import __version__, metrics, train
from slangcli.data import (LabelMap, Standardizer, fit_labels, is_uci_folder, read_table, read_uci_folder,
                           sha256_file, train_test_split, widen)
from slangcli.errors import ConfigError, DataError
from slangcli.io import Run
from slangcli.methods import METHODS
from slangcli.methods.base import Problem
from slangcli.models import ACTIVATIONS, LIKELIHOODS, MLP
from slangcli.threads import blas_threads

# more distinct numeric target values than this (or any non-integer one) make "auto" choose regression
_MAX_AUTO_CLASSES = 50


@dataclass(frozen=True)
class DataOptions:
    """How to read the training data and where the test data come from."""

    path: str
    format: str = "auto"
    target: str | int | None = None
    delimiter: str | None = None
    header: bool | None = None
    n_features: int | None = None
    test: str | None = None
    test_fraction: float | None = None
    split_seed: int = 0
    standardize: bool = False
    uci_split: int | None = None


@dataclass
class Prepared:
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray | None
    y_test: np.ndarray | None
    likelihood: str
    n_outputs: int
    data: dict  # JSON provenance, stored in the run file
    arrays: dict  # split indices, feature and target standardisation, stored in the run file


def _read(path, opts: DataOptions, n_features=None):
    return read_table(path, format=opts.format, target=opts.target, delimiter=opts.delimiter, header=opts.header,
                      n_features=n_features if n_features is not None else opts.n_features)


def _is_uci(opts: DataOptions) -> bool:
    return opts.format == "uci" or is_uci_folder(opts.path)


def choose_likelihood(likelihood: str, y, path) -> str:
    """Resolve ``auto``: two label values -> bernoulli; strings or a few integers -> categorical; else gaussian."""
    if likelihood != "auto":
        if likelihood not in LIKELIHOODS:
            raise ConfigError(f"unknown likelihood {likelihood!r} (choose from auto, {', '.join(LIKELIHOODS)})")
        return likelihood
    values = np.unique(y)
    if len(values) == 2:
        return "bernoulli"
    if y.dtype.kind in "US" or (np.all(values == np.round(values)) and len(values) <= _MAX_AUTO_CLASSES):
        return "categorical"
    return "gaussian"


def _read_sources(opts: DataOptions, notify):
    """The training table, optional test table, and split indices into the training table."""
    if _is_uci(opts):
        if opts.uci_split is None:
            raise ConfigError(f"{opts.path} is a Gal-layout UCI folder: choose a split with --uci-split K")
        if opts.test is not None or opts.test_fraction is not None:
            raise ConfigError("--uci-split selects the test set; do not combine it with --test or --test-fraction")
        table, train_index, test_index = read_uci_folder(opts.path, opts.uci_split)
        return table, None, train_index, test_index
    if opts.uci_split is not None:
        raise ConfigError("--uci-split needs DATA to be a Gal-layout UCI folder")
    if opts.test is not None and opts.test_fraction is not None:
        raise ConfigError("give either --test or --test-fraction, not both")
    table = _read(opts.path, opts)
    test_table = None
    if opts.test is not None:
        test_table = _read(opts.test, opts)
        p_train, p_test = table.X.shape[1], test_table.X.shape[1]
        if p_train != p_test:
            if table.provenance["format"] == "libsvm" and test_table.provenance["format"] == "libsvm" \
                    and opts.n_features is None:
                # absent LIBSVM entries are zeros: the narrower file is the same data at the wider width
                width = max(p_train, p_test)
                narrow = opts.path if p_train < width else opts.test
                notify(f"{narrow}: highest feature index {min(p_train, p_test)}; "
                       f"using {width} feature columns to match the other file")
                table, test_table = widen(table, width), widen(test_table, width)
            else:
                raise DataError(f"{opts.test}: {p_test} feature columns, but the training data "
                                f"{opts.path} has {p_train}")
    if opts.test_fraction is not None:
        train_index, test_index = train_test_split(len(table.X), opts.test_fraction, opts.split_seed)
        return table, None, train_index, test_index
    return table, test_table, None, None


def load_training(opts: DataOptions, *, likelihood: str = "auto",
                  notify: Callable[[str], None] = lambda msg: None) -> Prepared:
    """Read, split, code and standardise the training (and test) data."""
    table, test_table, train_index, test_index = _read_sources(opts, notify)
    if train_index is not None:
        X_train, y_train_raw = table.X[train_index], table.y[train_index]
        X_test, y_test_raw = table.X[test_index], table.y[test_index]
    else:
        X_train, y_train_raw = table.X, table.y
        X_test = test_table.X if test_table is not None else None
        y_test_raw = test_table.y if test_table is not None else None
    test_path = opts.test or opts.path

    likelihood = choose_likelihood(likelihood, y_train_raw, opts.path)
    arrays, targets = {}, {"likelihood": likelihood}
    if likelihood == "gaussian":
        if y_train_raw.dtype.kind not in "fiu" or (y_test_raw is not None and y_test_raw.dtype.kind not in "fiu"):
            raise DataError(f"{opts.path}: a regression target must be numeric")
        y_mean, y_scale = float(np.mean(y_train_raw)), float(np.std(y_train_raw))
        if not y_scale > 0:
            raise DataError(f"{opts.path}: the regression target is constant in the training data")
        arrays["target_mean"], arrays["target_scale"] = np.array([y_mean]), np.array([y_scale])
        y_train = (y_train_raw.astype(float) - y_mean) / y_scale
        y_test = None if y_test_raw is None else (y_test_raw.astype(float) - y_mean) / y_scale
        n_outputs = 1
    else:
        labels = fit_labels(y_train_raw, path=opts.path, n_classes=2 if likelihood == "bernoulli" else None)
        dtype = float if likelihood == "bernoulli" else np.int64
        y_train = labels.encode(y_train_raw, path=opts.path).astype(dtype)
        y_test = None if y_test_raw is None else labels.encode(y_test_raw, path=test_path).astype(dtype)
        targets["classes"] = list(labels.classes)
        n_outputs = 1 if likelihood == "bernoulli" else len(labels.classes)

    if opts.standardize:
        std = Standardizer.fit(X_train)
        X_train = std.apply(X_train)
        X_test = None if X_test is None else std.apply(X_test)
        arrays["feature_mean"], arrays["feature_scale"] = std.mean, std.scale
    if train_index is not None:
        arrays["train_index"], arrays["test_index"] = train_index, test_index

    if test_table is not None:
        test = {"source": "file", **test_table.provenance}
    elif test_index is not None:
        test = {"source": "split", "rows": int(len(test_index))}
        if opts.test_fraction is not None:
            test.update(test_fraction=opts.test_fraction, split_seed=opts.split_seed)
        else:
            test.update(uci_split=opts.uci_split)
    else:
        test = None
    data = {
        "train": {**table.provenance, "rows_used": int(len(X_train))},
        "test": test,
        "targets": targets,
        "labels": {"classes": targets["classes"]} if "classes" in targets else None,
        "feature_names": list(table.feature_names),
        "standardize": bool(opts.standardize),
        "options": asdict(opts),
    }
    return Prepared(X_train, y_train, X_test, y_test, likelihood, n_outputs, data, arrays)


# ------------------------------------------------------------------------------------------ stored runs
def _stored_options(run: Run) -> DataOptions:
    # a newer minor format may record options this slang does not know: they are ignored, as the format promises
    known = {field.name for field in fields(DataOptions)}
    return DataOptions(**{key: value for key, value in run.data["options"].items() if key in known})


def _transform(run: Run, X, y_raw, path) -> tuple[np.ndarray, np.ndarray]:
    """Apply the run's feature standardisation and target coding to raw ``(X, y)`` read from ``path``."""
    width = run.model.sizes[0]
    if X.shape[1] != width:
        raise DataError(f"{path}: {X.shape[1]} feature columns, but the model was trained on {width}")
    if "feature_mean" in run.arrays:
        X = Standardizer(mean=run.arrays["feature_mean"], scale=run.arrays["feature_scale"]).apply(X)
    if run.model.likelihood == "gaussian":
        if y_raw.dtype.kind not in "fiu":
            raise DataError(f"{path}: a regression target must be numeric")
        y = (y_raw.astype(float) - run.arrays["target_mean"][0]) / run.arrays["target_scale"][0]
    else:
        codes = LabelMap(tuple(run.data["labels"]["classes"])).encode(y_raw, path=path)
        y = codes.astype(float) if run.model.likelihood == "bernoulli" else codes
    return X, y


def _verify(run_name: str, what: str, path: str, expected: str | None) -> None:
    """Refuse a recorded data file that is gone or whose contents changed since the fit."""
    try:
        found = sha256_file(path)
    except DataError:
        raise DataError(f"{run_name}: its {what} data {path} is missing; pass the data explicitly") from None
    if expected and found != expected:
        raise DataError(f"{run_name}: its {what} data {path} changed since the fit (sha256 differs); "
                        "pass the data explicitly")


def _reread_training(run: Run, run_name: str):
    """The run's training source re-read, refusing files whose contents changed since the fit."""
    opts = _stored_options(run)
    info = run.data["train"]
    _verify(run_name, "training", info["path"], info.get("sha256"))
    if info["format"] == "uci":
        return read_uci_folder(info["folder"], opts.uci_split)[0]
    return _read(info["path"], opts, n_features=info.get("widened_from") and info["features"])


def load_test(run: Run, run_name: str, data_path=None):
    """The evaluation data ``(X, y, description)``: ``data_path``, else the run's own test set."""
    if data_path is not None:
        opts = _stored_options(run)
        if os.path.isdir(data_path):
            if opts.uci_split is None:
                raise DataError(f"{data_path}: a folder; this run was not fitted on a UCI folder")
            table, _, idx = read_uci_folder(data_path, opts.uci_split)
            X, y = _transform(run, table.X[idx], table.y[idx], data_path)
            return X, y, {"source": "uci-split", "path": table.provenance["path"], "rows": int(len(idx))}
        width = run.model.sizes[0]
        fmt = opts.format if opts.format in ("csv", "libsvm", "idx") else "auto"
        table = read_table(data_path, format=fmt, target=opts.target, delimiter=opts.delimiter, header=opts.header)
        if table.provenance["format"] == "libsvm" and table.X.shape[1] < width:
            table = widen(table, width)
        X, y = _transform(run, table.X, table.y, data_path)
        return X, y, {"source": "file", "path": table.provenance["path"], "sha256": table.provenance["sha256"]}
    test = run.data.get("test")
    if test is None:
        raise DataError(f"{run_name}: the run has no test data; pass a data file")
    if test["source"] == "file":
        _verify(run_name, "test", test["path"], test["sha256"])
        opts = _stored_options(run)
        table = _read(test["path"], opts, n_features=test.get("widened_from") and test["features"])
        X, y = _transform(run, table.X, table.y, test["path"])
        return X, y, {"source": "file", "path": test["path"], "sha256": test["sha256"]}
    table = _reread_training(run, run_name)
    idx = run.arrays["test_index"]
    X, y = _transform(run, table.X[idx], table.y[idx], run.data["train"]["path"])
    return X, y, {"source": "split", "path": run.data["train"]["path"], "rows": int(len(idx))}


def load_train(run: Run, run_name: str):
    """The run's training data ``(X, y)`` as used in the fit."""
    table = _reread_training(run, run_name)
    idx = run.arrays.get("train_index")
    X, y_raw = (table.X, table.y) if idx is None else (table.X[idx], table.y[idx])
    return _transform(run, X, y_raw, run.data["train"]["path"])


def versions() -> dict:
    return {"slang": __version__, "python": platform.python_version(), "numpy": np.__version__,
            "scipy": scipy.__version__, "h5py": h5py.__version__}


def score(model, posterior, prior_precision, *, X_train, y_train, X_test=None, y_test=None, target_scale=1.0,
          predictive="auto", samples=1000, seed=0) -> dict:
    """Test scores under the posterior predictive and the training -ELBO / N.

    Classification: ``nll`` (nats per example) and ``accuracy``. Regression: ``rmse`` of the predictive mean and
    the per-point predictive ``loglik``, both in the target's original units (``target_scale``).
    """
    try:
        predictive = metrics.resolve_predictive(model, predictive)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    out = {"predictive": predictive, "samples": samples if predictive == "mc" else None}
    with blas_threads(model.n_params, min(samples, 64), max(len(X_train) if X_train is not None else 1, 1)):
        if X_test is not None:
            rng = train.derive_rng(seed, train.EVAL, 0)
            if model.likelihood == "gaussian":
                out["test"] = metrics.regression_scores(posterior, model, X_test, y_test, samples=samples, rng=rng,
                                                        target_scale=target_scale)
            else:
                probs = metrics.predictive_probs(posterior, model, X_test, predictive=predictive, samples=samples,
                                                 rng=rng)
                out["test"] = metrics.classification_scores(probs, y_test)
        if X_train is not None:
            nelbo = metrics.neg_elbo_per_example(posterior, model, prior_precision, X_train, y_train,
                                                 predictive=predictive, samples=min(samples, 100),
                                                 rng=train.derive_rng(seed, train.EVAL, 1))
            out["train"] = {"neg_elbo_per_example": float(nelbo), "n": int(len(X_train))}
    return out


def parse_hidden(hidden) -> tuple[int, ...]:
    if hidden is None or hidden == "" or hidden == ():
        return ()
    if isinstance(hidden, str):
        try:
            widths = tuple(int(h) for h in hidden.split(",") if h.strip())
        except ValueError:
            raise ConfigError(f"--hidden takes comma-separated layer widths like 400,400, got {hidden!r}") from None
    else:
        widths = tuple(int(h) for h in hidden)
    if any(w < 1 for w in widths):
        raise ConfigError(f"--hidden widths must be >= 1, got {hidden!r}")
    return widths


def fit(
    opts: DataOptions,
    *,
    method: str = "slang",
    hyper: dict | None = None,
    hidden=(),
    activation: str = "relu",
    likelihood: str = "auto",
    noise_precision: float = 1.0,
    batch_size: int = 32,
    epochs: int | None = None,
    iterations: int | None = None,
    seed: int = 0,
    prior_precision: float = 1.0,
    bias_prior_precision: float = 1e-5,
    eval_samples: int = 1000,
    command: list | None = None,
    progress: Callable[[int, int], None] | None = None,
    notify: Callable[[str], None] = lambda msg: None,
) -> Run:
    """Fit a posterior to the data in ``opts`` and score it; returns the :class:`Run` to be written."""
    if method not in METHODS:
        raise ConfigError(f"unknown method {method!r} (choose from {', '.join(METHODS)})")
    if activation not in ACTIVATIONS:
        raise ConfigError(f"unknown activation {activation!r} (choose from {', '.join(ACTIVATIONS)})")
    for name, value in (("--prior-precision", prior_precision), ("--bias-prior-precision", bias_prior_precision),
                        ("--noise-precision", noise_precision)):
        if not 0 < value < np.inf:
            raise ConfigError(f"{name} must be positive and finite, got {value}")
    if batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {batch_size}")
    if epochs is not None and iterations is not None:
        raise ConfigError("give either --epochs or --iterations, not both")
    widths = parse_hidden(hidden)
    module = METHODS[method]
    hyper = dict(hyper or {})
    module.Hyper(**hyper)  # validate before reading any data

    prepared = load_training(opts, likelihood=likelihood, notify=notify)
    n = len(prepared.X_train)
    model = MLP((prepared.X_train.shape[1], *widths, prepared.n_outputs), activation=activation,
                likelihood=prepared.likelihood, noise_precision=noise_precision)
    if hyper.get("rank", 0) > model.n_params:
        notify(f"--rank {hyper['rank']} exceeds the {model.n_params} parameters; using rank {model.n_params} "
               "(a full-rank precision)")
        hyper["rank"] = model.n_params
    hyper_obj = module.Hyper(**hyper)
    lam = model.prior_precision(prior_precision, bias_prior_precision)
    problem = Problem(model, lam, n)
    batch = min(batch_size, n)
    if iterations is not None:
        if iterations < 1:
            raise ConfigError(f"--iterations must be >= 1, got {iterations}")
        n_steps = iterations
    else:
        epochs = 200 if epochs is None else epochs
        if epochs < 1:
            raise ConfigError(f"--epochs must be >= 1, got {epochs}")
        n_steps = epochs * train.steps_per_epoch(n, batch)

    started = time.perf_counter()
    with blas_threads(model.n_params, hyper_obj.samples, batch):
        state, history = train.run(module, hyper_obj, problem, prepared.X_train, prepared.y_train, seed=seed,
                                   batch_size=batch, n_steps=n_steps, progress=progress)
    fit_seconds = time.perf_counter() - started
    posterior = module.posterior(state)

    target_scale = float(prepared.arrays["target_scale"][0]) if "target_scale" in prepared.arrays else 1.0
    scores = score(model, posterior, lam, X_train=prepared.X_train, y_train=prepared.y_train,
                   X_test=prepared.X_test, y_test=prepared.y_test, target_scale=target_scale,
                   samples=eval_samples, seed=seed)
    scores["fit_seconds"] = fit_seconds
    scores["steps"] = int(state.t)
    config = {
        "method": method,
        "hyper": asdict(hyper_obj),
        "batch_size": batch,
        "epochs": epochs,
        "iterations": iterations,
        "n_steps": n_steps,
        "seed": seed,
        "prior_precision": prior_precision,
        "bias_prior_precision": bias_prior_precision,
        "model": {"sizes": list(model.sizes), "activation": model.activation, "likelihood": model.likelihood,
                  "noise_precision": model.noise_precision},
    }
    meta = {"slang_version": __version__, "versions": versions(),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    return Run(model=model, prior_precision=lam, posterior=posterior, config=config, data=prepared.data,
               arrays=prepared.arrays, history=history.as_arrays(), metrics=scores, command=list(command or []),
               meta=meta)


def evaluate(run: Run, run_name: str, data_path=None, *, predictive="auto", samples=1000, seed=0,
             notify: Callable[[str], None] = lambda msg: None) -> dict:
    """Score a stored run on ``data_path`` or on its own test data, plus its training -ELBO / N."""
    X_test, y_test, source = load_test(run, run_name, data_path)
    try:
        X_train, y_train = load_train(run, run_name)
    except DataError as exc:
        notify(f"{exc}; the training -ELBO is the value stored at fit time")
        X_train = y_train = None
    target_scale = float(run.arrays["target_scale"][0]) if "target_scale" in run.arrays else 1.0
    out = score(run.model, run.posterior, run.prior_precision, X_train=X_train, y_train=y_train,
                X_test=X_test, y_test=y_test, target_scale=target_scale, predictive=predictive, samples=samples,
                seed=seed)
    if X_train is None:
        out["train"] = dict(run.metrics.get("train", {}), stored=True)
    out["data"] = source
    return out
