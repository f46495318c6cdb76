"""The command line with every method: ``slang fit --method ...``, method-specific options, and
``slang evaluate --reference``.

Exit codes as in ``test_cli``: 0 success; 1 (one ``slang: error:`` line) for run files that cannot be compared;
2 for options that do not apply to the chosen method or models an exact solver cannot take.
"""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import message_lines
from slangcli.cli import main
from slangcli.data.sources import DataOptions
from slangcli.errors import ConfigError
from slangcli.gaussian.divergence import kl, symmetric_kl
from slangcli.methods import METHODS
from slangcli.runfile.io import read_run
from slangcli.training.fitting import fit

STEP = ["--epochs", "2", "--batch-size", "8", "--samples", "2"]
KINDS = {"slang": "lowrank", "full-ef": "full", "full-hessian": "full", "mf-ef": "diagonal",
         "mf-hessian": "diagonal", "bbb": "diagonal", "ktied": "ktied", "ivon": "diagonal", "exact-full": "full",
         "exact-mf": "diagonal"}


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def ok_json(*args) -> dict:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def error(result, code: int, *mentions) -> str:
    assert result.exit_code == code, (result.exit_code, result.stderr, result.exception)
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.stderr
    assert result.stdout == ""
    lines = message_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("slang: error: "), result.stderr
    for text in mentions:
        assert text in result.stderr, result.stderr
    return result.stderr


def _fit(train_csv, out, method, *extra):
    step = [] if method.startswith("exact") else STEP
    return ok_json("fit", train_csv, "-o", out, "--test-fraction", "0.25", "--method", method, *step, *extra)


def test_registry_and_cli_cover_the_same_methods():
    assert set(KINDS) == set(METHODS)


@pytest.mark.parametrize("method", list(KINDS))
def test_every_method_fits_and_evaluates(train_csv, out_dir, method):
    """Each method writes its posterior kind; evaluate scores it as the fit did (same quadrature predictive)."""
    out = out_dir / f"{method}.h5"
    summary = _fit(train_csv, out, method)
    run = read_run(out)
    assert run.posterior.kind == KINDS[method] and run.config["method"] == method
    assert set(run.config["hyper"]) == {f.name for f in dataclasses.fields(METHODS[method].Hyper)}
    evaluated = ok_json("evaluate", out)["metrics"]
    for split, name in (("test", "nll"), ("test", "accuracy"), ("train", "neg_elbo_per_example")):
        assert evaluated[split][name] == pytest.approx(summary["metrics"][split][name], rel=1e-12)
    if method.startswith("exact"):
        assert summary["solver"]["converged"] and summary["steps"] == summary["solver"]["iterations"] > 0
        assert run.config["batch_size"] is None and set(run.history) == {"iteration", "neg_elbo_per_example",
                                                                          "seconds"}
        inspected = invoke("inspect", out)
        assert inspected.exit_code == 0 and "solved by L-BFGS" in inspected.stderr


def test_learning_rate_default_is_per_method(train_csv, out_dir):
    """``--lr`` not given: each method's own default (0.05 natural gradient, 0.01 Bayes by Backprop)."""
    assert _fit(train_csv, out_dir / "a.h5", "bbb")["config"]["hyper"]["lr"] == 0.01
    assert _fit(train_csv, out_dir / "b.h5", "mf-ef")["config"]["hyper"]["lr"] == 0.05
    assert _fit(train_csv, out_dir / "c.h5", "bbb", "--lr", "0.003")["config"]["hyper"]["lr"] == 0.003


@pytest.mark.parametrize("method,option", [
    ("bbb", ["--rank", "3"]), ("mf-ef", ["--rank", "0"]), ("full-ef", ["--beta1", "0.5"]),
    ("slang", ["--tol", "1e-6"]), ("exact-full", ["--samples", "4"]), ("exact-mf", ["--lr", "0.1"]),
])
def test_option_that_does_not_apply_is_refused(train_csv, out_dir, method, option):
    result = invoke("fit", train_csv, "-o", out_dir / "run.h5", "--method", method, *option)
    error(result, 2, f"{option[0]} does not apply to --method {method}", "its options: ")
    assert list(out_dir.iterdir()) == []


def test_default_method_is_ivon_for_a_classification_network_and_slang_otherwise(train_csv, out_dir, tmp_path):
    """No --method: IVON for a classification network, SLANG for a linear model and a regression network
    (``fitting.DEFAULT_METHOD``); the run records the method it used. An option of another method is refused
    with the method that takes it, also when the data decide the likelihood (checked again once they are read)."""
    linear = ok_json("fit", train_csv, "-o", out_dir / "a.h5", *STEP)
    network = ok_json("fit", train_csv, "-o", out_dir / "b.h5", "--hidden", "3", *STEP)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((24, 2))
    reg_csv = tmp_path / "reg.csv"
    reg_csv.write_text("a,b,y\n" + "".join(f"{a:.4f},{b:.4f},{a - b:.4f}\n" for a, b in X))
    regression = ok_json("fit", reg_csv, "-o", out_dir / "r.h5", "--hidden", "3", *STEP)
    assert (linear["config"]["method"], read_run(out_dir / "a.h5").posterior.kind) == ("slang", "lowrank")
    assert (network["config"]["method"], read_run(out_dir / "b.h5").posterior.kind) == ("ivon", "diagonal")
    assert (regression["config"]["method"], read_run(out_dir / "r.h5").posterior.kind) == ("slang", "lowrank")
    # the fit says which method it chose, and only when it chose
    said = invoke("fit", train_csv, "-o", out_dir / "d.h5", "--hidden", "3", *STEP).stderr
    assert "method: ivon, the default for a classification network (--method chooses another)" in said
    assert "the default for" not in invoke("fit", train_csv, "-o", out_dir / "e.h5", "--hidden", "3",
                                           "--method", "ivon", *STEP).stderr
    error(invoke("fit", train_csv, "-o", out_dir / "c.h5", "--hidden", "3", "--rank", "2"), 2,
          "--rank does not apply to --method ivon",
          "ivon is the default method of a classification network: give --method slang for --rank")
    error(invoke("fit", reg_csv, "-o", out_dir / "c.h5", "--hidden", "3", "--clip-radius", "2"), 2,
          "slang is the default method of a regression network: give --method ivon for --clip-radius")
    # an option no default method takes is refused before the data are read
    error(invoke("fit", out_dir / "absent.csv", "-o", out_dir / "c.h5", "--hidden", "3", "--init-std", "0.1"), 2,
          "--init-std does not apply")
    assert not (out_dir / "c.h5").exists()
    # named explicitly, the message is the plain one
    assert "default method" not in error(invoke("fit", train_csv, "-o", out_dir / "c.h5", "--hidden", "3",
                                                "--method", "ivon", "--rank", "2"), 2, "--rank does not apply")


@pytest.mark.parametrize("option", [["--epochs", "3"], ["--iterations", "5"], ["--batch-size", "8"]])
def test_exact_methods_refuse_step_options(train_csv, out_dir, option):
    error(invoke("fit", train_csv, "-o", out_dir / "run.h5", "--method", "exact-full", *option), 2,
          f"{option[0]} does not apply to --method exact-full")


def test_exact_methods_refuse_networks(train_csv, out_dir):
    error(invoke("fit", train_csv, "-o", out_dir / "run.h5", "--method", "exact-mf", "--hidden", "3"), 2,
          "logistic and linear regression only")


def test_every_method_can_be_fitted_programmatically(train_csv):
    """``training.fitting.fit`` with each method's hyperparameters by name (the benchmark's route); a name the method
    lacks is a ConfigError there too."""
    opts = DataOptions(path=str(train_csv), test_fraction=0.25)
    for method in METHODS:
        hyper = {"max_iter": 500} if method.startswith("exact") else {"samples": 2}
        kw = {} if method.startswith("exact") else {"epochs": 1, "batch_size": 10}
        run = fit(opts, method=method, hyper=hyper, **kw)
        assert run.posterior.kind == KINDS[method]
    with pytest.raises(ConfigError, match="--rank does not apply"):
        fit(opts, method="bbb", hyper={"rank": 1})


# ---------------------------------------------------------------------------------------------- --reference
@pytest.fixture
def pair(train_csv, out_dir):
    """An mf-ef run and an exact-full run on the same training rows."""
    a, b = out_dir / "mf.h5", out_dir / "exact.h5"
    _fit(train_csv, a, "mf-ef")
    _fit(train_csv, b, "exact-full")
    return a, b


def test_reference_adds_symmetric_and_directed_kl(pair):
    a, b = pair
    result = invoke("evaluate", a, "--reference", b, "--json")
    assert result.exit_code == 0, result.stderr
    ref = json.loads(result.stdout)["metrics"]["reference"]
    p, q = read_run(a).posterior, read_run(b).posterior
    assert ref["kl_run_to_reference"] == pytest.approx(kl(p, q), rel=1e-12)
    assert ref["kl_reference_to_run"] == pytest.approx(kl(q, p), rel=1e-12)
    assert ref["symmetric_kl"] == pytest.approx(symmetric_kl(p, q), rel=1e-12)
    assert ref["symmetric_kl"] > 0 and ref["kl_run_to_reference"] != pytest.approx(ref["kl_reference_to_run"])
    assert ref["method"] == "exact-full" and ref["kind"] == "full" and ref["path"] == str(b)
    plain = invoke("evaluate", a, "--reference", b)
    assert plain.exit_code == 0 and "symmetric KL" in plain.stderr and plain.stdout == ""


def test_reference_to_itself_is_zero(pair):
    a, _ = pair
    ref = ok_json("evaluate", a, "--reference", a)["metrics"]["reference"]
    assert abs(ref["symmetric_kl"]) < 1e-12


def test_reference_on_other_training_data_is_refused(pair, make_csv, out_dir):
    a, _ = pair
    other = out_dir / "other.h5"
    _fit(make_csv("other.csv", seed=5), other, "mf-ef")
    error(invoke("evaluate", a, "--reference", other), 1, f"{other}: not comparable with {a}", "sha256")


def test_reference_on_another_split_is_refused(pair, train_csv, out_dir):
    a, _ = pair
    other = out_dir / "split.h5"
    _fit(train_csv, other, "mf-ef", "--split-seed", "3")
    error(invoke("evaluate", a, "--reference", other), 1, "another split")


def test_reference_with_other_standardisation_is_refused(pair, train_csv, out_dir):
    a, _ = pair
    other = out_dir / "std.h5"
    _fit(train_csv, other, "mf-ef", "--no-standardize")
    error(invoke("evaluate", a, "--reference", other), 1, "standardised in one run only")


def test_reference_of_another_model_is_refused(pair, train_csv, out_dir):
    a, _ = pair
    other = out_dir / "mlp.h5"
    _fit(train_csv, other, "mf-ef", "--hidden", "3")
    error(invoke("evaluate", a, "--reference", other), 1, "different model (layer sizes")


def test_regression_runs_of_other_noise_precisions_are_compared_with_a_note(write_file, out_dir):
    """Two regression runs at their defaults learn their noise precisions, never equal: --reference refused every
    such pair ("different model (noise precision ...)"), though the posteriors are over the same weights."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = X @ np.array([1.0, -1.0]) + 0.3 * rng.normal(size=60)
    data = write_file("reg.csv", "a,b,y\n" + "".join(f"{a:.5f},{b:.5f},{t:.5f}\n" for (a, b), t in zip(X, y)))
    a, b = out_dir / "slang.h5", out_dir / "mf.h5"
    for out, method in ((a, "slang"), (b, "mf-ef")):
        assert invoke("fit", data, "-o", out, "--test-fraction", "0.25", "--method", method, *STEP).exit_code == 0
    result = invoke("evaluate", a, "--reference", b, "--json")
    assert result.exit_code == 0, result.stderr
    assert re.search(r"noise precision [\d.]+ against [\d.]+ in .*slang\.h5: the posteriors are over the same "
                     r"weights under different likelihoods", result.stderr), result.stderr
    assert json.loads(result.stdout)["metrics"]["reference"]["symmetric_kl"] > 0


def test_missing_reference_file(pair, out_dir):
    a, _ = pair
    error(invoke("evaluate", a, "--reference", out_dir / "absent.h5"), 1, "absent.h5", "no such file")


def test_control_runs_differ_in_one_thing_only(pair, train_csv, out_dir):
    """The refusals above are due to the one difference each introduces: the same options give a comparable run."""
    a, _ = pair
    same = out_dir / "same.h5"
    _fit(train_csv, same, "bbb")
    assert np.isfinite(ok_json("evaluate", a, "--reference", same)["metrics"]["reference"]["symmetric_kl"])


def test_every_hyperparameter_has_an_option():
    """Each field of each method's Hyper is a ``slang fit`` option (``init_std -> --init-std``), listed by
    ``--help``."""
    from slangcli.cli.fit import fit

    fields = {f.name for method in METHODS.values() for f in dataclasses.fields(method.Hyper)}
    assert fields <= {option.name for option in fit.params}
    shown = invoke("fit", "--help").stdout
    for name in fields:
        assert "--" + name.replace("_", "-") in shown


def test_a_reference_fitted_to_arrays_is_compared_with_a_note(train_csv, out_dir):
    """A CLI fit and an API fit of the same rows were refused as "fitted to different training data (the training
    files' sha256 differ)": a file is hashed by its bytes, arrays by their values."""
    import slangcli
    from slangcli.data.readers import read_table

    a = out_dir / "file.h5"
    ok_json("fit", train_csv, "-o", a, "--method", "exact-full")
    table = read_table(train_csv)
    b = out_dir / "arrays.h5"
    slangcli.fit(table.X, table.y, method="exact-full").save(b)
    result = invoke("evaluate", a, train_csv, "--reference", b, "--json")
    assert result.exit_code == 0, result.stderr
    assert (f"slang: {b}: one run was fitted to a file and the other to arrays from Python, whose digests cannot be "
            "compared: that they were fitted to the same rows is not checked") in result.stderr.splitlines()
    assert abs(json.loads(result.stdout)["metrics"]["reference"]["symmetric_kl"]) < 1e-9
