"""The command line as an operations user drives it: signals a command started with ignored (``nohup``, a shell's
background job), outputs named by a descriptor (``-o /dev/stdout``), replaced files' permissions, data read once
from a descriptor's name or a closed standard input, empty output names, narrow or zero COLUMNS, the BLAS libraries
listed in any order, and a diverging fit whose checkpoint slang must be able to read back."""

from __future__ import annotations

import json
import os
import resource
import signal
import stat
import subprocess
import sys
import time

import numpy as np
import pytest

from slangcli.runfile import provenance
from slangcli.runfile.io import read_run
from slangcli.runfile.outputs import signals_raise
from test_reliability import ENV, leftovers, one_error, slang, small  # noqa: F401  (small: a fixture)


def test_a_signal_ignored_at_start_stays_ignored():
    """``nohup`` ignores SIGHUP, and a non-interactive shell's background job SIGINT, before the command starts:
    the command's handlers replaced them, so a closed terminal or the terminal's Ctrl-C stopped the job."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with signals_raise():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_IGN, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGHUP)  # ignored: nothing is raised
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_a_fit_started_with_sighup_and_sigint_ignored_survives_them(small, tmp_path):
    """Through the whole command (reading, training with its checkpoint handlers, scoring, writing), SIGHUP and
    SIGINT every 20 ms: the fit completes, exit 0."""
    def ignore():
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    proc = subprocess.Popen([sys.executable, "-m", "slangcli", "fit", small / "train.csv", "--hidden", "8",
                             "--epochs", "300", "--checkpoint-every", "50", "-o", tmp_path / "r.h5", "--no-progress"],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV,
                            preexec_fn=ignore)
    sent = 0
    while proc.poll() is None:
        time.sleep(0.02)
        try:
            proc.send_signal(signal.SIGHUP)
            proc.send_signal(signal.SIGINT)
            sent += 1
        except ProcessLookupError:
            break
    err = proc.stderr.read()
    proc.wait()
    assert proc.returncode == 0 and sent > 10, err
    assert read_run(tmp_path / "r.h5").status == "complete"


def test_an_output_named_by_a_descriptor_is_refused_and_the_file_behind_it_kept(small, tmp_path):
    """``-o /dev/stdout >> log.txt`` renamed the predictions onto log.txt: what it held was gone, exit 0."""
    log = tmp_path / "log.txt"
    log.write_text("precious\n")
    (tmp_path / "out").symlink_to("/dev/fd/1")
    for target in ("/dev/stdout", "/proc/self/fd/1", "out"):
        with open(log, "a") as stdout:
            result = slang("predict", small / "linear.h5", small / "train.csv", "-o", target, cwd=tmp_path,
                           stdout=stdout)
        one_error(result, 2, "a descriptor this process has open", "-o -")
        assert log.read_text() == "precious\n", target
    assert leftovers(tmp_path) == []


def test_a_replaced_output_keeps_its_permissions(small, tmp_path):
    for name, command in (("p.csv", ["predict", small / "linear.h5", small / "train.csv"]),
                          ("r.h5", ["fit", small / "train.csv", "--epochs", "2", "--no-progress"])):
        path = tmp_path / name
        path.write_text("old\n")
        path.chmod(0o600)
        assert slang(*command, "-o", path, cwd=tmp_path).returncode == 0
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, name
    fresh = tmp_path / "new.csv"
    assert slang("predict", small / "linear.h5", small / "train.csv", "-o", fresh, cwd=tmp_path).returncode == 0
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_data_read_from_a_descriptors_name_is_recorded_as_read_once(small, tmp_path):
    """``slang fit /dev/stdin < file`` recorded /dev/stdin as the training file: evaluate then compared the sha256
    of whatever its own standard input was (or waited on the terminal)."""
    with open(small / "train.csv") as data:
        fitted = slang("fit", "/dev/stdin", "--epochs", "2", "--test-fraction", "0.3", "-o", "r.h5",
                       "--no-progress", cwd=tmp_path, stdin=data)
    assert fitted.returncode == 0, fitted.stderr
    assert read_run(tmp_path / "r.h5").data["train"]["stream"] is True
    evaluated = slang("evaluate", "r.h5", cwd=tmp_path, stdin=subprocess.DEVNULL)
    one_error(evaluated, 2, "read from a pipe or stream (/dev/stdin)", "pass the data explicitly")
    assert slang("evaluate", "r.h5", small / "train.csv", cwd=tmp_path).returncode == 0


def _idx_files(folder, pipe=None):
    """A small IDX images file and its labels file in ``folder``, the one named by ``pipe`` a FIFO that a thread
    writes to (the thread returned)."""
    import threading

    from test_data_formats import idx_bytes

    rng = np.random.default_rng(0)
    images, labels = rng.integers(0, 256, size=(40, 3, 4)), np.arange(40) % 2
    writer = None
    for part, name, content in (("images", "toy-images-idx3-ubyte", idx_bytes(images)),
                                ("labels", "toy-labels-idx1-ubyte", idx_bytes(labels))):
        if part == pipe:
            os.mkfifo(folder / name)
            writer = threading.Thread(target=(folder / name).write_bytes, args=(content,), daemon=True)
            writer.start()
        else:
            (folder / name).write_bytes(content)
    return writer


def test_idx_images_from_a_pipe_are_recorded_as_read_once(tmp_path):
    """IDX images read from a FIFO were recorded as an ordinary file: evaluate opened the FIFO again and waited for a
    writer that never comes."""
    writer = _idx_files(tmp_path, pipe="images")
    fitted = slang("fit", "toy-images-idx3-ubyte", "--epochs", "2", "--test-fraction", "0.25", "-o", "r.h5",
                   "--no-progress", cwd=tmp_path)
    writer.join(timeout=10)
    assert fitted.returncode == 0, fitted.stderr
    assert read_run(tmp_path / "r.h5").data["train"]["stream"] is True
    evaluated = slang("evaluate", "r.h5", cwd=tmp_path, stdin=subprocess.DEVNULL)
    one_error(evaluated, 2, "read from a pipe or stream", "pass the data explicitly")


def test_idx_labels_from_a_pipe_are_recorded_as_read_once(tmp_path):
    from slangcli.data.readers import read_idx, read_once
    from slangcli.data.sources import recorded_files

    writer = _idx_files(tmp_path, pipe="labels")
    table = read_idx(tmp_path / "toy-images-idx3-ubyte", tmp_path / "toy-labels-idx1-ubyte")
    writer.join(timeout=10)
    assert table.provenance["labels_stream"] is True and "stream" not in table.provenance
    assert read_once(table.provenance)
    assert [path for path, _ in recorded_files(table.provenance)] == [str(tmp_path / "toy-images-idx3-ubyte")]


@pytest.mark.parametrize("args", [["-"], ["/dev/stdin"], ["train.csv", "--test", "-"]],
                         ids=["dash", "descriptor", "test"])
def test_a_sweep_refuses_data_from_a_stream(small, tmp_path, args):
    """Each fit of a sweep reads its data on a worker, by name: a pipe handed to two fits gave the second none."""
    (tmp_path / "train.csv").write_bytes((small / "train.csv").read_bytes())
    with open(small / "train.csv") as data:
        result = slang("sweep", *args, "--seed", "0,1", "--epochs", "2", "-o", "out", cwd=tmp_path, stdin=data)
    one_error(result, 2, "is a stream", "write it to a file")
    assert not (tmp_path / "out").exists()


def test_standard_input_closed_is_said_in_one_line(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "slangcli", "fit", "-", "-o", "x.h5"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            preexec_fn=lambda: os.close(0))
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in err
    one_error(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), 1, "standard input is closed")
    assert not (tmp_path / "x.h5").exists()


@pytest.mark.parametrize("command", [["sweep", "{data}", "--epochs", "2"], ["compress", "{mlp}", "--rank", "1,2"]])
@pytest.mark.parametrize("output, words", [("", "empty"), ("-", "'-'")])
def test_an_empty_or_dash_output_is_refused(small, tmp_path, command, output, words):
    """An unset $OUT made ``sweep -o ''`` write its table and runs into the working directory, and ``compress
    --rank 1,2 -o ''`` files named -k1 and -k2."""
    args = [a.format(data=small / "train.csv", mlp=small / "mlp.h5") for a in command]
    one_error(slang(*args, "-o", output, cwd=tmp_path), 2, words)
    assert sorted(os.listdir(tmp_path)) == []


@pytest.mark.parametrize("columns", ["0", "20"])
def test_a_small_columns_loses_no_output(small, tmp_path, columns):
    """COLUMNS=0 printed nothing of evaluate's table (exit 0), and COLUMNS=20 cut its numbers to ``0.4…`` in a log."""
    result = subprocess.run([sys.executable, "-m", "slangcli", "evaluate", small / "linear.h5", small / "train.csv"],
                            cwd=tmp_path, capture_output=True, text=True, env={**ENV, "COLUMNS": columns})
    assert result.returncode == 0 and "nll" in result.stderr.lower(), result.stderr
    assert "…" not in result.stderr


def test_the_blas_libraries_compare_in_any_order():
    """threadpoolctl lists the loaded BLAS libraries in an order that varies between processes: half the resumes
    in one environment warned that the BLAS had changed."""
    libraries = [{"internal_api": "openblas", "version": "0.3.30"}, {"internal_api": "openblas", "version": "0.3.31"}]
    assert provenance._blas_text(libraries) == provenance._blas_text(libraries[::-1])
    now = provenance.environment()["blas"]
    meta = {"versions": provenance.versions(), "environment": {"blas": now[::-1]}}
    assert provenance.version_change(meta) is None
    assert now == sorted(now, key=lambda lib: provenance.json.dumps(lib, sort_keys=True, default=str))


@pytest.mark.parametrize("method, lr, words", [("bbb", "1000", ("beyond 300", "log_sigma")),
                                              ("ktied", "200", ("beyond 150", "log_scale"))])
def test_a_diverging_fit_writes_no_checkpoint_slang_cannot_read(small, tmp_path, method, lr, words):
    """Bayes by Backprop at --lr 1000: its log standard deviations reached 1e8 at the first step, finite, and the
    checkpoint of that step replaced the output; every command then refused the file (``log_sigma must lie in
    [-300, 300]``). That step is now the divergence, and the file before the fit is kept. k-tied's standard
    deviations are products of two scales, each bounded by half."""
    run = tmp_path / "r.h5"
    run.write_bytes((small / "linear.h5").read_bytes())
    result = slang("fit", small / "train.csv", "--hidden", "4", "--method", method, "--lr", lr, "--epochs", "20",
                   "--checkpoint-every", "1", "-o", run, "--no-progress", cwd=tmp_path)
    one_error(result, 1, "diverged", *words)
    assert run.read_bytes() == (small / "linear.h5").read_bytes()


def test_a_headerless_test_file_from_a_pipe_is_read_once(small, tmp_path):
    """A --test file without a header row, given as -, beside a training file with one: the reader looked for the
    target's name in it, then read it again by position from the exhausted pipe ('-: file is empty')."""
    rows = (small / "train.csv").read_text().splitlines()[1:]
    (tmp_path / "test.csv").write_text("\n".join(rows[:20]) + "\n")
    with open(tmp_path / "test.csv") as test:
        result = slang("fit", small / "train.csv", "--test", "-", "--epochs", "2", "-o", "r.h5", "--json",
                       "--no-progress", cwd=tmp_path, stdin=test)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["metrics"]["test"]["n"] == 20


def test_one_stream_as_both_data_and_test_is_refused(small, tmp_path):
    """- and /dev/stdin are one stream: the test rows would be none (or, read again, the training rows)."""
    with open(small / "train.csv") as data:
        result = slang("fit", "/dev/stdin", "--test", "-", "--epochs", "2", "-o", "r.h5", cwd=tmp_path, stdin=data)
    one_error(result, 2, "/dev/stdin and -, one stream, can be read only once")
    assert not (tmp_path / "r.h5").exists()


def test_an_interrupt_whose_checkpoint_cannot_be_written_says_both(small, tmp_path):
    """A full disk (here the file-size limit) when Ctrl-C's checkpoint is written ended with exit 1 and only 'no
    space left on device': the interrupt went unsaid. It is now the interrupt's exit, 130, naming both."""
    def child():
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))

    proc = subprocess.Popen([sys.executable, "-m", "slangcli", "fit", small / "train.csv", "--hidden", "64",
                             "--epochs", "100000", "-o", "out.h5", "--no-progress"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV, preexec_fn=child)
    lines = []
    for line in proc.stderr:  # the task's note comes once the data are read, before the training
        lines.append(line)
        if "task:" in line:
            break
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    err = "".join(lines) + proc.stderr.read()
    proc.wait(timeout=120)
    assert proc.returncode == 130, err
    one_error(subprocess.CompletedProcess(proc.args, 130, "", err), 130, "interrupted, and its checkpoint could not "
              "be written", "file-size limit", "(SIGINT)")
    assert sorted(os.listdir(tmp_path)) == []
