"""Property-based fuzzing of every reader: any input ends in a valid result or in the project's own error.

The readers are ``read_table`` on CSV-like text and on LIBSVM, ``read_idx`` (and ``read_table``'s dispatch to
it) on raw and gzip-compressed IDX files, ``read_uci_folder`` on Gal-layout folders, and ``read_run`` on HDF5
run files. Each gets random inputs and mutations of valid inputs (byte flips, truncation, inserted garbage and
interesting tokens, wrong headers, huge declared sizes, NaN/inf text, odd delimiters, non-UTF-8 bytes, gzip
wrapping; for run files, valid files written by ``write_run`` then truncated, overwritten, or edited with h5py:
attributes, datasets and JSON keys deleted or replaced with wrong types, shapes, dtypes and versions). The
property, for every input:

- the reader returns a result that satisfies its documented invariants (shapes, dtypes, finiteness), or
- it raises a ``SlangError`` subclass (``DataError`` or ``FormatError``) whose message is one line starting with
  the name of the offending file,

never another exception, within a hypothesis deadline and a bound on the memory ``tracemalloc`` sees (a few MiB
beyond the result: a declared size far beyond the file's must be refused before allocating; ``memory_guard``
also caps the address space, so that a lazily granted huge allocation fails at once).

A run file the reader accepts must also be usable: ``slang inspect`` and ``slang evaluate`` on run files edited
with h5py exit 0, or 1 with one line naming the file, never with a traceback.

libhdf5 (2.0.0, through h5py 3.16) loops forever on some byte-corrupted files, reading a variable-length string
attribute whose global-heap object header was overwritten: 1 in 70 to 1 in 200 random byte-level corruptions,
depending on how they are drawn. slang cannot interrupt it, so byte-corrupted run files are read in a forked
child with a time limit; a child stopped inside h5py is counted as a libhdf5 hang (shown in the summary), one
stopped anywhere else fails the test.

The default run is deterministic (``derandomize=True``); the ``slow`` tests draw 10 000 inputs per reader
(``SLANG_FUZZ_EXAMPLES`` overrides) and 1 000 command lines. ``conftest.py`` prints how many inputs each reader
got and the time spent.
"""

from __future__ import annotations

import faulthandler
import functools
import gzip
import json
import os
import pickle
import select
import shutil
import signal
import time
import tracemalloc
import traceback
from datetime import timedelta

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slangcli.cli import main
from slangcli.data.readers import Table, read_idx, read_table, read_uci_folder
from slangcli.data.sources import DataOptions
from slangcli.errors import DataError, FormatError, SlangError
from slangcli.runfile.io import Run, read_run, write_run
from slangcli.training.fitting import fit

DEFAULT_EXAMPLES = 100
SLOW_EXAMPLES = int(os.environ.get("SLANG_FUZZ_EXAMPLES", 10_000))
# Inputs are at most a few KiB: beyond the result itself, a reader needs no more than this (the IDX reader
# decompresses in blocks of 16 MiB, which io.BufferedReader allocates whole).
MEMORY_SLACK = 24 << 20
# Address space allowed beyond the process's size while fuzzing (see ``memory_guard``).
GUARD = 2 << 30

_COMMON = dict(
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    # generous for a loaded 2-core machine; a reader that allocates a declared 10^12 bytes takes far longer
    deadline=timedelta(seconds=2),
)
DEFAULT = settings(max_examples=DEFAULT_EXAMPLES, derandomize=True, database=None, **_COMMON)
SLOW = settings(max_examples=SLOW_EXAMPLES, derandomize=False, database=None, print_blob=True, **_COMMON)


# ------------------------------------------------------------------------------------------------ mutations

# Tokens that have broken, or could break, a parser when inserted anywhere.
TOKENS = [
    b"nan", b"NaN", b"inf", b"-inf", b"Infinity", b"1e999", b"-1e999", b"1e308", b"4.9e-324", b"-0", b"0x10",
    b"1_000", b"99999999999999999999", b"9223372036854775808", b"123456789", b"4294967295", b"",
    b",", b";", b"\t", b" ", b"  ", b":", b"::", b"#", b'"', b'""', b"'", b"\n", b"\r", b"\r\n", b"\n\n",
    b"\x00", b"\xff", b"\xfe\xff", b"\xef\xbb\xbf", b"\xc3", b"\xe2\x80\xa8", b"\x0b", b"\x0c", b"\x85",
    b"\x1f\x8b", b"\x1f\x8b\x08\x00", b"\x00\x00\x08\x03", b"\x00\x00\x08\x01", b"\xff\xff\xff\xff",
    b"0:1", b"-1:2", b"1:nan", b"qid:1", b"1:2:3", b"999999999999:1", b"1e5:1", b"+1", b"-1", b"yes", b"a,b",
]


@st.composite
def mutated(draw, data: bytes, max_ops=4):
    """``data`` after 0 to ``max_ops`` random edits: overwrite, bit flip, delete, insert, truncate, duplicate."""
    data = bytearray(data)
    for _ in range(draw(st.integers(0, max_ops))):
        op = draw(st.sampled_from(["overwrite", "flip", "delete", "insert", "token", "truncate", "duplicate"]))
        at = draw(st.integers(0, max(len(data), 1) - 1)) if data else 0
        if op == "overwrite" and data:
            chunk = draw(st.binary(min_size=1, max_size=8))
            data[at : at + len(chunk)] = chunk
        elif op == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 16))]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "token":
            data[at:at] = draw(st.sampled_from(TOKENS))
        elif op == "truncate":
            del data[at:]
        elif op == "duplicate":
            end = at + draw(st.integers(1, 64))
            data[at:at] = data[at:end]
    return bytes(data)


@st.composite
def maybe_gzip(draw, data: bytes):
    """``data``, or its gzip compression, possibly itself mutated (a corrupt or truncated stream)."""
    if not draw(st.booleans()):
        return data
    packed = gzip.compress(data, compresslevel=draw(st.integers(0, 9)), mtime=0)
    return draw(mutated(packed, max_ops=1)) if draw(st.integers(0, 3)) == 0 else packed


# ------------------------------------------------------------------------------------------------ bookkeeping


class Budget:
    """Counts the inputs each reader gets and checks the memory each call traces."""

    def __init__(self, counts, reader):
        self.counts, self.reader = counts, reader

    def run(self, fuzz):
        """Run the hypothesis test ``fuzz`` and record its total time."""
        start = time.perf_counter()
        try:
            fuzz()
        finally:
            self.counts.add_total(self.reader, time.perf_counter() - start)

    def __call__(self, function, *args, **kwargs):
        """``function(*args, **kwargs)`` -> (result, None) or (None, the SlangError raised)."""
        return self._account(*_measure(function, *args, **kwargs))

    def isolated(self, timeout, function, *args):
        """``self(function, *args)`` run in a forked child that may take at most ``timeout`` seconds.

        For libhdf5, which loops forever on some corrupted files and crashes on others (see
        ``test_fuzz_run_file``): a child that hangs or crashes inside h5py is counted and ``(None, None)``
        returned; one that hangs or crashes anywhere else, or fails, fails the test here.
        """
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child never returns into pytest
            try:
                os.close(read_fd)
                with os.fdopen(write_fd, "wb") as out:
                    faulthandler.enable(file=out)
                    faulthandler.dump_traceback_later(timeout, exit=True, file=out)
                    try:
                        outcome = ("done", _measure(function, *args))
                    except BaseException:  # noqa: BLE001 - reported to the parent
                        outcome = ("failed", traceback.format_exc())
                    faulthandler.cancel_dump_traceback_later()
                    faulthandler.disable()
                    pickle.dump(outcome, out)
            finally:
                os._exit(0)
        os.close(write_fd)
        chunks, deadline = [], time.monotonic() + timeout + 30
        with os.fdopen(read_fd, "rb") as pipe:
            while select.select([pipe], [], [], max(deadline - time.monotonic(), 0))[0]:
                chunk = pipe.read1(1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
            else:
                os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        data = b"".join(chunks)
        for start, what in ((b"Timeout", f"took more than {timeout} s"), (b"Fatal Python error", "crashed")):
            if data.startswith(start):
                report = data.decode("utf-8", "replace")
                innermost = next(line for line in report.splitlines() if line.strip().startswith("File"))
                assert "/h5py/" in innermost, f"{self.reader}: {what}:\n{report}"
                self.counts.add(self.reader, timeout, hung=True)
                return None, None
        assert data, f"{self.reader}: the child process died without a word (wait status {status})"
        status, payload = pickle.loads(data)
        assert status == "done", f"{self.reader}: {payload}"
        return self._account(*payload)

    def _account(self, result, error, seconds, peak, tried_memory):
        self.counts.add(self.reader, seconds)
        # A reader that converts a failed allocation into its own error has still tried to allocate it.
        assert not tried_memory, f"{self.reader}: {error}"
        allowed = MEMORY_SLACK + 2 * _nbytes(result)
        assert peak <= allowed, f"{self.reader}: traced peak {peak} bytes, allowed {allowed}"
        return result, error


def _measure(function, *args, **kwargs):
    """(result, SlangError or None, seconds, peak traced bytes, whether the error hides a MemoryError)."""
    start = time.perf_counter()
    tracemalloc.start()
    try:
        result, error = function(*args, **kwargs), None
    except SlangError as exc:
        result, error = None, exc
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    tried_memory = isinstance(getattr(error, "__context__", None), MemoryError)
    return result, error, time.perf_counter() - start, peak, tried_memory


@pytest.fixture(autouse=True)
def memory_guard():
    """Cap this process's address space at its current size plus ``GUARD`` while a fuzz test runs.

    Linux grants large allocations lazily: without the cap, a reader that reserves a declared 20 GB would only
    fail when something touches the memory, after exhausting the machine. With it, the allocation itself raises
    ``MemoryError``, which the ``Budget`` reports.
    """
    try:
        import resource
    except ImportError:  # not POSIX: run unguarded
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    try:
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: run unguarded
        yield
        return
    cap = used + GUARD if hard == resource.RLIM_INFINITY else min(used + GUARD, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _nbytes(result):
    if isinstance(result, tuple):
        return sum(_nbytes(r) for r in result)
    if isinstance(result, Table):  # a column name costs about 64 bytes (str object and tuple slot)
        return result.X.nbytes + result.y.nbytes + 64 * len(result.feature_names)
    if isinstance(result, np.ndarray):
        return result.nbytes
    return 0


def assert_one_line_naming(error, *names):
    message = str(error)
    assert len(message.splitlines()) == 1 and "\r" not in message, repr(message)
    assert message.startswith(tuple(str(n) for n in names)), (names, message)


def assert_valid_table(table, fmt=None):
    assert isinstance(table, Table)
    X, y = table.X, table.y
    assert X.dtype == np.float64 and X.ndim == 2 and X.flags.c_contiguous
    n, p = X.shape
    assert n >= 1 and p >= 1
    assert np.isfinite(X).all()
    assert y.shape == (n,)
    assert y.dtype == np.float64 and np.isfinite(y).all() or y.dtype.kind == "U"
    assert len(table.feature_names) == p and all(isinstance(name, str) for name in table.feature_names)
    provenance = table.provenance
    assert json.loads(json.dumps(provenance, allow_nan=False)) == provenance
    assert provenance["rows"] == n and provenance["features"] == p
    if fmt is not None:
        assert provenance["format"] == fmt


# ------------------------------------------------------------------------------------------------ CSV


NUMBERS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.integers(-(10**20), 10**20).map(str),
    st.floats(-1e3, 1e3).map(lambda v: f"{v:.3f}"),
)
CELLS = st.one_of(
    NUMBERS,
    NUMBERS,
    st.sampled_from(["", " ", "nan", "NaN", "inf", "-Infinity", "1e999", "yes", "no", '"1,5"', '"a""b"', " 3 ",
                     "0x1F", "1_0", "١٢", "+.5e-3", "-", "."]),
    st.text(max_size=6),
)


@st.composite
def csv_inputs(draw):
    """(file bytes, read_table keyword arguments)."""
    kind = draw(st.sampled_from(["valid", "valid", "valid", "text", "bytes"]))
    if kind == "valid":
        rows, cols = draw(st.integers(1, 8)), draw(st.integers(1, 5))
        sep = draw(st.sampled_from([",", "\t", ";", " ", "  ", ", "]))
        lines = []
        if draw(st.booleans()):
            lines.append(sep.join(draw(st.lists(st.sampled_from(["a", "b", "c", "label", "0", "x y", '"q"']),
                                                min_size=cols, max_size=cols))))
        labels = draw(st.sampled_from([["0", "1"], ["-1", "+1"], ["yes", "no"], ["2", "4"], ["a", "b", "c"]]))
        cell = NUMBERS if draw(st.integers(0, 3)) else CELLS
        for _ in range(rows):
            lines.append(sep.join([*draw(st.lists(cell, min_size=cols - 1, max_size=cols - 1)),
                                   draw(st.sampled_from(labels))]))
        ending = draw(st.sampled_from(["\n", "\r\n", ""]))
        text = ending.join(lines) + draw(st.sampled_from(["", ending, "\n\n", "\n# comment\n"]))
        if draw(st.booleans()):
            text = "\ufeff" + text if draw(st.booleans()) else "# a comment\n\n" + text
        data = draw(mutated(text.encode("utf-8")))
    elif kind == "text":
        data = draw(st.text(alphabet=st.sampled_from(list('0123456789.,;\t \n\r"#-+eEnaifxyz:')), max_size=200)
                    ).encode()
    else:
        data = draw(st.binary(max_size=200))
    data = draw(maybe_gzip(data))
    options = draw(st.fixed_dictionaries({}, optional={
        "format": st.sampled_from(["auto", "csv", "CSV", "xml"]),
        "target": st.one_of(st.integers(-7, 7), st.sampled_from(["label", "a", "0", "-1", "99", " b ", "", "x y"])),
        "delimiter": st.sampled_from([",", "\t", ";", " ", "whitespace", "|", "", ",,"]),
        "header": st.booleans(),
        "n_features": st.one_of(st.integers(-1, 6), st.just(True)),
    }))
    return data, options


def run_text_fuzz(profile, strategy, reader, directory, counts):
    """``read_table`` on the (bytes, options) cases of ``strategy``: a valid table or a one-line DataError."""
    budget = Budget(counts, reader)
    path = directory / f"{reader}.dat"

    @profile
    @given(strategy)
    def fuzz(case):
        data, options = case
        path.write_bytes(data)
        table, error = budget(read_table, path, **options)
        if error is not None:
            assert isinstance(error, DataError), repr(error)
            assert_one_line_naming(error, path)
        else:
            assert_valid_table(table)

    budget.run(fuzz)


def test_fuzz_csv(tmp_path, fuzz_counts):
    run_text_fuzz(DEFAULT, csv_inputs(), "csv", tmp_path, fuzz_counts)


@pytest.mark.slow
def test_fuzz_csv_slow(tmp_path, fuzz_counts):
    run_text_fuzz(SLOW, csv_inputs(), "csv", tmp_path, fuzz_counts)


# ------------------------------------------------------------------------------------------------ LIBSVM


HUGE_INDICES = [10**5, 10**6, 2**24, 123456789, 2**31, 2**32 + 1, 10**12, 2**62, 2**63, 10**30]


@st.composite
def libsvm_inputs(draw):
    kind = draw(st.sampled_from(["valid", "valid", "valid", "text"]))
    if kind == "valid":
        lines = []
        huge = draw(st.integers(0, 7)) == 0  # a width far beyond the file's size, on some lines
        for _ in range(draw(st.integers(1, 8))):
            label = draw(st.sampled_from(["+1", "-1", "0", "1", "2", "1.5", "3e0"]))
            indices = sorted(draw(st.sets(st.integers(1, 30), max_size=6)))
            value = NUMBERS if draw(st.integers(0, 3)) else CELLS
            pairs = [f"{j}:{draw(value)}" for j in indices]
            if huge and draw(st.booleans()):
                pairs.append(f"{draw(st.sampled_from(HUGE_INDICES))}:1")
            sep = draw(st.sampled_from([" ", "\t", "  "]))
            comment = draw(st.sampled_from(["", "", " # note", "#"]))
            lines.append(sep.join([label, *pairs]) + comment)
        text = "\n".join(lines) + draw(st.sampled_from(["", "\n", "\n\n"]))
        data = draw(mutated(text.encode("utf-8")))
    else:
        data = draw(st.text(alphabet=st.sampled_from(list("0123456789.:+- \t\n#eEnaifq")), max_size=200)).encode()
    data = draw(maybe_gzip(data))
    options = draw(st.fixed_dictionaries({}, optional={
        "format": st.sampled_from(["auto", "libsvm", "LibSVM"]),
        "n_features": st.integers(-1, 40),
        "header": st.sampled_from([None, False, True]),
        "target": st.sampled_from([None, 0]),
    }))
    return data, options


def test_fuzz_libsvm(tmp_path, fuzz_counts):
    run_text_fuzz(DEFAULT, libsvm_inputs(), "libsvm", tmp_path, fuzz_counts)


@pytest.mark.slow
def test_fuzz_libsvm_slow(tmp_path, fuzz_counts):
    run_text_fuzz(SLOW, libsvm_inputs(), "libsvm", tmp_path, fuzz_counts)


# ------------------------------------------------------------------------------------------------ IDX


def idx_header(type_code, dims):
    return bytes([0, 0, type_code, len(dims)]) + b"".join(int(d).to_bytes(4, "big") for d in dims)


@st.composite
def idx_pairs(draw):
    """(images bytes, labels bytes) before compression: valid, then with headers or bodies mutated."""
    n = draw(st.integers(1, 6))
    shape = draw(st.sampled_from([(n, 3, 4), (n, 5), (n, 1, 1), (n, 2, 2)]))
    pixels = draw(st.binary(min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    labels = draw(st.binary(min_size=n, max_size=n))
    images_dims, labels_dims = list(shape), [n]
    images_type, labels_type = 0x08, 0x08
    for _ in range(draw(st.integers(0, 2))):
        what = draw(st.sampled_from(["dims", "labels dims", "type", "ndim"]))
        if what == "dims" and images_dims:
            k = draw(st.integers(0, len(images_dims) - 1))
            images_dims[k] = draw(st.one_of(st.integers(0, 16), st.sampled_from([2**31, 2**32 - 1, 10**9, 60000])))
        elif what == "labels dims":
            labels_dims[0] = draw(st.one_of(st.integers(0, 16), st.sampled_from([2**32 - 1, 10**8])))
        elif what == "type":
            images_type = draw(st.sampled_from([0x08, 0x09, 0x0B, 0x0C, 0x0D, 0x0E, 0x00, 0x07, 0xFF]))
        elif what == "ndim":
            images_dims = draw(st.lists(st.integers(0, 8), min_size=0, max_size=5))
    images = idx_header(images_type, images_dims) + pixels
    label_bytes = idx_header(labels_type, labels_dims) + labels
    images = draw(mutated(images, max_ops=draw(st.sampled_from([0, 0, 2]))))
    label_bytes = draw(mutated(label_bytes, max_ops=draw(st.sampled_from([0, 0, 2]))))
    return images, label_bytes


@st.composite
def idx_inputs(draw, gz):
    images, labels = draw(idx_pairs())
    if gz:
        images, labels = gzip.compress(images, mtime=0), gzip.compress(labels, mtime=0)
        if draw(st.integers(0, 3)) == 0:
            images = draw(mutated(images, max_ops=2))
        if draw(st.integers(0, 5)) == 0:
            labels = draw(mutated(labels, max_ops=2))
    how = draw(st.sampled_from(["read_idx", "read_idx with labels", "read_table", "read_table idx"]))
    return images, labels, how


@pytest.mark.parametrize("gz", [False, True], ids=["raw", "gzip"])
def test_fuzz_idx(tmp_path, fuzz_counts, gz):
    run_idx_fuzz(DEFAULT, gz, tmp_path, fuzz_counts)


@pytest.mark.slow
@pytest.mark.parametrize("gz", [False, True], ids=["raw", "gzip"])
def test_fuzz_idx_slow(tmp_path, fuzz_counts, gz):
    run_idx_fuzz(SLOW, gz, tmp_path, fuzz_counts)


def run_idx_fuzz(profile, gz, directory, counts):
    reader = f"idx ({'gzip' if gz else 'raw'})"
    budget = Budget(counts, reader)
    suffix = ".gz" if gz else ""
    images_path = directory / f"fuzz-images-idx3-ubyte{suffix}"
    labels_path = directory / f"fuzz-labels-idx1-ubyte{suffix}"

    @profile
    @given(idx_inputs(gz))
    def fuzz(case):
        images, labels, how = case
        images_path.write_bytes(images)
        labels_path.write_bytes(labels)
        if how == "read_idx":
            table, error = budget(read_idx, images_path)
        elif how == "read_idx with labels":
            table, error = budget(read_idx, images_path, labels_path)
        elif how == "read_table":
            table, error = budget(read_table, images_path)
        else:
            table, error = budget(read_table, images_path, format="idx")
        if error is not None:
            assert isinstance(error, DataError), repr(error)
            assert_one_line_naming(error, images_path, labels_path)
        else:
            assert_valid_table(table)
            if table.provenance["format"] == "idx":
                assert ((table.X >= 0) & (table.X <= 1)).all()
                assert table.y.dtype == np.float64

    budget.run(fuzz)


# ------------------------------------------------------------------------------------------------ Gal-UCI

@st.composite
def uci_folders(draw):
    """({file name: bytes or None for absent}, split argument)."""
    n, c = draw(st.integers(1, 8)), draw(st.integers(2, 5))
    data = draw(st.lists(st.lists(st.floats(-1e6, 1e6, width=32), min_size=c, max_size=c), min_size=n, max_size=n))
    target = draw(st.integers(0, c - 1))
    features = draw(st.permutations([j for j in range(c) if j != target]))
    features = features[: draw(st.integers(1, len(features)))]
    n_splits = draw(st.integers(1, 3))
    floats = draw(st.booleans())

    def numbers(values):
        return "".join((f"{v:.18e}\n" if floats else f"{v}\n") for v in values).encode()

    files = {
        "data.txt": "".join(" ".join(draw(st.sampled_from(["{:g}", "{:.6e}", "{}"])).format(v) for v in row) + "\n"
                            for row in data).encode(),
        "index_features.txt": numbers(features),
        "index_target.txt": numbers([target]),
        "n_splits.txt": numbers([n_splits]),
    }
    for k in range(n_splits):
        rows = draw(st.permutations(range(n)))
        cut = draw(st.integers(0, n))
        files[f"index_train_{k}.txt"] = numbers(rows[:cut])
        files[f"index_test_{k}.txt"] = numbers(rows[cut:])
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from(sorted(files)))
        action = draw(st.sampled_from(["mutate", "mutate", "mutate", "delete", "empty", "gzip", "directory"]))
        content = files[name]
        if action == "mutate" and isinstance(content, bytes):
            files[name] = draw(mutated(content))
        elif action == "gzip" and isinstance(content, bytes):
            files[name] = draw(maybe_gzip(content))
        elif action == "delete":
            files[name] = None
        elif action == "empty":
            files[name] = b""
        elif action == "directory":
            files[name] = "directory"
    split = draw(st.one_of(st.integers(0, n_splits - 1), st.integers(-2, 5), st.sampled_from([True, 1.0, "0", None])))
    sub = draw(st.booleans())
    return files, split, sub


def test_fuzz_uci(tmp_path, fuzz_counts):
    run_uci_fuzz(DEFAULT, tmp_path, fuzz_counts)


@pytest.mark.slow
def test_fuzz_uci_slow(tmp_path, fuzz_counts):
    run_uci_fuzz(SLOW, tmp_path, fuzz_counts)


def run_uci_fuzz(profile, directory, counts):
    budget = Budget(counts, "uci folder")
    folder = directory / "uci"

    @profile
    @given(uci_folders())
    def fuzz(case):
        files, split, sub = case
        shutil.rmtree(folder, ignore_errors=True)
        root = folder / "data" if sub else folder
        root.mkdir(parents=True)
        for name, content in files.items():
            if content == "directory":
                (root / name).mkdir()
            elif content is not None:
                (root / name).write_bytes(content)
        result, error = budget(read_uci_folder, folder, split)
        if error is not None:
            assert isinstance(error, DataError), repr(error)
            assert_one_line_naming(error, folder)
        else:
            table, train, test = result
            assert_valid_table(table, "uci")
            n = table.X.shape[0]
            for index in (train, test):
                assert index.dtype == np.int64 and index.ndim == 1
                assert ((index >= 0) & (index < n)).all()
                assert len(np.unique(index)) == len(index)
            assert not np.isin(train, test).any()

    budget.run(fuzz)


# ------------------------------------------------------------------------------------------------ HDF5 run files

# (object, attribute) pairs a run file holds; "" is the root group.
RUN_ATTRIBUTES = [
    ("/", "encoding-type"), ("/", "encoding-version"), ("/", "slang_version"), ("/", "created"), ("/", "command"),
    ("/", "config"), ("/", "versions"), ("/", "environment"), ("/", "seed"),
    ("/data", "encoding-type"), ("/data", "encoding-version"), ("/data", "provenance"),
    ("/model", "encoding-type"), ("/model", "encoding-version"), ("/model", "sizes"), ("/model", "activation"),
    ("/model", "likelihood"), ("/model", "noise_precision"),
    ("/posterior", "encoding-type"), ("/posterior", "encoding-version"),
    ("/history", "encoding-type"), ("/history", "encoding-version"),
    ("/metrics", "encoding-type"), ("/metrics", "encoding-version"), ("/metrics", "metrics"),
]
RUN_DATASETS = [
    "/data/train_index", "/data/test_index", "/data/feature_mean", "/data/feature_scale", "/data/target_mean",
    "/data/target_scale",
    "/model/prior_precision", "/posterior/mean", "/posterior/U", "/posterior/d",
    "/history/epoch", "/history/step", "/history/nll", "/history/seconds",
]
RUN_GROUPS = ["/data", "/model", "/posterior", "/history", "/metrics"]

ATTRIBUTE_VALUES = st.one_of(
    st.sampled_from(["2.0", "1.9", "1.0", "1", "0.9", "", "abc", "1.x", "-1.0", "99999999999999999999.0", " 1.0",
                     "slang-run", "lowrank-gaussian", "mlp", "data", "history", "metrics", "diagonal-gaussian",
                     "relu", "tanh", "sigmoid", "bernoulli", "gaussian", "categorical", "softmax",
                     "[]", "{}", "null", "1", '"text"', "[1, 2]", '{"train": {}}', '{"options": {}, "train": {}}',
                     "{", "NaN", '{"a": NaN}', '["slang", 1]']),
    st.text(max_size=12).map(lambda text: text.replace("\x00", "")),  # HDF5 strings hold no NUL
    st.integers(-(2**63), 2**63 - 1),
    st.floats(),
    st.binary(min_size=1, max_size=8).map(np.void),
    st.sampled_from([np.array([4, 1]), np.array([3, 1]), np.array([3, 2, 1]), np.array([0, 1]), np.array([-3, 1]),
                     np.array([2**40, 2**40]), np.array([3.5, 1.0]), np.array([[3, 1]]), np.array([], dtype=np.int64),
                     np.array([3]), np.array(["3", "1"], dtype="S"), np.array([True, False]), np.array([3, 1, 0]),
                     np.int64(3), np.float32(1.0), np.array([np.nan])]),
)


@st.composite
def dataset_values(draw):
    """Arrays of wrong, or right, shapes and dtypes."""
    shape = draw(st.sampled_from([(), (0,), (1,), (3,), (4,), (5,), (10,), (30,), (4, 1), (4, 2), (4, 3), (2, 2),
                                  (1, 4), (4, 2, 1)]))
    dtype = draw(st.sampled_from(["f8", "f8", "f4", "f2", "i8", "i4", "u1", "u8", "?", "c16", "S3"]))
    if dtype == "S3":
        return np.full(shape, b"abc", dtype="S3")
    fill = draw(st.sampled_from([0, 1, 2, -1, 1e-300, 1e300, 0.5, 40, 2**62, "nan", "inf", "-inf", "random"]))
    if fill == "random":
        values = np.asarray(draw(st.lists(st.floats(-1e6, 1e6), min_size=int(np.prod(shape)),
                                          max_size=int(np.prod(shape)))), dtype=np.float64).reshape(shape)
    else:
        values = np.full(shape, float(fill))
    with np.errstate(invalid="ignore", over="ignore"):
        return values.astype(dtype) if dtype != "?" else values != 0


JSON_ATTRIBUTES = [("/", "config"), ("/", "command"), ("/", "versions"), ("/", "environment"), ("/data", "provenance"),
                   ("/metrics", "metrics")]
JSON_VALUES = [None, True, 0, -1, 1.5, 1e308, float("nan"), "", "x", "../no/such/file", [], {}, [1], ["a", 1],
               {"a": 1}, 10**30]


def json_paths(value, prefix=()):
    """Every key path into a JSON value, parents before children."""
    paths = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        paths.append(prefix + (key,))
        paths.extend(json_paths(child, prefix + (key,)))
    return paths


def edit_json(value, choice, action, new):
    """``value`` with its ``choice``-th key path (modulo their number) deleted or set to ``new``."""
    paths = json_paths(value)
    if not paths:
        return new
    *parents, key = paths[choice % len(paths)]
    node = value
    for parent in parents:
        node = node[parent]
    if action == "delete":
        del node[key]
    else:
        node[key] = new
    return value


@st.composite
def run_edits(draw):
    """A list of h5py edits (kind, target, value) to apply to a valid run file."""
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["del attr", "set attr", "set attr", "del dataset", "set dataset", "set dataset",
                                     "del group", "group to dataset", "dataset to group", "nan", "negate",
                                     "edit json", "edit json", "edit json"]))
        if kind == "edit json":
            target = draw(st.sampled_from(JSON_ATTRIBUTES))
            value = (draw(st.integers(0, 200)), draw(st.sampled_from(["delete", "set"])),
                     draw(st.sampled_from(JSON_VALUES)))
        elif kind in ("del attr", "set attr"):
            target = draw(st.sampled_from(RUN_ATTRIBUTES))
            value = draw(ATTRIBUTE_VALUES) if kind == "set attr" else None
        elif kind in ("del dataset", "dataset to group", "nan", "negate"):
            target, value = draw(st.sampled_from(RUN_DATASETS)), None
        elif kind == "set dataset":
            target, value = draw(st.sampled_from(RUN_DATASETS)), draw(dataset_values())
        else:
            target, value = draw(st.sampled_from(RUN_GROUPS)), None
        edits.append((kind, target, value))
    return edits


def apply_edit(f, kind, target, value):
    if kind == "edit json":
        where, name = target
        if where in f and name in f[where].attrs:
            try:
                document = json.loads(f[where].attrs[name])
            except (TypeError, ValueError):  # an earlier edit replaced it
                return
            f[where].attrs[name] = json.dumps(edit_json(document, *value))
        return
    if kind in ("del attr", "set attr"):
        where, name = target
        attrs = f[where].attrs if where in f else None
        if attrs is None:
            return
        if kind == "del attr":
            if name in attrs:
                del attrs[name]
        else:
            attrs[name] = value
        return
    if kind in ("del group", "group to dataset"):
        if target in f:
            del f[target]
        if kind == "group to dataset":
            f.create_dataset(target, data=np.arange(3.0))
        return
    parent, _, name = target.rpartition("/")
    if parent not in f or not isinstance(f[parent], h5py.Group):
        return
    group = f[parent]
    old = group[name][()] if name in group and isinstance(group[name], h5py.Dataset) else None
    if kind in ("nan", "negate"):
        if old is None or np.asarray(old).dtype.kind != "f" or np.asarray(old).size == 0:
            return
        new = np.array(old)
        new.flat[0] = np.nan if kind == "nan" else -abs(new.flat[0]) - 1.0
        value = new
    if name in group:
        del group[name]
    if kind == "set dataset" or kind in ("nan", "negate"):
        group.create_dataset(name, data=value)
    elif kind == "dataset to group":
        group.create_group(name)


@st.composite
def run_inputs(draw):
    """("bytes", [byte edits]) or ("h5py", [structural edits])."""
    if draw(st.integers(0, 2)) == 0:
        return "bytes", draw(st.lists(st.tuples(st.sampled_from(["truncate", "overwrite", "flip", "zero"]),
                                                st.floats(0, 1, exclude_max=True),
                                                st.binary(min_size=1, max_size=16)), min_size=1, max_size=4))
    return "h5py", draw(run_edits())


def apply_byte_edits(data, edits):
    data = bytearray(data)
    for op, where, payload in edits:
        if not data:
            break
        at = int(where * len(data))
        if op == "truncate":
            del data[at:]
        elif op == "overwrite":
            data[at : at + len(payload)] = payload
        elif op == "flip":
            data[at] ^= 1 << (payload[0] % 8)
        else:
            data[at : at + 8 * len(payload)] = bytes(8 * len(payload))
    return bytes(data)


def assert_valid_run(run):
    assert isinstance(run, Run)
    D = run.model.n_params
    # (a mixture, --members: each member as a run's posterior, with its own prior precisions)
    for post, prior in zip(getattr(run.posterior, "members", [run.posterior]),
                           getattr(run.posterior, "prior_precision", [run.prior_precision])):
        assert post.mean.shape == (D,) and post.d.shape == (D,)
        assert post.U.ndim == 2 and post.U.shape[0] == D
        for arr in (post.mean, post.U, post.d, prior, run.prior_precision):  # integers are numbers too (and work)
            assert arr.dtype.kind in "fiu" and np.isfinite(arr).all()
        assert (post.d > 0).all() and (prior > 0).all() and prior.shape == (D,)
    assert (run.prior_precision > 0).all() and run.prior_precision.shape == (D,)
    assert isinstance(run.config, dict) and isinstance(run.data, dict) and isinstance(run.metrics, dict)
    assert isinstance(run.command, list) and isinstance(run.meta["versions"], dict)
    assert all(values.ndim == 1 for values in run.history.values())


BASES = ("csv split", "uci regression", "libsvm categorical", "uci mixture")


@pytest.fixture(scope="module")
def run_bases(fitted_run, tmp_path_factory):
    """Valid run files of four kinds, their data in place: {name in BASES: (bytes, data path)}.

    ``fitted_run`` (CSV, standardised, 25 % test split, Bernoulli); a regression network on a Gal-layout UCI
    folder; a three-class softmax model on LIBSVM files with a separate test file; the regression network's fit of
    two members (``--members 2``: a mixture posterior).
    """
    directory = tmp_path_factory.mktemp("bases")
    rng = np.random.default_rng(7)
    X = rng.standard_normal((24, 3))
    folder = directory / "uci"
    folder.mkdir()
    np.savetxt(folder / "data.txt", np.column_stack([X[:12], X[:12] @ [1.0, -1.0, 0.5]]))
    for name, values in (("index_features", [0, 1, 2]), ("index_target", [3]), ("n_splits", [1]),
                         ("index_train_0", range(9)), ("index_test_0", range(9, 12))):
        (folder / f"{name}.txt").write_text("".join(f"{v}\n" for v in values))
    for name, rows in (("train.svm", X[:18]), ("test.svm", X[18:])):
        labels = np.digitize(rows[:, 0], [-0.5, 0.5]) + 1
        (directory / name).write_text("".join(f"{k} " + " ".join(f"{j + 1}:{v:.4f}" for j, v in enumerate(x)) + "\n"
                                              for k, x in zip(labels, rows)))
    runs = {
        "csv split": fitted_run,
        "uci regression": fit(DataOptions(path=str(folder), uci_split=0, standardize=True), hidden=(3,),
                              method="slang", hyper={"rank": 1}, batch_size=4, epochs=2, eval_samples=20),
        "libsvm categorical": fit(DataOptions(path=str(directory / "train.svm"), test=str(directory / "test.svm")),
                                  hyper={"rank": 2}, batch_size=8, epochs=2, eval_samples=20),
        "uci mixture": fit(DataOptions(path=str(folder), uci_split=0, standardize=True), hidden=(3,),
                           method="slang", hyper={"rank": 1}, batch_size=4, epochs=2, eval_samples=20, members=2),
    }
    bases = {}
    for name, run in runs.items():
        path = directory / "base.h5"
        write_run(path, run)
        bases[name] = (path.read_bytes(), run.data["options"]["path"])
    assert set(bases) == set(BASES)
    return bases


def write_case(path, base, how, edits):
    if how == "bytes":
        path.write_bytes(apply_byte_edits(base, edits))
        return
    path.write_bytes(base)
    with h5py.File(path, "r+") as f:
        for edit in edits:
            apply_edit(f, *edit)


# A read of these 20 KiB files takes milliseconds; libhdf5 2.0.0 loops forever on some corrupted global heaps
# (the variable-length strings of attributes): 1 in 70 to 1 in 200 byte-level corruptions.
HANG_TIMEOUT = 1.0
RUN_SETTINGS = dict(deadline=timedelta(seconds=HANG_TIMEOUT + 4))


@pytest.fixture
def quick_read(monkeypatch):
    """The isolated reader (which survives libhdf5's endless loops) must give up quickly, so that such files show
    up as the FormatError a user gets without the harness waiting five seconds for each."""
    import slangcli.runfile.io
    monkeypatch.setattr(slangcli.runfile.io, "READ_SECONDS", HANG_TIMEOUT / 2)


def test_fuzz_run_file(tmp_path, fuzz_counts, run_bases, quick_read):
    run_run_fuzz(settings(DEFAULT, **RUN_SETTINGS), tmp_path, fuzz_counts, run_bases)


@pytest.mark.slow
def test_fuzz_run_file_slow(tmp_path, fuzz_counts, run_bases, quick_read):
    run_run_fuzz(settings(SLOW, **RUN_SETTINGS), tmp_path, fuzz_counts, run_bases)


def run_run_fuzz(profile, directory, counts, bases):
    """``read_run`` on mutated run files.

    Its checks are traced in this process (``isolated=False``), byte-level corruptions in a child process
    (``Budget.isolated``), where libhdf5 may loop forever or crash. Those are then also read as a user reads them,
    isolated: a FormatError naming the file, or the same run.
    """
    budget = Budget(counts, "hdf5 run file")
    path = directory / "run.h5"
    read_here = functools.partial(read_run, isolated=False)

    @profile
    @given(st.sampled_from(BASES), run_inputs())
    def fuzz(base, case):
        how, edits = case
        write_case(path, bases[base][0], how, edits)
        if how == "bytes":
            run, error = budget.isolated(HANG_TIMEOUT, read_here, str(path))
            check_run_outcome(run, error, path)
            isolated = isolated_outcome(path)
            # libhdf5's crashes are not always repeatable: any read may crash, the isolated one then a FormatError
            if isinstance(isolated, str) and "corrupted: libhdf5" in isolated:
                pass
            elif run is not None:
                assert not isinstance(isolated, str) and isolated.config == run.config, isolated
            elif error is not None:
                assert isolated == error.args[0], (isolated, error)
        else:
            check_run_outcome(*budget(read_here, str(path)), path)

    budget.run(fuzz)


def check_run_outcome(run, error, path):
    if error is not None:
        assert isinstance(error, FormatError), repr(error)
        assert_one_line_naming(error, path)
    elif run is not None:
        assert_valid_run(run)


def isolated_outcome(path):
    """``read_run(path)``: the run, or its FormatError's message, checked."""
    try:
        run = read_run(str(path))
    except FormatError as error:
        assert_one_line_naming(error, path)
        return error.args[0]
    assert_valid_run(run)
    return run


# ------------------------------------------------------------------------------------------------ CLI on run files

COMMANDS = ["inspect", "inspect --json", "evaluate", "evaluate --json", "evaluate DATA",
            "evaluate --predictive mc --samples 10"]


def test_fuzz_cli_on_run_files(tmp_path, fuzz_counts, run_bases):
    run_cli_fuzz(settings(DEFAULT, max_examples=DEFAULT_EXAMPLES // 2), tmp_path, fuzz_counts, run_bases)


@pytest.mark.slow
def test_fuzz_cli_on_run_files_slow(tmp_path, fuzz_counts, run_bases):
    run_cli_fuzz(settings(SLOW, max_examples=max(SLOW_EXAMPLES // 10, 1)), tmp_path, fuzz_counts, run_bases)


def run_cli_fuzz(profile, directory, counts, bases):
    """``slang inspect`` and ``slang evaluate`` on run files edited with h5py (a run file the reader accepts
    must be usable): exit 0, or 1 with one line ``slang: error: FILE: ...``, never a traceback."""
    budget = Budget(counts, "cli on run files")
    path = directory / "run.h5"

    def invoke(args):
        result = CliRunner().invoke(main, args)
        if result.exit_code == 0:
            return result, None
        assert isinstance(result.exception, SystemExit), "".join(traceback.format_exception(result.exception))
        return result, SlangError(result.stderr)

    @profile
    @given(st.sampled_from(BASES), run_edits(), st.sampled_from(COMMANDS))
    def fuzz(base, edits, command):
        data, data_path = bases[base]
        write_case(path, data, "h5py", edits)
        name, *options = command.replace("DATA", data_path).split()
        result, error = budget(invoke, [name, str(path), *options])
        if error is not None:
            assert result.exit_code == 1 and result.stdout == "", (result.exit_code, result.stderr)
            assert len(result.stderr.splitlines()) == 1, result.stderr
            assert result.stderr.startswith((f"slang: error: {path}: ", f"slang: error: {data_path}")), result.stderr

    budget.run(fuzz)
