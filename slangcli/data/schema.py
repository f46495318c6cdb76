"""The data schema: what a model expects of its input, fitted once on the training rows and applied by every door.

A :class:`Schema` says which columns a model reads and how each becomes numbers: its feature columns by name and
by position as read (:class:`Column`), each column's kind and, for a category, its levels; the target
(:class:`Target`); the columns the fit left out; the missing-value policy and the value each column's missing
cell gets; the standardisation of the encoded features; and their names. ``slang fit`` and :func:`slangcli.fit`
fit it (:meth:`Schema.fit`) on the training data, and training, ``slang evaluate``, ``slang predict`` and
:meth:`slangcli.FitResult.predict` all turn raw columns into the model's inputs with it (:meth:`Schema.encode`,
:meth:`Schema.apply`), so that the same row gives the same inputs whichever door it comes through. A run file
stores it (``slangcli.runfile.io``, format 1.4); a run without one (format 1.3 and older; LIBSVM, IDX and UCI data,
whose features are all numbers) gets the schema its provenance implies (:func:`schema_of`).

Raw columns are a float64 array ``X : (N, P)`` (one column per feature column; NaN where a cell is missing) and the
text of the columns that are not numbers, ``text = {k: (N,) str array}`` ("" where missing), as the CSV reader
(``Table.X``, ``Table.text``) and the API (``api._raw_features``) make them. The kinds:

- ``numeric``: the number as read; a missing cell gets the training rows' mean.
- ``boolean``: a column of text all of whose cells are ``true``/``false`` or ``yes``/``no`` (in any case): one
  column, 1 for true and yes, 0 for false and no; a missing cell gets the training rows' more frequent value.
- ``categorical``: any other column of text (or a column named by ``--categorical``): one indicator column per
  level, named ``column=level`` (``island=Biscoe``), the levels sorted (as numbers when every one is a number,
  else as text) as read in the training file; a missing cell gets the training rows' most frequent level. Levels
  are compared as text (case matters), or by value when they are all numbers (``4`` and ``4.0`` are one level). A
  level the fit did not see is refused, naming the file, line, column and level and listing the levels known: an
  all-zero row would be read as no level at all, a guess the model was never fitted to.

Every failure is a ``DataError`` with one line. Nothing here imports the command line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from slangcli.blocks import row_blocks
from slangcli.data.prepare import Standardizer
from slangcli.data.readers._common import BOOLEAN_WORDS, _is_number, _listing
from slangcli.data.readers.text import MISSING_POLICIES, NA_VALUES
from slangcli.errors import DataError

NUMERIC, BOOLEAN, CATEGORICAL = "numeric", "boolean", "categorical"
KINDS = (NUMERIC, BOOLEAN, CATEGORICAL)
# A column of text with more distinct values than this is refused: one indicator column per level of an identifier
# or of free text (a name, a comment) makes the table N x N and gives the model one weight per row to memorise.
MAX_LEVELS = 1000
# the target of a classification, and of a regression
CLASSES, TARGET_NUMERIC = "classes", "numeric"

# where(i, k) -> the place of row i's cell of column k in messages: "FILE:LINE: column C ('name')", "X: row i, column
# 'name'"
Where = Callable[[int, int], str]


@dataclass(frozen=True)
class Column:
    """One feature column of the raw data.

    Attributes
    ----------
    name : str
        Its header name (a DataFrame's column name), or ``x<position>`` without one.
    position : int or None
        Its 0-based column in the training data as read (the file's column; a DataFrame's or array's); None when
        the run does not record it (format 1.3 and older).
    kind : {"numeric", "boolean", "categorical"}
    levels : tuple of str
        A categorical column's levels, in the order of its indicator columns; empty for the others.
    fill : float, str or None
        The value a missing cell gets: the training rows' mean (numeric), more frequent value (boolean, 0.0 or
        1.0) or most frequent level (categorical); None when the run stores none (format 1.3 and older).
    """

    name: str
    position: int | None = None
    kind: str = NUMERIC
    levels: tuple = ()
    fill: float | str | None = None

    @property
    def width(self) -> int:
        """The number of model inputs it becomes."""
        return len(self.levels) if self.kind == CATEGORICAL else 1

    @property
    def encoded_names(self) -> tuple[str, ...]:
        if self.kind == CATEGORICAL:
            return tuple(f"{self.name}={level}" for level in self.levels)
        return (self.name,)

    def record(self) -> dict:
        out = {"name": self.name, "position": self.position, "kind": self.kind}
        if self.kind == CATEGORICAL:
            out["levels"] = list(self.levels)
        out["fill"] = self.fill
        return out


@dataclass(frozen=True)
class Target:
    """The target column: its ``name`` (None without a header), 0-based ``position`` (None when not recorded),
    ``kind`` (``classes`` or ``numeric``) and the ``classes`` of a classification (the model's class ``k`` is
    ``classes[k]``)."""

    name: str | None
    position: int | None
    kind: str
    classes: tuple | None = None

    def record(self) -> dict:
        return {"name": self.name, "position": self.position, "kind": self.kind,
                "classes": list(self.classes) if self.classes is not None else None}


@dataclass(frozen=True, eq=False)
class Schema:
    """What a model expects of its input (see the module's description). ``mean`` and ``scale`` are the
    standardisation of the encoded features (the run file's ``/data/feature_mean`` and ``feature_scale``), None
    when they are used as encoded; ``stored`` says whether the run holds this schema or it was implied by an older
    run's provenance."""

    columns: tuple
    target: Target | None = None
    left_out: tuple = ()
    missing: str = "error"
    na_values: tuple = NA_VALUES
    standardize: bool = False
    mean: np.ndarray | None = None
    scale: np.ndarray | None = None
    stored: bool = True

    @property
    def names(self) -> tuple[str, ...]:
        """The raw feature columns' names, in the model's order."""
        return tuple(column.name for column in self.columns)

    @property
    def encoded_names(self) -> tuple[str, ...]:
        """The names of the model's inputs: a column's own, or ``column=level`` per level of a category."""
        return tuple(name for column in self.columns for name in column.encoded_names)

    @property
    def width(self) -> int:
        """The number of model inputs."""
        return sum(column.width for column in self.columns)

    @property
    def text_columns(self) -> tuple[int, ...]:
        """The positions (in :attr:`columns`) of the columns read as text: booleans and categories."""
        return tuple(k for k, column in enumerate(self.columns) if column.kind != NUMERIC)

    @property
    def can_impute(self) -> bool:
        """Whether every column has a value for its missing cells."""
        return all(column.fill is not None for column in self.columns)

    # ------------------------------------------------------------------------------------------ fitting

    @classmethod
    def fit(cls, X, text=None, *, names, path: str, train=None, positions=None, target: Target | None = None,
            left_out=(), missing: str = "error", na_values=NA_VALUES, standardize: bool = False) -> "Schema":
        """The schema of the raw columns ``X`` (and ``text``) of a training file or arrays. The kinds and levels
        come from every row given (the training file as read: a level met only in the rows a ``--test-fraction``
        split holds out gets an indicator that is 0 on every training row, so the model knows nothing of it and its
        weight keeps the prior's spread); the values a missing cell gets come from the training rows ``train``
        (indices; None: all). ``path`` names the data in messages. The standardisation of the encoded training
        features is fitted by ``slangcli.data.prepare`` and stored as the run's feature arrays, which :func:`schema_of`
        reads back with the schema."""
        text = text or {}
        train_rows = np.arange(len(X)) if train is None else np.asarray(train)
        means = _means(X, None if train is None else train_rows)
        columns = []
        for k, name in enumerate(names):
            position = positions[k] if positions is not None else k
            if k not in text:
                fill = None if np.isnan(means[k]) else float(means[k])
                if fill is None:
                    raise DataError(f"{path}: column {name!r}: no training row has a value to impute from; "
                                    f"--drop-columns {name} leaves it out")
                columns.append(Column(name, position, NUMERIC, (), fill))
                continue
            values = text[k]
            present = sorted(set(values.tolist()) - {""})
            if not present:
                raise DataError(f"{path}: column {name!r}: every cell is missing; --drop-columns {name} leaves it out")
            if all(level.lower() in BOOLEAN_WORDS for level in present):
                codes = _boolean_values(values[train_rows])
                fill = _most_frequent(codes[codes >= 0].astype(np.int64), 2)
                if fill is None:
                    raise DataError(f"{path}: column {name!r}: no training row has a value to impute from; "
                                    f"--drop-columns {name} leaves it out")
                columns.append(Column(name, position, BOOLEAN, (), float(fill)))
                continue
            if all(_finite_number(level) for level in present):
                present.sort(key=lambda level: (float(level), level))
                # one level per value, named by its first text: 6 and 6.0 are one level, as they match one
                values_seen: set = set()
                present = [level for level in present
                           if not (float(level) in values_seen or values_seen.add(float(level)))]
            if len(present) > MAX_LEVELS:
                raise DataError(f"{path}: column {name!r}: {len(present)} distinct values, more than the {MAX_LEVELS} "
                                "levels a categorical column may have (one input each): an identifier or free text "
                                f"is no category; --drop-columns {name} leaves it out")
            levels = tuple(present)
            codes = _level_codes(values[train_rows], levels)
            fill = _most_frequent(codes[codes >= 0], len(levels))
            if fill is None:
                raise DataError(f"{path}: column {name!r}: no training row has a value to impute from; "
                                f"--drop-columns {name} leaves it out")
            columns.append(Column(name, position, CATEGORICAL, levels, levels[fill]))
        _refuse_shared_input_names(columns, path)
        return cls(columns=tuple(columns), target=target, left_out=tuple(left_out), missing=missing,
                   na_values=tuple(na_values), standardize=bool(standardize))

    # ------------------------------------------------------------------------------------------ applying

    def encode(self, X, text=None, *, impute: bool = False, where: Where | None = None,
               overwrite: bool = False) -> np.ndarray:
        """The model's inputs, before standardisation, of the raw columns ``X : (N, P)`` (float64, NaN where
        missing) and ``text`` (``{k: (N,) str}``, "" where missing): ``(N, width)`` float64.

        With ``impute``, a missing cell gets its column's ``fill``; without, it is an error (a file's reader has
        already refused or left out such rows). A level the fit did not see, or a boolean column's cell that is
        not a boolean word, is an error named by ``where(i, k)``. Numeric columns alone are returned as ``X``
        itself (filled in place with ``overwrite``, else in a copy, when something is missing)."""
        X = np.asarray(X, dtype=np.float64)
        text = text or {}
        where = where or (lambda i, k: f"row {i}, column {self.columns[k].name!r}")
        n = X.shape[0]
        if X.ndim != 2 or X.shape[1] != len(self.columns):
            raise DataError(f"the schema has {len(self.columns)} columns, got shape {X.shape}")
        if not self.text_columns:
            gaps = _gaps(X)
            if gaps is None:
                return X
            self._fillable(gaps, impute, where)
            out = X if overwrite else X.copy()
            for k in np.flatnonzero(gaps.any(axis=0)):
                out[gaps[:, k], k] = self.columns[k].fill
            return out
        out = np.zeros((n, self.width))
        at = 0
        for k, column in enumerate(self.columns):
            if column.kind == NUMERIC:
                values = X[:, k]
                gaps = np.isnan(values)
                if gaps.any():
                    self._fillable(gaps[:, None], impute, lambda i, _: where(i, k))
                    values = np.where(gaps, column.fill, values)
                out[:, at] = values
            elif column.kind == BOOLEAN:
                values = _boolean_values(text[k])
                bad = np.flatnonzero(values == -2)
                if bad.size:
                    i = int(bad[0])
                    raise DataError(f"{where(i, k)}: {str(text[k][i])!r} is not a boolean (the column holds true and "
                                    "false, or yes and no)")
                gaps = values == -1
                if gaps.any():
                    self._fillable(gaps[:, None], impute, lambda i, _: where(i, k))
                    values = np.where(gaps, column.fill, values)
                out[:, at] = values
            else:
                codes = _level_codes(text[k], column.levels)
                bad = np.flatnonzero(codes == -2)
                if bad.size:
                    i = int(bad[0])
                    raise DataError(f"{where(i, k)}: level {str(text[k][i])!r} was not seen in training (known "
                                    f"levels: {_listing(column.levels)})")
                gaps = codes == -1
                if gaps.any():
                    self._fillable(gaps[:, None], impute, lambda i, _: where(i, k))
                    codes = np.where(gaps, column.levels.index(column.fill), codes)
                out[np.arange(n), at + codes] = 1.0
            at += column.width
        return out

    def _fillable(self, gaps, impute: bool, where: Where) -> None:
        """Refuse the first missing cell (``gaps : (N, P)`` of bool) unless ``impute`` and its column has a
        value for it."""
        i, k = (int(v) for v in np.argwhere(gaps)[0])
        if not impute:
            raise DataError(f"{where(i, k)}: missing value (imputing fills it in with the training rows' "
                            f"{'mean' if self.columns[k].kind == NUMERIC else 'most frequent value'})")
        if self.columns[k].fill is None:
            raise DataError(f"{where(i, k)}: missing value, and the run stores no value to impute (it was written "
                            "before slang imputed missing values)")

    def apply(self, X, text=None, *, path: str, impute: bool = False, where: Where | None = None,
              overwrite: bool = False) -> np.ndarray:
        """The model's inputs of raw columns: :meth:`encode`, then the standardisation (``path`` names the data
        in its messages)."""
        given = X
        X = self.encode(X, text, impute=impute, where=where, overwrite=overwrite)
        if self.mean is None:
            return X
        # standardised in place when the encoding made a new array (or the caller allows it)
        return Standardizer(mean=self.mean, scale=self.scale).apply(X, path=path,
                                                                    overwrite=overwrite or X is not given)

    def count_missing(self, X, text=None) -> int:
        """The missing cells of raw columns (those :meth:`encode` fills in with ``impute``)."""
        text = text or {}
        total = 0
        for k, column in enumerate(self.columns):
            if column.kind == NUMERIC:
                total += sum(int(np.isnan(X[rows, k]).sum()) for rows in row_blocks(len(X)))
            else:
                total += int(np.count_nonzero(text[k] == ""))
        return total

    # ------------------------------------------------------------------------------------------ storing

    def record(self) -> dict:
        """The schema as stored in a run file (JSON; the standardisation is stored as arrays apart)."""
        return {"columns": [column.record() for column in self.columns],
                "target": self.target.record() if self.target is not None else None,
                "left_out": list(self.left_out), "missing": self.missing, "na_values": list(self.na_values),
                "standardize": self.standardize, "encoded_names": list(self.encoded_names)}

    @classmethod
    def from_record(cls, record: dict, arrays: dict) -> "Schema":
        """The schema a run file stores (``record``, checked by ``slangcli.runfile.io``), with the standardisation of its
        ``arrays``."""
        columns = tuple(Column(c["name"], c.get("position"), c["kind"], tuple(c.get("levels") or ()), c.get("fill"))
                        for c in record["columns"])
        target = record.get("target")
        if target is not None:
            classes = target.get("classes")
            target = Target(target.get("name"), target.get("position"), target["kind"],
                            tuple(classes) if classes is not None else None)
        return cls(columns=columns, target=target, left_out=tuple(record.get("left_out") or ()),
                   missing=record.get("missing", "error"), na_values=tuple(record.get("na_values", NA_VALUES)),
                   standardize=bool(record.get("standardize")), mean=arrays.get("feature_mean"),
                   scale=arrays.get("feature_scale"))


def check_record(record, width: int) -> None:
    """Refuse (``DataError``, one line) a stored schema that is not one: what :meth:`Schema.from_record` reads must
    be there with its types, and it must encode ``width`` model inputs under the names it lists."""
    def need(test, what):
        if not test:
            raise DataError(what)

    need(isinstance(record, dict), "is not a JSON object")
    columns = record.get("columns")
    need(isinstance(columns, list) and columns, "lacks its columns (a non-empty list)")
    for j, column in enumerate(columns):
        where = f"column {j}"
        need(isinstance(column, dict), f"{where} is not a JSON object")
        need(isinstance(column.get("name"), str), f"{where} lacks its name")
        position = column.get("position")
        need(position is None or (isinstance(position, int) and not isinstance(position, bool) and position >= 0),
             f"{where} has a position that is not a column index")
        kind = column.get("kind")
        need(kind in KINDS, f"{where} has kind {kind!r}, not one of {', '.join(KINDS)}")
        fill = column.get("fill")
        if kind == CATEGORICAL:
            levels = column.get("levels")
            need(isinstance(levels, list) and levels and all(isinstance(v, str) for v in levels)
                 and len(set(levels)) == len(levels), f"{where} lacks its levels (distinct strings)")
            need(fill is None or fill in levels, f"{where}: its fill {fill!r} is not one of its levels")
        elif kind == BOOLEAN:
            need(fill in (None, 0, 1) and not isinstance(fill, bool), f"{where}: its fill is not 0 or 1")
        else:
            need(fill is None or (isinstance(fill, int) and not isinstance(fill, bool) and abs(fill) <= 1e308)
                 or (isinstance(fill, float) and math.isfinite(fill)), f"{where}: its fill is not a finite number")
    need(record.get("missing") in MISSING_POLICIES, f"has missing {record.get('missing')!r}, not one of "
         f"{', '.join(MISSING_POLICIES)}")
    na_values = record.get("na_values")
    need(isinstance(na_values, list) and all(isinstance(v, str) for v in na_values),
         "lacks its na_values (a list of strings)")
    need(isinstance(record.get("left_out", []), list), "has left_out that is not a list")
    need(isinstance(record.get("standardize"), bool), "lacks standardize (true or false)")
    target = record.get("target")
    need(target is None or (isinstance(target, dict) and target.get("kind") in (CLASSES, TARGET_NUMERIC)
                            and (target.get("classes") is None or isinstance(target.get("classes"), list))),
         "has a target that is not one (kind classes or numeric, classes a list)")
    schema = Schema.from_record(record, {})
    need(schema.width == width, f"encodes {schema.width} model inputs, but the model takes {width}")
    need(record.get("encoded_names") == list(schema.encoded_names),
         "lists encoded_names other than its columns make")


def schema_of(run) -> Schema:
    """The schema of a run: the one it stores, or, for a run without one (format 1.3 and older; LIBSVM, IDX and UCI
    data), the one its provenance implies: every feature a number, named as recorded, standardised when the run
    stores the arrays; no value to impute."""
    record = run.data.get("schema")
    if record is not None:
        return Schema.from_record(record, run.arrays)
    width = run.model.sizes[0]
    names = list(run.data.get("feature_names") or [])
    if len(names) != width:
        names = [f"x{j}" for j in range(width)]
    options = run.data.get("options") or {}
    train = run.data.get("train") or {}
    labels = run.data.get("labels")
    target = Target(train.get("target") if isinstance(train.get("target"), str) else None,
                    train.get("target") if isinstance(train.get("target"), int) else None,
                    TARGET_NUMERIC if run.model.likelihood == "gaussian" else CLASSES,
                    tuple(labels["classes"]) if labels else None)
    missing = options.get("missing") if options.get("missing") in MISSING_POLICIES else "error"
    return Schema(columns=tuple(Column(name) for name in names), target=target,
                  left_out=tuple(train.get("columns_dropped") or ()), missing=missing,
                  na_values=tuple(options.get("na_values", NA_VALUES)), standardize=bool(run.data.get("standardize")),
                  mean=run.arrays.get("feature_mean"), scale=run.arrays.get("feature_scale"), stored=False)


# ---------------------------------------------------------------------------------------------- helpers


def _gaps(X) -> np.ndarray | None:
    """The missing (NaN) cells of ``X``, or None when there is none (one pass, a block of rows at a time)."""
    found = False
    for rows in row_blocks(*X.shape):
        if np.isnan(X[rows]).any():
            found = True
            break
    return np.isnan(X) if found else None


def _means(X: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
    """The mean of each column of ``X[rows]`` (None: every row) over the cells that are not NaN; NaN for a column
    without one. Computed in units of a power of two near each column's largest magnitude (exact), so that values
    near 1e308 add up without overflowing, a block of rows at a time."""
    n, p = (len(X) if rows is None else len(rows)), X.shape[1]
    blocks = row_blocks(n, p)

    def block(b):
        return X[b] if rows is None else X[rows[b]]

    peak, count = np.zeros(p), np.zeros(p, dtype=np.int64)
    for b in blocks:
        part = block(b)
        present = ~np.isnan(part)
        if part.size:
            peak = np.maximum(peak, np.where(present, np.abs(part), 0.0).max(axis=0))
        count += present.sum(axis=0)
    k = np.frexp(peak)[1]
    total = np.zeros(p)
    for b in blocks:
        part = block(b)
        total += np.where(np.isnan(part), 0.0, np.ldexp(part, -k)).sum(axis=0)
    mean = np.full(p, np.nan)
    np.divide(total, count, out=mean, where=count > 0)
    return np.ldexp(mean, k)


def _finite_number(text: str) -> bool:
    """Whether ``text`` is a finite number (a level that sorts and matches by value)."""
    return _is_number(text) and math.isfinite(float(text))


def _most_frequent(codes: np.ndarray, n: int) -> int | None:
    """The most frequent of the codes ``0 .. n-1`` (the first on a tie), None when there is none."""
    if codes.size == 0:
        return None
    return int(np.argmax(np.bincount(codes, minlength=n)))


def _boolean_values(values: np.ndarray) -> np.ndarray:
    """Each text of ``values`` as 1.0 (true, yes), 0.0 (false, no), -1.0 (missing: "") or -2.0 (not a boolean
    word); in any case."""
    out = np.full(len(values), -2.0)
    lowered = np.char.lower(values) if values.size else values
    for word, value in BOOLEAN_WORDS.items():
        out[lowered == word] = value
    out[values == ""] = -1.0
    return out


def _level_codes(values: np.ndarray, levels: tuple) -> np.ndarray:
    """The position of each text of ``values`` among ``levels`` (int64): -1 where missing (""), -2 for a text that is
    not a level. Levels that are all numbers (of distinct values) match by value, so that ``4``, ``4.0`` and a
    DataFrame's ``4.0`` are the same level of an integer-coded column; other levels match as text."""
    numeric = all(_finite_number(level) for level in levels)
    if numeric:
        known = np.array([float(level) for level in levels])
        numeric = len(np.unique(known)) == len(known)
    if not numeric:
        known = np.array(levels, dtype=str)
    order = np.argsort(known, kind="stable")
    ranked = known[order]
    codes = np.empty(len(values), dtype=np.int64)
    for rows in row_blocks(len(values)):
        part = values[rows]
        if numeric:
            part = np.array([float(v) if _is_number(v) else np.nan for v in part.tolist()], dtype=np.float64)
        at = np.minimum(np.searchsorted(ranked, part), len(ranked) - 1)
        block = order[at]
        block[ranked[at] != part] = -2  # (NaN, a text that is not a number, matches no level)
        block[values[rows] == ""] = -1
        codes[rows] = block
    return codes


def _refuse_shared_input_names(columns, path) -> None:
    """Refuse two model inputs of one name: a column ``a=b`` beside the level ``b`` of a category ``a`` (the run's
    feature names, by which predictions match a file's columns and the API a DataFrame's, must tell them apart)."""
    seen = {}
    for column in columns:
        for level, encoded in zip(column.levels or (None,), column.encoded_names):
            owner = f"column {column.name!r}" if level is None else f"the level {level!r} of column {column.name!r}"
            if encoded in seen:
                raise DataError(f"{path}: {seen[encoded]} and {owner} would both be the model's input {encoded!r}; "
                                "rename the column")
            seen[encoded] = owner
