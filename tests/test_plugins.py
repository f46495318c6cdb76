"""A new step method is one module and one registry line: the test-only toy method (``tests/toy_method.py``),
registered here, trains, checkpoints, resumes and appears in ``slang fit --help`` (with its description), in
``slangcli.fit`` and the estimators, and takes ``--snr`` through its ``std_gradients``, with no change to slang.
Slang reads a method's parts in one place, ``slangcli.methods.base``."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import slangcli
import toy_method
from conftest import binary_problem, csv_text
from slangcli import SLANGClassifier
from slangcli.cli import main
from slangcli.data.sources import DataOptions
from slangcli.errors import ConfigError, Interrupted
from slangcli.methods import METHODS, register
from slangcli.methods.base import PARTS
from slangcli.runfile.io import read_run, write_run
from slangcli.training.checkpoints import Checkpointing
from slangcli.training.fitting import fit
from slangcli.training.options import FitOptions
from test_checkpoint import assert_resume_equals_uninterrupted_fit


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(METHODS, "toy", toy_method)  # the one registry line
    return "toy"


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text(csv_text(*binary_problem(n=48, seed=5)))
    return path


def test_the_toy_method_and_its_options_appear_in_fit_help(toy):
    shown = CliRunner().invoke(main, ["fit", "--help"]).stdout
    assert "toy" in shown and "--toy-sigma" in shown
    words = " ".join(shown.split())
    assert "The toy's fixed posterior standard deviation. [toy: 0.1]" in words
    # --method lists it with its description, --snr among the methods that take it
    assert "ivon: IVON (mean-field natural gradient); exact-full:" in words
    assert f"; toy: {toy_method.description}. [default:" in words
    assert "--snr N bbb, ktied, toy: record the gradient signal" in words


def test_the_toy_method_takes_snr_and_the_messages_say_so(toy):
    X, y = binary_problem(n=40, seed=1)
    result = slangcli.fit(X, y, method="toy", hidden=2, batch_size=8, epochs=2, snr_every=2, snr_draws=3)
    assert result.history["snr_step"].tolist() == [2, 4, 6, 8, 10] and result.history["snr"].shape == (5, 2)
    with pytest.raises(ConfigError, match=r"--snr does not apply to --method slang \(it applies to bbb, ktied and "
                                          r"toy\)"):
        FitOptions.of(method="slang", snr_every=5)


def test_the_toy_method_resumes_as_every_registered_step_method_does(toy, data, tmp_path):
    for stop_after in (7, 16):  # mid-epoch, at an epoch's end
        assert_resume_equals_uninterrupted_fit(tmp_path, data, "toy", {"toy_sigma": 0.05}, stop_after)


def test_the_estimators_fit_the_toy_method_and_its_run_file_is_read_back(toy, tmp_path):
    X, y = binary_problem(n=40, seed=2)
    clf = SLANGClassifier(method="toy", hidden=(2,), epochs=2, method_params={"toy_sigma": 0.2}).fit(X, y)
    assert clf.result_.config["method"] == "toy" and clf.predict_proba(X).shape == (40, 2)
    clf.result_.save(tmp_path / "toy.h5")
    loaded = slangcli.load(tmp_path / "toy.h5")
    assert loaded.config["hyper"]["toy_sigma"] == 0.2
    np.testing.assert_array_equal(loaded.posterior.mean, clf.result_.posterior.mean)
    shown = CliRunner().invoke(main, ["inspect", str(tmp_path / "toy.h5")])
    assert shown.exit_code == 0 and "toy_sigma" in shown.stderr, shown.output


def test_the_toy_method_trains_checkpoints_and_resumes_bit_for_bit(toy, data, tmp_path):
    runner = CliRunner()
    common = ["--method", "toy", "--hidden", "3", "--epochs", "4", "--batch-size", "8", "--toy-sigma", "0.05",
              "--no-progress"]
    whole = tmp_path / "whole.h5"
    done = runner.invoke(main, ["fit", str(data), "-o", str(whole), *common])
    assert done.exit_code == 0, done.output
    run = read_run(whole)
    assert run.config["method"] == "toy" and run.config["hyper"]["toy_sigma"] == 0.05
    np.testing.assert_allclose(run.posterior.log_sigma, np.log(0.05))
    assert np.isfinite(run.metrics["train"]["neg_elbo_per_example"])

    # stop after 10 of 24 steps through the checkpoint machinery, then resume from the file
    written, polls = [], []
    with pytest.raises(Interrupted):
        fit(DataOptions(path=str(data)), method="toy", hyper={"toy_sigma": 0.05}, hidden=(3,), epochs=4,
            batch_size=8, checkpointing=Checkpointing(write=written.append, every_steps=5,
                                                      stop=lambda: polls.append(1) or len(polls) > 10))
    part = tmp_path / "part.h5"
    write_run(part, written[-1])
    assert read_run(part).status == "checkpoint"
    done = runner.invoke(main, ["fit", "--resume", str(part), "--no-progress"])
    assert done.exit_code == 0, done.output
    resumed = read_run(part)
    assert np.array_equal(resumed.posterior.mean, run.posterior.mean)
    assert np.array_equal(resumed.history["nll"], run.history["nll"])


def test_the_toy_method_is_reachable_from_python_and_refuses_foreign_options(toy):
    X, y = binary_problem(n=40, seed=1)
    result = slangcli.fit(X, y, method="toy", hidden=2, epochs=2, toy_sigma=0.2)
    assert result.config["method"] == "toy"
    with pytest.raises(ValueError, match="^rank does not apply to method='toy'"):
        slangcli.fit(X, y, method="toy", rank=3)


def test_register_refuses_a_taken_name_and_a_module_without_hyper():
    with pytest.raises(ValueError, match="already registered"):
        register("slang", toy_method)
    with pytest.raises(TypeError, match="Hyper"):
        register("nothing", object())


def test_a_methods_parts_are_read_only_through_the_protocol():
    """No module but ``slangcli.methods.base`` looks up a part of a method by name (``getattr(method,
    "adapt", None)``, ``hasattr(module, "std_gradients")``): every consumer reads them through
    ``base.describe``, so a part's default is declared once, in ``base.Method``."""
    package = Path(slangcli.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        if path == package / "methods" / "base.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant) and node.args[1].value in PARTS):
                found.append(f"{path.relative_to(package)}:{node.lineno} {node.func.id}(..., {node.args[1].value!r})")
    assert not found, found
