"""Tests of the run-file format (``slangcli.runfile.io``): round trip, encoding attributes, rejection, atomic writes.

Invalid files are made by editing copies of a valid run file with h5py in ``r+`` mode; every rejection must be a
one-line ``FormatError`` whose message starts with the file name as given.
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import h5py
import numpy as np
import pytest

from click.testing import CliRunner
from conftest import binary_problem

import slangcli.runfile.io
from slangcli.cli import main
from slangcli.errors import FormatError
from slangcli.runfile.io import FORMAT_VERSION, read_run, write_run

GROUPS = {"/", "/data", "/data/schema", "/model", "/posterior", "/history", "/metrics"}


def assert_arrays_identical(a, b):
    """Same dtype, shape and bits."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype
    assert a.shape == b.shape
    assert a.tobytes() == b.tobytes()


def format_error(path) -> str:
    """The message of the FormatError ``read_run(path)`` raises; checks it names the file and is one line."""
    with pytest.raises(FormatError) as info:
        read_run(str(path))
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    assert "\n" not in message
    return message


def tmp_leftovers(directory):
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


# ------------------------------------------------------------------------------------------------ round trip


def test_round_trip_keeps_every_field(fitted_run, tmp_path):
    path = tmp_path / "run.h5"
    write_run(path, fitted_run)
    back = read_run(path)

    for name in ("mean", "U", "d"):
        assert_arrays_identical(getattr(back.posterior, name), getattr(fitted_run.posterior, name))
    assert type(back.posterior) is type(fitted_run.posterior)
    assert_arrays_identical(back.prior_precision, fitted_run.prior_precision)

    assert back.model.sizes == fitted_run.model.sizes
    assert back.model.activation == fitted_run.model.activation
    assert back.model.likelihood == fitted_run.model.likelihood
    assert back.model.noise_precision == fitted_run.model.noise_precision

    assert back.config == fitted_run.config
    assert back.data == fitted_run.data
    assert back.metrics == fitted_run.metrics
    assert back.command == fitted_run.command
    assert back.meta == fitted_run.meta

    assert set(back.history) == set(fitted_run.history) == {"epoch", "step", "nll", "seconds", "kl"}
    for name, arr in fitted_run.history.items():
        assert_arrays_identical(back.history[name], arr)
    # the fixture standardises and splits, so all four preprocessing arrays are present
    assert set(back.arrays) == set(fitted_run.arrays) == {"train_index", "test_index", "feature_mean",
                                                          "feature_scale"}
    for name, arr in fitted_run.arrays.items():
        assert_arrays_identical(back.arrays[name], arr)


def test_every_group_carries_encoding_attributes(run_file):
    with h5py.File(run_file, "r") as f:
        groups = {"/": f}

        def collect(name, obj):  # returns None: visititems stops at the first non-None result
            if isinstance(obj, h5py.Group):
                groups[obj.name] = obj

        f.visititems(collect)
        assert set(groups) == GROUPS
        for name, group in groups.items():
            assert "encoding-type" in group.attrs, name
            assert group.attrs["encoding-version"] == FORMAT_VERSION, name
        assert f.attrs["encoding-type"] == "slang-run"
        assert f["posterior"].attrs["encoding-type"] == "lowrank-gaussian"


def test_newer_minor_version_is_read(run_file):
    with h5py.File(run_file, "r+") as f:
        f.attrs["encoding-version"] = "1.9"
        f["posterior"].attrs["encoding-version"] = "1.3"
    assert read_run(run_file).posterior.mean.shape == (4,)


# ------------------------------------------------------------------------------------------------ rejection


def _set_root_version(f):
    f.attrs["encoding-version"] = "2.0"


def _set_posterior_version(f):
    f["posterior"].attrs["encoding-version"] = "2.0"


def _unknown_posterior_type(f):
    f["posterior"].attrs["encoding-type"] = "kfac-gaussian"


def _delete_d(f):
    del f["posterior/d"]


def _short_mean(f):
    mean = f["posterior/mean"][()]
    del f["posterior/mean"]
    f["posterior"].create_dataset("mean", data=mean[:-1])


def _nan_mean(f):
    mean = f["posterior/mean"][()]
    mean[1] = np.nan
    f["posterior/mean"][...] = mean


def _zero_d(f):
    d = f["posterior/d"][()]
    d[0] = 0.0
    f["posterior/d"][...] = d


def _negative_d(f):
    f["posterior/d"][...] = -f["posterior/d"][()]


def _no_encoding_type(f):
    del f.attrs["encoding-type"]


def _array_encoding_type(f):
    # (a damaged file's attribute as an array: compared elementwise, it raised "the truth value of an array ...")
    f.attrs["encoding-type"] = np.array([1, 2, 3])


def _edit_json(where, name, edit):
    """A corruption that rewrites the JSON attribute ``where.attrs[name]`` with ``edit(value) -> value``."""

    def corrupt(f):
        f[where].attrs[name] = json.dumps(edit(json.loads(f[where].attrs[name])))

    corrupt.__name__ = f"_{name}_{edit.__name__}"
    return corrupt


def _replace(name, value):
    def corrupt(f):
        if name in f:
            del f[name]
        f.create_dataset(name, data=value)

    corrupt.__name__ = f"_{name.replace('/', '_')}_{np.asarray(value).dtype}_{np.shape(value)}"
    return corrupt


def _command_not_a_list(f):
    f.attrs["command"] = '"2.0"'


def _config_a_list(f):
    f.attrs["config"] = "[]"


def _u_a_group(f):
    del f["posterior/U"]
    f["posterior"].create_group("U")


def no_train_path(provenance):
    del provenance["train"]["path"]
    return provenance


def split_without_fraction(provenance):
    del provenance["test"]["test_fraction"]
    return provenance


def null_test(value):
    value["test"] = None
    return value


def three_classes(provenance):
    provenance["labels"]["classes"] = ["no", "yes", "maybe"]
    return provenance


def mixed_classes(provenance):
    provenance["labels"]["classes"] = ["no", 1]
    return provenance


def no_train(metrics):
    del metrics["train"]
    return metrics


# The fuzzer (test_fuzz.py) found each of these accepted by read_run, then crashing inspect or evaluate with a
# traceback (TypeError, AttributeError, KeyError, IndexError or ZeroDivisionError).
FOUND_BY_FUZZING = [
    (_command_not_a_list, ["/ attribute 'command' is not a JSON array of strings"]),
    (_config_a_list, ["/ attribute 'config' is not a JSON object"]),
    (_u_a_group, ["/posterior/U must have shape (4, L)"]),
    (_replace("data/test_index", np.full(10, 1.0)), ["/data/test_index must list rows of the training data",
                                                     "(integers from 0 to 39)"]),
    (_replace("data/test_index", np.full(10, 40)), ["/data/test_index must list rows"]),
    (_replace("data/train_index", np.zeros(0, dtype=np.int64)), ["/data/train_index must list rows"]),
    (_replace("data/target_scale", np.float64(0.0)), ["/data/target_scale has shape (), expected (1,)"]),
    (_replace("data/feature_scale", np.zeros(3)), ["/data/feature_scale must be positive"]),
    (_replace("history/nll", np.zeros((2, 2))), ["/history/nll has shape (2, 2), expected one value per epoch"]),
    (_edit_json("data", "provenance", no_train_path), ["/data provenance 'train' lacks 'path' (a string)"]),
    (_edit_json("data", "provenance", split_without_fraction),
     ["/data provenance 'test' lacks 'uci_split', or 'test_fraction' and 'split_seed'"]),
    (_edit_json("data", "provenance", three_classes),
     ["/data provenance lists 3 label classes, the bernoulli model has 2"]),
    (_edit_json("data", "provenance", mixed_classes), ["/data provenance: label classes must be all numbers or"]),
    (_edit_json("metrics", "metrics", no_train),
     ["/metrics attribute 'metrics' lacks 'train' (the training -ELBO per example)"]),
    (_edit_json("metrics", "metrics", null_test), ["/metrics attribute 'metrics' 'test' lacks 'nll' or 'accuracy'"]),
]


@pytest.mark.parametrize(
    "corrupt, expected",
    FOUND_BY_FUZZING + [
        (_set_root_version, ["written by slang file format 2.0", "reads format 1.x"]),
        (_set_posterior_version, ["written by slang file format 2.0", "reads format 1.x"]),
        (_unknown_posterior_type, ["/posterior", "unknown encoding-type", "kfac-gaussian"]),
        (_delete_d, ["missing dataset /posterior/d"]),
        (_short_mean, ["/posterior/mean has shape (3,), expected (4,)"]),
        (_nan_mean, ["/posterior/mean", "non-finite"]),
        (_zero_d, ["/posterior/d must be positive"]),
        (_negative_d, ["/posterior/d must be positive"]),
        (_no_encoding_type, ["not a slang run file"]),
        (_array_encoding_type, ["not a slang run file"]),
    ],
    ids=lambda v: v.__name__.strip("_") if callable(v) else None,
)
def test_invalid_run_file_is_a_format_error(run_file, corrupt, expected):
    with h5py.File(run_file, "r+") as f:
        corrupt(f)
    message = format_error(run_file)
    for text in expected:
        assert text in message


def test_hdf5_file_that_is_not_a_run(tmp_path):
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(3.0))
    assert "not a slang run file" in format_error(path)


def test_non_hdf5_file(tmp_path):
    path = tmp_path / "notes.h5"
    path.write_text("a text file, not HDF5\n")
    assert "not an HDF5 file" in format_error(path)


def test_nonexistent_path(tmp_path):
    assert "no such file" in format_error(tmp_path / "absent.h5")


# ------------------------------------------------------------------------------------------------ atomic write


@pytest.fixture
def failing_write(monkeypatch, tmp_path):
    """Make ``write_run`` raise ``exc_type`` while writing the last attribute (the metrics), after the temporary
    file exists; returns a list that records the temporary files seen at that moment."""
    seen = []
    original = slangcli.runfile.io._json_attr

    def install(exc_type):
        def json_attr(obj, name, value):
            if name == "metrics":
                seen.extend(tmp_leftovers(tmp_path))
                raise exc_type("disk full (simulated)")
            original(obj, name, value)

        monkeypatch.setattr(slangcli.runfile.io, "_json_attr", json_attr)
        return seen

    return install


@pytest.mark.parametrize("exc_type", [OSError, KeyboardInterrupt])
def test_failed_write_leaves_nothing(fitted_run, tmp_path, failing_write, exc_type):
    seen = failing_write(exc_type)
    target = tmp_path / "run.h5"
    with pytest.raises(exc_type, match="simulated"):
        write_run(target, fitted_run)
    assert len(seen) == 1  # the failure did happen midway, with the temporary file in place
    assert not target.exists()
    assert tmp_leftovers(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_failed_write_keeps_existing_file(fitted_run, run_file, failing_write):
    before = run_file.read_bytes()
    failing_write(OSError)
    with pytest.raises(OSError, match="simulated"):
        write_run(run_file, fitted_run)
    assert run_file.read_bytes() == before
    assert tmp_leftovers(run_file.parent) == []
    assert read_run(run_file).metrics == fitted_run.metrics


def test_write_replaces_existing_file(fitted_run, run_file):
    run_file.write_bytes(b"stale")
    write_run(run_file, fitted_run)
    assert read_run(run_file).command == fitted_run.command
    assert tmp_leftovers(run_file.parent) == []


def test_written_file_respects_umask(fitted_run, tmp_path):
    old = os.umask(0o022)
    try:
        write_run(tmp_path / "run.h5", fitted_run)
    finally:
        os.umask(old)
    assert (tmp_path / "run.h5").stat().st_mode & 0o777 == 0o644


def test_a_file_on_which_libhdf5_loops_forever_is_a_format_error(run_file, monkeypatch):
    """Zeroing the global-heap object header of a string attribute makes libhdf5 loop forever reading it; the
    reader's forked child is stopped after READ_SECONDS and the file reported as corrupted."""
    import time

    from slangcli.runfile import io
    data = bytearray(run_file.read_bytes())
    at = data.index(b"slang-run", data.index(b"GCOL"))
    data[at - 16 : at] = bytes(16)
    run_file.write_bytes(bytes(data))
    monkeypatch.setattr(io, "READ_SECONDS", 1.0)
    start = time.monotonic()
    with pytest.raises(FormatError, match="did not finish reading it within 1 s"):
        io.read_run(run_file)
    assert time.monotonic() - start < 5


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the isolated read needs fork")
def test_a_read_that_crashes_is_a_format_error_and_this_process_lives_on(run_file, monkeypatch):
    """libhdf5 crashes on some corrupted files, not always the same way twice, so the file is read only in the
    forked child: a crash there names the file and its signal, and this process never reads the file itself (if it
    did, the crash below would end the test run)."""
    from slangcli.runfile import io

    def crash(reader):
        os.kill(os.getpid(), signal.SIGSEGV)

    monkeypatch.setattr(io._Reader, "read_here", crash)
    with pytest.raises(FormatError, match=rf"^{re.escape(str(run_file))}: corrupted: libhdf5 crashed reading it "
                                          rf"\(signal {int(signal.SIGSEGV)}\)$"):
        read_run(run_file)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the isolated read needs fork")
def test_an_unexpected_exception_in_the_reading_child_is_raised_as_itself(run_file, monkeypatch):
    from slangcli.runfile import io

    def defect(reader):
        raise ZeroDivisionError("a defect of the reader")

    monkeypatch.setattr(io._Reader, "read_here", defect)
    with pytest.raises(ZeroDivisionError, match="a defect of the reader"):
        read_run(run_file)


def test_a_read_in_this_process_gives_the_run_the_isolated_read_gives(run_file):
    isolated, here = read_run(run_file), read_run(run_file, isolated=False)
    assert isolated.config == here.config and isolated.metrics == here.metrics
    for name, values in isolated.posterior.stored_arrays().items():
        np.testing.assert_array_equal(values, here.posterior.stored_arrays()[name])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the isolated read needs fork")
def test_an_interrupted_read_ends_its_child(run_file, monkeypatch):
    """A Ctrl-C while the child reads raises KeyboardInterrupt here and leaves no process behind (killed, reaped)."""
    import time

    from slangcli.runfile import io

    children, fork = [], os.fork

    def recorded_fork():
        pid = fork()
        if pid:
            children.append(pid)
        return pid

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    monkeypatch.setattr(io._Reader, "read_here", lambda reader: time.sleep(30))
    monkeypatch.setattr(os, "fork", recorded_fork)
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            read_run(run_file)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - start < 5 and len(children) == 1
    with pytest.raises(ProcessLookupError):  # killed and reaped: no such process any more
        os.kill(children[0], 0)


def test_the_manual_lists_every_key_of_inspect_json(tmp_path):
    """The README names the top-level keys of ``slang inspect --json``; a key added or removed must be documented."""
    X, y = binary_problem(n=40, seed=0)
    np.savetxt(tmp_path / "d.csv", np.column_stack([X, y]), delimiter=",")
    runner = CliRunner()
    assert runner.invoke(main, ["fit", str(tmp_path / "d.csv"), "--epochs", "1", "-o", str(tmp_path / "r.h5")]) \
        .exit_code == 0
    printed = json.loads(runner.invoke(main, ["inspect", str(tmp_path / "r.h5"), "--json"]).stdout)
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    paragraph = readme[readme.index("`slang inspect RUN.h5 --json` prints"):].split("\n\n")[0]
    # the top-level keys are the backticked names not inside parentheses
    top = re.sub(r"\([^()]*(\([^()]*\)[^()]*)*\)", "", paragraph.split("with these keys:")[1])
    assert set(re.findall(r"`(\w+)`", top)) == set(printed), sorted(printed)


@pytest.mark.parametrize("dataset", ["posterior/mean", "data/feature_scale"])
def test_a_flipped_bit_in_a_stored_array_fails_its_checksum(fitted_run, tmp_path, dataset):
    """4 of 60 random bit flips of a run file changed predictions silently, exit 0: the arrays had no checksum.
    Every numeric array now carries HDF5's Fletcher-32 checksum, and a flipped bit in one is a FormatError."""
    path = tmp_path / "run.h5"
    write_run(path, fitted_run)
    with h5py.File(path, "r") as f:
        assert all(f[name].fletcher32 for name in ("posterior/mean", "posterior/U", "data/feature_mean"))
        offset = f[dataset].id.get_chunk_info(0).byte_offset
    read_run(path)
    with open(path, "r+b") as fh:
        fh.seek(offset + 3)
        byte = fh.read(1)[0]
        fh.seek(offset + 3)
        fh.write(bytes([byte ^ 0x08]))
    assert "corrupted: an array fails its checksum" in format_error(path)
