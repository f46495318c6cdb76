"""Fitting a posterior to prepared data with the options of ``slangcli.training.options.FitOptions``: the model and problem, tuning, the training of a step
method or the solve of a solver, resuming a checkpoint, and the final scores of the run.

Step methods train in ``slangcli.training.loop.run`` from a ``slangcli.training.plan.Plan``; checkpoints store the
method's state (``slangcli.training.checkpoints``: :class:`Checkpointing` says when and how); a resumed fit equals, bit
for bit, the fit that was never stopped, because every random stream is derived from the seed and the step. ``restarts >
1`` fits from several seeds and keeps the lowest training -ELBO (``slangcli.training.restarts``); ``members > 1``
trains that many posteriors from the one plan, each from its own seed, and keeps their equal-weight mixture
(``slangcli.training.members``, which also trains the single posterior of every other step fit).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, replace
from typing import Callable

import numpy as np

from slangcli import streams
from slangcli.data import task
from slangcli.data.prepare import Prepared
from slangcli.data.readers import STDIN, data_read_once
from slangcli.data.sources import (DataOptions, _is_uci, _stored_options, check_file_options, load_training,
                                   recorded_files)
from slangcli.errors import ConfigError, ConvergenceError, DataError, DivergenceError, FormatError, Interrupted
from slangcli.gaussian.posteriors import MAX_ABS_VALUE
from slangcli.methods import METHODS
from slangcli.methods.base import Problem, adapt, is_solver, samples_per_step
from slangcli.models import MLP
from slangcli.predictive import conformal
from slangcli.predictive import metrics
from slangcli.predictive.evaluation import score
from slangcli.runfile.checks import recorded_options, stored_hyper
from slangcli.runfile.io import Run
from slangcli.runfile.provenance import meta, resume_record, version_change
from slangcli.threads import blas_threads
from slangcli.training import checkpoints
from slangcli.training import learned
from slangcli.training import loop as train
from slangcli.training import tuning
from slangcli.training.checkpoints import Checkpointing
from slangcli.training.options import AUTO, DEFAULT_MAX_STEPS, FitOptions, default_method, model_kind
from slangcli.training import members
from slangcli.training.members import train_members, train_one
from slangcli.training.plan import Outcome, Plan


def fit(opts: DataOptions, options: FitOptions | None = None, *, notify: Callable[[str], None] = lambda msg: None,
        command: list | None = None, progress: Callable[[int, int], None] | None = None,
        checkpointing: Checkpointing | None = None, map_jobs: Callable | None = None, **keywords) -> Run:
    """Fit a posterior to the data files in ``opts`` and score it; returns the :class:`Run` to be written.

    ``options`` (or, instead, their ``keywords``: :meth:`FitOptions.of`) are checked before any data are read; the
    other arguments are those of :func:`fit_prepared`. A Gal-layout UCI folder is the regression benchmark: its
    target is Gaussian unless the options' likelihood says otherwise (the wine folder's integer quality would
    otherwise be read as six classes). The features are standardised as ``options.standardize`` says.
    """
    options = options if options is not None else FitOptions.of(**keywords)
    _check_running(options, checkpointing)
    check_file_options(opts)
    if options.likelihood == AUTO and _is_uci(opts):
        options = options.for_likelihood("gaussian")
    if opts.standardize is not None and bool(opts.standardize) != bool(options.standardize):
        raise ConfigError(f"the data options say standardize={opts.standardize}, the fit's options "
                          f"standardize={options.standardize}: give it once, as a fit option")
    opts = replace(opts, standardize=bool(options.standardize))
    with _urgent(checkpointing, "reading the data"):
        prepared = load_training(opts, likelihood=options.likelihood, notify=notify, calibrate=_held_out(options))
    if opts.test_fraction is None and opts.split_seed != DataOptions.split_seed:  # (taken, recorded, not used)
        notify(f"--split-seed {opts.split_seed} not used: it seeds the split of --test-fraction")
    sizes = (prepared.X_train.shape[1], *options.hidden, prepared.n_outputs)
    for line in task.describe(prepared.data, prepared.arrays, prepared.likelihood, sizes[0],
                              MLP(sizes, likelihood=prepared.likelihood).n_params):
        notify(line)
    if options.method is None and options.hidden:  # a network's method depends on its task: say so
        notify(f"method: {default_method(options.hidden, prepared.likelihood)}, the default for a "
               f"{model_kind(options.hidden, prepared.likelihood)} (--method chooses another)")
    if options.likelihood == AUTO and prepared.data["train"].get("format") != "idx":
        hint = task.integer_target_hint(prepared.data["targets"].get("classes"), prepared.data["train"].get("target"))
        hint = hint or task.whole_number_regression_hint(prepared.whole_targets, prepared.data["train"].get("target"))
        if hint:
            notify(hint)
        classes = prepared.data["targets"].get("classes")
        for warning in [*task.decimal_commas((), classes), *task.one_level_per_row((), len(prepared.y_train), classes)]:
            notify(f"{opts.path}: {warning}")
    return fit_prepared(prepared, options, notify=notify, command=command, progress=progress,
                        checkpointing=checkpointing, map_jobs=map_jobs)


def _held_out(options) -> tuple[float, int] | None:
    """``load_training``'s ``calibrate`` for a fit's options (a ``FitOptions`` or a run's config): ``(fraction,
    seed)``, or None without ``--calibrate``."""
    get = options.get if isinstance(options, dict) else lambda name: getattr(options, name)
    return None if get("calibrate") is None else (get("calibrate"), get("seed"))


def _check_running(options: FitOptions, checkpointing: Checkpointing | None) -> None:
    if options.restarts > 1 and checkpointing is not None:
        raise ConfigError("--restarts applies to step methods fitted without checkpoints")


def fit_prepared(prepared: Prepared, options: FitOptions | None = None, *,
                 notify: Callable[[str], None] = lambda msg: None, command: list | None = None,
                 progress: Callable[[int, int], None] | None = None, checkpointing: Checkpointing | None = None,
                 map_jobs: Callable | None = None, **keywords) -> Run:
    """Fit a posterior to prepared data and score it (:func:`_fit_prepared`); ``options``, or instead their
    ``keywords`` (:meth:`FitOptions.of`), say how. A fit whose test predictive is far worse than a constant
    predictor's, or barely better, says so through ``notify`` (the constant predictor's scores are stored in
    ``run.metrics["constant"]``).

    Features used as read (not standardised) are checked for their magnitude first: beyond ``MAX_ABS_VALUE`` they
    are refused (:func:`check_magnitude`), a feature below ``1 / MAX_ABS_VALUE`` gets a warning
    (``task.tiny_features``), and a fit that then diverges or does not converge names a large magnitude as the
    likely cause (``task.magnitude_note``)."""
    if not prepared.data.get("standardize"):
        check_magnitude(prepared)
        for warning in task.tiny_features(prepared.X_train, prepared.data.get("feature_names", ())):
            notify(warning)
    options = options if options is not None else FitOptions.of(**keywords)
    if (options.calibrate is None) != (prepared.X_calibration is None):
        raise ConfigError("--calibrate holds out rows as the data are prepared (load_training's or prepare's "
                          "calibrate): the prepared data and the options must agree")
    if prepared.X_calibration is not None:
        held, kept = len(prepared.X_calibration), len(prepared.X_train)
        notify(f"--calibrate {options.calibrate:g}: {held} of {held + kept} training rows held out to calibrate the "
               f"intervals (split conformal); the fit trains on the other {kept}")
        short = conformal.too_few(held, prepared.likelihood)
        if short:
            notify(f"warning: {short} (a larger --calibrate, or more rows, gives finite ones)")
    checked = options.for_likelihood(prepared.likelihood)
    for line in options.unused(prepared.likelihood):  # (once the options are known to go together: an error alone)
        notify(line)
    with _naming_magnitude(prepared):
        run = _fit_prepared(prepared, checked, notify=notify,
                            command=command, progress=progress, checkpointing=checkpointing, map_jobs=map_jobs)
    return _against_constant(prepared, run, notify)


def _against_constant(prepared: Prepared, run: Run, notify: Callable[[str], None]) -> Run:
    """The run with the constant predictor's test scores (``metrics["constant"]``), saying through ``notify`` when
    the fit is far worse than that predictor or barely better (on the test rows, else on its own training rows):
    every finished fit, fresh or resumed."""
    baseline, warning = constant_scores(prepared), None
    if baseline:
        run.metrics["constant"] = baseline
        warning = far_worse(run.metrics.get("test"), baseline, prepared, run) or barely_better(
            run.metrics.get("test"), baseline, prepared, run, "on the test rows")
        if warning:
            notify(warning)
    elif len(prepared.y_train) and run.posterior is not None:
        warning = barely_better(*_in_sample_scores(prepared, run), prepared, run,
                                f"even on {min(len(prepared.y_train), IN_SAMPLE_ROWS)} of its own training rows")
        if warning:
            notify(warning)
    if not warning:  # (a poor fit's warning names this cause itself: _noise_too_precise)
        stalled = _stalled_by_the_noise(prepared, run)
        if stalled:
            notify(f"warning: {stalled}")
    return run


def _stalled_by_the_noise(prepared: Prepared, run: Run) -> str | None:
    """The warning for a step method's regression fit with a fixed noise precision whose posterior mean leaves
    residuals far above that noise on its own training rows, although the fit beats a constant predictor: the
    steps of SLANG and the empirical-Fisher methods shrink as the squared residuals times the noise precision grow,
    so at a noise precision the data support the fit stalls short of the posterior (a linear target at the true
    noise precision 12.9: the posterior mean shrunk to a fifth, its standard deviations a third of the exact
    posterior's, with nothing said). None otherwise."""
    if (prepared.likelihood != "gaussian" or run.posterior is None or run.status != "complete"
            or run.config.get("learned", {}).get("noise_precision") or run.posterior.kind == "mixture"
            or run.config.get("method") not in METHODS or is_solver(METHODS[run.config["method"]])
            or not len(prepared.y_train)):
        return None
    rows = _in_sample_rows(prepared)
    f = run.model.forward(run.posterior.mean[None], prepared.X_train[rows])[0][0, :, 0]
    scale = float(prepared.arrays["target_scale"][0]) if "target_scale" in prepared.arrays else 1.0
    rmse = scale * float(np.sqrt(np.mean((prepared.y_train[rows] - f) ** 2)))
    return _noise_mismatch(prepared, run, rmse, f"the posterior mean's residuals on {len(rows)} training rows have "
                           "an RMSE of", "stalls short of the posterior")


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


def far_worse(test: dict | None, baseline: dict, prepared: Prepared | None = None,
               run: Run | None = None) -> str | None:
    """The warning for test scores far worse than the constant predictor's, or None; it names the likely cause
    when the prepared data and the run show one (:func:`_named_cause`)."""
    if not test:
        return None
    named = _named_cause(prepared, run, test) if prepared is not None and run is not None else None
    hint = named or (
        "check the features' scales (--standardize), the likelihood, the --noise-precision and the "
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


def _in_sample_rows(prepared: Prepared) -> np.ndarray:
    """Up to ``IN_SAMPLE_ROWS`` training rows, evenly spread, that the checks of a fit on its own rows score."""
    n = len(prepared.y_train)
    return np.unique(np.linspace(0, n - 1, min(n, IN_SAMPLE_ROWS)).astype(np.int64))


def _in_sample_scores(prepared: Prepared, run: Run) -> tuple[dict, dict]:
    """The predictive's scores and the constant predictor's on up to ``IN_SAMPLE_ROWS`` training rows."""
    rows = _in_sample_rows(prepared)
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
    verdict = "barely better than" if gain >= 0 else "worse than"
    return (f"warning: the fit is {verdict} a constant predictor {where} ({scores}); "
            f"{_likely_cause(prepared, run, test)}")


# a fixed noise precision is named as the likely cause of a poor regression fit when the residuals' mean square is
# more than this many times the noise variance it claims
NOISE_MISMATCH = 4.0


def _noise_too_precise(prepared: Prepared, run: Run, test: dict) -> str | None:
    """The likely cause of a poor regression fit with a fixed noise precision whose noise is far below the fit's
    residuals: the steps of SLANG and of the empirical-Fisher methods shrink as the squared residuals times the
    noise precision grow (their curvature is the squared gradients'), so such a fit barely moves from its start
    (found on a linear target at noise precision 10: an RMSE of 3.9 where the training mean's is 2.0, and 0.29 when
    the noise precision is learned). None otherwise."""
    if "rmse" not in test or prepared.likelihood != "gaussian" or run.config.get("learned", {}).get("noise_precision"):
        return None
    said = _noise_mismatch(prepared, run, test["rmse"], "the residuals' RMSE is", "barely moves")
    return f"likely cause: {said}" if said else None


def _noise_mismatch(prepared: Prepared, run: Run, rmse: float, residuals: str, outcome: str) -> str | None:
    """What is said of a fit whose residuals' ``rmse`` (in the target's units) is more than ``sqrt(NOISE_MISMATCH)``
    times the noise the fixed noise precision claims, or None: ``residuals`` names the RMSE, ``outcome`` what
    became of the fit."""
    scale = float(prepared.arrays["target_scale"][0]) if "target_scale" in prepared.arrays else 1.0
    tau = run.model.noise_precision
    claimed = scale / np.sqrt(tau)  # the noise's standard deviation in the target's units
    if not rmse > np.sqrt(NOISE_MISMATCH) * claimed:
        return None
    return (f"the fixed --noise-precision {tau:g} says the noise's standard deviation is {claimed:.3g}, but "
            f"{residuals} {rmse:.3g}: a fixed noise precision weighs the squared residuals from the first step, while "
            f"they are still large, and the steps shrink until the fit {outcome}, even at the value the data support "
            "(--noise-precision auto learns it as the fit goes)")


# standardised 0/1 features that reach this value (a 1 on fewer than about 1 % of the rows) are named as the likely
# cause of a poor fit; the indicators are looked for on at most INDICATOR_ROWS training rows
SPARSE_PEAK, INDICATOR_ROWS = 10.0, 5000
# columns checked at a time: the check's temporaries are INDICATOR_ROWS x this many (2.5 MB each), not copies of
# the rows
INDICATOR_COLUMNS = 64


def _sparse_indicators(prepared: Prepared) -> str | None:
    """The likely cause of a poor fit of standardised features of which some are sparse 0/1 indicators (LIBSVM's
    a1a: 1.22 nats of test NLL against 0.34 used as read): standardising scales a rare 1 up to tens, and the prior,
    made for features of order 1, then barely holds its weight back. None otherwise."""
    if not prepared.data.get("standardize") or "feature_scale" not in prepared.arrays or not prepared.X_train.size:
        return None
    X = prepared.X_train[:INDICATOR_ROWS]
    scale, mean = prepared.arrays["feature_scale"], prepared.arrays["feature_mean"]
    # in blocks of columns: at 5 000 columns the whole check at once doubled the fit's peak memory
    peak = np.empty(X.shape[1])
    for lo in range(0, X.shape[1], INDICATOR_COLUMNS):
        cols = slice(lo, lo + INDICATOR_COLUMNS)
        raw = X[:, cols] * scale[cols] + mean[cols]
        indicator = np.all((np.abs(raw) < 1e-9) | (np.abs(raw - 1.0) < 1e-9), axis=0)
        peak[cols] = np.where(indicator, np.abs(X[:, cols]).max(axis=0), 0.0)
    sparse = np.flatnonzero(peak > SPARSE_PEAK)
    if not sparse.size:
        return None
    names = prepared.data.get("feature_names", ())
    commas = task.decimal_comma_indicators([task.feature_name(names, int(j)) for j in sparse])
    if commas:  # (the indicators are the levels of numbers read as categories: that is the cause to fix)
        return (f"likely cause: {commas}, numbers with a decimal comma read as categories (see the warnings above: "
                "write them with a decimal point)")
    name = task.feature_name(names, int(sparse[np.argmax(peak[sparse])]))
    return (f"likely cause: {len(sparse)} of the {X.shape[1]} features are 0/1 indicators that are rarely 1, which "
            f"standardising scales up to {peak[sparse].max():.3g} ({name!r}), beyond what the prior holds back "
            "(--no-standardize uses them as read, as LIBSVM files are usually meant)")


def _raw_scales(prepared: Prepared) -> str | None:
    """The likely cause of a poor fit of features used as read far from unit scale, or None."""
    if prepared.data.get("standardize") or not prepared.X_train.size:
        return None
    # far from unit scale, or far from centred (a length of 200 +- 14 mm), raw features make the posterior's
    # directions of very different curvature: few steps of any size fit them
    X = prepared.X_train
    size = np.sqrt(np.einsum("np,np->p", X, X) / len(X))  # (without a squared copy of the data)
    size = size[size > 0]
    if size.size and (size.max() > 10 or size.min() < 0.1):
        return (f"likely cause: the features are used as read, of magnitudes (root mean square) from "
                f"{size.min():.3g} to {size.max():.3g} (--standardize scales and centres them)")
    return None


def _named_cause(prepared: Prepared, run: Run, test: dict) -> str | None:
    """The likely cause of a poor fit, when the data or the options show one: raw features of very different
    scales, a fixed noise precision far too high, or standardised sparse indicators; else None."""
    return _raw_scales(prepared) or _noise_too_precise(prepared, run, test) or _sparse_indicators(prepared)


def _likely_cause(prepared: Prepared, run: Run, test: dict) -> str:
    """What most likely keeps a fit from learning: a cause the data or the options show (:func:`_named_cause`),
    too short a fit, or features that say little about the target."""
    named = _named_cause(prepared, run, test)
    if named:
        return named
    steps = run.metrics.get("steps")
    if steps is not None and steps < 1000:
        length = f"{steps} step{'' if steps == 1 else 's'}"
        return f"the fit may be too short ({length}: --epochs), or the features say little about the target"
    return "the features may say little about the target"


def _fit_prepared(prepared: Prepared, options: FitOptions, *, notify: Callable[[str], None],
                  command: list | None, progress: Callable[[int, int], None] | None,
                  checkpointing: Checkpointing | None, map_jobs: Callable | None) -> Run:
    """Plan the fit of prepared data (:func:`prepare`, :func:`load_training`) with ``options``, checked for the
    data's likelihood (:func:`plan`), train or solve it, and score it; returns the :class:`Run` to be written.

    ``map_jobs(function, jobs)`` runs the candidate fits of ``tune``, the fits of ``restarts`` and the ``members``
    elsewhere (a cluster's map; default: here, one after the other), with the same results.
    """
    _check_running(options, checkpointing)
    # the fit's stop request (its signal handler) reaches the fits before the final one too
    stop = checkpointing.stop if checkpointing is not None else None
    planned = plan(prepared, options, command=command, notify=notify, stop=stop, map_jobs=map_jobs)
    if is_solver(planned.module):
        outcome = _solve(planned)
        if outcome.solver.get("settled") is False:
            rounds = outcome.solver["prior_rounds"]
            notify(f"warning: the learned precisions did not settle in {rounds} rounds of variational EM (a change "
                   f"below {learned.SOLVE_TOL:g}): the posterior is the last round's, for its precisions; a given "
                   "--prior-precision or --noise-precision fixes them")
        return _finish(planned, outcome)
    outcome = train_members(planned, options.members, restarts=options.restarts, progress=progress, notify=notify,
                            checkpointing=checkpointing, map_jobs=map_jobs)
    with _urgent(checkpointing, "scoring the fitted posterior"):
        return _finish(planned, outcome)


def plan(prepared: Prepared, options: FitOptions, *, command: list | None = None,
         notify: Callable[[str], None] = lambda msg: None, stop: Callable[[], bool] | None = None,
         map_jobs: Callable | None = None) -> Plan:
    """What the fit of ``prepared`` with ``options`` trains, and how: built once, before any step.

    A method not given is the task's (:data:`slangcli.training.options.DEFAULT_METHOD`); its hyperparameters are the
    given ones over the task's and the method's defaults (:meth:`FitOptions.method_hyper`). Step methods train for
    ``epochs`` or ``iterations`` steps on minibatches of ``batch_size`` (:data:`slangcli.training.options.STEP_DEFAULTS`
    when not given); the exact solvers use the whole training set at once. Every ``snr_every`` steps (the methods with
    ``std_gradients``, ``slangcli.methods.base.Method``) the gradient SNR of the standard-deviation parameters is
    recorded in the history from ``snr_draws`` independent gradient draws (``slangcli.training.loop.gradient_snr``).

    ``noise_precision="auto"`` (regression) and ``prior_precision="auto"`` learn them by maximising the ELBO along
    with the posterior (``slangcli.training.learned``), starting from 1. With ``tune``, the search (:func:`_tuned`)
    chooses them, and the rates, before the plan is made.
    """
    method = options.resolved_method
    module = METHODS[method]
    n = len(prepared.X_train)
    sizes = (prepared.X_train.shape[1], *options.hidden, prepared.n_outputs)
    learn = {"noise_precision": options.noise_precision == AUTO and prepared.likelihood == "gaussian",
             "prior_precision": options.prior_precision == AUTO}
    values = {"noise-precision": 1.0 if options.noise_precision == AUTO else float(options.noise_precision),
              "prior-precision": 1.0 if options.prior_precision == AUTO else float(options.prior_precision)}
    model = _model(sizes, options, prepared.likelihood, values)
    hyper, method_note = adapt(module, model, module.Hyper(**options.method_hyper(module, model.is_linear)))
    if method_note:
        notify(method_note)
    if hasattr(hyper, "samples"):  # a step's weight samples are held at once
        metrics.check_draws(hyper.samples, model.n_params, f"--samples {hyper.samples}")
    batch, epochs, n_steps = _budget(options, module, n)
    if n_steps is not None and epochs is None and options.iterations is None:
        notify(f"training for {n_steps} steps, {n_steps / streams.steps_per_epoch(n, batch):.4g} epochs of the "
               f"{n} training rows (the default length: {options.step_value('epochs')} epochs, at most "
               f"{DEFAULT_MAX_STEPS} steps; --epochs or --iterations sets it)")
    tuned = None
    params = tuning.parse_tune(options.tune, prepared.likelihood, module) if options.tune else ()
    if params:
        values, hyper, tuned, learn = _tuned(prepared, options, module, hyper, sizes, values, learn, params,
                                             batch, n_steps, notify=notify, stop=stop, map_jobs=map_jobs)
        model = _model(sizes, options, prepared.likelihood, values)
    problem = Problem(model, _prior(model, options, values["prior-precision"]), n)
    config = {
        "method": method,
        "hyper": asdict(hyper),
        "batch_size": batch,
        "epochs": epochs,
        "iterations": options.iterations,
        "n_steps": n_steps,
        "seed": options.seed,
        "prior_precision": values["prior-precision"],
        "bias_prior_precision": options.bias_prior_precision,
        "hidden_bias_prior_precision": options.hidden_bias_prior_precision,
        # what was asked ("auto" learns) and which of the two were learned in the final fit (slangcli.training.learned)
        "learned": {"given": {"noise_precision": options.noise_precision,
                              "prior_precision": options.prior_precision}, **learn},
        "eval_samples": options.eval_samples,
        "tuning": tuned,
        "restarts": None,  # with restarts > 1: their seeds, training -ELBO and the one kept (a list, per member)
        # --members: how many posteriors, and with more than one their training seeds (slangcli.training.members)
        "members": options.members,
        **({"member_seeds": members.member_seeds(options.seed, options.members)} if options.members > 1 else {}),
        "snr": {"every": options.snr_every, "draws": options.snr_draws} if options.snr_every else None,
        "model": {"sizes": list(model.sizes), "activation": model.activation, "likelihood": model.likelihood,
                  "noise_precision": model.noise_precision},
    }
    if options.calibrate is not None:  # (recorded only when given: a fit without it records what it always did)
        config["calibrate"] = options.calibrate
    if options.noise_model_for(prepared.likelihood) != "constant":  # (recorded the same way)
        config["noise_model"] = options.noise_model_for(prepared.likelihood)
    return Plan(method, module, hyper, model, problem, prepared, config, list(command or []),
                learn["noise_precision"], learn["prior_precision"])


def _prior(model: MLP, options: FitOptions, weight: float) -> np.ndarray:
    """The prior precision of each parameter: ``weight`` on the weights, the options' on the biases."""
    return model.prior_precision(weight, options.bias_prior_precision, options.hidden_bias_prior_precision)


def _model(sizes: tuple, options: FitOptions, likelihood: str, values: dict) -> MLP:
    return MLP(sizes, activation=options.activation, likelihood=likelihood, noise_precision=values["noise-precision"])


def _budget(options: FitOptions, module, n: int) -> tuple:
    """``(batch, epochs, n_steps)`` of a step method's fit on ``n`` rows (all None for a solver): ``--iterations``
    steps, else ``--epochs`` passes over the rows in minibatches of ``--batch-size`` (at most ``n``); given
    neither, the default epochs up to :data:`slangcli.training.options.DEFAULT_MAX_STEPS` steps (``epochs`` then
    None: the fit stops within an epoch)."""
    if is_solver(module):
        return None, options.epochs, None
    batch = min(options.step_value("batch_size"), n)
    if options.iterations is not None:
        return batch, options.epochs, options.iterations
    epochs = options.step_value("epochs")
    n_steps = epochs * streams.steps_per_epoch(n, batch)
    if options.epochs is None and n_steps > DEFAULT_MAX_STEPS:
        return batch, None, DEFAULT_MAX_STEPS
    return batch, epochs, n_steps


def _tuned(prepared: Prepared, options: FitOptions, module, hyper, sizes: tuple, values: dict, learn: dict,
           params: list, batch: int, n_steps: int, *, notify, stop, map_jobs):
    """The ``--tune`` search of ``params`` from ``values`` (learned first, by a fit of the same length on every
    training row, where they are learned): ``(values, hyper, the search's record, what the final fit still
    learns)``."""
    if learn["noise_precision"] or learn["prior_precision"]:
        values = _learned_start(prepared, options, module, hyper, sizes, values, learn, batch, n_steps,
                                notify=notify, stop=stop)
        learn = {"noise_precision": learn["noise_precision"] and "noise-precision" not in params,
                 "prior_precision": learn["prior_precision"] and "prior-precision" not in params}

    def build(candidate):
        m = _model(sizes, options, prepared.likelihood, candidate)
        return m, _prior(m, options, candidate["prior-precision"])

    n = len(prepared.X_train)
    best, record = tuning.search(
        tuning.Search(params, options.tune_folds, options.tune_epochs, options.tune_rounds),
        values=values, build=build, method=module, hyper=hyper, X=prepared.X_train, y=prepared.y_train,
        seed=options.seed, batch_size=batch, epochs=-(-n_steps // streams.steps_per_epoch(n, batch)), notify=notify,
        map_jobs=map_jobs, stop=stop)
    # (every digit: the values as printed give the same fit again; :g's six digits gave another posterior)
    notify("tuned " + ", ".join(f"--{p} {float(best[p])!r}" for p in params))
    values = {"prior-precision": best["prior-precision"], "noise-precision": best["noise-precision"]}
    return values, replace(hyper, **{p: best[p] for p in tuning.RATES if p in params}), record, learn


def _learned_start(prepared: Prepared, options: FitOptions, module, hyper, sizes: tuple, values: dict,
                   learn: dict, batch: int, n_steps: int, *, notify, stop) -> dict:
    """The precisions a ``--tune`` search starts from where they are learned: those a fit of the same length on
    every training row ends with."""
    model = _model(sizes, options, prepared.likelihood, values)
    first = Plan(options.resolved_method, module, hyper, model,
                 Problem(model, _prior(model, options, values["prior-precision"]),
                         len(prepared.X_train)), prepared, {"batch_size": batch}, [], learn["noise_precision"],
                 learn["prior_precision"])
    learner = first.learner()
    with blas_threads(model.n_params, samples_per_step(hyper), batch):
        state, _ = train.run(module, hyper, learner.problem, prepared.X_train, prepared.y_train, seed=options.seed,
                             batch_size=batch, n_steps=n_steps, learner=learner,
                             after_step=None if stop is None else lambda *_: stop())
    if state.t < n_steps:
        raise Interrupted(0, n_steps, checkpointed=False, hint=tuning.NOT_KEPT,
                          message=f"interrupted at step {state.t} of {n_steps} of the fit that learns the "
                                  "precisions the tuning starts from")
    values = dict(values)
    if learn["noise_precision"]:
        values["noise-precision"] = float(learner.problem.model.noise_precision)
    if learn["prior_precision"]:
        values["prior-precision"] = learned.shared_optimum(learner.problem)
    notify("learned before tuning: " + ", ".join(
        f"{name} {values[key]:.4g}" for name, key, on in (
            ("noise precision", "noise-precision", learn["noise_precision"]),
            ("prior precision", "prior-precision", learn["prior_precision"])) if on))
    return values


def _solve(planned: Plan) -> Outcome:
    """The solver's posterior of the whole training set (with the prior precisions learned by alternating solves
    and updates where they are)."""
    p, problem = planned.prepared, planned.problem
    started = time.perf_counter()
    # one iteration is O(N D^2) for the full solver: the thread policy of a step of that size
    with blas_threads(problem.model.n_params, problem.model.n_params, len(p.X_train)):
        if planned.learn_prior or planned.learn_noise:
            posterior, info, problem, rounds = learned.solve_em(
                planned.module, problem, p.X_train, p.y_train, planned.hyper, noise=planned.learn_noise,
                prior=planned.learn_prior)
            info["history"].update(rounds)
        else:
            posterior, info = planned.module.solve(problem, p.X_train, p.y_train, planned.hyper)
    return Outcome(posterior, info["history"], info["solver"]["iterations"], time.perf_counter() - started,
                   problem, solver=info["solver"])


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
    if STDIN in (opts.path, opts.test) or data_read_once(run.data):  # (an IDX file records no "-")
        raise DataError(f"{run_name}: its data were read from standard input or a pipe, which cannot be read again; "
                        "fit anew")
    with _urgent(checkpointing, "reading the data"):
        prepared = load_training(opts, likelihood=run.model.likelihood, notify=notify, calibrate=_held_out(config))
    for part in ("train", "test"):
        old, new = run.data.get(part) or {}, prepared.data.get(part) or {}
        now = dict(recorded_files(new))
        changed = [path for path, digest in recorded_files(old) if now.get(path) != digest]
        if old.get("sha256") != new.get("sha256") or changed:
            raise DataError(f"{run_name}: its {part} data {changed[0] if changed else old.get('path', '?')} changed "
                            "since the checkpoint (sha256 differs); cannot resume")
    if prepared.X_train.shape[1] != run.model.sizes[0]:
        raise DataError(f"{run_name}: the training data no longer have {run.model.sizes[0]} feature columns")
    # the provenance as first recorded (including notes such as a widened width)
    prepared = replace(prepared, data=run.data)
    flags = config.get("learned") or {}
    K = config.get("members", 1)
    # a single fit continues from the precisions in force (the run's model and prior); a fit of several members
    # starts every member after the one in progress from the plan's, which its config records
    model, prior = (run.model, run.prior_precision) if K == 1 else _planned_precisions(run, run_name)
    planned = Plan(method, module, hyper_obj, model, Problem(model, prior, len(prepared.X_train)), prepared, config,
                   run.command, bool(flags.get("noise_precision")), bool(flags.get("prior_precision")),
                   resumed=(*run.meta.get("resumed", ()), resume_record(run.meta, run.state["scalars"]["t"],
                                                                      run.state["scalars"].get("member"))))
    if changed := version_change(run.meta):
        notify(f"warning: {run_name} was written by other versions than these ({changed}): the resumed fit may "
               "differ in its last bits from one never stopped; the run records both (/ attribute 'resumed')")
    with _naming_magnitude(prepared):
        if K == 1:
            state, history, learner = checkpoints.restore(run, run_name, planned)
            outcome = train_one(planned, config["seed"], state=state, history=history, learner=learner,
                                elapsed=float(run.metrics.get("fit_seconds", 0.0)), progress=progress,
                                checkpointing=checkpointing)
        else:
            outcome = train_members(planned, K, progress=progress, notify=notify, checkpointing=checkpointing,
                                    resumed=members.restore(run, run_name, planned))
        with _urgent(checkpointing, "scoring the fitted posterior"):
            return _against_constant(prepared, _finish(planned, outcome), notify)


def _planned_precisions(run: Run, run_name: str) -> tuple:
    """The model and prior precisions a checkpointed fit's plan started from (its config's ``model``
    ``noise_precision``, ``prior_precision``, ``bias_prior_precision`` and ``hidden_bias_prior_precision``, as
    :func:`plan` made them; a fit recorded before the hidden biases had their own gave them the output's)."""
    config = run.config
    values = ((config.get("model") or {}).get("noise_precision"), config.get("prior_precision"),
              config.get("bias_prior_precision"),
              config.get("hidden_bias_prior_precision", config.get("bias_prior_precision")))
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < float("inf") for v in values):
        raise FormatError(f"{run_name}: / attribute 'config' lacks the precisions the fit started from "
                          "('model' 'noise_precision', 'prior_precision', 'bias_prior_precision', "
                          "'hidden_bias_prior_precision': positive numbers)")
    model = replace(run.model, noise_precision=float(values[0]))
    return model, model.prior_precision(float(values[1]), float(values[2]), float(values[3]))


def _urgent(checkpointing: Checkpointing | None, what: str):
    """``checkpointing.urgent(what)``: the block has no step to stop after, so a stop request ends it at once."""
    return checkpointing.urgent(what) if checkpointing is not None else contextlib.nullcontext()


def _finish(planned: Plan, outcome: Outcome) -> Run:
    """Score the outcome's posterior and assemble the complete run: the plan's configuration record with what the
    fit ended with (a learned noise precision, the restarts)."""
    p, problem = planned.prepared, outcome.problem
    config = {**planned.config, "model": {**planned.config["model"], "noise_precision": problem.model.noise_precision}}
    model = problem.model
    if config.get("noise_model") in ("linear", "hidden"):
        model = replace(model, noise_weights=learned.fit_noise_model(model, outcome.posterior, p.X_train, p.y_train,
                                                                     config["seed"], config["noise_model"]))
    if outcome.restarts is not None:
        config["restarts"] = outcome.restarts
    target_scale = float(p.arrays["target_scale"][0]) if "target_scale" in p.arrays else 1.0
    target_mean = float(p.arrays["target_mean"][0]) if "target_mean" in p.arrays else 0.0
    calibration = {}
    if p.X_calibration is not None:
        # the held-out rows' scores under the predictive of evaluate and predict (the fit's samples and seed)
        calibration = conformal.record(model, outcome.posterior, p.X_calibration, p.y_calibration,
                                       p.calibration_index, fraction=config["calibrate"], seed=config["seed"],
                                       samples=config.get("eval_samples", 1000), target_mean=target_mean,
                                       target_scale=target_scale)
    scores = score(model, outcome.posterior, problem.prior_precision, X_train=p.X_train, y_train=p.y_train,
                   X_test=p.X_test, y_test=p.y_test, target_scale=target_scale,
                   samples=config.get("eval_samples", 1000), seed=config["seed"], calibration=calibration,
                   target_mean=target_mean)
    scores["fit_seconds"] = outcome.fit_seconds
    scores["steps"] = int(outcome.steps)
    if outcome.members is not None:
        scores["member_seconds"] = outcome.members["fit_seconds"]
    if outcome.solver is not None:
        scores["solver"] = outcome.solver
    return Run(model=model, prior_precision=problem.prior_precision, posterior=outcome.posterior,
               config=config, data=p.data, arrays=p.arrays, history=outcome.history, metrics=scores,
               command=planned.command, meta=meta(planned.resumed), calibration=calibration)
