"""One fit of a sweep, run on a worker: :func:`run_fit` takes a :class:`Task` and returns the fit's record.

A task carries the fit's ``DataOptions`` and ``FitOptions``, built once in the sweep's process
(:func:`make_task`, from the point's parameters through ``slangcli.sweep.grid.options_of``), and the run file's
path. On the worker it calls the library's fit (``slangcli.training.fitting.fit``), or continues the checkpoint of the
same fit it finds at the path (``slangcli.training.fitting.resume``: the task of a worker that died), and writes the run
file as ``slang fit`` does (atomically; checkpoints every ``--checkpoint-seconds`` and ``--checkpoint-every`` steps).
The run file records the ``slang fit`` command line that makes the same fit (:attr:`Task.command`), which is also how a
later sweep recognises it as complete (:func:`is_complete`).

Errors travel as the project's exception types: a ``slangcli.errors`` error (bad data, a diverged fit, options
that do not go together) or a MemoryError becomes the record's status ``failed``, its message and the exit code
``slang fit`` would have given (``slangcli.errors.exit_code``); anything else is raised, so that Dask reruns the
task (``retries``) and the sweep records the exception if it fails for good.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass

from slangcli import __version__
from slangcli.data.readers import sha256_file
from slangcli.data.sources import DataOptions, recorded_files
from slangcli.errors import OUT_OF_MEMORY, DivergenceError, SlangError, exit_code
from slangcli.runfile.io import read_run, write_run
from slangcli.runfile.outputs import one_line
from slangcli.sweep.grid import Point, options_of
from slangcli.threads import keep_freed_memory
from slangcli.training import checkpoints
from slangcli.training.checkpoints import Checkpointing
from slangcli.training.fitting import fit, resume
from slangcli.training.options import FitOptions

# the arguments a sweep adds after a fit's own in the command it records: -o PATH --checkpoint-seconds S
# --no-progress
TAIL = 5


@dataclass(frozen=True)
class Task:
    """One fit of a sweep: its run file's ``path``, its ``slang fit`` arguments (``args``, as
    ``slangcli.sweep.grid.make_point`` makes them) and parameters (``params``, the record's), its options
    (``data``, ``options``), and when it checkpoints."""

    path: str
    args: list
    params: dict
    data: DataOptions
    options: FitOptions
    checkpoint_every: int | None = None
    checkpoint_seconds: float = 60.0

    @property
    def command(self) -> list[str]:
        """The ``slang fit`` command line that makes this fit, as the run file records it."""
        return ["slang", "fit", *self.args, "-o", self.path, "--checkpoint-seconds", str(self.checkpoint_seconds),
                "--no-progress"]


def make_task(point: Point, path: str, checkpoint_seconds: float = 60.0) -> Task:
    """The :class:`Task` of ``point`` writing its run file at ``path``: its options checked and built here, once;
    a ConfigError when they do not make a fit (as ``slang fit`` refuses them)."""
    data, options, every = options_of(point.params)
    checkpoints.schedule(options, every, checkpoint_seconds)  # (refuses --checkpoint-every with a solver)
    return Task(path=str(path), args=list(point.args), params=dict(point.params), data=data, options=options,
                checkpoint_every=every, checkpoint_seconds=checkpoint_seconds)


# ---------------------------------------------------------------------------------------- what DIR holds


def _command_args(command) -> list | None:
    """The fit's own arguments in a run file's recorded command, if a sweep wrote it."""
    if len(command) < 2 + TAIL or command[-TAIL] != "-o":
        return None
    return list(command[2:-TAIL])


def stored(path) -> tuple[str, list | None, int | None, list, str] | None:
    """``(status, fit arguments, steps done, data files, slang version)`` of the run file at ``path``, or None when
    there is none readable; the data files are the ``(path, sha256)`` its data provenance records
    (:func:`_data_files`)."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            steps = json.loads(f["metrics"].attrs["metrics"]).get("steps")
            provenance = json.loads(f["data"].attrs["provenance"]) if "data" in f else {}
            return (str(f.attrs["status"]), _command_args(json.loads(f.attrs["command"])), steps,
                    _data_files(provenance), str(f.attrs.get("slang_version", "")))
    except (OSError, KeyError, ValueError, AttributeError, TypeError):
        return None


def _data_files(provenance: dict) -> list:
    """The ``(path, sha256)`` of every file the training and test provenance name with a digest: the data file, a
    UCI folder's data and index files."""
    return [file for part in (provenance.get("train"), provenance.get("test")) if isinstance(part, dict)
            for file in recorded_files(part)]


def _same_data(files: list) -> bool:
    """Whether every recorded data file still holds the bytes it held (its sha256; a file gone or unreadable
    counts as changed)."""
    return all(_sha256(path) == digest for path, digest in files)


def _sha256(path: str) -> str | None:
    """The file's sha256, read once per size and modification time (a sweep checks each of its fits' files); None
    when it cannot be read."""
    try:
        stat = os.stat(path)
        key = (path, stat.st_size, stat.st_mtime_ns)
        if key not in _DIGESTS:
            _DIGESTS[key] = sha256_file(path)
    except (OSError, SlangError):
        return None
    return _DIGESTS[key]


_DIGESTS: dict = {}


def _same_fit(found, args) -> bool:
    """Whether a stored run (:func:`stored`) is the fit of ``args``: the same arguments, data files that still hold
    the data it was fitted to (a changed file makes the fit one to run again, as ``slang fit --resume`` refuses
    it), and written by this version of slang (another version may differ in its defaults and arithmetic: a
    table must not mix them)."""
    return found[1] == list(args) and _same_data(found[3]) and found[4] == __version__


def is_complete(path, args) -> bool:
    """Whether the fit with ``args`` is complete at ``path``: its run file has status complete and is the same
    fit (:func:`_same_fit`)."""
    found = stored(path)
    return found is not None and found[0] == "complete" and _same_fit(found, args)


def metrics_of(path, isolated: bool = True) -> dict:
    """The scalar train and test metrics of a finished run file, as ``train_*`` / ``test_*`` columns, those by
    level too (``test_coverage_0.9``, ``test_calibrated_coverage_0.95``); not the reliability bins behind the ECE.
    ``isolated``: read as ``read_run`` does by default, in a forked child (False: in this process)."""
    m = read_run(path, isolated=isolated).metrics
    out = {}

    def scalars(prefix, values):
        for key, value in values.items():
            if isinstance(value, dict) and key != "calibration":
                scalars(f"{prefix}_{key}", value)
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                out[f"{prefix}_{key}"] = value

    for part in ("train", "test"):
        scalars(part, m.get(part) or {})
    out["steps"] = m.get("steps")
    return out


# --------------------------------------------------------------------------------------------------- one fit


def _worker_address() -> str:
    """The address of the Dask worker running this task ("" when it runs elsewhere: in a script, in a test)."""
    distributed = sys.modules.get("distributed")  # (loaded wherever a worker runs; not imported here for nothing)
    try:
        return distributed.get_worker().address if distributed is not None else ""
    except ValueError:
        return ""


@contextlib.contextmanager
def _checkpointing(task: Task, options: FitOptions | None):
    """``slang fit``'s checkpoints of the task's fit, written (atomically) to its run file: every
    ``checkpoint_seconds`` and every ``checkpoint_every`` steps; none for restarts without ``--checkpoint-every``
    (they are not checkpointed) or for a solver (``options``: a fresh fit's; None for a resumed checkpoint, which
    has them). A fit that then diverges names its last good checkpoint. (No signal stops a task: the worker's
    process leaves them to the sweep's.)"""
    when = {"every_steps": task.checkpoint_every, "every_seconds": task.checkpoint_seconds or None}
    if options is not None:
        when = checkpoints.schedule(options, task.checkpoint_every, task.checkpoint_seconds)
        if when is None:
            yield None
            return
    written: list[int] = []

    def write(run):
        write_run(task.path, run)
        written.append(run.metrics["steps"])

    try:
        yield Checkpointing(write=write, **when)
    except DivergenceError as exc:
        if written:
            raise DivergenceError(f"{exc}; the last good checkpoint (step {written[-1]}) is in {task.path}") from None
        raise


def _fit(task: Task) -> None:
    with _checkpointing(task, task.options) as checkpointing:
        run = fit(task.data, task.options, command=task.command, checkpointing=checkpointing)
    write_run(task.path, run)


def _resume(task: Task) -> None:
    run = read_run(task.path)
    with _checkpointing(task, None) as checkpointing:
        run = resume(run, task.path, checkpointing=checkpointing)
    write_run(task.path, run)


def run_fit(task: Task) -> dict:
    """One fit of a sweep (a Dask task, a pure function of ``task``): skips a fit already complete at its path;
    continues one checkpointed there (a retried task whose worker died); otherwise fits afresh. Returns the fit's
    record: its parameters, status (``complete`` or ``failed``), error message, exit code, seconds, worker, the
    step it resumed at, and its train and test metrics."""
    started = time.perf_counter()
    keep_freed_memory()  # (the worker runs fits as the slang command does: see slangcli.threads)
    record = {"name": os.path.basename(task.path), **task.params}
    code, message, resumed = 0, "", None
    found = stored(task.path)
    args = list(task.args)
    same = bool(found) and _same_fit(found, args)
    if not (same and found[0] == "complete"):
        try:
            if same and found[0] == "checkpoint":
                resumed = found[2]
                _resume(task)
            else:
                _fit(task)
        except SlangError as exc:
            code, message = exit_code(exc), one_line(str(exc))
        except MemoryError as exc:
            code, message = exit_code(exc), OUT_OF_MEMORY
    record.update(status="complete" if code == 0 else "failed", error=message, exit_code=code,
                  seconds=time.perf_counter() - started, worker=_worker_address(), resumed_at_step=resumed)
    if code == 0:
        try:
            # (read here: this process wrote the file a moment ago, so the forked child that guards against a
            # corrupted file guards against nothing, and a fork of a worker's process, whose other threads may
            # hold locks at that moment, is best avoided)
            record.update(metrics_of(task.path, isolated=False))
        except SlangError as exc:
            record.update(status="failed", error=one_line(str(exc)), exit_code=1)
    return record
