"""Data at scale: every pass over the rows in blocks, input without end, signals during long passes, and sizes
checked before they are allocated.

Memory is measured in two ways that do not depend on the machine: the peak that ``tracemalloc`` sees (NumPy reports
its arrays to it, so it counts every array and Python object, and no library's private buffers), and, for the command
line, the difference between the peak resident memory of two runs that differ only in the size of the data.
"""

from __future__ import annotations

import fcntl
import os
import re
import resource
import signal
import struct
import subprocess
import sys
import termios
import time
import tracemalloc

import numpy as np
import pytest

from slangcli.data.readers import read_table
from slangcli.gaussian.posteriors import LowRankGaussian
from slangcli.models import MLP
from slangcli.predictive import evaluation

MB = 1 << 20
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
# a limit on the address space of the commands that, before, read without end: they then fail (out of memory)
# instead of taking the machine's memory
LIMIT = 1 << 30


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def slang(*args, cwd, before="", **kw):
    """``python -m slangcli ARGS`` in ``cwd`` under ``LIMIT`` (``before``: Python run first in its process, to
    lower a limit); a Popen."""
    code = f"{before}from slangcli.__main__ import main; main(prog_name='slang')"
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=cwd, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True, env=ENV, preexec_fn=_limited, **kw)


def finished(proc, seconds=60):
    """``(exit code, stderr)`` of ``proc``, killed after ``seconds`` (exit code None)."""
    try:
        _, err = proc.communicate(timeout=seconds)
        return proc.returncode, err
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        return None, err


def traced_peak(function, *args, **kwargs):
    """``(result, peak bytes)`` of ``function(*args, **kwargs)`` as tracemalloc sees it (beyond what was held
    before the call)."""
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        result = function(*args, **kwargs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak - before


def _logistic_regression(n, seed=0):
    """A logistic-regression posterior of 1 feature and ``n`` rows of data for it."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 1))
    y = (X[:, 0] + 0.5 * rng.standard_normal(n) > 0).astype(float)
    model = MLP((1, 1), likelihood="bernoulli")
    posterior = LowRankGaussian(mean=np.array([1.5, -0.2]), U=np.array([[2.0], [0.5]]), d=np.array([4.0, 9.0]))
    return model, posterior, X, y


def test_scoring_a_logistic_regression_takes_memory_of_the_data_not_of_rows_times_quadrature_nodes():
    """The final -ELBO and the test predictive of a logistic regression are one-dimensional quadratures per row:
    done over all rows at once they held rows x 96 nodes in several temporaries (15.7 GB for a fit of ten million
    rows); in blocks they hold a few vectors of the rows and one block's temporaries."""
    n = 400_000
    model, posterior, X, y = _logistic_regression(n)
    out, peak = traced_peak(evaluation.score, model, posterior, np.ones(2), X_train=X, y_train=y, X_test=X, y_test=y)
    assert 0.5 < out["test"]["accuracy"] <= 1 and np.isfinite(out["train"]["neg_elbo_per_example"])
    # a rows x 96 float64 temporary alone is 307 MB; the vectors of the rows take 3.2 MB each
    assert peak < 96 * MB, f"{peak / MB:.0f} MB"


@pytest.mark.parametrize("kind", ["csv", "libsvm"])
def test_reading_a_file_holds_its_table_and_a_block_of_text(tmp_path, kind):
    """200 000 rows of one feature and a label (a 3.2 MB table): read whole, split into lines and cells as Python
    strings, the file took 63 MB (CSV) and 79 MB (LIBSVM) at the peak; parsed a block at a time, the table (built
    from its blocks) and one block of text."""
    n = 200_000
    x = np.random.default_rng(0).standard_normal(n)
    if kind == "csv":
        text = "x,label\n" + "".join(f"{v:.6f},{int(v > 0)}\n" for v in x)
    else:
        text = "".join(f"{'+1' if v > 0 else '-1'} 1:{v:.6f}\n" for v in x)
    path = tmp_path / f"data.{kind}"
    path.write_text(text)
    table, peak = traced_peak(read_table, path)
    assert table.X.shape == (n, 1) and np.array_equal(table.X[:, 0], np.round(x, 6))
    data = table.X.nbytes + table.y.nbytes
    assert peak < 10 * data, f"{peak / MB:.1f} MB for a table of {data / MB:.1f} MB"


@pytest.mark.parametrize("likelihood", ["auto", "gaussian"])
def test_preparing_data_takes_the_prepared_arrays_and_a_block(likelihood):
    """Standardising 500 000 rows of 10 features (38 MB) took 80 MB beside the data: a temporary copy for the
    standard deviations, one for the centred features and the result; the targets' coding and scaling took copies
    of the targets. Now the result and a block of rows (and the sums bit for bit as NumPy's)."""
    from slangcli.data.prepare import prepare

    rng = np.random.default_rng(0)
    X = 3 * rng.standard_normal((500_000, 10)) + 1
    y = X[:, 0] > 1 if likelihood == "auto" else 2 * X[:, 1] + 1
    prepared, peak = traced_peak(prepare, X, y, standardize=True, likelihood=likelihood)
    # (equal bit for bit with the NumPy versions measured; to rounding whatever NumPy's order of summation)
    np.testing.assert_allclose(prepared.arrays["feature_scale"], X.std(axis=0), rtol=1e-13)
    assert peak < X.nbytes + 3 * 8 * len(y) + 4 * MB, f"{peak / MB:.0f} MB for {X.nbytes / MB:.0f} MB of features"


def test_a_fit_takes_memory_of_its_data_and_of_blocks(tmp_path):
    """A standardised logistic regression on 100 000 rows of 3 features (a 3.2 MB table), with a test split: every
    pass over the rows (reading, the split, the standardisation, the checks of the features, the final scores) in
    blocks. 125 MB at the peak before (the final scores' quadrature over all rows above all), 35 MB now."""
    from slangcli.data.sources import DataOptions
    from slangcli.training.fitting import fit

    rng = np.random.default_rng(0)
    X = rng.standard_normal((100_000, 3))
    path = tmp_path / "data.csv"
    path.write_text("a,b,c,label\n" + "".join(f"{a:.5f},{b:.5f},{c:.5f},{int(a - b > 0)}\n" for a, b, c in X))
    run, peak = traced_peak(fit, DataOptions(path=str(path), test_fraction=0.2, standardize=True), iterations=5)
    assert run.metrics["test"]["n"] == 20_000
    assert peak < 64 * MB, f"{peak / MB:.0f} MB"


def test_the_warm_up_residual_of_a_learned_noise_precision_takes_a_block_of_activations():
    """A regression network that learns its noise precision takes, at the end of each warm-up epoch, the mean
    squared residual of the posterior mean on every training row: one forward pass held every layer's activations
    of all rows (320 MB for 200 000 rows and 100 hidden units); now a block of rows at a time, the same value."""
    from slangcli.training.learned import mean_residual

    rng = np.random.default_rng(0)
    model = MLP((3, 100, 1), likelihood="gaussian")
    mean = 0.3 * rng.standard_normal(model.n_params)
    X = rng.standard_normal((200_000, 3))
    y = X[:, 0] - X[:, 1]
    value, peak = traced_peak(mean_residual, model, mean, X, y)
    assert peak < 64 * MB, f"{peak / MB:.0f} MB"
    f = np.concatenate([model.forward(mean[None, :], X[lo : lo + 1000])[0][0, :, 0] for lo in range(0, len(X), 1000)])
    assert value == pytest.approx(np.mean((f - y) ** 2), rel=1e-12)
    small = slice(0, 5000)  # within one block: one pass, as before
    assert mean_residual(model, mean, X[small], y[small]) == np.mean(
        (model.forward(mean[None, :], X[small])[0][0, :, 0] - y[small]) ** 2)


def test_writing_predictions_as_csv_takes_a_block_of_rows(tmp_path, monkeypatch):
    """slang predict formatted every cell of every row as Python strings before writing the first (about 0.5 KB
    a row: gigabytes for ten million rows); now a block of rows at a time, and the same file."""
    from slangcli.predictive import tables
    from slangcli.predictive.evaluation import Predictions

    n = 200_000
    rng = np.random.default_rng(0)
    p1 = rng.uniform(size=n)
    arrays = {"probabilities": np.column_stack([1 - p1, p1]), "predicted": (p1 > 0.5).astype(float),
              "entropy_total": rng.uniform(size=n), "entropy_aleatoric": rng.uniform(size=n),
              "entropy_epistemic": rng.uniform(size=n), "target": (rng.uniform(size=n) > 0.5).astype(float)}
    predictions = Predictions(arrays=arrays, classes=[0.0, 1.0], info={"interval": None})
    _, peak = traced_peak(tables.write_predictions, str(tmp_path / "blocks.csv"), predictions)
    assert peak < 24 * MB, f"{peak / MB:.0f} MB"
    monkeypatch.setattr(tables, "_CSV_ROWS", n, raising=False)
    tables.write_predictions(str(tmp_path / "whole.csv"), predictions)
    assert (tmp_path / "blocks.csv").read_bytes() == (tmp_path / "whole.csv").read_bytes()


# ------------------------------------------------------------------------------------------ input without end


@pytest.mark.parametrize("data", ["/dev/urandom", "-"])
def test_a_device_as_data_is_refused(tmp_path, data):
    """/dev/urandom (or /dev/zero on standard input) never ends: read as data it took memory at 0.4 to 1 GB/s
    and ignored SIGINT and SIGTERM. It is refused before it is read, as it is as a run file."""
    with open("/dev/zero", "rb") as zero:
        code, err = finished(slang("fit", data, "-o", "run.h5", cwd=tmp_path, stdin=zero))
    name = "/dev/urandom: is a device" if data != "-" else "-: standard input is a device"
    assert code == 1 and err.startswith(f"slang: error: {name}, not a data file") and len(err.splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where", ["stdin", "fifo"])
def test_a_stream_without_end_is_refused_beyond_the_stream_limit(tmp_path, where):
    """``yes 1,2,0 | slang fit -`` and ``slang fit <(yes 1,2,0)`` read until memory ran out. A stream is read
    within STREAM_LIMIT bytes (1 GiB; lowered to 1 MiB here) and refused beyond it, with a pointer to a file."""
    before = "import slangcli.data.readers._common as c; c.STREAM_LIMIT = 1 << 20; "
    if where == "stdin":
        source = subprocess.Popen(["yes", "1,2,0"], stdout=subprocess.PIPE)
        proc = slang("fit", "-", "-o", "run.h5", cwd=tmp_path, before=before, stdin=source.stdout)
        source.stdout.close()
    else:
        os.mkfifo(tmp_path / "data.csv")
        source = subprocess.Popen("exec yes 1,2,0 > data.csv", shell=True, cwd=tmp_path, stderr=subprocess.DEVNULL)
        proc = slang("fit", "data.csv", "-o", "run.h5", cwd=tmp_path, before=before)
    try:
        code, err = finished(proc)
    finally:
        source.kill()
        source.wait()
    name, kind = ("-", "standard input") if where == "stdin" else ("data.csv", "a pipe")
    assert code == 1 and err == (f"slang: error: {name}: more than 1 MiB from {kind}, the most slang reads from a "
                                 "stream; write the data to a file and give its name\n"), err
    assert not (tmp_path / "run.h5").exists()


def _unread(fd) -> int:
    """Bytes written to the pipe ``fd`` and not yet read from it (FIONREAD works on either end of a Linux pipe)."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="FIONREAD on a pipe's writing end is Linux's")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_a_fit_reads_its_data_stops_it_at_once(tmp_path, sig):
    """A fit reading standard input that has more to come: SIGINT and SIGTERM were only noted, to stop the fit
    after its current training step (none had begun), so the fit went on reading. A signal now stops the reading
    at once: 128 + its number, nothing written."""
    proc = slang("fit", "-", "-o", "run.h5", cwd=tmp_path, stdin=subprocess.PIPE)
    try:
        proc.stdin.write("a,b,label\n" + "1.5,2,0\n-1,0.5,1\n" * 1000)
        proc.stdin.flush()
        deadline = time.monotonic() + 60
        while _unread(proc.stdin.fileno()) and time.monotonic() < deadline:  # slang has read it, and waits for more
            time.sleep(0.01)
        proc.send_signal(sig)
        try:  # standard input stays open: the data may go on
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
    finally:
        proc.kill()
        proc.stdin.close()
        err = proc.stderr.read()
        proc.wait()
    word = "interrupted" if sig == signal.SIGINT else "terminated"
    assert code == 128 + sig, err
    assert err == f"slang: error: {word} while reading the data ({signal.Signals(sig).name}): nothing written\n", err
    assert list(tmp_path.iterdir()) == []


def _signalled_in_training(proc, sig, after: float):
    """Send ``sig`` to the fit ``proc`` ``after`` seconds past its "slang: method:" line (said just before the
    training); its exit code (None if it went on for 10 s) and the rest of its stderr."""
    try:
        lines = []
        while not lines or not lines[-1].startswith("slang: method:"):
            lines.append(proc.stderr.readline())
            assert lines[-1], lines
        time.sleep(after)
        proc.send_signal(sig)
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
    finally:
        proc.kill()
        err = proc.stderr.read()
        proc.wait()
    return code, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_a_fit_scores_its_posterior_stops_it_at_once(tmp_path, sig):
    """The final scores of a fit with --eval-samples 10000000 take hours; a signal then was noted, to stop after a
    training step that never came again, and lost: the fit went on and wrote its run. It now stops the scoring at
    once: 128 + its number, the trained fit kept as a checkpoint at its last step, which --resume scores (the
    training steps take a few milliseconds, so the signal, sent a second after they begin, finds the fit scoring;
    one sent during them would stop it at once as well, before any checkpoint)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 2))
    (tmp_path / "data.csv").write_text("a,b,y\n" + "".join(f"{a:.4f},{b:.4f},{a - b:.4f}\n" for a, b in X))
    proc = slang("fit", "data.csv", "-o", "run.h5", "--hidden", "8", "--iterations", "5", "--test-fraction", "0.25",
                 "--eval-samples", "10000000", "--no-progress", cwd=tmp_path)
    code, err = _signalled_in_training(proc, sig, after=1.0)
    word = "interrupted" if sig == signal.SIGINT else "terminated"
    assert code == 128 + sig, err
    name = signal.Signals(sig).name
    if err.startswith(f"slang: error: {word} while scoring"):
        # the training is kept, as a checkpoint at its last step: --resume only scores it
        assert err == (f"slang: error: {word} while scoring the fitted posterior ({name}); the trained fit (step 5, "
                       "its last) is in run.h5; score it with: slang fit --resume run.h5\n"), err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv", "run.h5"]
        from slangcli.runfile.io import read_run

        kept = read_run(tmp_path / "run.h5")
        assert kept.status == "checkpoint" and kept.state["scalars"]["t"] == 5
    else:
        assert re.fullmatch(rf"slang: error: interrupted at step \d of 5 \({name}\), before any checkpoint: nothing "
                            r"written\n", err), err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stopping_a_fit_without_checkpoints_says_why_nothing_is_written(tmp_path, sig):
    """A fit of --restarts is not checkpointed: SIGINT said only "interrupted", SIGTERM "terminated (SIGTERM):
    nothing written", and neither why (probe 8). Both now say what stopped it, that nothing is written, and why."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 2))
    (tmp_path / "data.csv").write_text("a,b,y\n" + "".join(f"{a:.4f},{b:.4f},{a - b:.4f}\n" for a, b in X))
    proc = slang("fit", "data.csv", "-o", "run.h5", "--hidden", "8", "--epochs", "100000", "--restarts", "3",
                 "--no-progress", cwd=tmp_path)
    code, err = _signalled_in_training(proc, sig, after=0.5)
    word = "interrupted" if sig == signal.SIGINT else "terminated"
    assert code == 128 + sig, err
    assert err == (f"slang: error: {word} ({signal.Signals(sig).name}): nothing written; a fit of --restarts is "
                   "not checkpointed\n"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv"]


# ------------------------------------------------------------------------------------- sizes before allocating


@pytest.fixture(scope="module")
def small_fit():
    """A logistic regression fitted from Python to 40 rows."""
    import slangcli
    from conftest import binary_problem

    X, y = binary_problem()
    return slangcli.fit(X, y, epochs=2), X, y


def test_sampling_more_draws_than_memory_holds_is_refused_before_drawing(small_fit, monkeypatch):
    """FitResult.sample(10**10) drew chunk after chunk into a list until memory gave out; the size is checked
    first (10**10 draws of 4 parameters: 298 GiB), and nothing is drawn."""
    import slangcli.api
    import slangcli.predictive.metrics

    result, _, _ = small_fit

    def drawn(*args, **kwargs):
        raise AssertionError("weight samples were drawn")

    monkeypatch.setattr(slangcli.api, "weight_samples", drawn)
    # (a machine of 64 GiB, whatever this one has)
    monkeypatch.setattr(slangcli.predictive.metrics, "memory_limit", lambda: 64 << 30)
    with pytest.raises(ValueError, match=r"n = 10000000000: 10000000000 draws of 4 parameters take 298 GiB "
                                         r"\(10000000000 x 4 x 8 bytes\), more than the 64 GiB of memory this "
                                         r"process can have"):
        result.sample(10**10)


def test_a_sample_within_memory_is_the_draws_of_predict(small_fit):
    result, _, _ = small_fit
    draws = result.sample(130, seed=3)
    from slangcli.predictive.metrics import weight_samples

    np.testing.assert_array_equal(draws, np.concatenate(list(weight_samples(result.posterior, 3, 130))))


@pytest.mark.parametrize("call", ["predict", "score", "fit"])
def test_predictive_sample_counts_beyond_the_command_lines_limit_are_refused_in_python(small_fit, call):
    """The command line refuses more than 10 million predictive samples (--samples, --eval-samples) before
    anything is drawn; the Python API took any count (a regression's predictive then allocated samples x rows).
    It refuses them too, with the option's name, even where the count would go unused (logistic regression's
    predictive is exact)."""
    import slangcli
    from slangcli.errors import ConfigError

    result, X, y = small_fit
    option = "eval_samples" if call == "fit" else "samples"  # (the keywords passed, not the command line's flags)
    with pytest.raises(ConfigError, match=f"^{option} must be a whole number from 1 to 10000000, got 10000000000"):
        if call == "predict":
            result.predict(X, samples=10**10)
        elif call == "score":
            result.score(X, y, samples=10**10)
        else:
            slangcli.fit(X, y, epochs=1, eval_samples=10**10)


def test_a_steps_weight_samples_beyond_memory_are_a_usage_error(tmp_path):
    """slang fit --method bbb --samples 10000000000 drew the step's samples until memory ran out; the count is
    checked against the memory this process can have before the fit starts (exit 2, one line)."""
    from conftest import binary_problem, csv_text

    (tmp_path / "data.csv").write_text(csv_text(*binary_problem()))
    code, err = finished(slang("fit", "data.csv", "-o", "run.h5", "--method", "bbb", "--samples", "10000000000",
                               "--epochs", "1", "--no-progress", cwd=tmp_path))
    lines = [line for line in err.splitlines() if not line.startswith(("slang: task:", "slang: change the task"))]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("slang: error: --samples 10000000000: 10000000000 draws of 4 parameters take 298 GiB")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv"]


@pytest.mark.parametrize("options, says", [
    (["--method", "slang", "--rank", "3"], "slang: error: --rank 3's low-rank factors (3 arrays of 4 x 3) take "),
    (["--method", "exact-full"], "slang: error: --method exact-full's optimiser state and matrices for D = 4 "
                                 "parameters take "),
])
def test_a_posterior_too_large_for_memory_is_refused_before_training(tmp_path, monkeypatch, options, says):
    """exact-full at D = 5 001 and slang at rank 600 of a million parameters failed late (after 12 and 18 s) as
    "out of memory"; like the weight samples, their arrays are now checked against the memory this process can
    have (here made 200 bytes) when the fit is planned: exit 2, one line naming the size and what to give."""
    from click.testing import CliRunner
    from conftest import binary_problem, csv_text

    from slangcli.cli import main
    from slangcli.methods import base

    (tmp_path / "data.csv").write_text(csv_text(*binary_problem()))
    monkeypatch.setattr(base, "memory_limit", lambda: 200)
    result = CliRunner().invoke(main, ["fit", str(tmp_path / "data.csv"), "-o", str(tmp_path / "run.h5"), *options])
    assert result.exit_code == 2, result.stderr
    error = result.stderr.splitlines()[-1]
    assert error.startswith(says) and "GiB, more than the " in error and "of memory this process can have" in error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv"]
    monkeypatch.setattr(base, "memory_limit", lambda: None)  # (unknown: nothing refused)
    assert CliRunner().invoke(main, ["fit", str(tmp_path / "data.csv"), "-o", str(tmp_path / "run.h5"),
                                     *options]).exit_code == 0


def test_data_given_to_a_run_are_standardised_in_place(tmp_path, monkeypatch):
    """predict and evaluate standardised a copy of the table they had read for themselves alone: predicting from
    a LIBSVM table of 1.6 GB peaked at 3.45 GB where the fit (in place) took 1.9. The transform of such a table
    now adds no copy of it (here 0.13 of its size, the check for non-finite values, against 1.13 before)."""
    from click.testing import CliRunner

    from slangcli.cli import main
    from slangcli.data import sources
    from slangcli.runfile.io import read_run

    rng = np.random.default_rng(0)
    X = rng.normal(size=(5000, 50))
    np.savetxt(tmp_path / "t.csv", np.column_stack([X, X[:, 0] > 0]), delimiter=",", fmt="%.6f")
    assert CliRunner().invoke(main, ["fit", str(tmp_path / "t.csv"), "--iterations", "2", "-o",
                                     str(tmp_path / "r.h5")]).exit_code == 0
    run, extra = read_run(tmp_path / "r.h5"), []
    transform = sources.transform

    def traced(*args, **kwargs):
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        out = transform(*args, **kwargs)
        extra.append((tracemalloc.get_traced_memory()[1] - start) / args[1].nbytes)
        return out

    monkeypatch.setattr(sources, "transform", traced)
    tracemalloc.start()
    try:
        inputs = sources.load_inputs(run, tmp_path / "t.csv")[0]
        sources.load_test(run, "r.h5", tmp_path / "t.csv")
    finally:
        tracemalloc.stop()
    assert len(extra) == 2 and max(extra) < 0.5, extra
    np.testing.assert_allclose(inputs, (X - X.mean(0)) / X.std(0), atol=1e-5)  # (the file holds 6 decimals)
