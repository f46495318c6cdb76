"""Sweeps: grids of fits on a Dask cluster, one run file per fit under a directory, one results table, resumable.

A sweep is a list of :class:`Point`, each the options of one ``slang fit``. Each becomes one Dask task whose
options are built once in the sweep's process; the task runs the library's fit on a worker, writes its own run file
(atomically, as ``slang fit`` does) and returns a small record: its parameters, train and test metrics, seconds,
worker, status and error message. The records make ``results.csv`` and ``results.json``, rewritten (atomically) as
fits finish; the table also keeps the complete fits of earlier sweeps in the directory.

A fit is complete in the directory when its run file exists with status ``complete`` and the command recorded in
it has the same fit options as the point, so rerunning a sweep runs only the fits that are missing, failed or
changed. A worker that dies mid-fit has its task rescheduled by Dask on another worker; since every fit
checkpoints into its run file, the retried task continues from the checkpoint and gives the fit that was never
stopped.

The parts, none of which imports the command line (``slangcli.cli.sweep`` is a thin click layer over them):

- :mod:`slangcli.sweep.grid`: the options a grid may vary, the points of grids and spec files, run-file names, and
  each point's ``DataOptions`` and ``FitOptions``;
- :mod:`slangcli.sweep.tasks`: one fit on a worker (:func:`run_fit`), and what a run file in the directory holds;
- :mod:`slangcli.sweep.results`: the table;
- :mod:`slangcli.sweep.driver`: the sweep's own process (:func:`run_sweep`, :func:`sweep_fits`);
- ``slangcli.cluster``: the Dask client, the local cluster and its orderly shutdown (shared with ``slang fit
  --scheduler``).
"""

from slangcli.sweep.driver import SweepResult, check_directory, check_inputs_kept, run_sweep, sweep_fits
from slangcli.sweep.grid import Point, make_point, not_applied, options_of, parameters, points_of, read_spec
from slangcli.sweep.results import RESULTS, json_record, read_results, write_results
from slangcli.sweep.tasks import Task, is_complete, make_task, run_fit

__all__ = ["Point", "RESULTS", "SweepResult", "Task", "check_directory", "check_inputs_kept", "is_complete",
           "json_record", "make_point", "make_task", "not_applied", "options_of", "parameters", "points_of",
           "read_results", "read_spec", "run_fit", "run_sweep", "sweep_fits", "write_results"]
