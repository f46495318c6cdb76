"""What the table-printing benchmark scripts share: running their fits as a sweep (or one process at a time, for
their CPU time), and where their output goes (the human-readable table to stdout unless ``--json -`` claims stdout
for the JSON record, then to stderr)."""

from __future__ import annotations

import contextlib
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def add_sweep_arguments(parser) -> None:
    """The options of a benchmark whose fits run through :func:`sweep_results`: where they run and where their run
    files are kept."""
    parser.add_argument("--jobs", type=int, default=1,
                        help="worker processes of the local Dask cluster (each runs one fit at a time on one core)")
    parser.add_argument("--scheduler", default=None, metavar="ADDRESS",
                        help="run the fits on this Dask cluster instead (slang sweep's machinery)")
    parser.add_argument("--runs", default=None, metavar="DIR",
                        help="keep the run files and results table here; rerunning with the same DIR runs only the "
                             "fits not complete in it (default: a temporary directory)")


def table_stream(json_dest):
    """The stream for the human-readable table, given the script's ``--json`` value (None, a path or ``-``)."""
    return sys.stderr if str(json_dest) == "-" else sys.stdout


def write_json(record, json_dest) -> None:
    """Write ``record`` to ``json_dest``: one line on stdout for ``-``, an indented file otherwise."""
    if str(json_dest) == "-":
        json.dump(record, sys.stdout)
        sys.stdout.write("\n")
    else:
        Path(json_dest).write_text(json.dumps(record, indent=1) + "\n")


def sweep_results(script: str, jobs: list, fit_options, result_row, summary, *, runs, prefix: str, scheduler,
                  workers):
    """Run every job's ``slang fit`` (``fit_options(job)``) as one sweep, on ``scheduler`` or ``workers`` local
    workers, printing each finished fit (``summary(record)``) on stderr; exit naming the first failed fit; return
    ``result_row(job, record, run_file)`` of each job, read while the run files exist (in ``runs``, or a temporary
    folder named ``prefix...`` when it is None), and the sweep's outcome (its ``ran`` and ``skipped`` counts)."""
    from slangcli.sweep import sweep_fits

    def progress(record, done, total):
        print(f"[{done}/{total}] {record['name']}: {record['status']} "
              + (f"({record['error']})" if record["error"] else summary(record)), file=sys.stderr)

    with contextlib.ExitStack() as stack:
        folder = Path(runs) if runs else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))
        points, swept = sweep_fits([fit_options(job) for job in jobs], folder, scheduler=scheduler, workers=workers,
                                   on_record=progress)
        failed = [r for r in swept.records if r["status"] != "complete"]
        if failed:
            sys.exit(f"{script}: {len(failed)} fits failed, e.g. {failed[0]['name']}: {failed[0]['error']}")
        rows = [result_row(job, record, folder / point.name) for job, point, record in zip(jobs, points, swept.records)]
    return rows, swept


def timed_fits(script: str, jobs: list, fit_options, result_row, *, runs, prefix: str) -> list:
    """Run every job's ``slang fit`` (``fit_options(job)``) in a process of its own, one after the other, and
    return ``result_row(job, record, run_file)`` of each, with ``record["cpu_seconds"]`` the whole process's CPU
    time (user and system, its BLAS threads included: start-up, data, training, scoring and the run file, as a
    user's ``slang fit`` spends it) and ``record["seconds"]`` its wall time. Run files go to ``runs`` (every fit is
    run again, replacing its file there: a measurement) or a temporary folder named ``prefix...``; each finished
    fit is printed on stderr, and a failed one ends the script naming it. Sequential on purpose: two fits at once on two cores would share caches and memory
    bandwidth, and CPU seconds would depend on what else ran."""
    from slangcli.errors import ConfigError
    from slangcli.sweep import points_of

    rows = []
    if not jobs:
        return rows
    try:  # the fits' options checked and written as a sweep writes them (the same commands and run-file names)
        points = [points_of([fit_options(job)])[0] for job in jobs]
    except ConfigError as e:
        sys.exit(f"{script}: {e}")
    with contextlib.ExitStack() as stack:
        folder = Path(runs) if runs else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))
        folder.mkdir(parents=True, exist_ok=True)
        for i, (job, point) in enumerate(zip(jobs, points), 1):
            path = folder / point.name
            path.unlink(missing_ok=True)
            before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "slangcli", "fit", *point.args, "-o", str(path)],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)
            wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
            if proc.returncode != 0:
                lines = proc.stderr.strip().splitlines()
                sys.exit(f"{script}: {point.name} failed (exit {proc.returncode}): {lines[-1] if lines else ''}")
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            record = {"name": point.name, "seconds": wall, "cpu_seconds": cpu}
            rows.append(result_row(job, record, path))
            print(f"[{i}/{len(jobs)}] {point.name}: {cpu:.2f} s of CPU, {wall:.2f} s", file=sys.stderr)
    return rows
