"""The set-up of each worker process of a local cluster (``slangcli.cluster.dask_client``, which ``slang sweep``
starts): a Dask worker plugin (:class:`LocalWorker`, registered by :func:`set_up_workers`), whose ``setup`` runs on
each worker once it has started, also on one its nanny starts again later, in the main thread of the worker's
process. A module of its own because it imports ``distributed`` when it is imported (the plugin's base class), and
the workers import it to unpickle the plugin: nothing else of slang, least of all the command line.

- SIGINT, SIGTERM and SIGHUP are ignored. A Ctrl-C at a terminal goes to every process of the foreground process
  group (so do the SIGHUP of a closed terminal and a SIGTERM to the job); the sweep's own process stops the sweep
  and closes the workers in order, while a KeyboardInterrupt in each worker only printed a traceback per worker,
  and a worker ended under the sweep made the scheduler log the result it could no longer gather. (The sweep
  starts its workers with these signals blocked already; this covers a worker started otherwise, from the moment
  it is set up. A worker still ends with the sweep, and its nanny ends it with SIGKILL.)
- A heartbeat to the scheduler still on its way when the worker closes fails with CommClosedError, since the
  worker closes its connections under it, and Dask logs that as an ERROR with a traceback. Nothing is wrong then:
  that record is dropped while the worker is closing; a heartbeat failing while the worker runs is still logged.

A plugin rather than a Dask preload: distributed 2023.1 logs the loading of a preload at INFO before a worker
quietens its logs, which put two lines per worker on the sweep's stderr.
"""

from __future__ import annotations

import logging
import signal
import threading

import distributed

HEARTBEAT_FAILED = "Failed to communicate with scheduler during heartbeat"
CLOSING = ("closing", "closing_gracefully", "closed")


class ClosingHeartbeat(logging.Filter):
    """Drops the failed heartbeat's record of ``worker`` (a ``distributed.Worker``) once the worker is closing."""

    def __init__(self, worker):
        super().__init__()
        self.worker = worker

    def filter(self, record: logging.LogRecord) -> bool:
        closing = getattr(self.worker.status, "name", None) in CLOSING
        return not (closing and str(record.msg).startswith(HEARTBEAT_FAILED))


class LocalWorker(distributed.WorkerPlugin):
    name = "slang-local-worker"

    def setup(self, worker) -> None:
        if threading.current_thread() is threading.main_thread():
            for name in ("SIGINT", "SIGTERM", "SIGHUP"):
                if hasattr(signal, name):
                    signal.signal(getattr(signal, name), signal.SIG_IGN)
        logging.getLogger("distributed.worker").addFilter(ClosingHeartbeat(worker))


def set_up_workers(client) -> None:
    """Register :class:`LocalWorker` with ``client``'s cluster: its workers now and those to come."""
    # (Client.register_plugin in newer distributed, register_worker_plugin in older ones such as 2023.1)
    register = getattr(client, "register_plugin", None) or client.register_worker_plugin
    register(LocalWorker(), name=LocalWorker.name)
