"""``slang plot``: every kind rendered to PNG and PDF with the Agg backend, and the content of the figure the command
saved (captured by wrapping ``figures.save_figure``) checked through matplotlib's objects (axes, lines, bars,
images, labels) against the run files it was drawn from.

The runs are real fits of tiny synthetic problems (``slang fit`` and ``slang sweep`` from the command line), made
once per module.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py

import numpy as np
import pytest
from click.testing import CliRunner

from slangcli.cli import main
from slangcli.runfile.io import read_run

from conftest import binary_problem, csv_text

matplotlib = pytest.importorskip("matplotlib")

from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.container import BarContainer, ErrorbarContainer  # noqa: E402
from matplotlib.image import AxesImage  # noqa: E402

from slangcli.plot import figures
from slangcli.plot import plotdata  # noqa: E402
from slangcli.sweep import make_point  # noqa: E402

STEP = ["--epochs", "3", "--batch-size", "8", "--samples", "2", "--test-fraction", "0.25"]


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def ok(*args):
    result = invoke(*args)
    assert result.exit_code == 0, (result.stderr, result.exception)
    return result


def fails(code, *args, mentions=()):
    result = invoke(*args)
    assert result.exit_code == code, (result.exit_code, result.stderr, result.exception)
    assert "Traceback" not in result.stderr
    if code == 1:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("slang: error: "), result.stderr
    for text in mentions:
        assert text in result.stderr, result.stderr
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Real runs of tiny problems: classification (SLANG L = 2, mean field, exact-full, exact-mf on one split),
    networks (3-4-1: bbb and its rank-1 compression, SLANG L = 2, k-tied k = 2), and a regression (SLANG) with a
    second data file of its kind."""
    d = tmp_path_factory.mktemp("plot-runs")
    train = d / "train.csv"
    train.write_text(csv_text(*binary_problem(n=60, seed=0)))
    common = [train, "--test-fraction", "0.25", "--split-seed", "0", "--prior-precision", "2"]
    out = {"train": train, "dir": d}
    for name, extra in {"slang": ["--method", "slang", "--rank", "2", "--epochs", "30", "--batch-size", "8"],
                        "mf": ["--method", "mf-ef", "--epochs", "30", "--batch-size", "8"],
                        "exact": ["--method", "exact-full"], "exact_mf": ["--method", "exact-mf"]}.items():
        out[name] = d / f"{name}.h5"
        ok("fit", *common, *extra, "-o", out[name])
    out["bbb"] = d / "bbb.h5"
    ok("fit", train, "-o", out["bbb"], "--method", "bbb", "--hidden", "4", *STEP)
    ok("compress", out["bbb"], "--rank", "1", "-o", d / "bbb-c.h5")
    out["compressed"] = d / "bbb-c.h5"
    for name, extra in {"slang_net": ["--method", "slang", "--rank", "2"],
                        "ktied": ["--method", "ktied", "--rank", "2"]}.items():
        out[name] = d / f"{name}.h5"
        ok("fit", train, "-o", out[name], "--hidden", "4", *extra, *STEP)
    rng = np.random.default_rng(5)
    X = rng.standard_normal((100, 2))
    y = X @ np.array([1.0, -0.5]) + 0.3 * rng.standard_normal(100)
    rows = ["".join(f"{a:.6f},{b:.6f},{t:.6f}\n" for (a, b), t in zip(X[part], y[part]))
            for part in (slice(0, 60), slice(60, None))]
    reg = d / "reg.csv"
    reg.write_text("a,b,y\n" + rows[0])
    out["reg_data"] = d / "reg-other.csv"  # 40 more targets of the same problem
    out["reg_data"].write_text("a,b,y\n" + rows[1])
    out["reg"] = d / "reg.h5"
    ok("fit", reg, "-o", out["reg"], "--likelihood", "gaussian", "--noise-precision", "10", "--eval-samples", "200",
       *STEP)
    return out


@pytest.fixture
def saved(monkeypatch):
    """``[(figure, path)]`` of every figure ``slang plot`` saves in this test: ``figures.save_figure`` wrapped by
    one that records its arguments and then saves as before."""
    record = []
    original = figures.save_figure

    def recording(fig, path, *args, **kwargs):
        record.append((fig, Path(path)))
        return original(fig, path, *args, **kwargs)

    monkeypatch.setattr(figures, "save_figure", recording)
    return record


@pytest.fixture
def render(tmp_path, saved):
    """``render(*ARGS)``: run ``slang plot ARGS`` to a PNG and to a PDF, and return the Figure the command saved as
    the PNG, after checking that each file is what its name says and that the PDF shows the same."""

    def run(*args):
        drawn = []
        for suffix, magic in ((".png", b"\x89PNG"), (".pdf", b"%PDF")):
            path = tmp_path / f"fig{suffix}"
            del saved[:]
            ok("plot", *args, "-o", path)
            ((fig, where),) = saved
            assert where == path and path.read_bytes().startswith(magic)
            drawn.append(fig)
        np.testing.assert_equal(shown(drawn[1]), shown(drawn[0]))
        return drawn[0]

    return run


def shown(fig) -> list:
    """What a figure shows, per axes: title, axis labels and scales, lines (label, x, y), bar heights, images."""
    return [(ax.get_title(), ax.get_xlabel(), ax.get_ylabel(), ax.get_xscale(), ax.get_yscale(),
             [(ln.get_label(), np.asarray(ln.get_xdata(), dtype=float), np.asarray(ln.get_ydata(), dtype=float))
              for ln in ax.get_lines()],
             [[p.get_height() for p in c.patches] for c in ax.containers if isinstance(c, BarContainer)],
             [np.asarray(im.get_array()) for im in ax.get_images()])
            for ax in fig.axes]


def panel_legend(ax):
    """The legend of the panel (subfigure) holding ``ax``, which the training figure places under its axes."""
    (legend,) = ax.figure.legends
    return legend


def data_lines(ax):
    """The lines of an axes that carry data (not the dotted identity line)."""
    return [line for line in ax.get_lines() if line.get_label() not in ("perfect calibration", "equal")
            and not line.get_label().startswith("_")]


# ------------------------------------------------------------------------------------------------ training


def test_training_figure_matches_histories(runs, render):
    fig = render(runs["slang"], runs["mf"], runs["exact"], "--kind", "training")
    epoch_ax, iter_ax = fig.axes
    assert epoch_ax.get_xlabel().startswith("epoch") and iter_ax.get_xlabel() == "L-BFGS iteration"
    assert "nats" in epoch_ax.get_ylabel() and fig._suptitle.get_text() == "Training"
    assert epoch_ax.get_title() == "step methods: -ELBO / N per epoch"
    lines = {line.get_label(): line for line in epoch_ax.get_lines()}
    assert {"SLANG L = 2", "mf-ef"} <= set(lines)
    for label, key in (("SLANG L = 2", "slang"), ("mf-ef", "mf")):
        run = read_run(runs[key])
        np.testing.assert_array_equal(lines[label].get_xdata(), run.history["epoch"])
        np.testing.assert_array_equal(lines[label].get_ydata(), run.history["nll"] + run.history["kl"])
        # the final -ELBO / N and test NLL markers, at the last epoch
        finals = [line for line in epoch_ax.get_lines() if line.get_label().startswith("_")
                  and line.get_color() == lines[label].get_color()]
        values = sorted(float(line.get_ydata()[0]) for line in finals)
        assert values == sorted([run.metrics["train"]["neg_elbo_per_example"], run.metrics["test"]["nll"]])
    legend = [t.get_text() for t in panel_legend(epoch_ax).get_texts()]
    assert legend == ["SLANG L = 2", "mf-ef", "final -ELBO / N", "final test NLL (per test example)"]
    assert [t.get_text() for t in panel_legend(iter_ax).get_texts()] == ["exact-full",
                                                                         "final test NLL (per test example)"]
    # each legend under its axes, not on the (noisy) curves
    fig.canvas.draw()
    for ax in (epoch_ax, iter_ax):
        assert panel_legend(ax).get_window_extent().y1 < ax.get_window_extent().y0
    exact = read_run(runs["exact"])
    (line,) = [ln for ln in iter_ax.get_lines() if ln.get_label() == "exact-full"]
    np.testing.assert_array_equal(line.get_ydata(), exact.history["neg_elbo_per_example"])
    # several runs differ in line style as well as colour (greyscale)
    assert lines["SLANG L = 2"].get_linestyle() != lines["mf-ef"].get_linestyle()
    assert lines["SLANG L = 2"].get_marker() != lines["mf-ef"].get_marker()


def test_a_backend_matplotlib_does_not_know_is_no_matter(runs, tmp_path):
    """The figures are drawn on Agg canvases: ``MPLBACKEND=bogus`` ended ``slang plot`` in matplotlib's ValueError
    traceback as it was imported; it now draws as without it."""
    env = {**os.environ, "MPLBACKEND": "bogus"}
    done = subprocess.run([sys.executable, "-m", "slangcli", "plot", runs["slang"], "--kind", "training", "-o",
                           tmp_path / "t.png"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert (tmp_path / "t.png").read_bytes().startswith(b"\x89PNG")


def test_history_records_the_kl_per_epoch(runs):
    """The KL term per example at each epoch's end: the last is the final posterior's, and the epoch's -ELBO / N
    (the mean minibatch NLL plus it) is an estimate of the final -ELBO / N scored exactly at the end."""
    run = read_run(runs["slang"])
    kl, nll = run.history["kl"], run.history["nll"]
    assert kl.shape == nll.shape == (30,) and np.all(kl > 0)
    n = run.metrics["train"]["n"]
    assert kl[-1] == pytest.approx(run.posterior.kl_to_prior(run.prior_precision) / n, rel=1e-12)
    assert nll[-1] + kl[-1] == pytest.approx(run.metrics["train"]["neg_elbo_per_example"], rel=0.1)
    # runs written before the KL was recorded: the NLL alone
    old = read_run(runs["slang"])
    del old.history["kl"]
    curve = plotdata.training_curve(old, "old", "old.h5")
    np.testing.assert_array_equal(curve.y, nll)
    assert curve.quantity.startswith("training NLL")


def test_training_overlay_of_a_sweep(sweep_dir, render):
    """Many runs: labels name the settings in which runs of one method differ; the legend, under the axes, grows
    the figure by a row per two entries."""
    fig = render(sweep_dir, "--kind", "training")
    epoch_ax, iter_ax = fig.axes  # SLANG's epochs, exact-mf's iterations
    labels = [t.get_text() for ax in fig.axes for t in panel_legend(ax).get_texts()]
    runs = [t for t in labels if not t.startswith("final ")]
    assert len(set(runs)) == len(runs) == 8
    assert "SLANG L = 1, prior_precision = 10.0, seed = 1, split_seed = 1" in runs
    assert len(data_lines(epoch_ax)) == len(data_lines(iter_ax)) == 4
    # labels too long for two columns: one, 4 runs and 2 marker entries in 6 rows
    assert fig.get_figheight() == pytest.approx(figures.TRAINING_HEIGHT + 6 * figures.LEGEND_ROW)
    fig.canvas.draw()
    for ax in fig.axes:  # each legend under its axes and within its panel
        legend, panel = panel_legend(ax).get_window_extent(), ax.figure.bbox
        assert legend.y1 < ax.get_window_extent().y0 and panel.x0 <= legend.x0 and legend.x1 <= panel.x1


def test_method_labels_come_from_the_methods_declarations():
    """A method's name and rank symbol in labels are what its module declares (``display_name``, ``rank_symbol``);
    a method without them, or one this slang does not know, is labelled by its stored name."""
    from types import SimpleNamespace

    def label(method, hyper, compressed=None, **kw):
        run = SimpleNamespace(config={"method": method, "hyper": hyper}, compression=compressed)
        return plotdata.method_label(run, **kw)

    assert label("slang", {"rank": 5}) == "SLANG L = 5"
    assert label("ktied", {"rank": 2}) == "k-tied k = 2"
    assert label("ktied", {"rank": 2}, rank=False) == "k-tied"
    assert label("bbb", {"samples": 2}, {"rank": 3}) == "bbb, compressed to k = 3"
    assert label("bbb", {"samples": 2}, {"rank": 3}, compression=False) == "bbb"
    assert label("not-a-method", {"rank": 4}) == "not-a-method rank = 4"


def test_training_log_axes_follow_the_option(runs, render):
    ax = render(runs["slang"], "--kind", "training", "--log", "xy").axes[0]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    ax = render(runs["slang"], "--kind", "training", "--log", "none").axes[0]
    assert ax.get_xscale() == ax.get_yscale() == "linear"


def test_training_of_a_closed_form_posterior_is_refused(tmp_path):
    """A linear regression solved in closed form drew one point on an axis of "L-BFGS iterations", which it never
    ran; there is no training to plot, and the plot says so."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    path = tmp_path / "lin.csv"
    np.savetxt(path, np.column_stack([X, X @ [1.0, -2.0] + 0.3 * rng.normal(size=60)]), delimiter=",",
               header="a,b,y", comments="")
    runner = CliRunner()
    assert runner.invoke(main, ["fit", str(path), "--method", "exact-full", "-o", str(tmp_path / "r.h5")]).exit_code == 0
    done = runner.invoke(main, ["plot", str(tmp_path / "r.h5"), "--kind", "training", "-o", str(tmp_path / "t.png")])
    assert done.exit_code == 1 and not (tmp_path / "t.png").exists()
    assert done.stderr.splitlines()[-1] == (f"slang: error: {tmp_path / 'r.h5'}: its posterior is a linear "
                                            "regression's closed form, with no training to plot (its -ELBO / N is in "
                                            "slang inspect)")


# ------------------------------------------------------------------------------------------------ calibration


def test_reliability_diagram_matches_stored_bins(runs, render):
    acc_ax, count_ax = render(runs["slang"], runs["exact_mf"], "--kind", "calibration").axes
    assert acc_ax.get_ylabel() == "accuracy in bin (fraction)" and count_ax.get_ylabel() == "test examples"
    assert count_ax.get_xlabel().startswith("confidence")
    bars = [c for c in count_ax.containers if isinstance(c, BarContainer)]
    assert len(bars) == 2
    for key, line, bar in zip(("slang", "exact_mf"), data_lines(acc_ax), bars):
        cal = read_run(runs[key]).metrics["test"]["calibration"]
        assert len(bar.patches) == cal["bins"] == 15
        assert [p.get_height() for p in bar.patches] == cal["count"]
        seen = [i for i, n in enumerate(cal["count"]) if n]
        np.testing.assert_allclose(line.get_xdata(), [cal["confidence"][i] for i in seen], rtol=1e-15)
        np.testing.assert_allclose(line.get_ydata(), [cal["accuracy"][i] for i in seen], rtol=1e-15)
        assert f"ECE {read_run(runs[key]).metrics['test']['ece']:.3f}" in line.get_label()
    # binary confidences are at least 1/2: the axis starts at the bin edge below 0.5
    assert acc_ax.get_xlim()[0] == pytest.approx(7 / 15)


def test_reliability_recomputed_with_other_bins_and_data(runs, render, tmp_path):
    test_file = tmp_path / "other.csv"
    test_file.write_text(csv_text(*binary_problem(n=30, seed=9)))
    _, count_ax = render(runs["slang"], "--kind", "calibration", "--bins", "5", "--data", test_file).axes
    (bar,) = count_ax.containers
    assert len(bar.patches) == 5 and sum(p.get_height() for p in bar.patches) == 30
    out = json.loads(ok("evaluate", runs["slang"], test_file, "--bins", "5", "--json").stdout)
    assert [p.get_height() for p in bar.patches] == out["metrics"]["test"]["calibration"]["count"]


@pytest.mark.parametrize("data", [None, "reg_data"], ids=["own-test-split", "DATA-file"])
def test_regression_coverage_curve(runs, render, data):
    """Interval coverage on the run's own test split, or on a DATA file: at slang evaluate's three levels it is
    what slang evaluate reports with the same samples and seed."""
    given = ["--data", runs[data]] if data else []
    (ax,) = render(runs["reg"], "--kind", "calibration", "--samples", "300", *given).axes
    (line,) = data_lines(ax)
    np.testing.assert_allclose(line.get_xdata(), 100 * np.array(plotdata.COVERAGE_GRID))
    observed = np.asarray(line.get_ydata())
    assert np.all((observed >= 0) & (observed <= 100)) and np.all(np.diff(observed) >= 0)
    assert ax.get_xlabel() == "nominal coverage of the central interval (%)"
    assert ax.get_ylabel() == "test targets inside it (%)"
    assert line.get_label().endswith(f"({40 if data else 15} targets)")  # DATA's 40, or a quarter of 60
    # the same samples as `slang evaluate --samples 300 --seed 0`: the same coverage at its three levels
    out = json.loads(ok("evaluate", runs["reg"], *([runs[data]] if data else []), "--samples", "300",
                        "--json").stdout)
    assert out["metrics"]["test"]["n"] == (40 if data else 15)
    for level, value in out["metrics"]["test"]["coverage"].items():
        i = plotdata.COVERAGE_GRID.index(float(level))
        assert observed[i] == pytest.approx(100 * value, rel=1e-12)


# ------------------------------------------------------------------------------------------------ spectrum


def std_matrices_from_file(path) -> list[np.ndarray]:
    """The posterior standard deviations of the weight matrices of a 3-4-1 network's run file, from its stored
    arrays by dense algebra (not through slang's posterior classes): bbb ``exp(log_sigma)``, SLANG the square
    root of the diagonal of ``(U U^T + diag(d))^-1``, k-tied ``max(U_l V_l^T, floor_l)``. The flat layout is
    W1 (3 x 4, row-major), b1 (4), W2 (4 x 1), b2 (1)."""
    with h5py.File(path, "r") as f:
        g = f["posterior"]
        kind = g.attrs["encoding-type"]
        if kind == "ktied-gaussian":
            return [np.maximum(g[f"U_{l}"][()] @ g[f"V_{l}"][()].T, g["floor"][l]) for l in (0, 1)]
        if kind == "lowrank-gaussian":
            sigma = np.sqrt(np.diag(np.linalg.inv(g["U"][()] @ g["U"][()].T + np.diag(g["d"][()]))))
        else:
            sigma = np.exp(g["log_sigma"][()])
    return [sigma[0:12].reshape(3, 4), sigma[16:20].reshape(4, 1)]


@pytest.mark.parametrize("name", ["bbb", "slang_net", "ktied"])
def test_spectrum_of_a_network_matches_the_svd(runs, render, name):
    """Per weight matrix, the bars are the explained variance of the singular values of its standard deviations,
    for a mean-field, a SLANG and a k-tied posterior; the first bar's percentage sits right of the y axis."""
    fig = render(runs[name], "--kind", "spectrum", "--top", "3")
    assert len(fig.axes) == 2  # weight matrices 3 x 4 and 4 x 1
    fig.canvas.draw()
    for layer, (ax, A) in enumerate(zip(fig.axes, std_matrices_from_file(runs[name]))):
        s = np.linalg.svd(A, compute_uv=False)
        (bar,) = ax.containers
        np.testing.assert_allclose([p.get_height() for p in bar.patches], (100 * s**2 / np.sum(s**2))[:3],
                                   rtol=1e-10, atol=1e-10)
        m, n = A.shape
        assert ax.get_title() == f"weight matrix {layer + 1} ({m} x {n})"
        assert ax.get_yscale() == "log" and ax.get_xlabel() == "singular value i"
        (label,) = ax.texts
        assert label.get_text() == f"{100 * s[0]**2 / np.sum(s**2):.3g} %"
        # from the first bar's left edge rightwards: never over the y axis, however narrow the bars
        assert label.get_window_extent().x0 >= bar.patches[0].get_window_extent().x0
    assert fig.axes[0].get_ylabel() == "explained variance (%)"
    if name == "ktied":  # standard deviations of rank 2 (3 x 4) and 1 (4 x 1): nothing beyond
        assert fig.axes[0].containers[0].patches[2].get_height() < 1e-10


def test_spectrum_label_clears_the_y_axis_with_narrow_bars():
    """Three panels of ten bars (the MNIST figure's layout): the first bar's percentage starts right of the y axis
    (centred on the bar, it ran into the axis and its tick labels)."""
    explained = [np.r_[0.982, np.full(9, 0.002)]] * 3
    spectrum = plotdata.Spectrum("bbb", [(784, 400), (400, 400), (400, 10)], explained, [2, 2, 2])
    fig = figures.spectrum_figure([spectrum], top=10)
    fig.canvas.draw()
    for ax in fig.axes:
        (label,) = ax.texts
        assert label.get_text() == "98.2 %"
        assert label.get_window_extent().x0 > ax.get_window_extent().x0 + 1


def test_spectrum_of_a_compressed_run_marks_the_kept_rank(runs, render):
    run = read_run(runs["compressed"])
    ax = render(runs["compressed"], "--kind", "spectrum").axes[0]
    (bar,) = ax.containers
    np.testing.assert_allclose([p.get_height() for p in bar.patches],
                               100 * run.compression_arrays["explained_variance_0"], rtol=1e-12)
    (kept,) = [line for line in ax.get_lines() if line.get_label() == "kept rank k"]
    assert kept.get_xdata()[0] == 1.5
    # several runs: one line each
    fig = render(runs["compressed"], runs["bbb"], "--kind", "spectrum", "--label", "a", "--label", "b")
    assert [line.get_label() for line in fig.axes[0].get_lines()] == ["a", "kept rank (a)", "b"]


# ------------------------------------------------------------------------------------------------ posterior


def test_posterior_against_exact(runs, render):
    fig = render(runs["slang"], runs["exact_mf"], "--kind", "posterior", "--reference", runs["exact"])
    ref_run, slang = read_run(runs["exact"]), read_run(runs["slang"])
    ax_mean, ax_var, *images, bar = fig.axes
    assert len(images) == 3 and bar.get_ylabel() == "covariance"
    assert ax_mean.get_xlabel() == "reference mean" and ax_var.get_ylabel() == "posterior marginal variance"
    weights = slice(0, 3)  # logistic regression on 3 features: 3 weights, then the bias
    line = data_lines(ax_mean)[0]
    np.testing.assert_array_equal(line.get_xdata(), ref_run.posterior.mean[weights])
    np.testing.assert_array_equal(line.get_ydata(), slang.posterior.mean[weights])
    # SLANG's covariance against the dense inverse of its precision U U^T + diag(d)
    p = slang.posterior
    cov = np.linalg.inv(p.U @ p.U.T + np.diag(p.d))[weights, weights]
    shown = images[1].get_images()[0].get_array()
    np.testing.assert_allclose(shown, cov - np.diag(np.diag(cov)), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(data_lines(ax_var)[0].get_ydata(), np.diag(cov), rtol=1e-10)
    assert "sym. KL" in data_lines(ax_var)[0].get_label()
    assert not np.any(images[2].get_images()[0].get_array())  # mean field: no off-diagonal covariance


def test_posterior_refuses_another_model(runs, tmp_path):
    fails(1, "plot", runs["bbb"], "--kind", "posterior", "--reference", runs["exact"], "-o", tmp_path / "f.png",
          mentions=["not comparable"])
    assert not (tmp_path / "f.png").exists()


# ------------------------------------------------------------------------------------------------ sweep


@pytest.fixture(scope="module")
def sweep_dir(runs):
    """Two methods (SLANG L = 1 and exact-mf), the prior precision swept over 1 and 10, two splits (and seeds)
    each."""
    d = runs["dir"] / "sweep"
    d.mkdir()
    for lam in (1, 10):
        for s in (0, 1):
            for method, extra in (("slang", ["--rank", "1", "--epochs", "5", "--batch-size", "16"]),
                                  ("exact-mf", [])):
                ok("fit", runs["train"], "--test-fraction", "0.25", "--split-seed", s, "--seed", s,
                   "--prior-precision", lam, "--method", method, *extra, "-o", d / f"{method}-{lam}-{s}.h5")
    return d


def test_sweep_means_and_standard_errors(sweep_dir, render):
    fig = render(sweep_dir, "--kind", "sweep", "--metric", "nll")
    (ax,) = fig.axes
    assert ax.get_ylabel() == "test NLL (nats per example)" and ax.get_xlabel() == "prior precision lambda"
    assert "mean +- s.e. over 2 seeds or splits" in fig._suptitle.get_text()
    containers = {c.get_label(): c for c in ax.containers if isinstance(c, ErrorbarContainer)}
    assert set(containers) == {"SLANG L = 1", "exact-mf"}
    for label, method in (("SLANG L = 1", "slang"), ("exact-mf", "exact-mf")):
        values = {lam: [read_run(sweep_dir / f"{method}-{lam}-{s}.h5").metrics["test"]["nll"] for s in (0, 1)]
                  for lam in (1, 10)}
        line, _, (bars,) = containers[label].lines
        np.testing.assert_array_equal(line.get_xdata(), [1, 10])
        np.testing.assert_allclose(np.asarray(line.get_ydata(), dtype=float), [np.mean(values[1]), np.mean(values[10])], rtol=1e-14)
        assert isinstance(bars, LineCollection)
        se = [np.std(values[lam], ddof=1) / np.sqrt(2) for lam in (1, 10)]
        spans = [seg[1][1] - seg[0][1] for seg in bars.get_segments()]
        np.testing.assert_allclose(spans, 2 * np.array(se), rtol=1e-10)
        # visible however small: caps reaching 2 points past each side of the hollow markers
        caps = containers[label].lines[1]
        assert len(caps) == 2 and caps[0].get_markersize() >= line.get_markersize() + 4
        assert line.get_markerfacecolor() == "none"
    assert ax.get_xscale() == "log"  # 1 to 10: a decade


def test_sweep_parameter_detection_and_metric_paths(sweep_dir, runs, tmp_path):
    loaded = plotdata.load_runs([sweep_dir])
    params = [plotdata.run_parameters(r) for _, r in loaded]
    assert plotdata.swept_parameter(params) == "prior_precision"
    assert {p["split_seed"] for p in params} == {0, 1}
    run = loaded[0][1]
    assert plotdata.metric_value(run, "test.calibration.bins", "r") == 15
    assert plotdata.metric_value(run, "error", "r") == pytest.approx(100 * (1 - run.metrics["test"]["accuracy"]))
    # a metric no run has is a usage error, as a --param no run has (it was exit 1, a data error)
    for metric in ("rmse", "bogus"):
        fails(2, "plot", sweep_dir, "--kind", "sweep", "--metric", metric, "-o", tmp_path / "f.png",
              mentions=[f"--metric {metric!r}: no run has this metric (known: nll, accuracy, error"])
    fails(2, "plot", sweep_dir, "--kind", "sweep", "--param", "nonesuch", "-o", tmp_path / "f.png",
          mentions=["nonesuch"])
    # nothing swept (one setting, two seeds): asks for --param
    fails(2, "plot", sweep_dir / "slang-1-0.h5", sweep_dir / "slang-1-1.h5", "--kind", "sweep", "-o",
          tmp_path / "f.png", mentions=["nothing to sweep over"])
    assert not (tmp_path / "f.png").exists()


def test_runs_on_different_data_are_lines_of_their_own(sweep_dir, runs, tmp_path):
    """A sweep over two data files averaged their runs together as if they were seeds (a rank-1 point the mean
    of Boston's and concrete's RMSE; probe 10): each file's runs are now a series of their own, and the data are
    never taken for the swept setting."""
    other = tmp_path / "other.csv"
    other.write_bytes(Path(runs["train"]).read_bytes())
    extra = []
    for lam in (1, 10):
        out = tmp_path / f"other-{lam}.h5"
        ok("fit", other, "--test-fraction", "0.25", "--split-seed", 0, "--prior-precision", lam, "--method",
           "exact-mf", "-o", out)
        extra.append(out)
    # (and a third file of the same name as the first, elsewhere: named by enough of its path to tell them apart)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    twin = elsewhere / Path(runs["train"]).name
    twin.write_bytes(Path(runs["train"]).read_bytes())
    ok("fit", twin, "--test-fraction", "0.25", "--split-seed", 0, "--method", "exact-mf", "-o", tmp_path / "twin.h5")
    loaded = plotdata.load_runs([sweep_dir, *extra, tmp_path / "twin.h5"])
    params = [plotdata.run_parameters(r) for _, r in loaded]
    assert {p["data"] for p in params} == {str(Path(runs["train"]).resolve()), str(other.resolve()), str(twin)}
    assert plotdata.swept_parameter(params) == "prior_precision"
    named = {p["data"] for p in plotdata._named_data(params)}
    assert named == {str(Path(*Path(runs["train"]).parts[-2:])), "other.csv", f"elsewhere/{twin.name}"}
    loaded = loaded[:-1]
    result = plotdata.sweep(loaded, "nll")
    by_label = {s.label: s for s in result.series}
    name = Path(runs["train"]).name
    assert set(by_label) == {f"SLANG L = 1, data = {name}", f"exact-mf, data = {name}", "exact-mf, data = other.csv"}
    assert by_label["exact-mf, data = other.csv"].n == [1, 1]
    assert by_label[f"exact-mf, data = {name}"].n == [2, 2]


def test_a_method_without_the_swept_parameter_is_a_level(sweep_dir, runs, render, tmp_path):
    """Sweeping SLANG's rank with an exact-full run beside it: exact-full has no rank, so it is drawn as a
    horizontal line."""
    d = tmp_path / "ranks"
    d.mkdir()
    for rank in (1, 2):
        ok("fit", runs["train"], "--test-fraction", "0.25", "--rank", rank, "--epochs", "5", "-o", d / f"r{rank}.h5")
    ok("fit", runs["train"], "--test-fraction", "0.25", "--method", "exact-full", "-o", d / "exact.h5")
    (ax,) = render(d, "--kind", "sweep", "--metric", "elbo").axes
    assert ax.get_xlabel() == "rank (SLANG L, k-tied k)"
    (level,) = [line for line in ax.get_lines() if line.get_label() == "exact-full"]
    assert level.get_ydata()[0] == read_run(d / "exact.h5").metrics["train"]["neg_elbo_per_example"]


@pytest.fixture(scope="module")
def swept(runs):
    """The output directory of a real ``slang sweep`` (a local Dask cluster of 2 worker processes): SLANG L = 1
    and exact-mf at prior precisions 1 and 10 on two splits; a data file that cannot be read, whose fits fail (rows
    of the table, no run files); and, as an interrupted sweep leaves it, the checkpoint of an unfinished fit."""
    pytest.importorskip("distributed")
    d = runs["dir"] / "swept"
    bad = runs["dir"] / "bad.csv"
    bad.write_text("a,b,label\n1,2,yes\n3,oops,no\n")
    common = {"data": [str(runs["train"]), str(bad)], "test-fraction": 0.25, "prior-precision": [1, 10],
              "split-seed": [0, 1]}
    spec = runs["dir"] / "grid.json"
    spec.write_text(json.dumps([{**common, "method": "slang", "rank": 1, "epochs": 5, "batch-size": 16},
                                {**common, "method": "exact-mf"}]))
    result = invoke("sweep", "--spec", spec, "-o", d, "--workers", 2, "--json")
    assert result.exit_code == 1, (result.stderr, result.exception)  # the bad file's fits failed
    summary = json.loads(result.stdout)
    assert summary["complete"] == 8 and summary["failed"] == 8
    # a fit of the same grid at prior precision 100, stopped after its first step (as Ctrl-C leaves it)
    from slangcli.data.sources import DataOptions
    from slangcli.errors import Interrupted
    from slangcli.runfile.io import write_run
    from slangcli.training.checkpoints import Checkpointing
    from slangcli.training.fitting import fit

    name = make_point({"data": str(runs["train"]), "test-fraction": "0.25", "prior-precision": "100.0",
                       "split-seed": "0", "method": "slang", "rank": "1", "epochs": "5", "batch-size": "16"}).name
    polls = []
    stop = Checkpointing(write=lambda r: write_run(d / name, r), stop=lambda: polls.append(1) or len(polls) > 1,
                         every_steps=1)
    with pytest.raises(Interrupted):
        fit(DataOptions(path=str(runs["train"]), test_fraction=0.25), method="slang", hyper={"rank": 1},
            prior_precision=100.0, epochs=5, batch_size=16, checkpointing=stop)
    assert read_run(d / name).status == "checkpoint"
    return d


def test_sweep_figure_of_a_slang_sweep_directory(swept, render):
    """``slang plot DIR --kind sweep`` on what ``slang sweep`` wrote: the failed fits (in the table, without run
    files) and the checkpoint (left out with a note) leave the figure as the complete fits make it; each point is
    the mean and standard error, over the two splits, of the test NLL in the sweep's own results table."""
    table = json.loads((swept / "results.json").read_text())
    assert {r["status"] for r in table} == {"complete", "failed"} and len(table) == 16
    result = invoke("plot", swept, "--kind", "sweep", "-o", swept.parent / "swept.png")
    assert result.exit_code == 0 and "a checkpoint (fit not finished); left out" in result.stderr
    (ax,) = render(swept, "--kind", "sweep", "--metric", "nll").axes
    assert ax.get_xlabel() == "prior precision lambda" and ax.get_ylabel() == "test NLL (nats per example)"
    containers = {c.get_label(): c for c in ax.containers if isinstance(c, ErrorbarContainer)}
    assert set(containers) == {"SLANG L = 1", "exact-mf"}
    for label, method in (("SLANG L = 1", "slang"), ("exact-mf", "exact-mf")):
        nll = {lam: [r["test_nll"] for r in table if r["status"] == "complete" and r.get("method", "slang") == method
                     and float(r["prior-precision"]) == lam] for lam in (1.0, 10.0)}
        assert [len(v) for v in nll.values()] == [2, 2]
        line, _, (bars,) = containers[label].lines
        np.testing.assert_array_equal(line.get_xdata(), [1, 10])
        np.testing.assert_allclose(np.asarray(line.get_ydata(), dtype=float), [np.mean(v) for v in nll.values()],
                                   rtol=1e-14)
        spans = [seg[1][1] - seg[0][1] for seg in bars.get_segments()]
        np.testing.assert_allclose(spans, [2 * np.std(v, ddof=1) / np.sqrt(2) for v in nll.values()], rtol=1e-10)


# ------------------------------------------------------------------------------------------------ the command


def test_png_pixels_follow_dpi(runs, tmp_path, saved):
    import PIL.Image

    out = tmp_path / "f.png"
    ok("plot", runs["slang"], "--kind", "training", "--dpi", "100", "-o", out)
    ((fig, _),) = saved
    assert fig.get_figwidth() == 3.4  # a paper column; the height holds the axes and the legend under them
    with PIL.Image.open(out) as image:
        assert image.size == (340, round(100 * fig.get_figheight())) and image.mode == "P"  # a 256-colour palette


def test_svg_output_and_labels(runs, tmp_path):
    out = tmp_path / "f.svg"
    ok("plot", runs["slang"], "--kind", "training", "--label", "mine", "--title", "My title", "-o", out)
    text = out.read_text()
    assert text.startswith("<?xml") and "My title" in text and "mine" in text


@pytest.mark.parametrize("args, mention", [
    (["--kind", "training", "-o", "f.jpg"], ".png, .pdf or .svg"),
    (["--kind", "training", "--reference", "x.h5", "-o", "f.png"], "--reference"),
    (["--kind", "posterior", "-o", "f.png"], "--reference"),
])
def test_usage_errors(runs, tmp_path, args, mention):
    args = [a if a not in ("f.jpg", "f.png") else tmp_path / a for a in args]
    fails(2, "plot", runs["slang"], *args, mentions=[mention])
    assert list(tmp_path.iterdir()) == []


def test_bad_run_file_leaves_no_figure(tmp_path, runs):
    bad = tmp_path / "bad.h5"
    bad.write_text("not hdf5")
    fails(1, "plot", runs["slang"], bad, "--kind", "training", "-o", tmp_path / "f.png", mentions=["bad.h5"])
    fails(1, "plot", tmp_path / "empty", "--kind", "training", "-o", tmp_path / "f.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.h5"]


def test_without_matplotlib_says_how_to_install(runs, tmp_path):
    """matplotlib blocked from importing (``sys.modules[name] = None``): one line naming the extra, exit 3 (as
    slang sweep without Dask; it exited 1, a bad input's code)."""
    code = textwrap.dedent(f"""
        import sys
        sys.modules["matplotlib"] = None
        from slangcli.cli import main
        main(["plot", {str(runs["slang"])!r}, "--kind", "training", "-o", {str(tmp_path / "f.png")!r}])
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.strip() == "slang: error: slang plot needs matplotlib, an optional extra: " \
                                  "pip install 'slangcli[plot]'"
    assert not (tmp_path / "f.png").exists()
    # and the other commands do not import it
    code = "import sys; from slangcli.cli import main; print('matplotlib' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_a_prediction_file_in_a_directory_of_runs_is_left_out(runs, tmp_path):
    """``slang plot DIR`` failed outright ("not a slang run file") when DIR held a prediction file (``slang predict
    -o P.h5``) beside the runs, where "a directory stands for every run file under it". Found in a directory it
    is left out with a note; named, it is still refused."""
    d = tmp_path / "runs"
    d.mkdir()
    shutil.copy(runs["slang"], d / "slang.h5")
    ok("predict", d / "slang.h5", runs["train"], "-o", d / "predictions.h5")
    result = ok("plot", d, "--kind", "training", "-o", tmp_path / "t.png")
    assert f"{d / 'predictions.h5'}: not a run file (a prediction file?); left out" in result.stderr
    named = invoke("plot", d / "predictions.h5", "--kind", "training", "-o", tmp_path / "u.png")
    assert named.exit_code == 1 and "not a slang run file" in named.stderr


@pytest.mark.parametrize("kind, option", [("training", ["--bins", "3"]), ("training", ["--top", "2"]),
                                          ("spectrum", ["--log", "y"]), ("calibration", ["--metric", "nll"]),
                                          ("sweep", ["--block", "8"]), ("training", ["--samples", "5"])])
def test_an_option_of_another_kind_is_refused(runs, tmp_path, kind, option):
    """``--kind training --bins 3 --top 2 --samples 5 --block 3`` drew the default figure, every option ignored,
    while --reference was already refused outside --kind posterior."""
    result = invoke("plot", runs["slang"], "--kind", kind, *option, "-o", tmp_path / "f.png")
    assert result.exit_code == 2 and f"{option[0]} applies to --kind " in result.stderr
    assert f"not to --kind {kind}" in result.stderr and not (tmp_path / "f.png").exists()


def test_a_run_without_test_data_is_told_to_use_data(runs, tmp_path):
    """plot said "pass a data file", where its option is --data (it takes no DATA argument)."""
    run = tmp_path / "no-test.h5"
    ok("fit", runs["train"], "-o", run, "--epochs", "2")
    fails(2, "plot", run, "--kind", "calibration", "-o", tmp_path / "c.png",
          mentions=[f"{run}: the run has no test data; pass a data file with --data"])
    assert not (tmp_path / "c.png").exists()


def test_json_says_what_was_drawn(runs, tmp_path):
    """plot had no --json, though every other command prints one JSON object on stdout with it."""
    out = tmp_path / "t.png"
    result = invoke("plot", runs["slang"], runs["mf"], "--kind", "training", "-o", out, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"output": str(out), "kind": "training",
                                         "runs": [str(runs["slang"]), str(runs["mf"])],
                                         "labels": ["SLANG L = 2", "mf-ef"]}
    assert out.exists()
