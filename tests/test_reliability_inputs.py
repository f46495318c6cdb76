"""Issue 24's input and run-file cases that need no subprocess: columns by name, numeric header names, compress on a
checkpoint, resume from another directory, seeds and NaN ranges, a NaN stored hyperparameter."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from slangcli.cli import main
from slangcli.runfile.io import read_run

FAST = ["--epochs", "2", "--no-progress"]


def invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in result.stderr
    return result


def after_first():
    """A stop request that is false when the fit starts and true after its first step (a checkpoint is written)."""
    calls = []
    return lambda: calls.append(1) or len(calls) > 1


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        if header:
            w.writerow(header)
        w.writerows(rows)
    return path


@pytest.fixture
def named(tmp_path):
    """Training data f0,f1,y where the label depends on f0 only (swapping the columns changes predictions)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(80, 2))
    y = (X[:, 0] > 0).astype(int)
    write_csv(tmp_path / "train.csv", ["f0", "f1", "y"], [[f"{a:.5f}", f"{b:.5f}", t] for (a, b), t in zip(X, y)])
    done = invoke("fit", tmp_path / "train.csv", "-o", tmp_path / "run.h5", "--epochs", "20", "--no-progress")
    assert done.exit_code == 0, done.stderr
    return tmp_path, X, y


# ------------------------------------------------------------------------------------------- item 1: columns by name


def test_predict_and_evaluate_match_columns_by_name(named):
    d, X, y = named
    write_csv(d / "swapped.csv", ["f1", "f0", "y"], [[f"{b:.5f}", f"{a:.5f}", t] for (a, b), t in zip(X, y)])
    for name in ("train.csv", "swapped.csv"):
        assert invoke("predict", d / "run.h5", d / name, "-o", d / f"p-{name}").exit_code == 0
    assert (d / "p-train.csv").read_text() == (d / "p-swapped.csv").read_text()
    scores = [json.loads(invoke("evaluate", d / "run.h5", d / name, "--json").stdout)["metrics"]["test"]
              for name in ("train.csv", "swapped.csv")]
    assert scores[0] == scores[1]
    # features only, in another order
    write_csv(d / "features.csv", ["f1", "f0"], [[f"{b:.5f}", f"{a:.5f}"] for a, b in X])
    assert invoke("predict", d / "run.h5", d / "features.csv", "-o", d / "p-f.csv").exit_code == 0
    first = [row[:3] for row in csv.reader(open(d / "p-f.csv"))]
    assert first == [row[:3] for row in csv.reader(open(d / "p-train.csv"))]


def test_different_column_names_are_refused_naming_them(named):
    d, X, y = named
    write_csv(d / "other.csv", ["f0", "g1", "y"], [[f"{a:.5f}", f"{b:.5f}", t] for (a, b), t in zip(X, y)])
    for command in (["predict", d / "run.h5", d / "other.csv", "-o", d / "p.csv"],
                    ["evaluate", d / "run.h5", d / "other.csv"]):
        result = invoke(*command)
        assert result.exit_code == 1
        assert "'f1'" in result.stderr and "'g1'" in result.stderr and "other.csv" in result.stderr
    assert not (d / "p.csv").exists()


def test_evaluate_without_the_target_column_says_so(named):
    d, X, y = named
    write_csv(d / "features.csv", ["f0", "f1"], [[f"{a:.5f}", f"{b:.5f}"] for a, b in X])
    result = invoke("evaluate", d / "run.h5", d / "features.csv")
    assert result.exit_code == 1 and "target column 'y' is missing" in result.stderr


# -------------------------------------------------------------------------------- item 2: a header named like a number


def test_a_header_name_wins_over_an_index_and_the_choice_is_said(tmp_path):
    rng = np.random.default_rng(4)
    rows = [[f"{v:.4f}" for v in rng.normal(size=3)] + [i % 2, i % 3] for i in range(40)]
    # columns a, b, c, "3" (binary), y (three classes): --target 3 is the column named "3", #3 the fourth
    data = write_csv(tmp_path / "d.csv", ["a", "b", "c", "3", "y"], rows)
    by_name = invoke("fit", data, "-o", tmp_path / "n.h5", *FAST, "--target", "3")
    assert by_name.exit_code == 0, by_name.stderr
    assert "--target 3: the column named '3'" in by_name.stderr
    assert read_run(tmp_path / "n.h5").model.likelihood == "bernoulli"
    by_position = invoke("fit", data, "-o", tmp_path / "p.h5", *FAST, "--target", "#4")
    assert by_position.exit_code == 0, by_position.stderr
    assert "--target #4: the column at 0-based position 4, named 'y'" in by_position.stderr
    assert read_run(tmp_path / "p.h5").model.likelihood == "categorical"
    index = invoke("fit", data, "-o", tmp_path / "i.h5", *FAST, "--target", "2")
    assert "position 2, named 'c'" in index.stderr


# --------------------------------------------------------------------------------- item 3: compress on a checkpoint


def test_compress_refuses_a_checkpoint(named):
    d, _, _ = named
    run = d / "ckpt.h5"
    # a real checkpoint: a fit stopped by its own stop request
    from slangcli.data.sources import DataOptions
    from slangcli.errors import Interrupted
    from slangcli.runfile.io import write_run
    from slangcli.training.checkpoints import Checkpointing
    from slangcli.training.fitting import fit

    stop = Checkpointing(write=lambda r: write_run(run, r), stop=after_first(), every_steps=1)
    with pytest.raises(Interrupted):
        fit(DataOptions(path=str(d / "train.csv")), method="bbb", hidden="4", epochs=5, checkpointing=stop)
    assert read_run(run).status == "checkpoint"
    result = invoke("compress", run, "-k", "1", "-o", d / "c.h5")
    assert result.exit_code == 1 and "checkpoint" in result.stderr and "--resume" in result.stderr
    assert not (d / "c.h5").exists()


# ------------------------------------------------------------------------------ item 5: resume from another directory


def test_resume_from_another_directory(tmp_path, named):
    d, _, _ = named
    from slangcli.data.sources import DataOptions
    from slangcli.errors import Interrupted
    from slangcli.runfile.io import write_run
    from slangcli.training.checkpoints import Checkpointing
    from slangcli.training.fitting import fit

    os.chdir(d)
    try:
        ckpt = Checkpointing(write=lambda r: write_run(d / "ck.h5", r), stop=after_first(), every_steps=1)
        with pytest.raises(Interrupted):
            fit(DataOptions(path="train.csv", test_fraction=0.25), method="bbb", epochs=3, checkpointing=ckpt)
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        os.chdir(elsewhere)
        result = invoke("fit", "--resume", d / "ck.h5", "--no-progress")
    finally:
        os.chdir(d)
    assert result.exit_code == 0, result.stderr
    assert read_run(d / "ck.h5").status == "complete"


# --------------------------------------------------------------------- items 12 and 15: seeds, NaN, stored values


@pytest.mark.parametrize("args", [["--seed", str(2**64)], ["--split-seed", str(2**64), "--test-fraction", "0.2"],
                                  ["--test-fraction", "nan"]])
def test_out_of_range_options_are_usage_errors(named, args):
    d, _, _ = named
    result = invoke("fit", d / "train.csv", "-o", d / "x.h5", *FAST, *args)
    assert result.exit_code == 2 and not (d / "x.h5").exists()


def test_evaluate_and_predict_seed_range(named):
    d, _, _ = named
    assert invoke("evaluate", d / "run.h5", "--seed", str(2**64)).exit_code == 2
    assert invoke("predict", d / "run.h5", d / "train.csv", "-o", d / "p.csv", "--seed", str(2**64)).exit_code == 2


def test_a_nan_stored_hyperparameter_names_the_file_and_field(named):
    d, _, _ = named
    from slangcli.data.sources import DataOptions
    from slangcli.errors import Interrupted
    from slangcli.runfile.io import write_run
    from slangcli.training.checkpoints import Checkpointing
    from slangcli.training.fitting import fit

    ck = d / "ck.h5"
    with pytest.raises(Interrupted):
        fit(DataOptions(path=str(d / "train.csv")), method="bbb", epochs=3,
            checkpointing=Checkpointing(write=lambda r: write_run(ck, r), stop=after_first(), every_steps=1))
    with h5py.File(ck, "r+") as f:
        config = json.loads(f.attrs["config"])
        config["hyper"]["lr"] = float("nan")
        f.attrs["config"] = json.dumps(config)
    result = invoke("fit", "--resume", ck)
    assert result.exit_code == 1, result.stderr
    assert "ck.h5" in result.stderr and "'lr'" in result.stderr and "config" in result.stderr


# ------------------------------------------------------------------------ a file name holding a newline or an escape


@pytest.mark.parametrize("name", ["tr\nain.csv", "tr\x1b[31main.csv"], ids=["newline", "terminal escape"])
def test_a_file_name_with_a_newline_stays_on_one_line(tmp_path, name):
    """Every message names paths as the user gave them, escaped where they are printed (the command line's one
    place for messages), so a name with a newline neither breaks the line nor a terminal escape colours it."""
    shown = name.replace("\n", "\\n").replace("\x1b", "\\x1b")
    data = tmp_path / name
    data.write_text("a,b,y\n1,x,0\n3,4,1\n")
    write_csv(tmp_path / "train.csv", ["a", "b", "y"], [[1, 2, 0], [3, 4, 1]])
    cases = [  # (arguments, exit code, what the one line says)
        (["fit", data, "-o", tmp_path / "r.h5"], 1, f"{shown}:2: column 1 ('b'): cannot parse 'x' as a number"),
        (["fit", tmp_path / "train.csv", "--test", data, "-o", tmp_path / "r.h5", *FAST], 1,
         f"{shown}:2: column 1 ('b'): cannot parse 'x' as a number"),
        (["evaluate", tmp_path / ("ru" + name)], 1, f"ru{shown}: no such file"),
        (["fit", data, "-o", data], 2, f"{shown} is an input file; refusing to overwrite it"),
    ]
    for args, code, says in cases:
        result = invoke(*args)
        assert result.exit_code == code, result.stderr
        lines = [line for line in result.stderr.splitlines() if "rror" in line]
        assert len(lines) == 1 and says in lines[0], result.stderr
        assert "\x1b" not in result.stderr and not any(line.startswith("ain.csv") for line in
                                                      result.stderr.splitlines()), result.stderr


# ------------------------------------------------------------------------------------ data of extreme magnitude


def scaled_csv(path, power, *, regression=False):
    """binary_problem's 60 rows with the features (or, ``regression``, a numeric target) written at the magnitude
    10**power: the same digits with another exponent."""
    from conftest import WEIGHTS, binary_problem

    X, labels = binary_problem(n=60, seed=11)
    e = f"e{power}"
    if regression:
        rows = [[f"{v:.6f}" for v in x] + [f"{x @ WEIGHTS:.6f}{e}"] for x in X]
    else:
        rows = [[f"{v:.6f}{e}" for v in x] + ["yes" if t else "no"] for x, t in zip(X, labels)]
    return write_csv(path, ["a", "b", "c", "y"], rows)


def error_lines(result):
    """The error lines of a command's stderr, which must hold no NumPy warning."""
    assert "Warning" not in result.stderr, result.stderr
    return [line for line in result.stderr.splitlines() if line.startswith("slang: error: ")]


@pytest.mark.parametrize("power", [300, -300])
def test_standardised_features_of_extreme_magnitude_fit_as_any_others(tmp_path, power):
    """Standardised, features near 1e300 (whose squares overflowed: an infinite scale was stored, every feature
    standardised to 0, and evaluate refused the file) or 1e-300 (whose squares underflowed: a zero scale, and the
    fit diverged) fit as the same digits near 1 do."""
    fits = {}
    for p in (power, 0):
        data, out = scaled_csv(tmp_path / f"d{p}.csv", p), tmp_path / f"r{p}.h5"
        result = invoke("fit", data, "-o", out, "--standardize", "--test-fraction", "0.25", "--epochs", "10",
                        "--no-progress")
        assert result.exit_code == 0, result.stderr
        fits[p] = read_run(out)
        assert invoke("evaluate", out).exit_code == 0
        assert invoke("predict", out, data, "-o", tmp_path / f"p{p}.csv").exit_code == 0
    scaled, plain = fits[power], fits[0]
    np.testing.assert_allclose(scaled.arrays["feature_scale"], plain.arrays["feature_scale"] * 10.0**power,
                               rtol=1e-12)
    assert abs(scaled.metrics["test"]["nll"] - plain.metrics["test"]["nll"]) < 1e-6
    assert scaled.metrics["test"]["accuracy"] >= 0.8 and plain.metrics["test"]["accuracy"] >= 0.8
    # column 0 is the row, 2 the second class's probability
    predicted = [np.loadtxt(tmp_path / f"p{p}.csv", delimiter=",", skiprows=1, usecols=2) for p in (power, 0)]
    np.testing.assert_allclose(predicted[0], predicted[1], rtol=0, atol=1e-9)


@pytest.mark.parametrize("args", [[], ["--method", "exact-full"], ["--method", "exact-mf"], ["--method", "bbb"]],
                         ids=["slang", "exact-full", "exact-mf", "bbb"])
def test_raw_features_beyond_1e150_are_refused_before_fitting(tmp_path, args):
    """Used as read, features near 1e300 overflow every method (SLANG: 'diverged ... try a smaller --lr', the exact
    solvers: a traceback from SciPy's Cholesky factorisation or NumPy's warnings): one line names the feature, its
    magnitude and --standardize."""
    data = scaled_csv(tmp_path / "train.csv", 300)
    result = invoke("fit", data, "-o", tmp_path / "r.h5", "--no-progress", "--no-standardize", *args)
    assert result.exit_code == 1, result.stderr
    assert len(error_lines(result)) == 1, result.stderr
    assert re.search(r"^slang: error: \S*train\.csv: feature '[abc]' reaches \d\.\d+e\+300 in magnitude, beyond "
                     r"1e\+150: too large to compute with as read; --standardize scales the features$",
                     error_lines(result)[0]), result.stderr
    assert not (tmp_path / "r.h5").exists()


@pytest.mark.parametrize("power,args,says", [
    (100, [], "training diverged at step 1"),
    (20, ["--method", "exact-full"], "exact-full did not converge"),
    (20, ["--method", "exact-mf"], "exact-mf did not converge"),
], ids=["slang", "exact-full", "exact-mf"])
def test_a_raw_fit_that_fails_names_the_features_magnitude(tmp_path, power, args, says):
    """A fit of raw features of a large magnitude that diverges or does not converge names that magnitude and
    --standardize, not only a smaller --lr or a larger --max-iter, which would not help."""
    data = scaled_csv(tmp_path / "train.csv", power)
    result = invoke("fit", data, "-o", tmp_path / "r.h5", "--no-progress", "--no-standardize", *args)
    assert result.exit_code == 1, result.stderr
    [line] = error_lines(result)
    assert says in line, line
    assert re.search(rf"; the features are used as read and reach \d\.\d+e\+{power} in magnitude \(feature "
                     r"'[abc]'\), the likely cause: --standardize scales them$", line), line


def test_raw_features_below_1e_150_get_a_warning(tmp_path):
    """Used as read, features near 1e-300 cannot move the model (the fit scored at chance, without a word)."""
    data = scaled_csv(tmp_path / "train.csv", -300)
    result = invoke("fit", data, "-o", tmp_path / "r.h5", "--no-progress", "--no-standardize", *FAST)
    assert result.exit_code == 0, result.stderr
    assert re.search(r"^slang: warning: features 'a', 'b', 'c' are at most \d\.\d+e-300 in magnitude: used as "
                     r"read, no weight within 1e\+150 lets them move the model; --standardize scales the features$",
                     result.stderr, flags=re.M), result.stderr
    standardised = invoke("fit", data, "-o", tmp_path / "s.h5", "--no-progress", "--standardize", *FAST)
    assert standardised.exit_code == 0 and "warning" not in standardised.stderr, standardised.stderr


@pytest.mark.parametrize("power", [300, -300])
def test_a_regression_target_of_extreme_magnitude_fits(tmp_path, power):
    """A target near 1e-300 that varies was called constant (its variance underflowed), one near 1e300 got an
    infinite scale; both fit as the same digits near 1 do, in their own units."""
    fits = {}
    for p in (power, 0):
        data, out = scaled_csv(tmp_path / f"d{p}.csv", p, regression=True), tmp_path / f"r{p}.h5"
        result = invoke("fit", data, "-o", out, "--likelihood", "gaussian", "--test-fraction", "0.25",
                        "--epochs", "10", "--no-progress")
        assert result.exit_code == 0, result.stderr
        fits[p] = read_run(out)
        assert invoke("evaluate", out).exit_code == 0
        assert invoke("predict", out, data, "-o", tmp_path / f"p{p}.csv").exit_code == 0
    scaled, plain = fits[power], fits[0]
    np.testing.assert_allclose(scaled.arrays["target_scale"], plain.arrays["target_scale"] * 10.0**power, rtol=1e-12)
    np.testing.assert_allclose(scaled.metrics["test"]["rmse"], plain.metrics["test"]["rmse"] * 10.0**power,
                               rtol=1e-6)
    # column 0 is the row, 1 the predictive mean
    predicted = [np.loadtxt(tmp_path / f"p{p}.csv", delimiter=",", skiprows=1, usecols=1) for p in (power, 0)]
    np.testing.assert_allclose(predicted[0], predicted[1] * 10.0**power, rtol=1e-6, atol=0)


@pytest.mark.parametrize("power", [300, -300])
def test_the_metrics_table_shows_scores_of_extreme_magnitude(tmp_path, power):
    """An RMSE near 1e300 was printed with four decimals as three hundred digits cut off with an ellipsis, one
    near 1e-300 as 0.0000: both are shown with four significant digits."""
    data, out = scaled_csv(tmp_path / "d.csv", power, regression=True), tmp_path / "r.h5"
    assert invoke("fit", data, "-o", out, "--likelihood", "gaussian", "--test-fraction", "0.25", *FAST).exit_code == 0
    result = invoke("evaluate", out)
    assert result.exit_code == 0, result.stderr
    assert re.search(rf"│ RMSE +│ \d\.\d{{3}}e{'[+]' if power > 0 else '-'}(29\d|30\d) │", result.stderr), result.stderr
    assert "…" not in result.stderr and not re.search(r"│ +-?0\.0000 │", result.stderr), result.stderr


# -------------------------------------------------------------------- item 6: signals during --tune, two SIGTERMs


ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")


def _started(args, cwd):
    return subprocess.Popen([sys.executable, "-m", "slangcli", *map(str, args)], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV)


def test_two_sigterms_exit_143_with_a_checkpoint(named):
    d, _, _ = named
    out = d / "two.h5"
    proc = _started(["fit", d / "train.csv", "-o", out, "--epochs", "3000", "--hidden", "8", "--method", "bbb",
                     "--checkpoint-every", "50", "--no-progress"], d)
    deadline = time.monotonic() + 120
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "Traceback" not in err and "slang fit --resume" in err
    assert read_run(out).status == "checkpoint"
    assert not any(p.name.endswith(".tmp") for p in d.iterdir())
