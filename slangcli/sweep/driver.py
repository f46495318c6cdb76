"""A sweep's own process: which fits to run, their tasks submitted to a Dask cluster, the table written as they
finish, and an orderly end when it is stopped.

:func:`run_sweep` runs the points not yet complete in a directory on a client (``slangcli.cluster``), one task each
(``slangcli.sweep.tasks``), and keeps the table (``slangcli.sweep.results``) up to date, also when interrupted;
:func:`sweep_fits` does it for scripts that make their own list of fits (the benchmarks).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from slangcli.cluster import dask_client, run_tasks
from slangcli.errors import ConfigError, SlangError, exit_code
from slangcli.runfile.outputs import UnusableOutput, one_line, signal_arrived
from slangcli.sweep.grid import Point, points_of
from slangcli.sweep.results import (RESULTS, complete_record, other_fits, read_results, remove_temporaries,
                                    write_results)
from slangcli.sweep.tasks import is_complete, make_task, run_fit


@dataclass
class SweepResult:
    records: list  # one per point, in the points' order
    ran: int  # fits run by this sweep (those refused for their options included)
    skipped: int  # fits already complete in the directory
    kept: int = 0  # complete fits of earlier sweeps (not points of this one) kept in the table


def _make_directory(directory: Path) -> None:
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise UnusableOutput(f"cannot create the directory {directory}: {exc.strerror or exc}") from None


def check_directory(directory) -> None:
    """Refuse, before any work, an output directory that cannot be made or written: a file, or beneath one, or in
    a directory the user cannot write (:class:`UnusableOutput`, a usage error)."""
    path = os.path.normpath(os.fspath(directory))  # (named as given: relative stays relative)
    if os.path.exists(path) and not os.path.isdir(path):
        raise UnusableOutput(f"{path} is not a directory")
    existing = path
    while not os.path.exists(existing):  # the nearest ancestor there is
        existing = os.path.dirname(existing) or os.curdir
    if not os.path.isdir(existing):
        raise UnusableOutput(f"cannot create the directory {path}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UnusableOutput(f"cannot write in the directory {path}" if existing == path else
                             f"cannot create the directory {path}: {existing} is not writable")


def check_inputs_kept(points: list[Point], directory, inputs=()) -> None:
    """Refuse, before any work, a sweep that would write over a file it reads: a fit's data or any other file an
    option names, or ``inputs`` (the spec), which is also the directory's ``results.csv`` or ``results.json`` or one
    of its run files (by name or by a link: :class:`UnusableOutput`, a usage error)."""
    directory = Path(directory)
    read = {os.path.abspath(path) for path in inputs}
    for value in {v for p in points for v in p.params.values() if isinstance(v, str)}:
        if os.path.isfile(value):
            read.add(os.path.abspath(value))
        elif os.path.isdir(value):  # a UCI folder: its data and index files, there or in its data/
            read |= {os.path.abspath(f) for d in (value, os.path.join(value, "data")) if os.path.isdir(d)
                     for f in (os.path.join(d, name) for name in os.listdir(d)) if os.path.isfile(f)}
    files = {}
    for path in read:
        with contextlib.suppress(OSError):
            status = os.stat(path)
            files.setdefault((status.st_dev, status.st_ino), path)
    for name in (*RESULTS, *(p.name for p in points)):
        try:
            status = os.stat(directory / name)
        except OSError:  # (not there yet: a new file cannot be one that is read)
            continue
        path = files.get((status.st_dev, status.st_ino))
        if path is not None:
            linked = f" ({path})" if path != os.path.abspath(directory / name) else ""
            raise UnusableOutput(f"{directory / name} is an input file{linked}; refusing to overwrite it: give the "
                                 "sweep another directory")


def _refused(point: Point, exc: ConfigError) -> dict:
    """The record of a fit whose options do not go together: failed before it ran, as ``slang fit`` refuses them."""
    return {"name": point.name, **point.params, "status": "failed", "error": one_line(str(exc)),
            "exit_code": exit_code(exc), "seconds": None, "worker": "", "resumed_at_step": None}


def _crashed(name: str, params: dict, exc: BaseException) -> dict:
    """The record of a fit whose task raised (its worker's error, not ``slang fit``'s own message and exit code)."""
    return {"name": name, **params, "status": "failed", "error": f"{type(exc).__name__}: {exc}", "exit_code": None,
            "seconds": None, "worker": "", "resumed_at_step": None}


def run_sweep(points: list[Point], directory, client, *, checkpoint_seconds: float = 60.0, retries: int = 2,
              on_record: Callable[[dict, int, int], None] | None = None,
              on_skip: Callable[[int, int], None] | None = None,
              on_kept: Callable[[int], None] | None = None, table_every: float = 1.0, inputs=()) -> SweepResult:
    """Run the ``points`` not yet complete in ``directory`` on ``client`` (a ``distributed.Client``, or a
    function returning a context manager that gives one, called only if some fit is to run); write the table as
    they finish (at most every ``table_every`` seconds, and at the end, also when interrupted). ``on_record(record,
    done, total)`` is called for each finished fit, ``on_skip(skipped, total)`` once with the count already done,
    ``on_kept(kept)`` once if the directory holds complete fits of other grids.

    Each fit's options are built here, once (``slangcli.sweep.tasks.make_task``); a fit whose options do not go
    together fails without a task, with ``slang fit``'s message and exit code. The table holds every complete fit
    in the directory: this sweep's points, and those of earlier sweeps with other grids
    (``slangcli.sweep.results.other_fits``), which keep their earlier rows, earlier rows first. The directory is
    created, and the table written, only once the client is there: a cluster that cannot be reached leaves nothing
    behind. When the sweep stops early (an interrupt, a signal), the table also gets the fits whose run files were
    completed but whose records had not reached this client. ``inputs``: files the sweep reads besides the fits'
    own (its spec), which it refuses to write over as it refuses a fit's data (:func:`check_inputs_kept`)."""
    directory = Path(directory).resolve()
    check_inputs_kept(points, directory, inputs)
    earlier = read_results(directory)
    records, todo, refused = _plan(points, directory, earlier, checkpoint_seconds)
    names = {p.name for p in points}
    others = other_fits(directory, names, earlier)
    skipped = len(records)
    if on_skip is not None:
        on_skip(skipped, len(points))
    if others and on_kept is not None:
        on_kept(len(others))
    order = _table_order(points, earlier, others)
    last_write = -math.inf

    def table():
        rows = {**others, **records}
        write_results(directory, [rows[n] for n in order if n in rows])

    def finished(name, result):
        nonlocal last_write
        if isinstance(result, BaseException):
            result = _crashed(name, todo[name].params, result)
        records[name] = result
        if on_record is not None:
            on_record(result, len(records), len(points))
        if time.monotonic() - last_write >= table_every:
            table()
            last_write = time.monotonic()

    started, cluster = False, None
    try:
        if todo:
            # a client, or a function opening one (a context manager), called only when there is work
            with client() if callable(client) else contextlib.nullcontext(client) as connected:
                cluster = getattr(connected, "cluster", None)  # a local cluster's, which may close with it
                _make_directory(directory)
                started = True
                remove_temporaries(directory, points)
                for name, record in refused.items():
                    finished(name, record)
                run_tasks(connected, run_fit, todo, finished, retries=retries)
        else:
            _make_directory(directory)
            started = True
            for name, record in refused.items():
                finished(name, record)
    except BaseException as exc:
        signal_arrived(exc)  # an interrupt, handled here by writing the table: not to stop that write again
        raise
    finally:
        if started:
            # (after a local cluster has closed, so no worker still writes; on a cluster of one's own, fits running
            # when the client stopped may finish later, and count at the next sweep)
            records.update(_completed_unreported(todo, records))
            table()
            if getattr(getattr(cluster, "status", None), "name", None) == "closed":
                # its workers are gone, also when interrupted: what they left half-written can go
                remove_temporaries(directory, points)
    # every task has finished: what a killed worker left half-written can go (not when interrupted on a cluster
    # that goes on, since cancelled tasks may still be writing; the next sweep's start removes those)
    remove_temporaries(directory, points)
    return SweepResult([records[p.name] for p in points], ran=len(todo) + len(refused), skipped=skipped,
                       kept=len(others))


def _plan(points: list[Point], directory: Path, earlier: dict, checkpoint_seconds: float):
    """``(records, todo, refused)``: the records of the points already complete in ``directory`` (their rows of
    the ``earlier`` table, or read from their run files), the task of each point to run, and the record of each
    point whose options do not go together."""
    records: dict[str, dict] = {}
    todo, refused = {}, {}
    for point in points:
        path = directory / point.name
        if is_complete(path, point.args):
            old = earlier.get(point.name)
            if old is not None and old.get("status") == "complete":
                records[point.name] = {**old, **point.params}  # as this grid names its parameters
            else:  # complete but not in the table (the client died before writing it)
                records[point.name] = {"name": point.name, **point.params, **complete_record(path)}
        else:
            try:
                todo[point.name] = make_task(point, str(path), checkpoint_seconds)
            except ConfigError as exc:
                refused[point.name] = _refused(point, exc)
    return records, todo, refused


def _table_order(points: list[Point], earlier: dict, others: dict) -> list:
    """The order of the table's rows: the fits of the ``earlier`` table first, as they were (this sweep's points
    and the ``others`` kept), then this sweep's new points, then the other fits the earlier table lacked."""
    names = {p.name for p in points}
    return [*(n for n in earlier if n in names or n in others), *(p.name for p in points if p.name not in earlier),
            *(n for n in others if n not in earlier)]


def _completed_unreported(todo: dict, records: dict) -> dict:
    """The records of the fits to run whose run files are complete but whose records have not reached this
    client (a sweep stopped early)."""
    late = {}
    for name, task in todo.items():
        if name not in records and is_complete(task.path, task.args):
            with contextlib.suppress(SlangError):
                late[name] = {"name": name, **task.params, **complete_record(task.path)}
    return late


def sweep_fits(fits: list[dict], directory, *, scheduler: str | None = None, workers: int | None = None,
               checkpoint_seconds: float = 60.0, on_record: Callable[[dict, int, int], None] | None = None
               ) -> tuple[list[Point], SweepResult]:
    """Run the ``slang fit`` of each of ``fits`` (``{"data": path, option key: value}``, one value each) as a
    sweep in ``directory``, on the cluster at ``scheduler`` or a local one of ``workers`` processes; for scripts
    (the benchmarks) that make their own grids. Returns the points, in order, and the sweep's result."""
    points = points_of(fits)
    if len(points) != len(fits):
        raise ConfigError("sweep_fits: every fit must be one distinct slang fit (one value per option)")
    result = run_sweep(points, directory, lambda: dask_client(scheduler, workers),
                       checkpoint_seconds=checkpoint_seconds, on_record=on_record)
    return points, result
