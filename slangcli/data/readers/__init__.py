"""Reading data files into one dense ``Table``: CSV-like text, LIBSVM, IDX and Gal-layout UCI folders.

``read_table`` reads one file and dispatches on its format (given, or recognised from its bytes): CSV-like text
and LIBSVM (``slangcli.data.readers.text``), IDX (``slangcli.data.readers.idx``, with the labels file beside the
images). A Gal-layout UCI folder (``slangcli.data.readers.uci``) is read with a split by ``read_uci_folder``. The
shared machinery (inputs read in blocks, streams within a size limit, gzip within a size limit, UTF-8, lines,
``Table``, ``sha256_file``) is in ``slangcli.data.readers._common``. Text is parsed a block at a time, so reading a file
holds the table it makes and about one block of its text.

Every malformed input raises ``DataError`` with one line that names the file, the line and, where it
applies, the column; no other exception type leaves ``read_table``.
"""

from __future__ import annotations

import itertools
import os

import numpy as np

from slangcli.data.readers._common import (ARRAYS, STDIN, Input, Table, check_distinct_names, data_read_once,
                                          is_stream_path, line_of_row, read_once, reading_progress, sha256_file,
                                          streams_kept, text_batches)
from slangcli.data.readers.idx import _looks_like_idx, _read_idx, read_idx
from slangcli.errors import DataError
from slangcli.data.readers.text import (MISSING_POLICIES, NA_VALUES, _looks_like_libsvm, _parse_csv, _parse_libsvm,
                                   TargetNameWithoutHeader, _TextTargets, widen)
from slangcli.data.readers.uci import _UCI_SPLIT_HINT, _uci_root, is_uci_folder, read_uci_folder

__all__ = [
    "ARRAYS",
    "MISSING_POLICIES",
    "NA_VALUES",
    "STDIN",
    "Table",
    "TargetNameWithoutHeader",
    "check_distinct_names",
    "data_read_once",
    "is_stream_path",
    "line_of_row",
    "read_once",
    "streams_kept",
    "read_table",
    "read_idx",
    "read_uci_folder",
    "reading_progress",
    "is_uci_folder",
    "sha256_file",
    "widen",
]


def read_table(path, *, format="auto", target=None, delimiter=None, header=None, n_features=None,
               targetless_width=None, drop_columns=None, columns=None, na_values=None, missing="error",
               layout=None, categorical=None, detect_categories=False, optional_target=False) -> Table:
    """Read a CSV-like, LIBSVM or IDX file, optionally gzip-compressed, into a dense ``Table``.

    Parameters
    ----------
    path : str or os.PathLike
        The file, or ``"-"`` for standard input (recorded as ``"-"``). Messages name it as given.
    format : {"auto", "csv", "libsvm", "idx"}
        ``auto`` reads IDX when the (decompressed) file starts with an IDX magic number, LIBSVM when the
        first data line looks like ``label idx:val ...`` (or a bare numeric label), else CSV. IDX is read by
        ``read_idx`` with the labels file beside the images file. A Gal-layout UCI folder, or ``"uci"``,
        is refused with a pointer to the split option: read it with ``read_uci_folder``.
    target : None, int or str
        CSV only. None: the last column; an int: a 0-based column index (negative counts from the end);
        a str: a header name, which wins when one matches exactly; else a digit string such as ``"3"`` is a
        0-based index; ``"#3"`` is always the index (the way to reach the fourth column when a header cell is
        named ``3``).
    delimiter : None or {",", "\\t", ";", " ", "whitespace"}
        CSV only. None detects it among ``,`` tab ``;`` and runs of whitespace; ``" "`` means whitespace.
    header : None or bool
        CSV only. None detects a header row: the first row is one when some cell outside the target column
        is not a number while the next row's are (or when none of them is a number).
    n_features : None or int
        LIBSVM: the dense width P (an index above it is an error); default the highest index present.
        CSV and IDX: if given, the number of feature columns must equal it.
    targetless_width : None or int
        CSV only: the file may lack its target column (data to predict on), which is decided by its width: exactly
        ``targetless_width`` columns are all features (``y`` is None and ``target`` is ignored), one more are
        features and a target as usual, any other width is an error. LIBSVM and IDX files always carry labels.
    drop_columns, columns : None, str or sequence
        CSV only: columns (header names or 0-based indices, as ``target``; a str is split at commas) not read as
        features, or the only ones read as features. The target is never dropped.
    na_values : None or sequence of str
        CSV only: cell texts (after stripping blanks) that mean a missing value; None: ``NA_VALUES`` (an empty
        cell, ``NA``, ``NaN``, ``?``).
    missing : {"error", "drop", "impute"}
        CSV only: a missing value in a feature or the target is an error naming its place and token, or its row
        is left out (counted in the provenance; ``Table.rows`` says which rows are left), or (``impute``) the row is
        kept with the cell missing: NaN in ``X``, "" in a text column, for ``slangcli.data.schema`` to fill in; a
        missing target is NaN or "" too, and the provenance counts such rows (``targets_missing``, and the first lines,
        ``target_missing_lines``): a fit leaves them out, a prediction makes one for them.
    layout : None or callable
        CSV only: data read against a stored run (``slangcli.data.columns``). ``layout(names, ncols, line)`` returns
        the target column (None: the file has none), the feature columns in the model's order and the positions
        among them of the columns read as text, from the header names (None without a header row), the number of
        columns and the first line's number, or raises ``DataError``; ``target`` then only helps detect the header,
        and ``targetless_width``, ``drop_columns``, ``columns``, ``categorical`` and ``detect_categories`` are not
        used.
    categorical : None, str or sequence
        CSV only: feature columns (names or 0-based indices, as ``drop_columns``) read as text, every cell a
        category (``Table.text``).
    detect_categories : bool
        CSV only: a feature column none of whose cells is a number is read as text too; one that holds numbers and
        text is refused, naming a cell of each. False (the default): every feature cell must be a number.
    optional_target : bool
        CSV only: a missing target is no missing value, whatever ``missing`` says: its row is kept, the target NaN
        or "" and counted as under ``impute`` (data to predict on, which need not hold their targets).

    Returns
    -------
    Table

    Raises
    ------
    DataError
        For every malformed, unreadable or inconsistent input, with a one-line message.
    """
    name = os.fspath(path)
    fmt = _checked_options(name, format, missing, n_features)
    source = Input(name)
    try:
        if fmt == "idx" or (fmt == "auto" and _looks_like_idx(source.head)):
            _reject_text_options(name, "IDX", target, delimiter, header, drop_columns, columns, categorical)
            return _idx_table(name, source, n_features, labels_optional=optional_target)
        try:
            fmt, X, y, feature_names, header_used, delimiter_used, target_used, info = _parse_text(
                name, source, fmt, target, delimiter, header, n_features, targetless_width, drop_columns, columns,
                na_values, missing, layout=layout, categorical=categorical, detect=detect_categories,
                optional_target=optional_target)
        except _TextTargets:  # read again, the targets as text (labels) from the first row
            source.restart()
            fmt, X, y, feature_names, header_used, delimiter_used, target_used, info = _parse_text(
                name, source, fmt, target, delimiter, header, n_features, targetless_width, drop_columns, columns,
                na_values, missing, text_targets=True, layout=layout, categorical=categorical,
                detect=detect_categories, optional_target=optional_target)
        digest = source.sha256()
    finally:
        source.close()

    provenance = _text_provenance(name, digest, fmt, X, header_used, delimiter_used, target_used,
                                  source.compressed, info)
    if source.stream and name != STDIN:  # (read once, as standard input is: nothing can read it again)
        provenance["stream"] = True
    return Table(X=X, y=y, feature_names=feature_names, provenance=provenance, rows=info.get("rows"),
                 text=info.get("text"), lines=info.get("lines"), columns=info.get("feature_columns"),
                 target_column=info.get("target_column"))


def _checked_options(name, format, missing, n_features):
    """The format asked for, lower-cased, once the options that do not depend on the file's bytes are valid: a UCI
    folder (given as a format or recognised from the path) is refused with a pointer to the split option."""
    if missing not in MISSING_POLICIES:
        raise DataError(f"{name}: missing must be one of {', '.join(MISSING_POLICIES)}, got {missing!r}")
    fmt = format.lower() if isinstance(format, str) else format
    if fmt not in ("auto", "csv", "libsvm", "idx", "uci"):
        raise DataError(f"{name}: unknown format {format!r} (expected auto, csv, libsvm or idx)")
    if fmt == "uci":
        raise DataError(f"{name}: the uci format is read with a split: {_UCI_SPLIT_HINT}")
    if _uci_root(name) is not None:
        raise DataError(f"{name}: is a Gal-layout UCI folder: {_UCI_SPLIT_HINT}")
    if n_features is not None and (
        isinstance(n_features, bool) or not isinstance(n_features, (int, np.integer)) or n_features < 1
    ):
        raise DataError(f"{name}: n_features must be a positive integer, got {n_features!r}")
    return fmt


def _idx_table(name, source, n_features, labels_optional=False):
    """An IDX images file (its labels file beside it, unless ``labels_optional``) read whole; its provenance is
    ``_read_idx``'s."""
    table = _read_idx(name, source.read_all(), None, labels_optional)
    if source.stream and name != STDIN:  # (a pipe read once, as the text readers record it)
        table.provenance["stream"] = True
    if n_features is not None and table.X.shape[1] != n_features:
        raise DataError(f"{name}: {table.X.shape[1]} feature columns, but n_features is {n_features}")
    return table


def _text_provenance(name, digest, fmt, X, header_used, delimiter_used, target_used, compressed, info):
    """The provenance of a CSV or LIBSVM table: where it came from and how it was read, and (only when they
    happened) the columns and rows left out and the rows whose target is missing."""
    provenance = {
        "path": name if name == STDIN else os.path.abspath(name),
        "sha256": digest,
        "format": fmt,
        "rows": int(X.shape[0]),
        "features": int(X.shape[1]),
        "header": header_used,
        "delimiter": delimiter_used,
        "target": target_used,
        "compressed": compressed,
    }
    if info.get("columns_dropped"):
        provenance["columns_dropped"] = info["columns_dropped"]
    if info.get("rows_dropped"):
        provenance["rows_dropped"] = info["rows_dropped"]
        provenance["dropped_lines"] = info["dropped_lines"]
    if info.get("targets_missing"):
        provenance["targets_missing"] = info["targets_missing"]
        provenance["target_missing_lines"] = info["target_missing_lines"]
    return provenance


def _parse_text(name, source, fmt, target, delimiter, header, n_features, targetless_width, drop_columns, columns,
                na_values, missing, text_targets=False, layout=None, categorical=None, detect=False,
                optional_target=False):
    """Parse the text of ``source``, a block of lines at a time: ``(format, X, y, feature_names, header, delimiter,
    target, info)`` (the last four None and {} for LIBSVM)."""
    comments = []  # (a CSV file's comment lines among its rows: checked to be none of them)
    batches = (batch for batch in text_batches(source.blocks(), name, comments) if batch[1])
    first = next(batches, None)
    if first is None:
        raise DataError(f"{name}: file is empty")
    batches = itertools.chain([first], batches)
    if fmt == "auto":
        fmt = "libsvm" if _looks_like_libsvm(first[1][0]) else "csv"
    if fmt == "libsvm":
        _reject_text_options(name, "LIBSVM", target, delimiter, header, drop_columns, columns, categorical)
        X, y = _parse_libsvm(name, batches, n_features)
        return fmt, X, y, tuple(f"f{j + 1}" for j in range(X.shape[1])), None, None, None, {}
    X, y, feature_names, header_used, delimiter_used, target_used, info = _parse_csv(
        name, batches, target, delimiter, header, targetless_width, drop_columns=drop_columns, columns=columns,
        na_values=na_values, missing=missing, text_targets=text_targets, layout=layout, categorical=categorical,
        detect_categories=detect, optional_target=optional_target, comments=comments)
    if n_features is not None and X.shape[1] != n_features:
        raise DataError(f"{name}: {X.shape[1]} feature columns, but n_features is {n_features}")
    return fmt, X, y, feature_names, header_used, delimiter_used, target_used, info


def _reject_text_options(name, kind, target, delimiter, header, drop_columns=None, columns=None, categorical=None):
    for option, value in (("target", target), ("delimiter", delimiter), ("drop-columns", drop_columns),
                          ("columns", columns), ("categorical", categorical)):
        if value is not None:
            raise DataError(f"{name}: the {option} option applies to CSV input, and this file is {kind}")
    if header:
        raise DataError(f"{name}: {kind} files have no header row")
