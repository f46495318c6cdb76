"""Dask clusters for fits: connecting to a scheduler, starting and closing a local cluster, running tasks on it.

One module serves every user of a cluster: ``slang sweep`` (``slangcli.sweep``: one task per fit, on a local
cluster of worker processes or on the cluster of ``--scheduler``) and ``slang fit --tune/--restarts --scheduler``
(:func:`cluster_map`: the candidate fits and the restarts as tasks). So an address is checked, a connection refused
and a missing Dask reported with the same messages and exit codes whichever command meets them:

- :func:`check_scheduler_address`: an address that is not one (a ConfigError, exit 2), before any work;
- :func:`connect`: a scheduler that does not answer within Dask's ``distributed.comm.timeouts.connect`` (30 s
  unless configured) is a SlangError (exit 1);
- :func:`require_distributed`: no ``dask.distributed`` installed (:class:`MissingDask`, exit 3), saying how to
  install it.

A local cluster (:func:`dask_client` without an address) has one thread and one BLAS thread per worker process,
leaves the signals that stop a sweep to the process that started it (:func:`_signals_held`,
``slangcli.cluster_worker``) and closes its workers before its scheduler (:func:`close_in_order`).

Dask (``dask.distributed``) is an optional dependency, imported only when a cluster is used.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Callable

from slangcli.errors import ConfigError, MissingExtra, SlangError
from slangcli.threads import keep_freed_memory

INSTALL_HINT = "pip install 'slangcli[dask]'"
# environment of local worker processes: one BLAS thread each, since the workers already use every core
ONE_BLAS_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class MissingDask(MissingExtra):
    def __init__(self, what: str = "a Dask cluster"):
        super().__init__(f"{what} needs dask.distributed, which is not installed: {INSTALL_HINT}")


def require_distributed(what: str = "a Dask cluster"):
    """The ``distributed`` module, or :class:`MissingDask` saying that ``what`` needs it and how to install it."""
    try:
        import distributed
    except ImportError:
        raise MissingDask(what) from None
    return distributed


def check_scheduler_address(address: str) -> None:
    """Refuse, before any work, a ``--scheduler`` that is not the address of a Dask scheduler (``tcp://HOST:PORT``
    and the other schemes of ``distributed.comm``), as a usage error."""
    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.registry import get_backend

    try:
        scheme, location = parse_address(address)
        get_backend(scheme)
        if scheme in ("tcp", "tls"):
            parse_host_port(location)
    except ValueError as exc:
        raise ConfigError(f"--scheduler {address}: not the address of a Dask scheduler ({exc})") from None


@contextlib.contextmanager
def connect(address: str, what: str = "--scheduler"):
    """A ``distributed.Client`` connected to the scheduler at ``address``, closed at the end of the block.

    The address is checked first (:func:`check_scheduler_address`); a scheduler that does not answer within
    Dask's connection timeout (``distributed.comm.timeouts.connect``, 30 s unless configured) is a SlangError."""
    distributed = require_distributed(what)
    check_scheduler_address(address)
    try:
        client = distributed.Client(address)
    except ValueError as exc:
        raise ConfigError(f"--scheduler {address}: {exc}") from None
    except (OSError, TimeoutError) as exc:
        raise SlangError(f"cannot connect to the Dask scheduler at {address}: {exc}") from None
    with client, _log_filters({"tornado.application": CancelBeforeStart()}):
        yield client


@contextlib.contextmanager
def _log_filters(filters: dict):
    """Each ``{logger name: filter}`` added to its logger for the block."""
    for name, filter_ in filters.items():
        logging.getLogger(name).addFilter(filter_)
    try:
        yield
    finally:
        for name, filter_ in filters.items():
            logging.getLogger(name).removeFilter(filter_)


@contextlib.contextmanager
def cluster_map(address: str | None):
    """``map_jobs(function, jobs)`` on the Dask cluster at ``address`` (None: None, the fit's own serial map), for
    the candidate fits of ``--tune``, the fits of ``--restarts`` and the members of ``--members``. The jobs are pure
    functions of their arguments, so where they run does not change the result."""
    if address is None:
        yield None
        return

    def map_jobs(function, jobs):
        if not jobs:
            return []
        # (the tasks are named after the function, not the wrapper)
        tasks = client.map(functools.partial(_as_the_command, function), *zip(*jobs), pure=False,
                           key=function.__name__.lstrip("_"))
        return client.gather(tasks)

    with connect(address) as client:
        yield map_jobs


def _as_the_command(function: Callable, *args):
    """``function(*args)`` on a cluster's worker, which then runs fits as the ``slang`` command does: with freed
    memory kept (``slangcli.threads.keep_freed_memory``; without it, each of two members of a boston fit took 9 s
    on a 2-worker local cluster, against 4.5 s with it and 4.3 s in the command)."""
    keep_freed_memory()
    return function(*args)


# --------------------------------------------------------------------------------------------- a local cluster

# the signals that stop a sweep: the command line turns them into KeyboardInterrupt (SIGINT) and Terminated
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextlib.contextmanager
def _signals_held():
    """Run the block with :data:`STOP_SIGNALS` blocked in the calling thread and, in the main thread, held back:
    the first is raised again, to its handler, when the block ends. Around a local cluster's start and its close,
    so that a signal cannot leave it half started or half closed.

    The threads the start makes (the cluster's event loop, and from it the threads that start worker processes)
    inherit the blocked signals, and so do the worker processes, also those started again later. A Ctrl-C at a
    terminal goes to every process of the foreground process group (and so do the SIGHUP of a closed terminal and
    a SIGTERM to the job): it reaches only this process, which then closes the workers in order. A
    KeyboardInterrupt in each worker printed a traceback per worker, and another of its nanny; workers ended by
    a SIGTERM made the scheduler log the results it could no longer gather. (A worker still ends with this
    process, and its nanny ends it with SIGKILL.)"""
    main = threading.current_thread() is threading.main_thread()
    held, previous = [], {}

    def hold(signum, frame):
        held.append(signum)

    # multiprocessing's resource tracker, started with the first worker process, unblocks SIGINT and SIGTERM in
    # the thread that starts it (it unblocks them rather than restoring the mask it found): started now, before
    # the block, it is running already when the cluster's thread starts a worker. It ignores SIGINT and SIGTERM but
    # not SIGHUP, which ended it when a terminal closed; the successor multiprocessing started printed a KeyError
    # traceback for every worker's semaphore it had never seen. Started with SIGHUP blocked, it inherits the block
    # and never receives one (this process receives its own when the block below is lifted).
    from multiprocessing import resource_tracker

    sigmask = hasattr(signal, "pthread_sigmask")
    hangup = tuple(s for s in STOP_SIGNALS if s not in (signal.SIGINT, signal.SIGTERM))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, hangup) if sigmask else None
    resource_tracker.ensure_running()
    if sigmask:
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        if main:
            for signum in STOP_SIGNALS:
                if signal.getsignal(signum) not in (signal.SIG_IGN, None):
                    previous[signum] = signal.signal(signum, hold)
        yield
    finally:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a signal sent meanwhile is delivered (and held) now
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if held:
            signal.raise_signal(held[0])


async def _close_workers(workers, timeout: float) -> None:
    import asyncio

    await asyncio.gather(*(worker.close(timeout=timeout) for worker in workers))


def close_in_order(cluster, timeout: float = 10.0, hurry: bool = False) -> None:
    """Close a local cluster's workers, and wait (at most ``timeout`` seconds) until their processes have ended,
    before the cluster closes its scheduler. The other way round, a worker's heartbeat could meet the closed
    scheduler and log a CommClosedError traceback on stderr; waiting only until the scheduler had forgotten the
    workers was not enough, since their processes go on (and heartbeat) until their nannies have closed them.

    ``hurry``: the sweep was stopped, and the fits still running are abandoned. A worker busy with one does not
    close until the fit ends, and its nanny ends its process after 4 s when the cluster scales down (a Ctrl-C took
    4.5 s with long fits on 2 workers); closed here with 1 s to spare, it took under 1 s."""
    if hurry:
        cluster.sync(_close_workers, list(cluster.workers.values()), 1.0)
    cluster.scale(0)
    deadline = time.monotonic() + timeout
    # (the cluster drops a worker from .workers once its nanny has closed it, and so ended its process)
    while cluster.workers and time.monotonic() < deadline:
        time.sleep(0.05)


@contextlib.contextmanager
def dask_client(scheduler: str | None = None, workers: int | None = None):
    """A ``distributed.Client``: connected to the scheduler at ``scheduler`` (:func:`connect`), or to a new local
    cluster of ``workers`` processes (default: the machine's cores) with one thread and one BLAS thread each (a fit
    sets process-wide state: BLAS thread limits, the allocator), its dashboard on a free port; the local cluster's
    workers leave the signals that stop a sweep to this process (:func:`_signals_held`,
    :mod:`slangcli.cluster_worker`) and are closed before its scheduler (:func:`close_in_order`)."""
    if scheduler:
        with connect(scheduler) as client:
            yield client
        return
    distributed = require_distributed()
    from slangcli.cluster_worker import set_up_workers

    cluster = client = None
    stopped = False
    others = _worker_processes()  # (those of another cluster in this process are not this one's to end)
    # (the local cluster's scheduler runs in this process)
    with _log_filters({"distributed.scheduler": CancelledGathers(), "tornado.application": CancelBeforeStart()}):
        try:
            with _signals_held():
                cluster = distributed.LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1,
                                                   processes=True, env=dict(ONE_BLAS_THREAD), dashboard_address=":0",
                                                   silence_logs=logging.ERROR)
                client = distributed.Client(cluster)
                set_up_workers(client)
            try:
                yield client
            except BaseException:
                stopped = True
                raise
        finally:
            # (a second Ctrl-C waits the second or so the workers take to close, rather than leave them to be reaped at
            # exit with log lines of their own)
            with _signals_held():
                try:
                    if cluster is not None:
                        close_in_order(cluster, hurry=stopped)
                finally:
                    try:
                        if client is not None:
                            client.close()
                    finally:
                        if cluster is not None:
                            cluster.close()
                        _kill_leftover_workers(others)


class CancelledGathers(logging.Filter):
    """Drops the scheduler's errors about results it could not gather for tasks already forgotten (state None, or
    "forgotten"), and the note that follows them that no worker was shut down for it.

    A sweep stopped by Ctrl-C cancels its pending tasks while the result of one may be on its way; the scheduler
    then logged "Couldn't gather keys ... state: [None] workers: []" and "Shut down workers that don't have promised
    key: [], ..." (with "NoneType: None" for tracebacks) beside the sweep's one line (1 in 12 runs of the Ctrl-C
    test, distributed 2023.1). A result lost any other way still fails its fit, which the table then says."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if message.startswith("Couldn't gather keys"):
            # (newer distributed: one argument, {key: state}, which logging makes record.args; older: (keys,
            # [state per key], workers))
            args = record.args
            states = args.values() if isinstance(args, Mapping) else args[1] if len(args) == 3 else [True]
            return not all(state in (None, "forgotten") for state in states)
        if message.startswith("Shut down workers that don't have promised key"):
            return record.args[0] != "[]"
        return True


class CancelBeforeStart(logging.Filter):
    """Drops the NameError that distributed (2026.8) logs through Tornado when a Ctrl-C reaches a call of the client
    (``distributed.utils.sync``) before that call has started its work: the KeyboardInterrupt schedules a callback,
    ``sync.<locals>.cancel``, that reads a variable not yet set. Nothing was started, so nothing is left to cancel;
    the sweep's own handling of the interrupt goes on. Seen once in CI beside the sweep's one line; every other
    error of a callback is kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.exc_info or not isinstance(record.exc_info[1], NameError) or not record.args:
            return True
        callback = record.args[0] if isinstance(record.args, tuple) else None
        callback = getattr(callback, "func", callback)  # (Tornado wraps a callback in functools.partial)
        return getattr(callback, "__qualname__", "") != "sync.<locals>.cancel"


# the name Dask's nannies give the processes of their workers (multiprocessing children of this process)
WORKER_PROCESS = "Dask Worker process"


def _worker_processes() -> list:
    """The processes of this process's local Dask workers now alive (multiprocessing children)."""
    import multiprocessing

    return [p for p in multiprocessing.active_children() if WORKER_PROCESS in (p.name or "")]


def _kill_leftover_workers(others=(), wait: float = 2.0) -> None:
    """End, with SIGKILL, the processes of a local cluster's workers still alive once it has closed: every worker
    process of this process but ``others`` (those of other clusters, alive before it started).

    The workers ignore SIGINT, SIGTERM and SIGHUP (``slangcli.cluster_worker``), so that a stop reaches them only
    as an orderly close from this process; when that close did not finish within its time (a worker's nanny slow to
    answer on a loaded machine), its process outlived a sweep stopped by SIGTERM, holding the sweep's stderr open for
    minutes. Nothing of theirs is lost: a fit still running was abandoned, and its checkpoint stays."""
    leftover = [p for p in _worker_processes() if all(p is not q for q in others)]
    for process in leftover:
        process.join(timeout=wait / max(len(leftover), 1))
        if process.is_alive():
            process.kill()
            process.join(timeout=wait)


def run_tasks(client, function: Callable, items: dict, on_result: Callable, retries: int = 2) -> None:
    """Submit ``function(item)`` for each ``{key: item}`` and call ``on_result(key, result)`` as each finishes
    (``result`` is the exception when the task failed for good, e.g. ``KilledWorker``). A worker that dies mid-task
    has it rescheduled by Dask (``distributed.scheduler.allowed-failures`` times); ``retries`` re-runs a task
    that raised. On KeyboardInterrupt the pending tasks are cancelled and the interrupt re-raised."""
    distributed = require_distributed()
    token = uuid.uuid4().hex[:8]
    futures = {client.submit(function, item, key=f"{key}-{token}", pure=False, retries=retries): key
               for key, item in items.items()}
    try:
        for future in distributed.as_completed(futures):
            try:
                result = future.result()
            except Exception as exc:  # the task's own exception, or the scheduler's (KilledWorker, cancelled)
                result = exc
            on_result(futures[future], result)
            future.release()
    except BaseException:
        client.cancel(list(futures))
        raise
