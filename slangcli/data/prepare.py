"""Preparing data for a model: label coding, a seeded train/test split, standardisation, width checks, and
:func:`prepare`, which turns raw arrays (from files or from Python) into a model's training and test data.

``fit_labels`` maps the distinct label values of the training data to integer codes (numbers ascending,
strings lexicographically) in a JSON-serialisable ``LabelMap`` that a run file stores, so that data read later
is coded the same way. ``train_test_split`` is a seeded random split; ``Standardizer`` is the per-feature
affine scaling fitted on the training rows; ``check_width`` checks new data against the trained width. Every
failure is a ``DataError`` with one line.

Every pass over the rows goes through them a block at a time (``blocks.row_blocks``), so that preparing data takes
the memory of the prepared arrays and of one block, not of a temporary copy of all the data per operation: the same
results bit for bit, the sums included (:func:`squared_deviations` adds the blocks in NumPy's own order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from slangcli import streams
from slangcli.blocks import pairwise_sum, row_blocks
from slangcli.data.readers._common import _fmt_label, _is_number, _listing
from slangcli.errors import DataError

__all__ = [
    "LabelMap",
    "fit_labels",
    "train_test_split",
    "calibration_split",
    "Standardizer",
    "check_width",
]


# ---------------------------------------------------------------------------------------------------------
# passes over the rows

def squared_deviations(X: np.ndarray, mean) -> np.ndarray:
    """``((X - mean) ** 2).sum(axis=0)`` for float64 ``X : (N,)`` or ``(N, P)``, equal bit for bit to NumPy's, without
    its temporary copy of ``X``.

    NumPy adds the rows of a C-ordered ``(N, P)`` array (P > 1) one after the other, so the blocks are added in turn,
    each starting from the sum so far; a single column it adds pairwise (``blocks.pairwise_sum``)."""
    n = X.shape[0]
    step = row_blocks(n, X.shape[1] if X.ndim == 2 else 1)[0].stop if n else 1

    def block(lo, hi):
        d = X[lo:hi] - mean
        d *= d
        return d

    if X.ndim == 2 and X.shape[1] > 1:
        total = None
        for lo in range(0, n, step):
            d = block(lo, lo + step)
            if total is not None:
                d[0] += total
            total = d.sum(axis=0)
        return total if total is not None else np.zeros(X.shape[1])
    return pairwise_sum(n, step, block)


def _distinct(y: np.ndarray, limit: int | None = None):
    """``np.unique(y)``, found a block of rows at a time; None once more than ``limit`` values are found."""
    found = None
    for rows in row_blocks(len(y)):
        block = np.unique(y[rows])
        found = block if found is None else np.unique(np.concatenate([found, block]))
        if limit is not None and len(found) > limit:
            return None
    return found if found is not None else np.unique(y)


# ---------------------------------------------------------------------------------------------------------
# labels


@dataclass(frozen=True)
class LabelMap:
    """Original label values and their integer codes: ``classes[code]`` is the value.

    Attributes
    ----------
    classes : tuple
        Numbers as float or strings as str (never mixed), in the order ``fit_labels`` sorted them.
        JSON-serialisable; a list read back from JSON is accepted and made a tuple.
    """

    classes: tuple

    def __post_init__(self):
        classes = tuple(self.classes)
        if not classes:
            raise DataError("a label map needs at least one class")
        if all(isinstance(c, str) for c in classes):
            classes = tuple(str(c) for c in classes)
        elif all(isinstance(c, (int, float, np.integer, np.floating)) and not isinstance(c, bool) for c in classes):
            classes = tuple(float(c) for c in classes)
        else:
            raise DataError(f"label classes must be all numbers or all strings, got {classes!r}")
        if len(set(classes)) != len(classes):
            raise DataError(f"label classes must be distinct, got {_listing(classes)}")
        object.__setattr__(self, "classes", classes)

    @property
    def numeric(self) -> bool:
        return isinstance(self.classes[0], float)

    @property
    def names(self) -> tuple[str, ...]:
        """The classes as text, integral numbers without a trailing ``.0`` (``-1``, ``4``, ``benign``)."""
        return tuple(_fmt_label(c) for c in self.classes)

    def encode(self, y, *, path, dtype=np.int64, where: Callable[[int], str] | None = None) -> np.ndarray:
        """Codes of the labels ``y : (N,)`` as an array ``(N,)`` of ``dtype`` (int64; float64 for a Bernoulli
        likelihood's targets, made directly rather than converted from a copy).

        Numeric and string labels are compared by value: the string ``"1"`` matches the class ``1.0``, and
        the number ``1.0`` matches the class ``"1"``; where the classes are 0 and 1 (a boolean target's), the text
        ``True`` and ``False`` (in any case) match 1 and 0. A value not among ``classes`` is a ``DataError`` naming
        the first offending row: ``where(i)`` for 0-based row ``i`` (a file's ``path:line``), by default
        ``path: row i``.
        """
        y = np.asarray(y)
        if y.ndim != 1:
            raise DataError(f"{path}: labels must be one-dimensional, got shape {y.shape}")
        codes = np.empty(len(y), dtype=dtype)
        for rows in row_blocks(len(y)):  # (each row's code alone: the blocks bound the temporaries)
            block, unseen = self._match(y[rows])
            codes[rows] = block
            unknown = np.flatnonzero(unseen)
            if unknown.size:
                i = rows.start + int(unknown[0])
                raise UnseenLabel(
                    f"{where(i) if where is not None else f'{path}: row {i}'}: label {_fmt_label(y[i].item())!r} not "
                    f"seen in training data (known: {_listing(self.classes)})"
                )
        return codes

    def seen(self, y) -> np.ndarray:
        """Whether each label of ``y : (N,)`` is among the classes, compared as :meth:`encode` compares."""
        y = np.asarray(y)
        out = np.empty(len(y), dtype=bool)
        for rows in row_blocks(len(y)):
            out[rows] = ~self._match(y[rows])[1]
        return out

    def _match(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The code of each label of ``y`` (the nearest class where it is none), and where it is none."""
        known = np.array(self.classes, dtype=np.float64 if self.numeric else str)
        order = np.argsort(known, kind="stable")
        if self.numeric:
            # the classes 0 and 1 of booleans (a bool target, coded 0, 1) are also their text, True and False, as
            # DataFrame.to_csv writes them
            truth = _TRUTH if set(self.classes) <= {0.0, 1.0} else {}
            values = y.astype(np.float64) if y.dtype.kind in "biuf" else np.array(
                [_label_number(v, truth) for v in y], dtype=np.float64)
        else:
            values = y if y.dtype.kind == "U" else np.array([_fmt_label(v) for v in y], dtype=str)
            if values.size == 0:
                values = values.astype(known.dtype)
        block = order[np.minimum(np.searchsorted(known[order], values), len(known) - 1)]
        return block, known[block] != values  # (NaN != NaN, so a NaN label is unknown too)

    @property
    def values(self) -> tuple:
        """The classes as a Python caller sees them: strings, or numbers with integral ones as ``int`` (the labels
        0, 1, 2 of an integer target, not 0.0, 1.0, 2.0) while every one is within 2^53 (a float64 tells integers
        apart only so far, and an int64 holds them; 1e20 stays a float)."""
        if self.numeric and all(c.is_integer() and abs(c) <= 2**53 for c in self.classes):
            return tuple(int(c) for c in self.classes)
        return self.classes

    def decode(self, codes) -> np.ndarray:
        """Label values of integer codes ``(N,)``, as :attr:`values` gives them: int64 where every class is an
        integral number, else float64, or str."""
        codes = np.asarray(codes, dtype=np.int64)
        if not self.numeric:
            return np.array(self.classes, dtype=str)[codes]
        integral = isinstance(self.values[0], int)
        return np.array(self.values, dtype=np.int64 if integral else np.float64)[codes]


_TRUTH = {"true": 1.0, "false": 0.0}


def _label_number(value, words: dict) -> float:
    """A label as a number: its value, or one of ``words`` (text, in any case), NaN when it is none."""
    if isinstance(value, str) and value.strip().lower() in words:
        return words[value.strip().lower()]
    return _float_or_nan(value)


def _float_or_nan(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return np.nan


def fit_labels(y, *, path, n_classes=None) -> LabelMap:
    """The ``LabelMap`` of the distinct values of ``y : (N,)``, sorted.

    Numbers sort ascending (so -1/+1, 0/1 and 2/4 all become codes 0/1), strings lexicographically
    ("benign"/"malignant" -> 0/1). Values keep exact equality: non-integer numbers are just values.

    Parameters
    ----------
    y : (N,) array_like
        Training labels, numeric or str.
    path : str
        Names the data in messages.
    n_classes : None or int
        If given, exactly this many distinct values are required (2 for a binary model); else at least 2.
    """
    y = np.asarray(y)
    if y.ndim != 1 or y.size == 0:
        raise DataError(f"{path}: labels must be a non-empty one-dimensional array, got shape {y.shape}")
    if y.dtype.kind == "O":
        items = y.tolist()
        if all(isinstance(v, str) for v in items):
            y = np.array(items, dtype=str)
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
            y = np.array(items, dtype=np.float64)
        else:
            raise DataError(f"{path}: labels must be all numbers or all strings")
    if y.dtype.kind in "biuf":
        for rows in row_blocks(len(y)):
            nan = np.flatnonzero(np.isnan(y[rows].astype(np.float64)))
            if nan.size:
                raise DataError(f"{path}: data row {rows.start + nan[0] + 1}: label is NaN")
        classes = tuple(float(v) for v in np.unique(_distinct(y).astype(np.float64)))
    elif y.dtype.kind == "U":
        classes = tuple(str(v) for v in _distinct(y))
    else:
        raise DataError(f"{path}: labels must be numbers or strings, got dtype {y.dtype}")

    found = f"found {len(classes)}: {_listing(classes)}"
    if n_classes is not None and len(classes) != n_classes:
        model = "a binary model" if n_classes == 2 else f"a {n_classes}-class model"
        raise DataError(f"{path}: {model} needs exactly {n_classes} label values, {found}")
    if len(classes) < 2:
        raise TooFewClasses(f"{path}: need at least 2 label values, {found}")
    return LabelMap(classes)


class TooFewClasses(DataError):
    """The training labels hold one value: a split of a file that has more may have taken the others."""


class UnseenLabel(DataError):
    """A label that the training labels do not hold: a split of one file may have put every row of it in the test
    rows."""


# ---------------------------------------------------------------------------------------------------------
# splitting, scaling, shapes


def train_test_split(n, test_fraction, seed) -> tuple[np.ndarray, np.ndarray]:
    """A seeded random split of ``range(n)``: sorted int64 ``(train, test)`` index arrays.

    The test set holds ``round(test_fraction * n)`` rows, taken first from
    ``np.random.default_rng(seed).permutation(n)``; each side must keep at least one row.
    """
    if not 0.0 < test_fraction < 1.0:
        raise DataError(f"test fraction must lie strictly between 0 and 1, got {test_fraction}")
    n_test = round(test_fraction * n)
    if n_test < 1 or n - n_test < 1:
        raise DataError(
            f"cannot split {n} rows with test fraction {test_fraction}: "
            f"{n_test} test and {n - n_test} training rows (need at least 1 each)"
        )
    permutation = np.random.default_rng(seed).permutation(n)
    train = np.sort(permutation[n_test:]).astype(np.int64)
    test = np.sort(permutation[:n_test]).astype(np.int64)
    return train, test


def calibration_split(n: int, fraction: float, seed: int, *, path) -> tuple[np.ndarray, np.ndarray]:
    """The rows ``--calibrate fraction`` holds out of ``n`` training rows: sorted int64 ``(kept, held out)`` indices
    into them. ``round(fraction * n)`` rows are held out, the first of a permutation drawn from the fit's seed on its
    own stream (``streams.CALIBRATE``), so that no other random stream of the fit changes; each side must keep at
    least one row (a DataError naming ``path`` otherwise)."""
    n_held = round(fraction * n)
    if n_held < 1 or n - n_held < 1:
        raise DataError(f"{path}: --calibrate {fraction:g} of {n} training row{'s' if n != 1 else ''} holds out "
                        f"{n_held} and trains on {n - n_held}; split conformal needs at least 1 row on each side "
                        f"(give a {'larger' if n_held < 1 else 'smaller'} fraction, or more rows)")
    permutation = streams.derive_rng(seed, streams.CALIBRATE).permutation(n)
    return np.sort(permutation[n_held:]).astype(np.int64), np.sort(permutation[:n_held]).astype(np.int64)


@dataclass(frozen=True, eq=False)
class Standardizer:
    """Per-feature affine scaling ``(X - mean) / scale`` fitted on training data.

    Attributes
    ----------
    mean : (P,) float64 ndarray
    scale : (P,) float64 ndarray
        The standard deviation (ddof=0), or 1.0 for a constant column.
    """

    mean: np.ndarray
    scale: np.ndarray

    @classmethod
    def fit(cls, X) -> "Standardizer":
        """Fit on ``X : (N, P)``, N >= 1."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[0] == 0:
            raise DataError(f"a standardizer needs a non-empty (N, P) array, got shape {X.shape}")
        # Data of ordinary magnitude: the mean, and the standard deviation a block of rows at a time (without the
        # temporary copy of X that X.std makes), bit for bit NumPy's. Beyond, in units of a power of two near each
        # column's largest magnitude: the squares of features near 1e300 overflow (an infinite scale) and those of
        # features near 1e-300 underflow to 0 (a zero scale), while in these units they are of order 1. Scaling by
        # a power of two is exact; it costs a copy of the data, which only such data pay.
        largest = np.maximum(X.max(axis=0), -X.min(axis=0))
        if np.all((largest < ORDINARY) & ((largest > 1 / ORDINARY) | (largest == 0))):
            mean = X.mean(axis=0)
            scale = np.sqrt(squared_deviations(X, mean) / X.shape[0])
        else:
            k = _exponents(largest)
            scaled = np.ldexp(X, -k)
            mean = np.ldexp(scaled.mean(axis=0), k)
            scale = np.ldexp(scaled.std(axis=0), k)
            del scaled
        # A constant column has std 0 (or rounding noise near 1e-17 when its mean is not exact): dividing
        # would give NaN or amplify that noise. Centring on the value itself with scale 1 maps it to exactly
        # 0, and a different value at prediction time stays in its raw units instead of exploding. (Its maximum
        # and minimum are compared, not subtracted: the range of features near +-1e308 overflows.)
        constant = X.max(axis=0) == X.min(axis=0)
        mean = np.where(constant, X[0], mean)
        scale = np.where(constant, 1.0, scale)
        return cls(mean=mean, scale=scale)

    def apply(self, X, *, path: str = "the data", overwrite: bool = False) -> np.ndarray:
        """The standardised copy of ``X : (N, P)`` (with ``overwrite``, ``X`` itself standardised in place when it
        is a float64 array); a value that overflows float64 once standardised (data near 1e300 given to a fit
        whose scale is 1e-300) is a ``DataError`` naming ``path`` and its row."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.mean.shape[0]:
            raise DataError(f"the standardizer was fitted on {self.mean.shape[0]} features, got shape {X.shape}")
        # ``(X - mean) / scale`` in units of a power of two near each scale (exact, as in ``fit``), so that
        # subtracting the mean of features near the float64 limit does not overflow; one array is allocated
        k = _exponents(self.scale)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # checked below, naming the value
            out = np.ldexp(X, -k, out=X if overwrite else None)
            out -= np.ldexp(self.mean, -k)
            out /= np.ldexp(self.scale, -k)
        if not np.isfinite(out).all():
            row, col = np.argwhere(~np.isfinite(out))[0]
            where = f"data row {row + 1}" + (f", feature {col} (0-based)" if X.shape[1] > 1 else "")
            value = "a value" if out is X else f"{X[row, col]:.3g}"  # (overwritten in place)
            raise DataError(f"{path}: {where}: {value} overflows float64 once standardised with the "
                            f"fit's mean {self.mean[col]:.3g} and scale {self.scale[col]:.3g}")
        return out


# magnitudes whose squares, summed over any number of rows a machine holds, stay within float64's normal range
ORDINARY = 1e100


def _exponents(magnitudes) -> np.ndarray:
    """The exponents ``k`` with ``magnitude < 2**k <= 2 * magnitude`` (0 for a magnitude of 0)."""
    return np.frexp(magnitudes)[1]


def check_width(X, n_features, *, path) -> None:
    """Raise ``DataError`` unless ``X`` has ``n_features`` columns."""
    shape = np.shape(X)
    width = shape[1] if len(shape) == 2 else None
    if width != n_features:
        shown = width if width is not None else f"shape {shape}, not 2-D: no"
        raise DataError(f"{path}: {shown} feature columns, but the model was trained on {n_features}")


# more distinct numeric target values than this (or any non-integer one) make "auto" choose regression
_MAX_AUTO_CLASSES = 50


def choose_likelihood(likelihood: str, y, path) -> str:
    """Resolve ``auto``: two label values -> bernoulli; strings or a few integers -> categorical; else gaussian.
    Any other name is returned as it is (the fit's option checks have validated it)."""
    if likelihood != "auto":
        return likelihood
    values = _distinct(y, limit=_MAX_AUTO_CLASSES)  # None: more than that many, so not classes unless text
    if values is not None and len(values) == 2:
        return "bernoulli"
    if y.dtype.kind in "US" or (values is not None and np.all(values == np.round(values))):
        return "categorical"
    return "gaussian"


def standardised(y, mean: float, scale: float) -> np.ndarray:
    """``(y - mean) / scale`` in float64, a block of rows at a time."""
    out = np.empty(len(y))
    for rows in row_blocks(len(y)):
        out[rows] = (y[rows].astype(float) - mean) / scale
    return out


@dataclass
class Prepared:
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray | None
    y_test: np.ndarray | None
    likelihood: str
    n_outputs: int
    data: dict  # JSON provenance, stored in the run file
    arrays: dict  # split indices, feature and target standardisation, stored in the run file
    # the rows --calibrate held out of the training rows, prepared as the test rows are (None: none held out), and
    # their 0-based rows in the training source (the file's data rows, or the arrays' rows)
    X_calibration: np.ndarray | None = None
    y_calibration: np.ndarray | None = None
    calibration_index: np.ndarray | None = None
    # (lowest, highest) of a target of whole numbers that "auto" fitted as a regression (more than
    # _MAX_AUTO_CLASSES values), for the hint that they may be classes; None otherwise. Not stored in the run.
    whole_targets: tuple | None = None


def numeric_target(y_raw: np.ndarray, name, where: Callable[[int], str] | None = None) -> None:
    """Refuse a regression target that holds a value that is not a number, naming it and where it stands
    (``where(i)``: a file's ``path:line``; by default ``name: row i``). Text that is every bit numbers passes (the
    rows of a file left once the one that was not are held out)."""
    if y_raw.dtype.kind in "fiu":
        return
    for i, value in enumerate(y_raw.tolist()):
        if not (isinstance(value, (int, float)) or _is_number(str(value).strip())):
            at = where(i) if where is not None else f"{name}: row {i}"
            raise DataError(f"{at}: the target {value!r} is not a number (a regression target must be numeric)")


def prepare(X_train, y_train_raw, X_test=None, y_test_raw=None, *, likelihood: str = "auto",
            standardize: bool = False, name: str = "training data", test_name: str = "test data",
            train_provenance: dict | None = None, test_provenance: dict | None = None, feature_names=(),
            options: dict | None = None, features_name: str | None = None,
            test_features_name: str | None = None, overwrite: bool = False,
            calibration: tuple | None = None, test_where: Callable[[int], str] | None = None) -> Prepared:
    """Code the targets and standardise the features of raw arrays: the one preparation behind the files of
    ``slang fit`` and the arrays of ``slangcli.fit``.

    ``X_* : (N, P)`` float64 features; ``y_*_raw`` the raw targets (label values of any kind, or numbers).
    ``likelihood="auto"`` is resolved by :func:`choose_likelihood`. Classification codes the label values, sorted,
    as 0..K-1 (the classes are stored); regression standardises the target with training statistics (stored), so
    the noise precision acts on the standardised scale. ``overwrite``: the features may be standardised in place
    (arrays the caller read and holds for nothing else: a file's table). ``name`` and ``test_name`` are what
    messages call the data,
    ``features_name`` and ``test_features_name`` their features when these are apart (arrays ``X`` and ``y``).
    ``calibration``: ``(X, y_raw, index)`` of the rows ``--calibrate`` held out of the training rows
    (:func:`calibration_split`), prepared as the test rows are, with the statistics of the training rows left.
    ``test_where(i)``: where test row ``i`` stands, for a message about its label or a regression target that is
    not a number (a file's ``path:line``; a file's training rows are checked whole before it is split).
    """
    features_name = features_name or name
    test_features_name = test_features_name or test_name
    auto = likelihood == "auto"
    likelihood = choose_likelihood(likelihood, y_train_raw, name)
    arrays, targets = {}, {"likelihood": likelihood}
    if likelihood == "gaussian":
        numeric_target(y_train_raw, name)
        if y_test_raw is not None:
            numeric_target(y_test_raw, test_name, test_where)
        y = y_train_raw.astype(float)
        if y.max() == y.min():
            raise DataError(f"{name}: the regression target is constant in the training data")
        # the target as one standardised column: a target near 1e300 or 1e-300 gets its true mean and spread
        target = Standardizer.fit(y[:, None])
        arrays["target_mean"], arrays["target_scale"] = target.mean, target.scale
        y_train = target.apply(y[:, None], path=name)[:, 0]
        y_test = (None if y_test_raw is None
                  else target.apply(y_test_raw.astype(float)[:, None], path=test_name)[:, 0])
        if calibration is not None:
            y_held = target.apply(calibration[1].astype(float)[:, None], path=name)[:, 0]
        n_outputs = 1
    else:
        labels = fit_labels(y_train_raw, path=name, n_classes=2 if likelihood == "bernoulli" else None)
        dtype = float if likelihood == "bernoulli" else np.int64
        y_train = labels.encode(y_train_raw, path=name, dtype=dtype)
        y_test = None if y_test_raw is None else labels.encode(y_test_raw, path=test_name, dtype=dtype,
                                                               where=test_where)
        if calibration is not None:
            y_held = _held_out_labels(labels, calibration[1], name, dtype)
        targets["classes"] = list(labels.classes)
        n_outputs = 1 if likelihood == "bernoulli" else len(labels.classes)

    if standardize:
        std = Standardizer.fit(X_train)
        X_train = std.apply(X_train, path=features_name, overwrite=overwrite)
        X_test = None if X_test is None else std.apply(X_test, path=test_features_name, overwrite=overwrite)
        if calibration is not None:
            calibration = (std.apply(calibration[0], path=features_name, overwrite=overwrite), *calibration[1:])
        arrays["feature_mean"], arrays["feature_scale"] = std.mean, std.scale

    data = {
        "train": {**(train_provenance or {}), "rows_used": int(len(X_train))},
        "test": test_provenance,
        "targets": targets,
        "labels": {"classes": targets["classes"]} if "classes" in targets else None,
        "feature_names": list(feature_names),
        "standardize": bool(standardize),
        "options": options if options is not None else {},
    }
    whole = _whole_numbers(y_train_raw) if auto and likelihood == "gaussian" else None
    if calibration is None:
        return Prepared(X_train, y_train, X_test, y_test, likelihood, n_outputs, data, arrays, whole_targets=whole)
    X_held, _, index = calibration
    return Prepared(X_train, y_train, X_test, y_test, likelihood, n_outputs, data, arrays, X_calibration=X_held,
                    y_calibration=y_held, calibration_index=np.asarray(index, dtype=np.int64), whole_targets=whole)


def _whole_numbers(y) -> tuple | None:
    """``(lowest, highest)`` of ``y`` when it holds whole numbers only, else None (a block of rows at a time)."""
    for rows in row_blocks(len(y)):
        block = y[rows]
        if block.dtype.kind == "f" and not np.all(block == np.round(block)):
            return None
    return float(np.min(y)), float(np.max(y))


def _held_out_labels(labels: LabelMap, y_raw, name, dtype) -> np.ndarray:
    """The codes of the labels of the rows ``--calibrate`` held out; a label that none of the training rows left
    has is refused by name (the model has no class for it)."""
    try:
        return labels.encode(y_raw, path=name, dtype=dtype)
    except DataError:
        for value in _distinct(np.asarray(y_raw)):
            try:
                labels.encode(np.asarray([value]), path=name)
            except DataError:
                raise DataError(f"{name}: the label {_fmt_label(value.item())!r} is among the rows --calibrate holds "
                                f"out but not among the training rows left (known: {_listing(labels.classes)}); a "
                                "smaller --calibrate, or another --seed, keeps it in training") from None
        raise
