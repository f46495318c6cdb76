"""The library functions behind the commands: data files -> prepared arrays -> fitted run -> scores.

The command-line layer parses options into :class:`DataOptions` and keyword arguments and calls :func:`fit` and
:func:`evaluate`; everything here works without click or rich (progress and notes arrive as callbacks).
"""

from __future__ import annotations

import datetime
import platform
import time
from dataclasses import asdict, dataclass
from typing import Callable

import h5py
import numpy as np
import scipy

from slangcli import __version__, metrics, train
from slangcli.data import LabelMap, Standardizer, fit_labels, read_table, sha256_file, train_test_split, widen
from slangcli.errors import ConfigError, DataError
from slangcli.io import Run
from slangcli.methods import METHODS
from slangcli.methods.base import Problem
from slangcli.models import MLP
from slangcli.threads import blas_threads


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


@dataclass
class Prepared:
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray | None
    y_test: np.ndarray | None
    labels: LabelMap
    standardizer: Standardizer | None
    data: dict  # JSON provenance, stored in the run file
    arrays: dict  # split indices and standardisation arrays, stored in the run file


def _read(path, opts: DataOptions, n_features=None):
    return read_table(path, format=opts.format, target=opts.target, delimiter=opts.delimiter, header=opts.header,
                      n_features=n_features if n_features is not None else opts.n_features)


def _codes(labels: LabelMap, y, path) -> np.ndarray:
    return labels.encode(y, path=path).astype(float)


def load_training(opts: DataOptions, *, notify: Callable[[str], None] = lambda msg: None) -> Prepared:
    """Read, split, code and standardise the training (and test) data for a binary model."""
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

    train_index = test_index = None
    X, y_raw = table.X, table.y
    if opts.test_fraction is not None:
        train_index, test_index = train_test_split(len(X), opts.test_fraction, opts.split_seed)
        X_train, y_train_raw = X[train_index], y_raw[train_index]
        X_test, y_test_raw = X[test_index], y_raw[test_index]
    else:
        X_train, y_train_raw = X, y_raw
        X_test = test_table.X if test_table is not None else None
        y_test_raw = test_table.y if test_table is not None else None

    labels = fit_labels(y_train_raw, path=opts.path, n_classes=2)
    y_train = _codes(labels, y_train_raw, opts.path)
    y_test = None if X_test is None else _codes(labels, y_test_raw, opts.test or opts.path)

    standardizer = Standardizer.fit(X_train) if opts.standardize else None
    if standardizer is not None:
        X_train = standardizer.apply(X_train)
        X_test = None if X_test is None else standardizer.apply(X_test)

    arrays = {}
    if train_index is not None:
        arrays["train_index"], arrays["test_index"] = train_index, test_index
    if standardizer is not None:
        arrays["feature_mean"], arrays["feature_scale"] = standardizer.mean, standardizer.scale
    if test_table is not None:
        test = {"source": "file", **test_table.provenance}
    elif test_index is not None:
        test = {"source": "split", "test_fraction": opts.test_fraction, "split_seed": opts.split_seed,
                "rows": int(len(test_index))}
    else:
        test = None
    data = {
        "train": {**table.provenance, "rows_used": int(len(X_train))},
        "test": test,
        "labels": {"classes": list(labels.classes)},
        "feature_names": list(table.feature_names),
        "standardize": bool(opts.standardize),
        "options": asdict(opts),
    }
    return Prepared(X_train, y_train, X_test, y_test, labels, standardizer, data, arrays)


def _stored_options(run: Run) -> DataOptions:
    return DataOptions(**run.data["options"])


def _standardizer(run: Run) -> Standardizer | None:
    if "feature_mean" in run.arrays:
        return Standardizer(mean=run.arrays["feature_mean"], scale=run.arrays["feature_scale"])
    return None


def _reread(run: Run, which: str, path, run_name: str):
    """Re-read a data file named in the run's provenance, refusing a file whose contents changed."""
    expected = run.data[which].get("sha256") if which == "train" else run.data["test"].get("sha256")
    try:
        found = sha256_file(path)
    except DataError:
        raise DataError(f"{run_name}: its {which} data {path} is missing; pass the data file explicitly") from None
    if expected and found != expected:
        raise DataError(f"{run_name}: its {which} data {path} changed since the fit (sha256 differs); "
                        "pass the data file explicitly")
    opts = _stored_options(run)
    return _read(path, opts, n_features=run.data[which].get("widened_from") and run.data[which]["features"])


def _prepare_eval(run: Run, X, y_raw, path) -> tuple[np.ndarray, np.ndarray]:
    width = run.model.sizes[0]
    if X.shape[1] != width:
        raise DataError(f"{path}: {X.shape[1]} feature columns, but the model was trained on {width}")
    std = _standardizer(run)
    if std is not None:
        X = std.apply(X)
    return X, _codes(LabelMap(tuple(run.data["labels"]["classes"])), y_raw, path)


def load_test(run: Run, run_name: str, data_path=None):
    """The evaluation data ``(X, y, description)``: ``data_path``, else the run's own test set."""
    if data_path is not None:
        opts = _stored_options(run)
        width = run.model.sizes[0]
        table = read_table(data_path, format=opts.format, target=opts.target, delimiter=opts.delimiter,
                           header=opts.header)
        if table.provenance["format"] == "libsvm" and table.X.shape[1] < width:
            table = widen(table, width)
        X, y = _prepare_eval(run, table.X, table.y, data_path)
        return X, y, {"source": "file", "path": table.provenance["path"], "sha256": table.provenance["sha256"]}
    test = run.data.get("test")
    if test is None:
        raise DataError(f"{run_name}: the run has no test data; pass a data file")
    if test["source"] == "file":
        table = _reread(run, "test", test["path"], run_name)
        X, y = _prepare_eval(run, table.X, table.y, test["path"])
        return X, y, {"source": "file", "path": test["path"], "sha256": test["sha256"]}
    table = _reread(run, "train", run.data["train"]["path"], run_name)
    idx = run.arrays["test_index"]
    X, y = _prepare_eval(run, table.X[idx], table.y[idx], run.data["train"]["path"])
    return X, y, {"source": "split", "path": run.data["train"]["path"], "rows": int(len(idx))}


def load_train(run: Run, run_name: str):
    """The run's training data ``(X, y)`` as used in the fit."""
    table = _reread(run, "train", run.data["train"]["path"], run_name)
    idx = run.arrays.get("train_index")
    X, y_raw = (table.X, table.y) if idx is None else (table.X[idx], table.y[idx])
    return _prepare_eval(run, X, y_raw, run.data["train"]["path"])


def versions() -> dict:
    return {"slang": __version__, "python": platform.python_version(), "numpy": np.__version__,
            "scipy": scipy.__version__, "h5py": h5py.__version__}


def score(model, posterior, prior_precision, *, X_train, y_train, X_test=None, y_test=None,
          predictive="auto", samples=1000, seed=0) -> dict:
    """Test NLL and accuracy (posterior predictive) and training -ELBO / N."""
    try:
        predictive = metrics.resolve_predictive(model, predictive)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    out = {"predictive": predictive, "samples": samples if predictive == "mc" else None}
    with blas_threads(model.n_params, samples, max(len(X_train), 1)):
        if X_test is not None:
            probs = metrics.predictive_probs(posterior, model, X_test, predictive=predictive, samples=samples,
                                             rng=train.derive_rng(seed, train.EVAL, 0))
            out["test"] = metrics.classification_scores(probs, y_test)
        if X_train is not None:
            nelbo = metrics.neg_elbo_per_example(posterior, model, prior_precision, X_train, y_train,
                                                 predictive=predictive, samples=min(samples, 100),
                                                 rng=train.derive_rng(seed, train.EVAL, 1))
            out["train"] = {"neg_elbo_per_example": float(nelbo), "n": int(len(X_train))}
    return out


def fit(
    opts: DataOptions,
    *,
    method: str = "slang",
    hyper: dict | None = None,
    batch_size: int = 32,
    epochs: int | None = None,
    iterations: int | None = None,
    seed: int = 0,
    prior_precision: float = 1.0,
    bias_prior_precision: float = 1e-5,
    command: list | None = None,
    progress: Callable[[int, int], None] | None = None,
    notify: Callable[[str], None] = lambda msg: None,
) -> Run:
    """Fit a posterior to the data in ``opts`` and score it; returns the :class:`Run` to be written."""
    if method not in METHODS:
        raise ConfigError(f"unknown method {method!r} (choose from {', '.join(METHODS)})")
    if not prior_precision > 0 or not bias_prior_precision > 0:
        raise ConfigError("--prior-precision and --bias-prior-precision must be positive")
    if batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {batch_size}")
    if epochs is not None and iterations is not None:
        raise ConfigError("give either --epochs or --iterations, not both")
    module = METHODS[method]
    hyper_obj = module.Hyper(**(hyper or {}))

    prepared = load_training(opts, notify=notify)
    n = len(prepared.X_train)
    model = MLP((prepared.X_train.shape[1], 1), likelihood="bernoulli")
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

    scores = score(model, posterior, lam, X_train=prepared.X_train, y_train=prepared.y_train,
                   X_test=prepared.X_test, y_test=prepared.y_test, seed=seed)
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
        "model": {"sizes": list(model.sizes), "activation": model.activation, "likelihood": model.likelihood},
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
    out = score(run.model, run.posterior, run.prior_precision, X_train=X_train, y_train=y_train,
                X_test=X_test, y_test=y_test, predictive=predictive, samples=samples, seed=seed)
    if X_train is None:
        out["train"] = dict(run.metrics.get("train", {}), stored=True)
    out["data"] = source
    return out
