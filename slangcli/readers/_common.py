"""What every file reader shares: the ``Table`` it returns, bytes from disk, gzip, UTF-8 decoding, lines.

Any reader may be handed gzip-compressed input, recognised by its magic bytes (``_GZIP_MAGIC``), not by the
file name. Text is UTF-8 (a byte-order mark is dropped); a NUL byte means the file is not text. Blank lines and
lines whose first non-blank character is ``#`` are skipped, but messages quote the file's real 1-based line
numbers (``_content_lines``). Every failure is a ``DataError`` with one line naming the file (and line).

The label-formatting helpers (``_fmt_label``, ``_listing``) are shared with ``slangcli.prepare``, whose label
coding quotes labels in messages the same way the readers do.
"""

from __future__ import annotations

import codecs
import gzip
import hashlib
import os
import sys
import zlib
from dataclasses import dataclass

import numpy as np

from slangcli.errors import DataError

_GZIP_MAGIC = b"\x1f\x8b"
# the file name that means standard input (read once; a run file records it as such, it cannot be re-read)
STDIN = "-"
_MAX_LISTED = 10


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
        From the header row; else ``x<column>`` by the 0-based file column (CSV: ``x0, x1, ...`` when the target
        is last) or ``f1 ... fP`` (LIBSVM, 1-based like the file).
    provenance : dict
        JSON-serialisable record of what was read: ``path`` (absolute), ``sha256`` (of the bytes as stored,
        compressed if gzip), ``format`` (``csv`` | ``libsvm`` | ``idx`` | ``uci``), ``rows``, ``features``,
        ``header`` (bool, None for LIBSVM and IDX), ``delimiter`` (``,`` ``\\t`` ``;`` ``whitespace``, None
        for LIBSVM and IDX), ``target`` (column name, or 0-based index without a header; None for LIBSVM
        and IDX), ``compressed``; CSV columns left out add ``columns_dropped`` (names, or 0-based indices without a
        header), rows left out for a missing value ``rows_dropped`` and ``dropped_lines`` (the first 20).
        ``path`` is ``"-"`` for standard input. ``widen`` adds ``widened_from``. IDX adds ``labels_path``,
        ``labels_sha256`` and ``image_shape`` (``[rows, cols]``, or ``[P]`` for a 2-dimensional file);
        Gal-UCI adds ``folder``, ``split``, ``n_splits`` and the paths and sha256 of the split's two index
        files (``train_index_path``, ``train_index_sha256``, ``test_index_path``, ``test_index_sha256``).
    """

    X: np.ndarray
    y: np.ndarray
    feature_names: tuple[str, ...]
    provenance: dict


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


def _read_bytes(name):
    if name == STDIN:
        return sys.stdin.buffer.read()
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
