"""The Python API (``slangcli.fit`` and ``FitResult``): the README's example as written, the same posterior bit for
bit from the command line and from Python for every method, run files in both directions, and one predictive."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

import slangcli
from slangcli.cli import main
from slangcli.errors import ConfigError, DataError, DataTypeError
from slangcli.estimators import SLANGRegressor
from slangcli.methods import METHODS
from slangcli.methods.base import is_solver
from slangcli.runfile.io import read_run

README = Path(__file__).resolve().parents[1] / "README.md"


def _readme_blocks() -> list[tuple[str, str]]:
    """The fenced blocks of the README's "From Python" section, as ``(language, code)``."""
    text = README.read_text()
    section = text[text.index("## From Python"):]
    section = section[: section.index("\n## ", 3)]
    return re.findall(r"```(\w+)\n(.*?)```", section, flags=re.S)


def test_readme_from_python_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = _readme_blocks()
    assert [lang for lang, _ in blocks][:2] == ["python", "sh"]
    namespace: dict = {}
    with warnings.catch_warnings():
        # the example fits well: a fit worse than the training mean would warn (it once did, at a fixed noise
        # precision of 10)
        warnings.simplefilter("error", UserWarning)
        exec(compile(blocks[0][1], "README From Python", "exec"), namespace)  # noqa: S102 - the README's own code
    score = namespace["result"].score(namespace["X_test"], namespace["y_test"])
    assert score["rmse"] < 0.25 * np.std(namespace["y_test"]) and score["coverage"]["0.9"] >= 0.8
    assert Path("from-python.h5").is_file() and Path("test.csv").is_file()
    for line in blocks[1][1].strip().splitlines():
        args = line.split("#")[0].split()
        assert args[0] == "slang"
        done = subprocess.run([sys.executable, "-m", "slangcli", *args[1:], "--json"], capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stderr
        test = json.loads(done.stdout)["metrics"]["test"]
        # the command scores the saved posterior as Python does
        expected = namespace["result"].score(namespace["X_test"], namespace["y_test"])
        assert test["rmse"] == pytest.approx(expected["rmse"], rel=1e-9)
    if len(blocks) > 2:  # the scikit-learn example, where scikit-learn is installed
        pytest.importorskip("sklearn")
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)
            exec(compile(blocks[2][1], "README scikit-learn", "exec"), namespace)  # noqa: S102
        assert namespace["std"].shape == (5,) and (namespace["std"] > 0).all()


def _data(tmp_path, likelihood):
    """Train and test CSV files with exactly representable numbers, and the same arrays."""
    rng = np.random.default_rng(3)
    X = np.round(rng.normal(size=(60, 3)), 6)
    f = X @ np.array([1.5, -1.0, 0.5])
    y = (f + 0.3 * rng.normal(size=60) > 0).astype(int) if likelihood == "bernoulli" else np.round(f, 6)
    paths = []
    for name, rows in (("train.csv", slice(0, 40)), ("test.csv", slice(40, 60))):
        path = tmp_path / name
        np.savetxt(path, np.column_stack([X[rows], y[rows]]), delimiter=",", header="a,b,c,y", comments="",
                   fmt="%.6f")
        paths.append(path)
    return paths, X[:40], y[:40], X[40:], y[40:]


# tiny settings per method: few steps, small samples
TINY = {"slang": {"rank": 2, "samples": 2}, "bbb": {"samples": 2}, "ktied": {"samples": 2, "rank": 1}}


@pytest.mark.parametrize("method", list(METHODS))
def test_cli_and_api_give_the_same_posterior_bit_for_bit(tmp_path, method):
    """``slang fit`` on files and ``slangcli.fit`` on the same arrays: identical posterior arrays and metrics."""
    (train, test), X, y, X_test, y_test = _data(tmp_path, "bernoulli")
    hyper = TINY.get(method, {})
    hidden = () if method.startswith("exact") else (3,)
    args = ["fit", str(train), "--test", str(test), "--method", method, "-o", str(tmp_path / "cli.h5"),
            "--eval-samples", "20", "--seed", "4"]
    if hidden:
        args += ["--hidden", "3"]
    if not is_solver(METHODS[method]):
        args += ["--epochs", "2", "--batch-size", "8"]
    for name, value in hyper.items():
        args += ["--" + name.replace("_", "-"), str(value)]
    done = CliRunner().invoke(main, args)
    assert done.exit_code == 0, done.output
    cli = read_run(tmp_path / "cli.h5")
    steps = {} if is_solver(METHODS[method]) else {"epochs": 2, "batch_size": 8}
    api = slangcli.fit(X, y, X_test=X_test, y_test=y_test, method=method, hidden=hidden, eval_samples=20, seed=4,
                       **steps, **hyper)
    assert type(api.posterior) is type(cli.posterior)
    for name, value in vars(cli.posterior).items():
        if isinstance(value, np.ndarray):
            assert np.array_equal(getattr(api.posterior, name), value), name
        elif isinstance(value, tuple) and value and isinstance(value[0], np.ndarray):
            assert all(np.array_equal(a, b) for a, b in zip(getattr(api.posterior, name), value)), name
    assert api.metrics["test"] == cli.metrics["test"]
    assert api.config["hyper"] == cli.config["hyper"]


def test_a_command_line_run_loads_and_predicts_in_python(run_file):
    result = slangcli.load(run_file)
    run = read_run(run_file)
    X = np.random.default_rng(0).normal(size=(7, result.n_features))
    pred = result.predict(X, samples=50, seed=2)
    assert pred.probabilities.shape == (7, len(result.classes))
    np.testing.assert_allclose(pred.probabilities.sum(axis=1), 1.0, rtol=1e-12)
    assert set(pred.predicted) <= set(result.classes)
    assert result.posterior.mean.tobytes() == run.posterior.mean.tobytes()
    assert result.sample(5, seed=1).shape == (5, result.model.n_params)
    for n in (2.5, 2.0, "3", True, 0):  # (2.5 gave 2 draws)
        with pytest.raises(ConfigError, match=f"^n must be a positive whole number, got {re.escape(repr(n))}$"):
            result.sample(n)


def test_predict_and_evaluate_give_the_same_predictive(tmp_path):
    """`slang predict` and `slang evaluate` (and the API) draw the same weight samples for the same seed: the
    evaluate NLL is that of predict's probabilities."""
    (train, test), X, y, X_test, y_test = _data(tmp_path, "bernoulli")
    out = tmp_path / "run.h5"
    runner = CliRunner()
    assert runner.invoke(main, ["fit", str(train), "--test", str(test), "--hidden", "3", "--epochs", "3",
                                "-o", str(out)]).exit_code == 0
    done = runner.invoke(main, ["evaluate", str(out), "--samples", "37", "--seed", "5", "--json"])
    nll = json.loads(done.stdout)["metrics"]["test"]["nll"]
    assert runner.invoke(main, ["predict", str(out), str(test), "--samples", "37", "--seed", "5",
                                "-o", str(tmp_path / "p.h5")]).exit_code == 0
    import h5py

    with h5py.File(tmp_path / "p.h5") as f:
        probs = f["probabilities"][()]
    codes = y_test.astype(int)
    assert nll == pytest.approx(-np.mean(np.log(probs[np.arange(len(codes)), codes])), rel=1e-12)
    api_probs = slangcli.load(out).predict_proba(X_test, samples=37, seed=5)
    assert np.array_equal(api_probs, probs)


def test_python_saved_run_is_read_by_every_command(tmp_path):
    (train, test), X, y, X_test, y_test = _data(tmp_path, "gaussian")
    result = slangcli.fit(X, y, likelihood="gaussian", hidden=4, epochs=3, method="bbb", noise_precision=7.5,
                          standardize=True)
    path = tmp_path / "py.h5"
    result.save(path)
    run = read_run(path)
    assert run.model.noise_precision == 7.5  # a non-default noise precision survives the run file
    runner = CliRunner()
    for args in (["evaluate", str(path), str(test), "--samples", "20"],
                 ["predict", str(path), str(test), "-o", str(tmp_path / "p.csv"), "--samples", "20"],
                 ["compress", str(path), "--rank", "1", "-o", str(tmp_path / "k1.h5")],
                 ["inspect", str(path)]):
        done = runner.invoke(main, args)
        assert done.exit_code == 0, (args, done.output)
    done = runner.invoke(main, ["evaluate", str(path)])
    assert done.exit_code == 2 and "pass a data file" in done.output  # (a missing argument: a usage error)


def test_the_same_targets_as_integers_or_floats_are_the_same_training_data(tmp_path):
    """``slangcli.fit(X, y)`` with integer targets and with the same values as floats fits one posterior bit for bit,
    but recorded two sha256, so ``evaluate --reference`` refused the pair as fitted to different data. Float
    targets keep the digest they always had (runs written before compare as they did)."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 2)), rng.integers(0, 5, 40)
    runs = {}
    for name, targets in (("int", y), ("float", y.astype(float))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (a short fit on noise: barely better than the mean, and said so)
            slangcli.fit(X, targets, likelihood="gaussian", epochs=2).save(tmp_path / f"{name}.h5")
        runs[name] = read_run(tmp_path / f"{name}.h5")
    assert runs["int"].data["train"]["sha256"] == runs["float"].data["train"]["sha256"]
    np.testing.assert_array_equal(runs["int"].posterior.mean, runs["float"].posterior.mean)
    assert runs["float"].data["train"]["sha256"] == hashlib.sha256(
        X.tobytes() + y.astype(float).astype(str).tobytes()).hexdigest()
    (tmp_path / "t.csv").write_text("".join(f"{a},{b},{t}\n" for (a, b), t in zip(X, y)))
    done = CliRunner().invoke(main, ["evaluate", str(tmp_path / "int.h5"), str(tmp_path / "t.csv"), "--reference",
                                     str(tmp_path / "float.h5"), "--json"])
    assert done.exit_code == 0 and json.loads(done.stdout)["metrics"]["reference"]["symmetric_kl"] < 1e-12, done.output
    # a run of integer targets written before (its digest of the targets as given) still compares with a new one
    old = tmp_path / "old.h5"
    old.write_bytes((tmp_path / "int.h5").read_bytes())
    with h5py.File(old, "r+") as f:
        provenance = json.loads(f["data"].attrs["provenance"])
        given = hashlib.sha256(X.tobytes() + y.astype(str).tobytes()).hexdigest()
        assert provenance["train"].pop("sha256_as_integers") == [given]
        provenance["train"]["sha256"] = given
        f["data"].attrs["provenance"] = json.dumps(provenance)
    # ... and so do new runs of the same values as floats or as int32
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        slangcli.fit(X, y.astype(np.int32), likelihood="gaussian", epochs=2).save(tmp_path / "int32.h5")
    for new in ("int.h5", "float.h5", "int32.h5"):
        done = CliRunner().invoke(main, ["evaluate", str(tmp_path / new), str(tmp_path / "t.csv"), "--reference",
                                         str(old), "--json"])
        assert done.exit_code == 0, (new, done.output)
    # an old run of int32 targets (its digest of their int32 text) compares with a new one of int32 targets
    old32 = tmp_path / "old32.h5"
    old32.write_bytes((tmp_path / "int32.h5").read_bytes())
    with h5py.File(old32, "r+") as f:
        provenance = json.loads(f["data"].attrs["provenance"])
        given32 = hashlib.sha256(X.tobytes() + y.astype(np.int32).astype(str).tobytes()).hexdigest()
        assert given32 in provenance["train"].pop("sha256_as_integers") and given32 != given
        provenance["train"]["sha256"] = given32
        f["data"].attrs["provenance"] = json.dumps(provenance)
    done = CliRunner().invoke(main, ["evaluate", str(tmp_path / "int32.h5"), str(tmp_path / "t.csv"), "--reference",
                                     str(old32), "--json"])
    assert done.exit_code == 0, done.output


def test_noise_precision_round_trips_through_a_command_line_run_file(tmp_path):
    (train, test), *_ = _data(tmp_path, "gaussian")
    out = tmp_path / "r.h5"
    done = CliRunner().invoke(main, ["fit", str(train), "--likelihood", "gaussian", "--noise-precision", "12.5",
                                     "--epochs", "1", "-o", str(out)])
    assert done.exit_code == 0, done.output
    assert read_run(out).model.noise_precision == 12.5
    assert slangcli.load(out).model.noise_precision == 12.5


def test_dataframe_like_inputs_keep_their_names(tmp_path):
    class Frame:
        """What slang reads of a DataFrame: ``columns`` and ``__array__``."""

        def __init__(self, values, columns):
            self.values, self.columns = values, columns

        def __array__(self, dtype=None, copy=None):
            return np.asarray(self.values, dtype=dtype)

    (_, _), X, y, *_ = _data(tmp_path, "bernoulli")
    result = slangcli.fit(Frame(X, ["height", "width", "depth"]), ["no" if v == 0 else "yes" for v in y],
                          epochs=2, rank=1)
    assert result.feature_names == ["height", "width", "depth"]
    assert result.classes == ["no", "yes"]
    # names are how every prediction takes the features: one given twice is refused
    with pytest.raises(DataError, match=r"^X: the feature name 'width' is given 2 times \(columns 1, 2\)"):
        slangcli.fit(Frame(X, ["height", "width", "width"]), y, epochs=2, rank=1)


def test_a_dataframe_is_read_by_column_name_and_an_array_by_position(tmp_path):
    """A run that knows its features by name (a header row; a DataFrame's string column names) reads a DataFrame's
    columns by name: in another order they give the same predictions, other columns are ignored with a warning
    naming them, a missing one is refused naming it. A plain array is read by position, its width checked."""
    pd = pytest.importorskip("pandas")
    (train, test), X, y, X_test, y_test = _data(tmp_path, "gaussian")
    out = tmp_path / "run.h5"
    done = CliRunner().invoke(main, ["fit", str(train), "--likelihood", "gaussian", "--epochs", "3", "-o", str(out)])
    assert done.exit_code == 0, done.output
    from_file = slangcli.load(out)
    from_frame = slangcli.fit(pd.DataFrame(X, columns=["a", "b", "c"]), pd.Series(y, name="y"),
                              likelihood="gaussian", epochs=3, rank=1)
    frame = pd.DataFrame(X_test, columns=["a", "b", "c"])
    for result in (from_file, from_frame):
        expected = result.predict(X_test, samples=20).mean
        assert np.array_equal(result.predict(frame, samples=20).mean, expected)
        assert np.array_equal(result.predict(frame[["c", "a", "b"]], samples=20).mean, expected)
        assert result.score(frame[["b", "c", "a"]], y_test, samples=20) == result.score(X_test, y_test, samples=20)
        wider = frame.assign(id=np.arange(len(frame)), y=y_test)[["id", "c", "y", "b", "a"]]
        with pytest.warns(UserWarning, match=r"^X: column 'id' ignored: not among the model's features$"):
            assert np.array_equal(result.predict(wider, samples=20).mean, expected)
        with pytest.raises(DataError, match=r"^X: column 'b' is missing \(the model's 3 features are 'a', 'b', "
                                            r"'c'; its other columns: 'B'\)$"):
            result.predict(frame.rename(columns={"b": "B"}))
        with pytest.raises(DataError, match=r"^X: 2 columns, but the model takes 3 features: a, b, c$"):
            result.predict(X_test[:, :2])
    # a run fitted to a plain array knows its features by position only
    unnamed = slangcli.fit(X, y, likelihood="gaussian", epochs=3, rank=1)
    # (and says that the names it is given are not used, as scikit-learn's estimators do)
    with pytest.warns(UserWarning, match=r"^X: the column names are not used: the run knows its features by "
                                         r"position only"):
        assert np.array_equal(unnamed.predict(frame[["c", "a", "b"]], samples=20).mean,
                              unnamed.predict(X_test[:, [2, 0, 1]], samples=20).mean)


@pytest.mark.parametrize("X, message", [
    (np.ones(5), "Reshape your data"),
    (np.array([[1.0, np.nan]] * 4), "NaN"),
    (np.array([[1.0 + 1j, 0]] * 4), "Complex"),
    (np.ones((4, 0)), "0 feature"),
])
def test_bad_arrays_are_value_errors_naming_the_problem(X, message):
    with pytest.raises(ValueError, match=message):
        slangcli.fit(X, [0, 1, 0, 1][: len(X)] if np.ndim(X) == 2 else [0, 1, 0, 1, 0])


def test_unknown_option_of_a_method_is_refused_before_the_data():
    with pytest.raises(ValueError, match="^tol does not apply to method='slang'"):
        slangcli.fit(np.ones((4, 2)), [0, 1, 0, 1], tol=1e-3)
    with pytest.raises(DataError):
        slangcli.fit(np.ones((4, 2)), [0, 1, 0])


@pytest.mark.parametrize("hidden", ["50,", ",50", "50,,20", "a", "0"])
def test_malformed_hidden_widths_are_usage_errors(tmp_path, hidden):
    """``--hidden 50,`` is a typo, not a network with an extra (empty) layer: refused before any data are read."""
    done = CliRunner().invoke(main, ["fit", str(tmp_path / "absent.csv"), "--hidden", hidden, "-o",
                                     str(tmp_path / "r.h5")])
    assert done.exit_code == 2 and "--hidden" in done.output, done.output
    assert not (tmp_path / "r.h5").exists()


def test_hidden_widths_are_parsed_alike_everywhere():
    from slangcli.training.options import parse_hidden

    assert parse_hidden("400,400") == parse_hidden((400, 400)) == parse_hidden(" 400, 400 ") == (400, 400)
    assert parse_hidden("") == parse_hidden(()) == ()


def test_help_shows_the_public_api_before_the_package_contents():
    """``help(slangcli)`` starts with the API (every public name), not with the list of modules."""
    import pydoc

    text = pydoc.render_doc(slangcli, renderer=pydoc.plaintext)
    api, contents = text.split("PACKAGE CONTENTS", 1)
    assert "slangcli.fit(X, y" in api
    for name in ("fit(X, y, **options)", "load(path)", "FitResult", "SLANGClassifier, SLANGRegressor", "METHODS"):
        assert name in api, name
    assert "\n    api\n" in contents  # the modules follow
    # the command of the README's promise, with a plain (non-interactive) pager
    done = subprocess.run([sys.executable, "-c", "import slangcli; help(slangcli)"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert done.stdout.index("slangcli.fit(X, y") < done.stdout.index("PACKAGE CONTENTS")


def test_regression_predict_evaluate_and_the_api_give_the_same_predictive(tmp_path):
    """For a regression, `slang predict`, `slang evaluate` and the API use the same weight samples for the same seed
    and sample count: the same predictive mean and standard deviation, and evaluate's log-likelihood is the mean of
    the per-point mixture log-likelihoods of those samples."""
    import h5py
    import scipy.special

    from slangcli.data.sources import transform

    (train, test), X, y, X_test, y_test = _data(tmp_path, "gaussian")
    out = tmp_path / "run.h5"
    runner = CliRunner()
    done = runner.invoke(main, ["fit", str(train), "--test", str(test), "--likelihood", "gaussian", "--hidden", "3",
                                "--epochs", "3", "--noise-precision", "4", "--standardize", "-o", str(out)])
    assert done.exit_code == 0, done.output
    S, seed = 37, 5
    done = runner.invoke(main, ["evaluate", str(out), "--samples", str(S), "--seed", str(seed), "--json"])
    assert done.exit_code == 0, done.output
    scores = json.loads(done.stdout)["metrics"]["test"]
    done = runner.invoke(main, ["predict", str(out), str(test), "--samples", str(S), "--seed", str(seed),
                                "--interval", "0.9", "-o", str(tmp_path / "p.h5")])
    assert done.exit_code == 0, done.output
    with h5py.File(tmp_path / "p.h5") as f:
        cli = {name: f[name][()] for name in ("mean", "std_total", "lower", "upper")}

    result = slangcli.load(out)
    api = result.predict(X_test, samples=S, seed=seed, interval=0.9)
    assert np.array_equal(api.mean, cli["mean"]) and np.array_equal(api.std, cli["std_total"])
    assert np.array_equal(api.lower, cli["lower"]) and np.array_equal(api.upper, cli["upper"])
    assert result.score(X_test, y_test, samples=S, seed=seed) == scores

    # per point, from the draws behind both (FitResult.sample with the same seed), in the target's units
    run = read_run(out)
    Xs, ys = transform(run, X_test, y_test, "test")
    theta = result.sample(S, seed=seed)
    f = run.model.forward(theta, Xs)[0][..., 0]  # (S, N), standardised units
    tau = run.model.noise_precision
    t_mean, t_scale = run.arrays["target_mean"][0], run.arrays["target_scale"][0]
    loglik = (scipy.special.logsumexp(0.5 * np.log(tau / (2 * np.pi)) - 0.5 * tau * (ys - f) ** 2, axis=0)
              - np.log(S) - np.log(t_scale))
    assert scores["loglik"] == pytest.approx(loglik.mean(), rel=1e-12)
    np.testing.assert_allclose(cli["mean"], t_mean + t_scale * f.mean(axis=0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cli["std_total"], t_scale * np.sqrt(f.var(axis=0) + 1.0 / tau), rtol=1e-10)
    assert scores["rmse"] == pytest.approx(np.sqrt(np.mean((cli["mean"] - y_test) ** 2)), rel=1e-10)
    inside = np.mean((cli["lower"] <= y_test) & (y_test <= cli["upper"]))
    assert scores["coverage"]["0.9"] == pytest.approx(inside, abs=1e-12)


@pytest.mark.parametrize("method", ["slang", "bbb"])
def test_compress_in_python_truncates_each_layers_standard_deviations(method):
    """``FitResult.compress(rank)``: a k-tied posterior whose weight standard deviations are the floored rank-k SVD
    truncation of the source's (``min(k, m, n)`` per layer), with the means and bias standard deviations kept."""
    from slangcli.compress.ktied import FLOOR_RELATIVE
    from slangcli.runfile.io import POSTERIOR_NAMES

    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 3))
    y = X @ np.array([1.0, -0.5, 0.2]) + 0.1 * rng.normal(size=40)
    result = slangcli.fit(X, y, likelihood="gaussian", hidden=(6, 5), epochs=2, method=method, seed=2)
    source_std = result.posterior.std()
    for rank in (1, 2, 10):
        c = result.compress(rank=rank)
        assert c.posterior.kind == "ktied" and POSTERIOR_NAMES[type(c.posterior)] == "ktied-gaussian"
        layers = c.model.layout.layers
        assert c.posterior.ranks == tuple(min(rank, s.n_in, s.n_out) for s in layers)
        assert c.run.compression["rank"] == rank and c.config == result.config
        assert np.array_equal(c.posterior.mean, result.posterior.mean)
        std = c.posterior.std()
        for l, s in enumerate(layers):
            k = min(rank, s.n_in, s.n_out)
            assert c.posterior.U[l].shape == (s.n_in, k) and c.posterior.V[l].shape == (s.n_out, k)
            A = source_std[s.W].reshape(s.n_in, s.n_out)
            U, g, Vt = np.linalg.svd(A, full_matrices=False)
            expected = np.maximum((U[:, :k] * g[:k]) @ Vt[:k], FLOOR_RELATIVE * A.max())
            np.testing.assert_allclose(std[s.W].reshape(s.n_in, s.n_out), expected, rtol=1e-10, atol=1e-14,
                                       err_msg=f"rank {rank}, layer {l}")
            if k == min(s.n_in, s.n_out):  # full rank: the source itself
                np.testing.assert_allclose(std[s.W], source_std[s.W], rtol=1e-10)
            np.testing.assert_allclose(std[s.b], source_std[s.b], rtol=1e-12)
        assert c.run.compression["params_after"] == c.posterior.n_variational_params()


def test_a_run_compressed_in_python_is_read_by_every_command(tmp_path):
    """A k-tied run made by ``FitResult.compress`` from arrays (no data file, no source file, no stored metrics)
    is inspected, evaluated, predicted and compressed again by the commands."""
    (train, test), X, y, X_test, y_test = _data(tmp_path, "gaussian")
    result = slangcli.fit(X, y, likelihood="gaussian", hidden=4, method="slang", epochs=3, rank=2,
                          noise_precision=7.5, standardize=True)
    path = tmp_path / "k1.h5"
    compressed = result.compress(rank=1)
    compressed.save(path)
    runner = CliRunner()
    # a rank is a positive whole number, as slang compress --rank takes it (1.9 was rank 1, "2" and True taken)
    for bad in (1.9, "2", True, 0):
        with pytest.raises(ConfigError, match=r"^rank must be a positive whole number, got "):
            result.compress(bad)
    assert result.compress(np.int64(1)).posterior.mean.shape == compressed.posterior.mean.shape
    # a checkpoint is refused, as slang compress refuses it (it wrote a "complete" run of an unfinished fit)
    from dataclasses import replace

    stopped = slangcli.FitResult(replace(result.run, status="checkpoint"))
    with pytest.raises(DataError, match=r"a checkpoint of a fit stopped at step .*; finish it first"):
        stopped.compress(1)

    done = runner.invoke(main, ["inspect", str(path)])
    assert done.exit_code == 0, done.output
    assert "compressed from a run in memory (Python) (lowrank-gaussian) at rank 1" in done.stderr
    assert "(none: made in Python)" in done.stderr and "ktied-gaussian" in done.stderr
    done = runner.invoke(main, ["inspect", str(path), "--json"])
    assert done.exit_code == 0 and json.loads(done.stdout)["compression"]["source"]["sha256"] is None

    done = runner.invoke(main, ["evaluate", str(path), str(test), "--samples", "20", "--json"])
    assert done.exit_code == 0, done.output
    scores = json.loads(done.stdout)["metrics"]
    assert "train" not in scores and "the training -ELBO is not reported" in done.stderr
    assert scores["test"] == compressed.score(X_test, y_test, samples=20)
    done = runner.invoke(main, ["evaluate", str(path), str(test), "--samples", "20"])
    assert done.exit_code == 0 and "RMSE" in done.stderr and "-ELBO / N" not in done.stderr

    done = runner.invoke(main, ["predict", str(path), str(test), "--samples", "20", "-o", str(tmp_path / "p.csv")])
    assert done.exit_code == 0, done.output
    table = np.genfromtxt(tmp_path / "p.csv", delimiter=",", names=True)
    np.testing.assert_allclose(table["mean"], compressed.predict(X_test, samples=20).mean, rtol=1e-10)

    done = runner.invoke(main, ["compress", str(path), "--rank", "1", "-o", str(tmp_path / "again.h5")])
    assert done.exit_code == 0, done.output
    assert read_run(tmp_path / "again.h5").posterior.ranks == compressed.posterior.ranks

    # a saved (or loaded) result names its file, as an absolute path, but no checksum: the posterior in memory
    # is what is compressed
    result.save(tmp_path / "source.h5")
    source = result.compress(rank=1).run.compression["source"]
    assert source["path"] == str(tmp_path / "source.h5") and source["sha256"] is None


def test_slang_compress_of_a_python_saved_run_is_evaluated(tmp_path):
    """`slang compress` of a run fitted from arrays: the compressed run stores no training -ELBO and its data file
    cannot be re-read, so evaluate reports the test scores alone."""
    (train, test), X, y, X_test, y_test = _data(tmp_path, "gaussian")
    result = slangcli.fit(X, y, likelihood="gaussian", hidden=4, epochs=3, method="bbb", standardize=True)
    result.save(tmp_path / "py.h5")
    runner = CliRunner()
    done = runner.invoke(main, ["compress", str(tmp_path / "py.h5"), "--rank", "1", "-o", str(tmp_path / "k.h5")])
    assert done.exit_code == 0, done.output
    done = runner.invoke(main, ["evaluate", str(tmp_path / "k.h5"), str(test), "--samples", "20", "--json"])
    assert done.exit_code == 0, done.output
    assert set(json.loads(done.stdout)["metrics"]) >= {"test"} and "train" not in json.loads(done.stdout)["metrics"]
    done = runner.invoke(main, ["inspect", str(tmp_path / "k.h5")])
    assert done.exit_code == 0 and f"compressed from {tmp_path / 'py.h5'} (sha256 " in done.stderr


def test_arrays_of_extreme_magnitude():
    """Features near 1e300: refused as read, naming X (every method computes with their squares); standardised,
    they fit and predict as the same features near 1 do; a test feature that overflows once standardised is named
    in X_test."""
    rng = np.random.default_rng(4)
    X = rng.standard_normal((60, 2))
    y = (X[:, 0] - X[:, 1] > 0).astype(int)
    with pytest.raises(DataError, match=r"^X: feature 'x\d' reaches \S+e\+300 in magnitude, beyond 1e\+150"):
        slangcli.fit(X * 1e300, y, standardize=False)
    kw = dict(standardize=True, epochs=5, rank=2, eval_samples=10)
    huge, plain = slangcli.fit(X * 1e300, y, **kw), slangcli.fit(X, y, **kw)
    np.testing.assert_allclose(huge.predict(X * 1e300).probabilities, plain.predict(X).probabilities, atol=1e-9)
    with pytest.raises(DataError, match=r"^X_test: data row 1, feature 0 \(0-based\): 1e\+300 overflows float64"):
        slangcli.fit(X * 1e-300, y, X_test=np.array([[1e300, 0.0]]), y_test=[1], **kw)


def test_a_dataframes_category_and_bool_columns_are_read_as_a_file_of_them_is(tmp_path):
    """A pandas ``category`` column of numbers was fitted as one number (an ordinal model the frame never asked
    for), and a ``bool`` column as numbers 0/1, so that the frame's own CSV (``True``/``False`` cells) was refused by
    ``slang evaluate``. The first is now a category, the second boolean, as ``slang fit`` reads the CSV."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    x = rng.normal(size=60)
    zone = rng.choice([1, 2, 3], 60)
    y = np.where(x + (zone == 2) > 0.3, "a", "b")
    frame = pd.DataFrame({"a": x, "zone": pd.Categorical(zone), "flag": x > 0})
    result = slangcli.fit(frame, y, epochs=2)
    assert result.feature_names == ["a", "zone=1", "zone=2", "zone=3", "flag"]
    run, data = tmp_path / "frame.h5", tmp_path / "frame.csv"
    result.save(run)
    frame.assign(y=y).to_csv(data, index=False)
    out = CliRunner().invoke(main, ["evaluate", str(run), str(data), "--json"])
    assert out.exit_code == 0, out.output
    # the file scores as the frame does
    expected = result.score(frame, y)["nll"]
    assert json.loads(out.stdout)["metrics"]["test"]["nll"] == pytest.approx(expected, rel=1e-9)


def test_score_imputes_as_predict_and_evaluate_do():
    """FitResult.score refused a missing cell ("X: row 3, column 1 is NaN") that predict and slang evaluate fill in
    for a fit that imputed; it now takes predict's missing=, imputing by default after such a fit."""
    rng = np.random.default_rng(0)
    X = np.round(rng.normal(size=(80, 3)), 3)
    y = (X @ [1.0, -1.0, 0.5] > 0).astype(int)
    X[5, 1] = np.nan
    result = slangcli.fit(X, y, missing="impute", epochs=2)
    filled = X.copy()
    filled[5, 1] = np.nanmean(X[:, 1])  # the training mean, the stored fill
    assert result.score(X, y)["nll"] == pytest.approx(result.score(filled, y)["nll"], rel=1e-12)
    with pytest.raises(DataError, match=r"^X: row 5, column 1 is NaN"):
        result.score(X, y, missing="error")


@pytest.mark.parametrize("options, message", [
    (dict(hidden=(0,)), "hidden widths must be >= 1, got (0,)"),
    (dict(method="bbb", rank=3), "rank does not apply to method='bbb' (its options: samples, lr, "),
    (dict(method="exact-full", epochs=3), "epochs does not apply to method='exact-full': it is solved"),
    (dict(snr_every=3, method="exact-full"), "snr_every does not apply to method='exact-full'"),
])
def test_invalid_options_are_named_as_the_caller_set_them(options, message):
    """The checks are written once, for slang fit's flags; from Python a message names the keyword instead."""
    X, y = np.random.default_rng(0).normal(size=(20, 2)), np.arange(20.0)
    with pytest.raises(ConfigError) as caught:
        slangcli.fit(X, y, **options)
    assert str(caught.value).startswith(message), caught.value
    assert "--" not in str(caught.value), caught.value


@pytest.mark.parametrize("params, message", [
    (dict(hidden=(0,)), "SLANGRegressor: hidden widths must be >= 1"),
    (dict(method="bbb", method_params={"rank": 3}), "SLANGRegressor: method_params['rank'] does not apply to "
                                                    "method='bbb' (its options: method_params['samples'], "),
    (dict(method="exact-full", members=2), "SLANGRegressor: members applies to the step methods: "
                                           "method='exact-full' is solved"),
])
def test_an_estimator_names_its_own_parameters(params, message):
    X, y = np.random.default_rng(0).normal(size=(20, 2)), np.arange(20.0)
    with pytest.raises(ValueError) as caught:
        SLANGRegressor(**params).fit(X, y)
    assert str(caught.value).startswith(message), caught.value
    assert "--" not in str(caught.value), caught.value


def test_a_warning_from_python_names_the_keyword():
    X = np.random.default_rng(0).normal(size=(40, 2))
    with pytest.warns(UserWarning, match=r"\(1 step: epochs\)"):
        slangcli.fit(X, np.zeros(20).tolist() + np.ones(20).tolist(), epochs=1, batch_size=40, hidden=3)


def test_a_word_among_numbers_points_to_categorical_in_both_doors():
    """The hint named 'slang fit categorical', the command's flag renamed as if it were a keyword (probe 10)."""
    import pandas as pd

    df = pd.DataFrame({"a": ["1", "2", "x", "4"], "b": [1.0, 2.0, 3.0, 4.0]})
    with pytest.raises(DataError, match=r"categorical= reads every cell of a column as a category, as slang fit's "
                                        r"'--categorical' does$"):
        slangcli.fit(df, [0.0, 1.0, 0.0, 1.0], epochs=1)


def test_dates_and_other_objects_in_a_dataframe_are_refused_not_made_categories():
    """A column of dates was fitted as a category of each date's str() (60 one-hot levels, every later date unseen
    at prediction), and a column of arbitrary objects as categories named by their memory addresses."""
    import pandas as pd

    rng = np.random.default_rng(0)
    y = (rng.normal(size=30) > 0).astype(int)
    for column, kind in ((pd.date_range("2020-01-01", periods=30), "Timestamp"),
                         (pd.to_timedelta(np.arange(30), unit="D"), "Timedelta"), ([object()] * 30, "object")):
        with pytest.raises(DataTypeError, match=rf"^X: column 't' holds {kind} values \(.* in row 0\); slang reads "
                                                r"numbers and text \(a column of categories too\): convert the column "
                                                "to numbers"):
            slangcli.fit(pd.DataFrame({"a": rng.normal(size=30), "t": column}), y, epochs=1)
    # made categories on purpose, they are
    dates = pd.DataFrame({"a": rng.normal(size=30), "t": pd.Categorical(pd.date_range("2020-01-01", periods=3)
                                                                        .repeat(10))})
    assert len(slangcli.fit(dates, y, epochs=1).feature_names) == 4


def test_the_api_warns_of_a_column_with_a_level_per_row_as_slang_fit_does():
    import pandas as pd

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.normal(size=60), "id": [f"row{i}" for i in range(60)]})
    with pytest.warns(UserWarning, match="column 'id' is read as a category of 60 levels in 60 training rows"):
        slangcli.fit(frame, (rng.normal(size=60) > 0).astype(int), epochs=1)


def test_targets_of_one_kind_that_is_neither_text_nor_numbers():
    """An object array of Python bools (a Series that dropna left of object dtype) raised a bare StopIteration;
    it is read as a bool array is. Decimal or date targets are named."""
    import decimal

    import pandas as pd

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    labels = X[:, 0] > 0
    as_objects = slangcli.fit(X, pd.Series([*labels, None]).dropna(), epochs=1)
    np.testing.assert_array_equal(as_objects.posterior.mean, slangcli.fit(X, labels, epochs=1).posterior.mean)
    with pytest.raises(DataTypeError, match=r"^y: the targets are Decimal values \(Decimal\('1'\), \.\.\.\); pass "
                                            "numbers or strings$"):
        slangcli.fit(X, np.array([decimal.Decimal(1)] * 40, dtype=object), epochs=1)


def test_a_dataframe_with_number_labels_is_matched_by_their_text_when_the_fit_knew_names(tmp_path):
    """A run fitted on a file whose header is 0,1,2 predicted a DataFrame with integer columns 2,0,1 by position:
    other probabilities than slang predict gave for the same file, with no word."""
    import pandas as pd

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(60, 3)))
    frame[3] = (frame[0] > 0).astype(int)
    frame.to_csv(tmp_path / "numbered.csv", index=False)
    result = slangcli.fit(pd.read_csv(tmp_path / "numbered.csv").drop(columns="3"), frame[3], epochs=2)
    expected = result.predict(frame[[0, 1, 2]].rename(columns=str)).probabilities
    np.testing.assert_array_equal(result.predict(frame[[2, 0, 1]]).probabilities, expected)
    # labels that do not hold the fit's names: by position, as an array is
    np.testing.assert_array_equal(result.predict(frame[[0, 1, 2]].rename(columns=lambda c: c + 10)).probabilities,
                                  expected)


def test_the_missing_value_hint_names_the_command_lines_option_intact():
    """The hint said "as slang fit's missing does": the renaming of flags to keywords reached the flag it quoted."""
    X = np.array([[1.0, 2.0], [np.nan, 1.0], [0.5, 0.2]])
    with pytest.raises(DataError, match=r"missing='impute' fills such cells in, missing='drop' leaves such rows out, "
                                        r"as slang fit's '--missing' does$"):
        slangcli.fit(X, [0, 1, 0], epochs=1)


def test_an_extra_column_of_x_test_is_warned_of_as_predict_warns_of_it():
    import pandas as pd

    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.normal(size=30), "b": rng.normal(size=30)})
    y = (X["a"] > 0).astype(int)
    with pytest.warns(UserWarning, match=r"^X_test: column 'extra' ignored: not among the model's features$"):
        slangcli.fit(X, y, X_test=X.assign(extra=1.0), y_test=y, epochs=1)


def test_the_api_warnings_give_python_advice_not_command_line_flags():
    """The column warnings of slang fit, raised by slangcli.fit, advised 'drop_columns id' and 'delimiter', keywords
    that slangcli.fit does not take."""
    import warnings

    import pandas as pd

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.normal(size=60), "id": [f"r{i}" for i in range(60)],
                          "n": np.arange(60) * 1000 + 7, "c": [f"{i % 3},5" for i in range(60)]})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        slangcli.fit(frame, (rng.normal(size=60) > 0).astype(int), epochs=1)
    said = [str(w.message) for w in caught]
    assert ("feature 'n' looks like a row identifier (distinct integers from 7 to 59007) and is used as a feature; "
            "X.drop(columns='n') leaves it out") in said
    assert ("column 'id' is read as a category of 60 levels in 60 training rows, about one a row, which a fit cannot "
            "learn from (is it an identifier or free text? X.drop(columns='id') leaves it out)") in said
    assert any(m.endswith("convert them (X['c'].str.replace(',', '.').astype(float))") for m in said)
    assert not any("drop_columns" in m or "delimiter" in m for m in said)


def test_pandas_na_is_imputed_at_prediction_as_at_the_fit():
    """pd.NA in an Int64 column was imputed by slangcli.fit(missing="impute") and then refused by predict, whose
    default is to impute when the fit did: it went through the numeric path, which did not know pandas' NA."""
    import pandas as pd

    frame = pd.DataFrame({"a": pd.array([1, 2, None, 4] * 10, dtype="Int64"), "b": np.arange(40.0)})
    result = slangcli.fit(frame, [0, 1] * 20, missing="impute", epochs=1)
    as_floats = frame.astype({"a": float})
    np.testing.assert_array_equal(result.predict(frame).probabilities, result.predict(as_floats).probabilities)


@pytest.mark.parametrize("kind", ["regression", "labels"])
def test_targets_written_as_numbers_are_numbers_as_a_files_are(tmp_path, kind):
    """``read_csv(dtype=str)`` gives a numeric target as text: slangcli.fit made a regression target a softmax of a
    class a row, and ordered the labels 9, 10, 100 as text (10, 100, 9), where slang fit on the same file fitted a
    regression, and ordered the labels by value. The estimators keep labels as given."""
    pd = pytest.importorskip("pandas")
    from slangcli.estimators import SLANGClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = X @ [1.0, 2.0] + 0.1 * rng.normal(size=60) if kind == "regression" else np.array([9, 10, 100])[
        np.digitize(X[:, 0], [-0.5, 0.5])]
    pd.DataFrame({"a": X[:, 0], "b": X[:, 1], "y": y}).to_csv(tmp_path / "t.csv", index=False)
    frame = pd.read_csv(tmp_path / "t.csv", dtype=str)
    out = CliRunner().invoke(main, ["fit", str(tmp_path / "t.csv"), "--epochs", "2", "-o", str(tmp_path / "r.h5")])
    assert out.exit_code == 0, out.output
    by_file = read_run(tmp_path / "r.h5")
    result = slangcli.fit(frame[["a", "b"]], frame["y"], epochs=2)
    assert result.classes == (None if kind == "regression" else [9.0, 10.0, 100.0])
    np.testing.assert_array_equal(result.posterior.mean, by_file.posterior.mean)
    if kind == "labels":
        assert result.score(frame[["a", "b"]], frame["y"])["n"] == 60  # (text labels read as the fit's numbers)
        assert SLANGClassifier(epochs=1).fit(frame[["a", "b"]], frame["y"]).classes_.tolist() == ["10", "100", "9"]


def test_a_bool_targets_run_reads_the_true_and_false_cells_of_its_frames_csv(tmp_path):
    """slangcli.fit codes a bool target 0/1; the frame's own CSV holds True/False cells, which slang evaluate refused:
    "label 'True' not seen in training data (known: 0, 1)". A run of classes 0 and 1 reads them as 1 and 0; a run
    fitted on that CSV (labels False, True) scores a bool target from Python."""
    pd = pytest.importorskip("pandas")
    from slangcli.api import load
    from slangcli.estimators import SLANGClassifier

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(60, 2)), columns=["a", "b"])
    y = pd.Series(frame["a"] > 0, name="y")
    result = slangcli.fit(frame, y, epochs=2)
    assert result.classes == [0.0, 1.0]
    result.save(tmp_path / "r.h5")
    frame.assign(y=y).to_csv(tmp_path / "t.csv", index=False)
    out = CliRunner().invoke(main, ["evaluate", str(tmp_path / "r.h5"), str(tmp_path / "t.csv"), "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["metrics"]["test"]["nll"] == pytest.approx(result.score(frame, y)["nll"], rel=1e-12)
    # the file fits the same posterior, of the labels False and True, which score a bool target alike
    fitted = CliRunner().invoke(main, ["fit", str(tmp_path / "t.csv"), "--epochs", "2", "-o", str(tmp_path / "f.h5")])
    assert fitted.exit_code == 0, fitted.output
    by_file = load(tmp_path / "f.h5")
    assert by_file.classes == ["False", "True"]
    np.testing.assert_array_equal(by_file.posterior.mean, result.posterior.mean)
    assert by_file.score(frame, y)["nll"] == pytest.approx(result.score(frame, y)["nll"], rel=1e-12)
    assert SLANGClassifier(epochs=1).fit(frame, y).classes_.tolist() == [False, True]


def test_test_labels_are_read_as_the_training_labels_were():
    """Training labels of text that look partly like numbers stay text, and so do the test labels: "01" in y_test
    was made the number 1 beside the training labels "01", "02", "x". Numbers written as text with "nan" among
    them are refused as a file's are (y.astype(str) writes a missing target so)."""
    X = np.random.default_rng(0).normal(size=(60, 2))
    result = slangcli.fit(X, ["01", "02", "x"] * 20, X_test=X[:40], y_test=["01", "02"] * 20, epochs=1)
    assert result.classes == ["01", "02", "x"] and result.metrics["test"]["n"] == 40
    with pytest.raises(DataError, match=r"^y: row 2 is NaN \(the targets must be finite\)$"):
        slangcli.fit(X, ["1", "2", "nan"] * 20, epochs=1)


def test_integer_labels_come_back_as_integers(tmp_path):
    """Labels 0, 1, 2 were classes 0.0, 1.0, 2.0 and predicted as floats, and 1.5 beside them stays a float. The
    run file stores them as numbers either way, so a command-line run of such a file reads back alike."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(90, 2))
    y = np.digitize(X[:, 0], [-0.5, 0.5])
    result = slangcli.fit(X, y, epochs=1)
    assert result.classes == [0, 1, 2] and all(type(c) is int for c in result.classes)
    predicted = result.predict(X[:9]).predicted
    assert predicted.dtype == np.int64 and set(predicted.tolist()) <= {0, 1, 2}
    halves = slangcli.fit(X, np.array([0.0, 1.5, 2.0])[y], likelihood="categorical", epochs=1)
    assert halves.classes == [0.0, 1.5, 2.0] and halves.predict(X[:9]).predicted.dtype == np.float64
    result.save(tmp_path / "r.h5")
    assert slangcli.load(tmp_path / "r.h5").classes == [0, 1, 2]
    # integral labels beyond 2^53 stay floats (an int64 of 1e20 overflowed in predict)
    huge = slangcli.fit(X, np.array([0.0, 1e20, 2e20])[y], likelihood="categorical", epochs=1)
    assert huge.classes == [0.0, 1e20, 2e20] and huge.predict(X[:9]).predicted.dtype == np.float64
    # the files keep their format: labels as float64 in a predictions file, as written by the CSV
    (tmp_path / "x.csv").write_text("x0,x1,y\n" + "".join(f"{a:.6f},{b:.6f},{t}\n" for (a, b), t in zip(X, y)))
    for out in ("p.h5", "p.csv"):
        done = CliRunner().invoke(main, ["predict", str(tmp_path / "r.h5"), str(tmp_path / "x.csv"), "-o",
                                         str(tmp_path / out)])
        assert done.exit_code == 0, done.output
    with h5py.File(tmp_path / "p.h5") as f:
        assert f["classes"].dtype == f["predicted"].dtype == f["target"].dtype == np.float64
    lines = (tmp_path / "p.csv").read_text().splitlines()
    assert lines[1].split(",")[4] in {"0", "1", "2"} and lines[1].split(",")[-1] == str(y[0])
