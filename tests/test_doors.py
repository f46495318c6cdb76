"""Every door gives one answer: ``slang fit``, ``slangcli.fit`` and the estimators standardise alike by default and
fit the same posterior bit for bit from the same data, options and seed; and a fit that learned next to nothing
says so.

The data are shaped like Palmer penguins' measurements (bill length and depth, flipper length in mm, body mass in
g): columns far from unit scale and far from centred, which a linear model used as read cannot fit in its budget.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

import slangcli
from slangcli import SLANGClassifier, SLANGRegressor
from slangcli.runfile.io import read_run


def penguins_shaped(n=333, seed=0):
    """``(X, body mass)``: bill length 44 +- 5.4, bill depth 17 +- 2, flipper length 201 +- 14 (mm); body mass
    4200 g plus a linear effect of each and noise of 350 g (about 80 % of its variance explained by them)."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.normal(44, 5.4, n), rng.normal(17, 2, n), rng.normal(201, 14, n)]).round(1)
    mass = 4200 + 20 * (X[:, 0] - 44) - 40 * (X[:, 1] - 17) + 50 * (X[:, 2] - 201) + rng.normal(0, 350, n)
    return X, mass.round()


@pytest.fixture(scope="module")
def penguins(tmp_path_factory):
    d = tmp_path_factory.mktemp("penguins")
    X, mass = penguins_shaped()
    (d / "penguins.csv").write_text("bill_length_mm,bill_depth_mm,flipper_length_mm,body_mass_g\n" + "".join(
        f"{a:.1f},{b:.1f},{c:.1f},{m:.0f}\n" for (a, b, c), m in zip(X, mass)))
    return d


def slang(*args, cwd):
    proc = subprocess.run([sys.executable, "-m", "slangcli", *map(str, args), "--no-progress"], cwd=cwd,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return proc


@pytest.mark.parametrize("hidden", [(), (5,)], ids=["linear", "network"])
def test_every_door_standardises_by_default_and_fits_the_same_posterior(penguins, tmp_path, hidden):
    """A linear model was fitted to raw features by slang fit and the API but a network standardised; the
    estimators standardised neither (SLANGRegressor(hidden=(50,)) against slang fit --hidden 50: wine RMSE 0.638
    against 0.610)."""
    X, mass = penguins_shaped()
    net = ["--hidden", ",".join(map(str, hidden))] if hidden else []
    slang("fit", penguins / "penguins.csv", "-o", tmp_path / "cli.h5", "--epochs", "3", *net, cwd=tmp_path)
    cli = read_run(tmp_path / "cli.h5")
    api = slangcli.fit(X, mass, hidden=hidden, epochs=3).run
    estimator = SLANGRegressor(hidden=hidden, epochs=3, random_state=0).fit(X, mass).result_.run
    for run in (cli, api, estimator):
        assert run.data["standardize"] is True
        np.testing.assert_array_equal(run.posterior.mean, cli.posterior.mean)
        np.testing.assert_array_equal(run.posterior.U, cli.posterior.U)
        np.testing.assert_array_equal(run.posterior.d, cli.posterior.d)


def test_the_classifier_and_slang_fit_give_the_same_posterior(tmp_path):
    rng = np.random.default_rng(3)
    X = rng.normal(50, 10, size=(80, 3)).round(2)
    labels = np.where(X[:, 0] - X[:, 1] > 0, "gentoo", "adelie")
    (tmp_path / "d.csv").write_text("a,b,c,species\n" + "".join(f"{a},{b},{c},{s}\n" for (a, b, c), s in
                                                               zip(X, labels)))
    slang("fit", "d.csv", "-o", "cli.h5", "--epochs", "3", cwd=tmp_path)
    estimator = SLANGClassifier(epochs=3).fit(X, labels)
    np.testing.assert_array_equal(estimator.result_.posterior.mean, read_run(tmp_path / "cli.h5").posterior.mean)


def test_a_linear_regression_of_raw_measurements_learns_or_says_it_did_not(penguins, tmp_path):
    """Raw, a linear regression of body mass on the measurements learned nothing and said nothing (test RMSE
    829.5 against 829.9 for the training mean, every prediction 4194 +- 0.45 g). By default the features are now
    standardised and the fit explains most of the variance; used as read, the fit says it is barely better than
    the constant predictor and names the cause."""
    common = ["fit", "penguins.csv", "--target", "body_mass_g", "--test-fraction", "0.2", "--json"]
    default = slang(*common, "-o", tmp_path / "default.h5", cwd=penguins)
    spread = float(np.std(penguins_shaped()[1]))  # about what the constant predictor's RMSE is
    metrics = json.loads(default.stdout)["metrics"]
    assert metrics["test"]["rmse"] < 0.6 * spread, metrics
    assert "warning" not in default.stderr, default.stderr
    raw = slang(*common, "--no-standardize", "-o", tmp_path / "raw.h5", cwd=penguins)
    metrics = json.loads(raw.stdout)["metrics"]
    warnings = [line for line in raw.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1, raw.stderr
    assert metrics["test"]["rmse"] > 0.9 * spread, metrics
    assert warnings[0].startswith("slang: warning: the fit is barely better than a constant predictor on the test "
                                  f"rows (RMSE {metrics['test']['rmse']:.4g} against "), warnings
    assert "the features are used as read" in warnings[0] and "--standardize" in warnings[0]


def test_without_test_rows_the_check_is_made_on_training_rows(penguins, tmp_path):
    raw = slang("fit", "penguins.csv", "--no-standardize", "-o", tmp_path / "raw.h5", cwd=penguins)
    assert "barely better than a constant predictor even on 333 of its own training rows" in raw.stderr
    default = slang("fit", "penguins.csv", "-o", tmp_path / "default.h5", cwd=penguins)
    assert "warning" not in default.stderr, default.stderr


def test_a_classifier_that_learned_nothing_says_so(tmp_path):
    """Labels independent of the features: the test NLL is no better than the class frequencies'."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(400, 3)).round(3)
    y = rng.integers(0, 2, 400)
    (tmp_path / "noise.csv").write_text("a,b,c,y\n" + "".join(f"{a},{b},{c},{t}\n" for (a, b, c), t in zip(X, y)))
    proc = slang("fit", "noise.csv", "--test-fraction", "0.25", "-o", "r.h5", cwd=tmp_path)
    assert re.search(r"slang: warning: the fit is (barely better than|worse than) a constant predictor on the test "
                     r"rows \(NLL", proc.stderr), proc.stderr
    assert "the features may say little about the target" in proc.stderr


def test_a_fixed_noise_precision_far_too_high_is_named_by_every_door(tmp_path):
    """SLANG at a fixed noise precision of 10 on a linear target of noise 0.3 (standardised, 0.13) barely moved:
    test RMSE 3.9 against 2.0 for the training mean, where the learned noise precision gives 0.29. The command
    line warned but blamed the length of the fit; slangcli.fit and the estimators said nothing. Each door now
    names the fixed noise precision, the command line on stderr and Python as a UserWarning."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + rng.normal(scale=0.3, size=300)
    options = dict(hidden=20, likelihood="gaussian", noise_precision=10.0, epochs=50, seed=0)
    cause = r"likely cause: the fixed noise_precision 10 says the noise's standard deviation is 0\.\d+.*" \
            r"\(noise_precision='auto' learns it as the fit goes\)"
    with pytest.warns(UserWarning, match=r"^the test predictive \(RMSE 3\.\d+.*far worse.*" + cause):
        slangcli.fit(X[:200], y[:200], X_test=X[200:], y_test=y[200:], **options)
    barely = r"^the fit is worse than a constant predictor even on 300 .*"
    with pytest.warns(UserWarning, match=barely + cause):
        SLANGRegressor(hidden=(20,), noise_precision=10.0, epochs=50).fit(X, y)
    np.savetxt(tmp_path / "train.csv", np.column_stack([X[:200], y[:200]]), delimiter=",")
    np.savetxt(tmp_path / "test.csv", np.column_stack([X[200:], y[200:]]), delimiter=",")
    proc = slang("fit", "train.csv", "--test", "test.csv", "--likelihood", "gaussian", "--noise-precision", "10",
                 "--hidden", "20", "--epochs", "50", "-o", "r.h5", cwd=tmp_path)
    assert "slang: warning: the test predictive (RMSE 3." in proc.stderr and "(--noise-precision auto learns it as the fit goes)" \
        in proc.stderr, proc.stderr
    # learned, the noise precision fits, and nothing is said
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        learned = slangcli.fit(X[:200], y[:200], X_test=X[200:], y_test=y[200:],
                               **{**options, "noise_precision": "auto"})
    assert learned.metrics["test"]["rmse"] < 0.35


def test_a_fit_stalled_by_a_fixed_noise_precision_is_said_even_when_it_beats_a_constant():
    """SLANG on a linear target at the true noise precision (12.9 on the standardised scale) left its posterior mean
    shrunk to a fifth of the exact posterior's, its standard deviations a third, and said nothing: the fit beat the
    constant predictor, so no warning came. The residuals of its own training rows, far above the noise the fixed
    precision claims, now make a warning; learned, or at a lower fixed precision, the fit reaches the posterior and
    nothing is said."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.7 * rng.normal(size=200) + 1.0
    options = dict(method="slang", likelihood="gaussian", standardize=False)
    with pytest.warns(UserWarning, match=r"^the fixed noise_precision 12\.9 says the noise's standard deviation is "
                                         r"0\.699, but the posterior mean's residuals on 200 training rows have an "
                                         r"RMSE of 2\.\d+: .*\(noise_precision='auto' learns it as the fit goes\)$"):
        stalled = slangcli.fit(X, y, noise_precision=12.9, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        learned = slangcli.fit(X, y, noise_precision="auto", **options)
        slangcli.fit(X, y, noise_precision=2.0, **options)
    exact = slangcli.fit(X, y, method="exact-full", likelihood="gaussian", standardize=False, noise_precision=12.9)
    assert np.abs(stalled.posterior.mean[:3]).max() < 0.3 * np.abs(exact.posterior.mean[:3]).max()
    np.testing.assert_allclose(learned.posterior.mean, exact.posterior.mean, atol=0.02)


@pytest.mark.parametrize("missing", ["impute", "drop"])
def test_slangcli_fit_treats_missing_cells_as_slang_fit_missing_does(tmp_path, missing):
    """slangcli.fit refused a DataFrame with a missing cell and named slang fit --missing impute, the one door that
    took it; missing='impute' and missing='drop' now fit the posterior slang fit fits, bit for bit, and a model
    fitted with impute fills a prediction's missing cells in with the same stored values. A row without its target
    is left out by both (slangcli.fit refused it: "y: row 30 is NaN")."""
    pd = pytest.importorskip("pandas")
    X, mass = penguins_shaped(n=120, seed=3)
    X, mass = X.copy(), mass.astype(float)
    X[[4, 17, 60], [0, 2, 1]] = np.nan
    mass[[30, 31]] = np.nan
    names = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm"]
    (tmp_path / "p.csv").write_text("bill_length_mm,bill_depth_mm,flipper_length_mm,body_mass_g\n" + "".join(
        ",".join("NA" if np.isnan(v) else f"{v:.1f}" for v in row) + ("," if np.isnan(m) else f",{m:.0f}") + "\n"
        for row, m in zip(X, mass)))
    slang("fit", tmp_path / "p.csv", "-o", tmp_path / "cli.h5", "--epochs", "3", "--missing", missing, cwd=tmp_path)
    cli = read_run(tmp_path / "cli.h5")
    frame = pd.DataFrame(X, columns=names)
    said = []
    api = slangcli.fit(frame, pd.Series(mass, name="body_mass_g"), missing=missing, epochs=3, notify=said.append)
    assert "y: 2 rows with a missing target left out: a target is never imputed" in said
    assert api.run.data["options"]["missing"] == missing
    np.testing.assert_array_equal(api.posterior.mean, cli.posterior.mean)
    np.testing.assert_array_equal(api.run.arrays["feature_mean"], cli.arrays["feature_mean"])
    if missing == "impute":  # the stored values, the training means, fill a prediction's missing cells in
        from slangcli.data.schema import schema_of

        fills = {column.name: column.fill for column in schema_of(api.run).columns}
        fitted = X[~np.isnan(mass)]  # (the rows without a target are no training rows)
        assert fills == pytest.approx({name: np.nanmean(fitted[:, j]) for j, name in enumerate(names)}, rel=1e-12)
        gap = frame.iloc[[4]]
        np.testing.assert_array_equal(api.predict(gap, missing="impute").mean, api.predict(gap.fillna(fills)).mean)
    with pytest.raises(ValueError, match="missing='impute' fills such cells in"):
        slangcli.fit(frame, mass, epochs=1)
    # a column of text beside them: its cells are not missing values of the numbers (drop kept no row)
    frame["island"] = np.where(np.arange(len(frame)) % 2, "Biscoe", "Dream")
    frame.loc[9, "island"] = None
    with_text = slangcli.fit(frame, mass, missing=missing, epochs=1)
    assert with_text.run.data["train"]["rows"] == (len(frame) - 6 if missing == "drop" else len(frame) - 2)
    with pytest.raises(ValueError, match="unknown missing 'fill'"):
        slangcli.fit(frame, mass, missing="fill")


@pytest.mark.parametrize("missing", ["impute", "drop"])
def test_a_test_row_without_its_target_is_left_out_by_both_doors(tmp_path, missing):
    """slang fit --test leaves out a test file's row without a target (with a note); slangcli.fit refused y_test
    with a NaN ("y_test: row 3 is NaN") under the same missing policy. Both now score the same rows alike."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(70, 2))
    y = X @ [1.0, -0.5] + 0.2 * rng.normal(size=70)
    y_test = y[50:].copy()
    y_test[[3, 11]] = np.nan
    rows = lambda A, t: "".join(f"{a:.6f},{b:.6f}," + ("" if np.isnan(v) else f"{v:.6f}") + "\n"
                                for (a, b), v in zip(A, t))
    (tmp_path / "train.csv").write_text("a,b,y\n" + rows(X[:50], y[:50]))
    (tmp_path / "test.csv").write_text("a,b,y\n" + rows(X[50:], y_test))
    slang("fit", tmp_path / "train.csv", "--test", tmp_path / "test.csv", "--missing", missing, "--method",
          "exact-full", "-o", tmp_path / "cli.h5", cwd=tmp_path)
    cli = read_run(tmp_path / "cli.h5")
    read = np.loadtxt(tmp_path / "train.csv", delimiter=",", skiprows=1)  # (the file's digits)
    test = np.genfromtxt(tmp_path / "test.csv", delimiter=",", skip_header=1)
    said = []
    api = slangcli.fit(read[:, :2], read[:, 2], X_test=test[:, :2], y_test=test[:, 2], missing=missing,
                       method="exact-full", notify=said.append)
    assert "y_test: 2 rows with a missing target left out: a target is never imputed" in said
    assert api.metrics["test"]["n"] == cli.metrics["test"]["n"] == 18
    assert api.metrics["test"]["rmse"] == pytest.approx(cli.metrics["test"]["rmse"], rel=1e-12)


def test_sparse_indicators_standardised_are_named_as_the_likely_cause():
    """LIBSVM's a1a (123 sparse 0/1 features), standardised by default: test NLL 1.22 against 0.34 used as read,
    and the warning said to check the features' scales with --standardize, the option already on. A poor fit of
    standardised rare indicators now names them."""
    from slangcli.data.prepare import prepare
    from slangcli.training.fitting import _sparse_indicators

    rng = np.random.default_rng(0)
    X = np.column_stack([rng.normal(size=2000), rng.random(2000) < 0.5, rng.random(2000) < 0.004]).astype(float)
    y = (X[:, 0] > 0).astype(int)
    standardised = prepare(X, y, None, None, likelihood="auto", standardize=True, feature_names=["a", "b", "rare"])
    said = _sparse_indicators(standardised)
    assert said.startswith("likely cause: 1 of the 3 features are 0/1 indicators that are rarely 1, which "
                           "standardising scales up to ") and "('rare')" in said and "--no-standardize" in said
    assert _sparse_indicators(prepare(X, y, None, None, likelihood="auto", standardize=False)) is None
    common = prepare(X[:, :2], y, None, None, likelihood="auto", standardize=True)  # a 1 on half the rows
    assert _sparse_indicators(common) is None


def test_the_sparse_indicator_check_holds_a_small_share_of_the_data(monkeypatch):
    """The check made four float64 copies of its 5 000 rows at once: at 5 000 columns the fit's peak memory went
    from 501 to 970 MB, at 20 000 LIBSVM columns up by 2.2 GB. In blocks of columns it holds a few megabytes, and
    finds the same feature (a rare indicator placed in the last block)."""
    import tracemalloc

    from slangcli.data.prepare import prepare
    from slangcli.training import fitting

    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 1200))
    X[:, 1100] = rng.random(2000) < 0.004
    prepared = prepare(X, (X[:, 0] > 0).astype(int), None, None, likelihood="auto", standardize=True)
    tracemalloc.start()
    try:
        said = fitting._sparse_indicators(prepared)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert said.startswith("likely cause: 1 of the 1200 features are 0/1 indicators") and "'x1100'" in said, said
    assert peak < 0.25 * prepared.X_train.nbytes, (peak, prepared.X_train.nbytes)


def test_a_far_worse_fit_of_raw_features_names_their_magnitude(tmp_path):
    """Features of about 1e10 used as read: test NLL of hundreds, and the warning gave only its general advice
    where the README promises the magnitude named as the likely cause (as the barely-better warning did)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3)) * 1e10
    np.savetxt(tmp_path / "big.csv", np.column_stack([X, X[:, 0] > 0]), delimiter=",")
    proc = slang("fit", "big.csv", "--no-standardize", "--test-fraction", "0.3", "--epochs", "5", "-o", "b.h5",
                 cwd=tmp_path)
    warned = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert len(warned) == 1 and "is far worse than a constant predictor's" in warned[0], proc.stderr
    assert "likely cause: the features are used as read, of magnitudes (root mean square) from 9." in warned[0]


def test_a_dataframe_of_numbers_written_as_text_is_read_as_its_csv(tmp_path):
    """A DataFrame of numbers held as strings (read_csv(dtype=str)) was fitted as one category per distinct value
    (198 inputs for 2 columns), where slang fit reads the same cells of its CSV as numbers; and a column of
    numbers with one word among them was made a category, where slang fit refuses the word. Both doors now read
    them alike, the posterior bit for bit."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    X = np.round(rng.normal(size=(100, 2)), 3)
    y = (X @ [1.0, -1.0] > 0).astype(int)
    frame = pd.DataFrame(X, columns=["a", "b"]).astype(str)
    frame.assign(y=y).to_csv(tmp_path / "s.csv", index=False)
    slang("fit", tmp_path / "s.csv", "-o", tmp_path / "cli.h5", "--epochs", "3", cwd=tmp_path)
    api = slangcli.fit(frame, pd.Series(y, name="y"), epochs=3)
    assert api.feature_names == ["a", "b"]
    np.testing.assert_array_equal(api.posterior.mean, read_run(tmp_path / "cli.h5").posterior.mean)
    frame.loc[3, "a"] = "x"
    with pytest.raises(ValueError, match=r"^X: row 3, column 'a': 'x' is not a number \(other rows of the column are "
                                         r"numbers, such as '0\.126' in row 0\)"):
        slangcli.fit(frame, y, epochs=1)
