"""CSV-like text and LIBSVM files, read into the dense ``Table``.

- **CSV-like text**: one example per line, cells separated by ``,``, tab, ``;`` or runs of whitespace
  (detected unless given), an optional header row (detected unless forced), one target column (the last
  unless chosen by name or index), every other column a feature that must parse as a finite number, unless it is
  read as text: a column the caller names (``categorical``), or one none of whose cells is a number
  (``detect_categories``). The text is kept only for such columns; a file of numbers takes the path it always
  took (``slangcli.data.schema`` makes categories of the text).
- **LIBSVM**: ``label idx:val idx:val ... [# comment]`` with 1-based, strictly increasing integer indices and
  zeros omitted (a first line of ``idx:val`` tokens alone is recognised as LIBSVM that lacks its label). The dense width is the caller's ``n_features`` or else the highest index present; because
  absent entries are zeros, a table can be widened to a larger width without changing its data (``widen``).

Either may be gzip-compressed; ``slangcli.data.readers.read_table`` decodes the bytes into lines (``_common``) and
hands them, a block at a time, to ``_parse_csv`` or ``_parse_libsvm``. Each parses a block of rows (about
``_CELLS`` cells, or the lines of one block of text) at a time into arrays, so that reading holds the table being
built and one block's text, not the whole file and every cell of it as a Python object (which took about 1.3 KB per
row of a two-column file, 13 GB for ten million rows); the table is put together from the blocks (:class:`Rows`)
once the last one is read. Cells are split once and converted with one NumPy call per block; the offending
cell is searched for only after that call fails, so that its message names the file, the line and, where it
applies, the column.

Malformed input is reported as it is found, block by block, so the first problem in the file is reported, except
where its kind ranks below another's: a missing value (whose message counts the rows that have one), a non-finite
feature and a bad target are reported once the whole file is read, in that order, unless a row of the wrong width
or a cell that is not a number comes first.
"""

from __future__ import annotations

import csv
import itertools
import operator
import re

import numpy as np

from slangcli.data.readers._common import (BOOLEAN_WORDS, DECIMAL_COMMA, Table, _is_number, _listing,
                                          _nonfinite_word, check_distinct_names, floats)
from slangcli.errors import DataError

# The caller's spelling -> the delimiter used. A single space means "runs of whitespace": space-aligned
# numeric files (the Gal-UCI data.txt files among them) pad columns with several spaces.
_DELIMITERS = {",": ",", "\t": "\t", ";": ";", " ": "whitespace", "whitespace": "whitespace"}
_SNIFF_LINES = 50
_INT_RE = re.compile(r"[+-]?[0-9]+")
# "#3": a 0-based column position, even when a header cell is named "3" (a header name wins over a bare number)
_POSITION_RE = re.compile(r"#[+-]?\d+")
_TWO_COLONS = re.compile(r":\S*:")
_INDEX_VALUE = re.compile(r"\d+:[^:]+")
_X_NAME = re.compile(r"x\d+")
# What a missing cell looks like unless --na-values says otherwise (compared after stripping blanks), and what
# to do about a row that has one: refuse the file, leave the row out, or keep it with the cell missing (impute: NaN,
# or "" in a text column, for the data schema to fill in; a missing target stays missing, for the caller to decide).
NA_VALUES = ("", "NA", "NaN", "?")
MISSING_POLICIES = ("error", "drop", "impute")
# the dropped rows' line numbers kept in the provenance (their count is always kept)
_LISTED_LINES = 20
# Indices above this cannot address a dense column anyway; it keeps int64 parsing from overflowing.
_MAX_INDEX = 2**62
# the target option of a CSV file read without a target column (no column is excluded from the header test)
_NO_TARGET = object()
# A LIBSVM file's width is its highest index, and its dense table can be far larger than the file: real sets
# are sparse (a1a about 14 times, rcv1 about 350, news20 about 1600). A width that would make the table (8 bytes
# a cell and about 64 bytes a column name) more than _DENSE_RATIO times the text and above _DENSE_FLOOR bytes is
# refused before allocating: Linux grants a huge np.zeros lazily, so MemoryError would come only once it is used.
_DENSE_RATIO = 4096
_DENSE_FLOOR = 1 << 26
# cells of a CSV file converted at once (the rows of a block: at least two); as Python objects about 1 MB
_CELLS = 1 << 14


class TargetNameWithoutHeader(DataError):
    """A target column named in a file without a header row: the file may be one whose columns go by position."""


class _TextTargets(Exception):
    """The target column holds a cell that is not a number after blocks whose targets all were: the file is read
    again with its targets as text (labels), as they would have been read whole."""


class Rows:
    """Rows added a block at a time, kept in segments that double in size up to ``SEGMENT`` bytes, then copied
    into one array, each segment freed as soon as it is copied.

    Small blocks, once freed, stay with the C library for reuse, so that copying them into one array held the
    table twice at the end; segments of ``SEGMENT`` bytes are handed back to the system when freed (the C library
    maps allocations of 32 MB and more on their own), so the table is held once and one segment more (and the
    segments are filled in place: no block is copied twice)."""

    FIRST = 1 << 12  # rows of the first segment
    SEGMENT = 64 << 20  # bytes of the largest segments

    def __init__(self):
        self.segments, self.n, self.filled = [], 0, 0  # filled: rows in the last segment

    def add(self, block: np.ndarray) -> None:
        at = 0
        while at < len(block):
            if not self.segments or self.filled == len(self.segments[-1]):
                row_bytes = block.dtype.itemsize * max(int(np.prod(block.shape[1:])), 1)
                # doubles the rows held, up to SEGMENT bytes (the first segment too: 4 096 rows of a million
                # columns would be 31 GB for a file of 20 rows)
                size = min(max(1, self.SEGMENT // row_bytes), max(self.FIRST, self.n))
                self.segments.append(np.empty((size, *block.shape[1:]), dtype=block.dtype))
                self.filled = 0
            last = self.segments[-1]
            take = min(len(block) - at, len(last) - self.filled)
            last[self.filled : self.filled + take] = block[at : at + take]
            self.filled += take
            self.n += take
            at += take

    def result(self, shape=(), dtype=np.float64) -> np.ndarray:
        """The rows added, in one array (rows of ``shape`` and ``dtype`` when there are none)."""
        if not self.segments:
            return np.empty((0, *shape), dtype=dtype)
        segments, self.segments = self.segments, []
        out = np.empty((self.n, *segments[0].shape[1:]), dtype=segments[0].dtype)
        segments.reverse()
        at = 0
        while segments:
            segment = segments.pop()
            take = min(len(segment), self.n - at)
            out[at : at + take] = segment[:take]
            at += take
            del segment
        return out


def _looks_like_libsvm(line):
    """Whether a first data line is LIBSVM: ``label idx:val ...`` (or a bare numeric label), or ``idx:val ...``
    alone, a LIBSVM line that lacks its label (read as LIBSVM, so that the error says so, not that a CSV row has
    too many cells)."""
    tokens = line.split("#", 1)[0].split()
    if not tokens:
        return False
    if ":" not in tokens[0] and _is_number(tokens[0]):
        return all(":" in token for token in tokens[1:])
    return all(_INDEX_VALUE.fullmatch(token) and _is_number(token.partition(":")[2]) for token in tokens)


# ---------------------------------------------------------------------------------------------------------
# CSV-like text


def _parse_csv(name, batches, target, delimiter, header, width_without_target=None, *, drop_columns=None,
               columns=None, na_values=NA_VALUES, missing="error", text_targets=False, layout=None, categorical=None,
               detect_categories=False, optional_target=False, comments=()):
    """Parse the lines of a CSV-like file: ``batches`` yields ``(linenos, texts)`` of its lines, a block at a time
    (``_common.text_batches``). ``width_without_target``: the file may lack its target column, and does when it has
    exactly this many. ``text_targets``: the targets are labels, kept as text (else numbers while every one is; one
    that is not after blocks of numbers raises ``_TextTargets``). ``layout``: a function ``(names, ncols, line) ->
    (target, features, text)`` that chooses the target column (None: there is none) and the feature columns, in the
    order wanted, from the header names (None without a header), the number of columns and the first line's
    number, and the positions among those features of the ones read as text; ``target`` then only helps detect a
    header row, and a first row that holds every one of ``layout.header_names`` (a fitted run's feature names) is
    one. ``categorical``: feature columns (names or indices, as ``drop_columns``) read as text, every cell
    a category; ``detect_categories``: so is a feature column none of whose cells is a number (one holding numbers
    and text is refused, naming both). ``optional_target``: a missing target is no missing value (its row is kept,
    as under ``impute``). ``comments``: the ``(line, text)`` of the ``#`` comment lines among the rows (those after
    the first line of content; ``text_batches``), filled in as ``batches`` is read: one that holds as many cells as
    the rows do is refused, since it may be a row (``#N/A,4,1``) that a comment would silently lose.

    Returns ``(X, y, feature_names, header, delimiter, target, info)``; ``info`` holds ``feature_columns`` (the
    0-based file column of each feature), ``columns_dropped`` (names of the columns left out by
    ``drop_columns``/``columns``, or not chosen by ``layout``), ``rows_dropped`` and ``dropped_lines`` (the first
    lines dropped for a missing value, ``missing="drop"``), ``rows`` (the 0-based data row of each row kept,
    when some were dropped), and those of :meth:`_CsvTable.result`: the cells of the text columns and the lines of
    the rows, the rows whose target is missing (``missing="impute"``).
    """
    if missing not in MISSING_POLICIES:
        raise DataError(f"{name}: missing must be one of {', '.join(MISSING_POLICIES)}, got {missing!r}")
    na = frozenset(NA_VALUES if na_values is None else (str(v).strip() for v in na_values))
    delim, groups = _sniffed_rows(name, batches, delimiter)
    rows, row_lines = next(groups)  # at least two rows, unless the file holds only one
    ncols = len(rows[0])
    header, names, t, keep, text = _csv_columns(name, rows, row_lines, delim, target, header, width_without_target,
                                                drop_columns, columns, layout, categorical, na)
    if header:
        if layout is None:  # (a stored run's layout matches names itself, and refuses one given twice)
            check_distinct_names([names[c] for c in keep], f"{name}:{row_lines[0]}")
        rows, row_lines = rows[1:], row_lines[1:]

    table = _CsvTable(name, ncols, t, keep, names, na, missing, text_targets, text,
                      detect_categories and layout is None, optional_target)
    for data, data_lines in itertools.chain([(rows, row_lines)], groups):
        table.add(data, data_lines)
    _check_comments(name, comments, delim, ncols)
    X, y, info = table.result()
    feature_names = tuple(names[c] for c in keep) if names is not None else tuple(f"x{c}" for c in keep)
    # without a target column every column is a feature: ncols puts none of them on the target's side
    info.update(feature_columns=keep, columns_dropped=_dropped_names(ncols, ncols if t is None else t, names, keep),
                target_column=t)
    if t is None:
        return X, None, feature_names, header, delim, None, info
    target_used = names[t] if names is not None else t
    return X, y, feature_names, header, delim, target_used, info


def _nan_hint(value) -> str:
    """What a message about a NaN cell adds: it was no missing-value token."""
    return " (not a missing-value token: --na-values names those)" if np.isnan(value) else ""


def _comma_hint(cell: str) -> str:
    """What a message about a cell that is no number adds when it is a number with a decimal comma (``1,5``)."""
    if not DECIMAL_COMMA.fullmatch(cell):
        return ""
    if "e" in cell.lower():  # (-2,59e-05: a decimal comma; no thousands separator has an exponent)
        return f": a decimal comma, which slang does not read (write {cell.replace(',', '.')!r})"
    return f": a decimal comma or a thousands separator, which slang does not read (write {cell.replace(',', '.')!r} " \
           f"or {cell.replace(',', '')!r})"


def _boolean_hint(cell: str) -> str:
    """What a message about a cell that is no number adds, in a column a fitted run reads as numbers, when it is a
    boolean word: a DataFrame's boolean column reaches the scikit-learn estimators as 0 and 1 (scikit-learn's
    convention), so their run reads the column as numbers, and the same frame written to CSV holds True/False."""
    if cell.lower() not in BOOLEAN_WORDS:
        return ""
    return " (the run reads this column as numbers: write its booleans as 1 and 0)"


def _check_comments(name, comments, delim, ncols) -> None:
    """Refuse a ``#`` line among a CSV file's rows that reads as one: its ``#`` starts a word (the lines
    ``text_batches`` keeps aside), it holds as many cells as the rows do, and a cell after the first is a number (Excel's ``#N/A,4,1``, a category ``#1,0.5,1``), which
    reading it as a comment would lose without a word. A note (``# a note``, ``#trial 2 begins``), a commented
    header (``#x,y,label``) or a line of units stays a comment, and so does every ``#`` line of a file separated by
    whitespace, whose cells cannot be quoted."""
    if delim == "whitespace":
        return
    for line, text in comments:
        try:
            cells = next(csv.reader([text], delimiter=delim, skipinitialspace=True), [])
        except csv.Error:  # (a carriage return or an overlong cell: no row slang would read either)
            continue
        if len(cells) == ncols and ncols > 1 and any(_is_number(cell.strip()) for cell in cells[1:]):
            shown = text if len(text) <= 40 else text[:37] + "..."
            raise DataError(f"{name}:{line}: {shown!r} starts with '#', which marks a comment line, but reads as a "
                            f"row ({ncols} cells, as the rows hold): quote its first cell to read it as a row, or "
                            "delete the line")


def _sniffed_rows(name, batches, delimiter):
    """``(delimiter, groups)``: the delimiter, given or sniffed from the first lines, and the file's rows split at it
    (``_row_groups``), the lines read to sniff it included."""
    batches = iter(batches)
    head_linenos, head_texts = [], []
    for linenos, texts in batches:
        head_linenos += linenos
        head_texts += texts
        if len(head_texts) >= _SNIFF_LINES:
            break
    if not head_texts:
        raise DataError(f"{name}: file is empty")
    delim = _choose_delimiter(name, head_texts, delimiter)
    return delim, _row_groups(name, itertools.chain([(head_linenos, head_texts)], batches), delim)


def _csv_columns(name, rows, row_lines, delim, target, header, width_without_target, drop_columns, columns, layout,
                 categorical, na):
    """What the columns of a CSV file hold, from its first rows ``rows`` (which start on ``row_lines``):
    ``(header, names, t, keep, text)``: whether the first row is a header, its names (None without one), the
    target's column (None: the file has none), the feature columns in the order read, and the positions among
    them of the columns read as text. The options are ``_parse_csv``'s."""
    ncols = len(rows[0])
    selected = drop_columns is not None or columns is not None
    if layout is not None:
        if header is None:
            header = _holds_names(rows[0], getattr(layout, "header_names", None)) or _detect_header(rows, target,
                                                                                                      ncols, na)
        names = [cell.strip() for cell in rows[0]] if header else None
        t, keep, text = layout(names, ncols, row_lines[0])
        has_target = t is not None
    elif width_without_target is None:
        has_target = True
    elif selected:
        has_target = not _fits_without_target(name, rows, ncols, header, width_without_target, drop_columns, columns,
                                              na)
    else:
        has_target = ncols != width_without_target
    if width_without_target is not None and not selected and ncols not in (width_without_target,
                                                                           width_without_target + 1):
        p = width_without_target
        raise DataError(
            f"{name}:{row_lines[0]}: {ncols} columns, expected {p} (features only) or {p + 1} (features and the "
            "target)"
        )
    if has_target and ncols < 2 and layout is None:
        shown = "runs of whitespace" if delim == "whitespace" else repr(delim)
        raise DataError(
            f"{name}:{row_lines[0]}: one column found (delimiter {shown}): "
            "need at least one feature column and a target column"
        )
    if layout is None and not selected and ncols >= 2 and delim != "whitespace" and all(
            len(row) == ncols and not row[-1].strip() for row in rows):
        # a delimiter at the end of every line makes an empty last column: the missing-value message that would
        # follow (and its --missing drop, which drops every row) helps nobody
        what = "the target by default" if has_target and target is None else "a feature"
        fix = ("choose the target with --target" if what != "a feature"
               else f"leave it out with --drop-columns {ncols - 1}")
        raise DataError(f"{name}:{row_lines[0]}: every line ends with the delimiter {delim!r}, which makes the last "
                        f"column, {what}, empty; remove the trailing delimiters "
                        f"(sed 's/{re.escape(delim) if delim != chr(9) else chr(92) + 't'}$//') or {fix}")
    if header is None:
        header = _detect_header(rows, target if has_target else _NO_TARGET, ncols, na)
    header = bool(header)
    names = [cell.strip() for cell in rows[0]] if header else None
    if header and len(rows) == 1:  # (a block holds two rows whenever the file has them)
        raise DataError(f"{name}: no data rows (only a header)")
    # without a target column every column is a feature: t = ncols puts none of them on the target's side
    if layout is None:
        t = _resolve_target(name, target, names, ncols) if has_target else ncols
        keep = _feature_columns(name, ncols, t, names, drop_columns, columns)
        text = _categorical_columns(name, categorical, names, ncols, t, keep)
    p = len(keep)
    if layout is None and width_without_target is not None and has_target and p != width_without_target:
        raise DataError(f"{name}:{row_lines[0]}: {p} feature columns besides the target (of {ncols}, "
                        f"--drop-columns/--columns applied), but the model takes {width_without_target}")
    return header, names, (t if has_target else None), keep, text


class _CsvTable:
    """The rows of a CSV file converted and checked a block at a time (:meth:`add`), and the table they make
    (:meth:`result`). ``t`` is the target's file column (None: the file has none), ``keep`` the feature
    columns. ``text`` holds the positions in ``keep`` of the columns read as text (categories: every cell is one,
    numbers too); with ``detect``, a column whose cells are not numbers becomes a text column as it is met, and such
    a column may then hold no number."""

    def __init__(self, name, ncols, t, keep, names, na, missing, text_targets, text=(), detect=False,
                 optional_target=False):
        self.name, self.ncols, self.t, self.keep, self.names, self.na = name, ncols, t, keep, names, na
        self.missing, self.text_targets, self.optional_target = missing, text_targets, optional_target
        self.X, self.y = Rows(), Rows()  # the rows kept (self.y: a list of blocks when the targets are text)
        self.rows_read = self.rows_missing = 0
        self.dropped_lines = []
        self.kept = []  # (first data row, rows, rows kept) of each block that lost a row
        # problems reported once the whole file is read (their message counts rows, or their kind ranks below
        # one that a later block may hold): (where, what, in a feature) of the first missing value, then messages
        self.first_missing = None
        self.non_finite = None
        self.bad_target = None
        self.numeric_blocks = 0  # blocks whose targets were read as numbers
        self.declared, self.detect = frozenset(text), detect
        self.text = {k: [] for k in sorted(self.declared)}  # position in keep -> the blocks of its cells
        # the line of each row kept, once a feature column is text (the schema names the line of a level it does not
        # know)
        self.lines = Rows() if self.text else None
        # with detect: a number and a text cell met in each column (line, cell), for the message about a column of
        # both
        self.a_number, self.a_text = {}, {}
        # the rows with a missing target, which --missing impute keeps (their target NaN or ""): the caller decides
        self.targets_missing, self.target_missing_lines = 0, []

    def where(self, line, col):
        label = f" ({self.names[col]!r})" if self.names is not None else ""
        return f"{self.name}:{line}: column {col}{label}"

    def add(self, data, data_lines):
        """Convert and check one block of rows (lists of cells) that start on the lines ``data_lines``."""
        ncols, t, na = self.ncols, self.t, self.na
        for i, row in enumerate(data):
            if len(row) != ncols:
                raise DataError(f"{self.name}:{data_lines[i]}: expected {ncols} cells, found {len(row)}")
        n = len(data)
        if n == 0:
            return
        first_row = self.rows_read
        self.rows_read += n
        X, cell_missing, texts = self._features(data, data_lines)
        target_cells = [row[t].strip() for row in data] if t is not None else None
        target_missing = None
        if t is not None:
            target_missing = np.fromiter((cell in na for cell in target_cells), dtype=bool, count=n)
            if not target_missing.any():
                target_missing = None

        row_missing = self._rows_missing(data_lines, cell_missing, target_missing)
        if row_missing.any():
            dropped = np.flatnonzero(row_missing)
            self.rows_missing += len(dropped)
            if self.missing == "error":
                if self.first_missing is None:
                    self.first_missing = self._missing_cell(data, data_lines, int(dropped[0]), cell_missing,
                                                            target_missing)
                return  # the file is refused once it is read: its rows need not be kept
            self.dropped_lines += [data_lines[i] for i in dropped[: _LISTED_LINES - len(self.dropped_lines)]]
            kept = ~row_missing
            self.kept.append((first_row, n, np.flatnonzero(kept)))
            X = X[kept]
            texts = {k: values[kept] for k, values in texts.items()}
            if target_cells is not None:
                target_cells = [cell for cell, k in zip(target_cells, kept) if k]
            data_lines = [line for line, k in zip(data_lines, kept) if k]
            cell_missing = None  # (the rows left hold none; an optional target may still be missing)
            target_missing = target_missing[kept] if self.optional_target and target_missing is not None else None
        if self.first_missing is not None or self.non_finite is not None or not len(X):
            return
        self.non_finite = self._non_finite(X, cell_missing, data_lines)
        if self.non_finite is None:
            self._keep(X, texts, target_cells, data_lines, target_missing)

    def _rows_missing(self, data_lines, cell_missing, target_missing):
        """The rows of a block that --missing error or drop leaves out: those with a missing feature or target.
        --missing impute leaves out none, and counts the rows whose target is missing (as does an optional
        target)."""
        row_missing = np.zeros(len(data_lines), dtype=bool)
        if self.missing == "impute" or self.optional_target:
            # a missing feature cell stays missing (NaN, or "" in a text column) for the schema to fill in; a row
            # whose target is missing is kept, its target NaN or "": a fit leaves it out, a prediction makes one
            if target_missing is not None:
                lines = [data_lines[i] for i in np.flatnonzero(target_missing)]
                self.targets_missing += len(lines)
                self.target_missing_lines += lines[: _LISTED_LINES - len(self.target_missing_lines)]
        if self.missing != "impute":
            if cell_missing is not None:
                row_missing |= cell_missing.any(axis=1)
            if target_missing is not None and not self.optional_target:
                row_missing |= target_missing
        return row_missing

    def _missing_cell(self, data, data_lines, i, cell_missing, target_missing):
        """``(where, what, in a feature)`` of the first missing cell of row ``i`` (a feature's or the target's),
        for the message :meth:`result` gives under --missing error."""
        keep, t = self.keep, self.t
        file_cols = [keep[j] for j in np.flatnonzero(cell_missing[i])] if cell_missing is not None else []
        if target_missing is not None and target_missing[i] and not self.optional_target:
            file_cols.append(t)
        col = min(file_cols)
        token = data[i][col].strip()
        what = f"missing value {token!r}" if token else "empty cell, a missing value"
        return self.where(data_lines[i], col), what, col != t

    def _non_finite(self, X, cell_missing, data_lines):
        """The message naming the first feature cell of a block that is infinite or NaN without being a
        missing-value token, or None."""
        bad = ~np.isfinite(X)
        if bad.any() and cell_missing is not None:
            bad &= ~cell_missing
        if bad.any() and self.text:
            bad[:, list(self.text)] = False  # (a text column is NaN throughout)
        if not bad.any():
            return None
        i, j = (int(k) for k in np.argwhere(bad)[0])
        return f"{self.where(data_lines[i], self.keep[j])}: value is {_nonfinite_word(X[i, j])}{_nan_hint(X[i, j])}"

    def _keep(self, X, texts, target_cells, data_lines, target_missing):
        """Add the checked rows of a block to the table: features, text cells, lines and targets."""
        if self.lines is not None:
            self.lines.add(np.array(data_lines, dtype=np.int64))
        for k, values in texts.items():
            self.text[k].append(values)
        self.X.add(X)
        if self.t is not None:
            y = self._targets(target_cells, data_lines, target_missing)
            if not self.text_targets:
                self.y.add(y)
            elif isinstance(self.y, list):
                self.y.append(y)
            else:  # text from the first block kept: blocks of strings of their own widths, joined at the end
                self.y = [y]

    def _features(self, data, data_lines):
        """The feature cells of a block: ``(X, missing, texts)``: ``X : (n, p)`` float64, NaN in a missing cell and
        throughout a text column; ``missing`` the missing cells (None: there are none); ``texts`` the cells of each
        text column (stripped, "" where missing). With ``detect``, a column whose cells are not numbers becomes a
        text column here, unless it held a number before."""
        n, p, keep = len(data), len(self.keep), self.keep
        while True:
            numeric = [k for k in range(p) if k not in self.text]
            X, cell_missing, bad = self._numbers(data, data_lines, [keep[k] for k in numeric])
            if not bad:
                break
            for j in bad:  # (detect only) the columns that hold a cell that is not a number
                k = numeric[j]
                self.a_text[k] = next((line, row[keep[k]].strip()) for row, line in zip(data, data_lines)
                                      if not _is_number(row[keep[k]]) and row[keep[k]].strip() not in self.na)
                if k in self.a_number:
                    self._mixed(k)
                self._become_text(k)
        if self.detect:  # a number of each numeric column, for a later message
            for j, k in enumerate(numeric):
                if k not in self.a_number:
                    present = range(n) if cell_missing is None else np.flatnonzero(~cell_missing[:, j])
                    if len(present):
                        i = int(present[0])
                        self.a_number[k] = (data_lines[i], data[i][keep[k]].strip())
        if not self.text:
            return X, cell_missing, {}
        full = np.full((n, p), np.nan)
        full[:, numeric] = X
        missing = np.zeros((n, p), dtype=bool)
        if cell_missing is not None:
            missing[:, numeric] = cell_missing
        texts = {k: self._text_cells(data, data_lines, k, missing) for k in self.text}
        return full, (missing if missing.any() else None), texts

    def _numbers(self, data, data_lines, columns):
        """``(X, missing, bad)``: the cells of the file ``columns`` as numbers and the missing cells (None: none);
        with ``detect``, ``bad`` lists the positions in ``columns`` of those holding a cell that is not a number (X
        is then None), which without ``detect`` is a ``DataError`` naming the cell."""
        n, p, ncols, na = len(data), len(columns), self.ncols, self.na
        if p == 0:
            return np.empty((n, 0)), None, []
        if columns == list(range(ncols - 1)):
            cells = [cell for row in data for cell in row[:-1]]
        elif columns == list(range(ncols)):
            cells = [cell for row in data for cell in row]
        elif p == 1:
            cells = [row[columns[0]] for row in data]
        else:
            take = operator.itemgetter(*columns)
            cells = [cell for row in data for cell in take(row)]
        # The fast path converts every cell in one call; missing-value tokens are looked for only when it fails
        # or yields a non-finite number ("NaN" is both a number and a token).
        try:
            X = floats(cells).reshape(n, p)
        except ValueError:
            X = None
        cell_missing = None
        if X is None or not np.isfinite(X).all():
            stripped = [cell.strip() for cell in cells]
            cell_missing = np.fromiter((cell in na for cell in stripped), dtype=bool, count=n * p).reshape(n, p)
            try:
                X = floats(["nan" if m else c for c, m in zip(stripped, cell_missing.ravel())]).reshape(n, p)
            except ValueError:
                bad = []
                for i in range(n):
                    for j in range(p):
                        cell = stripped[i * p + j]
                        if cell_missing[i, j] or j in bad or _is_number(cell):
                            continue
                        where = self.where(data_lines[i], columns[j])
                        if not cell:
                            raise DataError(f"{where}: empty cell (not among --na-values)") from None
                        if not self.detect:
                            raise DataError(f"{where}: cannot parse {cell!r} as a number{_comma_hint(cell)}"
                                            f"{_boolean_hint(cell)}") from None
                        bad.append(j)
                if bad:
                    return None, None, bad
                raise DataError(f"{self.name}: cannot parse the feature cells as numbers") from None
        return X, cell_missing, []

    def _text_cells(self, data, data_lines, k, missing):
        """The stripped cells of the text column at position ``k`` of ``keep`` ("" for a missing one, marked in
        ``missing``). An empty cell that is not a missing-value token is an error, and so is a number in a column
        found to be text (``detect``; a column the caller declared text may hold numbers: they are categories)."""
        col, na = self.keep[k], self.na
        cells = [row[col].strip() for row in data]
        gaps = np.fromiter((cell in na for cell in cells), dtype=bool, count=len(cells))
        if gaps.any():
            missing[:, k] = gaps
            cells = ["" if gap else cell for cell, gap in zip(cells, gaps)]
        if "" in cells:  # (the search runs in C; the loop only when there is something to find)
            for i, (cell, gap) in enumerate(zip(cells, gaps)):
                if not cell and not gap:
                    raise DataError(f"{self.where(data_lines[i], col)}: empty cell (not among --na-values)")
        if k not in self.declared and k not in self.a_text:
            i = next((i for i, cell in enumerate(cells) if cell), None)
            if i is not None:
                self.a_text[k] = (data_lines[i], cells[i])
        if k not in self.declared:
            # (the distinct cells of a column of categories are few: each is tested once)
            numbers = {cell for cell in set(cells) if cell and _is_number(cell)}
            if numbers:
                i = next(i for i, cell in enumerate(cells) if cell in numbers)
                self.a_number[k] = (data_lines[i], cells[i])
                self._mixed(k)
        return np.array(cells, dtype=str)

    def _become_text(self, k):
        """The column at position ``k`` of ``keep`` is text from this block on. The rows kept before hold no value
        in it (a number there would make it a column of both): their cells are missing."""
        self.text[k] = [np.full(self.X.n, "")] if self.X.n else []
        if self.lines is None:
            self.lines = Rows()
            if self.X.n:
                self.lines.add(np.zeros(self.X.n, dtype=np.int64))  # (lines never named: no text is there)

    def _mixed(self, k):
        """Refuse the column at position ``k`` of ``keep``: it holds numbers and text (``a_number``, ``a_text``)."""
        col = self.keep[k]
        (text_line, text), (number_line, number) = self.a_text[k], self.a_number[k]
        key = self.names[col] if self.names is not None else col
        # (no comma in it: a sweep's table quotes it, and tables are read by eye)
        raise DataError(f"{self.where(text_line, col)}: cannot parse {text!r} as a number{_comma_hint(text)} (the "
                        "column's other cells "
                        f"are numbers: {number!r} on line {number_line}; a missing-value token goes in --na-values; "
                        f"--categorical {key} reads every cell of the column as a category)")

    def _targets(self, cells, lines, missing=None) -> np.ndarray:
        """The target cells of a block: numbers while every cell of the file so far is one, else text. A missing
        target (``missing``, --missing impute) is NaN, or "" among text."""
        numbers = cells
        if missing is not None:
            numbers = ["nan" if gap else cell for cell, gap in zip(cells, missing)]
            cells = ["" if gap else cell for cell, gap in zip(cells, missing)]
        if not self.text_targets:
            try:
                y = floats(numbers)
            except ValueError:
                if self.numeric_blocks:
                    raise _TextTargets() from None
                self.text_targets = True
            else:
                self.numeric_blocks += 1
                bad = np.flatnonzero(~np.isfinite(y) if missing is None else ~np.isfinite(y) & ~missing)
                if bad.size and self.bad_target is None:
                    self.bad_target = (f"{self.where(lines[bad[0]], self.t)}: value is {_nonfinite_word(y[bad[0]])}"
                                       f"{_nan_hint(y[bad[0]])}")
                return y
        y = np.array(cells, dtype=str)
        empty = np.flatnonzero(y == "" if missing is None else (y == "") & ~missing)
        if empty.size and self.bad_target is None:
            self.bad_target = f"{self.where(lines[int(empty[0])], self.t)}: empty target cell (missing label)"
        return y

    def result(self):
        """``(X, y, info)`` once every block is added; the problems found on the way are raised here. ``info``
        holds ``text`` (the cells of each text column, by position in ``keep``) and ``lines`` (the line of each
        row) when a column is text, and ``targets_missing``, ``target_missing_lines`` when --missing impute kept
        rows without a target."""
        if self.first_missing is not None:
            where, what, in_feature = self.first_missing
            others = (f"{self.rows_missing} rows have a missing value" if self.rows_missing > 1
                      else "the only row with a missing value")
            fill = ", --missing impute fills such cells in" if in_feature else ""
            raise DataError(f"{where}: {what} ({others}; --missing drop leaves such rows out{fill})")
        if self.rows_read and self.rows_missing == self.rows_read:
            raise DataError(f"{self.name}: every data row has a missing value: nothing is left to read")
        if self.non_finite is not None:
            raise DataError(self.non_finite)
        if self.bad_target is not None:
            raise DataError(self.bad_target)
        info = {"rows_dropped": int(self.rows_missing), "dropped_lines": self.dropped_lines}
        if self.kept:  # the 0-based data row of each row kept, for a caller that puts results back in place
            rows, done = [], 0
            for first_row, n, kept in self.kept:
                rows += [np.arange(done, first_row), first_row + kept]
                done = first_row + n
            rows.append(np.arange(done, self.rows_read))
            info["rows"] = np.concatenate(rows)
        if self.text:
            info["text"] = {k: np.concatenate(blocks) if blocks else np.zeros(0, dtype=str)
                            for k, blocks in sorted(self.text.items())}
            info["lines"] = self.lines.result(dtype=np.int64)
        if self.targets_missing:
            info.update(targets_missing=self.targets_missing, target_missing_lines=self.target_missing_lines)
        X = self.X.result((len(self.keep),))
        if self.t is None:
            return X, None, info
        y = self.y.result() if isinstance(self.y, Rows) else np.concatenate(self.y)
        return X, y, info


def _fits_without_target(name, rows, ncols, header, width, drop_columns, columns, na):
    """Whether a file read with a column selection has exactly ``width`` feature columns and no target."""
    if header is None:
        header = _detect_header(rows, _NO_TARGET, ncols, na)
    names = [cell.strip() for cell in rows[0]] if header else None
    try:
        return len(_feature_columns(name, ncols, ncols, names, drop_columns, columns)) == width
    except DataError:
        return False


def column_list(name, option, value):
    """``--drop-columns``/``--columns`` as a list of names or indices: a comma-separated str, or a sequence."""
    if isinstance(value, str):
        items = [item.strip() for item in value.split(",")]
    else:
        items = [item.strip() if isinstance(item, str) else item for item in value]
    if not items or any(item == "" for item in items):
        raise DataError(f"{name}: {option} takes column names or 0-based indices separated by commas, got {value!r}")
    return items


def resolve_column(name, option, key, names, ncols):
    """The 0-based file column of ``key`` (a header name, else an index; negative counts from the end)."""
    if isinstance(key, str) and names is not None and key in names:
        hits = [j for j, n in enumerate(names) if n == key]
        if len(hits) > 1:
            raise DataError(f"{name}: {option} {key!r} is ambiguous (columns {', '.join(map(str, hits))} share "
                            "that name)")
        return hits[0]
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        index = int(key)
    elif isinstance(key, str) and _INT_RE.fullmatch(key):
        index = int(key)
    elif isinstance(key, str) and names is None and _X_NAME.fullmatch(key):
        index = int(key[1:])  # the name slang gives column k of a file without a header
    elif names is None:
        raise DataError(f"{name}: {option} {key!r}: the file has no header row, so columns are named by 0-based "
                        "index")
    else:
        raise DataError(f"{name}: {option} {key!r} names no column (columns: {_listing(names, 20)})")
    if not -ncols <= index < ncols:
        raise DataError(f"{name}: {option} {index}: out of range ({ncols} columns, 0 to {ncols - 1})")
    return index % ncols


def _feature_columns(name, ncols, t, names, drop_columns, columns):
    """The 0-based file columns read as features, in file order: all but the target, less ``drop_columns``, or
    only ``columns`` (the target among them is ignored: it is read as the target)."""
    candidates = [c for c in range(ncols) if c != t]
    if drop_columns is not None and columns is not None:
        raise DataError(f"{name}: give either --drop-columns or --columns, not both")
    if columns is not None:
        keys = column_list(name, "--columns", columns)
        chosen = {resolve_column(name, "--columns", key, names, ncols) for key in keys}
        keep = [c for c in candidates if c in chosen]
    elif drop_columns is not None:
        dropped = set()
        for key in column_list(name, "--drop-columns", drop_columns):
            c = resolve_column(name, "--drop-columns", key, names, ncols)
            if c == t:
                raise DataError(f"{name}: --drop-columns {key}: column {c} is the target (choose another with "
                                "--target)")
            dropped.add(c)
        keep = [c for c in candidates if c not in dropped]
    else:
        return candidates
    if not keep:
        option = "--columns" if columns is not None else "--drop-columns"
        raise DataError(f"{name}: no feature column left after {option}")
    return keep


def _categorical_columns(name, categorical, names, ncols, t, keep) -> list:
    """The positions in ``keep`` of the ``--categorical`` columns (names or 0-based indices, as ``--drop-columns``);
    the target (whose labels are classes anyway) and a column that is not a feature are refused."""
    if categorical is None:
        return []
    position = {c: k for k, c in enumerate(keep)}
    chosen = []
    for key in column_list(name, "--categorical", categorical):
        c = resolve_column(name, "--categorical", key, names, ncols)
        if c == t:
            raise DataError(f"{name}: --categorical {key}: column {c} is the target, whose values are classes of a "
                            "classification already (--likelihood decides)")
        if c not in position:
            raise DataError(f"{name}: --categorical {key}: column {c} is not a feature (--drop-columns or --columns "
                            "left it out)")
        chosen.append(position[c])
    return sorted(set(chosen))


def _dropped_names(ncols, t, names, keep):
    kept = set(keep)
    return [names[c] if names is not None else c for c in range(ncols) if c != t and c not in kept]


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
        chosen = max(consistent, key=lambda pair: pair[0])[1]
        return "whitespace" if chosen == "\t" and _spaces_separate_numbers(sample) else chosen
    if present:
        # No candidate splits the sample evenly: take the one on the first line, so that the
        # first ragged line is reported ("expected 5 cells, found 4") rather than a misleading parse.
        return present[0]
    return "whitespace"


def _spaces_separate_numbers(sample) -> bool:
    """Whether tab-separated ``sample`` lines are really separated by whitespace of both kinds: spaces split every
    line into one same number of cells, more than its tabs do, and each cell that holds a space holds numbers
    alone (``0.31 1.2<TAB>yes``; the first line may be a header of names). A tab-separated cell of text with spaces
    in it (``New York``, ``10 cm``) keeps its tabs, as does a file whose spaces split lines unevenly."""
    try:
        widths = {len(text.split()) for text in sample}
    except AttributeError:
        return False
    if len(widths) != 1 or widths.pop() <= len(sample[0].split("\t")):
        return False
    for text in sample[1:] or sample:
        for cell in text.split("\t"):
            parts = cell.split()
            if len(parts) > 1 and not all(_is_number(part) for part in parts):
                return False
    return True


def _row_groups(name, batches, delim):
    """The rows of cells of the lines in ``batches`` and the real line number each row starts on, in groups of
    about ``_CELLS`` cells (at least two rows; the width of the first row sets the number of rows)."""
    group = None
    rows, row_lines = [], []
    whitespace = delim == "whitespace"
    sep = None if whitespace else delim  # (str.split(None) splits at runs of whitespace)
    # Lines without a quote, a carriage return or a space that the reader would skip split at the delimiter
    # exactly as the reader splits them: such blocks are split in C, a row a line, until the first block that
    # is not, from which on every line goes to the reader. Whitespace-separated lines are all split in C.
    batches = iter(batches)
    limit = csv.field_size_limit()
    for linenos, texts in batches:
        if not whitespace:
            joined = "\n" + "\n".join(texts)
            if '"' in joined or "\r" in joined or "\n " in joined or delim + " " in joined or (
                    texts and max(map(len, texts)) > limit):
                batches = itertools.chain([(linenos, texts)], batches)
                break
        rows += [text.split(sep) for text in texts]
        row_lines += linenos
        if group is None and rows:
            group = max(2, _CELLS // len(rows[0]))
        while group is not None and len(rows) >= group:
            yield rows[:group], row_lines[:group]
            rows, row_lines = rows[group:], row_lines[group:]
    if whitespace:
        if rows:
            yield rows, row_lines
        return
    # Lines go to one reader, with their newline, so that a quoted cell spanning lines (and blocks) keeps it;
    # strict mode turns an unterminated quote into an error instead of a cell that silently swallows the rest of
    # the file.
    pending = []  # the line numbers of the lines handed to the reader since the last group; the first is line
    base = [0]  # base[0] (0-based) of those the reader has read

    def lines():
        for linenos, texts in batches:
            pending.extend(linenos)
            for text in texts:
                yield text + "\n"

    reader = csv.reader(lines(), delimiter=delim, skipinitialspace=True, strict=True)
    consumed = 0
    try:
        for row in reader:
            # A quoted cell may span lines: a row starts on the first line the reader had not yet consumed.
            row_lines.append(pending[consumed - base[0]])
            consumed = reader.line_num
            rows.append(row)
            if group is None:
                group = max(2, _CELLS // max(len(row), 1))
            if len(rows) >= group:
                yield rows, row_lines
                rows, row_lines = [], []
                del pending[: consumed - base[0]]
                base[0] = consumed
    except csv.Error as exc:
        message = str(exc)
        if "unexpected end of data" in message:
            message = "unterminated quoted cell"
        elif "new-line character" in message:
            message = "stray carriage return (\\r) inside a line"
        elif "field larger than field limit" in message:
            message = f"a cell of more than {csv.field_size_limit():,} characters, more than a CSV cell of slang's holds"
        raise DataError(f"{name}:{pending[min(consumed - base[0], len(pending) - 1)]}: {message}") from None
    if rows:
        yield rows, row_lines


def _holds_names(first, names) -> bool:
    """Whether the ``first`` row's cells include every one of a fitted run's feature ``names``: a header row,
    even when the names are numbers (a DataFrame's integer column names, as ``DataFrame.to_csv`` writes them)."""
    return bool(names) and set(names) <= {cell.strip() for cell in first}


def _detect_header(rows, target, ncols, na):
    """Whether the first row is a header; ``target`` is the target option, or ``_NO_TARGET`` (every column is a
    feature); ``na`` the missing-value markers. A missing cell says nothing either way: a first data row may lack
    a value (``0.1,?,0.3,1`` is data, not the names ``0.1``, ``?`` and ``0.3``)."""
    first = [cell.strip() for cell in rows[0]]
    if isinstance(target, str) and not _INT_RE.fullmatch(target.strip()) and target.strip() in first:
        return True
    t = ncols if target is _NO_TARGET else _provisional_target(target, first, ncols)

    def numbers(row):  # whether each feature cell given is a number
        return [_is_number(cell) for j, cell in enumerate(row) if j != t and cell.strip() not in na]

    first_numeric = numbers(first)
    if all(first_numeric):
        return _range_names(rows, t)
    if len(rows) < 2:
        return True
    if not any(first_numeric):
        return not _seen_below(rows, na)
    return all(numbers(rows[1]))


def _seen_below(rows, na) -> bool:
    """Whether every text cell of a first row whose features are text (a missing one aside) is a value of its own
    column in a later row (of those read with it): data of categories (``blue,large,no`` above ``red,small,yes``
    and ``blue,small,no``; a target of numbers, ``blue,large,3.2``, is data whatever its value), not column names,
    which are not also values of their columns."""
    cells = [(j, cell.strip()) for j, cell in enumerate(rows[0])
             if cell.strip() not in na and not _is_number(cell.strip())]
    return bool(cells) and all(any(len(row) > j and row[j].strip() == cell for row in rows[1:]) for j, cell in cells)


def _range_names(rows, t) -> bool:
    """Whether a first row of numbers is the header ``DataFrame.to_csv`` writes for integer column names: the
    feature cells are ``0, 1, ..., k-1`` (k >= 2), or ``1, ..., k`` (k >= 4), each after an empty cell where the
    frame's index was written too (``,0,1,...``: its header cell is empty); and the target's cell (column ``t``) is
    the next number (k >= 3; names from zero only), or a name that no later row has as its target (``0,1,2,y`` above
    labels ``a`` and ``b``). A row of data that counts up from zero or one is rarer than such a header, and the fit
    names the columns it read."""
    first = [cell.strip() for cell in rows[0]]
    features = [cell for j, cell in enumerate(first) if j != t]
    named = features[1:] if features[:1] == [""] else features  # (a pandas index's empty header cell)
    start = next((s for s in (0, 1) if named == [str(k) for k in range(s, s + len(named))]), None)
    # (rows of data count up from one more often than from zero: 1-based names need four features or more)
    if start is None or len(named) < (2 if start == 0 else 4):
        return False
    if t is None or t >= len(first):
        return start == 0 and len(named) >= 3  # (1-based names only beside a target's cell: 1,2,3,4,5 is data)
    label = first[t]
    if start == 0 and label == str(len(named)):  # (1,2,3,4,5 above data is data: a 1-based header needs a name)
        return len(named) >= 3
    return not _is_number(label) and all(len(row) > t and row[t].strip() != label for row in rows[1:])


def _provisional_target(target, first, ncols):
    """The target column as far as it can be known before deciding whether there is a header."""
    if target is None:
        return ncols - 1
    if isinstance(target, str):
        key = target.strip()
        if _POSITION_RE.fullmatch(key):
            key = key[1:]
        elif key in first:
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
    elif isinstance(target, str) and _POSITION_RE.fullmatch(target.strip()):
        index = int(target.strip()[1:])  # "#3": the column at 0-based index 3, whatever the header says
    elif isinstance(target, str):
        key = target.strip()
        if names is not None and key in names:
            hits = [j for j, n in enumerate(names) if n == key]
            if len(hits) > 1:
                where = ", ".join(str(j) for j in hits)
                raise DataError(f"{name}: target column {key!r} is ambiguous (columns {where} share that name)")
            return hits[0]
        if _INT_RE.fullmatch(key):
            index = int(key)
        elif names is None:
            raise TargetNameWithoutHeader(
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


def _parse_libsvm(name, batches, n_features):
    """Parse the lines of a LIBSVM file, ``batches`` of ``(linenos, texts)`` a block at a time: each block becomes
    its labels and the row, index and value of its entries, and the dense table is made from them at the end."""
    labels, entries = [], []  # per block: labels (n_b,), and (rows within the block, indices, values)
    n = size = 0
    widest = (0, None)  # the highest index and the line of its first entry
    for linenos, texts in batches:
        size += sum(len(text) + 1 for text in texts)
        block = _libsvm_block(name, linenos, texts, n_features)
        if block is None:
            continue
        y, row_of, index, values, line_of = block
        if index.size and int(index.max()) > widest[0]:
            widest = (int(index.max()), line_of(int(np.argmax(index))))
        labels.append(y)
        entries.append((row_of, index, values))
        n += len(y)
    if n == 0:
        raise DataError(f"{name}: file is empty")

    p = int(n_features) if n_features is not None else widest[0]
    if p == 0:
        raise DataError(f"{name}: no features: every line holds only a label")
    need = (8 * n + 64) * p
    if n_features is None and need > max(_DENSE_FLOOR, _DENSE_RATIO * size):
        raise DataError(
            f"{name}:{widest[1]}: feature index {p} would make a {n} x {p} table (about {need / 2**20:,.0f} MiB: "
            f"slang holds LIBSVM data dense) from {size} bytes of text: give --n-features if that width is intended"
        )
    try:
        X = np.zeros((n, p), dtype=np.float64)
    except (MemoryError, ValueError):
        raise DataError(f"{name}: a dense {n} x {p} table (about {8 * n * p / 2**30:,.4g} GiB; slang holds LIBSVM "
                        f"data dense) does not fit in memory (highest feature index {p}): fewer rows, or a file with "
                        "fewer features, fits") from None
    first = 0
    for y, (row_of, index, values) in zip(labels, entries):
        X[first + row_of, index - 1] = values
        first += len(y)
    entries.clear()
    y = Rows()
    for block in labels:
        y.add(block)
    return X, y.result()


def _libsvm_block(name, linenos, texts, n_features):
    """One block of LIBSVM lines: ``(labels, row_of, index, values, line_of)`` with ``row_of`` the row within the
    block of each entry and ``line_of(k)`` the line of entry k; None for a block without lines."""
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
        return None

    y = _libsvm_labels(name, labels, label_lines)
    row_of = np.repeat(np.arange(len(labels)), counts)

    def line_of(k):
        return label_lines[row_of[k]]

    index, values = _libsvm_entries(name, tokens, line_of)
    _check_libsvm_entries(name, row_of, index, values, n_features, line_of)
    return y, row_of, index, values, line_of


def _libsvm_labels(name, labels, label_lines):
    """The labels of a block (the first token of each line) as float64, each a finite number."""
    try:
        y = floats(labels)
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
    return y


def _libsvm_entries(name, tokens, line_of):
    """The ``index:value`` tokens of a block as ``(index, values)``: int64 and float64 arrays."""
    if not tokens:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
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
    ok = ok and "".join(index_strings).isdecimal() and joined.isascii()
    if ok:
        try:
            return np.array(index_strings, dtype=np.int64), floats(value_strings)
        except (ValueError, OverflowError):
            pass
    _raise_bad_token(name, tokens, line_of)


def _check_libsvm_entries(name, row_of, index, values, n_features, line_of):
    """Line-level checks of a block's entries (indices 1-based, strictly increasing within a line, within
    --n-features; values finite); the earliest offending token among them is reported."""
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


def _raise_bad_token(name, tokens, line_of):
    for k, token in enumerate(tokens):
        index_string, colon, value_string = token.partition(":")
        value_ok = bool(colon) and _is_number(value_string)
        ascii_digits = index_string.isascii() and index_string.isdecimal()
        if ascii_digits and int(index_string) < _MAX_INDEX and value_ok:
            continue
        if value_ok and _INT_RE.fullmatch(index_string) and int(index_string) < 1:
            raise DataError(f"{name}:{line_of(k)}: feature index {int(index_string)}: indices are 1-based")
        if value_ok and ascii_digits:
            raise DataError(f"{name}:{line_of(k)}: feature index {index_string} is too large")
        raise DataError(f"{name}:{line_of(k)}: cannot parse {token!r} as index:value")
    raise DataError(f"{name}: cannot parse the index:value pairs")


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
