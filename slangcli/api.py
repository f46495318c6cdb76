"""The Python API: fit a posterior on arrays, then predict, score, sample, compress, save and load.

``slang fit`` reads files and calls the same preparation and fit as :func:`fit` (``prepare`` and
``fit_prepared``), so the same arrays, options and seed give the same posterior bit for bit from the
command line and from Python. A :class:`FitResult` saves to the run files the commands read, and :func:`load`
reads any run file the commands write.

Inputs are anything ``numpy.asarray`` accepts; a pandas DataFrame's column names become the feature names and a
Series' name the target's (read through the ``columns`` and ``name`` attributes, without importing pandas).
Features are numbers, converted to float64, that must be finite (and, unless standardised, within 1e150 in
magnitude), or text: a column of strings is categorical (one indicator per level) or, when all its values are
true/false or yes/no, boolean, as in a CSV file (``slangcli.data.schema``, stored with the run); targets are label
values of any kind (classification) or numbers (regression), as in the files.

Features given to a fitted posterior are matched to its own as ``slang predict`` matches a file's columns
(``slangcli.data.columns``): a DataFrame's columns by name when the fit knows its features by name (a header row, or a
DataFrame with string column names), in any order, other columns ignored with a warning and a missing one refused;
anything else by position, refused unless it has exactly the model's number of features.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import os
import sys
import warnings
from dataclasses import fields, replace
from typing import Callable

import numpy as np

from slangcli.compress.runs import check_finished, compressed_run
from slangcli.data import columns, task
from slangcli.data.prepare import LabelMap, calibration_split, prepare
from slangcli.data.readers import check_distinct_names
from slangcli.data.readers._common import _is_number
from slangcli.data.readers.text import column_list, resolve_column
from slangcli.data.schema import Schema, schema_of
from slangcli.data.sources import DataOptions, transform, with_target
from slangcli.declare import check_value
from slangcli.errors import ConfigError, DataError, DataTypeError
from slangcli.predictive.evaluation import Predictions as _Predictions, fit_draws, predict_arrays, score
from slangcli.predictive.metrics import check_draws, check_samples, draw_parts, weight_samples
from slangcli.runfile.io import POSTERIOR_NAMES, Run, read_run, write_run
from slangcli.runfile.provenance import meta
from slangcli.training.fitting import fit_prepared
from slangcli.training.options import FitOptions, python_names, signature

__all__ = ["fit", "load", "FitResult"]


def _features(X, what: str = "X", allow_missing: bool = False,
              nan_hint: str | None = None) -> tuple[np.ndarray, tuple[str, ...] | None]:
    """``X`` as a C-ordered float64 ``(N, P)`` array, and its column names if it has them (a DataFrame);
    ``allow_missing``: a NaN is a missing value (to impute), not an error; ``nan_hint``: what a refused NaN's message
    says to do about it."""
    if hasattr(X, "tocsr") or hasattr(X, "todense"):
        raise DataTypeError(f"{what}: sparse input is not supported; pass a dense array ({what}.toarray())")
    columns = getattr(X, "columns", None)
    names = tuple(str(c) for c in columns) if columns is not None else None
    try:
        A = np.asarray(X)
    except Exception as exc:  # ragged nested lists and the like
        raise DataError(f"{what}: not an array of numbers ({exc})") from None
    if A.dtype.kind == "c":
        raise DataTypeError(f"{what}: Complex data not supported")
    if A.ndim != 2:
        raise DataError(f"{what}: expected a 2-D array of shape (examples, features), got {A.ndim} dimension(s). "
                        "Reshape your data: X.reshape(-1, 1) for a single feature, X.reshape(1, -1) for a single "
                        "example")
    if A.dtype.kind == "O" and A.ndim == 2 and A.size:
        # a missing value of pandas (pd.NA in an Int64 column, NaT) is one, not a non-number: NaN where missing
        # values are allowed (to impute), else named
        gaps = np.frompyfunc(_is_missing, 1, 1)(A).astype(bool)
        if gaps.any():
            if not allow_missing:
                i, j = (int(k) for k in np.argwhere(gaps)[0])
                column = repr(names[j]) if names is not None else str(j)
                raise DataError(f"{what}: row {i}, column {column}: missing value ({A[i, j]!r})"
                                + (f"; {nan_hint}" if nan_hint else ""))
            A = np.where(gaps, np.nan, A)
    try:
        A = np.ascontiguousarray(A, dtype=np.float64)
    except TypeError as exc:
        raise DataTypeError(f"{what}: the features must be numbers ({exc})") from None
    except ValueError as exc:
        raise DataError(f"{what}: the features must be numbers ({exc})") from None
    if A.shape[1] == 0:
        raise DataError(f"{what}: 0 feature(s) (shape={A.shape}) while a minimum of 1 is required.")
    if A.shape[0] == 0:
        raise DataError(f"{what}: 0 sample(s) (shape={A.shape}) while a minimum of 1 is required.")
    bad = ~np.isfinite(A)
    if allow_missing and bad.any():
        bad &= ~np.isnan(A)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        if np.isnan(A[row, col]) and nan_hint:
            raise DataError(f"{what}: row {row}, column {col} is NaN, a missing value; {nan_hint}")
        word = "NaN" if np.isnan(A[row, col]) else "inf"
        raise DataError(f"{what}: row {row}, column {col} is {word} (the features must be finite)")
    return A, names


# what slangcli.fit says of a missing cell it was not told what to do with
FIT_MISSING = ("missing='impute' fills such cells in, missing='drop' leaves such rows out, as slang fit's "
               "'--missing' does")


def _is_missing(value) -> bool:
    """Whether a DataFrame's or an object array's cell is a missing value: None, NaN, pandas' NA or NaT."""
    return value is None or (isinstance(value, float) and value != value) or type(value).__name__ in ("NAType",
                                                                                                         "NaTType")


def _raw_features(X, what: str = "X", kinds=None, allow_missing: bool = False, categorical=None):
    """``X``'s raw feature columns for a data schema (``slangcli.data.schema``): ``(A, text, names)``, ``A : (N, P)``
    float64 (NaN where missing and in a column of text), ``text = {k: (N,) str}`` ("" where missing) and the column
    names (None for an array).

    ``kinds`` (a schema's, one per column) says which columns are text; without them (a fit) a column of text, of
    booleans (as a file's ``True``/``False``) or of pandas' ``category`` dtype is text, and one of numbers (strings
    that are numbers among them, as a file's cells are) numeric; one holding both text and numbers is refused. An
    array of numbers takes :func:`_features`' path. ``categorical``: a fit's columns (names or positions,
    ``fit(categorical=...)``) read as text although their cells are numbers, as ``--categorical``."""
    A = None
    declared = _declared_text(X) if kinds is None else set()
    numbers = kinds is not None and all(kind == "numeric" for kind in kinds)
    if not numbers and not (hasattr(X, "tocsr") or hasattr(X, "todense")):
        try:
            A = np.asarray(X)
        except Exception:  # noqa: BLE001 - the numeric path names the problem
            A = None
    if A is None or A.ndim != 2 or (A.dtype.kind not in "OUSb" and kinds is None and not categorical and not declared):
        A, names = _features(X, what, allow_missing=allow_missing, nan_hint=FIT_MISSING if kinds is None else None)
        return A, {}, names
    columns = getattr(X, "columns", None)
    names = tuple(str(c) for c in columns) if columns is not None else None
    n, p = A.shape
    if p == 0 or n == 0:
        _features(X, what)  # (its message)
    label = (lambda j: repr(names[j])) if names is not None else (lambda j: str(j))
    if kinds is not None and len(kinds) != p:
        return _features(X, what, allow_missing=allow_missing)[0], {}, names  # (the caller names the width)
    as_text = (_categorical_columns(categorical, names, p) if categorical else set()) | declared
    out = np.full((n, p), np.nan)
    text = {}
    for j in range(p):
        cells = A[:, j].tolist()
        missing = [_is_missing(v) for v in cells]
        kind = "text" if j in as_text else None if kinds is None else kinds[j]
        if kind is None:
            _refuse_other_values(cells, missing, what, label(j))
            # a string that is a number is one, as the same cell of a file is (read_csv(dtype=str) gives such)
            is_number = [not gap and (isinstance(v, (int, float, np.number, np.bool_))
                                      or isinstance(v, str) and _is_number(v.strip()))
                         for v, gap in zip(cells, missing)]
            numbers = [i for i, number in enumerate(is_number) if number]
            texts = [i for i, number in enumerate(is_number) if not number and not missing[i]]
            if numbers and texts:
                i, k = texts[0], numbers[0]
                raise DataError(f"{what}: row {i}, column {label(j)}: {cells[i]!r} is not a number (other rows of the "
                                f"column are numbers, such as {cells[k]!r} in row {k}); categorical= reads every cell "
                                "of a column as a category, as slang fit's '--categorical' does")
            # a column of booleans is text, as a file's True/False cells are: its two values are coded 0/1 alike
            booleans = bool(numbers) and all(isinstance(cells[i], (bool, np.bool_)) for i in numbers)
            kind = "numeric" if (numbers and not booleans) or not texts and not numbers else "text"
        if not allow_missing and any(missing):
            i = missing.index(True)
            how = FIT_MISSING if kinds is None else "missing='impute' fills it in as the fit's --missing impute would"
            raise DataError(f"{what}: row {i}, column {label(j)}: missing value ({cells[i]!r}); {how}")
        if kind == "numeric":
            present = [i for i, gap in enumerate(missing) if not gap]
            try:
                out[present, j] = np.array([cells[i] for i in present], dtype=np.float64)
            except (TypeError, ValueError):
                for i in present:
                    try:
                        float(cells[i])
                    except (TypeError, ValueError):
                        raise DataTypeError(f"{what}: row {i}, column {label(j)}: {cells[i]!r} is not a number (the "
                                            "column is numeric in the fit)") from None
                raise DataTypeError(f"{what}: column {label(j)}: the values are not numbers") from None
            bad = np.flatnonzero(np.isinf(out[:, j]))
            if bad.size:
                raise DataError(f"{what}: row {bad[0]}, column {label(j)} is inf (the features must be finite)")
        else:
            values = ["" if missing[i] else _cell_text(v) for i, v in enumerate(cells)]
            empty = [i for i, v in enumerate(values) if v == "" and not missing[i]]
            if empty:
                raise DataError(f"{what}: row {empty[0]}, column {label(j)}: an empty string is not a value (a missing "
                                "one is None or NaN)")
            text[j] = np.array(values, dtype=str)
    return out, text, names


def _refuse_other_values(cells: list, missing: list, what: str, column: str) -> None:
    """Refuse a column whose kind a fit infers when it holds values that are neither numbers nor text (dates,
    durations, other objects): read as text, each would become a category named by its ``str()``, every new date
    unseen at prediction (a ``category`` dtype or ``categorical=`` makes such a column categories on purpose)."""
    for i, (v, gap) in enumerate(zip(cells, missing)):
        if not gap and not isinstance(v, (str, bytes, bool, int, float, np.number, np.bool_, np.str_, np.bytes_)):
            kind = type(v).__name__
            hint = ("numbers (days since a date, say) or text (.astype(str), each value then a category)"
                    if kind in ("Timestamp", "datetime", "date", "datetime64", "Timedelta", "timedelta",
                                "timedelta64") else "numbers or text")
            raise DataTypeError(f"{what}: column {column} holds {kind} values ({v!r} in row {i}); slang reads numbers "
                                f"and text (a column of categories too): convert the column to {hint}")


def _declared_text(X) -> set:
    """The positions of a DataFrame's columns of pandas' ``category`` dtype: categories, whatever their values (the
    frame says so, as ``categorical=`` does for a column of numbers)."""
    dtypes = getattr(X, "dtypes", None)
    if dtypes is None or not hasattr(dtypes, "__iter__"):
        return set()
    return {j for j, dtype in enumerate(dtypes) if str(dtype) == "category"}


def _cell_text(value) -> str:
    """A cell of a text column as the CSV reader would read it: stripped text; a boolean as ``True``/``False``; a
    whole number as its digits (``3``, also where a frame or array holds it as ``3.0``)."""
    if isinstance(value, (bytes, np.bytes_)):
        value = value.decode("utf-8", "replace")
    if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
        value = int(value)
    return str(value).strip()


def _categorical_columns(categorical, names, p: int) -> set:
    """The positions of ``fit(categorical=...)``'s columns: names (of a DataFrame's columns) or 0-based positions,
    a sequence or one comma-separated string, resolved as ``slang fit --categorical`` resolves a file's."""
    return {resolve_column("X", "categorical", key, list(names) if names is not None else None, p)
            for key in column_list("X", "categorical", categorical)}


def string_columns(X) -> tuple[str, ...] | None:
    """The column names of a DataFrame whose names are all strings (those that name features); None for an array,
    or columns named otherwise (numbers: positions, as scikit-learn takes them)."""
    names = getattr(X, "columns", None)
    if names is None:
        return None
    names = list(names)
    return tuple(names) if names and all(isinstance(n, str) for n in names) else None


def bool_labels(y) -> bool:
    """Whether the labels ``y`` are booleans: a bool array, or an object array of bools only."""
    a = np.asarray(y)
    return a.dtype.kind == "b" or (a.dtype.kind == "O" and a.size > 0
                                   and all(isinstance(v, (bool, np.bool_)) for v in a.ravel()))


def _targets(y, n: int, what: str = "y", text_numbers: bool = True, bool_text: bool = False) -> np.ndarray:
    """``y`` as a 1-D array of ``n`` label values or numbers. ``text_numbers``: strings that are all numbers (as
    ``read_csv(dtype=str)`` gives) are numbers, as a file's target cells are (a regression's targets; labels
    ordered by value, ``01`` and ``1`` one label); the estimators, whose ``classes_`` are the labels as given, keep
    them as text. Booleans are coded 0, 1, or with ``bool_text`` are the labels ``False`` and ``True`` (the cells
    ``DataFrame.to_csv`` writes: to score a run fitted on such a file)."""
    if y is None:
        raise DataError(f"{what}: the targets are required (got None)")
    a = np.asarray(y)
    if a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim != 1:
        raise DataError(f"{what}: expected a 1-D array of targets, got shape {a.shape}")
    if len(a) != n:
        raise DataError(f"{what}: {len(a)} targets for {n} examples")
    if a.dtype.kind == "c":
        raise DataTypeError(f"{what}: Complex data not supported")
    if bool_labels(a):  # (an object array of bools too: a Series that dropna left of object dtype)
        a = a.astype(bool)
        a = np.where(a, "True", "False") if bool_text else a.astype(np.int64)
    if a.dtype.kind == "O":
        items = a.tolist()
        if all(isinstance(v, str) for v in items):
            a = np.array(items, dtype=str)
        elif all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in items):
            a = np.array(items, dtype=np.float64)
        elif items and not any(_is_missing(v) for v in items) and len({type(v) for v in items}) == 1:
            # one kind, but neither text nor numbers (Decimal, Timestamp, ...): nothing to sort into classes
            raise DataTypeError(f"{what}: the targets are {type(items[0]).__name__} values ({items[0]!r}, ...); "
                                "pass numbers or strings")
        else:
            # labels of mixed kinds cannot be sorted into classes: name the first row that is missing or of
            # another kind than the first label, not NumPy's "'<' not supported between 'NoneType' and 'str'"
            for i, v in enumerate(items):
                if _is_missing(v):
                    raise DataError(f"{what}: row {i} has no target ({v!r}); every example needs one")
            kinds = [type(v).__name__ for v in items]
            i = next(i for i, k in enumerate(kinds) if k != kinds[0])
            raise DataTypeError(f"{what}: row {i} holds {items[i]!r} ({kinds[i]}) where row 0 holds {items[0]!r} "
                                f"({kinds[0]}); the targets must be of one kind")
    if text_numbers and a.dtype.kind == "U" and a.size and all(_is_number(v.strip()) for v in a.tolist()):
        a = np.array([float(v) for v in a.tolist()])  # ("nan" or "inf" among them: refused below, as a file's are)
    if a.dtype.kind in "iu" and a.size and max(int(a.max()), -int(a.min())) > 2**53:
        # numeric labels are kept as float64 numbers, which tell integers apart only up to 2^53
        i = int(np.argmax(np.abs(a.astype(np.float64))))
        raise DataError(f"{what}: row {i} holds {int(a[i])}, an integer label beyond 2^53, which slang's numeric "
                        "labels (float64) cannot tell from its neighbours; pass the labels as strings (y.astype(str))")
    if a.dtype.kind == "U":
        empty = np.char.str_len(np.char.strip(a)) == 0
        if empty.any():  # a missing value, as a file's empty cell is (a CSV export of one, keep_default_na=False)
            i = int(np.flatnonzero(empty)[0])
            raise DataError(f"{what}: row {i} has no target ({str(a[i])!r}, a missing value); every example needs "
                            "one (missing='drop' leaves such rows out)")
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        i = int(np.flatnonzero(~np.isfinite(a))[0])
        raise DataError(f"{what}: row {i} is {'NaN' if np.isnan(a[i]) else 'inf'} (the targets must be finite)")
    return a


def _digests(X: np.ndarray, y: np.ndarray) -> tuple[str, list]:
    """sha256 of the arrays' values, so that runs fitted to the same arrays are recognised as comparable: the
    targets as text, numbers written as float64 (``3`` and ``3.0`` are one target, and fit one posterior; integer
    targets' digest differed from the same values as floats, and ``evaluate --reference`` refused two runs of the
    same data); integers beyond 2**53, which float64 would round, stay as written. Second, for numeric targets that
    are whole numbers, the digests of them written as int64 and as their own integer type, which runs written before
    that rule hold for integer targets (so that they still compare with new ones, of integers of any width or of
    floats); else none."""
    # the features hashed once, each digest going on from a copy of that state (not features + targets: a copy of
    # every feature's bytes per digest)
    features = hashlib.sha256(np.ascontiguousarray(X, dtype=np.float64))
    y = np.asarray(y)

    def digest(targets: np.ndarray) -> str:
        h = features.copy()
        h.update(targets.astype(str).tobytes())
        return h.hexdigest()

    numeric = y.dtype.kind in "iuf" and (y.size == 0 or (np.all(np.isfinite(y)) and np.abs(y).max() <= 2 ** 53))
    if y.dtype.kind in "iu" and not numeric:  # (beyond 2**53: as written)
        return digest(y), []
    main = digest(y.astype(np.float64) if y.dtype.kind in "iu" else y)
    if not numeric or not np.all(y == np.round(y)):
        return main, []
    # as int64 text, and as the integer type given (the text's width is the type's: int32's '<U11', uint8's '<U3')
    kinds = [np.int64, *([y.dtype] if y.dtype.kind in "iu" and y.dtype != np.int64 else [])]
    return main, [digest(y.astype(kind)) for kind in kinds]


def _provenance(X: np.ndarray, y: np.ndarray) -> dict:
    digest, integers = _digests(X, y)
    return {"path": None, "sha256": digest, **({"sha256_as_integers": integers} if integers else {}),
            "format": "arrays", "rows": int(X.shape[0]), "features": int(X.shape[1]), "header": None,
            "delimiter": None, "target": None, "compressed": False}


def _encoded_test(X_test, y_test, schema: Schema, width: int, given_names, names, missing: str, notify,
                  text_numbers: bool = True):
    """``(X_test, y_test, provenance)``: the test set encoded by the training rows' schema, a DataFrame's columns
    taken by the names of X's (as every prediction takes them), incomplete rows handled as X's are; ``width`` is
    the number of X's columns; ``text_numbers``: its targets' numbers written as text are numbers, as the training
    targets' were (:func:`_targets`)."""
    test_names = string_columns(X_test)
    if given_names is not None and test_names is not None and test_names != given_names:
        absent = [n for n in given_names if n not in test_names]
        if absent:
            raise DataError(f"X_test: column {absent[0]!r} of X is missing")
        extra = [n for n in test_names if n not in given_names]
        if extra:  # (as FitResult.predict warns of the same frame)
            warnings.warn(f"X_test: {columns.ignored_message(extra)}", UserWarning, stacklevel=_caller_level())
        X_test = X_test[list(given_names)]
    elif given_names is None and test_names is not None:  # (as FitResult.predict warns of the same frame)
        warnings.warn(f"X_test: {columns.UNNAMED}", UserWarning, stacklevel=_caller_level())
    X_test, test_text, _ = _raw_features(X_test, "X_test", kinds=[column.kind for column in schema.columns],
                                         allow_missing=missing != "error")
    if missing != "error":  # (as slang fit --test leaves out a test file's rows without a target)
        X_test, test_text, y_test = _rows_with_targets(X_test, test_text, y_test, notify, "y_test")
    y_test = _targets(y_test, len(X_test), "y_test", text_numbers=text_numbers)
    if X_test.shape[1] != width:
        raise DataError(f"X_test: {X_test.shape[1]} features, but X has {width}")
    if missing == "drop":
        X_test, test_text, y_test = _complete_rows(X_test, test_text, y_test, "X_test", notify)
    X_test = schema.encode(X_test, test_text, impute=missing == "impute", where=_where("X_test", names))
    return X_test, y_test, {"source": "arrays", **_provenance(X_test, y_test)}


def fit(X, y, *, X_test=None, y_test=None, progress: Callable[[int, int], None] | None = None,
        notify: Callable[[str], None] | None = None, **options) -> FitResult:
    """Fit a Gaussian posterior to ``X : (N, P)`` and targets ``y : (N,)``; the options of ``slang fit``.

    Parameters
    ----------
    X, y : array_like
        Training features (numbers) and targets (label values, or numbers for regression). A DataFrame's string
        column names are the features' names: every prediction then takes its columns by name. Targets that are all
        numbers written as text are numbers, as a file's target cells are; booleans are the labels 0 and 1 (a run
        file then also reads the ``True``/``False`` cells of the frame's CSV as them).
    X_test, y_test : array_like, optional
        Test data, scored at the end of the fit (stored in ``metrics["test"]``).
    method : str or None
        A name in ``slangcli.methods.METHODS`` (``slang fit --help`` lists them with a line each); None (default):
        the task's (``slangcli.training.options.DEFAULT_METHOD``: ``ivon`` for a classification network, ``slang``
        otherwise).
    hidden : int, sequence of int or str
        Hidden-layer widths (``50``, ``(400, 400)`` or ``"400,400"``); none gives a linear model.
    likelihood : str
        ``auto`` (two label values: bernoulli; a few integers or strings: categorical; else gaussian),
        ``bernoulli``, ``categorical`` or ``gaussian``.
    missing : {"error", "impute", "drop"}
        A missing cell of the features (NaN, None, pandas' NA): an error naming it (default), filled in with the
        training rows' mean or most frequent level (stored, and applied again by every prediction), or its row left
        out; as ``slang fit --missing``. The targets must be complete.
    categorical : str, sequence or None
        Columns of numbers to one-hot encode as categories (integer codes), as ``slang fit --categorical``: column
        names of a DataFrame or 0-based positions, a sequence or one comma-separated string. A column of strings is
        a category anyway. Every prediction then reads those columns as categories (a level unseen in training is
        refused, naming it).
    standardize : bool
        Standardise the features (and a regression target) with training statistics (stored, and applied again
        by every prediction); True by default, for every model, as ``slang fit``; False uses them as given.
    noise_precision, prior_precision : float or "auto"
        ``"auto"`` learns them along with the posterior (``slangcli.training.learned``); the noise precision's default.
    **hyper
        The method's own hyperparameters by name (``rank=10``, ``samples=4``, ``lr=0.1``); a name the method does
        not have is an error. ``slang fit --help`` lists them with their defaults.

    The options are :class:`slangcli.training.options.FitOptions`, those of ``slang fit`` with ``-`` written ``_``
    (``prior_precision``, ``epochs``, ``tune``, ...), with the same defaults; ``progress(step, n_steps)`` and
    ``notify(message)`` are called during the fit. A warning (a fit far worse than, or barely better than, a
    constant predictor, with its likely cause) is also raised as a ``UserWarning``, as ``slang fit`` prints it.

    Returns
    -------
    FitResult
    """
    try:
        return _fit(X, y, options, X_test=X_test, y_test=y_test, progress=progress, notify=notify)
    except (ConfigError, DataError) as exc:
        _rename(exc)
        raise


def _rename(exc: Exception, estimator: bool = False) -> None:
    """Rewrite, in place, the message of ``exc`` (the checks are written for slang fit's flags) with the names the
    Python caller passed (:func:`python_names`)."""
    exc.args = (python_names(str(exc), estimator), *exc.args[1:])


def _fit(X, y, options: dict, *, X_test=None, y_test=None, progress=None, notify=None,
         estimator: bool = False) -> FitResult:
    """:func:`fit` with its ``options`` as a dict (so that no option can bind ``estimator``), its invalid options
    named by their command-line flags (:func:`_rename` renames them for each door; its warnings already renamed,
    for an estimator's parameters with ``estimator``)."""
    missing = _missing_policy(options.pop("missing", "error"))
    categorical = options.pop("categorical", None)
    fit_options = FitOptions.of(**options)
    notify = _warning_too(notify, estimator)
    given_names, target_name = string_columns(X), getattr(y, "name", None)
    if given_names is not None:
        check_distinct_names(given_names, "X")
    X, text, names = _raw_features(X, "X", allow_missing=missing != "error", categorical=categorical)
    if missing != "error":
        X, text, y = _rows_with_targets(X, text, y, notify)
    y = _targets(y, len(X), "y", text_numbers=not estimator)
    if (X_test is None) != (y_test is None):
        raise DataError("give both X_test and y_test, or neither")
    names = names or tuple(f"x{j}" for j in range(X.shape[1]))
    if missing == "drop":
        X, text, y = _complete_rows(X, text, y, "X", notify)
    # calibrate: the rows held out of the fit (slangcli.data.prepare.calibration_split), as slang fit holds out a file's
    kept = held = None
    if fit_options.calibrate is not None:
        kept, held = calibration_split(len(X), fit_options.calibrate, fit_options.seed, path="X")
    standardize = bool(fit_options.standardize)
    # the data schema, as slang fit fits a file's: columns of text become categories (or booleans), and the values a
    # missing cell gets (the training mean, the most frequent level) are stored
    schema = Schema.fit(X, text, names=names, path="X", missing=missing, standardize=standardize, train=kept)
    test = None
    if X_test is not None:
        X_test, y_test, test = _encoded_test(X_test, y_test, schema, X.shape[1], given_names, names, missing,
                                               notify, text_numbers=not estimator and y.dtype.kind != "U")
    X = schema.encode(X, text, impute=missing == "impute", where=_where("X", names))
    train = _provenance(X, y)  # (of every row given: the rows held out are among them)
    # what slang fit says of a file's columns: identifiers (judged on every row, as slang fit judges a file's),
    # decimal commas read as text, a level per row
    warnings = [*task.identifier_columns(X, schema.encoded_names, frame=True),
                *task.decimal_commas(schema.columns, frame=True),
                *task.one_level_per_row(schema.columns, len(X) if kept is None else len(kept), frame=True)]
    calibration = None
    if held is not None:
        calibration = (X[held], y[held], held)
        X, y = X[kept], y[kept]
    for warning in warnings:
        notify(warning)
    train["target"] = target_name if isinstance(target_name, str) else None
    # features known by name, as a header row names a file's: matched by name by every prediction
    train["header"] = given_names is not None
    data_options = DataOptions(path=None, standardize=standardize, missing=missing,
                               categorical=_recorded(categorical)).record()
    prepared = prepare(X, y, X_test, y_test, likelihood=fit_options.likelihood, standardize=standardize, name="y",
                       test_name="y_test", train_provenance=train, test_provenance=test,
                       feature_names=schema.encoded_names, options=data_options, features_name="X",
                       test_features_name="X_test", calibration=calibration)
    prepared.data["schema"] = with_target(schema, prepared).record()
    run = fit_prepared(prepared, fit_options, command=[], progress=progress, notify=notify)
    return FitResult(run)


# the data options that apply to arrays, declared with slang fit's: what a missing cell (NaN, None, pandas' NA)
# means, and the columns of numbers read as categories
MISSING = next(f for f in fields(DataOptions) if f.name == "missing")
CATEGORICAL = next(f for f in fields(DataOptions) if f.name == "categorical")


def _recorded(categorical):
    """``categorical`` as the run file's data options record ``--categorical``: a comma-separated string."""
    if categorical is None or isinstance(categorical, str):
        return categorical
    return ",".join(str(c) for c in categorical)


def _missing_policy(value) -> str:
    check_value(MISSING, value, "missing")
    return value


# how the fit's warnings begin, as slang fit prints them
WARNING = "warning: "


def _warning_too(notify: Callable[[str], None] | None, estimator: bool = False) -> Callable[[str], None]:
    """``notify``, which also raises the fit's warnings (the messages ``slang fit`` prints as ``warning: ...``) as
    a ``UserWarning``, whether or not a ``notify`` was given: Python's way to say that a result should not be
    trusted as it is (at the caller of ``fit``, or of an estimator's ``fit``), naming the options as that caller
    sets them (:func:`python_names`)."""
    def tell(message: str) -> None:
        if message.startswith(WARNING):
            warnings.warn(python_names(message[len(WARNING):], estimator), UserWarning, stacklevel=_caller_level())
        if notify is not None:
            notify(message)

    return tell


def _caller_level() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside slangcli (the user's call)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith("slangcli"):
        frame, level = frame.f_back, level + 1
    return level


def _rows_with_targets(X: np.ndarray, text: dict, y, notify, what: str = "y"):
    """The rows whose target is there (not None, NaN, pandas' NA or ""), as ``slang fit --missing drop`` or
    ``impute`` keeps a file's: a target is never imputed. The count of the others is said through ``notify``
    (``what``: the targets' name)."""
    a = np.asarray(y)
    if a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim != 1 or len(a) != len(X):
        return X, text, y  # (refused, naming the shape, by _targets)
    if a.dtype.kind == "f":
        gaps = np.isnan(a)
    elif a.dtype.kind in "OU":
        gaps = np.array([v is None or (isinstance(v, str) and not v.strip()) or type(v).__name__ == "NAType"
                         or (isinstance(v, (float, np.floating)) and np.isnan(v)) for v in a.tolist()], dtype=bool)
    else:
        return X, text, y
    if not gaps.any():
        return X, text, y
    if gaps.all():
        raise DataError(f"{what}: every row's target is missing: nothing is left to "
                        f"{'fit' if what == 'y' else 'score'}")
    notify(f"{what}: {int(gaps.sum())} row{'s' if gaps.sum() != 1 else ''} with a missing target left out: a target "
           "is never imputed")
    keep = ~gaps
    return X[keep], {k: cells[keep] for k, cells in text.items()}, a[keep]


def _complete_rows(X: np.ndarray, text: dict, y: np.ndarray, what: str, notify):
    """The rows of ``X`` (with their ``text`` cells and targets ``y``) without a missing cell, as ``--missing
    drop`` keeps a file's; the count of the others said through ``notify``."""
    numeric = [j for j in range(X.shape[1]) if j not in text]  # (a column of text is NaN in X: its cells are text's)
    gaps = np.isnan(X[:, numeric]).any(axis=1)
    for cells in text.values():
        gaps |= cells == ""
    if gaps.any():
        notify(f"{what}: {int(gaps.sum())} row{'s' if gaps.sum() != 1 else ''} with a missing value left out "
               "(missing='drop')")
    keep = ~gaps
    return X[keep], {k: cells[keep] for k, cells in text.items()}, y[keep]


# the keywords of fit, generated from the declarations: help(), IDEs and notebooks list them with their defaults
fit.__signature__ = signature(
    [*(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in ("X", "y")),
     *(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None) for name in ("X_test", "y_test"))],
    [inspect.Parameter("missing", inspect.Parameter.KEYWORD_ONLY, default=MISSING.default),
     inspect.Parameter("categorical", inspect.Parameter.KEYWORD_ONLY, default=CATEGORICAL.default),
     *(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None) for name in ("progress", "notify"))])


def _where(what: str, names) -> Callable[[int, int], str]:
    """The place of a cell of array data in messages: ``X: row 3, column 'island'``."""
    return lambda i, k: f"{what}: row {i}, column {names[k]!r}"


def load(path) -> FitResult:
    """The run file at ``path`` (written by ``slang fit``, ``slang compress`` or :meth:`FitResult.save`)."""
    return FitResult(read_run(path), path=str(path))


class Predictions(_Predictions):
    """Per-example predictions: the arrays of ``slang predict`` as attributes.

    Classification: ``probabilities : (N, C)`` (columns in the order of ``classes``), ``predicted`` (label
    values), ``entropy_total``, ``entropy_aleatoric``, ``entropy_epistemic`` (nats). Regression, in the target's
    units: ``mean``, ``std`` (= ``std_total``), ``std_aleatoric``, ``std_epistemic``, and ``lower``, ``upper``
    of the central predictive interval.

    A fit with ``calibrate`` adds, at the same level (``interval``), the split-conformal interval
    ``calibrated_lower``, ``calibrated_upper`` (regression) or prediction set ``calibrated_set : (N, C)`` (1 for the
    classes in it) and ``calibrated_set_size`` (classification); ``info["calibration"]`` says how many calibration
    rows stand behind them (``slangcli.predictive.conformal``: coverage at least the level for rows exchangeable
    with them).
    """

    def __getattr__(self, name):
        arrays = self.__dict__.get("arrays")
        if arrays is not None:
            if name == "std" and "std_total" in arrays:
                return arrays["std_total"]
            if name in arrays:
                return arrays[name]
        raise AttributeError(name)


class FitResult:
    """A fitted posterior with its model, data preparation, history and metrics (one run file's contents).

    Attributes: ``run`` (the :class:`slangcli.runfile.io.Run` a run file holds), and from it ``posterior`` (its ``mean``
    and ``marginal_variances()``; a fit with ``members > 1`` has a ``MixtureGaussian``, whose ``members`` are the
    posteriors and ``noise_precision`` their noise precisions), ``model`` (member 0's, for a mixture), ``metrics``,
    ``history``, ``config``, ``classes`` (label values of a classifier), ``feature_names`` and ``n_features``.
    """

    def __init__(self, run: Run, path: str | None = None):
        self.run = run
        self.path = path

    # ------------------------------------------------------------------ what it holds
    posterior = property(lambda self: self.run.posterior)
    model = property(lambda self: self.run.model)
    metrics = property(lambda self: self.run.metrics)
    history = property(lambda self: self.run.history)
    config = property(lambda self: self.run.config)
    likelihood = property(lambda self: self.run.model.likelihood)
    n_features = property(lambda self: self.run.model.sizes[0])

    @property
    def calibration(self) -> dict | None:
        """The calibration of a fit with ``calibrate`` (``slang fit --calibrate``): ``n``, ``fraction``, ``seed``,
        ``score``, the sorted ``scores`` of the held-out rows and their rows ``index``; None without."""
        return dict(self.run.calibration) if self.run.calibration else None

    @property
    def classes(self) -> list | None:
        """A classifier's labels, in the order of its probabilities' columns: strings, or numbers (integral ones
        as ``int``); None for a regression."""
        labels = self.run.data.get("labels")
        return list(LabelMap(tuple(labels["classes"])).values) if labels else None

    @property
    def feature_names(self) -> list[str]:
        return list(self.run.data.get("feature_names", []))

    def __repr__(self) -> str:
        where = f" from {self.path}" if self.path else ""
        kind = self.posterior.kind
        if kind == "mixture":
            kind = f"mixture of {self.posterior.n_members} {self.posterior.members[0].kind}"
        return (f"<FitResult{where}: {self.config.get('method')} {kind} posterior, "
                f"{self.model.likelihood} model {'-'.join(map(str, self.model.sizes))}, "
                f"{self.model.n_params} parameters>")

    # ------------------------------------------------------------------ using it
    def _columns(self, X, what="X", stacklevel=3, allow_missing: bool = False):
        """The feature columns of ``X`` in the model's order, as read (not encoded): ``(A, text)`` as
        ``_raw_features`` makes them, the kinds the run's data schema says. A DataFrame's columns are taken by name
        when the fit knows its features by name, else by position (``slangcli.data.columns``). Columns ignored are
        warned about (``stacklevel``: the user's call)."""
        schema = schema_of(self.run)
        names = string_columns(X)
        labels = list(names) if names is not None else None
        if names is None and columns.named(self.run) and getattr(X, "columns", None) is not None:
            # labels that are not all strings (0, 1, 2) name the columns of a fit that knew "0", "1", "2" by their
            # text: matched so when they hold every feature's name, not by position
            texts = tuple(str(label) for label in X.columns)
            if len(set(texts)) == len(texts) and set(schema.names) <= set(texts):
                names, labels = texts, list(X.columns)
        if names is not None and columns.named(self.run):
            match = columns.match_names(self.run, names, what)
            ignored = columns.unexpected(self.run, match)
            if ignored:
                warnings.warn(f"{what}: {columns.ignored_message(ignored)}", UserWarning, stacklevel=stacklevel)
            if match.features != list(range(len(names))):
                try:
                    X = X[[labels[j] for j in match.features]]  # only these columns need to be read
                except (TypeError, KeyError, IndexError):  # an array-like with names but no column selection
                    X = np.asarray(X)[:, match.features]
        elif names is not None:
            warnings.warn(f"{what}: {columns.UNNAMED}", UserWarning, stacklevel=stacklevel)
        kinds = [column.kind for column in schema.columns]
        A, text, _ = _raw_features(X, what, kinds=kinds, allow_missing=allow_missing)
        P = len(schema.columns)
        if A.shape[1] != P:
            shown = f": {', '.join(schema.names)}" if columns.named(self.run) and P <= 20 else ""
            raise DataError(f"{what}: {A.shape[1]} columns, but the model takes {P} features{shown}")
        return A, text

    def _inputs(self, X, what="X", missing: str | None = None, y=None):
        """The model's inputs of ``X``, its columns encoded, imputed (``missing="impute"``; the default when the
        fit imputed) and standardised as in the fit; with targets ``y``, ``(inputs, coded targets)``."""
        fitted = (self.run.data.get("options") or {}).get("missing")
        missing = missing or ("impute" if fitted == "impute" else "error")
        if missing not in ("impute", "error"):
            raise DataError(f"missing must be 'impute' or 'error', got {missing!r}")
        impute = missing == "impute"
        A, text = self._columns(X, what, stacklevel=4, allow_missing=impute)
        names = schema_of(self.run).names
        if y is None:
            return transform(self.run, A, None, what, text=text, where=_where(what, names), impute=impute)[0]
        # read as the fit read its targets: labels of text (a file's, booleans among them) or numbers
        text_labels = bool(self.classes) and isinstance(self.classes[0], str)
        y = _targets(y, len(A), "y", text_numbers=not text_labels, bool_text=text_labels)
        return transform(self.run, A, y, "y", text=text, where=_where(what, names), impute=impute)

    def predict(self, X, *, samples: int | None = None, seed: int | None = None, interval: float = 0.95,
                missing: str | None = None) -> Predictions:
        """Predictions with their uncertainty for every row of ``X``, the same as ``slang predict`` (same
        ``samples`` and ``seed``: the same numbers; by default the fit's ``eval_samples`` and ``seed``). Columns of
        text are read as the fit read them (categories, booleans). ``missing``: ``"impute"`` fills a missing value
        (None, NaN) in with the training rows' mean or most frequent value, as ``slang predict --missing impute``;
        ``"error"`` refuses it; by default, ``impute`` when the fit imputed (``--missing impute``), else ``error``.
        ``interval`` is the level of the central predictive interval and, for a fit with ``calibrate``, of its
        calibrated intervals or prediction sets."""
        samples, seed = fit_draws(self.run, samples, seed)
        check_samples(samples, "samples")  # (named as passed: the predictive would name --samples)
        inputs = self._inputs(X, missing=missing)
        out = predict_arrays(self.run, inputs, samples=samples, seed=seed, interval=interval)
        return Predictions(arrays=out.arrays, classes=out.classes, info=out.info)

    def predict_proba(self, X, *, samples: int | None = None, seed: int | None = None):
        """Predictive class probabilities ``(N, C)``, columns in the order of :attr:`classes`."""
        if self.likelihood == "gaussian":
            raise DataError("predict_proba needs a classification model; this one is a regression")
        return self.predict(X, samples=samples, seed=seed).probabilities

    def score(self, X, y, *, predictive: str = "auto", samples: int | None = None, seed: int | None = None,
              bins: int = 15, missing: str | None = None) -> dict:
        """Test scores of the posterior predictive on ``(X, y)``, as ``slang evaluate`` computes them:
        classification ``nll``, ``accuracy``, ``ece`` and its bins; regression ``rmse``, ``loglik`` and interval
        ``coverage`` (original units); a fit with ``calibrate`` also the coverage of its calibrated intervals
        (``calibrated_coverage``) or prediction sets (``calibrated_set_coverage``, ``calibrated_set_size``).
        ``missing`` is :meth:`predict`'s: by default a missing feature is imputed when the fit imputed, as
        ``slang evaluate`` does; ``samples`` and ``seed`` too (by default the fit's ``eval_samples`` and ``seed``)."""
        samples, seed = fit_draws(self.run, samples, seed)
        check_samples(samples, "samples")
        X, y = self._inputs(X, missing=missing, y=y)
        target_scale = float(self.run.arrays["target_scale"][0]) if "target_scale" in self.run.arrays else 1.0
        target_mean = float(self.run.arrays["target_mean"][0]) if "target_mean" in self.run.arrays else 0.0
        out = score(self.model, self.posterior, self.run.prior_precision, X_train=None, y_train=None,
                    X_test=X, y_test=y, target_scale=target_scale, predictive=predictive,
                    samples=samples, seed=seed, bins=bins, calibration=self.run.calibration,
                    target_mean=target_mean)
        return out["test"]

    def sample(self, n: int, *, seed: int | None = None) -> np.ndarray:
        """``n`` parameter vectors ``theta ~ q`` as rows ``(n, D)``: the draws behind :meth:`predict` with the same
        ``seed`` (by default the fit's, as :meth:`predict`'s; the flat layout is ``model.layout``). A mixture of K
        posteriors (``members``) gives its members' draws one member after the other, ``ceil(n / K)`` each as
        :meth:`predict` draws them, the last member's cut to make ``n``."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            # (a float is no count of draws, not one to round: sample(2.5) gave 2)
            raise ConfigError(f"n must be a positive whole number, got {n!r}")
        n, D = int(n), self.model.n_params
        check_draws(n, D, f"n = {n}")  # before any is drawn: 10**10 draws grew memory until the system gave out
        out = np.empty((n, D))
        at = 0
        seed = fit_draws(self.run, None, seed)[1]
        for part, _, part_seed, part_samples in draw_parts(self.posterior, self.model, seed, n):
            for theta in weight_samples(part, part_seed, part_samples):
                take = min(len(theta), n - at)
                out[at : at + take] = theta[:take]
                at += take
        return out

    def compress(self, rank: int) -> FitResult:
        """The k-tied posterior with rank-``rank`` standard deviations of every weight matrix (``slang
        compress``).

        Its provenance names the run file this result was loaded from or saved to (as an absolute path, like
        ``slang compress``), if any, but no sha256: what is compressed is the posterior in memory, not a file. A
        mixture (``members``) is compressed member by member.
        """
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank < 1:
            # (as slang compress --rank: a float or a text is no rank, not one to round)
            raise ConfigError(f"rank must be a positive whole number, got {rank!r}")
        check_finished(self.run, self.path or "this result", self.path)
        path = os.path.abspath(self.path) if self.path else None
        source = {"path": path, "sha256": None, "posterior": POSTERIOR_NAMES[type(self.posterior)],
                  "method": self.config.get("method")}
        return FitResult(compressed_run(self.run, int(rank), source).run)

    def save(self, path) -> None:
        """Write the run file ``path`` (atomically), readable by every ``slang`` command."""
        run = self.run
        if not run.meta:
            run = replace(run, meta=meta())
        write_run(path, run)
        self.path = str(path)

