"""The scikit-learn estimators, checked by scikit-learn itself (a test dependency only)."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from click.testing import CliRunner

from slangcli import SLANGClassifier, SLANGRegressor
from slangcli.cli import main
from slangcli.errors import DataError

sklearn = pytest.importorskip("sklearn")
from sklearn.model_selection import GridSearchCV, cross_val_score  # noqa: E402
from sklearn.pipeline import Pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from sklearn.utils.estimator_checks import check_estimator  # noqa: E402

# Checks scikit-learn skips on its own here: check_array_api_input (it needs SCIPY_ARRAY_API set and an array
# API library; slang computes in NumPy only). None is skipped by slang. pandas is in the test extra, so the checks
# with DataFrame inputs run; where it is absent scikit-learn skips those too.
SKIPPED_BY_SKLEARN = {"check_array_api_input"}
try:
    import pandas  # noqa: F401
except ImportError:
    SKIPPED_BY_SKLEARN |= {"check_classifier_data_not_an_array", "check_regressor_data_not_an_array"}


@pytest.mark.filterwarnings("ignore:Estimator .* does not inherit from:UserWarning",
                            "ignore::sklearn.exceptions.SkipTestWarning")
@pytest.mark.parametrize("estimator", [SLANGClassifier(epochs=10, predict_samples=50),
                                       SLANGRegressor(epochs=10, predict_samples=50)], ids=lambda e: type(e).__name__)
def test_check_estimator(estimator):
    results = check_estimator(estimator, on_fail=None)
    failed = {r["check_name"]: repr(r["exception"]) for r in results if r["status"] == "failed"}
    skipped = {r["check_name"] for r in results if r["status"] == "skipped"}
    assert not failed, failed
    assert skipped <= SKIPPED_BY_SKLEARN, skipped
    assert len(results) > 40  # the whole suite ran


def _regression(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(loc=5.0, scale=3.0, size=(n, 3))
    return X, X @ np.array([1.0, -2.0, 0.5]) + rng.normal(scale=0.3, size=n)


def test_pipeline_cross_val_score_and_return_std():
    X, y = _regression()
    model = Pipeline([("scale", StandardScaler()),
                      ("slang", SLANGRegressor(noise_precision=10.0, epochs=50, method="bbb", method_params={"lr": 0.05},
                                                predict_samples=100))])
    scores = cross_val_score(model, X, y, cv=3)
    assert scores.shape == (3,) and np.all(scores > 0.99), scores
    mean, std = model.fit(X, y).predict(X[:6], return_std=True)
    assert mean.shape == std.shape == (6,) and np.all(std > 0)
    split = model[-1].result_.predict(StandardScaler().fit(X).transform(X[:6]), samples=100)
    np.testing.assert_allclose(split.std_total ** 2, split.std_aleatoric ** 2 + split.std_epistemic ** 2, rtol=1e-9)


def test_grid_search_over_methods_and_their_hyperparameters():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(90, 2))
    y = np.where(X[:, 0] - X[:, 1] > 0, "pos", "neg")
    search = GridSearchCV(SLANGClassifier(epochs=5, predict_samples=20),
                          {"method": ["slang", "mf-ef"], "method_params": [{"samples": 2}, {"samples": 4}]}, cv=2)
    search.fit(X, y)
    assert set(search.best_estimator_.classes_) == {"neg", "pos"}
    assert search.predict(X[:3]).dtype.kind == "U"
    assert search.best_estimator_.predict_proba(X[:3]).shape == (3, 2)


def test_the_estimators_fit_what_slangcli_fit_fits():
    """The estimator is a thin layer: its posterior is that of slangcli.fit on the same arrays and seed."""
    import slangcli

    X, y = _regression(60)
    est = SLANGRegressor(epochs=3, method_params={"rank": 2}, random_state=3).fit(X, y)
    direct = slangcli.fit(X, y, likelihood="gaussian", epochs=3, rank=2, seed=3)
    assert np.array_equal(est.result_.posterior.mean, direct.posterior.mean)
    assert np.array_equal(est.result_.posterior.U, direct.posterior.U)


def test_the_default_method_follows_the_model_as_in_slang_fit():
    """``method=None`` (the default): IVON for a classification network, SLANG otherwise, as ``slang fit`` and
    ``slangcli.fit`` choose; ``get_params`` keeps None (scikit-learn's clone compares parameters as given)."""
    X, y = _regression(60)
    linear = SLANGRegressor(epochs=2).fit(X, y)
    network = SLANGRegressor(hidden=(4,), epochs=2).fit(X, y)
    classifier = SLANGClassifier(hidden=(4,), epochs=2).fit(X, y > np.median(y))
    assert linear.get_params()["method"] is None and classifier.get_params()["method"] is None
    assert [e.result_.config["method"] for e in (linear, network, classifier)] == ["slang", "slang", "ivon"]
    assert classifier.result_.posterior.kind == "diagonal"


# ------------------------------------------------------------------ feature names


def test_feature_names_are_checked_as_scikit_learn_checks_them():
    """Fitted on a DataFrame, an estimator refused nothing at prediction: the same columns in another order were
    read by position, other predictions without a word. scikit-learn's rule: ``feature_names_in_`` from fit, a
    DataFrame at prediction with other names or another order refused with its message, a warning when only one of
    fit and prediction had names."""
    from sklearn.utils.estimator_checks import check_dataframe_column_names_consistency

    pd = pytest.importorskip("pandas")
    X, y = _regression(60)
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    named = SLANGRegressor(epochs=3, predict_samples=20).fit(frame, y)
    assert isinstance(named.feature_names_in_, np.ndarray) and named.feature_names_in_.dtype == object
    assert named.feature_names_in_.tolist() == ["a", "b", "c"]
    expected = named.predict(frame)
    with pytest.raises(ValueError, match="^" + re.escape("The feature names should match those that were passed "
                                                         "during fit.\nFeature names must be in the same order as "
                                                         "they were in fit.\n") + "$"):
        named.predict(frame[["c", "a", "b"]])
    assert named.result_.feature_names == ["a", "b", "c"]  # a run file saved from it matches columns by name
    with pytest.raises(ValueError, match=re.escape("Feature names unseen at fit time:\n- d\nFeature names seen at "
                                                   "fit time, yet now missing:\n- c\n")):
        named.score(frame.rename(columns={"c": "d"}), y)
    with pytest.warns(UserWarning, match="^X does not have valid feature names, but SLANGRegressor was fitted "
                                         "with feature names$"):
        assert np.array_equal(named.predict(X), expected)
    plain = SLANGClassifier(epochs=3, predict_samples=20).fit(X, y > 0)
    assert not hasattr(plain, "feature_names_in_")
    with pytest.warns(UserWarning, match="^X has feature names, but SLANGClassifier was fitted without feature "
                                         "names$"):
        plain.predict_proba(frame)
    named.fit(X, y)  # fitted again on an array: the names of the first fit are gone
    assert not hasattr(named, "feature_names_in_")
    for estimator in (SLANGClassifier(epochs=3, predict_samples=20), SLANGRegressor(epochs=3, predict_samples=20)):
        check_dataframe_column_names_consistency(type(estimator).__name__, estimator)


# ------------------------------------------------------------------ misuse named by parameter or row


@pytest.mark.parametrize("params, says", [
    ({"predict_samples": 0}, "predict_samples must be a whole number from 1 to 10000000, got 0"),
    ({"predict_samples": "x"}, "predict_samples must be a whole number from 1 to 10000000, got 'x'"),
    ({"epochs": "ten"}, "epochs must be a whole number >= 1, got 'ten'"),
    ({"epochs": 2.5}, "epochs must be a whole number >= 1, got 2.5"),
    ({"batch_size": "a"}, "batch_size must be a whole number >= 1, got 'a'"),
    ({"standardize": "yes"}, "standardize must be True or False, got 'yes'"),
])
@pytest.mark.parametrize("hidden", [(), (3,)])
def test_invalid_parameters_are_named_as_set(params, says, hidden):
    """predict_samples=0 was a ZeroDivisionError on a network, set_params(epochs='ten') "'<' not supported between
    instances of 'str' and 'int'"."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3))
    y = (X[:, 0] > 0).astype(int)
    for estimator, target in ((SLANGClassifier(hidden=hidden), y), (SLANGRegressor(hidden=hidden), X[:, 1])):
        with pytest.raises(ValueError, match=f"^{type(estimator).__name__}: {says}$".replace("(", r"\(")
                           .replace(")", r"\)").replace(".", r"\.")):
            estimator.set_params(**params).fit(X, target)


@pytest.mark.parametrize("bad, says", [
    (None, "y: row 3 has no target (None); every example needs one"),
    (float("nan"), "y: row 3 has no target (nan); every example needs one"),
    (7, "y: row 3 holds 7 (int) where row 0 holds 'no' (str); the targets must be of one kind"),
    # an empty label was a class of its own (binary became 3 classes), where slang fit refuses the empty cell
    ("", "y: row 3 has no target ('', a missing value); every example needs one (missing='drop' leaves such rows "
         "out)"),
    (" ", "y: row 3 has no target (' ', a missing value); every example needs one (missing='drop' leaves such "
          "rows out)"),
])
def test_a_missing_or_foreign_label_among_strings_is_named_by_row(bad, says):
    """None or NaN among string labels failed in NumPy's sort ("'<' not supported between ...")."""
    X = np.random.default_rng(1).normal(size=(20, 2))
    y = np.array(["no", "yes"] * 10, dtype=object)
    y[3] = bad
    with pytest.raises(ValueError) as info:
        SLANGClassifier(epochs=1).fit(X, y)
    assert str(info.value) == says


@pytest.mark.parametrize("estimator", [SLANGClassifier(epochs=1), SLANGRegressor(epochs=1)],
                         ids=["classifier", "regressor"])
def test_score_names_a_target_or_weights_of_the_wrong_length(estimator):
    """score(X, y[:10]) was "operands could not be broadcast together with shapes (40,) (10,)"."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(40, 2))
    y = (X[:, 0] > 0).astype(int)
    estimator.fit(X, y)
    with pytest.raises(ValueError, match=r"^score: y has shape \(10,\), but X has 40 rows"):
        estimator.score(X, y[:10])
    with pytest.raises(ValueError, match=r"^score: sample_weight has shape \(3,\), but X has 40 rows"):
        estimator.score(X, y, sample_weight=np.ones(3))
    assert np.isfinite(estimator.score(X, y, sample_weight=np.ones(40)))


@pytest.mark.parametrize("labels", [np.array(["virginica", "setosa", "versicolor"]), np.array([40, -3, 7])])
def test_a_classifier_codes_its_labels_as_slang_fit_does_and_its_run_file_keeps_their_values(labels, tmp_path):
    """The estimator coded the labels 0..K-1 itself before the fit coded them again, so a run file saved from it
    named the classes 0.0, 1.0, 2.0 (slang predict wrote p_0, p_1, p_2); now the fit's one label coding takes the
    label values, and classes_ (in the dtype given) names predict_proba's columns in the run's order."""
    from slangcli import load

    rng = np.random.default_rng(4)
    X = rng.normal(size=(60, 2))
    y = labels[np.argmax(X @ rng.normal(size=(2, 3)), axis=1)]
    model = SLANGClassifier(epochs=3, random_state=0).fit(X, y)
    assert model.classes_.dtype == labels.dtype
    assert list(model.classes_) == sorted(labels.tolist())
    model.result_.save(tmp_path / "run.h5")
    stored = load(tmp_path / "run.h5").classes
    assert [str(c) if isinstance(c, str) else int(c) for c in stored] == list(model.classes_)
    probabilities = model.predict_proba(X)
    np.testing.assert_array_equal(model.predict(X), model.classes_[np.argmax(probabilities, axis=1)])
    assert np.mean(model.predict(X) == y) > 0.8


def test_a_column_of_text_is_refused_naming_it_and_what_takes_it():
    """A DataFrame with a column of island names: slangcli.fit reads it as categories, and the estimators refused
    it with NumPy's "could not convert string to float: 'Biscoe'". They take numbers, as scikit-learn's do; the
    message now names the column and both ways on."""
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"x": np.r_[np.zeros(10), np.ones(10)], "island": ["Biscoe", "Dream"] * 10})
    for estimator in (SLANGClassifier(epochs=2), SLANGRegressor(epochs=2)):
        with pytest.raises(ValueError, match=r"^X: column 'island' holds text; SLANG\w+ takes numbers, as "
                                             r"scikit-learn's estimators do: encode it first .* slangcli\.fit"):
            estimator.fit(frame, [0, 1] * 10)
    fitted = SLANGClassifier(epochs=2).fit(frame[["x"]], [0, 1] * 10)
    with pytest.raises(ValueError, match=r"^X: column 'x' holds text"):
        fitted.predict(frame.assign(x=frame["island"])[["x"]])


def test_boolean_labels_stay_booleans():
    # scikit-learn's classifiers keep the labels' type: classes_ [False, True], and predict gives booleans
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    y = X[:, 0] > 0
    fitted = SLANGClassifier(epochs=2).fit(X, y)
    assert fitted.classes_.dtype == bool and fitted.classes_.tolist() == [False, True]
    assert fitted.predict(X).dtype == bool and fitted.score(X, y) > 0.5


def test_integer_labels_beyond_float64s_reach_are_refused():
    """Labels 2^53 and 2^53 + 1 collapsed into one float64 class: "needs exactly 2 label values, found 1"."""
    X = np.random.default_rng(1).normal(size=(20, 2))
    y = np.where(X[:, 0] > 0, 2**53, 2**53 + 1)
    with pytest.raises(ValueError, match=r"^y: row \d+ holds 900719925474099\d, an integer label beyond 2\^53"):
        SLANGClassifier(epochs=1).fit(X, y)
    SLANGClassifier(epochs=1).fit(X, y.astype(str))  # as strings they are two classes


def test_a_dataframe_is_fitted_as_the_numbers_the_estimator_reads(tmp_path):
    """The estimators read a DataFrame as numbers, as scikit-learn's do, but handed the frame itself to
    slangcli.fit: a bool column was then a boolean (and predict, given its numbers, refused '1' as no boolean), and
    numbers written as text became one category per distinct value (292 inputs for 2 columns, a model that only
    memorised its rows). The fit now gets the numbers predict gets, with the frame's names."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": np.round(rng.normal(size=120), 3), "flag": rng.random(120) > 0.5})
    y = (frame.a + frame.flag > 0.5).astype(int)
    estimator = SLANGClassifier(epochs=3).fit(frame, y)
    assert estimator.result_.feature_names == ["a", "flag"]
    np.testing.assert_array_equal(estimator.predict_proba(frame), estimator.predict_proba(frame.astype(float)))
    # the frame as CSV holds True/False, which the run reads as numbers: slang predict says how to write them
    estimator.result_.save(tmp_path / "b.h5")
    frame.to_csv(tmp_path / "b.csv", index=False)
    done = CliRunner().invoke(main, ["predict", str(tmp_path / "b.h5"), str(tmp_path / "b.csv"), "-o", "-"])
    assert done.exit_code == 1 and "(the run reads this column as numbers: write its booleans as 1 and 0)" in \
        done.stderr.splitlines()[-1], done.stderr
    frame.astype({"flag": int}).to_csv(tmp_path / "b.csv", index=False)
    done = CliRunner().invoke(main, ["predict", str(tmp_path / "b.h5"), str(tmp_path / "b.csv"), "-o", "-"])
    assert done.exit_code == 0, done.stderr
    text = frame.astype({"flag": int}).astype(str)  # numbers written as text, as read_csv(dtype=str) gives them
    estimator = SLANGClassifier(epochs=3).fit(text.iloc[:90], y.iloc[:90])
    assert estimator.result_.feature_names == ["a", "flag"] and estimator.n_features_in_ == 2
    assert estimator.score(text.iloc[90:], y.iloc[90:]) > 0.7  # new values are numbers, not unseen levels


@pytest.mark.parametrize("state", [np.random.RandomState(0), np.random.default_rng(0)], ids=["RandomState", "Generator"])
def test_a_generator_as_random_state_gives_one_seed_a_fit(state):
    """With a NumPy generator as random_state, every predict drew a new seed from it: the same rows got other
    predictions call after call (and predict could disagree with argmax of predict_proba)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = X @ [1.0, -1.0, 0.5] + 0.3 * rng.normal(size=60)
    estimator = SLANGRegressor(epochs=2, hidden=(4,), random_state=state).fit(X, y)
    np.testing.assert_array_equal(estimator.predict(X[:5]), estimator.predict(X[:5]))
    assert isinstance(estimator.seed_, int)


def test_scikit_learns_filter_on_data_conversion_warning_applies():
    """The column-vector warning was slang's own class only, so a filter on scikit-learn's DataConversionWarning
    (to ignore it, or to make it an error) did not apply to it."""
    from sklearn.exceptions import DataConversionWarning

    X = np.random.default_rng(0).normal(size=(30, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.simplefilter("error", DataConversionWarning)
        with pytest.raises(DataConversionWarning, match="A column-vector y was passed"):
            SLANGRegressor(epochs=1).fit(X, X[:, :1])


def test_a_positional_argument_is_named_as_scikit_learn_users_expect():
    """SLANGClassifier("slang") raised "_init.<locals>.__init__() takes 1 positional argument but 2 were given"."""
    with pytest.raises(TypeError, match=r"^SLANGClassifier\(\) takes keyword arguments only, as scikit-learn's "
                                        r"estimators do \(method=\.\.\., epochs=\.\.\.\); got 1 positional \('slang'\)$"):
        SLANGClassifier("slang")


def test_a_missing_value_of_a_nullable_column_is_called_one():
    """pd.NA in an Int64 column gave "the features must be numbers (float() argument must be a string or a real
    number, not 'NAType')": a missing value, named as one."""
    import pandas as pd

    frame = pd.DataFrame({"a": pd.array([1, 2, None, 4] * 10, dtype="Int64"), "b": np.arange(40.0)})
    with pytest.raises(DataError, match=r"^X: row 2, column 'a': missing value \(<NA>\)"):
        SLANGClassifier(epochs=1).fit(frame, [0, 1] * 20)


def test_bool_labels_in_an_object_array_stay_bools():
    """A Series of bools left of object dtype (by dropna) gave classes_ [0, 1] and integer predictions, where the
    same labels as a bool array give [False, True]."""
    import pandas as pd

    X = np.random.default_rng(0).normal(size=(40, 2))
    labels = X[:, 0] > 0
    as_objects = SLANGClassifier(epochs=1).fit(X, pd.Series(list(labels), dtype=object))
    as_bools = SLANGClassifier(epochs=1).fit(X, labels)
    assert as_objects.classes_.tolist() == as_bools.classes_.tolist() == [False, True]
    assert as_objects.predict(X).dtype == bool
    np.testing.assert_array_equal(as_objects.predict(X), as_bools.predict(X))
