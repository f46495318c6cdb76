"""Data files for a fit and for a stored run: reading them into prepared arrays, and re-reading a run's recorded data.

The command line parses its data options into :class:`DataOptions`; :func:`load_training` reads the files (or a
Gal-layout UCI folder, or a ``--test-fraction`` split), fits the data schema on the training rows
(``slangcli.data.schema``: column kinds, categories, the values a missing cell gets) and prepares the encoded data with
it (``slangcli.data.prepare.prepare``). For a stored run, :func:`load_test`, :func:`load_train` and :func:`load_inputs`
re-read its recorded files (refusing ones whose sha256 changed) or read new data with the fit's options, and
:func:`transform` applies the run's schema (encoding, imputation, standardisation) and label coding to raw columns.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Callable

import numpy as np

from slangcli.data import task
from slangcli.data.columns import file_layout
from slangcli.data.prepare import (LabelMap, Prepared, Standardizer, TooFewClasses, UnseenLabel, calibration_split,
                                   numeric_target, prepare, train_test_split)
from slangcli.declare import DELIMITERS, MAX_SEED, check_value, option
from slangcli.errors import ConfigError, DataError
from slangcli.data.readers import (ARRAYS, MISSING_POLICIES, NA_VALUES, STDIN, Table, TargetNameWithoutHeader,
                                   is_uci_folder, line_of_row, read_table, read_uci_folder, sha256_file,
                                   streams_kept, widen)
from slangcli.data.readers._common import _fmt_label, _listing
from slangcli.data.schema import CLASSES, TARGET_NUMERIC, Column, Schema, Target, schema_of

if TYPE_CHECKING:  # (a stored run's data are read here; the run file format sits above the data)
    from slangcli.runfile.io import Run

# what ``slang predict`` does with a row that has a missing value: keep it, with empty predictions (the default,
# unless the fit imputed), leave it out, refuse the file, or fill it in as the fit would
PREDICT_MISSING = ("keep", *MISSING_POLICIES)


FORMATS = ("auto", "csv", "libsvm", "idx", "uci")


@dataclass(frozen=True)
class DataOptions:
    """How to read the training data and where the test data come from: ``slang fit``'s data options, declared
    here once (``slangcli.declare.option``; ``slang fit`` and ``slang sweep`` generate their options from these
    fields, in this order). Built through :meth:`of`, which reads them as the command line writes them and checks
    them. A run file written before an option existed lacks it, and its default reads that run's data as they were
    read then."""

    path: str | None
    format: str = option("auto", "Input format of DATA (and --test); a folder is read as a Gal-layout UCI set.",
                         kind="choice", choices=FORMATS)
    uci_split: int | None = option(None, "Train/test split K of a Gal-layout UCI folder (index_train_K.txt, "
                                   "index_test_K.txt).", kind="count", least=0)
    target: str | int | None = option(None, "Target column: a header name (wins when one matches exactly), a 0-based "
                                      "index, or #N for the index even when a header cell is named N.", kind="text",
                                      applied="the last column")
    delimiter: str | None = option(None, "CSV delimiter: ',', ';', 'tab' (or '\\t') or 'whitespace'.",
                                   kind="delimiter", applied="detect")
    header: bool | None = option(None, "Whether the CSV has a header row.", kind="switch", applied="detect")
    # CSV columns (``slangcli.data.readers.read_table``)
    drop_columns: str | list | None = option(None, "CSV columns not to use as features: header names or 0-based "
                                             "indices, comma-separated.", kind="text", metavar="COLS")
    columns: str | list | None = option(None, "Use only these CSV columns as features (names or 0-based indices, "
                                        "comma-separated).", kind="text", metavar="COLS")
    na_values: tuple | list = option(NA_VALUES, "Comma-separated cell texts that mean a missing value (an empty item: "
                                     "the empty cell).", kind="tokens", metavar="TOKENS",
                                     applied=f"empty cell, {', '.join(NA_VALUES[1:])}")
    missing: str = option("error", "A row with a missing value: stop with an error naming it, drop the row (counted "
                          "on stderr and in the run file), or impute: fill a missing feature with the training rows' "
                          "mean (numbers) or most frequent value (categories), stored and reapplied by evaluate and "
                          "predict; a row whose target is missing is left out.", kind="choice",
                          choices=MISSING_POLICIES)
    # CSV columns read as categories although their cells are numbers (names or indices, as drop_columns); a column
    # of text is one anyway. A run file written before it existed lacks it (its features were all numbers).
    categorical: str | list | None = option(None, "CSV columns of numbers to one-hot encode as categories (integer "
                                            "codes), like a column of text: header names or 0-based indices, "
                                            "comma-separated.", kind="text", metavar="COLS")
    n_features: int | None = option(None, "LIBSVM width.", kind="count", least=1,
                                    applied="the highest index in the training and test files")
    test: str | None = option(None, "Test data file (same format as DATA).", kind="path", metavar="FILE")
    test_fraction: float | None = option(None, "Hold out this fraction of DATA as the test set.", kind="fraction")
    split_seed: int = option(0, "Seed of the --test-fraction split.", kind="count", least=0, most=MAX_SEED)
    # (a fit option, FitOptions.standardize, recorded here with the data's; None: not resolved yet)
    standardize: bool | None = None

    @classmethod
    def of(cls, path, **values) -> "DataOptions":
        """The options from keywords as the command line writes them (``delimiter="tab"``, ``na_values="NA,?"``;
        None: not given, the declared default), each checked (one ConfigError naming the option)."""
        if isinstance(values.get("delimiter"), str):
            if values["delimiter"] not in DELIMITERS:
                raise ConfigError(f"--delimiter: {values['delimiter']!r} is not one of ',', ';', 'tab', 'whitespace'")
            values["delimiter"] = DELIMITERS[values["delimiter"]]
        if isinstance(values.get("na_values"), str):
            values["na_values"] = tuple(v.strip() for v in values["na_values"].split(","))
        given = {name: value for name, value in values.items() if value is not None or name == "standardize"}
        options = cls(path=path, **given)
        for f in fields(cls):
            if f.metadata:
                check_value(f, getattr(options, f.name))
        if options.drop_columns is not None and options.columns is not None:
            raise ConfigError("give either --drop-columns or --columns, not both")
        return options

    def record(self) -> dict:
        """The options as stored in a run file (JSON: sequences as lists)."""
        return {key: list(value) if isinstance(value, tuple) else value for key, value in asdict(self).items()}

    def reader_options(self) -> dict:
        """The keyword arguments of ``read_table`` that these options set (its path and width aside): a training
        file's text columns are categories."""
        return {"format": self.format, "target": self.target, "delimiter": self.delimiter, "header": self.header,
                "drop_columns": self.drop_columns, "columns": self.columns, "na_values": tuple(self.na_values),
                "missing": self.missing, "categorical": self.categorical, "detect_categories": True}

    def given_data_options(self) -> dict:
        """The keyword arguments of ``read_table`` for other data given to the fitted run: how a file is
        written (format, delimiter, header, missing values) as for the training file; which columns are the
        features is decided against the run (``slangcli.data.columns``), not by these column options."""
        fmt = self.format if self.format in ("csv", "libsvm", "idx") else "auto"
        return {"format": fmt, "target": self.target, "delimiter": self.delimiter, "header": self.header,
                "na_values": tuple(self.na_values), "missing": self.missing}


def _read(path, opts: DataOptions, n_features=None, text_columns=None, detect: bool = False):
    """The file ``path`` read with the fit's options; ``text_columns``: the file columns read as categories (those
    of the training file, for its test file or when it is read again), instead of the text columns found in it."""
    options = opts.reader_options()
    if text_columns is not None:
        options.update(categorical=list(text_columns) or None, detect_categories=detect)
    return read_table(path, **options, n_features=n_features if n_features is not None else opts.n_features)


def _text_columns(table: Table) -> list:
    """The file columns of a CSV table's text features."""
    return [table.columns[k] for k in table.text] if table.text else []


def _target_gaps(y: np.ndarray) -> np.ndarray:
    """The targets that are missing (--missing impute keeps their rows): NaN among numbers, "" among labels."""
    return np.isnan(y) if y.dtype.kind == "f" else y == ""


def _without_missing_targets(table: Table, name, notify=None) -> Table:
    """``table`` without the rows whose target is missing (kept by --missing impute, which never imputes a target:
    a fit and scores need it), noted through ``notify`` and counted in the provenance as rows left out."""
    provenance = dict(table.provenance)
    count = provenance.pop("targets_missing", 0)
    lines = provenance.pop("target_missing_lines", [])
    if not count:
        return table
    keep = ~_target_gaps(table.y)
    if not keep.any():
        raise DataError(f"{name}: every row's target is missing: nothing is left to fit or score")
    if notify is not None:
        listed = ", ".join(map(str, lines)) + (", ..." if count > len(lines) else "")
        notify(f"{name}: {_rows(count)} with a missing target left out (line{'s' if count > 1 else ''} {listed}): "
               "a target is never imputed")
    index = np.flatnonzero(keep)
    provenance.update(rows=int(len(index)), rows_dropped=provenance.get("rows_dropped", 0) + count,
                      dropped_lines=(provenance.get("dropped_lines", []) + lines)[:20])
    rows = index if table.rows is None else table.rows[index]
    return Table(X=_keep_rows(table.X, index), y=table.y[index], feature_names=table.feature_names,
                 provenance=provenance, rows=rows, text={k: v[index] for k, v in (table.text or {}).items()} or None,
                 lines=table.lines[index] if table.lines is not None else None, columns=table.columns,
                 target_column=table.target_column)


def _where(path, table: Table) -> Callable[[int, int], str]:
    """The place of a table's cell in messages, as the reader names it: ``FILE:LINE: column C ('name')``."""
    header = table.provenance.get("header")

    def where(i, k):
        line = table.lines[i] if table.lines is not None else "?"
        column = table.columns[k] if table.columns is not None else k
        return f"{path}:{line}: column {column}" + (f" ({table.feature_names[k]!r})" if header else "")

    return where


def _is_uci(opts: DataOptions) -> bool:
    return opts.format == "uci" or is_uci_folder(opts.path)


def check_file_options(opts: DataOptions) -> None:
    """Refuse, for a new fit, the options that say how to read a file's columns when DATA is a Gal-layout UCI folder,
    whose target and features its index files name: they were taken and not applied (``--target`` even said to be).
    (A checkpoint of an earlier version that recorded one still resumes: its data are read as they were then.)"""
    if not _is_uci(opts):
        return
    for flag, value in (("--target", opts.target), ("--drop-columns", opts.drop_columns),
                        ("--columns", opts.columns), ("--delimiter", opts.delimiter),
                        ("--header/--no-header", opts.header), ("--n-features", opts.n_features)):
        if value is not None:
            raise ConfigError(f"{flag} applies to a {'LIBSVM' if flag == '--n-features' else 'CSV'} file; a "
                              "Gal-layout UCI folder's target and features are those its index_target.txt and "
                              "index_features.txt name")


def _read_sources(opts: DataOptions, notify):
    """The training table, optional test table, and split indices into the training table."""
    if _is_uci(opts):
        if opts.uci_split is None:
            raise ConfigError(f"{opts.path} is a Gal-layout UCI folder: choose a split with --uci-split K")
        if opts.test is not None or opts.test_fraction is not None:
            raise ConfigError("--uci-split selects the test set; do not combine it with --test or --test-fraction")
        if opts.categorical is not None:
            raise ConfigError("--categorical applies to CSV files; a Gal-layout UCI folder's features are numbers")
        table, train_index, test_index = read_uci_folder(opts.path, opts.uci_split)
        return table, None, train_index, test_index
    if opts.uci_split is not None:
        raise ConfigError("--uci-split needs DATA to be a Gal-layout UCI folder")
    if opts.test is not None and opts.test_fraction is not None:
        raise ConfigError("give either --test or --test-fraction, not both")
    table = _without_missing_targets(_read(opts.path, opts), opts.path, notify)
    test_table = None
    if opts.test is not None:
        # the test file's text columns are the training file's (a column of numbers there is one here): by name when
        # the training file has a header row, else by position
        named = _has_header(table)
        text_columns = None
        if table.provenance["format"] == "csv":
            text_columns = [table.feature_names[k] for k in table.text] if named and table.text else \
                _text_columns(table)
        test_table = None
        if named:
            # the target by its name (a header row's files record it so), wherever the test file has it: read by
            # position, its cells would go to the wrong columns (a label taken for a feature of numbers); a file
            # without a header row is read so
            try:
                test_table = _read(opts.test, replace(opts, target=table.provenance["target"]),
                                   text_columns=text_columns, detect=True)
            except TargetNameWithoutHeader:
                pass
        if test_table is None:
            test_table = _read(opts.test, opts, text_columns=text_columns, detect=named)
        if named and _has_header(test_table):
            test_table = _by_name(test_table, table, opts.test, notify)
            _check_text_kinds(test_table, table, opts.test)
        elif _has_header(test_table):  # (as slang evaluate and predict say it of such a file)
            notify(f"{opts.test}: the column names are not used: the training file {opts.path} has no header row, so "
                   "the columns are taken in its order")
        test_table = _without_missing_targets(test_table, opts.test, notify)
        p_train, p_test = table.X.shape[1], test_table.X.shape[1]
        if p_train != p_test:
            if table.provenance["format"] == "libsvm" and test_table.provenance["format"] == "libsvm" \
                    and opts.n_features is None:
                # absent LIBSVM entries are zeros: the narrower file is the same data at the wider width
                width = max(p_train, p_test)
                narrow = opts.path if p_train < width else opts.test
                notify(f"{narrow}: highest feature index {min(p_train, p_test)}; "
                       f"using {width} feature columns to match the other file")
                table, test_table = widen(table, width), widen(test_table, width)
            else:
                raise DataError(f"{opts.test}: {p_test} feature columns, but the training data "
                                f"{opts.path} has {p_train}")
    if opts.test_fraction is not None:
        train_index, test_index = train_test_split(len(table.X), opts.test_fraction, opts.split_seed)
        return table, None, train_index, test_index
    return table, test_table, None, None


def _check_text_kinds(test: Table, train: Table, path) -> None:
    """Refuse a column of text in the test file (read with its text columns detected, its columns in the training
    file's order) that is a column of numbers in the training file, naming its first cell."""
    extra = sorted(set(test.text or {}) - set(train.text or {}))
    if extra:
        k = extra[0]
        cells = test.text[k]
        i = int(np.flatnonzero(cells != "")[0]) if (cells != "").any() else 0
        line = test.lines[i] if test.lines is not None else "?"
        raise DataError(f"{path}:{line}: column {test.columns[k] if test.columns is not None else k} "
                        f"({test.feature_names[k]!r}): cannot parse {str(cells[i])!r} as a number (the column is "
                        "numeric in the training data)")


def _has_header(table: Table) -> bool:
    """Whether ``table`` was read from a CSV file with a header row: its features have names of their own."""
    return table.provenance["format"] == "csv" and bool(table.provenance.get("header"))


def _by_name(test: Table, train: Table, path, notify) -> Table:
    """The test file's feature columns in the training file's order, matched by their header names, as ``evaluate``
    and ``predict`` match a file's columns to a run's features: a test file may list them in another order, and
    reading it by position would put one feature's values in another's place. A feature of the training file that
    the test file lacks, or one the test file has beyond them, is an error naming it."""
    names, given = list(train.feature_names), list(test.feature_names)
    if given == names:
        return test
    missing = [n for n in names if n not in given]
    extra = [n for n in given if n not in names]
    if missing or extra:
        said = ([f"lacks the training data's feature column(s) {', '.join(map(repr, missing))}"] if missing else []) + \
               ([f"has feature column(s) {', '.join(map(repr, extra))} the training data do not"] if extra else [])
        raise DataError(f"{path}: the header row {' and '.join(said)} (the test file's columns are matched to the "
                        "training file's by name)")
    order = [given.index(n) for n in names]
    notify(f"{path}: feature columns matched by name (their order differs from the training data's)")
    where = {old: new for new, old in enumerate(order)}
    return replace(test, X=np.ascontiguousarray(test.X[:, order]), feature_names=tuple(names),
                   text={where[j]: v for j, v in test.text.items()} if test.text else test.text,
                   columns=[test.columns[j] for j in order] if test.columns is not None else None)


def load_training(opts: DataOptions, *, likelihood: str = "auto",
                  notify: Callable[[str], None] = lambda msg: None,
                  calibrate: tuple[float, int] | None = None) -> Prepared:
    """Read, split, code and standardise the training (and test) data of the files in ``opts``: the data schema is
    fitted on the training rows and encodes every row. Notes about the data come once every row is encoded, so that
    an error comes alone.

    ``calibrate = (fraction, seed)`` holds out that fraction of the training rows (those left after any test split;
    ``slangcli.data.prepare.calibration_split``) before anything is fitted to them: the schema and the
    standardisation are those of the rows left, and the rows held out are prepared as test rows are."""
    notes = []
    with streams_kept():  # (a --test from a pipe may be read twice: for its header row, then by position)
        table, test_table, train_index, test_index = _read_sources(opts, notes.append)
    if likelihood == "gaussian" and table.y is not None:  # (every row, before a split holds any out)
        numeric_target(table.y, opts.path, _row_where(opts.path, table))
    fit_rows, held = train_index, None  # the rows the fit trains on (None: every row of the table)
    if calibrate is not None:
        rows = train_index if train_index is not None else np.arange(len(table.X), dtype=np.int64)
        kept, out = calibration_split(len(rows), *calibrate, path=opts.path)
        fit_rows, held = rows[kept], rows[out]
    impute = opts.missing == "impute"
    schema = fit_schema(table, opts.path, train=fit_rows, missing=opts.missing, na_values=opts.na_values,
                        standardize=bool(opts.standardize))
    # (counted before the encoding fills them in)
    imputed = [(opts.path, schema.count_missing(table.X, table.text))] if impute else []
    # the table is read for this fit alone: encoded (a file of numbers: filled in) in place
    X = schema.encode(table.X, table.text, impute=impute, where=_where(opts.path, table), overwrite=True)
    # (judged on every row of the file, before the rows are taken apart: a file's index is consecutive there, and a
    # split's part of it is not)
    warnings = (_table_warnings(table, schema, X, len(X) if fit_rows is None else len(fit_rows))
                if table.provenance["format"] == "csv" else [])
    calibration = None if held is None else (X[held], table.y[held], held)
    test_where = None
    if train_index is not None:
        X_test, y_test_raw = X[test_index], table.y[test_index]
        test_where = _row_where(opts.path, table, test_index)
    if fit_rows is not None:
        X_train, y_train_raw = _keep_rows(X, fit_rows), _keep_rows(table.y, fit_rows)
    else:
        X_train, y_train_raw = X, table.y
    if train_index is None:
        X_test = y_test_raw = None
        if test_table is not None:
            if impute:
                imputed.append((opts.test, schema.count_missing(test_table.X, test_table.text)))
            X_test = schema.encode(test_table.X, test_table.text, impute=impute, where=_where(opts.test, test_table),
                                   overwrite=True)
            y_test_raw = test_table.y
            test_where = _row_where(opts.test, test_table)
    del X
    for note in notes:
        notify(note)
    for path, count in imputed:
        _note_imputed(path, count, notify)

    for warning in warnings:
        notify(f"{opts.path}: {warning}")

    try:
        prepared = prepare(X_train, y_train_raw, X_test, y_test_raw, likelihood=likelihood,
                           standardize=bool(opts.standardize), name=opts.path, test_name=opts.test or opts.path,
                           train_provenance=table.provenance,
                           test_provenance=_test_provenance(opts, test_table, test_index),
                           feature_names=schema.encoded_names, options=opts.record(),
                           overwrite=True,  # the table is read for this preparation alone: standardised in place
                           calibration=calibration, test_where=test_where)
    except UnseenLabel as exc:
        if opts.test_fraction is None:
            raise
        # a label of the file that the split put wholly among the test rows
        raise DataError(f"{exc}: every row of it is among the test rows of --test-fraction {opts.test_fraction} "
                        f"(--split-seed {opts.split_seed}); a smaller --test-fraction, or another --split-seed, keeps "
                        "some in training") from None
    except TooFewClasses as exc:
        # (every row's label: the training rows' copy, the test and calibration rows' own; table.y itself was
        # spent by _keep_rows, moved in place, and counted one class where the file had two)
        parts = [y_train_raw] + [part for part in (y_test_raw, calibration and calibration[1]) if part is not None]
        if fit_rows is None or len(np.unique(np.concatenate(parts))) < 2:
            raise
        raise _one_label_left(opts, parts, calibrate is not None) from exc
    if train_index is not None:
        # (the rows trained on: those of the split's training part that --calibrate did not hold out)
        prepared.arrays["train_index"], prepared.arrays["test_index"] = fit_rows, test_index
    if schema.stored:
        prepared.data["schema"] = with_target(schema, prepared, table).record()
    return prepared


def _table_warnings(table: Table, schema, X: np.ndarray, n_train: int) -> list[str]:
    """What looks wrong in a CSV file's columns once they are encoded (``X``: every row of the file): identifier
    columns, decimal commas read as text, a text column with a level per training row (``n_train`` of them;
    ``slangcli.data.task``)."""
    positions = None
    if table.columns is not None:  # each model input's column in the file (a category's indicators share it)
        positions = [column for column, c in zip(table.columns, schema.columns) for _ in range(c.width)]
    return [*task.identifier_columns(X, schema.encoded_names, positions, rows=table.rows),
            *task.decimal_commas(schema.columns),
            *task.one_level_per_row(schema.columns, n_train)]


def _test_provenance(opts: DataOptions, test_table: Table | None, test_index) -> dict | None:
    """Where the test rows came from, as the run file records it: a file of their own or a split of the table."""
    if test_table is not None:
        return {"source": "file", **test_table.provenance}
    if test_index is None:
        return None
    test = {"source": "split", "rows": int(len(test_index))}
    if opts.test_fraction is not None:
        test.update(test_fraction=opts.test_fraction, split_seed=opts.split_seed)
    else:
        test.update(uci_split=opts.uci_split)
    return test


def _one_label_left(opts: DataOptions, labels: list, calibrated: bool) -> DataError:
    """The error of a split that left the training rows one label value of the file's several: ``labels`` are the
    training rows' labels first, then those of the rows held out."""
    in_file = len(np.unique(np.concatenate(labels)))
    held = ([f"the test rows of --test-fraction {opts.test_fraction} (--split-seed {opts.split_seed})"]
            if opts.test_fraction is not None else
            [f"the test rows of --uci-split {opts.uci_split}"] if opts.uci_split is not None else []) + \
        (["the rows --calibrate held out"] if calibrated else [])
    value = _fmt_label(np.asarray(labels[0])[0].item())
    return DataError(f"{opts.path}: the rows left for training hold one label value, {value!r}, "
                     f"of the file's {in_file}: {' and '.join(held)} took the others (another "
                     f"{'--split-seed' if opts.test_fraction is not None else '--seed'}, or fewer rows held out, "
                     "keeps them)")


def fit_schema(table: Table, path, *, train=None, missing="error", na_values=NA_VALUES,
               standardize=False) -> Schema:
    """The data schema of a training table, fitted on its rows ``train`` (None: all). A CSV file's is stored in the
    run; the features of LIBSVM, IDX and UCI data are numbers without gaps, and their schema is implied by the
    run's feature names (nothing to store)."""
    if table.provenance["format"] != "csv":
        return Schema(columns=tuple(Column(name, j) for j, name in enumerate(table.feature_names)), missing=missing,
                      standardize=standardize, stored=False)
    left_out = table.provenance.get("columns_dropped") or ()
    return Schema.fit(table.X, table.text, names=table.feature_names, positions=table.columns, train=train,
                      path=path, left_out=left_out, missing=missing, na_values=na_values, standardize=standardize)


def with_target(schema: Schema, prepared: Prepared, table: Table | None = None) -> Schema:
    """``schema`` with its target as prepared: its name or column, kind and classes."""
    train = prepared.data["train"]
    name = train.get("target")
    position = table.target_column if table is not None else None
    if isinstance(name, int) and not isinstance(name, bool):
        name, position = None, name
    classes = prepared.data["targets"].get("classes")
    kind = TARGET_NUMERIC if prepared.likelihood == "gaussian" else CLASSES
    return replace(schema, target=Target(name if isinstance(name, str) else None, position, kind,
                                         tuple(classes) if classes is not None else None))


def _note_imputed(path, count: int, notify) -> None:
    """Say that ``count`` missing cells of the data ``path`` were filled in (none: nothing)."""
    if count:
        notify(f"{path}: {count} missing cell{'s' if count > 1 else ''} imputed with the training rows' mean "
               "(numbers) or most frequent value (categories)")


def _keep_rows(a: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``a[index]``, made in place of ``a`` (which is spent) when ``index`` increases: row k is moved to position
    k, never onto a row still to be moved, a block at a time. The split of a file then holds its rows once and a
    copy of the test rows, instead of two copies of every row."""
    if len(index) and not (index[0] >= 0 and np.all(index[1:] > index[:-1])):
        return a[index]
    step = max(8, (1 << 18) // max(int(np.prod(a.shape[1:])), 1))
    for lo in range(0, len(index), step):
        hi = min(lo + step, len(index))
        a[lo:hi] = a[index[lo:hi]]
    return a[: len(index)]


def _stored_options(run: Run) -> DataOptions:
    # a newer minor format may record options this slang does not know: they are ignored, as the format promises
    known = {field.name for field in fields(DataOptions)}
    return DataOptions(**{key: value for key, value in run.data["options"].items() if key in known})


def transform(run: Run, X, y_raw, path, *, text=None, where=None, row_where=None,
              impute: bool = False, overwrite: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
    """Apply the run's data schema (encoding, imputation with ``impute``, standardisation) and target coding to raw
    ``(X, y)`` read from ``path`` (``y`` may be None: data without a target column); ``text`` holds the raw text
    columns, ``where(i, k)`` names a cell in messages (``slangcli.data.schema``) and ``row_where(i)`` a row (its
    label). With ``overwrite``, ``X`` (read for this alone) is encoded and standardised in place."""
    schema = schema_of(run)
    width = len(schema.columns)
    if X.shape[1] != width:
        raise DataError(f"{path}: {X.shape[1]} feature columns, but the model was trained on {width}"
                        + (" (is the target column missing? scoring needs it)" if X.shape[1] == width - 1 else ""))
    X = schema.apply(X, text, path=path, impute=impute, where=where, overwrite=overwrite)
    if y_raw is None:
        return X, None
    if run.model.likelihood == "gaussian":
        numeric_target(y_raw, path, row_where)
        target = Standardizer(mean=run.arrays["target_mean"], scale=run.arrays["target_scale"])
        y = target.apply(y_raw.astype(float)[:, None], path=path)[:, 0]
    else:
        dtype = float if run.model.likelihood == "bernoulli" else np.int64
        y = LabelMap(tuple(run.data["labels"]["classes"])).encode(y_raw, path=path, dtype=dtype, where=row_where)
    return X, y


# a feature whose median over the rows of a data file lies this many training standard deviations from the training
# rows' mean is not the feature the fit saw: most often a file read by position whose columns are not the fit's
FAR = 10.0
# ... judged on files of this many rows or more: one row's heavy-tailed value (a rare pixel of the digits) is no sign
FAR_ROWS = 5
FAR_SAMPLE = 10_000


def _far_from_training(run: Run, X: np.ndarray, path) -> list[str]:
    """A warning naming the features of ``X`` (standardised as the fit standardised its own) whose median lies
    :data:`FAR` or more training standard deviations from the training mean. A headerless file with a pandas index
    first was read one column off, without a word (the index as the first feature, the last feature as the target:
    predictive standard deviations 17 times the training ones). Runs that do not standardise are not judged."""
    schema = schema_of(run)
    if not schema.standardize or len(X) < FAR_ROWS or X.size == 0:
        return []
    # (on at most FAR_SAMPLE rows spread over the file: |X| of every row was a copy of a table of gigabytes)
    X = X[:: max(1, len(X) // FAR_SAMPLE)]
    with np.errstate(invalid="ignore"):
        median = np.nanmedian(np.abs(X), axis=0) if np.isnan(X).any() else np.median(np.abs(X), axis=0)
    far = np.flatnonzero(median >= FAR)
    if far.size:
        # a rare flag of the training rows (0/1, -1/+1, 1/2) is standardised far out wherever it is set, in a file of
        # rows that have it as in any other: a column of two values or fewer is not judged (a file read one column
        # off shows in its index, of many values)
        two = [j for j in far if len(np.unique(X[:, j][~np.isnan(X[:, j])])) <= 2]
        far = np.setdiff1d(far, two)
    if not far.size:
        return []
    names = schema.encoded_names
    listed = ", ".join(f"{names[j]!r} at {median[j]:.3g}" for j in far[:3]) + (", ..." if far.size > 3 else "")
    return [f"warning: {path}: {far.size} of the {X.shape[1]} features {'lies' if far.size == 1 else 'lie'} far from "
            "the training rows (median "
            f"distance from the training mean, in training standard deviations: {listed}); is the file laid out as "
            "the fit's (a file without a header row is read by position: an index or id column first shifts every "
            "feature)?"]


def _transform_table(run: Run, table: Table, path, index=None, *, impute: bool = False, features_only=False):
    """:func:`transform` of a table read from ``path`` (of its rows ``index``, None: all) for this use alone: its
    features are encoded and standardised in place (a copy held a file's table twice: 3.45 GB to predict from a
    table of 1.6 GB)."""
    if index is not None:
        table = _subset(table, index)
    return transform(run, table.X, None if features_only else table.y, path, text=table.text,
                     where=_where(path, table), row_where=_row_where(path, table), impute=impute, overwrite=True)


def _row_where(path, table: Table, index=None) -> Callable[[int], str]:
    """``where(i)``: where row ``i`` of ``table`` (of its rows ``index``, None: all) stands, for a message: the text
    file's ``path:line`` (read again for it when the reader kept no lines), else ``path: row r``, the 0-based data
    row."""
    def where(i: int) -> str:
        r = int(index[i]) if index is not None else i
        if table.lines is not None:
            return f"{path}:{table.lines[r]}"
        data_row = int(table.rows[r]) if table.rows is not None else r
        line = None
        if table.provenance.get("format") in ("csv", "libsvm"):
            line = line_of_row(table.provenance["path"], data_row, bool(table.provenance.get("header")))
        return f"{path}:{line}" if line is not None else f"{path}: row {data_row}"

    return where


def _subset(table: Table, index) -> Table:
    """The rows ``index`` of ``table`` (its features, targets, text and lines)."""
    return Table(X=table.X[index], y=table.y[index] if table.y is not None else None,
                 feature_names=table.feature_names, provenance=table.provenance,
                 text={k: v[index] for k, v in table.text.items()} if table.text else None,
                 lines=table.lines[index] if table.lines is not None else None,
                 rows=table.rows[index] if table.rows is not None else None, columns=table.columns,
                 target_column=table.target_column)


def _schema_text_columns(run: Run) -> list | None:
    """The training file's columns that the run reads as text (None: not recorded, a run without a stored
    schema; the file is then read as at its fit)."""
    schema = schema_of(run)
    if not schema.stored:
        return None
    return [schema.columns[k].position for k in schema.text_columns]


def _check_impute(run: Run, path, missing: str) -> None:
    """Refuse ``--missing impute`` for a run that stores no values to impute."""
    if missing == "impute" and not schema_of(run).can_impute:
        raise DataError(f"{path}: --missing impute needs the values a missing cell gets, and the run stores none (it "
                        "was written before slang imputed missing values, or fitted to LIBSVM, IDX or UCI data); "
                        "--missing drop leaves such rows out")


def _rows(k: int) -> str:
    return f"{k} row" + ("" if k == 1 else "s")


def _dropped_lines(table) -> str:
    """``lines 3, 5, 8`` (``, ...`` after the first ones): where the rows left out for a missing value were."""
    dropped, lines = table.provenance["rows_dropped"], table.provenance["dropped_lines"]
    return f"line{'s' if dropped > 1 else ''} {', '.join(map(str, lines))}{', ...' if dropped > len(lines) else ''}"


def _dropped_notes(run: Run, table, path, given: bool = True) -> list[str]:
    """The note of the rows of a file to score that were left out for a missing value (``--missing drop``), as
    ``slang predict`` and ``slang fit --test`` say it; none when no row was. ``given``: a file given to score, whose
    ``--missing`` may be chosen (the run's own test file is read as the fit read it)."""
    dropped = table.provenance.get("rows_dropped", 0)
    if not dropped:
        return []
    impute = "--missing impute fills them in, " if schema_of(run).can_impute else ""
    why = f"({impute}--missing error refuses them)" if given else "(as the fit left them out)"
    return [f"{path}: {_rows(dropped)} with a missing value left out (--missing drop), {_dropped_lines(table)}: "
            f"{'it is' if dropped == 1 else 'they are'} not scored {why}"]


def _dropped(table) -> dict:
    """The count of rows left out for a missing value, for a data source's description (none: nothing)."""
    rows = table.provenance.get("rows_dropped")
    return {"rows_dropped": rows} if rows else {}


def recorded_files(info: dict) -> list[tuple[str, str]]:
    """The ``(path, sha256)`` of every file a data source's provenance (``Table.provenance``, a run's
    ``data["train"]`` or ``data["test"]``) names with a digest: the data file, an IDX labels file, a UCI folder's
    data, index and column files; standard input left out (it cannot be read again)."""
    files = []
    for key, value in info.items():
        digest = info.get(key[: -len("path")] + "sha256") if key.endswith("path") else None
        if key == "path" and info.get("stream") is True:  # (standard input is left out below)
            continue
        if key == "labels_path" and info.get("labels_stream") is True:
            continue
        if isinstance(value, str) and isinstance(digest, str) and value != STDIN:
            files.append((value, digest))
    return files


def _verify(run_name: str, what: str, path: str, expected: str | None) -> None:
    """Refuse a recorded data file that is gone, was standard input, or whose contents changed since the fit."""
    if path == STDIN:  # (a missing argument, as for a run without test data: a usage error)
        raise ConfigError(f"{run_name}: its {what} data were read from standard input; pass the data explicitly")
    try:
        found = sha256_file(path)
    except DataError:
        raise DataError(f"{run_name}: its {what} data {path} is missing; pass the data explicitly") from None
    if expected and found != expected:
        raise DataError(f"{run_name}: its {what} data {path} changed since the fit (sha256 differs); "
                        "pass the data explicitly")


def _verify_source(run_name: str, what: str, info: dict) -> None:
    """:func:`_verify` of a recorded data source: its data file first (standard input or another stream, or a file
    gone, said as such), then every other file it names with a digest (an IDX labels file, a UCI folder's index
    and column files: :func:`recorded_files`)."""
    if info.get("stream") is True:
        raise ConfigError(f"{run_name}: its {what} data were read from a pipe or stream ({info['path']}), which "
                          "cannot be read again; pass the data explicitly")
    if info.get("labels_stream") is True:
        raise ConfigError(f"{run_name}: the labels of its {what} data were read from a pipe or stream "
                          f"({info['labels_path']}), which cannot be read again; pass the data explicitly")
    _verify(run_name, what, info["path"], info.get("sha256"))
    for path, digest in recorded_files(info):
        if path != info["path"]:
            _verify(run_name, what, path, digest)


def _read_uci_given(run: Run, folder: str, split: int):
    """A UCI folder given to a run fitted on one: its split, refused when its column files choose other features
    or another target than the fit's (the inputs would be other columns under the same count)."""
    table, train, test = read_uci_folder(folder, split)
    fitted = run.data["train"]
    names = tuple(column.name for column in schema_of(run).columns)
    if tuple(table.feature_names) != names or table.provenance["target"] != fitted.get("target"):
        raise DataError(f"{folder}: its index_features.txt and index_target.txt choose features "
                        f"{', '.join(table.feature_names)} and target column {table.provenance['target']}; the fit "
                        f"had {', '.join(names)} and {fitted.get('target')}")
    return table, train, test


def _reread_training(run: Run, run_name: str):
    """The run's training source re-read, refusing files whose contents changed since the fit; its rows as the fit
    had them (those without a target left out, as --missing impute leaves them)."""
    opts = _stored_options(run)
    info = run.data["train"]
    if info["format"] == ARRAYS:
        raise DataError(f"{run_name}: fitted to arrays from Python, so there is no training file to re-read")
    _verify_source(run_name, "training", info)
    if info["format"] == "uci":
        return read_uci_folder(info["folder"], opts.uci_split)[0]
    table = _read(info["path"], opts, n_features=info.get("widened_from") and info["features"],
                  text_columns=_schema_text_columns(run))
    return _without_missing_targets(table, info["path"])


def _read_given(run: Run, data_path, opts: DataOptions, *, need_target: bool, layout: str | None, notify,
                header: bool | None = None):
    """A data file given to the fitted run, its columns matched to the run's features (``slangcli.data.columns``);
    unless the targets are ``need``ed (to score), a missing one is no missing value: its row is predicted.
    ``header`` says whether a CSV file has a header row (None: as the fit was told, else detected)."""
    width = run.model.sizes[0]
    if header is not None:
        opts = replace(opts, header=header)
    table = read_table(data_path, **opts.given_data_options(), optional_target=not need_target,
                       layout=file_layout(run, data_path, need_target=need_target, layout=layout, notify=notify))
    if table.provenance["format"] == "libsvm" and table.X.shape[1] < width:
        table = widen(table, width)
    return table


def load_test(run: Run, run_name: str, data_path=None, *, missing: str | None = None, layout: str | None = None,
              header: bool | None = None, notify: Callable[[str], None] = lambda msg: None,
              data_option: str = "a data file"):
    """The evaluation data ``(X, y, description)``: ``data_path``, else the run's own test set. ``missing``
    overrides the fit's ``--missing`` for ``data_path``; ``layout`` (``full`` or ``features``) says how a CSV file
    without a header row is laid out when its width alone does not (``slangcli.data.columns``), ``header`` whether it
    has one (None: as the fit was told, else detected). With ``impute``, a row without a target is left out (with
    a note): it cannot be scored. ``data_option`` is how the caller's user passes data, for the message of a run
    without test data."""
    opts = _stored_options(run)
    # (a fit to LIBSVM, IDX or UCI data with --missing impute had nothing to impute, and stores nothing to)
    impute = opts.missing == "impute" and schema_of(run).can_impute
    if data_path is not None:
        if missing is not None:
            _check_impute(run, data_path, missing)
            opts = replace(opts, missing=missing)
            impute = missing == "impute"
        if os.path.isdir(data_path):
            if opts.uci_split is None:
                raise DataError(f"{data_path}: a folder; this run was not fitted on a UCI folder")
            table, _, idx = _read_uci_given(run, data_path, opts.uci_split)
            X, y = transform(run, table.X[idx], table.y[idx], data_path)
            return X, y, {"source": "uci-split", "path": table.provenance["path"], "rows": int(len(idx))}
        table = _read_given(run, data_path, opts, need_target=True, layout=layout, notify=notify, header=header)
        notes = _dropped_notes(run, table, data_path)
        if table.provenance.get("sha256") and table.provenance["sha256"] == run.data["train"].get("sha256"):
            # (a compressed run keeps no calibration, but its config says the fit held rows out for one)
            calibrated = (run.calibration or {}).get("index") is not None or bool((run.config or {}).get("calibrate"))
            held = [what for what, there in (("test rows", run.arrays.get("test_index") is not None),
                                             ("--calibrate rows", calibrated)) if there]
            notes.append(f"{data_path} is the file the run was fitted to (the same sha256): its scores are "
                         + (f"of its training rows and its held-out {' and '.join(held)} together" if held else
                            "of its training rows, not of data it has not seen"))
        table = _without_missing_targets(table, data_path, notes.append)
        count = schema_of(run).count_missing(table.X, table.text) if impute else 0
        X, y = _transform_table(run, table, data_path, impute=impute)
        notes += _far_from_training(run, X, data_path)
        for note in notes:
            notify(note)
        _note_imputed(data_path, count, notify)
        return X, y, {"source": "file", "path": table.provenance["path"], "sha256": table.provenance["sha256"],
                      **_dropped(table)}
    test = run.data.get("test")
    # (a missing argument, not bad data: a usage error, exit 2)
    if test is None:
        raise ConfigError(f"{run_name}: the run has no test data; pass {data_option}")
    if test["source"] == ARRAYS:
        raise ConfigError(f"{run_name}: its test data were arrays passed from Python; pass {data_option}")
    if test["source"] == "file":
        _verify_source(run_name, "test", test)
        table = _read(test["path"], opts, n_features=test.get("widened_from") and test["features"],
                      text_columns=_schema_text_columns(run))
        X, y = _transform_table(run, _without_missing_targets(table, test["path"]), test["path"], impute=impute)
        for note in _dropped_notes(run, table, test["path"], given=False):
            notify(note)
        return X, y, {"source": "file", "path": test["path"], "sha256": test["sha256"], **_dropped(table)}
    table = _reread_training(run, run_name)
    idx = run.arrays["test_index"]
    X, y = _transform_table(run, table, run.data["train"]["path"], idx, impute=impute)
    return X, y, {"source": "split", "path": run.data["train"]["path"], "rows": int(len(idx))}


def load_train(run: Run, run_name: str):
    """The run's training data ``(X, y)`` as used in the fit (without the rows ``--calibrate`` held out)."""
    table = _reread_training(run, run_name)
    impute = _stored_options(run).missing == "impute" and schema_of(run).can_impute
    index = run.arrays.get("train_index")
    calibration = getattr(run, "calibration", None)
    if index is None and calibration:
        index = np.setdiff1d(np.arange(len(table.X)), calibration["index"])
    return _transform_table(run, table, run.data["train"]["path"], index, impute=impute)


def load_inputs(run: Run, data_path, *, missing: str | None = None, layout: str | None = None,
                header: bool | None = None,
                notify: Callable[[str], None] = lambda msg: None):
    """Data to predict on: ``(X, target, source, rows)`` with ``X`` prepared as in the fit, ``target`` the original
    target values (label values for classification) or None when the data lack the target column, and ``rows``
    the 0-based data row each row of ``X`` was read from.

    A CSV file's columns are matched to the run's features by name, or by position when there are no names
    (``slangcli.data.columns``): a file may lack the target column, the columns the fit left out, or both, and
    ``layout`` (``full`` or ``features``) says which when its width alone does not. ``header`` says whether it has
    a header row (None: as the fit was told, else detected; a first row holding every feature name of the run is
    one). LIBSVM, IDX and UCI-folder data always carry their targets.

    ``missing`` says what becomes of a row with a missing value: ``keep`` keeps its place, with no prediction
    (``source["rows_missing"]`` counts such rows and ``source["rows"]`` is every data row, so the caller fills them
    in); ``drop`` leaves it out (``source["rows_dropped"]``); ``error`` refuses the file; ``impute`` fills a missing
    feature in as the fit would have (the training rows' mean or most frequent value), and a row whose target is
    missing is predicted, its target left empty. The default is ``impute`` when the fit imputed, else ``keep``.
    """
    opts = _stored_options(run)
    if missing is None:
        missing = "impute" if opts.missing == "impute" and schema_of(run).can_impute else "keep"
    if missing not in PREDICT_MISSING:
        raise ConfigError(f"--missing must be one of {', '.join(PREDICT_MISSING)}, got {missing!r}")
    _check_impute(run, data_path, missing)
    # a kept row is read as a dropped one; its place is known from the rows that are left
    opts = replace(opts, missing="drop" if missing == "keep" else missing)
    notes = []  # said once the data are encoded, so that an error comes alone
    if os.path.isdir(data_path):
        if opts.uci_split is None:
            raise DataError(f"{data_path}: a folder; this run was not fitted on a UCI folder")
        table, _, idx = _read_uci_given(run, data_path, opts.uci_split)
        table = _subset(table, idx)
        source = {"source": "uci-split", "path": table.provenance["path"], "rows": int(len(idx))}
        rows = np.asarray(idx, dtype=np.int64)  # the rows of data.txt, as a file's rows are its data rows
    else:
        table = _read_given(run, data_path, opts, need_target=False, layout=layout, notify=notify, header=header)
        source = {"source": "file", "path": table.provenance["path"], "sha256": table.provenance["sha256"],
                  "rows": int(len(table.X))}
        rows = table.rows if table.rows is not None else np.arange(len(table.X))
        dropped = table.provenance.get("rows_dropped", 0)
        if dropped:
            listed = _dropped_lines(table)
            if missing == "keep":
                source.update(rows=int(len(table.X)) + dropped, rows_missing=dropped)
                impute = "--missing impute fills them in, " if schema_of(run).can_impute else ""
                notes.append(f"{data_path}: {_rows(dropped)} with a missing value ({listed}) "
                             f"{'has its' if dropped == 1 else 'have their'} predictions left empty (--missing drop "
                             f"leaves such rows out, {impute}--missing error refuses them)")
            else:
                source["rows_dropped"] = dropped
                notes.append(f"{data_path}: {_rows(dropped)} with a missing value left out (--missing drop), {listed}: "
                             "there are no predictions for them (the row column says which rows there are)")
    count = schema_of(run).count_missing(table.X, table.text) if missing == "impute" else 0
    X, _ = _transform_table(run, table, data_path, impute=missing == "impute", features_only=True)
    notes += _far_from_training(run, X, data_path)
    for note in notes:
        notify(note)
    _note_imputed(data_path, count, notify)
    target = None if table.y is None else _target_values(run, table.y, data_path, _row_where(data_path, table),
                                                         notify)
    return X, target, dict(source, has_target=target is not None), rows


def _target_values(run: Run, y_raw: np.ndarray, path, where: Callable[[int], str],
                   notify: Callable[[str], None] = lambda msg: None) -> np.ndarray:
    """The target values of data to predict on, as the fit knows them: numbers (regression), or the stored label
    values (a file's "1" and the class 1.0 are the same label, as in the predicted column); a missing one (kept by
    ``impute``) stays empty: NaN, or "" among text labels. A label the fit never saw is no reason not to predict
    its row: it is said in a note, and its cell left empty as a missing one's."""
    if run.model.likelihood == "gaussian":
        numeric_target(y_raw, path, where)
        values = y_raw.astype(float)
        # (a value that overflows once standardised as in the fit is refused, as when it is scored)
        target = Standardizer(mean=run.arrays["target_mean"], scale=run.arrays["target_scale"])
        target.apply(values[~np.isnan(values)][:, None], path=path)
        return values
    labels = LabelMap(tuple(run.data["labels"]["classes"]))
    gaps = _target_gaps(y_raw)
    unseen = ~gaps & ~labels.seen(y_raw)
    if unseen.any():
        rows = np.flatnonzero(unseen)
        first = f"{where(int(rows[0]))}: label {_fmt_label(y_raw[rows[0]].item())!r} was not seen in training " \
                f"(known: {_listing(labels.classes)})"
        notify(f"{first}: the row is predicted, its target cell left empty" if len(rows) == 1 else
               f"{first}, nor were the labels of {len(rows) - 1} more row{'s' if len(rows) > 2 else ''} (next "
               f"at {where(int(rows[1]))}): the rows are predicted, their target cells left empty")
        gaps = gaps | unseen
    if not gaps.any():
        return labels.decode(labels.encode(y_raw, path=path, where=where))
    present = np.flatnonzero(~gaps)
    values = labels.decode(labels.encode(y_raw[present], path=path, where=lambda i: where(int(present[i]))))
    out = np.full(len(y_raw), "" if values.dtype.kind == "U" else np.nan,
                  dtype=values.dtype if values.dtype.kind == "U" else np.float64)
    out[present] = values
    return out
