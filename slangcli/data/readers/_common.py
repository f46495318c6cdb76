"""What every file reader shares: the ``Table`` it returns, bytes from disk, gzip, UTF-8 decoding, lines.

An input (:class:`Input`) is a regular file, read from disk in blocks as it is parsed and never held whole, or a
stream (standard input, a pipe such as ``<(command)``), read whole first since it can be neither measured nor read
twice, and refused beyond ``STREAM_LIMIT`` bytes (``yes 1,2,0 | slang fit -`` took memory at 1 GB/s until the
system killed it). A device (``/dev/urandom``, ``/dev/zero``: data without end), a socket or a directory is refused
before it is opened. The sha256 of the bytes is computed as they are read.

Any reader may be handed gzip-compressed input, recognised by its magic bytes (``_GZIP_MAGIC``), not by the
file name. It is decompressed in blocks (``gzip_blocks``), never whole, and refused once it expands beyond
``gzip_limit`` of its compressed size: a 300 KB file of 300 MB of blank lines took 3.2 GB when decompressed and
split at once. Text is UTF-8 (a byte-order mark is dropped); a NUL byte means the file is not text. Blank lines
and lines whose first non-blank character is ``#`` are skipped as the blocks are read, so they cost no memory,
but messages quote the file's real 1-based line numbers (``text_batches``: the lines of each block in turn, so
that a parser holds one block's lines at a time). Every failure is a ``DataError`` with one line naming the file
(and line).

The label-formatting helpers (``_fmt_label``, ``_listing``) are shared with ``slangcli.data.prepare``, whose label
coding quotes labels in messages the same way the readers do.
"""

from __future__ import annotations

import codecs
import contextlib
import contextvars
import gzip
import hashlib
import io
import os
import re
import stat
import sys
import zlib
from dataclasses import dataclass

import numpy as np

from slangcli.errors import DataError

_GZIP_MAGIC = b"\x1f\x8b"
# compressions slang does not read, by their magic bytes: what they are and what decompresses them (read as text,
# such a file failed as "not UTF-8 text (byte 0x8e)")
_OTHER_COMPRESSIONS = ((b"BZh", "bzip2", "bunzip2"), (b"\xfd7zXZ\x00", "xz", "unxz"), (b"PK\x03\x04", "zip", "unzip"),
                       (b"\x28\xb5\x2f\xfd", "zstd", "unzstd"))


def refuse_other_compression(head: bytes, name) -> None:
    """A one-line error for a file compressed otherwise than with gzip, by its first bytes ``head``."""
    for magic, what, tool in _OTHER_COMPRESSIONS:
        if head.startswith(magic):
            raise DataError(f"{name}: compressed with {what}, which slang does not read (it reads plain text and "
                            f"gzip): decompress it first ({tool})")
# gzip input is decompressed up to GZIP_RATIO times its compressed size, and at least GZIP_FLOOR bytes (deflate
# compresses at most about 1030 to 1, which only a run of one repeated byte reaches; CSV text compresses 3 to 30
# to 1). Module attributes, read at each call, so that a test can lower them and use a small bomb.
GZIP_RATIO = 1000
GZIP_FLOOR = 1 << 30
# the most bytes read from a stream (standard input, a pipe): as much as the gzip floor, a few hundred million rows
# of text, more than slang could fit from a stream in its memory. A module attribute, read at each call, like those
# above: a test lowers it.
STREAM_LIMIT = 1 << 30
# bytes are read, decompressed and decoded in blocks of this many: a block's lines as Python strings take about ten
# times as much
_BLOCK = 1 << 18
# a line that is neither blank nor a comment: its first non-blank character is not "#" (``\s`` and str.strip
# agree on what is blank)
_CONTENT_LINE = re.compile(r"^[^\S\n]*[^\s#].*$", re.MULTILINE)
# a number written with a decimal comma (0,126; -2,59e-05 as pandas writes small ones with decimal=","), as many
# locales write them (never a number to Python's float)
DECIMAL_COMMA = re.compile(r"[+-]?\d*,\d+(?:[eE][+-]?\d+)?")
# the words of a boolean column (compared in lower case), and the value each encodes to
BOOLEAN_WORDS = {"true": 1.0, "yes": 1.0, "false": 0.0, "no": 0.0}
# the comment lines after the first line of content (their "#" starting a word) that text_batches keeps aside for a
# parser to check
_COMMENTS_KEPT = 10_000
# the file name that means standard input (read once; a run file records it as such, it cannot be re-read)
STDIN = "-"
# the format a run's provenance records for data given as arrays from Python (slangcli.fit), not read from a file
ARRAYS = "arrays"
_MAX_LISTED = 10
# a regular file at least this large reports its reading to the callback of ``reading_progress``: smaller ones
# are read in about a second or less, too soon for a display to help. A module attribute, read at each call.
PROGRESS_MIN_BYTES = 64 << 20
_READING = contextvars.ContextVar("slang_reading_progress", default=None)
# the blocks of each stream read while streams_kept() is in force, by name: a second reading of the same stream (a
# --test file read again by position once its header row was looked for) finds them here, not an exhausted pipe
_STREAMS = contextvars.ContextVar("slang_streams_kept", default=None)


@contextlib.contextmanager
def reading_progress(start):
    """Within this context, every regular file of at least ``PROGRESS_MIN_BYTES`` that a reader opens reports how
    far it has been read: ``start(name, size)`` is called when the file is opened (or read again from its start)
    and returns ``report(done)``, called with the bytes read so far (as stored, compressed or not) after each
    block, and with ``None`` once the file is closed. A display lives in the caller (``slang fit``'s bar): the
    readers only count."""
    token = _READING.set(start)
    try:
        yield
    finally:
        _READING.reset(token)


@dataclass(frozen=True, eq=False)
class Table:
    """A dense feature matrix and its target column, as read from one file.

    ``eq=False``: equality of dataclasses holding arrays would be ambiguous; compare fields explicitly.

    Attributes
    ----------
    X : (N, P) float64 ndarray
        C-contiguous, all finite, except the NaN of a text column (``text``) and of a missing cell kept by
        ``missing="impute"``.
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
        ``labels_sha256`` and ``image_shape`` (``[rows, cols]``, or ``[P]`` for a 2-dimensional file); data read
        from a stream other than standard input (a pipe, ``/dev/stdin``) add ``stream: true``, an IDX labels file
        read from one ``labels_stream: true``;
        Gal-UCI adds ``folder``, ``split``, ``n_splits`` and the paths and sha256 of the split's two index
        files (``train_index_path``, ``train_index_sha256``, ``test_index_path``, ``test_index_sha256``) and of
        the column files (``features_index_path``, ``features_index_sha256``, ``target_index_path``,
        ``target_index_sha256``). Every ``<name>path`` beside a ``<name>sha256`` is a file the data came from
        (``slangcli.data.sources.recorded_files``).
    rows : (N,) int64 ndarray or None
        The 0-based data row (after any header) each row was read from, when rows were left out for a missing
        value; None when every data row is there, in order.
    text : dict or None
        CSV feature columns read as text (categories): ``{j: (N,) str ndarray}`` for feature ``j``, its cells
        stripped, "" where missing (``X[:, j]`` is NaN); None when every feature is a number.
    lines : (N,) int64 ndarray or None
        The 1-based line each row was read from, when some feature is text (for messages about a cell).
    columns : list of int or None
        CSV: the 0-based file column of each feature.
    target_column : int or None
        CSV: the 0-based file column of the target (None: the file has none).
    """

    X: np.ndarray
    y: np.ndarray
    feature_names: tuple[str, ...]
    provenance: dict
    rows: np.ndarray | None = None
    text: dict | None = None
    lines: np.ndarray | None = None
    columns: list | None = None
    target_column: int | None = None


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


def _data_kind(mode) -> str | None:
    """What a file of ``mode`` that slang does not read as data is (``"a device"``), or None for a regular file or
    a FIFO."""
    if stat.S_ISREG(mode) or stat.S_ISFIFO(mode):
        return None
    return ("a directory" if stat.S_ISDIR(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")


_DESCRIPTOR = re.compile(r"/(dev|proc/(self|thread-self|[0-9]+))/fd/[0-9]+|/dev/std(in|out|err)")


@contextlib.contextmanager
def streams_kept():
    """Within the block, a stream (standard input, a pipe) read once is read again from what was kept of it."""
    token = _STREAMS.set({})
    try:
        yield
    finally:
        _STREAMS.reset(token)


def names_a_descriptor(path) -> bool:
    """Whether ``path`` is, or leads by symbolic links to, the name of an open descriptor of the process that
    uses it (``/dev/stdin``, ``/dev/fd/N``, ``/proc/self/fd/N``): another process finds another file under it."""
    path = os.fspath(path)
    for _ in range(40):  # (the system's own limit on a chain of links)
        if _DESCRIPTOR.fullmatch(os.path.normpath(os.path.abspath(path))):
            return True
        if not os.path.islink(path):
            return False
        path = os.path.join(os.path.dirname(path), os.readlink(path))
    return False


def is_stream_path(name) -> bool:
    """Whether the data argument ``name`` is read once: standard input (``-``), a pipe, or a descriptor's name."""
    if name == STDIN or names_a_descriptor(name):
        return True
    try:
        return stat.S_ISFIFO(os.stat(name).st_mode)
    except (OSError, ValueError):
        return False


def read_once(info: dict) -> bool:
    """Whether a recorded data source (a run's ``data["train"]`` or ``data["test"]``) was read from standard input
    or another stream (a pipe, ``/dev/stdin``), which cannot be read again; for IDX images, their labels file
    too."""
    return info.get("path") == STDIN or info.get("stream") is True or info.get("labels_stream") is True


def data_read_once(data: dict | None) -> bool:
    """Whether a run's training or test data (its ``data``) were read once (:func:`read_once`): --resume cannot
    read them again."""
    return any(read_once((data or {}).get(part) or {}) for part in ("train", "test"))


def _stdin_kind() -> str | None:
    """What standard input is when it is not data: a device other than a terminal (``< /dev/urandom``)."""
    try:
        fd = sys.stdin.fileno()
        mode = os.fstat(fd).st_mode
    except (AttributeError, ValueError, OSError):  # (io.UnsupportedOperation is an OSError) not a real file
        return None
    if stat.S_ISCHR(mode) and os.isatty(fd):
        return None  # typed in: a stream like a pipe
    return _data_kind(mode)


def _open(name):
    """``name`` opened for reading, and whether it is a stream (a FIFO) rather than a regular file; anything else
    (a device, a directory, a socket) is refused before it is opened."""
    try:
        mode = os.stat(name).st_mode
        kind = _data_kind(mode)
        if kind == "a directory":
            raise DataError(f"{name}: is a directory, not a file")
        if kind is not None:
            raise DataError(f"{name}: is {kind}, not a data file")
        return open(name, "rb"), stat.S_ISFIFO(mode)
    except FileNotFoundError:
        raise DataError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{name}: is a directory, not a file") from None
    except PermissionError:
        raise DataError(f"{name}: permission denied") from None
    except OSError as exc:
        raise DataError(f"{name}: cannot read ({exc.strerror or exc})") from None


def stream_too_large(name):
    """The ``DataError`` of a stream longer than ``STREAM_LIMIT``."""
    where = "standard input" if name == STDIN else "a pipe"
    return DataError(f"{name}: more than {_size(STREAM_LIMIT)} from {where}, the most slang reads from a stream; "
                     "write the data to a file and give its name")


def _read_stream(stream, name) -> list[bytes]:
    """The bytes of a stream, as the blocks they arrived in, within ``STREAM_LIMIT``. Each read returns what has
    arrived (``read1``), so a signal stops the reading however slowly the data come."""
    limit = STREAM_LIMIT
    read = getattr(stream, "read1", stream.read)
    blocks, total = [], 0
    try:
        while True:
            block = read(min(_BLOCK, limit - total + 1))
            if not block:
                return blocks
            total += len(block)
            if total > limit:
                raise stream_too_large(name)
            blocks.append(block)
    except OSError as exc:
        raise DataError(f"{name}: cannot read ({exc.strerror or exc})") from None


class _BlockFile:
    """A read-only binary file object over an iterable of byte blocks (what ``gzip.GzipFile`` reads from)."""

    def __init__(self, blocks):
        self._blocks = iter(blocks)
        self._block, self._at = b"", 0

    def read(self, n=-1):
        pieces = []
        while n is None or n < 0 or n > 0:
            if self._at >= len(self._block):
                self._block, self._at = next(self._blocks, None), 0
                if self._block is None:
                    self._block = b""
                    break
            piece = self._block[self._at :] if n is None or n < 0 else self._block[self._at : self._at + n]
            self._at += len(piece)
            if n is not None and n >= 0:
                n -= len(piece)
            pieces.append(piece)
        return b"".join(pieces)


class Input:
    """The bytes of one input (a path, or ``"-"`` for standard input), read front to back in blocks of at most
    ``_BLOCK`` bytes and hashed as they are read; :meth:`restart` reads them again from the start.

    ``head`` holds the first block (the magic bytes and the first lines), ``size`` the number of bytes as stored
    (a stream's once read), ``compressed`` whether they are gzip data. A regular file is read from disk as the
    blocks are asked for; a stream is read whole (within ``STREAM_LIMIT``) when the input is made. Every failure to
    read is a ``DataError`` naming the input.
    """

    def __init__(self, name):
        self.name = name
        self._stored = None  # a stream's blocks
        # read once: standard input, a pipe (a FIFO, a shell's <(...)), or a descriptor's name (/dev/stdin), which
        # names another file, or none, in a later process
        self.stream = name == STDIN or names_a_descriptor(name)
        kept = _STREAMS.get()
        if kept is not None and name in kept:  # (read before in this block: the pipe itself is exhausted)
            self.stream, self._stored = True, kept[name]
        elif name == STDIN:
            if sys.stdin is None:  # (the process started with descriptor 0 closed: <&-)
                raise DataError(f"{name}: standard input is closed; give the data's file name")
            kind = _stdin_kind()
            if kind is not None:
                raise DataError(f"{name}: standard input is {kind}, not a data file or a pipe")
            self._stored = _read_stream(sys.stdin.buffer, name)
        else:
            file, is_stream = _open(name)
            self.stream = self.stream or is_stream
            if is_stream:
                with file:
                    self._stored = _read_stream(file, name)
            else:
                file.close()
        if kept is not None and self._stored is not None:
            kept[name] = self._stored
        self._file = None
        self.restart()

    def restart(self) -> None:
        """Read the input again from its first byte."""
        self.close()
        if self._stored is not None:
            self._file = _BlockFile(self._stored)
            self.size = sum(len(block) for block in self._stored)
        else:
            self._file, _ = _open(self.name)
            self.size = os.fstat(self._file.fileno()).st_size
        self._digest = hashlib.sha256()
        self._done = False
        self._read_so_far = 0
        start = _READING.get()
        self._report = (start(self.name, self.size) if start is not None and self._stored is None
                        and self.size >= PROGRESS_MIN_BYTES else None)
        self.head = self._read()
        self.compressed = self.head[:2] == _GZIP_MAGIC
        refuse_other_compression(self.head, self.name)

    def _read(self) -> bytes:
        try:
            block = self._file.read(_BLOCK)
        except OSError as exc:
            raise DataError(f"{self.name}: cannot read ({exc.strerror or exc})") from None
        self._digest.update(block)
        if not block:
            self._done = True
        if self._report is not None:
            self._read_so_far += len(block)
            self._report(self._read_so_far)
        return block

    def raw_blocks(self):
        """The bytes as stored, in blocks: the head, then the rest."""
        yield self.head
        while not self._done:
            block = self._read()
            if block:
                yield block

    def blocks(self):
        """The bytes decompressed if they are gzip data (``gzip_blocks``), in blocks."""
        if self.compressed:
            return gzip_blocks(_BlockFile(self.raw_blocks()), self.name, self.size)
        return self.raw_blocks()

    def read_all(self) -> bytes:
        """All the bytes as stored, in one object (formats read whole: IDX, the small files of a UCI folder)."""
        return b"".join(self.raw_blocks())

    def sha256(self) -> str:
        """The hex SHA-256 of all the bytes as stored (the rest is read if the parser stopped before the end)."""
        for _ in self.raw_blocks():
            pass
        return self._digest.hexdigest()

    def close(self) -> None:
        if self._file is not None and hasattr(self._file, "close"):
            self._file.close()
        self._file = None
        report, self._report = getattr(self, "_report", None), None
        if report is not None:
            report(None)


def _read_bytes(name):
    """All the bytes of the input ``name`` (a path or ``"-"``), as stored."""
    source = Input(name)
    try:
        return source.read_all()
    finally:
        source.close()


def gzip_limit(compressed_size: int) -> int:
    """The most bytes gzip data of ``compressed_size`` bytes may expand to: ``GZIP_RATIO`` times as many, at
    least ``GZIP_FLOOR``."""
    return max(GZIP_FLOOR, GZIP_RATIO * compressed_size)


def _size(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} bytes"


def gzip_too_large(name, compressed_size):
    """The ``DataError`` of gzip data that expand beyond ``gzip_limit``."""
    limit = gzip_limit(compressed_size)
    return DataError(
        f"{name}: gzip data expand to more than {_size(limit)}, the most slang decompresses from "
        f"{_size(compressed_size)} (the larger of {GZIP_RATIO} times the compressed size and {_size(GZIP_FLOOR)})"
    )


def gzip_stream(raw):
    """A binary file object reading the decompressed bytes of the gzip data ``raw`` (every member)."""
    return gzip.GzipFile(fileobj=io.BytesIO(raw), mode="rb")


def gzip_blocks(raw, name, compressed_size=None):
    """The decompressed bytes of the gzip data ``raw`` (bytes, or a binary file object reading
    ``compressed_size`` bytes), in blocks of at most ``_BLOCK`` bytes.

    Raises ``DataError`` for corrupt data and for data that expand beyond ``gzip_limit`` of the compressed size,
    as soon as they do (nothing beyond the limit is decompressed)."""
    if isinstance(raw, (bytes, bytearray, memoryview)):
        compressed_size, stream = len(raw), gzip_stream(raw)
    else:
        stream = gzip.GzipFile(fileobj=raw, mode="rb")
    limit = gzip_limit(compressed_size)
    total = 0
    while True:
        try:
            block = stream.read(min(_BLOCK, limit - total + 1))
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(f"{name}: corrupt gzip data ({exc})") from None
        if not block:
            return
        total += len(block)
        if total > limit:
            raise gzip_too_large(name, compressed_size)
        yield block


def _raw_blocks(raw):
    return (raw[k : k + _BLOCK] for k in range(0, len(raw), _BLOCK))


def text_batches(blocks, name, comments: list | None = None):
    """For each block of ``blocks`` (bytes, decompressed), the real 1-based line numbers and the texts of its
    lines that are neither blank nor ``#`` comments, decoded as UTF-8: ``(linenos, texts)``, one pair a block (a
    block ends after its last newline; a line longer than a block spans several). ``comments``: a list that gets
    ``(lineno, text)`` of the comment lines after the first line of content whose ``#`` starts a word (at most
    ``_COMMENTS_KEPT``), which a parser may check are not data.

    A newline byte is never part of a multi-byte UTF-8 character, so each block is decoded and searched alone:
    blank lines are counted but never held in memory, and a parser holds the lines of one block at a time."""
    # the line number at the start of the next piece, whether it starts the file, whether a line of content was seen
    state = {"line": 1, "first": True, "content": False}

    def take(piece):
        linenos, texts = [], []
        if state["first"]:
            state["first"] = False
            if piece.startswith(codecs.BOM_UTF8):
                piece = piece[len(codecs.BOM_UTF8) :]
        try:
            text = piece.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = state["line"] + piece.count(b"\n", 0, exc.start)
            raise DataError(f"{name}:{line}: not UTF-8 text (byte 0x{piece[exc.start]:02x})") from None
        nul = text.find("\x00")
        if nul >= 0:
            raise DataError(f"{name}:{state['line'] + text.count(chr(10), 0, nul)}: NUL byte: not a text file")
        first, n_newlines = state["line"], text.count("\n")
        state["line"] = first + n_newlines
        if comments is not None and "#" in text:  # (the comment lines after the first line of content kept aside)
            for k, line in enumerate(text.split("\n"), first):
                head = line.lstrip()
                if head and head[0] == "#":
                    # (only those whose "#" starts a word could be rows: "#N/A,4,1", not "# a note")
                    if state["content"] and len(head) > 1 and not head[1].isspace() and head[1] != "#" \
                            and len(comments) < _COMMENTS_KEPT:
                        comments.append((k, line.rstrip("\r")))
                elif head:
                    state["content"] = True
                    linenos.append(k)
                    texts.append(line.rstrip("\r"))
            return linenos, texts
        linenos, texts = _content(text, first)
        state["content"] = state["content"] or bool(texts)
        return linenos, texts

    def _content(text, first):
        linenos, texts = [], []
        if 4 * text.count("\n") > len(text):
            # mostly blank lines: a search skips them in C (a list of a million empty strings per block is not
            # made), about twice as fast on such text and half as fast on dense text
            line, at = first, 0
            for match in _CONTENT_LINE.finditer(text):
                line += text.count("\n", at, match.start())
                at = match.start()
                linenos.append(line)
                texts.append(match.group().rstrip("\r"))
        else:
            lines = text.split("\n")
            if "#" not in text and "\r" not in text:
                # no comment and no carriage return: the lines kept are those that are not blank, and when only the
                # last (after the block's final newline) is, their numbers run on from the first
                texts = [line for line in lines if line.strip()]
                if len(texts) == len(lines) - (not lines[-1].strip()):
                    return list(range(first, first + len(texts))), texts
                texts = []
            kept = [(k, line.rstrip("\r")) for k, line in enumerate(lines, first)
                    if (head := line.lstrip()) and head[0] != "#"]
            linenos.extend(k for k, _ in kept)
            texts.extend(t for _, t in kept)
        return linenos, texts

    pending = []  # the bytes after the last newline seen, not yet decoded
    for block in blocks:
        cut = block.rfind(b"\n")
        if cut < 0:
            pending.append(block)
            continue
        yield take(b"".join([*pending, block[: cut + 1]]))
        pending = [block[cut + 1 :]]
    yield take(b"".join(pending))


def line_of_row(name, row: int, header: bool) -> int | None:
    """The real 1-based line of data row ``row`` (0-based, after any header row) of the text file ``name``, found by
    reading the file again: a reader keeps its rows' lines only where a cell of text needs them, and a message
    about a row's label pays for the second reading instead. None for standard input, a file that cannot be read
    again, or a row past its end (a quoted cell spanning lines would shift the count)."""
    if name == STDIN:
        return None
    k = row + bool(header)
    try:
        source = Input(name)
    except DataError:
        return None
    try:
        seen = 0
        for linenos, _ in text_batches(source.blocks(), name):
            if k < seen + len(linenos):
                return int(linenos[k - seen])
            seen += len(linenos)
    except DataError:
        return None
    finally:
        source.close()
    return None


def _text_lines(raw, name):
    """Real 1-based line numbers and texts of all the lines of ``raw`` (bytes as stored, gzip or not) that are
    neither blank nor ``#`` comments (:func:`text_batches` of the whole file, for the small files of a UCI
    folder)."""
    refuse_other_compression(raw[:8], name)
    blocks = gzip_blocks(raw, name) if raw[:2] == _GZIP_MAGIC else _raw_blocks(raw)
    linenos, texts = [], []
    for more_linenos, more_texts in text_batches(blocks, name):
        linenos.extend(more_linenos)
        texts.extend(more_texts)
    return linenos, texts


def check_distinct_names(names, where: str) -> None:
    """Refuse feature names given twice: every later use matches the features by name (a prediction's columns, a
    DataFrame's), and a name that two columns share would say neither which one it is nor warn when they swap."""
    seen: dict = {}
    for j, name in enumerate(names):
        seen.setdefault(name, []).append(j)
    for name, where_found in seen.items():
        if len(where_found) > 1:
            raise DataError(f"{where}: the feature name {name!r} is given {len(where_found)} times (columns "
                            f"{', '.join(map(str, where_found))}); features are matched by name, so each needs "
                            "a name of its own")


def _is_number(cell):
    """Whether ``cell`` is a number as a data file writes one: what Python's ``float`` reads, in ASCII and without
    ``_`` (``float`` also takes ``1_000``, ``１２`` and ``١٢``, which pandas and every other reader take for text)."""
    if not cell.isascii() or "_" in cell:
        return False
    try:
        float(cell)
    except ValueError:
        return False
    return True


def floats(cells) -> np.ndarray:
    """The strings ``cells`` as a float64 array, each as :func:`_is_number` reads numbers; ``ValueError`` if one is
    not such a number (one check of their joined text, then NumPy's conversion, in C)."""
    joined = "".join(cells)
    if not joined.isascii() or "_" in joined:
        raise ValueError("a cell is not an ASCII number")
    return np.array(cells, dtype=np.float64)


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
