"""scikit-learn estimators over :func:`slangcli.fit`: ``SLANGClassifier`` and ``SLANGRegressor``.

They follow scikit-learn's estimator contract without importing scikit-learn (it is not a dependency of slang):
``__init__`` only stores its arguments; ``fit`` validates, fits, sets the attributes ending in ``_`` and returns
``self``; ``get_params``/``set_params`` come from the ``__init__`` signature, so ``clone``, ``Pipeline``,
``cross_val_score`` and ``GridSearchCV`` work; ``predict(X, return_std=True)`` returns ``(mean, std)`` as
``BayesianRidge`` and ``GaussianProcessRegressor`` do. Only ``__sklearn_tags__``, which scikit-learn alone calls,
imports it.

Every method of ``slang fit`` is reachable through ``method``; its own hyperparameters go in ``method_params``
(``SLANGClassifier(method="slang", method_params={"rank": 10})``), so a new method needs nothing here.
"""

from __future__ import annotations

import inspect
import sys
import warnings

import numpy as np

from slangcli import api
from slangcli.errors import ConfigError, DataError
from slangcli.training import options


class NotFittedError(ValueError, AttributeError):
    """An estimator used before ``fit`` (a ValueError and an AttributeError, as scikit-learn's is)."""


def _not_fitted(message: str) -> NotFittedError:
    """The error to raise; when scikit-learn is loaded it is also scikit-learn's ``NotFittedError``, so that its
    tools (``check_is_fitted``-style handling, the estimator checks) recognise it."""
    return _also_sklearns(NotFittedError, "NotFittedError")(message)


class DataConversionWarning(UserWarning):
    """A column-vector ``y`` was passed where a 1-D array was expected (named as scikit-learn names it)."""


def _data_conversion(message: str) -> DataConversionWarning:
    """The warning to give; when scikit-learn is loaded it is also scikit-learn's ``DataConversionWarning``, so that
    a filter on that class (to ignore it, or to make it an error) applies to it."""
    return _also_sklearns(DataConversionWarning, "DataConversionWarning")(message)


def _also_sklearns(own: type, name: str) -> type:
    """``own``, or when ``sklearn.exceptions`` is loaded (never imported here) a subclass of both it and
    scikit-learn's class of that ``name``."""
    sklearn_exceptions = sys.modules.get("sklearn.exceptions")
    if sklearn_exceptions is None:
        return own
    theirs = getattr(sklearn_exceptions, name)
    if theirs not in _BOTH:
        _BOTH[theirs] = type(name, (own, theirs), {"__module__": __name__})
    return _BOTH[theirs]


_BOTH: dict = {}


def _feature_names(X):
    """The feature names of ``X`` as scikit-learn reads them: a DataFrame's column names when all are strings (an
    object array), None for an array or columns named otherwise; names of mixed kinds are a TypeError."""
    names = getattr(X, "columns", None)
    if names is None or len(names) == 0:
        return None
    names = np.asarray(list(names), dtype=object)
    kinds = sorted({type(n).__qualname__ for n in names})
    if len(kinds) > 1 and "str" in kinds:
        raise TypeError("Feature names are only supported if all input features have string names, but your input "
                        f"has {kinds} as feature name / column name types. If you want feature names to be stored "
                        "and validated, you must convert them all to strings, by using X.columns = "
                        "X.columns.astype(str) for example. Otherwise you can remove feature / column names from your "
                        "input data, or convert them all to a non-string data type.")
    return names if kinds == ["str"] else None


def _listed(names) -> str:
    """Names one per line as scikit-learn lists them: at most five, then ``- ...``."""
    lines = [f"- {name}\n" for name in names[:5]]
    return "".join(lines) + ("- ...\n" if len(names) > 5 else "")


def _seed(random_state) -> int:
    """``random_state`` as slang's integer seed: None is 0 (slang's default), an int itself, a NumPy generator
    one draw."""
    if random_state is None:
        return 0
    if isinstance(random_state, (int, np.integer)):
        return int(random_state)
    if hasattr(random_state, "integers"):
        return int(random_state.integers(2**31))
    if hasattr(random_state, "randint"):
        return int(random_state.randint(2**31))
    raise ValueError(f"random_state must be None, an int or a NumPy random generator, got {random_state!r}")


def _init(likelihood: str):
    """The ``__init__`` of an estimator of ``likelihood``: it stores its keyword arguments, the parameters
    generated from the fit's options (``slangcli.training.options.estimator_fields``) with the declared defaults, as
    scikit-learn's contract asks; its signature lists them, so ``get_params``, ``clone`` and ``repr`` see them."""
    declared = [(name, options.estimator_default(f)) for name, f in options.estimator_fields(likelihood)]
    names = {name for name, _ in declared}

    def __init__(self, *args, **params):
        if args:  # (keyword-only, as scikit-learn's estimators are; Python's own message named "_init.<locals>")
            raise TypeError(f"{type(self).__name__}() takes keyword arguments only, as scikit-learn's estimators "
                            f"do (method=..., epochs=...); got {len(args)} positional ({args[0]!r})")
        unknown = sorted(set(params) - names)
        if unknown:
            raise TypeError(f"{type(self).__name__}.__init__() got an unexpected keyword argument {unknown[0]!r}")
        for name, default in declared:
            setattr(self, name, params.get(name, default))

    __init__.__signature__ = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
         *(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default) for name, default in declared)])
    return __init__


class _SLANGEstimator:
    _likelihood = None  # set by the subclasses

    # ------------------------------------------------------------------ parameters (scikit-learn's contract)
    @classmethod
    def _get_param_names(cls) -> list[str]:
        return sorted(p.name for p in inspect.signature(cls.__init__).parameters.values() if p.name != "self")

    def get_params(self, deep: bool = True) -> dict:
        return {name: getattr(self, name) for name in self._get_param_names()}

    def set_params(self, **params):
        valid = self._get_param_names()
        for name, value in params.items():
            if name not in valid:
                raise ValueError(f"invalid parameter {name!r} for estimator {type(self).__name__} "
                                 f"(valid: {', '.join(valid)})")
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        defaults = {p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values()}
        given = [f"{k}={v!r}" for k, v in self.get_params().items() if not _same(v, defaults.get(k))]
        return f"{type(self).__name__}({', '.join(given)})"

    def __sklearn_tags__(self):
        from sklearn.utils import ClassifierTags, InputTags, RegressorTags, Tags, TargetTags

        classifier = self._likelihood != "gaussian"
        return Tags(estimator_type="classifier" if classifier else "regressor",
                    target_tags=TargetTags(required=True, single_output=True, multi_output=False),
                    transformer_tags=None,
                    classifier_tags=ClassifierTags(multi_class=True, multi_label=False) if classifier else None,
                    regressor_tags=None if classifier else RegressorTags(),
                    input_tags=InputTags(two_d_array=True, allow_nan=False),
                    non_deterministic=False, requires_fit=True)

    # ------------------------------------------------------------------ fitting
    def _check_params(self) -> None:
        """The parameters, by the declaration's checks (``slangcli.training.options.check_value``), named as the user set
        them."""
        for name, f in options.estimator_fields(self._likelihood):
            value = getattr(self, name)
            if name == "random_state":
                _seed(value)
                continue
            try:
                options.check_value(f, {} if value is None and name == "method_params" else value, name)
            except ConfigError as exc:
                raise ValueError(f"{type(self).__name__}: {exc}") from None

    def _fit(self, X, y, likelihood):
        self._check_params()
        names = _feature_names(X)
        X_arr = _numbers(X, type(self).__name__)
        y_arr = np.asarray(y) if y is not None else None
        if y_arr is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        if y_arr.ndim == 2 and y_arr.shape[1] == 1:
            warnings.warn(_data_conversion("A column-vector y was passed when a 1d array was expected. Please "
                                           "change the shape of y to (n_samples, ), for example using ravel()."),
                          stacklevel=3)
        y_arr = api._targets(y, len(X_arr), "y", text_numbers=False)
        if len(X_arr) < 2:
            raise ValueError(f"{type(self).__name__}: n_samples=1; a fit needs at least 2 examples")
        # the parameters as the options of a fit (the declaration's names), the method's own as keywords
        given = {f.name: getattr(self, name) for name, f in options.estimator_fields(self._likelihood)}
        # one seed a fit, drawn from a NumPy generator when given one: the fit's and every prediction's (drawn
        # again at each predict, a generator's predictions would differ call after call)
        seed = _seed(self.random_state)
        given.update(seed=seed, likelihood=likelihood, hyper=dict(self.method_params or {}))
        # a DataFrame's names go on with its numbers, so that the run file saved from result_ knows its features by
        # name; its columns are the numbers the estimator read (a bool column 0/1, numbers written as text their
        # values), not the text or categories slangcli.fit would make of them
        if likelihood != "gaussian":
            self._check_labels(y_arr)
            if y_arr.dtype.kind == "i" and api.bool_labels(y):
                self.classes_ = self.classes_.astype(bool)  # (coded 0, 1 as the fit codes them; False < True)
        # (the labels as given: the fit codes them, as slang fit codes a file's, and the run file keeps their values)
        X_named = _NamedNumbers(X_arr, names) if names is not None else X_arr
        try:
            self.result_ = api._fit(X_named, y_arr, given, estimator=True)
        except ConfigError as exc:
            # (the checks name slang fit's flags: an estimator's user reads its parameters)
            api._rename(exc, estimator=True)
            raise ValueError(f"{type(self).__name__}: {exc}") from None
        except DataError as exc:
            api._rename(exc, estimator=True)
            raise
        self.seed_ = seed
        self.n_features_in_ = X_arr.shape[1]
        if names is not None:
            self.feature_names_in_ = names
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_  # fitted again, on data without names
        return self

    def _check_fitted(self):
        if not hasattr(self, "result_"):
            raise _not_fitted(f"This {type(self).__name__} instance is not fitted yet. Call 'fit' with "
                              "appropriate arguments before using this estimator.")

    def _check_feature_names(self, X) -> None:
        """scikit-learn's rule for the names of ``X`` at prediction: those seen in fit, in their order (else a
        ValueError naming the difference); a warning when only one of fit and ``X`` had names."""
        fitted = getattr(self, "feature_names_in_", None)
        given = _feature_names(X)
        if fitted is None and given is None:
            return
        if fitted is None:
            warnings.warn(f"X has feature names, but {type(self).__name__} was fitted without feature names",
                          UserWarning, stacklevel=4)
            return
        if given is None:
            warnings.warn(f"X does not have valid feature names, but {type(self).__name__} was fitted with feature "
                          "names", UserWarning, stacklevel=4)
            return
        if len(fitted) == len(given) and np.all(fitted == given):
            return
        message = "The feature names should match those that were passed during fit.\n"
        unseen = sorted(set(given) - set(fitted))
        missing = sorted(set(fitted) - set(given))
        if unseen:
            message += "Feature names unseen at fit time:\n" + _listed(unseen)
        if missing:
            message += "Feature names seen at fit time, yet now missing:\n" + _listed(missing)
        if not unseen and not missing:
            message += "Feature names must be in the same order as they were in fit.\n"
        raise ValueError(message)

    def _predictions(self, X, interval: float = 0.95):
        self._check_fitted()
        self._check_feature_names(X)
        X_arr = _numbers(X, type(self).__name__)
        if X_arr.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X_arr.shape[1]} features, but {type(self).__name__} is expecting "
                             f"{self.n_features_in_} features as input")
        return self.result_.predict(X_arr, samples=self.predict_samples, seed=self.seed_,
                                    interval=interval)


class _NamedNumbers:
    """An array of numbers with a DataFrame's column names, as the estimators hand their data to ``slangcli.fit``:
    the estimators take numbers, as scikit-learn's do, and predict from the same numbers."""

    def __init__(self, values: np.ndarray, columns):
        self._values, self.columns = values, list(columns)

    def __array__(self, dtype=None, copy=None):
        return self._values if dtype is None else self._values.astype(dtype, copy=False)

    def __len__(self) -> int:
        return len(self._values)


def _numbers(X, estimator: str) -> np.ndarray:
    """``X`` as an array of numbers (``api._features``); a DataFrame's column of text is refused naming it, and
    what takes it: the estimators take numbers, as scikit-learn's do, where ``slangcli.fit`` reads such a column as
    categories."""
    try:
        return api._features(X, "X")[0]
    except (TypeError, ValueError):
        column = _text_column(X)
        if column is None:
            raise
        raise ValueError(f"X: column {column!r} holds text; {estimator} takes numbers, as scikit-learn's estimators "
                         "do: encode it first (a OneHotEncoder in a Pipeline), or fit with slangcli.fit, which reads "
                         "a DataFrame's columns of text as categories") from None


def _text_column(X):
    """The name of a DataFrame's first column holding a string, or None."""
    columns = getattr(X, "columns", None)
    if columns is None or not hasattr(X, "__getitem__"):
        return None
    for name in columns:
        try:
            values = np.asarray(X[name])
        except Exception:  # noqa: BLE001 - not a DataFrame after all
            return None
        if values.dtype.kind in "OUS" and any(isinstance(v, str) for v in values.tolist()):
            return name
    return None


class SLANGClassifier(_SLANGEstimator):
    """Bayesian classification by variational inference (logistic/softmax regression or an MLP).

    Parameters
    ----------
    method : str or None
        A name in ``slangcli.methods.METHODS`` (``slang fit --help`` lists them with a line each); None (default):
        the task's (``slangcli.training.options.DEFAULT_METHOD``: ``ivon`` for a classification network, ``slang``
        otherwise).
    hidden : tuple of int
        Hidden-layer widths; ``()`` is logistic (softmax) regression.
    activation : str
        ``relu``, ``tanh`` or ``sigmoid``.
    prior_precision, bias_prior_precision : float
        Precisions of the Gaussian prior on the weights and on the biases.
    epochs, batch_size : int or None
        Training length and minibatch size of the step methods (None: slang's defaults, 200 and 32).
    standardize : bool
        Standardise the features with training statistics (default True, as ``slang fit``; False uses them as
        given, e.g. after a ``StandardScaler`` in a ``Pipeline``).
    method_params : dict or None
        The method's own hyperparameters, e.g. ``{"rank": 10, "samples": 4}`` (``slang fit --help`` lists them).
    predict_samples : int
        Monte-Carlo weight samples of the predictive (logistic regression uses exact quadrature).
    members : int
        Posteriors fitted (default 1): with K > 1, K fits from seeds derived from ``random_state`` and their
        equal-weight mixture, with which every prediction is made (``slang fit --members``).
    random_state : int, NumPy generator or None
        Seed of the fit and of the predictive's samples (None: 0).

    Attributes
    ----------
    classes_ : ndarray
        The label values, sorted; the columns of :meth:`predict_proba`.
    result_ : slangcli.FitResult
        The fitted posterior (``result_.save("run.h5")`` writes a run file the commands read).
    seed_ : int
        The fit's seed (``random_state``, or one draw from it when it is a NumPy generator), which every prediction's
        weight samples use too.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        The column names of a DataFrame given to ``fit`` whose names are all strings (absent otherwise); ``predict``
        then takes a DataFrame with these columns, in this order, as scikit-learn's estimators do.
    """

    _likelihood = "categorical"

    __init__ = _init("categorical")

    def _check_labels(self, y):
        """Refuse a continuous target or a single class, as scikit-learn's classifiers do; ``classes_`` are the
        label values in the dtype given, sorted as the fit's label coding sorts them (``data.prepare.fit_labels``:
        numbers ascending, text by its characters), so that they name the columns of :meth:`predict_proba`."""
        if y.dtype.kind == "f" and not np.array_equal(y, np.round(y)):
            raise ValueError(f"Unknown label type: continuous. {type(self).__name__} takes class labels; "
                             "use SLANGRegressor for a continuous target")
        self.classes_ = np.unique(y)
        if len(self.classes_) < 2:
            raise ValueError(f"{type(self).__name__} needs samples of at least 2 classes in the data, but the data "
                             f"contain only one class: {self.classes_[0]!r}")

    def fit(self, X, y):
        """Fit the posterior to ``X : (n, p)`` and labels ``y : (n,)`` (any label values); returns self."""
        y_arr = np.asarray(y) if y is not None else None
        likelihood = "categorical"
        if y_arr is not None and y_arr.ndim in (1, 2) and y_arr.size:
            self._check_params()
            # the labels checked (a missing one, or labels of mixed kinds, named by row) before they are counted;
            # y itself goes on to _fit, which warns about a column vector
            labels = api._targets(y_arr, len(y_arr), "y", text_numbers=False)
            if len(np.unique(labels)) == 2:
                likelihood = "bernoulli"
        return self._fit(X, y, likelihood)

    def predict_proba(self, X):
        """Predictive class probabilities ``(n, len(classes_))``."""
        return self._predictions(X).probabilities

    def predict(self, X):
        """The most probable label of every row of ``X``."""
        probabilities = self.predict_proba(X)
        return self.classes_[np.argmax(probabilities, axis=1)]

    def score(self, X, y, sample_weight=None):
        """Accuracy of :meth:`predict` (weighted by ``sample_weight``)."""
        predicted = self.predict(X)
        y, weights = _scored(y, sample_weight, len(predicted))
        return float(np.average(predicted == y, weights=weights))


class SLANGRegressor(_SLANGEstimator):
    """Bayesian regression by variational inference (linear regression or an MLP), Gaussian noise.

    The parameters are those of :class:`SLANGClassifier`, plus ``noise_precision``: the precision of the
    Gaussian noise on the standardised target (the target is standardised with training statistics), by default
    ``"auto"``: learned with the posterior (``slangcli.training.learned``).
    ``predict(X, return_std=True)`` returns the predictive mean and total standard deviation; ``result_.predict``
    gives the aleatoric/epistemic split and intervals. With ``calibrate=F`` (a fraction of the training rows held out
    to calibrate; ``slang fit --calibrate``), ``predict_interval(X, level)`` gives split-conformal intervals with
    guaranteed coverage.
    """

    _likelihood = "gaussian"

    __init__ = _init("gaussian")

    def fit(self, X, y):
        """Fit the posterior to ``X : (n, p)`` and numeric targets ``y : (n,)``; returns self."""
        if y is not None:
            y = np.asarray(y)
            if y.dtype.kind not in "biufc":
                try:
                    y = y.astype(np.float64)
                except (TypeError, ValueError):
                    raise ValueError(f"Unknown label type: {type(self).__name__} needs a numeric target, got "
                                     f"dtype {y.dtype}") from None
        return self._fit(X, y, "gaussian")

    def predict(self, X, return_std: bool = False):
        """Predictive mean of every row of ``X``; with ``return_std``, also its standard deviation (aleatoric and
        epistemic together)."""
        p = self._predictions(X)
        return (p.mean, p.std_total) if return_std else p.mean

    def predict_interval(self, X, level: float = 0.95):
        """The split-conformal intervals ``(lower, upper)`` of level ``level`` for every row of ``X``, of a regressor
        fitted with ``calibrate=F`` (``slang fit --calibrate``): ``mean -+ q std`` with ``q`` from the held-out rows'
        scores, covering the target of a row exchangeable with them with probability at least ``level``; infinite
        bounds when the held-out rows are too few for that level."""
        self._check_fitted()
        if self.result_.calibration is None:
            raise ValueError(f"{type(self).__name__}: predict_interval needs a fit with calibrate=F (a fraction of the "
                             "training rows held out to calibrate the intervals); result_.predict gives the "
                             "posterior predictive's own intervals")
        if isinstance(level, bool) or not isinstance(level, (int, float, np.integer, np.floating)) \
                or not 0 < level < 1:
            raise ValueError(f"{type(self).__name__}: level must lie strictly between 0 and 1, got {level!r}")
        p = self._predictions(X, interval=float(level))
        return p.calibrated_lower, p.calibrated_upper

    def score(self, X, y, sample_weight=None):
        """Coefficient of determination R^2 of :meth:`predict`."""
        predicted = self.predict(X)
        y, sample_weight = _scored(y, sample_weight, len(predicted))
        y = y.astype(float)
        residual = np.average((y - predicted) ** 2, weights=sample_weight)
        spread = np.average((y - np.average(y, weights=sample_weight)) ** 2, weights=sample_weight)
        return float(1.0 - residual / spread) if spread > 0 else 0.0


def _scored(y, sample_weight, n: int):
    """``y`` and ``sample_weight`` of ``score``, one per row of its ``X`` (``n``), as 1-D arrays."""
    y = np.asarray(y)
    y = y[:, 0] if y.ndim == 2 and y.shape[1] == 1 else y
    if y.ndim != 1 or len(y) != n:
        raise ValueError(f"score: y has shape {y.shape}, but X has {n} rows; give one target per row")
    if sample_weight is not None:
        sample_weight = np.asarray(sample_weight, dtype=float)
        if sample_weight.shape != (n,):
            raise ValueError(f"score: sample_weight has shape {sample_weight.shape}, but X has {n} rows; give one "
                             "weight per row")
    return y, sample_weight


def _same(a, b) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except (TypeError, ValueError):
        return a is b

