"""Outputs and inputs a user may not be able to use: a closed stdout (``>&-``), an empty or over-long output path,
a read-only output file, an input file the user may not read.

Every case runs ``python -m slangcli`` in a subprocess and checks the README's promise: one line naming the file,
the documented exit code (2 for an unusable output, refused before any work; 1 for a file that cannot be read or
written), no traceback, and nothing left behind.

Permission bits do not bind root, who runs these tests in CI: there the commands that need them run under
``setpriv`` with the capabilities that override file permissions (``CAP_DAC_OVERRIDE``, ``CAP_DAC_READ_SEARCH``)
dropped from the bounding set, so that root meets permission bits as any user does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from test_reliability import ENV, FAST, small  # noqa: F401 (small: the fixture of a CSV file and its runs)
from test_reliability import one_error as one_line


def _as_a_user() -> list[str]:
    """The command prefix under which permission bits apply to this process's children."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv (util-linux): permission bits cannot be made to apply")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]


def slang(*args, cwd, as_user=False, stdout=subprocess.PIPE, timeout=120):
    prefix = _as_a_user() if as_user else []
    proc = subprocess.run([*prefix, sys.executable, "-m", "slangcli", *map(str, args)], cwd=cwd, env=ENV,
                          stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=timeout)
    assert "Traceback" not in proc.stderr and "Warning" not in proc.stderr, proc.stderr
    return proc


# ------------------------------------------------------------------------------------------- a closed stdout


@pytest.mark.parametrize("args", [
    ["inspect", "linear.h5", "--json"],
    ["evaluate", "linear.h5", "--json"],
    ["predict", "linear.h5", "train.csv", "-o", "-"],
    ["compress", "linear.h5", "-k", "1", "-o", "{tmp}/c.h5", "--json"],
    ["fit", "train.csv", "-o", "{tmp}/fit.h5", "--json", "--epochs", "500", "--no-progress"],
], ids=["inspect", "evaluate", "predict", "compress", "fit"])
def test_a_closed_stdout_is_refused_before_any_work(small, tmp_path, args):
    """``>&-``: Python starts with ``sys.stdout`` None, and writing the JSON or the predictions was an
    AttributeError or TypeError traceback; a fit trained to the end and wrote its run file first."""
    started = time.monotonic()
    # the child starts with file descriptor 1 closed, as the shell's >&- leaves it
    proc = subprocess.run([sys.executable, "-m", "slangcli", *(a.format(tmp=tmp_path) for a in args)], cwd=small,
                          env=ENV, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120,
                          preexec_fn=lambda: os.close(1))
    assert "Traceback" not in proc.stderr, proc.stderr
    one_line(proc, 1, "to stdout: it is closed")
    assert time.monotonic() - started < 60  # refused up front: not after 500 epochs
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------- unusable output paths


@pytest.mark.parametrize("command", ["fit", "predict", "compress"])
def test_an_empty_output_path_is_a_usage_error_before_any_work(small, tmp_path, command):
    """``-o ''`` trained fully, then "cannot write : Is a directory" (exit 1)."""
    args = {"fit": ["fit", small / "train.csv", "--epochs", "500", "--no-progress"],
            "predict": ["predict", small / "linear.h5", small / "train.csv"],
            "compress": ["compress", small / "linear.h5", "-k", "1"]}[command]
    started = time.monotonic()
    one_line(slang(*args, "-o", "", cwd=tmp_path), 2, "the output path is empty")
    assert time.monotonic() - started < 60
    assert list(tmp_path.iterdir()) == []


def test_an_output_whose_directory_is_a_file_is_named_so(small, tmp_path, monkeypatch):
    """``-o file.h5/x.h5`` said "directory file.h5 does not exist", and FitResult.save raised a raw
    NotADirectoryError naming the hidden temporary file."""
    (tmp_path / "file.h5").write_bytes(b"")
    one_line(slang("predict", small / "linear.h5", small / "train.csv", "-o", "file.h5/x.csv", cwd=tmp_path), 2,
             "file.h5 is not a directory")
    import slangcli
    from slangcli.runfile.outputs import OutputError

    with pytest.raises(OutputError, match=r"^cannot write .*file\.h5/x\.h5: Not a directory$"):
        slangcli.load(small / "linear.h5").save(tmp_path / "file.h5" / "x.h5")
    assert sorted(os.listdir(tmp_path)) == ["file.h5"]
    # a sweep names the paths as given (it named them absolute: the page of bad inputs hid that)
    from slangcli.sweep.driver import UnusableOutput, check_directory

    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnusableOutput, match=r"^cannot create the directory file\.h5/out: file\.h5 is not a "
                                             r"directory$"):
        check_directory("file.h5/out")


def test_an_output_directory_beyond_path_max_is_named_as_too_long(small, tmp_path):
    """An existing directory whose path is longer than PATH_MAX was called a directory that "does not exist"."""
    deep, made = tmp_path, 0
    path_max = os.pathconf(tmp_path, "PC_PATH_MAX")
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        while len(os.fsencode(str(deep))) <= path_max + 100:  # made relative to each level: mkdir takes short paths
            os.mkdir("d" * 200, dir_fd=fd)
            next_fd = os.open("d" * 200, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd, deep, made = next_fd, deep / ("d" * 200), made + 1
    finally:
        os.close(fd)
    try:
        assert made > 1 and len(os.fsencode(str(deep))) > path_max
        proc = slang("fit", small / "train.csv", "-o", deep / "run.h5", *FAST, cwd=tmp_path)
        one_line(proc, 2, "too long")
        assert "does not exist" not in proc.stderr
    finally:
        shutil.rmtree(tmp_path / ("d" * 200))  # (by file descriptors, level by level: any depth)


@pytest.mark.parametrize("command", ["fit", "predict", "compress"])
def test_a_read_only_output_is_refused_by_every_command(small, tmp_path, command):
    """``slang predict -o pred.csv`` replaced a read-only ``pred.csv`` (exit 0) where fit and compress refused."""
    out = tmp_path / ("out.csv" if command == "predict" else "out.h5")
    out.write_text("keep me\n")
    out.chmod(0o444)
    args = {"fit": ["fit", small / "train.csv", *FAST],
            "predict": ["predict", small / "linear.h5", small / "train.csv"],
            "compress": ["compress", small / "linear.h5", "-k", "1"]}[command]
    proc = slang(*args, "-o", out, cwd=tmp_path, as_user=True)
    assert proc.returncode == 2, proc.stderr
    assert "not writable" in proc.stderr or "read-only" in proc.stderr, proc.stderr
    assert out.read_text() == "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]


# ------------------------------------------------------------------------------------------ unreadable inputs


@pytest.mark.parametrize("args", [
    ["inspect", "{run}"],
    ["evaluate", "{run}"],
    ["predict", "{run}", "train.csv", "-o", "p.csv"],
    ["compress", "{run}", "-k", "1", "-o", "c.h5"],
    ["fit", "--resume", "{run}"],
    ["evaluate", "linear.h5", "--reference", "{run}"],
    ["fit", "{data}", "-o", "f.h5"],
    ["predict", "linear.h5", "{data}", "-o", "p.csv"],
], ids=["inspect", "evaluate", "predict", "compress", "resume", "reference", "fit DATA", "predict DATA"])
def test_an_unreadable_input_is_one_line_with_exit_1(small, tmp_path, args):
    """A run file of mode 000 was a click usage error (exit 2: "File 'run.h5' is not readable"), while the README
    gives exit 1 for an unreadable run file; a data file alike."""
    for name in ("train.csv", "linear.h5"):
        shutil.copy(small / name, tmp_path / name)
    shutil.copy(small / "linear.h5", tmp_path / "locked.h5")
    shutil.copy(small / "train.csv", tmp_path / "locked.csv")
    for name in ("locked.h5", "locked.csv"):
        (tmp_path / name).chmod(0)
    proc = slang(*(a.format(run="locked.h5", data="locked.csv") for a in args), cwd=tmp_path, as_user=True)
    locked = "locked.csv" if "{data}" in args else "locked.h5"
    one_line(proc, 1, f"slang: error: {locked}", "ermission denied")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["linear.h5", "locked.csv", "locked.h5", "train.csv"]


# Run in a fresh process: h5py makes each string converter once per process, and a test process has made them all.
_CONVERTERS = """
import io, logging
import h5py, numpy as np
made = []
debug = logging.Logger.debug
logging.Logger.debug = lambda self, msg, *a, **k: (made.append(msg), debug(self, msg, *a, **k))
from slangcli.runfile.outputs import signals_raise
with signals_raise():
    before = len(made)  # (the handlers are in place from here)
    with h5py.File(io.BytesIO(), "w") as f:
        f.attrs["encoding-type"] = "slang-predictions"
        f.create_dataset("predicted", data=np.array(["yes", "no"], dtype=h5py.string_dtype()))
        f.attrs["encoding-type"], f["predicted"].asstr()[()]
print(sum("converter" in str(m) for m in made[before:]))
"""


def test_h5py_makes_no_string_converter_while_signals_raise():
    """While signals are exceptions, h5py makes no converter of string data: it makes each on its first use, from a
    libhdf5 callback that prints the traceback of an exception raised there, and a SIGTERM that arrived at that
    point (the first string attribute of a prediction file) printed one before the command's one-line message."""
    out = subprocess.run([sys.executable, "-c", _CONVERTERS], capture_output=True, text=True, env=ENV, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0"
