"""What the table-printing benchmark scripts share: running their fits as a sweep, and where their output goes (the
human-readable table to stdout unless ``--json -`` claims stdout for the JSON record, then to stderr)."""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
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
    from slangcli.cli.sweep_engine import sweep_fits

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
