"""``slang sweep``: a grid of ``slang fit`` runs on a Dask cluster, one run file each and a results table.

A thin click layer over ``slangcli.sweep``: the grid's options are ``slang fit``'s, each taking several values; the
library makes the points, runs them and writes the table, and this command reports progress, failures and a stop.
"""

from __future__ import annotations

import os
import time

import click

from slangcli.cli.fit import fit as fit_command
from slangcli.cli.options import FloatRange
from slangcli.cli.output import Command, emit_json, error, needs_stdout, note, progress_bar
from slangcli.cluster import check_scheduler_address, dask_client, require_distributed
from slangcli.errors import ConfigError
from slangcli.runfile.outputs import Terminated, signal_arrived
from slangcli.sweep import (RESULTS, check_directory, check_inputs_kept, is_complete, json_record, not_applied,
                            points_of, read_spec, run_sweep)

# slang fit options a sweep sets itself (the run file's name, checkpoints, output) and never takes from a grid
SWEEP_OWNED = {"output", "resume_path", "as_json", "progress", "checkpoint_seconds", "scheduler"}


def fit_parameters() -> dict:
    """``{name: click parameter}`` of the ``slang fit`` options a grid may vary, in the command's order (the
    library's ``slangcli.sweep.parameters``, as ``slang fit``'s command line declares them)."""
    return {p.name: p for p in fit_command.params if p.name not in SWEEP_OWNED and p.name != "data"}


def option_key(param) -> str:
    """The name a grid, a spec file and the results table use for a fit option: its long form without dashes
    (``--uci-split`` -> ``uci-split``)."""
    return max(param.opts, key=len).lstrip("-")


def grid_options(command):
    """Every ``slang fit`` option a grid may vary, taking several values (repeated, or as a list or range)."""
    for param in reversed(list(fit_parameters().values())):
        if param.is_flag:
            decls = [f"{param.opts[0]}/{param.secondary_opts[0]}"] if param.secondary_opts else list(param.opts)
            command = click.option(*decls, param.name, default=None, help=param.help)(command)
        else:
            command = click.option(*param.opts, param.name, multiple=True, metavar="VALUES", help=param.help)(
                command)
    return command


@click.command(cls=Command, context_settings={"max_content_width": 110})
@click.argument("data", nargs=-1, type=click.Path(readable=False, path_type=str))
@click.option("-o", "--output", "directory", required=True, type=click.Path(file_okay=False, path_type=str),
              help="Directory of the run files and results.csv / results.json (created if missing).")
@click.option("--spec", type=click.Path(exists=True, dir_okay=False, path_type=str), default=None,
              help="JSON or TOML file of grids (a list of {option: values}, TOML [[grid]] tables); the sweep is "
                   "their union, each combined with the options given here.")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Run on the Dask cluster of this scheduler (e.g. tcp://host:8786) instead of a local one; DATA "
                   "and DIR must be on a file system its workers share.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Worker processes of the local cluster (default: the machine's cores), one thread each.")
@click.option("--checkpoint-seconds", type=FloatRange(min=0), default=60.0, show_default=True,
              help="Each fit checkpoints to its run file this often, so a fit whose worker dies continues there.")
@click.option("--dry-run", is_flag=True, help="List the fits and whether each is complete; run nothing.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a terminal only).")
@click.option("--json", "as_json", is_flag=True, callback=needs_stdout, help="Print a summary as one JSON object on stdout.")
@grid_options
def sweep(data, directory, spec, scheduler, workers, checkpoint_seconds, dry_run, progress, as_json, **given):
    """Fit every combination of the given slang fit options, on Dask, one run file each in DIR.

    \b
    slang sweep train.csv --method slang,bbb --rank 1,2,4 --seed 0-4 -o DIR
    slang sweep data/uci/* --uci-split 0-19 --hidden 50 --epochs 120 -o DIR --scheduler tcp://HOST:8786

    Numeric and choice options take comma-separated lists and integer ranges (0-19, both ends included);
    several DATA, or an option given several times (--hidden 50 --hidden 50,50), are alternatives too.
    Run files are named from their parameters. A fit already complete in DIR with the same options is not run
    again, so rerunning a sweep (after Ctrl-C, a crash, or with a changed grid) runs only what is missing, and
    the table keeps every complete fit in DIR, those of other grids too;
    a fit whose worker dies is rerun elsewhere from its last checkpoint. Exit status 1 if any fit failed (the
    table has its message).
    """
    grids = _grids(data, spec, given)
    points = points_of(grids)
    _refuse_streams(points)
    for line in not_applied(grids):
        note(line)
    if not directory.strip():  # (an unset variable, -o "$OUT": the working directory is not what was meant)
        raise click.BadParameter("the output directory is empty; give a directory name", param_hint="'-o'")
    if directory == "-":
        raise click.BadParameter("'-' is standard output; give a directory name (./- for a directory named '-')",
                                 param_hint="'-o'")
    directory = os.path.abspath(directory)
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise click.BadParameter(f"{directory} is not a directory", param_hint="'-o'")
    if dry_run:
        _list_fits(points, directory, as_json)
        return
    require_distributed("slang sweep")
    # refused before a cluster starts, and before DIR is made: nothing is left behind
    check_directory(directory)
    check_inputs_kept(points, directory, [spec] if spec else [])
    if scheduler:
        check_scheduler_address(scheduler)
    started = time.perf_counter()
    result, failures = _run_with_progress(points, directory, scheduler, workers, checkpoint_seconds, progress,
                                          [spec] if spec else [])
    seconds = time.perf_counter() - started
    complete = sum(r["status"] == "complete" for r in result.records)
    kept = (f", and the {result.kept} complete fit{'s' if result.kept != 1 else ''} of other grids" if result.kept
            else "")
    note(f"{len(points)} fit{'s' if len(points) != 1 else ''}: {complete} complete ({result.skipped} already), "
         f"{len(failures)} failed, {seconds:.1f} s; table in {os.path.join(directory, RESULTS[0])}{kept}")
    if as_json:
        emit_json({"directory": directory, "fits": len(points), "ran": result.ran, "skipped": result.skipped,
                   "kept": result.kept, "complete": complete, "failed": len(failures), "seconds": seconds,
                   "results": [os.path.join(directory, name) for name in RESULTS],
                   "failures": [{"name": r["name"], "error": r["error"]} for r in failures]})
    if failures:
        raise click.exceptions.Exit(1)


def _refuse_streams(points) -> None:
    """Every fit reads its data on a worker, by name: a stream (standard input, a pipe, a descriptor's name) could
    be read by one fit at most, and by none on another machine."""
    from slangcli.data.readers import is_stream_path

    for point in points:
        for key in ("data", "test"):
            name = point.params.get(key)
            if isinstance(name, str) and is_stream_path(name):
                flag = "DATA" if key == "data" else "--test"
                raise click.BadParameter(f"{name} is a stream (standard input or a pipe), which only one fit could "
                                         "read; write it to a file and sweep that", param_hint=flag)


def _grids(data, spec, given) -> list:
    """The grids to sweep: the options given on the command line (``data`` and ``given``, click's values), each
    grid of the ``spec`` file combined with them (an option in both is refused), or those options alone."""
    parameters = fit_parameters()
    grid = {"data": list(data)} if data else {}
    for name, value in given.items():
        if value is None or value == () or (value is False and not parameters[name].secondary_opts):
            continue
        grid[option_key(parameters[name])] = list(value) if isinstance(value, tuple) else value
    if spec is None:
        return [grid]
    grids = []
    for g in read_spec(spec):
        both = [k for k in g if k in grid]
        if both:
            raise ConfigError(f"{both[0]} is given both on the command line and in {spec}")
        grids.append({**grid, **g})
    return grids


def _list_fits(points, directory, as_json):
    """--dry-run: each fit, and whether it is complete in ``directory``, on stderr (and as JSON on stdout)."""
    rows = [{"name": p.name, **json_record(p.params), "complete": is_complete(os.path.join(directory, p.name), p.args)}
            for p in points]
    for r in rows:
        click.echo(f"{'done' if r['complete'] else 'todo'}  {r['name']}", err=True)
    if as_json:
        emit_json({"directory": directory, "fits": rows})


def _run_with_progress(points, directory, scheduler, workers, checkpoint_seconds, progress, inputs):
    """Run the sweep, reporting each fit on the progress bar and each failure as it comes: ``(result, failures)``
    (``run_sweep``'s result and the records of the fits that failed). A stop (Ctrl-C, SIGTERM) exits 130 or
    128 + the signal's number, saying where the fits done so far are."""
    table = f"{os.path.join(directory, RESULTS[0])} and {RESULTS[1]}"
    failures = []
    with progress_bar(progress, "sweep") as bar:
        def on_skip(skipped, total):
            if skipped:
                note(f"{skipped} of {total} fits already complete in {directory}")
            bar(skipped, total)

        def on_kept(kept):
            note(f"the table keeps the {kept} complete fit{'s' if kept != 1 else ''} of other grids in {directory}")

        def on_record(record, done, total):
            bar(done, total)
            if record["status"] != "complete":
                failures.append(record)
                error(f"{record['name']}: {record['error'] or 'failed'}")

        try:
            result = run_sweep(points, directory, lambda: dask_client(scheduler, workers),
                               checkpoint_seconds=checkpoint_seconds, on_record=on_record, on_skip=on_skip,
                               on_kept=on_kept, inputs=inputs)
        except (KeyboardInterrupt, Terminated) as exc:
            signal_arrived(exc)  # handled here, with its own message
            # the table was rewritten on the way out: every fit complete in DIR is in it
            stopped = "interrupted (SIGINT)" if isinstance(exc, KeyboardInterrupt) else f"terminated ({exc})"
            code = 130 if isinstance(exc, KeyboardInterrupt) else 128 + exc.signum
            if os.path.exists(os.path.join(directory, RESULTS[0])):
                error(f"{stopped}; the fits done so far are in {table}; run the same command again to continue")
            else:
                error(f"{stopped} before any fit ran; nothing written")
            raise click.exceptions.Exit(code)
    return result, failures
