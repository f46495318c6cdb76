"""One declaration of a fit's options (``slangcli.training.options.FitOptions``): every door takes exactly the declared
options, with the declared defaults, and a fit through each door with no options at all runs with the same settings.

The doors are ``slang fit``, ``slang sweep`` (its grid), ``slangcli.fit`` and the two estimators. The lists below
are written out by hand on purpose: a door that gains, loses or renames an option must change them, and the
declaration with it.
"""

from __future__ import annotations

import inspect
from dataclasses import fields

import numpy as np
import pytest

import slangcli
from slangcli import SLANGClassifier, SLANGRegressor
from slangcli.cli.fit import fit as fit_command
from slangcli.cli.sweep import SWEEP_OWNED, sweep as sweep_command
from slangcli.errors import ConfigError
from slangcli.methods import METHODS
from slangcli.methods.base import hyper_names
from slangcli.training.options import (DEFAULT_METHOD, NETWORK_RATES, STEP_DEFAULTS, FitOptions, estimator_default,
                              estimator_fields, flag, shown_default)

DECLARED = {f.name: f for f in fields(FitOptions)}
# slang fit's options that are not a fit's: how to read the data (DataOptions), where the run goes, how the
# command runs
DATA_OPTIONS = {"data", "format", "uci_split", "target", "delimiter", "header", "drop_columns", "columns",
                "na_values", "missing", "categorical", "n_features", "test", "test_fraction", "split_seed"}
RUNNING_OPTIONS = {"output", "scheduler", "checkpoint_every", "checkpoint_seconds", "resume_path", "progress",
                   "as_json"}
METHOD_OPTIONS = {name for module in METHODS.values() for name in hyper_names(module)}


def _params(command):
    return {p.name: p for p in command.params}


def test_slang_fit_takes_the_declared_options_with_their_defaults():
    params = _params(fit_command)
    own = set(params) - DATA_OPTIONS - RUNNING_OPTIONS - METHOD_OPTIONS
    assert own == set(DECLARED) - {"hyper"}
    assert METHOD_OPTIONS <= set(params)
    for name in own:
        f, param = DECLARED[name], params[name]
        assert param.opts[0] == flag(name)
        default = FitOptions.of(**({} if param.default is None else {name: _parsed(param, param.default)}))
        assert getattr(default, name) == getattr(FitOptions.of(), name), name
        # --help shows the default as applied (a network's method, the step methods' 200 epochs)
        assert shown_default(f) is None or f"[default: {shown_default(f)}]" in param.help, name
    for name in METHOD_OPTIONS:  # "not given": the method's (or the task's) default applies
        assert params[name].default is None


def _parsed(param, value):
    return param.type.convert(value, param, None) if not isinstance(value, bool) else value


def test_the_data_options_of_slang_fit_and_of_a_sweep_are_those_declared_with_their_defaults():
    """slang fit's data options and a sweep's are generated from DataOptions' fields, in their order, with their
    defaults: a fit of a file with none given reads it as DataOptions' defaults say."""
    from slangcli.data.sources import DataOptions
    from slangcli.sweep.grid import parameters

    declared = [f for f in fields(DataOptions) if f.metadata]
    params = _params(fit_command)
    assert [name for name in params if name in DATA_OPTIONS] == ["data"] + [f.name for f in declared]
    GRID = [p for p in parameters().values() if p.part == "data"]
    assert [p.name for p in GRID] == [f.name for f in declared]
    given = {f.name: params[f.name].default for f in declared}
    assert DataOptions.of("x.csv", **given) == DataOptions(path="x.csv")
    for f in declared:
        assert params[f.name].opts[0] == GRID[[p.name for p in GRID].index(f.name)].flag


def test_slang_sweep_varies_every_option_of_slang_fit():
    fit_params, sweep_params = _params(fit_command), _params(sweep_command)
    varied = set(fit_params) - SWEEP_OWNED - {"data"}
    assert varied <= set(sweep_params)
    assert set(DECLARED) - {"hyper"} <= varied


def test_slangcli_fit_takes_the_declared_options_as_keywords():
    parameters = inspect.signature(slangcli.fit).parameters
    assert list(parameters)[:4] == ["X", "y", "X_test", "y_test"]
    own = {name: p for name, p in parameters.items() if name in DECLARED and name != "hyper"}
    assert set(own) == set(DECLARED) - {"hyper"}
    for name, p in own.items():
        assert p.default == DECLARED[name].default and p.kind is inspect.Parameter.KEYWORD_ONLY, name
    assert parameters["hyper"].kind is inspect.Parameter.VAR_KEYWORD
    # the data options that apply to arrays, with slang fit's declared defaults
    from slangcli.data.sources import DataOptions

    assert parameters["missing"].default == DataOptions.__dataclass_fields__["missing"].default == "error"
    assert parameters["categorical"].default is DataOptions.__dataclass_fields__["categorical"].default is None
    assert set(parameters) == {"X", "y", "X_test", "y_test", "missing", "categorical", "progress", "notify", "hyper",
                               *own}


@pytest.mark.parametrize("estimator, likelihood", [(SLANGClassifier, "categorical"), (SLANGRegressor, "gaussian")])
def test_the_estimators_take_the_declared_options_as_parameters(estimator, likelihood):
    expected = {"method": None, "hidden": (), "activation": "relu", "standardize": True, "prior_precision": 1.0,
                "bias_prior_precision": 1e-5, "hidden_bias_prior_precision": 0.1, "batch_size": None, "epochs": None,
                "random_state": None,
                "predict_samples": 1000, "calibrate": None, "members": 1, "method_params": None}
    if likelihood == "gaussian":
        expected["noise_precision"] = "auto"
        expected["noise_model"] = "auto"
    assert estimator().get_params() == expected
    assert {name: estimator_default(f) for name, f in estimator_fields(likelihood)} == expected
    signature = inspect.signature(estimator.__init__)
    assert {n: p.default for n, p in signature.parameters.items() if n != "self"} == expected


def test_an_unknown_keyword_is_refused_at_every_python_door():
    with pytest.raises(ConfigError, match="unknown option 'epoch'"):
        slangcli.fit(np.zeros((4, 1)), [0, 1, 0, 1], epoch=3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'epoch'"):
        SLANGClassifier(epoch=3)


def test_the_defaults_that_depend_on_the_task_are_applied_as_declared():
    """A classification network gets IVON, a linear model and a regression network SLANG; a regression network
    that learns its noise precision gets the natural-gradient methods' network rates, a linear regression the
    method's own; a step method trains 200 epochs of minibatches of 32."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    y = X @ [1.0, -1.0] + rng.normal(0, 0.3, 40)
    labels = (y > 0).astype(int)
    net = slangcli.fit(X, y, hidden=2, iterations=2, eval_samples=4).config
    assert net["method"] == DEFAULT_METHOD["regression network"]
    assert {k: net["hyper"][k] for k in NETWORK_RATES} == NETWORK_RATES
    linear = slangcli.fit(X, y, iterations=2, eval_samples=4).config
    assert linear["method"] == DEFAULT_METHOD["linear model"]
    assert {k: linear["hyper"][k] for k in NETWORK_RATES} == {k: getattr(METHODS["slang"].Hyper(), k)
                                                                   for k in NETWORK_RATES}
    given = slangcli.fit(X, y, hidden=2, iterations=2, eval_samples=4, noise_precision=4.0).config
    assert given["hyper"]["beta"] == METHODS["slang"].Hyper().beta
    classifier = slangcli.fit(X, labels, hidden=2, iterations=2, eval_samples=4).config
    assert classifier["method"] == DEFAULT_METHOD["classification network"]
    short = slangcli.fit(X[:8], labels[:8], epochs=None, eval_samples=4).config
    assert short["batch_size"] == min(STEP_DEFAULTS["batch_size"], 8)
    assert short["epochs"] == STEP_DEFAULTS["epochs"]


@pytest.mark.parametrize("values, says", [
    ({"epochs": 0}, "--epochs must be a whole number >= 1, got 0"),
    ({"seed": -1}, "--seed must be a whole number from 0 to"),
    ({"prior_precision": 0.0}, "--prior-precision must be positive and finite or auto, got 0.0"),
    ({"bias_prior_precision": "auto"}, "--bias-prior-precision must be positive and finite, got 'auto'"),
    ({"noise_precision": "10"}, "--noise-precision must be positive and finite or auto, got '10'"),
    ({"activation": "gelu"}, "unknown activation 'gelu'"),
    ({"method": "sgd"}, "unknown method 'sgd'"),
    ({"hidden": "50,"}, "--hidden takes comma-separated layer widths"),
    ({"hidden": (50, 2.5)}, "--hidden takes whole-number layer widths"),
    ({"snr_every": 5}, "--snr does not apply to --method slang"),
    ({"method": "exact-full", "epochs": 3}, "--epochs does not apply to --method exact-full"),
    ({"epochs": 3, "iterations": 3}, "give either --epochs or --iterations, not both"),
    ({"rank": 3, "method": "ivon"}, "--rank does not apply to --method ivon"),
    ({"tune_rounds": 6}, "--tune-rounds must be between 1 and --tune-folds (5), got 6"),
    ({"standardize": "yes"}, "--standardize must be True or False, got 'yes'"),
    ({"calibrate": 0}, "--calibrate must lie strictly between 0 and 1, got 0"),
    ({"calibrate": 1.5}, "--calibrate must lie strictly between 0 and 1, got 1.5"),
])
def test_each_value_is_checked_once_by_the_declaration(values, says):
    with pytest.raises(ConfigError) as exc:
        FitOptions.of(**values)
    assert str(exc.value).startswith(says)


def test_a_network_whose_likelihood_the_data_decide_is_checked_for_the_methods_it_may_get():
    """--rank suits slang (a regression network's default), not ivon (a classification network's): accepted before
    the data are read, refused once they say the task is a classification."""
    options = FitOptions.of(hidden=3, rank=2)
    assert options.for_likelihood("gaussian").resolved_method == "slang"
    with pytest.raises(ConfigError, match="--rank does not apply to --method ivon.*give --method slang"):
        options.for_likelihood("bernoulli")


class _Planned(Exception):
    pass


def _planned_steps(**options) -> int:
    """The number of steps a fit of 2 000 rows would take, read from its first progress call (the fit stops there)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2000, 2))

    def progress(step, n_steps):
        raise _Planned(n_steps)

    with pytest.raises(_Planned) as planned:
        slangcli.fit(X, X @ [1.0, -1.0], progress=progress, eval_samples=4, **options)
    return planned.value.args[0]


def test_the_default_length_stops_at_the_step_cap_and_given_lengths_are_exact():
    from slangcli.training.options import DEFAULT_MAX_STEPS

    # 2 000 rows in minibatches of 32 are 63 steps an epoch: 200 epochs would be 12 600 steps
    assert 200 * 63 > DEFAULT_MAX_STEPS
    notes = []
    assert _planned_steps(notify=notes.append) == DEFAULT_MAX_STEPS
    assert any(f"at most {DEFAULT_MAX_STEPS} steps" in note for note in notes)
    assert _planned_steps(epochs=200) == 200 * 63
    assert _planned_steps(iterations=12345) == 12345
    assert _planned_steps(batch_size=100) == 200 * 20  # below the cap: the default epochs, as before


def test_tune_takes_a_list_from_python():
    """slangcli.fit(tune=["prior-precision"]) was refused ("--tune takes a text, got ['prior-precision']"), though
    a list is Python's form of the command line's comma-separated one."""
    from slangcli.training.options import FitOptions

    assert FitOptions.of(tune=["prior-precision", "noise-precision"]).tune == "prior-precision,noise-precision"
    assert FitOptions.of(tune=("lr",), method="slang").tune == "lr"


@pytest.mark.filterwarnings("ignore:the fit is worse than a constant predictor")
def test_options_given_a_value_the_fit_does_not_use_are_said_to_be_unused(tmp_path):
    """--tune-folds without --tune, --snr-draws without --snr, --activation on a linear model, --noise-precision on a
    classification, --split-seed without --test-fraction: taken and recorded in the run without a word; now each gets
    a note (from Python too), and options the fit uses, or left at their defaults, none."""
    from click.testing import CliRunner

    from slangcli.cli import main

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = (X[:, 0] > 0).astype(int)
    said = []
    slangcli.fit(X, y, epochs=1, tune_folds=3, snr_draws=4, activation="tanh", noise_precision=2.0,
                 hidden_bias_prior_precision=0.5, notify=said.append)
    assert [line for line in said if "not used" in line] == [
        "--hidden-bias-prior-precision 0.5 not used: it applies to a network (--hidden)",
        "--activation tanh not used: it applies to a network (--hidden)",
        "--noise-precision 2 not used: it applies to a regression (a gaussian likelihood)",
        "--snr-draws 4 not used: it applies to --snr",
        "--tune-folds 3 not used: it applies to --tune"]
    said = []
    slangcli.fit(X, X[:, 0], epochs=1, hidden=3, noise_precision=2.0, activation="tanh", notify=said.append)
    slangcli.fit(X, y, epochs=1, tune_folds=5, notify=said.append)  # (the default: nothing given)
    assert not [line for line in said if "not used" in line], said
    (tmp_path / "d.csv").write_text("a,b,y\n" + "".join(f"{a:.5f},{b:.5f},{t}\n" for (a, b), t in zip(X, y)))
    done = CliRunner().invoke(main, ["fit", str(tmp_path / "d.csv"), "--epochs", "1", "--split-seed", "3", "-o",
                                     str(tmp_path / "r.h5")])
    assert done.exit_code == 0, done.output
    assert "slang: --split-seed 3 not used: it seeds the split of --test-fraction" in done.stderr.splitlines()
    done = CliRunner().invoke(main, ["fit", str(tmp_path / "d.csv"), "--epochs", "1", "--split-seed", "3",
                                     "--test-fraction", "0.25", "-o", str(tmp_path / "r.h5")])
    assert done.exit_code == 0 and "not used" not in done.stderr, done.output
