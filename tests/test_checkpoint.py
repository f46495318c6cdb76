"""Checkpoints and resume: a fit stopped at any step and resumed ends in the same bits as a fit never stopped.

In process (``training.fitting.fit`` with a ``Checkpointing`` that asks to stop after a given step) for every step method,
and through the command line with real signals: SIGTERM (a last checkpoint is written, exit 143) and SIGKILL at
random moments (the output path holds nothing or the last valid checkpoint, never a broken file).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from conftest import binary_problem, csv_text, message_lines
from slangcli.cli import main
from slangcli.data.sources import DataOptions
from slangcli.errors import ConfigError, DataError, FormatError, Interrupted
from slangcli.methods import METHODS
from slangcli.methods.base import is_solver
from slangcli.runfile.io import read_run, write_run
from slangcli.training.checkpoints import Checkpointing
from slangcli.training.options import snr_methods
from slangcli.training.fitting import fit, resume

# every registered step method, read from the registry when the tests are collected (a method added there gets its
# resume test), with the hyperparameters its test sets (a small rank), and variants of the state's precision
RESUME_HYPER = {"slang": {"rank": 2}, "ktied": {"rank": 1}}
STEP_METHODS = [(name, RESUME_HYPER.get(name, {})) for name, method in METHODS.items() if not is_solver(method)]
STEP_METHODS += [("slang", {"rank": 2, "dtype": "float32"}), ("ivon", {"dtype": "float64"})]
IDS = [name + "".join(f"-{v}" for k, v in hyper.items() if k == "dtype") for name, hyper in STEP_METHODS]


def _fit_kwargs(method, hyper):
    return dict(method=method, hyper=dict(hyper, samples=3), hidden="4", activation="tanh", batch_size=8, epochs=6,
                seed=5, eval_samples=20)


def _same_fit(a, b):
    """Identical posterior arrays and per-epoch losses (the timings differ, of course)."""
    assert type(a.posterior) is type(b.posterior)
    for name, value in vars(a.posterior).items():
        other = getattr(b.posterior, name)
        if isinstance(value, (list, tuple)):  # per-layer arrays (k-tied U, V)
            assert len(value) == len(other)
            for part, other_part in zip(value, other):
                np.testing.assert_array_equal(part, other_part, err_msg=name)
        else:
            np.testing.assert_array_equal(value, other, err_msg=name)
    snr = [name for name in ("snr_step", "snr", "snr_paper") if name in a.history or name in b.history]
    for name in ("epoch", "step", "nll", *snr):
        np.testing.assert_array_equal(a.history[name], b.history[name], err_msg=name)
    assert a.metrics["test"] == b.metrics["test"] and a.metrics["steps"] == b.metrics["steps"]


@pytest.fixture
def data_csv(write_file):
    return write_file("data.csv", csv_text(*binary_problem(n=60, seed=3)))


@pytest.mark.parametrize("method,hyper", STEP_METHODS, ids=IDS)
@pytest.mark.parametrize("stop_after", [7, 16], ids=["mid-epoch", "epoch-end"])  # 8 steps per epoch
def test_resume_equals_uninterrupted_fit(tmp_path, data_csv, method, hyper, stop_after):
    assert_resume_equals_uninterrupted_fit(tmp_path, data_csv, method, hyper, stop_after)


def assert_resume_equals_uninterrupted_fit(tmp_path, data_csv, method, hyper, stop_after):
    """A fit of ``method`` stopped after step ``stop_after`` through the checkpoint machinery, written to a run file,
    read back and resumed, ends in the same bits as the fit never stopped (also for a method registered by a test,
    ``test_plugins``)."""
    opts = DataOptions(path=str(data_csv), test_fraction=0.25)
    reference = fit(opts, **_fit_kwargs(method, hyper))
    written, polls = [], []
    # stop() is polled once before the first step and after every step: the poll after step t is number t + 1
    counting = Checkpointing(write=written.append, every_steps=5,
                             stop=lambda: polls.append(1) or len(polls) > stop_after)
    with pytest.raises(Interrupted) as info:
        fit(opts, **_fit_kwargs(method, hyper), checkpointing=counting)
    assert info.value.checkpointed and info.value.step == stop_after
    assert [r.metrics["steps"] for r in written] == [s for s in (5, 10, 15) if s < stop_after] + [stop_after]
    path = tmp_path / "ck.h5"
    write_run(path, written[-1])
    stored = read_run(path)
    assert stored.status == "checkpoint" and stored.state["scalars"]["t"] == stop_after
    resumed = resume(stored, str(path), checkpointing=Checkpointing(write=written.append, every_steps=5))
    assert resumed.status == "complete"
    _same_fit(resumed, reference)
    # the constant predictor's scores (and the warnings against it) come with a resumed fit too
    assert resumed.metrics["constant"] == reference.metrics["constant"]


@pytest.mark.parametrize("method", snr_methods())
def test_resume_keeps_the_gradient_snr_records_before_the_checkpoint(tmp_path, data_csv, method):
    """A fit with --snr stopped and resumed lost the SNR records taken before its checkpoint (90 records became
    74): the history was rebuilt without them."""
    opts = DataOptions(path=str(data_csv), test_fraction=0.25)
    kwargs = dict(_fit_kwargs(method, {}), snr_every=3, snr_draws=3)
    reference = fit(opts, **kwargs)
    assert len(reference.history["snr_step"]) == 12
    written, polls = [], []
    with pytest.raises(Interrupted):
        fit(opts, **kwargs, checkpointing=Checkpointing(write=written.append,
                                                        stop=lambda: polls.append(1) or len(polls) > 20))
    path = tmp_path / "ck.h5"
    write_run(path, written[-1])
    _same_fit(resume(read_run(path), str(path)), reference)


@pytest.mark.parametrize("method,hyper", STEP_METHODS, ids=IDS)
def test_resume_of_a_fit_of_members_equals_uninterrupted_fit(tmp_path, data_csv, method, hyper):
    """A fit of two members (--members 2) stopped in member 1, written, read back and resumed: member 0 kept as
    stored, member 1 continued from its state, the same bits as the fit never stopped."""
    opts = DataOptions(path=str(data_csv), test_fraction=0.25)
    kwargs = dict(_fit_kwargs(method, hyper), epochs=2, members=2)
    reference = fit(opts, **kwargs)
    n_steps = reference.config["n_steps"]
    written, polls = [], []
    stop_after = n_steps + 3  # the poll after global step g is number g + 1 (member 1 is not polled before its start)
    with pytest.raises(Interrupted, match=f"interrupted at step 3 of {n_steps} of member 2 of 2$") as info:
        fit(opts, **kwargs, checkpointing=Checkpointing(write=written.append, every_steps=5,
                                                        stop=lambda: polls.append(1) or len(polls) > stop_after))
    assert info.value.checkpointed
    path = tmp_path / "ck.h5"
    write_run(path, written[-1])
    stored = read_run(path)
    assert stored.state["scalars"]["member"] == 1 and stored.posterior.n_members == 2
    resumed = resume(stored, str(path), checkpointing=Checkpointing(write=written.append, every_steps=5))
    assert resumed.posterior.kind == "mixture" and resumed.status == "complete"
    for a, b in zip(resumed.posterior.members, reference.posterior.members):
        _same_fit(dataclasses.replace(resumed, posterior=a), dataclasses.replace(reference, posterior=b))
    for name in reference.history:
        if not name.endswith("seconds"):
            np.testing.assert_array_equal(resumed.history[name], reference.history[name], err_msg=name)
    assert resumed.metrics["train"] == reference.metrics["train"]


@pytest.mark.parametrize("members,likelihood,length", [(1, "bernoulli", {"epochs": 2}), (2, "bernoulli", {"epochs": 2}),
                                                      (1, "gaussian", {"epochs": 2}),
                                                      (1, "gaussian", {"iterations": 13, "epochs": None})])
def test_a_fit_stopped_while_scoring_keeps_its_training(tmp_path, data_csv, write_file, members, likelihood, length):
    """Once the last step is done the fit hands the command line how to write that step's snapshot
    (``Checkpointing.keep``), which it writes when a signal stops the scoring: resuming it runs no step, only the
    last update of a learned noise precision and the scoring, and ends in the same bits as the fit never stopped."""
    if likelihood == "gaussian":  # (a learned noise precision, whose last update follows the last step)
        X, labels = binary_problem(n=60, seed=3)
        data_csv = write_file("reg.csv", csv_text(X, labels, classes=("-0.5", "1.5")))
    opts = DataOptions(path=str(data_csv), test_fraction=0.25)
    kwargs = dict(_fit_kwargs("slang", {"rank": 2}), members=members, likelihood=likelihood, **length)
    kwargs = {k: v for k, v in kwargs.items() if v is not None}  # (13 iterations: the last epoch is partial)
    reference = fit(opts, **kwargs)
    written, kept = [], []
    fit(opts, **kwargs, checkpointing=Checkpointing(write=written.append, every_steps=1000, keep=kept.append))
    assert len(kept) == members and written == []
    kept[-1]()
    path = tmp_path / "last.h5"
    write_run(path, written[-1])
    stored = read_run(path)
    n_steps = reference.config["n_steps"]
    assert stored.status == "checkpoint" and stored.state["scalars"]["t"] == n_steps
    resumed = resume(stored, str(path), checkpointing=Checkpointing(write=written.append, every_steps=5))
    assert resumed.status == "complete" and len(written) == 1  # no step, so no checkpoint
    for a, b in zip(getattr(resumed.posterior, "members", [resumed.posterior]),
                    getattr(reference.posterior, "members", [reference.posterior])):
        _same_fit(dataclasses.replace(resumed, posterior=a), dataclasses.replace(reference, posterior=b))
    assert resumed.model.noise_precision == reference.model.noise_precision
    assert resumed.metrics["train"] == reference.metrics["train"]
    for name in reference.history:  # the last epoch, partial or not, is recorded once
        if not name.endswith("seconds"):
            np.testing.assert_array_equal(resumed.history[name], reference.history[name], err_msg=name)


def test_a_checkpoint_before_the_first_noise_update_reads_and_resumes(tmp_path, write_file):
    """A regression network learns its noise precision from its residuals; a checkpoint written before their first
    update (after step 1) has no residual yet: it still reads, and resumes to the fit never stopped."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(48, 2))
    y = np.sin(X[:, 0]) + X[:, 1] + rng.normal(0, 0.2, 48)
    data = write_file("reg.csv", "a,b,y\n" + "".join(f"{a:.10f},{b:.10f},{t:.10f}\n" for (a, b), t in zip(X, y)))
    opts = DataOptions(path=str(data), test_fraction=0.25)
    kwargs = dict(hidden="3", batch_size=12, epochs=4, eval_samples=10)
    reference = fit(opts, **kwargs)
    written, polls = [], []
    with pytest.raises(Interrupted, match="interrupted at step 1 of 12"):
        fit(opts, **kwargs, checkpointing=Checkpointing(write=written.append,
                                                        stop=lambda: polls.append(1) or len(polls) > 1))
    path = tmp_path / "ck.h5"
    write_run(path, written[-1])
    resumed = resume(read_run(path), str(path))
    _same_fit(resumed, reference)
    assert resumed.model.noise_precision == reference.model.noise_precision


def test_checkpoint_round_trip_keeps_state_exactly(tmp_path, data_csv):
    opts = DataOptions(path=str(data_csv))
    written = []
    with pytest.raises(Interrupted):
        fit(opts, **_fit_kwargs("slang", {"rank": 2, "dtype": "float32"}),
            checkpointing=Checkpointing(write=written.append, stop=lambda: True))
    assert written == []  # asked to stop before the first step: nothing to write
    steps = []
    with pytest.raises(Interrupted):
        fit(opts, **_fit_kwargs("slang", {"rank": 2, "dtype": "float32"}),
            checkpointing=Checkpointing(write=written.append, stop=lambda: steps.append(1) or len(steps) > 4))
    path = tmp_path / "ck.h5"
    write_run(path, written[-1])
    back = read_run(path)
    for name, value in written[-1].state["arrays"].items():
        assert back.state["arrays"][name].dtype == value.dtype
        np.testing.assert_array_equal(back.state["arrays"][name], value)
    assert back.state["scalars"] == written[-1].state["scalars"]


def _checkpoint_file(tmp_path, data_csv, name="ck.h5"):
    written, steps = [], []
    with pytest.raises(Interrupted):
        fit(DataOptions(path=str(data_csv)), **_fit_kwargs("slang", {"rank": 2}),
            checkpointing=Checkpointing(write=written.append, stop=lambda: steps.append(1) or len(steps) > 4))
    path = tmp_path / name
    write_run(path, written[-1])
    return path


def test_a_fit_that_replaces_a_checkpoint_says_so(tmp_path, data_csv):
    """The stopped fit's command run again started from step 0 over its checkpoint, without a word (probe 14)."""
    path = _checkpoint_file(tmp_path, data_csv)
    again = CliRunner().invoke(main, ["fit", str(data_csv), "-o", str(path), "--epochs", "2", "--no-progress"])
    assert again.exit_code == 0, again.output
    assert (f"slang: {path} holds the checkpoint of a stopped fit (step 4 of 48), which this fit replaces; slang fit "
            f"--resume {path} continues it instead") in again.stderr.splitlines()
    assert read_run(path).status == "complete"
    once_more = CliRunner().invoke(main, ["fit", str(data_csv), "-o", str(path), "--epochs", "2", "--no-progress"])
    assert once_more.exit_code == 0 and "checkpoint" not in once_more.stderr  # a finished run: replaced unsaid


@pytest.mark.skipif(os.geteuid() == 0 and not os.path.exists("/usr/bin/setpriv"),
                    reason="as root, the permission bits bind only without its capabilities (setpriv)")
def test_a_resume_that_cannot_write_is_refused_before_training(tmp_path, data_csv):
    """--resume of a checkpoint in a read-only directory trained to the end, then failed to write (probe 14)."""
    directory = tmp_path / "ro"
    directory.mkdir()
    path = _checkpoint_file(directory, data_csv)
    directory.chmod(0o555)
    try:
        as_user = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"] if os.geteuid() == 0 else []
        started = time.perf_counter()
        result = subprocess.run([*as_user, sys.executable, "-m", "slangcli", "fit", "--resume", str(path)],
                                capture_output=True, text=True, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert f"directory {directory} is not writable" in result.stderr and "Traceback" not in result.stderr
        assert read_run(path).status == "checkpoint" and time.perf_counter() - started < 60
    finally:
        directory.chmod(0o755)


def test_evaluate_and_predict_say_a_checkpoint_is_not_a_finished_fit(tmp_path, data_csv):
    """A checkpoint was scored and predicted like a finished run, with no sign that it was not (probe 8)."""
    path = _checkpoint_file(tmp_path, data_csv)
    says = (f"slang: {path} is a checkpoint, not a finished fit (step 4 of 48): these are the {{}} of its posterior "
            f"so far; slang fit --resume {path} finishes it")
    evaluated = CliRunner().invoke(main, ["evaluate", str(path), str(data_csv), "--json"])
    assert evaluated.exit_code == 0, evaluated.output
    assert says.format("scores") in evaluated.stderr.splitlines()
    assert json.loads(evaluated.stdout)["status"] == "checkpoint"
    predicted = CliRunner().invoke(main, ["predict", str(path), str(data_csv), "-o", str(tmp_path / "p.csv"),
                                          "--json"])
    assert predicted.exit_code == 0, predicted.output
    assert says.format("predictions") in predicted.stderr.splitlines()
    assert json.loads(predicted.stdout)["status"] == "checkpoint"
    # a finished run: no such note
    done = tmp_path / "done.h5"
    write_run(done, fit(DataOptions(path=str(data_csv)), **_fit_kwargs("slang", {"rank": 2})))
    evaluated = CliRunner().invoke(main, ["evaluate", str(done), str(data_csv), "--json"])
    assert json.loads(evaluated.stdout)["status"] == "complete" and "checkpoint" not in evaluated.stderr


@pytest.mark.parametrize("options,why", [
    (["--method", "exact-mf"], "--method exact-mf is solved at once, without checkpoints"),
    (["--restarts", "2", "--epochs", "1"], "a fit of --restarts is not checkpointed"),
])
def test_checkpoint_seconds_given_to_a_fit_without_checkpoints_is_refused(tmp_path, data_csv, options, why):
    """``--checkpoint-seconds 5`` was accepted by a solver and by restarts, which never checkpoint; its default (and
    0, never) stays harmless."""
    out = tmp_path / "run.h5"
    refused = CliRunner().invoke(main, ["fit", str(data_csv), "-o", str(out), *options, "--checkpoint-seconds", "5"])
    assert refused.exit_code == 2 and not out.exists()
    assert message_lines(refused.stderr)[-1] == f"slang: error: --checkpoint-seconds does not apply: {why}"
    for seconds in ([], ["--checkpoint-seconds", "0"]):
        done = CliRunner().invoke(main, ["fit", str(data_csv), "-o", str(out), *options, *seconds])
        assert done.exit_code == 0, done.output


def test_a_checkpoint_of_a_trained_fit_says_so_and_what_it_lacks(tmp_path, write_file):
    """The snapshot of the last step (kept for a stop during the final scoring) of a regression network: inspect
    said "continue with" a fit that only needs scoring, and evaluate did not say that its noise model (fitted when
    the fit finishes) was missing from the predictions."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(40, 2))
    data = write_file("reg.csv", "a,b,y\n" + "".join(f"{a:.6f},{b:.6f},{a - b + 0.1 * e:.6f}\n"
                                                      for (a, b), e in zip(X, rng.normal(size=40))))
    kept = []
    fit(DataOptions(path=str(data)), method="slang", hyper={"samples": 2}, hidden="3", batch_size=8, epochs=2,
        seed=1, eval_samples=10, checkpointing=Checkpointing(write=lambda run: kept.append(run), stop=lambda: False,
                                                             keep=lambda write_last: write_last()))
    path = tmp_path / "last.h5"
    write_run(path, kept[-1])
    inspected = CliRunner().invoke(main, ["inspect", str(path)])
    assert inspected.exit_code == 0, inspected.output
    status = [line for line in inspected.stderr.splitlines() if line.startswith("status")]
    assert status[0].startswith("status     checkpoint at step 10 of 10, trained, not yet scored (")
    assert status[0].endswith(f"score it with: slang fit --resume {path}")
    evaluated = CliRunner().invoke(main, ["evaluate", str(path), str(data)])
    assert evaluated.exit_code == 0, evaluated.output
    assert (f"slang: {path} is a checkpoint, not a finished fit (step 10 of 10, trained, not yet scored): these are "
            "the scores of its posterior so far; its noise model comes with the finished fit (the constant noise "
            f"precision predicts here); slang fit --resume {path} finishes it") in evaluated.stderr.splitlines()


def test_resume_refuses_complete_runs_and_changed_data(tmp_path, data_csv):
    path = _checkpoint_file(tmp_path, data_csv)
    done = tmp_path / "done.h5"
    write_run(done, fit(DataOptions(path=str(data_csv)), **_fit_kwargs("slang", {"rank": 2})))
    with pytest.raises(ConfigError, match="complete"):
        resume(read_run(done), str(done))
    run = read_run(path)
    data_csv.write_text(data_csv.read_text().replace("\n", "\n", 1) + "0.1,0.2,0.3,yes\n")
    with pytest.raises(DataError, match="changed since the checkpoint"):
        resume(run, str(path))


def test_resume_refuses_a_uci_folder_whose_target_file_changed(tmp_path):
    """A checkpoint of a UCI fit resumed after index_target.txt changed trained on the new target to the end, and
    its run still named the old data."""
    from conftest import gal_folder

    X = np.random.default_rng(1).standard_normal((40, 3))
    folder = gal_folder(tmp_path / "toy", X, X[:, 0] - X[:, 1], 30)
    written, steps = [], []
    with pytest.raises(Interrupted):
        fit(DataOptions(path=str(folder), uci_split=0), **_fit_kwargs("slang", {"rank": 2}),
            checkpointing=Checkpointing(write=written.append, stop=lambda: steps.append(1) or len(steps) > 3))
    (folder / "index_features.txt").write_text("0\n1\n3\n")
    (folder / "index_target.txt").write_text("2\n")
    with pytest.raises(DataError, match=f"its train data {folder / 'index_features.txt'} changed since the "
                                        r"checkpoint \(sha256 differs\); cannot resume"):
        resume(written[-1], "ck.h5")


def test_a_uci_checkpoint_that_recorded_a_csv_option_still_resumes(tmp_path):
    """A new fit of a UCI folder refuses --target, --columns and the like (they were taken and not applied); a
    checkpoint an earlier version wrote with one recorded resumes all the same, its data read as they were then."""
    from conftest import gal_folder

    X = np.random.default_rng(1).standard_normal((40, 3))
    folder = gal_folder(tmp_path / "toy", X, X[:, 0] - X[:, 1], 30)
    with pytest.raises(ConfigError, match="^--target applies to a CSV file; a Gal-layout UCI folder's target"):
        fit(DataOptions(path=str(folder), uci_split=0, target="2"), **_fit_kwargs("slang", {"rank": 2}))
    written, steps = [], []
    with pytest.raises(Interrupted):
        fit(DataOptions(path=str(folder), uci_split=0), **_fit_kwargs("slang", {"rank": 2}),
            checkpointing=Checkpointing(write=written.append, stop=lambda: steps.append(1) or len(steps) > 3))
    checkpoint = written[-1]
    checkpoint.data["options"].update(target="2", delimiter=",")  # (as an earlier version recorded them)
    resumed = resume(checkpoint, "ck.h5")
    assert resumed.status == "complete" and resumed.data["options"]["target"] == "2"


@pytest.mark.parametrize("damage,message", [
    (lambda f: f.attrs.__setitem__("status", "half-done"), "unknown status"),
    (lambda f: f["state"].attrs.__delitem__("t"), "step counter"),
    (lambda f: f["state"]["mu"].__setitem__(0, np.nan), "non-finite"),
    (lambda f: f["state"].attrs.__setitem__("history_open_sum", np.inf), "not a finite number"),
    (lambda f: f.__delitem__("state"), "/state"),
])
def test_damaged_checkpoints_are_format_errors(tmp_path, data_csv, damage, message):
    path = _checkpoint_file(tmp_path, data_csv)
    with h5py.File(path, "r+") as f:
        damage(f)
    with pytest.raises(FormatError, match=message):
        read_run(path)


def test_state_of_the_wrong_shape_is_refused_on_resume(tmp_path, data_csv):
    path = _checkpoint_file(tmp_path, data_csv)
    with h5py.File(path, "r+") as f:
        del f["state"]["U"]
        f["state"].create_dataset("U", data=np.zeros((3, 2)))
    with pytest.raises(FormatError, match="/state/U has shape"):
        resume(read_run(path), str(path))


# ------------------------------------------------------------------------------------------ command line
def test_cli_resume_usage_errors(tmp_path, data_csv):
    path = _checkpoint_file(tmp_path, data_csv)
    result = CliRunner().invoke(main, ["fit", str(data_csv), "--resume", str(path)])
    assert result.exit_code == 2 and "cannot be combined with --resume" in result.stderr
    result = CliRunner().invoke(main, ["fit", "--resume", str(path), "--epochs", "3"])
    assert result.exit_code == 2 and "--epochs cannot be combined" in result.stderr
    result = CliRunner().invoke(main, ["fit", "-o", str(tmp_path / "x.h5")])
    assert result.exit_code == 2 and "DATA" in result.stderr
    result = CliRunner().invoke(main, ["fit", str(data_csv), "--method", "exact-mf", "--checkpoint-every", "3",
                                       "-o", str(tmp_path / "x.h5")])
    assert result.exit_code == 2 and "--checkpoint-every does not apply" in result.stderr


def test_cli_resume_of_a_complete_run_is_refused(tmp_path, data_csv):
    out = tmp_path / "done.h5"
    ok = CliRunner().invoke(main, ["fit", str(data_csv), "-o", str(out), "--epochs", "1", "--hidden", "3"])
    assert ok.exit_code == 0, ok.stderr
    result = CliRunner().invoke(main, ["fit", "--resume", str(out)])
    assert result.exit_code == 2 and "nothing to resume" in result.stderr


# a fit of about 3 s on one core: long enough to be killed at many points, with a checkpoint every 40 steps
SLOW_FIT = ["--hidden", "16", "--method", "slang", "--samples", "8", "--batch-size", "4", "--epochs", "80",
            "--rank", "3", "--checkpoint-every", "40", "--seed", "11", "--test-fraction", "0.25", "--no-progress"]


def _slang(*args, **kw):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "slangcli", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, **kw)


@pytest.fixture(scope="module")
def reference_fit(tmp_path_factory):
    d = tmp_path_factory.mktemp("reference")
    data = d / "data.csv"
    data.write_text(csv_text(*binary_problem(n=80, seed=4)))
    out = d / "reference.h5"
    start = time.monotonic()
    proc = _slang("fit", data, "-o", out, *SLOW_FIT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return data, read_run(out), time.monotonic() - start  # (the seconds of the whole command, start-up included)


def _killed_then_resumed(tmp_path, reference_fit, sig, delay, after_first_checkpoint=False):
    """Start the slow fit, signal it ``delay`` seconds after the start (or after its first checkpoint appeared,
    so that a loaded machine's slow start-up cannot turn every case into "nothing written"), then check the
    output path and resume from it."""
    data, reference, _ = reference_fit
    out = tmp_path / f"killed-{sig}-{delay:.2f}.h5"
    proc = _slang("fit", data, "-o", out, *SLOW_FIT)
    if after_first_checkpoint:
        deadline = time.monotonic() + 60
        while not out.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
    time.sleep(delay)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(f".{out.name}.")]
    if proc.returncode == 0:  # finished before the signal
        _same_fit(read_run(out), reference)
        return "finished"
    if sig == signal.SIGTERM and proc.returncode == -signal.SIGTERM:
        # arrived while Python was still starting, before slang's handler existed, or while it was exiting, after
        # slang had put the handler back: the default action, and nothing written or the finished run
        if out.exists():
            _same_fit(read_run(out), reference)
            return "finished"
        return "nothing"
    if sig == signal.SIGTERM:
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert "Traceback" not in err and "slang fit --resume" in err or "nothing written" in err, err
        assert not leftovers, leftovers
    else:
        assert proc.returncode == -signal.SIGKILL
        # SIGKILL cannot be handled: a write it interrupts leaves its hidden temporary file beside the output (never
        # the output itself); at most the one write under way
        assert len(leftovers) <= 1 and all(name.endswith(".tmp") for name in leftovers), leftovers
        for name in leftovers:
            (tmp_path / name).unlink()
    if not out.exists():
        return "nothing"
    run = read_run(out)  # never a broken file: a FormatError here fails the test
    if run.status == "complete":  # killed after writing the finished run, while reporting
        _same_fit(run, reference)
        return "finished"
    assert run.status == "checkpoint"
    proc = _slang("fit", "--resume", out)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    _same_fit(read_run(out), reference)
    return "resumed"


def test_sigterm_writes_a_checkpoint_that_resumes_to_the_same_bits(tmp_path, reference_fit):
    assert _killed_then_resumed(tmp_path, reference_fit, signal.SIGTERM, 0.2, after_first_checkpoint=True) \
        in ("resumed", "finished")


def test_early_sigterm_leaves_nothing(tmp_path, reference_fit):
    assert _killed_then_resumed(tmp_path, reference_fit, signal.SIGTERM, 0.05) in ("nothing", "resumed")


def test_sigkill_at_random_moments_leaves_nothing_or_a_valid_checkpoint(tmp_path, reference_fit):
    rng = np.random.default_rng(2026)
    outcomes = [_killed_then_resumed(tmp_path, reference_fit, signal.SIGKILL, d) for d in rng.uniform(0.3, 1.5, 2)]
    outcomes += [_killed_then_resumed(tmp_path, reference_fit, signal.SIGKILL, d, after_first_checkpoint=True)
                 for d in rng.uniform(0.0, 0.5, 2)]
    assert "resumed" in outcomes, outcomes


@pytest.mark.slow
def test_sigkill_and_sigterm_at_many_moments(tmp_path, reference_fit):
    """Signals at moments spread over the fit's own length on this machine (a fixed range of seconds, set when the
    fit took about 3 s, let most signals of a faster machine arrive after the fit had finished)."""
    rng = np.random.default_rng(7)
    seconds = reference_fit[2]
    outcomes = []
    for sig in (signal.SIGKILL, signal.SIGTERM):
        outcomes += [_killed_then_resumed(tmp_path, reference_fit, sig, d)
                     for d in rng.uniform(0.1, 0.9, 6) * seconds]
        outcomes += [_killed_then_resumed(tmp_path, reference_fit, sig, d, after_first_checkpoint=True)
                     for d in rng.uniform(0.0, 0.5, 6) * seconds]
    print("outcomes:", {o: outcomes.count(o) for o in set(outcomes)})
    assert outcomes.count("resumed") >= 12


def test_divergence_keeps_the_last_checkpoint_and_says_where(tmp_path, data_csv):
    """A fit that diverges after a checkpoint: exit 1, one line naming the step and the checkpoint, and the file
    is that valid checkpoint (resumable, though it will diverge again with the same settings)."""
    out = tmp_path / "div.h5"
    # (1e100: the first step stays within the values a run file may hold, the second overflows)
    result = CliRunner().invoke(main, ["fit", str(data_csv), "-o", str(out), "--hidden", "8", "--method", "slang",
                                       "--lr", "1e100", "--checkpoint-every", "1", "--epochs", "50"])
    assert result.exit_code == 1, result.stderr
    assert "diverged at step" in result.stderr and "last good checkpoint (step" in result.stderr
    assert len(message_lines(result.stderr)) == 1
    run = read_run(out)
    assert run.status == "checkpoint" and np.isfinite(run.posterior.mean).all()


def test_resume_ignores_data_options_it_does_not_know(tmp_path, data_csv):
    """A checkpoint whose stored data options carry a key this slang does not know (a newer minor format) resumes,
    as ``slang evaluate`` reads it: the format promises that a 1.x reader ignores what it does not know."""
    opts = DataOptions(path=str(data_csv))
    written, polls = [], []
    with pytest.raises(Interrupted):
        fit(opts, **_fit_kwargs("slang", {"rank": 2}),
            checkpointing=Checkpointing(write=written.append, stop=lambda: polls.append(1) or len(polls) > 3))
    path = tmp_path / "ck.h5"
    write_run(path, written[-1])
    with h5py.File(path, "r+") as f:
        provenance = json.loads(f["data"].attrs["provenance"])
        provenance["options"]["resample"] = "bootstrap"
        f["data"].attrs["provenance"] = json.dumps(provenance)
    result = CliRunner().invoke(main, ["fit", "--resume", str(path), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert read_run(path).status == "complete"


@pytest.mark.parametrize("stdin", [False, True], ids=["file", "stdin"])
def test_the_resume_hint_is_a_command_that_works(tmp_path, reference_fit, stdin):
    """Stopped, a fit said "continue with: slang fit --resume dir with space/ü.h5", which the shell splits, and
    said so also for data read from standard input, which --resume cannot read again (it then failed)."""
    data, _, _ = reference_fit
    (tmp_path / "dir with space").mkdir()
    out = tmp_path / "dir with space" / "ü.h5"
    with open(data) as source:
        proc = _slang("fit", "-" if stdin else data, "-o", out, *SLOW_FIT, stdin=source)
    deadline = time.monotonic() + 60
    while not out.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    if proc.returncode != 128 + signal.SIGTERM or read_run(out).status != "checkpoint":
        pytest.skip(f"the fit ended before the signal (exit {proc.returncode})")
    inspected = subprocess.run([sys.executable, "-m", "slangcli", "inspect", out], capture_output=True, text=True)
    if stdin:
        assert "its data came from standard input or a pipe, which --resume cannot read again" in err, err
        assert "its data came from standard input or a pipe: --resume cannot read them again" in inspected.stderr
    else:
        hint = f"continue with: slang fit --resume {shlex.quote(str(out))}"
        assert hint in err and hint in inspected.stderr, err
        assert subprocess.run(["sh", "-c", hint.split(": ", 1)[1].replace("slang ", f"{sys.executable} -m slangcli ",
                                                                           1)]).returncode == 0


def test_a_checkpoint_whose_test_data_came_from_a_pipe_offers_no_resume(tmp_path, data_csv):
    """--test /dev/stdin (or -): evaluate and inspect said 'slang fit --resume ck.h5 finishes it', which then failed
    on the test data it could not read again (found in review)."""
    from slangcli.cli.output import checkpoint_note

    path = _checkpoint_file(tmp_path, data_csv)
    run = read_run(path)
    assert checkpoint_note(run, "ck.h5").endswith("slang fit --resume ck.h5 finishes it")
    for test in ({"path": "-"}, {"path": "/dev/stdin", "stream": True}):
        piped = dataclasses.replace(run, data={**run.data, "test": test})
        assert checkpoint_note(piped, "ck.h5").endswith("its data came from standard input or a pipe, which "
                                                        "--resume cannot read again")
