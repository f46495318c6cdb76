"""Run files that are readable but not what they seem: string attributes stored as fixed-length bytes; a FIFO, a
directory or a device given as the run file; stored values too large to compute with (or to plot); soft or
external links.

Every refusal is one line naming the file, exit code 1, with no traceback and no NumPy warning on stderr. The
command-line cases run ``python -m slangcli`` in a subprocess in a temporary directory, so that what reaches the
real stderr (NumPy's RuntimeWarnings among it) is what is checked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from conftest import binary_problem, csv_text
from slangcli.data.sources import DataOptions
from slangcli.errors import FormatError
from slangcli.gaussian.posteriors import MAX_ABS_VALUE
from slangcli.runfile.io import read_run, write_run
from slangcli.training.fitting import fit


def format_error(path) -> str:
    with pytest.raises(FormatError) as info:
        read_run(str(path))
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message, message
    return message


def slang(*args, cwd, timeout=120):
    """``(exit code, stderr)`` of ``python -m slangcli ARGS`` run in ``cwd``."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "slangcli", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, env=env, timeout=timeout)
    return proc.returncode, proc.stderr


def assert_one_line_error(code, err, *says):
    """Exit 1 and stderr one error line holding ``says``: no traceback, no warning, nothing else."""
    assert code == 1, err
    assert "Traceback" not in err and "Warning" not in err, err
    assert err.startswith("slang: error: ") and err.count("\n") == 1, err
    for text in says:
        assert text in err, err


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A directory with ``data.csv`` (binary) and ``reg.csv`` (regression), and valid run files fitted to them:
    ``logistic.h5`` (SLANG, no hidden layer), ``net.h5`` (SLANG, 4 hidden units), ``regnet.h5`` (regression,
    SLANG, 4 hidden units), ``regbbb.h5`` (regression, Bayes by Backprop: a diagonal posterior); each with a
    25 % test split."""
    d = tmp_path_factory.mktemp("runs")
    (d / "data.csv").write_text(csv_text(*binary_problem(n=80, seed=3)))
    rng = np.random.default_rng(5)
    X = rng.standard_normal((80, 3))
    y = X @ np.array([1.0, -1.0, 0.5]) + 0.3 * rng.standard_normal(80)
    (d / "reg.csv").write_text("a,b,c,y\n" + "".join(f"{a:.6f},{b:.6f},{c:.6f},{t:.6f}\n"
                                                     for (a, b, c), t in zip(X, y)))
    # (a noise precision given: regnet's and regbbb's models stay comparable)
    common = dict(batch_size=16, epochs=2, seed=0, eval_samples=20, noise_precision=1.0)
    fits = {
        "logistic.h5": ("data.csv", dict(hyper={"rank": 2})),
        "net.h5": ("data.csv", dict(method="slang", hyper={"rank": 2}, hidden=(4,))),
        "regnet.h5": ("reg.csv", dict(method="slang", hyper={"rank": 2}, hidden=(4,))),
        "regbbb.h5": ("reg.csv", dict(method="bbb", hidden=(4,))),
    }
    for name, (data, kw) in fits.items():
        run = fit(DataOptions(path=str(d / data), test_fraction=0.25), **common, **kw)
        write_run(d / name, run)
    return d


def edited(runs, source: str, name: str, edit) -> str:
    """A copy of the run file ``source`` named ``name``, changed by ``edit(h5py.File)``; returns its name."""
    (runs / name).write_bytes((runs / source).read_bytes())
    with h5py.File(runs / name, "r+") as f:
        edit(f)
    return name


# ---------------------------------------------------------------------- string attributes as fixed-length bytes


def _as_fixed_length(f) -> int:
    """Every string attribute of every group rewritten as a fixed-length byte string (what h5py reads back as
    ``np.bytes_``, and what other HDF5 writers often store); returns how many."""
    count = 0
    for obj in [f, *(f[name] for name in f)]:
        for key in list(obj.attrs):
            value = obj.attrs[key]
            if isinstance(value, str):
                obj.attrs[key] = np.bytes_(value.encode("utf-8"))
                count += 1
    return count


def test_fixed_length_string_attributes_read_as_text(runs):
    """Every string attribute (encoding names and versions, JSON documents, the model's activation and
    likelihood, the status) stored as a fixed-length byte string: the run reads as the same run."""
    counted = []
    name = edited(runs, "net.h5", "fixed.h5", lambda f: counted.append(_as_fixed_length(f)))
    assert counted[0] >= 20
    with h5py.File(runs / name, "r") as f:
        assert isinstance(f["posterior"].attrs["encoding-type"], np.bytes_)  # the case is what it claims
    back, original = read_run(runs / name), read_run(runs / "net.h5")
    assert back.model == original.model and back.status == original.status == "complete"
    assert back.config == original.config and back.data == original.data and back.meta == original.meta
    assert type(back.posterior) is type(original.posterior)
    np.testing.assert_array_equal(back.posterior.mean, original.posterior.mean)


def test_an_unknown_encoding_stored_as_bytes_is_named_as_text(runs):
    name = edited(runs, "logistic.h5", "kfac.h5",
                  lambda f: f["posterior"].attrs.__setitem__("encoding-type", np.bytes_(b"kfac-gaussian")))
    message = format_error(runs / name)
    assert "unknown encoding-type 'kfac-gaussian'" in message and "bytes" not in message, message
    name = edited(runs, "logistic.h5", "v2.h5", lambda f: f.attrs.__setitem__("encoding-version", np.bytes_(b"2.0")))
    assert "written by slang file format 2.0;" in format_error(runs / name)


# ------------------------------------------------------------------ a FIFO, a directory or a device as the run file


COMMANDS = {
    "inspect": ["inspect", "{run}"],
    "evaluate": ["evaluate", "{run}"],
    "evaluate --reference": ["evaluate", "logistic.h5", "--reference", "{run}"],
    "predict": ["predict", "{run}", "data.csv", "-o", "p.csv"],
    "compress": ["compress", "{run}", "-k", "1", "-o", "c.h5"],
    "plot": ["plot", "{run}", "--kind", "training", "-o", "p.png"],
    "fit --resume": ["fit", "--resume", "{run}"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_fifo_as_the_run_file_is_refused_at_once(runs, tmp_path, command):
    """A FIFO was opened (waiting for a writer), the reader's probe killed after 5 s and the file called
    corrupted; it is refused before anything opens it, by every command that reads run files."""
    for name in ("logistic.h5", "data.csv"):
        (tmp_path / name).write_bytes((runs / name).read_bytes())
    os.mkfifo(tmp_path / "pipe.h5")
    # (a command that opened the FIFO would wait for a writer until the timeout)
    code, err = slang(*(a.format(run="pipe.h5") for a in COMMANDS[command]), cwd=tmp_path, timeout=60)
    assert_one_line_error(code, err, "pipe.h5: is a FIFO, not a run file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv", "logistic.h5", "pipe.h5"]


def test_a_device_as_the_run_file_is_refused(tmp_path):
    code, err = slang("inspect", os.devnull, cwd=tmp_path)
    assert_one_line_error(code, err, f"{os.devnull}: is a device, not a run file")


def test_a_directory_or_a_device_given_to_the_reader_is_named(tmp_path):
    assert "is a directory, not a run file" in format_error(tmp_path)
    assert "is a device, not a run file" in format_error(os.devnull)
    assert "no such file" in format_error(tmp_path / "absent.h5")


# ------------------------------------------------------------------------- values too large to compute with


def _set(group_path, name, value):
    def edit(f):
        f[group_path][name][...] = value
    return edit


def _both(*edits):
    def edit(f):
        for one in edits:
            one(f)
    return edit


# U of 1e149 with d of 1e-100: each term of the capacitance matrix U^T diag(1/d) U is 1e398, beyond float64 in any
# order of summation and on every BLAS kernel. (U of 1e149 alone gives terms near 1e297 whose Cholesky
# factorisation, of a numerically singular matrix, succeeds or fails by the kernel's rounding: a case that says
# nothing about slang.) LAPACK's potrf factors a matrix of infinities without complaint, and every result then
# silently dropped U: slang checks the capacitance matrix itself.
OVERFLOWING_U = _both(_set("posterior", "U", 1e149), _set("posterior", "d", 1e-100))


@pytest.mark.parametrize("source,dataset", [("logistic.h5", "mean"), ("net.h5", "mean"), ("net.h5", "U"),
                                            ("regbbb.h5", "mean")])
def test_stored_values_beyond_the_bound_are_refused_on_reading(runs, source, dataset):
    """A posterior of 1e300 gave RuntimeWarnings and an -ELBO of inf or nan with exit 0; every stored value
    beyond MAX_ABS_VALUE (its square would overflow) is refused by the reader, naming the dataset."""
    name = edited(runs, source, f"huge-{dataset}-{source}", _set("posterior", dataset, 1e300))
    message = format_error(runs / name)
    assert f"/posterior/{dataset} holds values beyond {MAX_ABS_VALUE:g} in magnitude" in message, message
    name = edited(runs, source, f"edge-{dataset}-{source}", _set("posterior", dataset, MAX_ABS_VALUE))
    read_run(runs / name)  # the bound itself is allowed


def test_the_data_statistics_keep_any_finite_value(tmp_path):
    """Features near 1e160 that vary by 1e150 standardise exactly; the bound is for what a posterior is computed
    with, not the data's statistics, so the run reads back and scores."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 2))
    lines = [f"{float(1e160 + 1e150 * a)!r},{b:.6f},{int(a > 0)}" for a, b in X]
    (tmp_path / "big.csv").write_text("a,b,y\n" + "\n".join(lines) + "\n")
    write_run(tmp_path / "big.h5", fit(DataOptions(path=str(tmp_path / "big.csv"), standardize=True,
                                                   test_fraction=0.25), batch_size=10, epochs=2, eval_samples=10))
    run = read_run(tmp_path / "big.h5")
    assert run.arrays["feature_mean"][0] > MAX_ABS_VALUE
    from slangcli.predictive.evaluation import evaluate

    assert np.isfinite(evaluate(run, "big.h5", samples=10)["test"]["nll"])


def test_a_fit_never_writes_values_beyond_the_bound(runs, tmp_path):
    """A step that takes the mean beyond MAX_ABS_VALUE is a divergence (a checkpoint of 1e300 was written and then
    refused by every command); prior precisions outside the bounds are usage errors."""
    from click.testing import CliRunner

    from slangcli.cli import main

    out = tmp_path / "div.h5"
    result = CliRunner().invoke(main, ["fit", str(runs / "data.csv"), "-o", str(out), "--hidden", "8", "--method",
                                       "slang", "--lr", "1e300", "--checkpoint-every", "1", "--epochs", "5",
                                       "--no-progress"])
    assert result.exit_code == 1, result.stderr
    assert f"diverged at step 1 (epoch 1): parameters beyond {MAX_ABS_VALUE:g} in magnitude (mu)" in result.stderr
    assert not out.exists()
    for option, value in (("--prior-precision", "1e200"), ("--bias-prior-precision", "1e-200")):
        result = CliRunner().invoke(main, ["fit", str(runs / "data.csv"), "-o", str(out), option, value])
        assert result.exit_code == 2 and f"{option} must lie between 1e-150 and 1e+150" in result.stderr
        assert not out.exists()


def test_a_low_rank_precision_whose_inverse_is_too_large_is_refused(runs):
    name = edited(runs, "net.h5", "tiny-d.h5", _set("posterior", "d", 1e-300))
    assert "/posterior/d must be at least 1e-150" in format_error(runs / name)


@pytest.mark.parametrize("command", ["evaluate", "predict", "inspect", "compress"])
def test_a_posterior_of_1e300_is_one_line_on_every_command(runs, command):
    name = edited(runs, "net.h5", f"huge-cli-{command}.h5", _set("posterior", "mean", 1e300))
    args = {"evaluate": [name], "predict": [name, "data.csv", "-o", f"{name}.csv"], "inspect": [name],
            "compress": [name, "-k", "1", "-o", f"{name}.c.h5"]}[command]
    code, err = slang(command, *args, cwd=runs)
    assert_one_line_error(code, err, f"{name}: /posterior/mean holds values beyond")


@pytest.mark.parametrize("source,edit,says", [
    # within the bound, but the network's output overflows: RMSE inf, log-likelihood -inf, -ELBO inf (exit 0)
    ("regnet.h5", _set("posterior", "mean", 1e149), "gives non-finite"),
    # standard deviations of exp(300): the weight samples overflow the network
    ("regbbb.h5", _set("posterior", "log_sigma", 300.0), "gives non-finite"),
    # U^T diag(1/d) U overflows the capacitance matrix: a traceback, or U silently dropped (exit 0)
    ("logistic.h5", OVERFLOWING_U, "too ill-conditioned"),
], ids=["regression mean 1e149", "log_sigma 300", "U 1e149 d 1e-100"])
@pytest.mark.parametrize("command", ["evaluate", "predict", "compress --evaluate"])
def test_values_within_the_bound_that_overflow_are_one_line(runs, source, edit, says, command):
    """Values the reader accepts can still overflow when scored: NumPy's warnings stay quiet, and a non-finite
    score or prediction, or a failed factorisation, is one line naming the file (exit 1), never inf with exit 0."""
    name = edited(runs, source, f"overflow-{source}-{says[:3]}-{command[:3]}.h5", edit)
    data = "reg.csv" if source.startswith("reg") else "data.csv"
    args = {"evaluate": ["evaluate", name], "predict": ["predict", name, data, "-o", f"{name}.csv"],
            "compress --evaluate": ["compress", name, "-k", "1", "--evaluate", "-o", f"{name}.c.h5"]}[command]
    code, err = slang(*args, cwd=runs)
    assert_one_line_error(code, err, f"{name}: its posterior", says)
    assert not (runs / f"{name}.csv").exists() and not (runs / f"{name}.c.h5").exists()


def test_a_posterior_near_the_limits_that_stays_finite_scores_correctly(runs):
    """The other half of the rule: values that stay finite are scored, exit 0, with the right numbers. U scaled by
    1e100 (so U U^T ~ 1e200 beside a diagonal of order one: the capacitance matrix is huge but well conditioned
    relative to its size) against an independent computation: the covariance by the SVD of diag(d)^-1/2 U, the
    logistic predictive by adaptive quadrature."""
    import json

    import scipy.integrate
    import scipy.special

    name = edited(runs, "logistic.h5", "scaled-U.h5", lambda f: f["posterior/U"].__setitem__(
        Ellipsis, f["posterior/U"][()] * 1e100))
    proc = subprocess.run([sys.executable, "-m", "slangcli", "evaluate", name, "data.csv", "--json"], cwd=runs,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Warning" not in proc.stderr, proc.stderr
    nll = json.loads(proc.stdout)["metrics"]["test"]["nll"]

    with h5py.File(runs / name, "r") as f:
        mean, U, d = (f["posterior"][k][()] for k in ("mean", "U", "d"))
    table = np.genfromtxt(runs / "data.csv", delimiter=",", skip_header=1, dtype=str)
    stored = read_run(runs / name).arrays  # the features as the fit standardised them
    features = (table[:, :-1].astype(float) - stored["feature_mean"]) / stored["feature_scale"]
    X = np.hstack([features, np.ones((len(table), 1))])  # the bias is the last weight
    y = (table[:, -1] == "yes").astype(float)  # labels are sorted and coded: no 0, yes 1
    Q, s, _ = np.linalg.svd(U / np.sqrt(d)[:, None], full_matrices=False)
    Xs = X / np.sqrt(d)  # x^T Sigma x = |D^-1/2 x|^2 - sum_k s_k^2 / (1 + s_k^2) (q_k^T D^-1/2 x)^2
    v = np.einsum("nd,nd->n", Xs, Xs) - ((Xs @ Q) ** 2 * (s**2 / (1 + s**2))).sum(axis=1)
    assert (v > 0).all()

    def p_one(m, var):
        integrand = lambda z: scipy.special.expit(m + np.sqrt(var) * z) * np.exp(-z * z / 2) / np.sqrt(2 * np.pi)
        return scipy.integrate.quad(integrand, -np.inf, np.inf, epsabs=1e-13, epsrel=1e-12)[0]

    p = np.array([p_one(m, var) for m, var in zip(X @ mean, v)])
    expected = -np.mean(y * np.log(p) + (1 - y) * np.log1p(-p))
    assert nll == pytest.approx(expected, rel=1e-6)
    # the scaling changed the posterior: its predictive differs from the stored run's (the test can fail)
    proc = subprocess.run([sys.executable, "-m", "slangcli", "evaluate", "logistic.h5", "data.csv", "--json"],
                          cwd=runs, capture_output=True, text=True, timeout=120)
    assert json.loads(proc.stdout)["metrics"]["test"]["nll"] != pytest.approx(expected, rel=1e-3)


def test_scores_that_overflow_are_refused_by_the_library_too(runs):
    from slangcli.predictive.evaluation import evaluate, predict

    name = edited(runs, "regnet.h5", "lib-overflow.h5", _set("posterior", "mean", 1e149))
    run = read_run(runs / name)
    with pytest.raises(FormatError, match="its posterior gives non-finite scores"):
        evaluate(run, name, str(runs / "reg.csv"), samples=10)
    with pytest.raises(FormatError, match="its posterior gives non-finite predictions"):
        predict(run, name, str(runs / "reg.csv"), samples=10)


PLOT_OVERFLOWS = {
    # the capacitance matrix overflows: the marginal variances' Cholesky factorisation failed (traceback)
    "spectrum, U 1e149 d 1e-100": ("logistic.h5", OVERFLOWING_U, ["--kind", "spectrum"],
                                   "its posterior is too ill-conditioned"),
    "posterior, U 1e149 d 1e-100": ("logistic.h5", OVERFLOWING_U, ["--kind", "posterior", "--reference", "logistic.h5"],
                                    "its posterior is too ill-conditioned"),
    "calibration --bins, U 1e149 d 1e-100": ("logistic.h5", OVERFLOWING_U, ["--kind", "calibration", "--bins", "10"],
                                             "its posterior is too ill-conditioned"),
    # the recomputed coverage: RMSE inf with a RuntimeWarning, and a figure written (exit 0)
    "calibration, regression mean 1e149": ("regnet.h5", _set("posterior", "mean", 1e149), ["--kind", "calibration"],
                                           "its posterior gives non-finite scores (test rmse inf)"),
    # variances of 1e260, finite, overflow matplotlib's log-axis ticks (OverflowError traceback)
    "posterior, log_sigma 300": ("regbbb.h5", _set("posterior", "log_sigma", 300.0),
                                 ["--kind", "posterior", "--reference", "regnet.h5"], "values too large to draw"),
}


@pytest.mark.parametrize("case", list(PLOT_OVERFLOWS))
def test_values_within_the_bound_that_overflow_a_plot_are_one_line(runs, case):
    """slang plot's kinds that compute from a posterior (recomputed calibration, the spectrum, the posterior's
    moments and KL divergence) and draw it: no warning, no traceback, one line naming the file, no figure."""
    pytest.importorskip("matplotlib")
    source, edit, options, says = PLOT_OVERFLOWS[case]
    name = edited(runs, source, f"plot-{case.replace(' ', '-').replace(',', '')}.h5", edit)
    code, err = slang("plot", name, *options, "-o", f"{name}.png", cwd=runs)
    assert_one_line_error(code, err, f"slang: error: {name}", says)
    assert not (runs / f"{name}.png").exists()
    assert not [p.name for p in runs.iterdir() if p.name.endswith(".tmp")]


def test_plot_data_that_overflow_are_refused_by_the_library_too(runs):
    import warnings

    from slangcli.plot import plotdata

    name = edited(runs, "logistic.h5", "lib-plot-U.h5", OVERFLOWING_U)
    run = read_run(runs / name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(FormatError, match=f"^{name}: its posterior is too ill-conditioned"):
            plotdata.spectrum(run, "U", name)
        with pytest.raises(FormatError, match=f"^{name}: its posterior is too ill-conditioned"):
            plotdata.summarize_posterior(run, "U", run_name=name)
    name = edited(runs, "regnet.h5", "lib-plot-mean.h5", _set("posterior", "mean", 1e149))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(FormatError, match=f"^{name}: its posterior gives non-finite scores"):
            plotdata.calibration(read_run(runs / name), name, "mean", str(runs / "reg.csv"), samples=20)


# ----------------------------------------------------------------------------------------- a split's row indices


def _index(name, values):
    """/data/``name`` replaced by ``values(f)``, an array computed from the file (None: deleted)."""
    def edit(f):
        new = values(f)
        del f["data"][name]
        if new is not None:
            f["data"].create_dataset(name, data=new)
    return edit


def _no_test(f):
    """The provenance says the run has no test data; its split indices stay."""
    data = json.loads(f["data"].attrs["provenance"])
    data["test"] = None
    f["data"].attrs["provenance"] = json.dumps(data)


@pytest.mark.parametrize("edit,says", [
    (_index("train_index", lambda f: f["data/test_index"][()]),
     "/data/train_index and /data/test_index share 20 row(s) (the first: row "),
    (_index("train_index", lambda f: np.concatenate([f["data/train_index"][()], f["data/test_index"][:1]])),
     "/data/train_index and /data/test_index share 1 row(s)"),
    (_index("test_index", lambda f: np.repeat(f["data/test_index"][:10], 2)), "/data/test_index lists row "),
    (_index("train_index", lambda f: np.sort(np.concatenate([f["data/train_index"][:-1], f["data/train_index"][:1]]))),
     "/data/train_index lists row "),
    (_index("train_index", lambda f: None), "/data/train_index is missing (the run's test set is a split"),
    (_index("test_index", lambda f: f["data/test_index"][:-1]),
     "/data/test_index lists 19 rows, but the provenance 'test' 'rows' is 20"),
    (_index("train_index", lambda f: f["data/train_index"][:-1]),
     "/data/train_index lists 59 rows, but the provenance 'train' 'rows_used' is 60"),
    (_no_test, "/data/train_index is present, but the run's test set is not a split of its training data"),
], ids=["train is test", "one row in both", "test repeats", "train repeats", "train missing", "test short",
        "train short", "no test set"])
def test_split_indices_that_are_not_a_split_are_refused(runs, edit, says):
    """evaluate scored a run whose training index was its test index with exit 0, the training -ELBO computed on
    the test rows; a row listed twice, in both parts, or indices that disagree with the provenance are refused."""
    name = edited(runs, "logistic.h5", "split.h5", edit)
    message = format_error(runs / name)
    assert says in message, message


def test_evaluate_refuses_a_run_trained_on_its_test_rows(runs):
    name = edited(runs, "net.h5", "trained-on-test.h5",
                  _index("train_index", lambda f: f["data/test_index"][()]))
    code, err = slang("evaluate", name, cwd=runs)
    assert_one_line_error(code, err, f"{name}: /data/train_index and /data/test_index share 20 row(s)")


# ------------------------------------------------------------------------------------- soft and external links


def _external_mean(directory):
    def edit(f):
        with h5py.File(directory / "elsewhere.h5", "w") as other:
            other["mean"] = f["posterior/mean"][()]
        del f["posterior/mean"]
        f["posterior/mean"] = h5py.ExternalLink("elsewhere.h5", "/mean")
    return edit


def _soft_mean(f):
    f["history/kept"] = f["posterior/mean"][()]
    del f["posterior/mean"]
    f["posterior/mean"] = h5py.SoftLink("/history/kept")


def _external_group(directory):
    """An extra group, which no reader looks at, linked from another file."""
    def edit(f):
        with h5py.File(directory / "notes.h5", "w") as other:
            other.create_group("notes")
        f["extra"] = h5py.ExternalLink("notes.h5", "/notes")
    return edit


@pytest.mark.parametrize("make,says", [
    (_external_mean, "/posterior/mean is an external link to elsewhere.h5:/mean; a run file must be self-contained"),
    (lambda d: _soft_mean, "/posterior/mean is a soft link to /history/kept"),
    (_external_group, "/extra is an external link to notes.h5:/notes"),
], ids=["external dataset", "soft link", "external group"])
def test_links_anywhere_in_a_run_file_are_refused(runs, make, says):
    """The linked data were followed silently (another file's posterior read in this file's name)."""
    name = edited(runs, "logistic.h5", f"link-{says[1:6]}-{len(says)}.h5", make(runs))
    assert says in format_error(runs / name)
    code, err = slang("evaluate", name, cwd=runs)
    assert_one_line_error(code, err, says)


def test_an_external_link_to_a_missing_file_is_named(runs):
    name = edited(runs, "logistic.h5", "dangling.h5",
                  lambda f: f.__setitem__("extra", h5py.ExternalLink("/no/such/file.h5", "/x")))
    assert "/extra is an external link to /no/such/file.h5:/x" in format_error(runs / name)
