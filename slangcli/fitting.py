"""Fitting a posterior to prepared data: option checks, the model and problem, tuning, the training of a step
method or the solve of a solver, resuming a checkpoint, and the final scores of the run.

Step methods train in ``slangcli.train.run`` from a ``slangcli.fitsetup.Setup``; checkpoints store the method's
state (``slangcli.checkpoints``: :class:`Checkpointing` says when and how); a resumed fit equals, bit for bit, the
fit that was never stopped, because every random stream is derived from the seed and the step. ``restarts > 1``
fits from several seeds and keeps the lowest training -ELBO (``slangcli.restarts``).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, replace
from typing import Callable

import numpy as np

from slangcli import checkpoints, learned, metrics, streams, task, train, tuning
from slangcli.checkpoints import Checkpointing
from slangcli.checks import recorded_options, stored_hyper
from slangcli.errors import ConfigError, ConvergenceError, DataError, DivergenceError, FormatError, Interrupted
from slangcli.fitsetup import Setup, train_steps
from slangcli.io import Run
from slangcli.methods import METHODS
from slangcli.methods.base import Problem, adapt, hyper_names, is_solver, samples_per_step
from slangcli.models import ACTIVATIONS, LIKELIHOODS, MLP
from slangcli.posteriors import MAX_ABS_VALUE
from slangcli.threads import blas_threads
from slangcli.evaluation import score
from slangcli.prepare import Prepared
from slangcli.provenance import meta
from slangcli.readers import STDIN
from slangcli.restarts import train_restarts
from slangcli.sources import DataOptions, _is_uci, _stored_options, load_training

# the value of --noise-precision and --prior-precision that learns them (slangcli.learned)
AUTO = "auto"


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


# The method of a fit that names none. A linear model: SLANG, the method of the SLANG paper's logistic-regression
# protocol. A classification network: IVON, which reaches a given test NLL in a fraction of SLANG's time there
# (USPS, MNIST) and sooner than IVON's reference implementation (docs/PEERS.md, section 6). A regression network:
# SLANG, whose posterior width follows the data's curvature: IVON's stays near its initial value within a fit's
# budget, and with the noise precision learned its 200-epoch fit of a Wine Quality-shaped file overfitted (test
# RMSE 0.70 against SLANG's 0.60, 95 % interval coverage 0.87 against 0.96), though on Boston and Concrete its test
# NLL is better at equal time.
DEFAULT_METHOD = {"linear model": "slang", "classification network": "ivon", "regression network": "slang"}


def _model_kind(hidden, likelihood: str | None) -> str | None:
    """The key of ``DEFAULT_METHOD`` for the network ``hidden`` (no hidden layer: a linear model) and
    ``likelihood``; None for a network whose likelihood is not known yet (``auto`` before the data are read)."""
    if not parse_hidden(hidden):
        return "linear model"
    if likelihood == "gaussian":
        return "regression network"
    return "classification network" if likelihood in ("bernoulli", "categorical") else None


def default_method(hidden, likelihood: str | None = "auto") -> str | None:
    """The method of a fit that names none (``DEFAULT_METHOD``); None while a network's likelihood is unknown."""
    kind = _model_kind(hidden, likelihood)
    return None if kind is None else DEFAULT_METHOD[kind]


def check_hyper(method: str, hyper: dict) -> None:
    """Refuse hyperparameters that ``method`` does not have (one ConfigError naming the first and listing what
    the method takes), so an option is never silently ignored."""
    module = METHODS[method]
    names = hyper_names(module)
    unknown = [name for name in hyper if name not in names]
    if unknown:
        raise ConfigError(f"{option_name(unknown[0])} does not apply to --method {method} (its options: "
                          f"{', '.join(option_name(n) for n in names)})")


def fit(opts: DataOptions, *, likelihood: str = "auto", notify: Callable[[str], None] = lambda msg: None,
        **options) -> Run:
    """Fit a posterior to the data files in ``opts`` and score it; returns the :class:`Run` to be written.

    ``options`` are those of :func:`fit_prepared`; they are all checked before any data are read. A Gal-layout
    UCI folder is the regression benchmark: its target is Gaussian unless ``likelihood`` says otherwise (the wine
    folder's integer quality would otherwise be read as six classes).
    """
    if likelihood == "auto" and _is_uci(opts):
        likelihood = "gaussian"
    check_fit_options(likelihood=likelihood, **options)
    if opts.standardize is None:
        opts = replace(opts, standardize=standardize_by_default(options.get("hidden", ()), _is_uci(opts)))
    with _urgent(options.get("checkpointing"), "reading the data"):
        prepared = load_training(opts, likelihood=likelihood, notify=notify)
    if likelihood == "auto" and options.get("method") is None:  # the data chose the likelihood, and so the method
        check_fit_options(likelihood=prepared.likelihood, **options)
    sizes = (prepared.X_train.shape[1], *parse_hidden(options.get("hidden", ())), prepared.n_outputs)
    for line in task.describe(prepared.data, prepared.arrays, prepared.likelihood, sizes[0],
                              MLP(sizes, likelihood=prepared.likelihood).n_params):
        notify(line)
    hidden = options.get("hidden", ())
    if options.get("method") is None and parse_hidden(hidden):  # a network's method depends on its task: say so
        notify(f"method: {default_method(hidden, prepared.likelihood)}, the default for a "
               f"{_model_kind(hidden, prepared.likelihood)} (--method chooses another)")
    if likelihood == "auto" and prepared.data["train"].get("format") != "idx":
        hint = task.integer_target_hint(prepared.data["targets"].get("classes"), prepared.data["train"].get("target"))
        if hint:
            notify(hint)
    return fit_prepared(prepared, notify=notify, **options)


def standardize_by_default(hidden=(), uci_folder: bool = False) -> bool:
    """Features are standardised by default, for every model: a raw feature of scale 1e3 saturates a network's
    units, and for a linear model too it meets a prior of precision 1 on a weight of scale 1e-3 and a step size
    tuned for unit scales. Raw, a linear regression of penguin body mass on measurements in mm and g learned
    nothing (test RMSE 829.5 against 829.9 for the training mean; 367 standardised), and the raw Breast Cancer
    Wisconsin file's test NLL was 0.181 against 0.117. ``--no-standardize`` uses the features as read (the
    paper protocols' benchmarks pin it)."""
    return True


def check_fit_options(**options) -> None:
    """Refuse invalid fit options (:func:`fit_prepared`'s) with one ConfigError, before any data are read."""
    _checked(**options)


# the whole-number options and their least values: a string or a fraction from Python (an estimator's
# set_params(epochs="ten")) is named here, not met later as "'<' not supported between 'str' and 'int'"
WHOLE_NUMBERS = {"batch_size": 1, "epochs": 1, "iterations": 1, "eval_samples": 1, "seed": 0, "tune_folds": 2,
                 "tune_epochs": 1, "tune_rounds": 1, "restarts": 1, "snr_every": 1, "snr_draws": 2}


def _check_whole_numbers(options: dict) -> None:
    for name, least in WHOLE_NUMBERS.items():
        value = options.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
            raise ConfigError(f"--{name.replace('_', '-')} must be a whole number >= {least}, got {value!r}")


def _checked(**options):
    """The checks of :func:`check_fit_options`; returns ``(module, widths, hyper)``. A network without a method
    whose likelihood the data will decide (``auto``) must have options that suit one of the methods it may get by
    default; they are checked again for the one it gets, once the data are read."""
    _check_whole_numbers(options)
    method, hidden = options.get("method"), options.get("hidden", ())
    if method is not None or default_method(hidden, options.get("likelihood", "auto")) is not None:
        return _checked_method(**options)
    first = None
    for likelihood in ("bernoulli", "gaussian"):
        try:
            return _checked_method(**{**options, "likelihood": likelihood})
        except ConfigError as exc:
            first = first or exc
    raise first


def _checked_method(
    *,
    method: str | None = None,
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
    eval_samples: int = 1000,
    **_,
):
    """:func:`_checked` with a method given or defaulted."""
    given, method = method, default_method(hidden, likelihood) if method is None else method
    if method not in METHODS:
        raise ConfigError(f"unknown method {method!r} (choose from {', '.join(METHODS)})")
    if activation not in ACTIVATIONS:
        raise ConfigError(f"unknown activation {activation!r} (choose from {', '.join(ACTIVATIONS)})")
    for name, value in (("--prior-precision", prior_precision), ("--bias-prior-precision", bias_prior_precision),
                        ("--noise-precision", noise_precision)):
        if value == AUTO and name != "--bias-prior-precision":
            continue
        if isinstance(value, str) or not 0 < value < np.inf:
            raise ConfigError(f"{name} must be positive and finite" + (" or auto" if name != "--bias-prior-precision"
                              else "") + f", got {value}")
        # a run file holds the prior precisions, and the posterior precisions they bound from below, within
        # [1 / MAX_ABS_VALUE, MAX_ABS_VALUE] (slangcli.io): a fit must not write what slang cannot read back
        if name != "--noise-precision" and not 1 / MAX_ABS_VALUE <= value <= MAX_ABS_VALUE:
            raise ConfigError(f"{name} must lie between {1 / MAX_ABS_VALUE:g} and {MAX_ABS_VALUE:g}, got {value}")
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
    try:
        check_hyper(method, hyper)
    except ConfigError as exc:
        takers = [name for name, m in METHODS.items() if set(hyper) <= set(hyper_names(m))]
        if given is not None or not takers:
            raise
        raise ConfigError(f"{exc}; {method} is the default method of a {_model_kind(hidden, likelihood)}: "
                          f"give --method {takers[0]} for "
                          f"{option_name(next(n for n in hyper if n not in hyper_names(module)))}") from None
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
    metrics.check_samples(eval_samples, "--eval-samples")
    return module, widths, hyper


def fit_prepared(prepared: Prepared, *, notify: Callable[[str], None] = lambda msg: None, **options) -> Run:
    """Fit a posterior to prepared data and score it (:func:`_fit_prepared`, whose options these are); a fit whose
    test predictive is far worse than a constant predictor's says so through ``notify`` (the constant predictor's
    scores are stored in ``run.metrics["constant"]``).

    Features used as read (not standardised) are checked for their magnitude first: beyond ``MAX_ABS_VALUE`` they
    are refused (:func:`check_magnitude`), a feature below ``1 / MAX_ABS_VALUE`` gets a warning
    (``task.tiny_features``), and a fit that then diverges or does not converge names a large magnitude as the
    likely cause (``task.magnitude_note``)."""
    if not prepared.data.get("standardize"):
        check_magnitude(prepared)
        for warning in task.tiny_features(prepared.X_train, prepared.data.get("feature_names", ())):
            notify(warning)
    with _naming_magnitude(prepared):
        run = _fit_prepared(prepared, notify=notify, **options)
    baseline = constant_scores(prepared)
    if baseline:
        run.metrics["constant"] = baseline
        warning = far_worse(run.metrics.get("test"), baseline) or barely_better(
            run.metrics.get("test"), baseline, prepared, run, "on the test rows")
        if warning:
            notify(warning)
    elif len(prepared.y_train) and run.posterior is not None:
        warning = barely_better(*_in_sample_scores(prepared, run), prepared, run,
                                f"even on {min(len(prepared.y_train), IN_SAMPLE_ROWS)} of its own training rows")
        if warning:
            notify(warning)
    return run


def check_magnitude(prepared: Prepared) -> None:
    """Refuse features used as read (not standardised) beyond ``MAX_ABS_VALUE`` in magnitude, naming the largest:
    every method computes with their squares (SLANG's and the natural-gradient methods' curvature, Adam's second
    moment, the exact solvers' Hessian), which overflow float64 in sums, so that no step size fits them; standardised,
    they are of order 1."""
    X = prepared.X_train
    if X.size == 0:
        return
    peak = np.abs(X).max(axis=0)
    j = int(np.argmax(peak))
    if peak[j] > MAX_ABS_VALUE:
        # the data path as given (arrays from Python have none)
        where = (prepared.data.get("options") or {}).get("path") or "X"
        name = task.feature_name(prepared.data.get("feature_names", ()), j)
        raise DataError(f"{where}: feature {name!r} reaches {peak[j]:.3g} in magnitude, beyond {MAX_ABS_VALUE:g}: "
                        "too large to compute with as read; --standardize scales the features")


@contextlib.contextmanager
def _naming_magnitude(prepared: Prepared):
    """A fit of features used as read that diverges or does not converge names their magnitude when it is large
    (``task.magnitude_note``): the usual cause, which the error's own hint (a smaller step, a looser tolerance) would
    not cure."""
    try:
        yield
    except (DivergenceError, ConvergenceError) as exc:
        note = None if prepared.data.get("standardize") else task.magnitude_note(
            prepared.X_train, prepared.data.get("feature_names", ()))
        if note is None:
            raise
        raise type(exc)(f"{exc}; {note}") from None


# a test predictive worse than a constant predictor's by this many nats per example (or an RMSE this many times
# the constant's) is reported: no fit that learned anything scores so
FAR_WORSE_NATS = 0.5
FAR_WORSE_RMSE = 1.2


def constant_scores(prepared: Prepared) -> dict | None:
    """Test scores of the best constant predictor fitted to the training targets: regression the training mean
    and standard deviation (``N(0, 1)`` on the standardised scale), classification the training class frequencies;
    None without test targets."""
    if prepared.y_test is None or len(prepared.y_test) == 0:
        return None
    y = prepared.y_test
    if prepared.likelihood == "gaussian":
        scale = float(prepared.arrays["target_scale"][0])
        return {"rmse": float(scale * np.sqrt(np.mean(y**2))),
                "loglik": float(np.mean(-0.5 * np.log(2 * np.pi) - 0.5 * y**2) - np.log(scale))}
    codes = prepared.y_train.astype(np.int64)
    freq = np.bincount(codes, minlength=max(prepared.n_outputs, 2)) / len(codes)
    return {"nll": float(-np.mean(np.log(np.maximum(freq[y.astype(np.int64)], 1e-300)))),
            "accuracy": float(np.mean(y.astype(np.int64) == np.argmax(freq)))}


def far_worse(test: dict | None, baseline: dict) -> str | None:
    """The warning for test scores far worse than the constant predictor's, or None."""
    if not test:
        return None
    hint = ("check the features' scales (--standardize), the likelihood, the --noise-precision and the "
            "--prior-precision")
    if "rmse" in test:
        if test["loglik"] < baseline["loglik"] - FAR_WORSE_NATS or test["rmse"] > FAR_WORSE_RMSE * baseline["rmse"]:
            return (f"warning: the test predictive (RMSE {test['rmse']:.4g}, log-likelihood {test['loglik']:.4g}) "
                    f"is far worse than a constant predictor's (the training mean and standard deviation: RMSE "
                    f"{baseline['rmse']:.4g}, log-likelihood {baseline['loglik']:.4g}); {hint}")
        return None
    if test["nll"] > baseline["nll"] + FAR_WORSE_NATS:
        return (f"warning: the test NLL {test['nll']:.4g} is far worse than a constant predictor's "
                f"{baseline['nll']:.4g} (the training class frequencies); {hint}")
    return None


# a fit whose predictive removes less than this fraction of the constant predictor's loss (its squared error in
# regression, its NLL in classification) is reported: it learned next to nothing from the features
BARELY_BETTER = 0.1
# without test rows, the check scores the predictive on at most this many training rows (evenly spaced, in the
# file's order), with at most IN_SAMPLE_SAMPLES weight samples: in sample, so it finds a fit that learned nothing,
# not one that overfitted
IN_SAMPLE_ROWS, IN_SAMPLE_SAMPLES = 1000, 32


def _in_sample_scores(prepared: Prepared, run: Run) -> tuple[dict, dict]:
    """The predictive's scores and the constant predictor's on up to ``IN_SAMPLE_ROWS`` training rows."""
    rows = np.unique(np.linspace(0, len(prepared.y_train) - 1, min(len(prepared.y_train), IN_SAMPLE_ROWS))
                     .astype(np.int64))
    X, y = prepared.X_train[rows], prepared.y_train[rows]
    target_scale = float(prepared.arrays["target_scale"][0]) if "target_scale" in prepared.arrays else 1.0
    scores = score(run.model, run.posterior, run.prior_precision, X_train=None, y_train=None, X_test=X, y_test=y,
                   target_scale=target_scale, samples=min(run.config.get("eval_samples", 1000), IN_SAMPLE_SAMPLES),
                   seed=run.config.get("seed", 0))["test"]
    return scores, constant_scores(replace(prepared, y_test=y))


def barely_better(test: dict | None, baseline: dict, prepared: Prepared, run: Run, where: str) -> str | None:
    """The warning for a predictive that is not clearly better than the constant predictor (it removes less than
    ``BARELY_BETTER`` of its loss), naming the likely cause; or None."""
    if not test:
        return None
    if "rmse" in test:
        gain = 1.0 - (test["rmse"] / baseline["rmse"]) ** 2 if baseline["rmse"] > 0 else 1.0
        scores = (f"RMSE {test['rmse']:.4g} against {baseline['rmse']:.4g} for the training mean: "
                  + (f"only {100 * gain:.1f} % of the variance explained" if gain >= 0 else "worse than it"))
    else:
        gain = 1.0 - test["nll"] / baseline["nll"] if baseline["nll"] > 0 else 1.0
        scores = (f"NLL {test['nll']:.4g} against {baseline['nll']:.4g} for the training class frequencies: "
                  + (f"only {100 * gain:.1f} % of it removed" if gain >= 0 else "worse than it"))
    if gain >= BARELY_BETTER:
        return None
    return (f"warning: the fit is barely better than a constant predictor {where} ({scores}); "
            f"{_likely_cause(prepared, run)}")


def _likely_cause(prepared: Prepared, run: Run) -> str:
    """What most likely keeps a fit from learning: raw features of very different scales, too short a fit, or
    features that say little about the target."""
    if not prepared.data.get("standardize") and prepared.X_train.size:
        # far from unit scale, or far from centred (a length of 200 +- 14 mm), raw features make the posterior's
        # directions of very different curvature: few steps of any size fit them
        X = prepared.X_train
        size = np.sqrt(np.einsum("np,np->p", X, X) / len(X))  # (without a squared copy of the data)
        size = size[size > 0]
        if size.size and (size.max() > 10 or size.min() < 0.1):
            return (f"likely cause: the features are used as read, of magnitudes (root mean square) from "
                    f"{size.min():.3g} to {size.max():.3g} (--standardize scales and centres them)")
    steps = run.metrics.get("steps")
    if steps is not None and steps < 1000:
        return f"the fit may be too short ({steps} steps: --epochs), or the features say little about the target"
    return "the features may say little about the target"


def _fit_prepared(
    prepared: Prepared,
    *,
    method: str | None = None,
    hyper: dict | None = None,
    hidden=(),
    activation: str = "relu",
    noise_precision: float | str = 1.0,
    batch_size: int | None = None,
    epochs: int | None = None,
    iterations: int | None = None,
    seed: int = 0,
    prior_precision: float | str = 1.0,
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
    map_jobs: Callable | None = None,
) -> Run:
    """Fit a posterior to prepared data (:func:`prepare`, :func:`load_training`) and score it; returns the
    :class:`Run` to be written.

    ``method`` None is :func:`default_method`: ``slang`` for a linear model and a regression network, ``ivon`` for
    a classification network. ``hyper`` holds the method's hyperparameters by name
    (``slangcli.methods.METHODS[method].Hyper``); the others take the method's defaults, and a name the method does
    not have is a ConfigError. Step methods train for ``epochs`` (default 200) or ``iterations`` steps on
    minibatches of ``batch_size`` (default 32); the exact solvers use the whole training set at once and refuse
    these three (and checkpoints). ``snr_every`` steps
    (methods with ``std_gradients``: ``bbb``, ``ktied``) the gradient SNR of the standard-deviation parameters is
    recorded in the history from ``snr_draws`` independent gradient draws (``slangcli.train.gradient_snr``).

    ``noise_precision="auto"`` (regression) and ``prior_precision="auto"`` learn them by maximising the ELBO along
    with the posterior (``slangcli.learned``), starting from 1; their trajectories are stored in the history. The
    exact solvers learn the prior precisions by alternating solves and updates. With ``tune``, a learned value is
    where the search starts, and is learned first by a fit on the whole training set.

    ``map_jobs(function, jobs)`` runs the candidate fits of ``tune`` and the fits of ``restarts`` elsewhere (a
    cluster's map; default: here, one after the other), with the same results.
    """
    given, method = method, default_method(hidden, prepared.likelihood) if method is None else method
    module, widths, hyper = _checked(
        method=given, likelihood=prepared.likelihood, hyper=hyper, hidden=hidden, activation=activation,
        noise_precision=noise_precision, batch_size=batch_size, epochs=epochs, iterations=iterations,
        prior_precision=prior_precision, bias_prior_precision=bias_prior_precision, checkpointing=checkpointing, tune=tune, tune_folds=tune_folds,
        tune_epochs=tune_epochs, tune_rounds=tune_rounds, restarts=restarts, snr_every=snr_every,
        snr_draws=snr_draws, eval_samples=eval_samples)
    solver = is_solver(module)
    if not solver:
        batch_size = 32 if batch_size is None else batch_size
    n = len(prepared.X_train)
    sizes = (prepared.X_train.shape[1], *widths, prepared.n_outputs)
    learn_noise = noise_precision == AUTO and prepared.likelihood == "gaussian"
    learn_prior = prior_precision == AUTO
    given = {"noise_precision": noise_precision, "prior_precision": prior_precision}
    noise_precision = 1.0 if noise_precision == AUTO else float(noise_precision)
    prior_precision = 1.0 if prior_precision == AUTO else float(prior_precision)
    model = MLP(sizes, activation=activation, likelihood=prepared.likelihood, noise_precision=noise_precision)
    if learn_noise and not model.is_linear:
        hyper = {**learned.rates_for_learned_noise(module), **hyper}
    hyper_obj = module.Hyper(**hyper)
    hyper_obj, method_note = adapt(module, model, hyper_obj)
    if method_note:
        notify(method_note)
    if hasattr(hyper_obj, "samples"):  # a step's weight samples are held at once
        metrics.check_draws(hyper_obj.samples, model.n_params, f"--samples {hyper_obj.samples}")
    if solver:
        batch = n_steps = None
    else:
        batch = min(batch_size, n)
        if iterations is None:
            epochs = 200 if epochs is None else epochs
        n_steps = iterations if iterations is not None else epochs * streams.steps_per_epoch(n, batch)
    tuned = None
    params = tuning.parse_tune(tune, prepared.likelihood, module)
    # the fit's stop request (its signal handler) reaches the fits before the final one too
    stop = checkpointing.stop if checkpointing is not None else None
    if params and (learn_noise or learn_prior):
        # the search starts from the learned values: learn them first, by a fit of the same length on all rows
        first = Setup(method, module, hyper_obj, model,
                      Problem(model, model.prior_precision(prior_precision, bias_prior_precision), n), prepared,
                      {"batch_size": batch}, [], learn_noise, learn_prior)
        learner = first.learner()
        with blas_threads(model.n_params, samples_per_step(hyper_obj), batch):
            state, _ = train.run(module, hyper_obj, learner.problem, prepared.X_train, prepared.y_train, seed=seed,
                                 batch_size=batch, n_steps=n_steps, learner=learner,
                                 after_step=None if stop is None else lambda *_: stop())
        if state.t < n_steps:
            raise Interrupted(0, n_steps, checkpointed=False, hint=tuning.NOT_KEPT,
                              message=f"interrupted at step {state.t} of {n_steps} of the fit that learns the "
                                      "precisions the tuning starts from")
        if learn_noise:
            noise_precision = float(learner.problem.model.noise_precision)
        if learn_prior:
            prior_precision = learned.shared_optimum(learner.problem)
        notify("learned before tuning: " + ", ".join(
            f"{name} {value:.4g}" for name, value, on in (("noise precision", noise_precision, learn_noise),
                                                         ("prior precision", prior_precision, learn_prior)) if on))
        learn_noise = learn_noise and "noise-precision" not in params
        learn_prior = learn_prior and "prior-precision" not in params
    if params:
        def build(values):
            m = MLP(sizes, activation=activation, likelihood=prepared.likelihood,
                    noise_precision=values["noise-precision"])
            return m, m.prior_precision(values["prior-precision"], bias_prior_precision)

        best, tuned = tuning.search(
            tuning.Search(params, tune_folds, tune_epochs, tune_rounds),
            values={"prior-precision": prior_precision, "noise-precision": noise_precision}, build=build,
            method=module, hyper=hyper_obj, X=prepared.X_train, y=prepared.y_train, seed=seed, batch_size=batch,
            epochs=-(-n_steps // streams.steps_per_epoch(n, batch)), notify=notify,
            map_jobs=map_jobs, stop=stop)
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
        # what was asked ("auto" learns) and which of the two were learned in the final fit (slangcli.learned)
        "learned": {"given": given, "noise_precision": learn_noise, "prior_precision": learn_prior},
        "eval_samples": eval_samples,
        "tuning": tuned,
        "restarts": None,  # with restarts > 1: their seeds, training -ELBO and the one kept
        "snr": {"every": snr_every, "draws": snr_draws} if snr_every else None,
        "model": {"sizes": list(model.sizes), "activation": model.activation, "likelihood": model.likelihood,
                  "noise_precision": model.noise_precision},
    }
    setup = Setup(method, module, hyper_obj, model, problem, prepared, config, list(command or []), learn_noise,
                  learn_prior)

    if not solver:
        if restarts > 1:
            return _finish(setup, *train_restarts(setup, restarts, progress, notify, map_jobs))
        return _train(setup, None, None, 0.0, progress, checkpointing)
    started = time.perf_counter()
    # one iteration is O(N D^2) for the full solver: the thread policy of a step of that size
    with blas_threads(model.n_params, model.n_params, n):
        if learn_prior:
            posterior, info, setup.problem, rounds = learned.solve_with_prior(module, problem, prepared.X_train,
                                                                              prepared.y_train, hyper_obj)
            info["history"].update(rounds)
        else:
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
    hyper_obj = stored_hyper(module, config, run_name)
    # options a newer minor format added are ignored here too, as the format promises; the data paths are the
    # absolute ones recorded at fit time (a resume works from any working directory)
    opts = recorded_options(run, _stored_options(run))
    if STDIN in (opts.path, opts.test):
        raise DataError(f"{run_name}: its data were read from standard input, which cannot be read again; fit anew")
    with _urgent(checkpointing, "reading the data"):
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
    flags = config.get("learned") or {}
    setup = Setup(method, module, hyper_obj, run.model, problem, prepared, config, run.command,
                  bool(flags.get("noise_precision")), bool(flags.get("prior_precision")))
    state, history, learner = checkpoints.restore(run, run_name, setup)
    with _naming_magnitude(prepared):
        return _train(setup, state, history, float(run.metrics.get("fit_seconds", 0.0)), progress, checkpointing,
                      learner)


def _train(setup: Setup, state, history, elapsed: float, progress, checkpointing: Checkpointing | None,
           learner: learned.Learner | None = None) -> Run:
    """Train a step method from ``state`` (None: fresh) to the configured last step, writing checkpoints as
    ``checkpointing`` asks, then score it."""
    cfg = setup.config
    learner = learner or setup.learner()
    started = time.perf_counter()
    first_step = 0 if state is None else state.t
    after_step = None if checkpointing is None else checkpoints.writer(checkpointing, setup, learner, elapsed,
                                                                        started)
    stopped = checkpointing is not None and checkpointing.stop()
    if not stopped:
        state, history = train_steps(setup, learner, seed=cfg["seed"], state=state, history=history,
                                     progress=progress, after_step=after_step)
    if stopped or state.t < cfg["n_steps"]:
        step = first_step if state is None else state.t
        raise Interrupted(step, cfg["n_steps"], checkpointed=step > first_step)
    fit_seconds = elapsed + time.perf_counter() - started
    setup.model, setup.problem = learner.problem.model, learner.problem
    with _urgent(checkpointing, "scoring the fitted posterior"):
        return _finish(setup, setup.module.posterior(state), {**history.as_arrays(), **learner.history()},
                       int(state.t), fit_seconds)


def _urgent(checkpointing: Checkpointing | None, what: str):
    """``checkpointing.urgent(what)``: the block has no step to stop after, so a stop request ends it at once."""
    return checkpointing.urgent(what) if checkpointing is not None else contextlib.nullcontext()


def _finish(setup: Setup, posterior, history: dict, steps: int, fit_seconds: float, solver=None) -> Run:
    """Score the fitted posterior and assemble the complete run."""
    p, cfg = setup.prepared, setup.config
    cfg["model"]["noise_precision"] = setup.model.noise_precision  # a learned one as it ended
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
