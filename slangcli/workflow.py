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
from dataclasses import asdict, dataclass, fields, replace
from typing import Callable

import h5py
import numpy as np
import scipy

from slangcli import __version__, divergence, metrics, streams, task, train, tuning
from slangcli import compress as compression
from slangcli import predict as predictive_uncertainty
from slangcli.errors import ConfigError, DataError, DivergenceError, FormatError, Interrupted
from slangcli.io import ARRAYS, POSTERIOR_NAMES, Run
from slangcli.methods import METHODS
from slangcli.methods.base import Problem, adapt, cache_fields, hyper_names, is_solver, samples_per_step
from slangcli.models import ACTIVATIONS, LIKELIHOODS, MLP
from slangcli.prepare import LabelMap, Standardizer, fit_labels, train_test_split
from slangcli.readers import NA_VALUES, STDIN, is_uci_folder, read_table, read_uci_folder, sha256_file, widen
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
    # CSV columns and missing values (``slangcli.readers.read_table``); a run file written before these existed
    # lacks them, and these defaults read its data as it was read then
    drop_columns: str | list | None = None
    columns: str | list | None = None
    na_values: tuple | list = NA_VALUES
    missing: str = "error"

    def record(self) -> dict:
        """The options as stored in a run file (JSON: sequences as lists)."""
        return {key: list(value) if isinstance(value, tuple) else value for key, value in asdict(self).items()}

    def reader_options(self) -> dict:
        """The keyword arguments of ``read_table`` that these options set (its path and width aside)."""
        return {"format": self.format, "target": self.target, "delimiter": self.delimiter, "header": self.header,
                "drop_columns": self.drop_columns, "columns": self.columns, "na_values": tuple(self.na_values),
                "missing": self.missing}


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
    return read_table(path, **opts.reader_options(),
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
    """Read, split, code and standardise the training (and test) data of the files in ``opts``."""
    table, test_table, train_index, test_index = _read_sources(opts, notify)
    if train_index is not None:
        X_train, y_train_raw = table.X[train_index], table.y[train_index]
        X_test, y_test_raw = table.X[test_index], table.y[test_index]
    else:
        X_train, y_train_raw = table.X, table.y
        X_test = test_table.X if test_table is not None else None
        y_test_raw = test_table.y if test_table is not None else None

    if table.provenance["format"] == "csv":
        for warning in task.identifier_columns(X_train, table.feature_names):
            notify(f"{opts.path}: {warning}")

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
    prepared = prepare(X_train, y_train_raw, X_test, y_test_raw, likelihood=likelihood,
                       standardize=opts.standardize, name=opts.path, test_name=opts.test or opts.path,
                       train_provenance=table.provenance, test_provenance=test,
                       feature_names=table.feature_names, options=opts.record())
    if train_index is not None:
        prepared.arrays["train_index"], prepared.arrays["test_index"] = train_index, test_index
    return prepared


def prepare(X_train, y_train_raw, X_test=None, y_test_raw=None, *, likelihood: str = "auto",
            standardize: bool = False, name: str = "training data", test_name: str = "test data",
            train_provenance: dict | None = None, test_provenance: dict | None = None, feature_names=(),
            options: dict | None = None) -> Prepared:
    """Code the targets and standardise the features of raw arrays: the one preparation behind the files of
    ``slang fit`` and the arrays of ``slangcli.fit``.

    ``X_* : (N, P)`` float64 features; ``y_*_raw`` the raw targets (label values of any kind, or numbers).
    ``likelihood="auto"`` is resolved by :func:`choose_likelihood`. Classification codes the label values, sorted,
    as 0..K-1 (the classes are stored); regression standardises the target with training statistics (stored), so
    the noise precision acts on the standardised scale. ``name`` and ``test_name`` are what messages call the data.
    """
    likelihood = choose_likelihood(likelihood, y_train_raw, name)
    arrays, targets = {}, {"likelihood": likelihood}
    if likelihood == "gaussian":
        if y_train_raw.dtype.kind not in "fiu" or (y_test_raw is not None and y_test_raw.dtype.kind not in "fiu"):
            raise DataError(f"{name}: a regression target must be numeric")
        y_mean, y_scale = float(np.mean(y_train_raw)), float(np.std(y_train_raw))
        if not y_scale > 0:
            raise DataError(f"{name}: the regression target is constant in the training data")
        arrays["target_mean"], arrays["target_scale"] = np.array([y_mean]), np.array([y_scale])
        y_train = (y_train_raw.astype(float) - y_mean) / y_scale
        y_test = None if y_test_raw is None else (y_test_raw.astype(float) - y_mean) / y_scale
        n_outputs = 1
    else:
        labels = fit_labels(y_train_raw, path=name, n_classes=2 if likelihood == "bernoulli" else None)
        dtype = float if likelihood == "bernoulli" else np.int64
        y_train = labels.encode(y_train_raw, path=name).astype(dtype)
        y_test = None if y_test_raw is None else labels.encode(y_test_raw, path=test_name).astype(dtype)
        targets["classes"] = list(labels.classes)
        n_outputs = 1 if likelihood == "bernoulli" else len(labels.classes)

    if standardize:
        std = Standardizer.fit(X_train)
        X_train = std.apply(X_train)
        X_test = None if X_test is None else std.apply(X_test)
        arrays["feature_mean"], arrays["feature_scale"] = std.mean, std.scale

    data = {
        "train": {**(train_provenance or {}), "rows_used": int(len(X_train))},
        "test": test_provenance,
        "targets": targets,
        "labels": {"classes": targets["classes"]} if "classes" in targets else None,
        "feature_names": list(feature_names),
        "standardize": bool(standardize),
        "options": options if options is not None else {},
    }
    return Prepared(X_train, y_train, X_test, y_test, likelihood, n_outputs, data, arrays)


# ------------------------------------------------------------------------------------------ stored runs
def _stored_options(run: Run) -> DataOptions:
    # a newer minor format may record options this slang does not know: they are ignored, as the format promises
    known = {field.name for field in fields(DataOptions)}
    return DataOptions(**{key: value for key, value in run.data["options"].items() if key in known})


def transform(run: Run, X, y_raw, path) -> tuple[np.ndarray, np.ndarray | None]:
    """Apply the run's feature standardisation and target coding to raw ``(X, y)`` read from ``path`` (``y``
    may be None: data without a target column)."""
    width = run.model.sizes[0]
    if X.shape[1] != width:
        raise DataError(f"{path}: {X.shape[1]} feature columns, but the model was trained on {width}")
    if "feature_mean" in run.arrays:
        X = Standardizer(mean=run.arrays["feature_mean"], scale=run.arrays["feature_scale"]).apply(X)
    if y_raw is None:
        return X, None
    if run.model.likelihood == "gaussian":
        if y_raw.dtype.kind not in "fiu":
            raise DataError(f"{path}: a regression target must be numeric")
        y = (y_raw.astype(float) - run.arrays["target_mean"][0]) / run.arrays["target_scale"][0]
    else:
        codes = LabelMap(tuple(run.data["labels"]["classes"])).encode(y_raw, path=path)
        y = codes.astype(float) if run.model.likelihood == "bernoulli" else codes
    return X, y


def _rows(k: int) -> str:
    return f"{k} row" + ("" if k == 1 else "s")


def _dropped(table) -> dict:
    """The count of rows left out for a missing value, for a data source's description (none: nothing)."""
    rows = table.provenance.get("rows_dropped")
    return {"rows_dropped": rows} if rows else {}


def _verify(run_name: str, what: str, path: str, expected: str | None) -> None:
    """Refuse a recorded data file that is gone, was standard input, or whose contents changed since the fit."""
    if path == STDIN:
        raise DataError(f"{run_name}: its {what} data were read from standard input; pass the data explicitly")
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
    if info["format"] == ARRAYS:
        raise DataError(f"{run_name}: fitted to arrays from Python, so there is no training file to re-read")
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
            X, y = transform(run, table.X[idx], table.y[idx], data_path)
            return X, y, {"source": "uci-split", "path": table.provenance["path"], "rows": int(len(idx))}
        width = run.model.sizes[0]
        fmt = opts.format if opts.format in ("csv", "libsvm", "idx") else "auto"
        table = read_table(data_path, **dict(opts.reader_options(), format=fmt))
        if table.provenance["format"] == "libsvm" and table.X.shape[1] < width:
            table = widen(table, width)
        X, y = transform(run, table.X, table.y, data_path)
        return X, y, {"source": "file", "path": table.provenance["path"], "sha256": table.provenance["sha256"],
                      **_dropped(table)}
    test = run.data.get("test")
    if test is None:
        raise DataError(f"{run_name}: the run has no test data; pass a data file")
    if test["source"] == ARRAYS:
        raise DataError(f"{run_name}: its test data were arrays passed from Python; pass a data file")
    if test["source"] == "file":
        _verify(run_name, "test", test["path"], test["sha256"])
        opts = _stored_options(run)
        table = _read(test["path"], opts, n_features=test.get("widened_from") and test["features"])
        X, y = transform(run, table.X, table.y, test["path"])
        return X, y, {"source": "file", "path": test["path"], "sha256": test["sha256"]}
    table = _reread_training(run, run_name)
    idx = run.arrays["test_index"]
    X, y = transform(run, table.X[idx], table.y[idx], run.data["train"]["path"])
    return X, y, {"source": "split", "path": run.data["train"]["path"], "rows": int(len(idx))}


def load_train(run: Run, run_name: str):
    """The run's training data ``(X, y)`` as used in the fit."""
    table = _reread_training(run, run_name)
    idx = run.arrays.get("train_index")
    X, y_raw = (table.X, table.y) if idx is None else (table.X[idx], table.y[idx])
    return transform(run, X, y_raw, run.data["train"]["path"])


def versions() -> dict:
    return {"slang": __version__, "python": platform.python_version(), "numpy": np.__version__,
            "scipy": scipy.__version__, "h5py": h5py.__version__}


def score(model, posterior, prior_precision, *, X_train, y_train, X_test=None, y_test=None, target_scale=1.0,
          predictive="auto", samples=1000, seed=0, bins=15) -> dict:
    """Test scores under the posterior predictive and the training -ELBO / N.

    Classification: ``nll`` (nats per example), ``accuracy``, and the expected calibration error ``ece`` with its
    ``calibration`` bins (``bins`` equal-width confidence bins). Regression: ``rmse`` of the predictive mean and the
    per-point predictive ``loglik``, both in the target's original units (``target_scale``), and the ``coverage``
    of the central predictive intervals of ``metrics.COVERAGE_LEVELS``.
    """
    try:
        predictive = metrics.resolve_predictive(model, predictive)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    out = {"predictive": predictive, "samples": samples if predictive == "mc" else None}
    with blas_threads(model.n_params, min(samples, 64), max(len(X_train) if X_train is not None else 1, 1)):
        if X_test is not None:
            # the one predictive (the weight samples and probabilities of slang predict for the same seed)
            if model.likelihood == "gaussian":
                out["test"] = metrics.regression_scores(posterior, model, X_test, y_test, samples=samples, seed=seed,
                                                        target_scale=target_scale)
            else:
                probs = predictive_uncertainty.classify(posterior, model, X_test, samples=samples, seed=seed,
                                                        predictive=predictive)["probs"]
                out["test"] = {**metrics.classification_scores(probs, y_test),
                               **metrics.calibration(probs, y_test, bins)}
        if X_train is not None:
            nelbo = metrics.neg_elbo_per_example(posterior, model, prior_precision, X_train, y_train,
                                                 predictive=predictive, samples=min(samples, 100),
                                                 rng=streams.derive_rng(seed, streams.EVAL, 1))
            out["train"] = {"neg_elbo_per_example": float(nelbo), "n": int(len(X_train))}
    return out


def parse_hidden(hidden) -> tuple[int, ...]:
    if hidden is None or hidden == "" or hidden == ():
        return ()
    if isinstance(hidden, str):
        try:
            # every part is a width: "50," is a typo, not a network with an empty last layer
            widths = tuple(int(h) for h in hidden.split(","))
        except ValueError:
            raise ConfigError(f"--hidden takes comma-separated layer widths like 400,400, got {hidden!r}") from None
    else:
        widths = tuple(int(h) for h in hidden)
    if any(w < 1 for w in widths):
        raise ConfigError(f"--hidden widths must be >= 1, got {hidden!r}")
    return widths


def option_name(field: str) -> str:
    """The command-line option of a hyperparameter: ``init_precision -> --init-precision``."""
    return "--" + field.replace("_", "-")


def check_hyper(method: str, hyper: dict) -> None:
    """Refuse hyperparameters that ``method`` does not have (one ConfigError naming the first and listing what
    the method takes), so an option is never silently ignored."""
    module = METHODS[method]
    names = hyper_names(module)
    unknown = [name for name in hyper if name not in names]
    if unknown:
        raise ConfigError(f"{option_name(unknown[0])} does not apply to --method {method} (its options: "
                          f"{', '.join(option_name(n) for n in names)})")


@dataclass
class Checkpointing:
    """When a step method's fit writes a resumable snapshot of itself (a run file with status "checkpoint"), and
    how: ``write(run)`` stores it (atomically); ``stop()`` is polled after every step and, when it returns True,
    the fit writes a last snapshot and raises :class:`Interrupted`."""

    write: Callable[[Run], None]
    every_steps: int | None = None
    every_seconds: float | None = None
    stop: Callable[[], bool] = lambda: False


@dataclass
class _Setup:
    """Everything a fit needs besides its training state: rebuilt from the options (``fit``) or from a
    checkpoint (``resume``)."""

    method: str
    module: object
    hyper: object
    model: MLP
    problem: Problem
    prepared: Prepared
    config: dict
    command: list


def fit(opts: DataOptions, *, likelihood: str = "auto", notify: Callable[[str], None] = lambda msg: None,
        **options) -> Run:
    """Fit a posterior to the data files in ``opts`` and score it; returns the :class:`Run` to be written.

    ``options`` are those of :func:`fit_prepared`; they are all checked before any data are read.
    """
    check_fit_options(likelihood=likelihood, **options)
    prepared = load_training(opts, likelihood=likelihood, notify=notify)
    sizes = (prepared.X_train.shape[1], *parse_hidden(options.get("hidden", ())), prepared.n_outputs)
    for line in task.describe(prepared.data, prepared.arrays, prepared.likelihood, sizes[0],
                              MLP(sizes, likelihood=prepared.likelihood).n_params):
        notify(line)
    if likelihood == "auto" and prepared.data["train"].get("format") != "idx":
        hint = task.integer_target_hint(prepared.data["targets"].get("classes"), prepared.data["train"].get("target"))
        if hint:
            notify(hint)
    return fit_prepared(prepared, notify=notify, **options)


def check_fit_options(**options) -> None:
    """Refuse invalid fit options (:func:`fit_prepared`'s) with one ConfigError, before any data are read."""
    _checked(**options)


def _checked(
    *,
    method: str = "slang",
    hyper: dict | None = None,
    hidden=(),
    activation: str = "relu",
    likelihood: str = "auto",
    noise_precision: float = 1.0,
    batch_size: int | None = None,
    epochs: int | None = None,
    iterations: int | None = None,
    prior_precision: float = 1.0,
    bias_prior_precision: float = 1e-5,
    checkpointing=None,
    tune: str | None = None,
    tune_folds: int = 5,
    tune_epochs: int | None = None,
    tune_rounds: int | None = None,
    restarts: int = 1,
    snr_every: int | None = None,
    snr_draws: int = 10,
    **_,
):
    """The checks of :func:`check_fit_options`; returns ``(module, widths, hyper)``."""
    if method not in METHODS:
        raise ConfigError(f"unknown method {method!r} (choose from {', '.join(METHODS)})")
    if activation not in ACTIVATIONS:
        raise ConfigError(f"unknown activation {activation!r} (choose from {', '.join(ACTIVATIONS)})")
    for name, value in (("--prior-precision", prior_precision), ("--bias-prior-precision", bias_prior_precision),
                        ("--noise-precision", noise_precision)):
        if not 0 < value < np.inf:
            raise ConfigError(f"{name} must be positive and finite, got {value}")
    module = METHODS[method]
    solver = is_solver(module)
    if solver:
        for name, value in (("--batch-size", batch_size), ("--epochs", epochs), ("--iterations", iterations)):
            if value is not None:
                raise ConfigError(f"{name} does not apply to --method {method}: it is solved on the whole training "
                                  "set, not trained in steps")
    else:
        batch_size = 32 if batch_size is None else batch_size
        if batch_size < 1:
            raise ConfigError(f"--batch-size must be >= 1, got {batch_size}")
        if epochs is not None and iterations is not None:
            raise ConfigError("give either --epochs or --iterations, not both")
        if iterations is not None and iterations < 1:
            raise ConfigError(f"--iterations must be >= 1, got {iterations}")
        if epochs is not None and epochs < 1:
            raise ConfigError(f"--epochs must be >= 1, got {epochs}")
    if snr_every is not None:
        if not hasattr(module, "std_gradients"):
            raise ConfigError(f"--snr does not apply to --method {method} (it applies to bbb and ktied)")
        if snr_every < 1:
            raise ConfigError(f"--snr must be >= 1 (record every N steps), got {snr_every}")
        if snr_draws < 2:
            raise ConfigError(f"--snr-draws must be >= 2 (a variance needs two draws), got {snr_draws}")
    widths = parse_hidden(hidden)
    hyper = dict(hyper or {})
    check_hyper(method, hyper)
    module.Hyper(**hyper)  # validate before reading any data

    if tune and solver:
        raise ConfigError(f"--tune applies to the step methods, not to --method {method}")
    if tune_epochs is not None and tune_epochs < 1:
        raise ConfigError(f"--tune-epochs must be >= 1, got {tune_epochs}")
    if restarts < 1:
        raise ConfigError(f"--restarts must be >= 1, got {restarts}")
    if restarts > 1 and (solver or checkpointing is not None):
        raise ConfigError("--restarts applies to step methods fitted without checkpoints")
    if tune_rounds is not None and not 1 <= tune_rounds <= tune_folds:
        raise ConfigError(f"--tune-rounds must be between 1 and --tune-folds ({tune_folds}), got {tune_rounds}")

    if likelihood != "auto" and likelihood not in LIKELIHOODS:
        raise ConfigError(f"unknown likelihood {likelihood!r} (choose from auto, {', '.join(LIKELIHOODS)})")
    return module, widths, hyper


def fit_prepared(
    prepared: Prepared,
    *,
    method: str = "slang",
    hyper: dict | None = None,
    hidden=(),
    activation: str = "relu",
    noise_precision: float = 1.0,
    batch_size: int | None = None,
    epochs: int | None = None,
    iterations: int | None = None,
    seed: int = 0,
    prior_precision: float = 1.0,
    bias_prior_precision: float = 1e-5,
    eval_samples: int = 1000,
    command: list | None = None,
    progress: Callable[[int, int], None] | None = None,
    notify: Callable[[str], None] = lambda msg: None,
    checkpointing: Checkpointing | None = None,
    tune: str | None = None,
    tune_folds: int = 5,
    tune_epochs: int | None = None,
    tune_rounds: int | None = None,
    restarts: int = 1,
    snr_every: int | None = None,
    snr_draws: int = 10,
) -> Run:
    """Fit a posterior to prepared data (:func:`prepare`, :func:`load_training`) and score it; returns the
    :class:`Run` to be written.

    ``hyper`` holds the method's hyperparameters by name (``slangcli.methods.METHODS[method].Hyper``); the others
    take the method's defaults, and a name the method does not have is a ConfigError. Step methods train for
    ``epochs`` (default 200) or ``iterations`` steps on minibatches of ``batch_size`` (default 32); the exact
    solvers use the whole training set at once and refuse these three (and checkpoints). ``snr_every`` steps
    (methods with ``std_gradients``: ``bbb``, ``ktied``) the gradient SNR of the standard-deviation parameters is
    recorded in the history from ``snr_draws`` independent gradient draws (``slangcli.train.gradient_snr``).
    """
    module, widths, hyper = _checked(
        method=method, hyper=hyper, hidden=hidden, activation=activation, noise_precision=noise_precision,
        batch_size=batch_size, epochs=epochs, iterations=iterations, prior_precision=prior_precision,
        bias_prior_precision=bias_prior_precision, checkpointing=checkpointing, tune=tune, tune_folds=tune_folds,
        tune_epochs=tune_epochs, tune_rounds=tune_rounds, restarts=restarts, snr_every=snr_every,
        snr_draws=snr_draws)
    solver = is_solver(module)
    if not solver:
        batch_size = 32 if batch_size is None else batch_size
    n = len(prepared.X_train)
    sizes = (prepared.X_train.shape[1], *widths, prepared.n_outputs)
    model = MLP(sizes, activation=activation, likelihood=prepared.likelihood, noise_precision=noise_precision)
    hyper_obj = module.Hyper(**hyper)
    hyper_obj, method_note = adapt(module, model, hyper_obj)
    if method_note:
        notify(method_note)
    if solver:
        batch = n_steps = None
    else:
        batch = min(batch_size, n)
        if iterations is None:
            epochs = 200 if epochs is None else epochs
        n_steps = iterations if iterations is not None else epochs * streams.steps_per_epoch(n, batch)
    tuned = None
    params = tuning.parse_tune(tune, prepared.likelihood, module)
    if params:
        def build(values):
            m = MLP(sizes, activation=activation, likelihood=prepared.likelihood,
                    noise_precision=values["noise-precision"])
            return m, m.prior_precision(values["prior-precision"], bias_prior_precision)

        best, tuned = tuning.search(
            tuning.Search(params, tune_folds, tune_epochs, tune_rounds),
            values={"prior-precision": prior_precision, "noise-precision": noise_precision}, build=build,
            method=module, hyper=hyper_obj, X=prepared.X_train, y=prepared.y_train, seed=seed, batch_size=batch,
            epochs=-(-n_steps // streams.steps_per_epoch(n, batch)), notify=notify)
        prior_precision, noise_precision = best["prior-precision"], best["noise-precision"]
        hyper_obj = replace(hyper_obj, **{p: best[p] for p in tuning.RATES if p in params})
        model, _ = build(best)
        notify("tuned " + ", ".join(f"--{p} {best[p]:g}" for p in params))
    lam = model.prior_precision(prior_precision, bias_prior_precision)
    problem = Problem(model, lam, n)
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
        "eval_samples": eval_samples,
        "tuning": tuned,
        "restarts": None,  # with restarts > 1: their seeds, training -ELBO and the one kept
        "snr": {"every": snr_every, "draws": snr_draws} if snr_every else None,
        "model": {"sizes": list(model.sizes), "activation": model.activation, "likelihood": model.likelihood,
                  "noise_precision": model.noise_precision},
    }
    setup = _Setup(method, module, hyper_obj, model, problem, prepared, config, list(command or []))

    if not solver:
        if restarts > 1:
            return _train_restarts(setup, restarts, progress, notify)
        return _train(setup, None, None, 0.0, progress, checkpointing)
    started = time.perf_counter()
    # one iteration is O(N D^2) for the full solver: the thread policy of a step of that size
    with blas_threads(model.n_params, model.n_params, n):
        posterior, info = module.solve(problem, prepared.X_train, prepared.y_train, hyper_obj)
    return _finish(setup, posterior, info["history"], info["solver"]["iterations"], time.perf_counter() - started,
                   solver=info["solver"])


def resume(run: Run, run_name: str, *, progress: Callable[[int, int], None] | None = None,
           notify: Callable[[str], None] = lambda msg: None, checkpointing: Checkpointing | None = None) -> Run:
    """Continue the fit stored in the checkpoint ``run`` to its last step; the result equals, bit for bit in its
    posterior and per-epoch losses, the fit that was never stopped (every random stream is derived from the seed
    and the step). The training (and test) data are re-read and must be unchanged."""
    if run.status != "checkpoint" or run.state is None:
        raise ConfigError(f"{run_name}: the fit is complete; there is nothing to resume")
    config = run.config
    method = config.get("method")
    if method not in METHODS or is_solver(METHODS[method]):
        raise FormatError(f"{run_name}: a checkpoint of an unknown or non-resumable method {method!r}")
    module = METHODS[method]
    hyper_obj = module.Hyper(**config["hyper"])
    # options a newer minor format added are ignored here too, as the format promises
    opts = _stored_options(run)
    if STDIN in (opts.path, opts.test):
        raise DataError(f"{run_name}: its data were read from standard input, which cannot be read again; fit anew")
    prepared = load_training(opts, likelihood=run.model.likelihood, notify=notify)
    for part in ("train", "test"):
        old, new = run.data.get(part) or {}, prepared.data.get(part) or {}
        if old.get("sha256") != new.get("sha256"):
            raise DataError(f"{run_name}: its {part} data {old.get('path', '?')} changed since the checkpoint "
                            "(sha256 differs); cannot resume")
    if prepared.X_train.shape[1] != run.model.sizes[0]:
        raise DataError(f"{run_name}: the training data no longer have {run.model.sizes[0]} feature columns")
    problem = Problem(run.model, run.prior_precision, len(prepared.X_train))
    prepared.data = run.data  # the provenance as first recorded (including notes such as a widened width)
    setup = _Setup(method, module, hyper_obj, run.model, problem, prepared, config, run.command)

    # the method's state: a fresh one as the template of fields, shapes and dtypes, then the stored values
    template = module.init(streams.derive_rng(config["seed"], streams.INIT), problem, hyper_obj)
    stored, scalars = run.state["arrays"], run.state["scalars"]
    values = {}
    for name, value in zip(template._fields, template):
        if name == "t":
            values[name] = int(scalars["t"])
        elif isinstance(value, np.ndarray) and name in stored:
            got = stored[name]
            if got.shape != value.shape:
                raise FormatError(f"{run_name}: /state/{name} has shape {got.shape}, expected {value.shape}")
            # the template's dtype and memory order (SLANG keeps U Fortran-ordered): BLAS kernels, and so the
            # rounding of every later step, depend on the layout
            order = "F" if value.flags.f_contiguous and not value.flags.c_contiguous else "C"
            values[name] = np.array(got, dtype=value.dtype, order=order)
        elif isinstance(value, np.ndarray) and name not in cache_fields(module):
            raise FormatError(f"{run_name}: /state lacks {name!r}")
        elif isinstance(value, (int, float)) and name in scalars:
            values[name] = type(value)(scalars[name])
        else:
            values[name] = None if isinstance(value, np.ndarray) else value
    state = template._replace(**values)
    if not 0 < state.t < config["n_steps"]:
        raise FormatError(f"{run_name}: /state is at step {state.t} of {config['n_steps']}")
    history = train.History(
        epoch=[int(v) for v in run.history.get("epoch", [])], step=[int(v) for v in run.history.get("step", [])],
        nll=[float(v) for v in run.history.get("nll", [])], seconds=[float(v) for v in run.history.get("seconds", [])],
        kl=[float(v) for v in run.history.get("kl", [])],
        open_sum=float(scalars.get("history_open_sum", 0.0)), open_count=int(scalars.get("history_open_count", 0)),
        open_seconds=float(scalars.get("history_open_seconds", 0.0)))
    return _train(setup, state, history, float(run.metrics.get("fit_seconds", 0.0)), progress, checkpointing)


def _snapshot(setup: _Setup, state, history: train.History, fit_seconds: float) -> Run:
    """The run file of a fit stopped after step ``state.t``: the posterior so far and the state to resume."""
    arrays = {name: value for name, value in zip(state._fields, state) if isinstance(value, np.ndarray)}
    scalars = {"t": int(state.t), "history_open_sum": float(history.open_sum),
               "history_open_count": int(history.open_count), "history_open_seconds": float(history.open_seconds)}
    scalars.update({name: value for name, value in zip(state._fields, state)
                    if name != "t" and isinstance(value, (int, float))})
    metrics = {"steps": int(state.t), "n_steps": setup.config["n_steps"], "fit_seconds": fit_seconds}
    return Run(model=setup.model, prior_precision=setup.problem.prior_precision,
               posterior=setup.module.posterior(state), config=setup.config, data=setup.prepared.data,
               arrays=setup.prepared.arrays, history=history.as_arrays(), metrics=metrics, command=setup.command,
               meta=meta(), status="checkpoint", state={"arrays": arrays, "scalars": scalars})


def _snr_options(cfg: dict) -> dict:
    """``train.run``'s gradient-SNR arguments from the run's config (``--snr``; none recorded when absent)."""
    snr = cfg.get("snr") or {}
    return {"snr_every": snr.get("every") or 0, "snr_draws": snr.get("draws", 10)}


def _train(setup: _Setup, state, history, elapsed: float, progress, checkpointing: Checkpointing | None) -> Run:
    """Train a step method from ``state`` (None: fresh) to the configured last step, writing checkpoints as
    ``checkpointing`` asks, then score it."""
    cfg, p = setup.config, setup.prepared
    started = time.perf_counter()
    last_write = started
    first_step = 0 if state is None else state.t

    def after_step(state, history) -> bool:
        nonlocal last_write
        if checkpointing is None:
            return False
        stop = checkpointing.stop()
        now = time.perf_counter()
        due = (checkpointing.every_steps and state.t % checkpointing.every_steps == 0) or \
              (checkpointing.every_seconds and now - last_write >= checkpointing.every_seconds)
        if (due or stop) and state.t < cfg["n_steps"]:
            checkpointing.write(_snapshot(setup, state, history, elapsed + now - started))
            last_write = time.perf_counter()
        return stop

    stopped = checkpointing is not None and checkpointing.stop()
    if not stopped:
        with blas_threads(setup.model.n_params, samples_per_step(setup.hyper), cfg["batch_size"]):
            state, history = train.run(setup.module, setup.hyper, setup.problem, p.X_train, p.y_train,
                                       seed=cfg["seed"], batch_size=cfg["batch_size"], n_steps=cfg["n_steps"],
                                       state=state, history=history, progress=progress, after_step=after_step,
                                       **_snr_options(cfg))
    if stopped or state.t < cfg["n_steps"]:
        step = first_step if state is None else state.t
        raise Interrupted(step, cfg["n_steps"], checkpointed=step > first_step)
    fit_seconds = elapsed + time.perf_counter() - started
    return _finish(setup, setup.module.posterior(state), history.as_arrays(), int(state.t), fit_seconds)


def restart_seed(seed: int, r: int) -> int:
    """The training seed of restart ``r`` (restart 0 trains with ``seed`` itself)."""
    return seed if r == 0 else int(streams.derive_rng(seed, streams.RESTART, r).integers(2**31))


def _train_restarts(setup: _Setup, restarts: int, progress, notify) -> Run:
    """``restarts`` fits from different seeds (initial mean, minibatches, weight noise); the one with the lowest
    -ELBO on the training data is kept and scored. The test data play no part in the choice. A restart that
    diverges is left out; if all do, the first one's error is raised."""
    cfg, p = setup.config, setup.prepared
    seeds = [restart_seed(cfg["seed"], r) for r in range(restarts)]
    started = time.perf_counter()
    best, elbos, error = None, [], None
    for r, seed in enumerate(seeds):
        try:
            with blas_threads(setup.model.n_params, samples_per_step(setup.hyper), cfg["batch_size"]):
                state, history = train.run(setup.module, setup.hyper, setup.problem, p.X_train, p.y_train,
                                           seed=seed, batch_size=cfg["batch_size"], n_steps=cfg["n_steps"],
                                           progress=progress, **_snr_options(cfg))
        except DivergenceError as exc:
            error = error or exc
            elbos.append(None)
            notify(f"restart {r + 1} of {restarts} (seed {seed}): {exc}")
            continue
        posterior = setup.module.posterior(state)
        with np.errstate(over="ignore", invalid="ignore"):  # the training part of the run's own scores
            scores = score(setup.model, posterior, setup.problem.prior_precision, X_train=p.X_train,
                           y_train=p.y_train, samples=cfg["eval_samples"], seed=cfg["seed"])
        nelbo = scores["train"]["neg_elbo_per_example"]
        nelbo = nelbo if np.isfinite(nelbo) else float("inf")
        elbos.append(nelbo)
        notify(f"restart {r + 1} of {restarts} (seed {seed}): training -ELBO per example {nelbo:.4f}")
        if best is None or nelbo < best[0]:
            best = (nelbo, r, posterior, history, int(state.t))
    if best is None:
        raise error
    _, chosen, posterior, history, steps = best
    cfg["restarts"] = {"seeds": seeds, "neg_elbo_per_example": elbos, "chosen": chosen}
    return _finish(setup, posterior, history.as_arrays(), steps, time.perf_counter() - started)


def meta() -> dict:
    return {"slang_version": __version__, "versions": versions(),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def _finish(setup: _Setup, posterior, history: dict, steps: int, fit_seconds: float, solver=None) -> Run:
    """Score the fitted posterior and assemble the complete run."""
    p, cfg = setup.prepared, setup.config
    target_scale = float(p.arrays["target_scale"][0]) if "target_scale" in p.arrays else 1.0
    scores = score(setup.model, posterior, setup.problem.prior_precision, X_train=p.X_train, y_train=p.y_train,
                   X_test=p.X_test, y_test=p.y_test, target_scale=target_scale,
                   samples=cfg.get("eval_samples", 1000), seed=cfg["seed"])
    scores["fit_seconds"] = fit_seconds
    scores["steps"] = int(steps)
    if solver is not None:
        scores["solver"] = solver
    return Run(model=setup.model, prior_precision=setup.problem.prior_precision, posterior=posterior,
               config=cfg, data=p.data, arrays=p.arrays, history=history, metrics=scores, command=setup.command,
               meta=meta())


def check_comparable(run: Run, run_name: str, reference: Run, reference_name: str) -> None:
    """Refuse, with one DataError line, a reference run whose posterior is over other parameters (another model)
    or that was fitted to other training data (file checksum, the rows used, feature standardisation)."""
    a, b = run.model, reference.model
    checks = [("layer sizes", a.sizes, b.sizes), ("likelihood", a.likelihood, b.likelihood)]
    if not a.is_linear:  # the activation means nothing without hidden layers
        checks.append(("activation", a.activation, b.activation))
    if a.likelihood == "gaussian":
        checks.append(("noise precision", a.noise_precision, b.noise_precision))
    for what, x, z in checks:
        if x != z:
            raise DataError(f"{reference_name}: not comparable with {run_name}: different model ({what} {z} vs {x})")
    train_a, train_b = run.data["train"], reference.data["train"]
    if train_a.get("sha256") != train_b.get("sha256"):
        why = "the training files' sha256 differ"
    elif not _same_rows(run.arrays.get("train_index"), reference.arrays.get("train_index")):
        why = "different rows of the training file (another split)"
    elif bool(run.data.get("standardize")) != bool(reference.data.get("standardize")):
        why = "features standardised in one run only"
    else:
        return
    raise DataError(f"{reference_name}: not comparable with {run_name}: fitted to different training data ({why})")


def _same_rows(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and bool(np.all(a == b))


def compare(run: Run, run_name: str, reference: Run, reference_name: str) -> dict:
    """KL divergences between the two runs' posteriors (after :func:`check_comparable`)."""
    check_comparable(run, run_name, reference, reference_name)
    p, q = run.posterior, reference.posterior
    forward, backward = divergence.kl(p, q), divergence.kl(q, p)
    return {"path": reference_name, "method": reference.config.get("method"), "kind": q.kind,
            "symmetric_kl": 0.5 * (forward + backward), "kl_run_to_reference": forward,
            "kl_reference_to_run": backward}


def _scoring_data(run: Run, run_name: str, data_path, notify, without_train: str):
    """``(X_test, y_test, source, X_train, y_train, target_scale)`` for scoring a stored run; the training data
    are None (with a note ending in ``without_train``) when they cannot be re-read."""
    X_test, y_test, source = load_test(run, run_name, data_path)
    try:
        X_train, y_train = load_train(run, run_name)
    except DataError as exc:
        notify(f"{exc}; {without_train}")
        X_train = y_train = None
    target_scale = float(run.arrays["target_scale"][0]) if "target_scale" in run.arrays else 1.0
    return X_test, y_test, source, X_train, y_train, target_scale


def evaluate(run: Run, run_name: str, data_path=None, *, predictive="auto", samples=1000, seed=0, bins=15,
             reference: Run | None = None, reference_name: str = "reference",
             notify: Callable[[str], None] = lambda msg: None) -> dict:
    """Score a stored run on ``data_path`` or on its own test data, plus its training -ELBO / N; with a
    ``reference`` run, also the KL divergences between the two posteriors (``out["reference"]``)."""
    if reference is not None:
        check_comparable(run, run_name, reference, reference_name)
    X_test, y_test, source, X_train, y_train, target_scale = _scoring_data(
        run, run_name, data_path, notify, "the training -ELBO is the value stored at fit time")
    out = score(run.model, run.posterior, run.prior_precision, X_train=X_train, y_train=y_train,
                X_test=X_test, y_test=y_test, target_scale=target_scale, predictive=predictive, samples=samples,
                seed=seed, bins=bins)
    if X_train is None:
        out["train"] = dict(run.metrics.get("train", {}), stored=True)
    out["data"] = source
    if reference is not None:
        out["reference"] = compare(run, run_name, reference, reference_name)
    return out


# ------------------------------------------------------------------------------------------------ compress
def parse_ranks(text) -> list[int]:
    """``"1,2,3" -> [1, 2, 3]``: positive whole numbers, each at most once, in the order given."""
    parts = [p.strip() for p in str(text).split(",")]
    if not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise ConfigError(f"--rank takes positive whole numbers separated by commas (e.g. 1,2,3), got {text!r}")
    ranks = [int(p) for p in parts]
    repeated = [k for i, k in enumerate(ranks) if k in ranks[:i]]
    if repeated:
        raise ConfigError(f"--rank {repeated[0]} is given twice")
    return ranks


def rank_outputs(output: str, ranks: list[int]) -> list[str]:
    """The file of each rank: ``output`` itself for one rank; for several, the rank before the extension
    (``out.h5`` -> ``out-k1.h5``, ``out-k2.h5``)."""
    if len(ranks) == 1:
        return [output]
    root, ext = os.path.splitext(output)
    return [f"{root}-k{k}{ext}" for k in ranks]


@dataclass
class Compressed:
    """One compressed posterior: its rank, where it goes, the run to write, each layer's compression and, when
    asked, its scores (``workflow.score``)."""

    rank: int
    path: str
    run: Run
    layers: list
    scores: dict | None = None


def compressed_run(run: Run, k: int, source: dict, *, command: list | None = None, path: str | None = None
                   ) -> Compressed:
    """The run of ``run``'s posterior compressed to rank ``k`` (``slangcli.compress``); ``source`` describes the
    run it came from (``path``, ``sha256``, ``posterior``, ``method``)."""
    before = compression.n_variational_params(run.posterior)
    posterior, layers = compression.compress(run.posterior, run.model, k)
    summary = {
        "source": {key: source.get(key) for key in ("path", "sha256", "posterior", "method")},
        "rank": k, "floor_relative": compression.FLOOR_RELATIVE, "params_before": before,
        "params_after": compression.n_variational_params(posterior),
        "layers": [c.summary() for c in layers],
    }
    arrays = {}
    for l, c in enumerate(layers):
        arrays[f"singular_values_{l}"] = c.singular_values
        arrays[f"explained_variance_{l}"] = c.explained_variance
    new = replace(run, posterior=posterior, metrics={}, command=list(command or []), meta=meta(),
                  compression=summary, compression_arrays=arrays, status="complete", state=None)
    return Compressed(rank=k, path=path, run=new, layers=layers)


def compress(run: Run, run_name: str, ranks: list[int], outputs: list[str], *, evaluate: bool = False,
             samples: int = 100, seed: int = 0, command: list | None = None,
             notify: Callable[[str], None] = lambda msg: None) -> tuple[dict, list[Compressed]]:
    """Compress the posterior of ``run`` (read from ``run_name``) to a k-tied posterior of each rank in ``ranks``
    (``slangcli.compress``), one run to be written to each of ``outputs``.

    With ``evaluate`` every compressed posterior, and the source's for comparison (``source["scores"]``), is scored
    on the run's test data and training -ELBO with ``samples`` weight samples; the same ``seed`` for all, so the
    comparison uses common random numbers. Nothing is written here: the caller writes all or nothing.
    """
    sha = sha256_file(run_name)
    before = compression.n_variational_params(run.posterior)
    limits = [min(m, n) for m, n in zip(run.model.sizes[:-1], run.model.sizes[1:])]
    for k in ranks:
        over = [f"layer {l + 1} ({m} x {n})" for l, (m, n) in enumerate(zip(run.model.sizes[:-1], run.model.sizes[1:]))
                if k > min(m, n)]
        if over:
            notify(f"--rank {k} exceeds min(m, n) of {', '.join(over)}: "
                   + ("it keeps its" if len(over) == 1 else "they keep their") + " full rank (exact reconstruction)")
    source = {"path": os.path.abspath(run_name), "sha256": sha, "posterior": POSTERIOR_NAMES[type(run.posterior)],
              "method": run.config.get("method"), "params": before, "layer_full_ranks": limits}
    results = [compressed_run(run, k, source, command=command, path=path) for k, path in zip(ranks, outputs)]
    if evaluate:
        X_test, y_test, _, X_train, y_train, target_scale = _scoring_data(run, run_name, None, notify,
                                                                          "the -ELBO is not reported")

        def scores(posterior):
            return score(run.model, posterior, run.prior_precision, X_train=X_train, y_train=y_train, X_test=X_test,
                         y_test=y_test, target_scale=target_scale, samples=samples, seed=seed)

        source["scores"] = scores(run.posterior)
        for item in results:
            item.scores = scores(item.run.posterior)
            item.run.metrics = dict(item.scores)
    return source, results
# ------------------------------------------------------------------------------------------ predictions
@dataclass
class Predictions:
    """Per-example predictions of a run on a data set.

    ``arrays`` holds, in output order, under the names of the HDF5 predictions file (``docs/FORMAT.md``):
    classification ``probabilities : (N, C)``, ``predicted`` (label values), ``entropy_total``,
    ``entropy_aleatoric``, ``entropy_epistemic``; regression ``mean``, ``std_total``, ``std_aleatoric``,
    ``std_epistemic``, ``lower``, ``upper`` (original units); and ``target`` (label values or original units) when
    the data carry the target column. ``classes`` are the label values of the probability columns, ``info`` a
    JSON-ready description (likelihood, predictive, samples, seed, interval, data, rows).
    """

    arrays: dict
    classes: list | None
    info: dict


def load_inputs(run: Run, data_path, *, notify: Callable[[str], None] = lambda msg: None):
    """Data to predict on: ``(X, target, source)`` with ``X`` prepared as in the fit, ``target`` the original target
    values (label values for classification) or None when the data lack the target column.

    A CSV file may lack the target column: with exactly the model's number of feature columns it is read as
    features only, with one more as features and target (the fit's ``--target`` choice), any other width is
    refused. LIBSVM, IDX and UCI-folder data always carry their targets.
    """
    opts = _stored_options(run)
    width = run.model.sizes[0]
    if os.path.isdir(data_path):
        if opts.uci_split is None:
            raise DataError(f"{data_path}: a folder; this run was not fitted on a UCI folder")
        table, _, idx = read_uci_folder(data_path, opts.uci_split)
        X_raw, y_raw = table.X[idx], table.y[idx]
        source = {"source": "uci-split", "path": table.provenance["path"], "rows": int(len(idx))}
    else:
        fmt = opts.format if opts.format in ("csv", "libsvm", "idx") else "auto"
        table = read_table(data_path, **dict(opts.reader_options(), format=fmt), targetless_width=width)
        if table.provenance["format"] == "libsvm" and table.X.shape[1] < width:
            table = widen(table, width)
        if table.y is None:
            _check_targetless_header(run, table, data_path, notify)
        X_raw, y_raw = table.X, table.y
        source = {"source": "file", "path": table.provenance["path"], "sha256": table.provenance["sha256"],
                  **_dropped(table)}
        if "rows_dropped" in source:
            lines = table.provenance["dropped_lines"]
            more = ", ..." if source["rows_dropped"] > len(lines) else ""
            notify(f"{data_path}: {_rows(source['rows_dropped'])} with a missing value left out (--missing drop of "
                   f"the fit), lines {', '.join(map(str, lines))}{more}: there are no predictions for them")
    X, y = transform(run, X_raw, y_raw, data_path)
    if y is None:
        target = None
    elif run.model.likelihood == "gaussian":
        target = y_raw.astype(float)
    else:
        # the stored label values (a file's "1" and the class 1.0 are the same label), as in the predicted column
        target = LabelMap(tuple(run.data["labels"]["classes"])).decode(y)
    return X, target, dict(source, rows=int(len(X)), has_target=target is not None)


def _check_targetless_header(run: Run, table, path, notify) -> None:
    """A file read as features only whose header names the training target has lost a feature column instead;
    other header names that differ from the training features are only noted (columns are taken by position)."""
    if not table.provenance.get("header") or not run.data["train"].get("header"):
        return
    target_name = run.data["train"].get("target")
    trained = tuple(run.data.get("feature_names", ()))
    if isinstance(target_name, str) and target_name in table.feature_names:
        raise DataError(f"{path}: {len(table.feature_names)} columns, one of them the target {target_name!r}, but "
                        f"the model takes {len(trained)} features ({', '.join(trained)}): a feature column is "
                        "missing")
    if tuple(table.feature_names) != trained:
        notify(f"{path}: header names differ from the training features ({', '.join(trained)}); columns are taken "
               "in order")


def predict(run: Run, run_name: str, data_path, *, samples: int = 1000, seed: int = 0, interval: float = 0.95,
            notify: Callable[[str], None] = lambda msg: None) -> Predictions:
    """Per-example predictions with their uncertainty (``slangcli.predict``) of the run on ``data_path``.

    Logistic regression uses the exact 1-D quadrature predictive (``samples`` and ``seed`` are then unused);
    every other model ``samples`` Monte-Carlo weight samples drawn from ``seed``'s own stream (``streams.PREDICT``).
    """
    if samples < 1:
        raise ConfigError(f"--samples must be >= 1, got {samples}")
    if not 0.0 < interval < 1.0:
        raise ConfigError(f"--interval must lie strictly between 0 and 1, got {interval}")
    X, target, source = load_inputs(run, data_path, notify=notify)
    out = predict_arrays(run, X, samples=samples, seed=seed, interval=interval)
    if target is not None:
        out.arrays["target"] = target
    out.info.update(run=run_name, data=source)
    return out


def predict_arrays(run: Run, X: np.ndarray, *, samples: int = 1000, seed: int = 0,
                   interval: float = 0.95) -> Predictions:
    """Per-example predictions of ``run`` on features ``X`` prepared as in the fit (:func:`transform`): the one
    predictive behind ``slang predict``, ``slang evaluate`` and the Python API."""
    if samples < 1:
        raise ConfigError(f"--samples must be >= 1, got {samples}")
    if not 0.0 < interval < 1.0:
        raise ConfigError(f"--interval must lie strictly between 0 and 1, got {interval}")
    model = run.model
    with blas_threads(model.n_params, min(samples, predictive_uncertainty.SAMPLE_CHUNK), max(len(X), 1)):
        if model.likelihood == "gaussian":
            out = predictive_uncertainty.regress(
                run.posterior, model, X, samples=samples, seed=seed, level=interval,
                target_mean=float(run.arrays["target_mean"][0]), target_scale=float(run.arrays["target_scale"][0]))
            arrays = {name: out[name] for name in ("mean", "std_total", "std_aleatoric", "std_epistemic", "lower",
                                                   "upper")}
            classes = None
        else:
            out = predictive_uncertainty.classify(run.posterior, model, X, samples=samples, seed=seed)
            labels = LabelMap(tuple(run.data["labels"]["classes"]))
            arrays = {"probabilities": out["probs"], "predicted": labels.decode(np.argmax(out["probs"], axis=1))}
            arrays.update((name, out[name]) for name in ("entropy_total", "entropy_aleatoric", "entropy_epistemic"))
            classes = list(labels.classes)
    mc = out["predictive"] == "mc"
    info = {"run": None, "likelihood": model.likelihood, "predictive": out["predictive"],
            "samples": samples if mc else None, "seed": seed if mc else None,
            "interval": interval if model.likelihood == "gaussian" else None, "data": {"rows": int(len(X))}}
    return Predictions(arrays=arrays, classes=classes, info=info)
