"""Data files for a fit and for a stored run: reading them into prepared arrays, and re-reading a run's recorded data.

The command line parses its data options into :class:`DataOptions`; :func:`load_training` reads the files (or a
Gal-layout UCI folder, or a ``--test-fraction`` split) and prepares them (``slangcli.prepare.prepare``). For a stored
run, :func:`load_test`, :func:`load_train` and :func:`load_inputs` re-read its recorded files (refusing ones whose
sha256 changed) or read new data with the fit's options, and :func:`transform` applies the run's standardisation and
label coding to raw arrays.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields, replace
from typing import Callable

import numpy as np

from slangcli import task
from slangcli.columns import file_layout
from slangcli.errors import ConfigError, DataError
from slangcli.io import ARRAYS, Run
from slangcli.prepare import LabelMap, Prepared, Standardizer, prepare, train_test_split
from slangcli.readers import (MISSING_POLICIES, NA_VALUES, STDIN, is_uci_folder, read_table, read_uci_folder,
                              sha256_file, widen)

# what ``slang predict`` does with a row that has a missing value: keep it, with empty predictions (the default),
# leave it out, or refuse the file
PREDICT_MISSING = ("keep", *MISSING_POLICIES)


@dataclass(frozen=True)
class DataOptions:
    """How to read the training data and where the test data come from."""

    path: str
    format: str = "auto"
    target: str | int | None = None
    delimiter: str | None = None
    header: bool | None = None
    n_features: int | None = None
    test: str | None = None
    test_fraction: float | None = None
    split_seed: int = 0
    standardize: bool | None = None  # None: fitting.standardize_by_default, resolved by fitting.fit
    uci_split: int | None = None
    # CSV columns and missing values (``slangcli.readers.read_table``); a run file written before these existed
    # lacks them, and these defaults read its data as it was read then
    drop_columns: str | list | None = None
    columns: str | list | None = None
    na_values: tuple | list = NA_VALUES
    missing: str = "error"

    def record(self) -> dict:
        """The options as stored in a run file (JSON: sequences as lists)."""
        return {key: list(value) if isinstance(value, tuple) else value for key, value in asdict(self).items()}

    def reader_options(self) -> dict:
        """The keyword arguments of ``read_table`` that these options set (its path and width aside)."""
        return {"format": self.format, "target": self.target, "delimiter": self.delimiter, "header": self.header,
                "drop_columns": self.drop_columns, "columns": self.columns, "na_values": tuple(self.na_values),
                "missing": self.missing}

    def given_data_options(self) -> dict:
        """The keyword arguments of ``read_table`` for other data given to the fitted run: how a file is
        written (format, delimiter, header, missing values) as for the training file; which columns are the
        features is decided against the run (``slangcli.columns``), not by these column options."""
        fmt = self.format if self.format in ("csv", "libsvm", "idx") else "auto"
        return {"format": fmt, "target": self.target, "delimiter": self.delimiter, "header": self.header,
                "na_values": tuple(self.na_values), "missing": self.missing}


def _read(path, opts: DataOptions, n_features=None):
    return read_table(path, **opts.reader_options(),
                      n_features=n_features if n_features is not None else opts.n_features)


def _is_uci(opts: DataOptions) -> bool:
    return opts.format == "uci" or is_uci_folder(opts.path)


def _read_sources(opts: DataOptions, notify):
    """The training table, optional test table, and split indices into the training table."""
    if _is_uci(opts):
        if opts.uci_split is None:
            raise ConfigError(f"{opts.path} is a Gal-layout UCI folder: choose a split with --uci-split K")
        if opts.test is not None or opts.test_fraction is not None:
            raise ConfigError("--uci-split selects the test set; do not combine it with --test or --test-fraction")
        table, train_index, test_index = read_uci_folder(opts.path, opts.uci_split)
        return table, None, train_index, test_index
    if opts.uci_split is not None:
        raise ConfigError("--uci-split needs DATA to be a Gal-layout UCI folder")
    if opts.test is not None and opts.test_fraction is not None:
        raise ConfigError("give either --test or --test-fraction, not both")
    table = _read(opts.path, opts)
    test_table = None
    if opts.test is not None:
        test_table = _read(opts.test, opts)
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


def load_training(opts: DataOptions, *, likelihood: str = "auto",
                  notify: Callable[[str], None] = lambda msg: None) -> Prepared:
    """Read, split, code and standardise the training (and test) data of the files in ``opts``."""
    table, test_table, train_index, test_index = _read_sources(opts, notify)
    if train_index is not None:
        X_test, y_test_raw = table.X[test_index], table.y[test_index]
        X_train, y_train_raw = _keep_rows(table.X, train_index), _keep_rows(table.y, train_index)
    else:
        X_train, y_train_raw = table.X, table.y
        X_test = test_table.X if test_table is not None else None
        y_test_raw = test_table.y if test_table is not None else None

    if table.provenance["format"] == "csv":
        for warning in task.identifier_columns(X_train, table.feature_names):
            notify(f"{opts.path}: {warning}")

    if test_table is not None:
        test = {"source": "file", **test_table.provenance}
    elif test_index is not None:
        test = {"source": "split", "rows": int(len(test_index))}
        if opts.test_fraction is not None:
            test.update(test_fraction=opts.test_fraction, split_seed=opts.split_seed)
        else:
            test.update(uci_split=opts.uci_split)
    else:
        test = None
    prepared = prepare(X_train, y_train_raw, X_test, y_test_raw, likelihood=likelihood,
                       standardize=bool(opts.standardize), name=opts.path, test_name=opts.test or opts.path,
                       train_provenance=table.provenance, test_provenance=test,
                       feature_names=table.feature_names, options=opts.record(),
                       overwrite=True)  # the table is read for this preparation alone: standardised in place
    if train_index is not None:
        prepared.arrays["train_index"], prepared.arrays["test_index"] = train_index, test_index
    return prepared


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


def transform(run: Run, X, y_raw, path) -> tuple[np.ndarray, np.ndarray | None]:
    """Apply the run's feature standardisation and target coding to raw ``(X, y)`` read from ``path`` (``y``
    may be None: data without a target column)."""
    width = run.model.sizes[0]
    if X.shape[1] != width:
        raise DataError(f"{path}: {X.shape[1]} feature columns, but the model was trained on {width}"
                        + (" (is the target column missing? scoring needs it)" if X.shape[1] == width - 1 else ""))
    if "feature_mean" in run.arrays:
        X = Standardizer(mean=run.arrays["feature_mean"], scale=run.arrays["feature_scale"]).apply(X, path=path)
    if y_raw is None:
        return X, None
    if run.model.likelihood == "gaussian":
        if y_raw.dtype.kind not in "fiu":
            raise DataError(f"{path}: a regression target must be numeric")
        target = Standardizer(mean=run.arrays["target_mean"], scale=run.arrays["target_scale"])
        y = target.apply(y_raw.astype(float)[:, None], path=path)[:, 0]
    else:
        dtype = float if run.model.likelihood == "bernoulli" else np.int64
        y = LabelMap(tuple(run.data["labels"]["classes"])).encode(y_raw, path=path, dtype=dtype)
    return X, y


def _rows(k: int) -> str:
    return f"{k} row" + ("" if k == 1 else "s")


def _dropped(table) -> dict:
    """The count of rows left out for a missing value, for a data source's description (none: nothing)."""
    rows = table.provenance.get("rows_dropped")
    return {"rows_dropped": rows} if rows else {}


def _verify(run_name: str, what: str, path: str, expected: str | None) -> None:
    """Refuse a recorded data file that is gone, was standard input, or whose contents changed since the fit."""
    if path == STDIN:
        raise DataError(f"{run_name}: its {what} data were read from standard input; pass the data explicitly")
    try:
        found = sha256_file(path)
    except DataError:
        raise DataError(f"{run_name}: its {what} data {path} is missing; pass the data explicitly") from None
    if expected and found != expected:
        raise DataError(f"{run_name}: its {what} data {path} changed since the fit (sha256 differs); "
                        "pass the data explicitly")


def _reread_training(run: Run, run_name: str):
    """The run's training source re-read, refusing files whose contents changed since the fit."""
    opts = _stored_options(run)
    info = run.data["train"]
    if info["format"] == ARRAYS:
        raise DataError(f"{run_name}: fitted to arrays from Python, so there is no training file to re-read")
    _verify(run_name, "training", info["path"], info.get("sha256"))
    if info["format"] == "uci":
        return read_uci_folder(info["folder"], opts.uci_split)[0]
    return _read(info["path"], opts, n_features=info.get("widened_from") and info["features"])


def _read_given(run: Run, data_path, opts: DataOptions, *, need_target: bool, layout: str | None, notify):
    """A data file given to the fitted run, its columns matched to the run's features (``slangcli.columns``)."""
    width = run.model.sizes[0]
    table = read_table(data_path, **opts.given_data_options(),
                       layout=file_layout(run, data_path, need_target=need_target, layout=layout, notify=notify))
    if table.provenance["format"] == "libsvm" and table.X.shape[1] < width:
        table = widen(table, width)
    return table


def load_test(run: Run, run_name: str, data_path=None, *, missing: str | None = None, layout: str | None = None,
              notify: Callable[[str], None] = lambda msg: None):
    """The evaluation data ``(X, y, description)``: ``data_path``, else the run's own test set. ``missing``
    overrides the fit's ``--missing`` for ``data_path``; ``layout`` (``full`` or ``features``) says how a CSV file
    without a header row is laid out when its width alone does not (``slangcli.columns``)."""
    if data_path is not None:
        opts = _stored_options(run)
        if missing is not None:
            opts = replace(opts, missing=missing)
        if os.path.isdir(data_path):
            if opts.uci_split is None:
                raise DataError(f"{data_path}: a folder; this run was not fitted on a UCI folder")
            table, _, idx = read_uci_folder(data_path, opts.uci_split)
            X, y = transform(run, table.X[idx], table.y[idx], data_path)
            return X, y, {"source": "uci-split", "path": table.provenance["path"], "rows": int(len(idx))}
        table = _read_given(run, data_path, opts, need_target=True, layout=layout, notify=notify)
        X, y = transform(run, table.X, table.y, data_path)
        return X, y, {"source": "file", "path": table.provenance["path"], "sha256": table.provenance["sha256"],
                      **_dropped(table)}
    test = run.data.get("test")
    if test is None:
        raise DataError(f"{run_name}: the run has no test data; pass a data file")
    if test["source"] == ARRAYS:
        raise DataError(f"{run_name}: its test data were arrays passed from Python; pass a data file")
    if test["source"] == "file":
        _verify(run_name, "test", test["path"], test["sha256"])
        opts = _stored_options(run)
        table = _read(test["path"], opts, n_features=test.get("widened_from") and test["features"])
        X, y = transform(run, table.X, table.y, test["path"])
        return X, y, {"source": "file", "path": test["path"], "sha256": test["sha256"]}
    table = _reread_training(run, run_name)
    idx = run.arrays["test_index"]
    X, y = transform(run, table.X[idx], table.y[idx], run.data["train"]["path"])
    return X, y, {"source": "split", "path": run.data["train"]["path"], "rows": int(len(idx))}


def load_train(run: Run, run_name: str):
    """The run's training data ``(X, y)`` as used in the fit."""
    table = _reread_training(run, run_name)
    idx = run.arrays.get("train_index")
    X, y_raw = (table.X, table.y) if idx is None else (table.X[idx], table.y[idx])
    return transform(run, X, y_raw, run.data["train"]["path"])


def load_inputs(run: Run, data_path, *, missing: str | None = None, layout: str | None = None,
                notify: Callable[[str], None] = lambda msg: None):
    """Data to predict on: ``(X, target, source, rows)`` with ``X`` prepared as in the fit, ``target`` the original
    target values (label values for classification) or None when the data lack the target column, and ``rows``
    the 0-based data row each row of ``X`` was read from.

    A CSV file's columns are matched to the run's features by name, or by position when there are no names
    (``slangcli.columns``): a file may lack the target column, the columns the fit left out, or both, and
    ``layout`` (``full`` or ``features``) says which when its width alone does not. LIBSVM, IDX and UCI-folder
    data always carry their targets.

    ``missing`` says what becomes of a row with a missing value: ``keep`` (the default) keeps its place, with no
    prediction (``source["rows_missing"]`` counts such rows and ``source["rows"]`` is every data row, so the
    caller fills them in); ``drop`` leaves it out (``source["rows_dropped"]``); ``error`` refuses the file.
    """
    opts = _stored_options(run)
    missing = missing or "keep"
    if missing not in PREDICT_MISSING:
        raise ConfigError(f"--missing must be one of {', '.join(PREDICT_MISSING)}, got {missing!r}")
    # a kept row is read as a dropped one; its place is known from the rows that are left
    opts = replace(opts, missing="drop" if missing == "keep" else missing)
    if os.path.isdir(data_path):
        if opts.uci_split is None:
            raise DataError(f"{data_path}: a folder; this run was not fitted on a UCI folder")
        table, _, idx = read_uci_folder(data_path, opts.uci_split)
        X_raw, y_raw = table.X[idx], table.y[idx]
        source = {"source": "uci-split", "path": table.provenance["path"], "rows": int(len(idx))}
        rows = np.arange(len(idx))
    else:
        table = _read_given(run, data_path, opts, need_target=False, layout=layout, notify=notify)
        X_raw, y_raw = table.X, table.y
        source = {"source": "file", "path": table.provenance["path"], "sha256": table.provenance["sha256"],
                  "rows": int(len(X_raw))}
        rows = table.rows if table.rows is not None else np.arange(len(X_raw))
        dropped = table.provenance.get("rows_dropped", 0)
        if dropped:
            lines = table.provenance["dropped_lines"]
            listed = f"line{'s' if dropped > 1 else ''} {', '.join(map(str, lines))}"
            listed += ", ..." if dropped > len(lines) else ""
            if missing == "keep":
                source.update(rows=int(len(X_raw)) + dropped, rows_missing=dropped)
                notify(f"{data_path}: {_rows(dropped)} with a missing value ({listed}) "
                       f"{'has its' if dropped == 1 else 'have their'} predictions left empty (--missing drop leaves "
                       "such rows out, --missing error refuses them)")
            else:
                source["rows_dropped"] = dropped
                notify(f"{data_path}: {_rows(dropped)} with a missing value left out (--missing drop), {listed}: "
                       "there are no predictions for them (the row column says which rows there are)")
    X, y = transform(run, X_raw, y_raw, data_path)
    if y is None:
        target = None
    elif run.model.likelihood == "gaussian":
        target = y_raw.astype(float)
    else:
        # the stored label values (a file's "1" and the class 1.0 are the same label), as in the predicted column
        target = LabelMap(tuple(run.data["labels"]["classes"])).decode(y)
    return X, target, dict(source, has_target=target is not None), rows
