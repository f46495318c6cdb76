"""The options of a fit, declared once: :class:`FitOptions`.

Every door of a fit takes its options from this declaration: ``slang fit`` and ``slang sweep`` generate their
command-line options from the fields (``slangcli.cli.options.fit_options``), :func:`slangcli.fit` takes them as
keywords (its signature is generated, :func:`signature`), the estimators as parameters (``estimator`` in a field's
metadata names the parameter, None: not one of theirs), and ``slangcli.training.fitting`` validates and applies them. A
field's metadata holds its help text, the checks of its value (:func:`check_value`) and, where the default depends
on the task or the method, the default as applied (:data:`DEFAULT_METHOD`, :data:`STEP_DEFAULTS`,
:data:`NETWORK_RATES`): ``--help`` and the README show those, so they cannot drift from what a fit does.

A method's own hyperparameters (``--rank``, ``--lr``, ...) are declared by the method (``Hyper`` in each
``slangcli.methods`` module) and travel in :attr:`FitOptions.hyper`.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from slangcli.data.sources import DataOptions
from slangcli.declare import AUTO, MAX_SEED, check_value, choices_of, flag_of, option
from slangcli.errors import ConfigError
from slangcli.gaussian.posteriors import MAX_ABS_VALUE
from slangcli.methods import METHODS
from slangcli.methods.base import hyper_names, is_solver, listing, methods_help, option_specs, takers
from slangcli.models import ACTIVATIONS, LIKELIHOODS
from slangcli.predictive.metrics import MAX_SAMPLES


# The method of a fit that names none. A linear model: SLANG, the method of the SLANG paper's logistic-regression
# protocol. A classification network: IVON, which reaches a given test NLL in a fraction of SLANG's time there
# (USPS, MNIST) and sooner than IVON's reference implementation (docs/PEERS.md, section 6). A regression network:
# SLANG, whose posterior width follows the data's curvature: IVON's stays near its initial value within a fit's
# budget, and with the noise precision learned its 200-epoch fit of a Wine Quality-shaped file overfitted (test
# RMSE 0.70 against SLANG's 0.60, 95 % interval coverage 0.87 against 0.96), though on Boston and Concrete its test
# NLL is better at equal time.
DEFAULT_METHOD = {"linear model": "slang", "classification network": "ivon", "regression network": "slang"}

# The length and minibatch of a step method's fit that names neither (the exact solvers take none).
STEP_DEFAULTS = {"batch_size": 32, "epochs": 200}
# ... and the most steps that default length takes: 200 epochs of a large table grow with its rows (5.6 million
# steps, hours, at 1 million rows) long after the posterior has converged. On a 100 000-row table of a teacher
# network (benchmarks/field.py's --sizes tables; scored on 20 000 other rows of the teacher) SLANG's default fit
# after 2 500, 5 000, 10 000 and 20 000 steps has held-out log-likelihood -0.748, -0.745, -0.746 and -0.744. The
# UCI folders' default fits (at most 5 200 steps, concrete) are below the cap and unchanged. --epochs and
# --iterations are taken as given.
DEFAULT_MAX_STEPS = 10_000

# The natural-gradient methods' rates for a regression network that learns its noise precision (``--noise-precision
# auto``, the default) and is not given them: a constant rate (no decay) and a slow precision average. Measured on
# the UCI development folders (120 epochs, M = 10, S = 4, SLANG L = 1, test log-likelihood): with the
# logistic-regression defaults (beta 0.05, decay 0.51) the decayed rates leave the mean and tau far from converged
# (yacht split 0: -2.9); with beta 0.05 without decay, q's precision follows the early, noisy curvature and tau
# falls to the low fixed point where a wide q explains the residuals as noise (boston splits 1-2: -3.9, concrete:
# -5.7, tau 0.02-0.3); beta 0.01 without decay reaches boston -2.48/-2.45, concrete -3.24/-3.23, yacht -0.82, but
# energy -2.16 (tau 20); beta 0.005 reaches energy split 0 -0.93 (tau 230), boston 1 -2.54, concrete 1 -3.20,
# yacht 1 -1.61 (docs/LEARNED.md has the tables).
NETWORK_RATES = {"beta": 0.005, "decay": 0.0}
NETWORK_RATES_WHEN = "a regression network with --noise-precision auto"


def _methods() -> tuple:
    return tuple(METHODS)


def _default_methods() -> str:
    """:data:`DEFAULT_METHOD` in words: ``slang for a linear model or a regression network, ivon for a ...``."""
    kinds: dict = {}
    for kind, method in DEFAULT_METHOD.items():
        kinds.setdefault(method, []).append(kind)
    return ", ".join(f"{method} for a {' or a '.join(k)}" for method, k in kinds.items())


def _method_help() -> str:
    return methods_help(METHODS)


def snr_methods() -> list[str]:
    """The registered methods that take ``--snr`` (those with ``std_gradients``)."""
    return takers(METHODS, "std_gradients")


def _snr_help() -> str:
    return (f"{', '.join(snr_methods())}: record the gradient signal-to-noise ratio of the standard-deviation "
            "parameters of each weight matrix every N steps, in the run's history.")


@dataclass(frozen=True)
class FitOptions:
    """How to fit a posterior to prepared data: the model, the method and its training, the prior and the noise,
    scoring and tuning. Built through :meth:`of`, which checks every value (one ConfigError naming the option)."""

    # (in the order of slang fit --help, which a sweep's run-file names follow)
    standardize: bool = option(True, "Standardise features (and a regression target) with training statistics, "
                               "stored and reapplied by every prediction, for every model; off uses the features "
                               "as given.", kind="switch")
    prior_precision: Any = option(1.0, "Precision lambda of the Gaussian prior on the weights, or auto: learned per "
                                  "weight matrix (empirical Bayes, the ELBO's optimum given the posterior, updated "
                                  "every epoch).", kind="precision", bound=MAX_ABS_VALUE)
    # (a run file holds the prior precisions, and the posterior precisions they bound from below, within
    # [1 / MAX_ABS_VALUE, MAX_ABS_VALUE] (slangcli.runfile.io): a fit must not write what slang cannot read back)
    bias_prior_precision: float = option(1e-5, "Prior precision of the output layer's biases (a linear model's "
                                         "only ones).", kind="positive", bound=MAX_ABS_VALUE)
    # A network's hidden biases have their own: nearly flat, as the output's, a bias whose unit no longer fires
    # for any input has no gradient, its posterior precision decays to the prior's, and at 10^6 rows SLANG's mean
    # step then moves it by hundreds (docs/FIELD.md, "Data size": held-out log-likelihood -0.838 after 10 000
    # steps, -2.60 after 20 000); at 0.1, -0.732 and -0.738. On the UCI folders' training rows 0.1 is as good as
    # 1e-5 (within a standard error on each set), 1 is worse on all four.
    hidden_bias_prior_precision: float = option(0.1, "Prior precision of the hidden layers' biases (networks).",
                                                kind="positive", bound=MAX_ABS_VALUE)
    hidden: tuple = option((), "Hidden-layer widths, e.g. 50 or 400,400 (none: a linear model).", kind="widths")
    activation: str = option("relu", "Activation of the hidden layers.", kind="choice",
                             choices=tuple(sorted(ACTIVATIONS)))
    likelihood: str = option(AUTO, "auto: bernoulli for two label values, categorical for strings or a few "
                             "integers, gaussian (regression) otherwise.", kind="choice",
                             choices=(AUTO, *LIKELIHOODS), estimator=None)
    noise_precision: Any = option(AUTO, "Gaussian likelihood: noise precision tau on the standardised target, or "
                                  "auto: learned along with the posterior (the ELBO's optimum from the expected "
                                  "squared residuals).", kind="precision", bound=MAX_ABS_VALUE)
    # The linear noise model, measured on the UCI folders' training rows (docs/FIELD.md, "Choosing a default"):
    # held-out log-likelihood +0.02, +0.05, +0.06 and +0.26 nats over the constant noise on boston, concrete, energy
    # and yacht, every split better; the hidden one over the linear one +0.035, +0.022, +0.069 and +0.087 on those
    # rows (the seventh round there).
    noise_model: str = option(AUTO, "Gaussian likelihood: constant, one noise precision; linear, a noise precision "
                              "per prediction, log-linear in the standardised features and the network's output, "
                              "fitted to the trained posterior on the training rows; hidden (a network, one "
                              "posterior), the same with the network's last hidden layer as further features; auto: "
                              "hidden for a regression network whose noise precision is learned (not tuned), linear "
                              "for its --members, else constant.",
                              kind="choice", choices=(AUTO, "constant", "linear", "hidden"),
                              applied="hidden (linear with --members) for a regression network with "
                                      "--noise-precision auto (not tuned), "
                                      "else constant")
    method: str | None = option(None, _method_help, kind="choice", choices=_methods, applied=_default_methods())
    batch_size: int | None = option(None, "Minibatch size of the step methods.", kind="count", least=1, short="-M",
                                    applied=str(STEP_DEFAULTS["batch_size"]))
    epochs: int | None = option(None, "Passes over the training data, step methods.", kind="count", least=1,
                                applied=f"{STEP_DEFAULTS['epochs']}, at most {DEFAULT_MAX_STEPS} steps")
    iterations: int | None = option(None, "Number of steps (instead of --epochs), step methods.", kind="count",
                                    least=1, estimator=None)
    seed: int = option(0, "Seed of initialisation, batches and samples.", kind="count", least=0, most=MAX_SEED,
                       estimator="random_state")
    eval_samples: int = option(1000, "Monte-Carlo samples of the final evaluation (where quadrature does not "
                               "apply).", kind="count", least=1, most=MAX_SAMPLES, estimator="predict_samples")
    snr_every: int | None = option(None, _snr_help, kind="count", least=1, flag="--snr", metavar="N",
                                   estimator=None)
    snr_draws: int = option(10, "Independent gradient draws (minibatch and weight noise) per SNR estimate.",
                            kind="count", least=2, estimator=None)
    tune: str | None = option(None, "Choose these by k-fold cross-validated predictive log-likelihood on the "
                              "training data: any of prior-precision, noise-precision, lr, beta (comma-separated); "
                              "the search is stored in the run.", kind="text", metavar="PARAMS", estimator=None)
    tune_folds: int = option(5, "Folds of --tune.", kind="count", least=2, estimator=None)
    tune_epochs: int | None = option(None, "Epochs of each --tune fit.", kind="count", least=1, estimator=None,
                                     applied="the fit's own length")
    restarts: int = option(1, "Fit this many times from different seeds and keep the fit with the lowest training "
                           "-ELBO (step methods, without checkpoints).", kind="count", least=1, estimator=None)
    members: int = option(1, "Fit this many posteriors and keep their equal-weight mixture, which every command "
                          "predicts with (step methods): the first member from --seed, each other from a seed "
                          "derived from --seed and its number; each a whole fit, with its own --restarts.", kind="count", least=1)
    tune_rounds: int | None = option(None, "Score --tune candidates on the first N folds only.", kind="count",
                                     least=1, estimator=None, applied="all")
    # (split conformal prediction, slangcli.predictive.conformal: the held-out rows' scores are stored in the run)
    calibrate: float | None = option(None, "Hold out this fraction of the training rows (drawn from --seed), fit on "
                                     "the rest, and store the held-out rows' split-conformal scores: predict then "
                                     "also writes intervals (regression) or prediction sets (classification) with "
                                     "guaranteed coverage, and evaluate reports their coverage.", kind="fraction",
                                     metavar="F")
    hyper: dict = option(None, "The method's own hyperparameters by name (rank, samples, lr, ...).", kind="hyper",
                         estimator="method_params")

    def __post_init__(self):
        if self.hyper is None:
            object.__setattr__(self, "hyper", {})

    # ------------------------------------------------------------------ building and checking
    @classmethod
    def of(cls, hyper: dict | None = None, **values) -> "FitOptions":
        """The options from keywords: the fields by name (None: the declared default for the ones whose default is
        not None), a method's hyperparameters in ``hyper`` or as further keywords. Every value is checked here,
        once (:meth:`check`); a keyword that is neither is a ConfigError."""
        names = field_names()
        hyper = dict(hyper or {})
        known = {n for m in METHODS.values() for n in hyper_names(m)}
        own = {}
        for name, value in values.items():
            if name == "tune" and isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
                value = ",".join(value)  # (Python's natural form of the comma-separated list)
            if name in names:
                own[name] = value
            elif name in known:
                hyper[name] = value
            else:
                raise ConfigError(f"unknown option {name!r} (the options of a fit: {', '.join(names)}; and the "
                                  f"methods' own: {', '.join(sorted(known))})")
        for f in fields(cls):
            if own.get(f.name, 0) is None and f.default is not None:
                del own[f.name]
        options = cls(hyper=hyper, **own)
        options.check()
        return options

    def check(self) -> None:
        """Refuse an invalid value or combination (one ConfigError naming the option). A network without a method
        whose likelihood the data will decide (``auto``) must have options that suit one of the methods it may get
        by default; :meth:`for_likelihood` checks them again for the one it gets."""
        for f in fields(self):
            check_value(f, getattr(self, f.name))
        object.__setattr__(self, "hidden", parse_hidden(self.hidden))
        if self.method is not None or default_method(self.hidden, self.likelihood) is not None:
            self._check_method()
            return
        first = None
        # a regression's own option first: what else is wrong with it is said for the likelihood it needs, not that
        # a classification cannot take it
        regression = self.noise_model in ("linear", "hidden")
        for likelihood in ("gaussian", "bernoulli") if regression else ("bernoulli", "gaussian"):
            try:
                return replace(self, likelihood=likelihood)._check_method()
            except ConfigError as exc:
                first = first or exc
        raise first

    def unused(self, likelihood: str) -> list[str]:
        """What is said of the options given a value this fit of a ``likelihood`` does not use (they were taken
        and recorded in the run without a word): one note each."""
        applies = {"tune_folds": ("--tune", self.tune is not None), "tune_epochs": ("--tune", self.tune is not None),
                   "tune_rounds": ("--tune", self.tune is not None), "snr_draws": ("--snr", self.snr_every is not None),
                   "activation": ("a network (--hidden)", bool(self.hidden)),
                   "hidden_bias_prior_precision": ("a network (--hidden)", bool(self.hidden)),
                   "noise_precision": ("a regression (a gaussian likelihood)", likelihood == "gaussian")}
        notes = []
        for f in fields(self):
            if f.name in applies and not applies[f.name][1] and getattr(self, f.name) != f.default:
                value = getattr(self, f.name)
                shown = f"{value:g}" if isinstance(value, float) else value
                notes.append(f"{flag_of(f)} {shown} not used: it applies to {applies[f.name][0]}")
        return notes

    def for_likelihood(self, likelihood: str) -> "FitOptions":
        """These options for data whose likelihood is ``likelihood`` (the data's choice for ``auto``), checked
        again for the method the fit then gets."""
        options = replace(self, likelihood=likelihood)
        options._check_method()
        return options

    @property
    def resolved_method(self) -> str | None:
        """The method the fit runs: the given one, or the task's default (None while a network's likelihood is
        unknown)."""
        return self.method if self.method is not None else default_method(self.hidden, self.likelihood)

    @property
    def resolved_noise_model(self) -> str:
        """The fit's noise model (:meth:`noise_model_for` its likelihood)."""
        return self.noise_model_for(self.likelihood)

    def noise_model_for(self, likelihood: str) -> str:
        """The noise model of a fit of data whose likelihood is ``likelihood``: the given one, or for ``auto``
        hidden for a regression network whose noise precision is learned, else constant (a noise precision chosen
        by ``--tune`` is not learned: the search chose one constant, which predictions then use)."""
        if self.noise_model != AUTO:
            return self.noise_model
        tuned = "noise-precision" in [name.strip() for name in (self.tune or "").split(",")]
        learned = likelihood == "gaussian" and self.noise_precision == AUTO and not tuned
        if not (learned and parse_hidden(self.hidden)):
            return "constant"
        # a mixture's members share one noise model, and one member's hidden unit j is not another's: linear
        return "hidden" if self.members == 1 else "linear"

    def _check_method(self) -> None:
        if self.noise_model in ("linear", "hidden") and self.likelihood not in (AUTO, "gaussian"):
            raise ConfigError(f"--noise-model {self.noise_model} needs a regression (a gaussian likelihood), not "
                              f"{self.likelihood}")
        if self.noise_model == "hidden" and self.members > 1:
            raise ConfigError("--noise-model hidden reads one posterior's hidden layer; the members of --members "
                              f"{self.members} share one noise model, which is linear (--noise-model linear)")
        if self.noise_model == "hidden" and not parse_hidden(self.hidden):
            raise ConfigError("--noise-model hidden needs a network: give --hidden (or --noise-model linear for a "
                              "linear model)")
        method = self.resolved_method
        module = METHODS[method]
        solver = is_solver(module)
        if solver:
            for name in ("batch_size", "epochs", "iterations"):
                if getattr(self, name) is not None:
                    raise ConfigError(f"{flag(name)} does not apply to --method {method}: it is solved on the "
                                      "whole training set, not trained in steps")
        if self.epochs is not None and self.iterations is not None:
            raise ConfigError("give either --epochs or --iterations, not both")
        if self.snr_every is not None and method not in snr_methods():
            raise ConfigError(f"--snr does not apply to --method {method} (it applies to {listing(snr_methods())})")
        names = hyper_names(module)
        unknown = [name for name in self.hyper if name not in names]
        if unknown:
            message = (f"{flag(unknown[0])} does not apply to --method {method} (its options: "
                       f"{', '.join(flag(n) for n in names)})")
            takers = [name for name, m in METHODS.items() if set(self.hyper) <= set(hyper_names(m))]
            if self.method is None and takers:
                message += (f"; {method} is the default method of a {model_kind(self.hidden, self.likelihood)}: "
                            f"give --method {takers[0]} for {flag(unknown[0])}")
            raise ConfigError(message)
        module.Hyper(**self.hyper)  # the method's own checks, before any data are read
        if self.tune and solver:
            raise ConfigError(f"--tune applies to the step methods, not to --method {method}")
        if self.restarts > 1 and solver:
            raise ConfigError(f"--restarts applies to the step methods, not to --method {method}: it is solved "
                              "deterministically, so every restart would be the same posterior")
        if self.members > 1 and solver:
            raise ConfigError(f"--members applies to the step methods: --method {method} is solved "
                              "deterministically, so every member would be the same posterior")
        if self.tune_rounds is not None and not self.tune_rounds <= self.tune_folds:
            raise ConfigError(f"--tune-rounds must be between 1 and --tune-folds ({self.tune_folds}), got "
                              f"{self.tune_rounds}")

    # ------------------------------------------------------------------ defaults as applied
    def step_value(self, name: str):
        """``batch_size`` or ``epochs`` as a step method's fit applies it (:data:`STEP_DEFAULTS` when not given)."""
        value = getattr(self, name)
        return STEP_DEFAULTS[name] if value is None else value

    def method_hyper(self, module, linear: bool) -> dict:
        """The hyperparameters the method gets: the given ones over the task's defaults (:data:`NETWORK_RATES`
        for a regression network that learns its noise precision), the method's own defaults for the rest."""
        if not linear and self.noise_precision == AUTO and self.likelihood == "gaussian":
            return {**network_rates(module), **self.hyper}
        return dict(self.hyper)


def command_line() -> list:
    """``slang fit``'s declared options in the command's order: the data options (``DataOptions``' fields), then
    the fit's (``FitOptions``' fields) with the registered methods' hyperparameters
    (``slangcli.methods.base.OptionSpec``) after ``method``. ``slang fit`` and a sweep's grid are made from it."""
    out = [f for f in fields(DataOptions) if f.metadata]
    for f in fields(FitOptions):
        if f.name == "hyper":
            continue
        out.append(f)
        if f.name == "method":
            out += option_specs(METHODS)
    return out


def is_data_option(item) -> bool:
    """Whether an item of :func:`command_line` is a data option (a field of ``DataOptions``)."""
    return any(item is f for f in fields(DataOptions))


def network_rates(module) -> dict:
    """:data:`NETWORK_RATES` for the methods that take them (the natural-gradient ones)."""
    names = set(hyper_names(module))
    return {k: v for k, v in NETWORK_RATES.items() if k in names}


def field_names() -> tuple[str, ...]:
    return tuple(f.name for f in fields(FitOptions))


def flag(name: str) -> str:
    """The command-line option of a field or a hyperparameter: ``init_precision -> --init-precision``."""
    for f in fields(FitOptions):
        if f.name == name:
            return flag_of(f)
    return "--" + name.replace("_", "-")


def parse_hidden(hidden) -> tuple[int, ...]:
    """Hidden-layer widths from ``"400,400"``, ``50`` or a sequence of whole numbers >= 1."""
    if hidden is None or hidden == "" or hidden == ():
        return ()
    if isinstance(hidden, (int, np.integer)) and not isinstance(hidden, bool):
        hidden = (hidden,)
    if isinstance(hidden, str):
        try:
            # every part is a width: "50," is a typo, not a network with an empty last layer
            widths = tuple(int(h) for h in hidden.split(","))
        except ValueError:
            raise ConfigError(f"--hidden takes comma-separated layer widths like 400,400, got {hidden!r}") from None
    else:
        try:
            widths = tuple(_width(h) for h in hidden)
        except (TypeError, ValueError):
            raise ConfigError(f"--hidden takes whole-number layer widths like (400, 400), got {hidden!r}") from None
    if any(w < 1 for w in widths):
        raise ConfigError(f"--hidden widths must be >= 1, got {hidden!r}")
    return widths


def _width(h) -> int:
    if isinstance(h, bool) or not isinstance(h, (int, np.integer)):
        raise TypeError(h)
    return int(h)


def model_kind(hidden, likelihood: str | None) -> str | None:
    """The key of :data:`DEFAULT_METHOD` for the network ``hidden`` (no hidden layer: a linear model) and
    ``likelihood``; None for a network whose likelihood is not known yet (``auto`` before the data are read)."""
    if not parse_hidden(hidden):
        return "linear model"
    if likelihood == "gaussian":
        return "regression network"
    return "classification network" if likelihood in ("bernoulli", "categorical") else None


def default_method(hidden, likelihood: str | None = AUTO) -> str | None:
    """The method of a fit that names none (:data:`DEFAULT_METHOD`); None while a network's likelihood is unknown."""
    kind = model_kind(hidden, likelihood)
    return None if kind is None else DEFAULT_METHOD[kind]


# ---------------------------------------------------------------------- the doors
def signature(before: list[inspect.Parameter], after: list[inspect.Parameter]) -> inspect.Signature:
    """The signature of :func:`slangcli.fit`: ``before``, every field as a keyword-only parameter with its declared
    default, ``after``, then ``**hyper``."""
    own = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default)
           for f in fields(FitOptions) if f.name != "hyper"]
    return inspect.Signature([*before, *own, *after, inspect.Parameter("hyper", inspect.Parameter.VAR_KEYWORD)])


def estimator_fields(likelihood: str) -> list:
    """The fields an estimator of ``likelihood`` takes as parameters (``noise_precision`` and ``noise_model`` only
    a regressor),
    as ``(parameter name, field)``."""
    out = []
    for f in fields(FitOptions):
        name = f.metadata["estimator"]
        if name is None or (f.name in ("noise_precision", "noise_model") and likelihood != "gaussian"):
            continue
        out.append((name or f.name, f))
    return out


def keyword_names(estimator: bool = False) -> dict:
    """The command-line flag of every declared option (:func:`command_line`: ``--snr``, ``--no-standardize``,
    ``--rank``) with the Python name that sets it: the keyword of ``slangcli.fit``, or with ``estimator`` the
    estimators' parameter (a method's hyperparameter as a key of ``method_params``)."""
    taken = {f.name: name for name, f in estimator_fields("gaussian")}
    names = {}
    for item in command_line():
        if not hasattr(item, "metadata"):  # a method's hyperparameter (slangcli.methods.base.OptionSpec)
            names[item.flag] = f"method_params['{item.name}']" if estimator else item.name
            continue
        name = taken.get(item.name) if estimator else item.name
        if name is None:
            continue
        names[flag_of(item)] = name
        if item.metadata["kind"] == "switch":
            names["--no-" + flag_of(item)[2:]] = f"{name}=False"
    return names


def python_names(message: str, estimator: bool = False) -> str:
    """``message`` (a ConfigError's or DataError's, written for ``slang fit``) with each declared flag written as
    the Python name that sets it (:func:`keyword_names`), and a flag with one of its choices as the keyword with its
    value (``--missing drop``: ``missing='drop'``), for a message raised to a caller of ``slangcli.fit`` or an
    estimator. Text in quotes (a cell, a column's name) is left as it is."""
    names = keyword_names(estimator)
    choices = {flag_of(f): choices_of(f) if f.metadata["kind"] == "choice" else (AUTO,) for f in command_line()
               if hasattr(f, "metadata") and f.metadata["kind"] in ("choice", "precision")}

    def rename(match) -> str:
        flag, value = match.group(1), match.group(2)
        if flag not in names:
            return match.group(0)
        if value and value.strip() in choices.get(flag, ()):
            return f"{names[flag]}={value.strip()!r}"
        return names[flag] + (value or "")

    return re.sub(r"(?<![\w'\"-])(--[a-z][a-z0-9-]*)( [a-z][a-z0-9-]*)?", rename, message)


def estimator_default(f):
    """An estimator parameter's default: the field's, except ``random_state`` (None, scikit-learn's "not given",
    which is seed 0)."""
    return None if f.name in ("seed", "hyper") else f.default


def shown_default(f) -> str | None:
    """The default a reader should see: the one applied (:func:`option`'s ``applied``), else the declared one."""
    if f.metadata["applied"]:
        return f.metadata["applied"]
    if f.default is None or f.default == ():
        return None
    if isinstance(f.default, bool):
        return "on" if f.default else "off"
    return f"{f.default:g}" if isinstance(f.default, float) else str(f.default)


