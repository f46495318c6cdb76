"""A file of the Wine Quality (red) shape (``;``, quoted header, integer quality 3-8, 1 599 rows; made by
``benchmarks/wine_synthetic.py``): the first fit a new user tries works with every option at its default."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from click.testing import CliRunner

from slangcli.cli import main
from slangcli.runfile.io import read_run

REPO = Path(__file__).resolve().parents[1]


def _make_wine():
    spec = importlib.util.spec_from_file_location("wine_synthetic", REPO / "benchmarks" / "wine_synthetic.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_wine


@pytest.fixture(scope="module")
def wine(tmp_path_factory):
    path = tmp_path_factory.mktemp("wine") / "winequality-red.csv"
    summary = _make_wine()(path, seed=0)
    return path, summary


def test_the_file_has_the_public_file_shape(wine):
    path, summary = wine
    lines = path.read_text().splitlines()
    assert len(lines) == 1600 and lines[0].startswith('"fixed acidity";') and lines[0].endswith(';"quality"')
    assert len(lines[1].split(";")) == 12
    assert set(summary["quality_counts"]) <= set(range(3, 9)) and 0.7 < summary["quality_std"] < 0.9


def _fit(path, out, *extra):
    done = CliRunner().invoke(main, ["fit", str(path), "--target", "quality", "--likelihood", "gaussian",
                                     "--hidden", "50", "--test-fraction", "0.2", "-o", str(out), *extra])
    assert done.exit_code == 0, done.output
    return read_run(out), done.output


def test_short_default_fit_learns_the_noise_and_is_calibrated(wine, tmp_path):
    # the defaults but 20 epochs (the documented command's 200 are in the slow test below)
    run, output = _fit(wine[0], tmp_path / "w.h5", "--epochs", "20")
    test = run.metrics["test"]
    assert run.data["standardize"] and run.config["learned"]["noise_precision"]
    assert test["rmse"] <= 0.72 and 0.88 <= test["coverage"]["0.95"] <= 0.99
    assert "warning" not in output


def test_raw_features_and_fixed_noise_get_a_warning(wine, tmp_path):
    _, output = _fit(wine[0], tmp_path / "w.h5", "--epochs", "2", "--no-standardize", "--noise-precision", "1")
    assert "far worse than a constant predictor" in output


@pytest.mark.slow
def test_documented_command_reaches_the_targets(wine, tmp_path):
    run, _ = _fit(wine[0], tmp_path / "w.h5")
    test = run.metrics["test"]
    assert test["rmse"] <= 0.70 and 0.90 <= test["coverage"]["0.95"] <= 0.99
