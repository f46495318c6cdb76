"""Grids of ``slang fit`` runs on Dask: one run file per fit under a directory, one results table, resumable.

A sweep is a list of :class:`Point`: the options of one ``slang fit``. Each becomes one Dask task,
:func:`run_fit`, a pure function of its arguments that writes its own run file (atomically, as ``slang fit``
does) and returns a small record: its parameters, train and test metrics, seconds, worker, status and error
message. The records make ``results.csv`` and ``results.json``, rewritten (atomically) as fits finish; the table
also keeps the complete fits of earlier sweeps in the directory (:func:`other_fits`).

A fit is complete in the directory when its run file exists with status ``complete`` and the command recorded
in it has the same fit options as the point, so rerunning a sweep runs only the fits that are missing, failed or
changed. A worker that dies mid-fit has its task rescheduled by Dask on another worker; since every fit
checkpoints into its run file (``--checkpoint-seconds``), the retried task continues from the checkpoint
(``slang fit --resume``) and gives the fit that was never stopped.

The cluster (``slangcli.cluster``: the client, the local cluster, running the tasks) is shared with ``slang fit
--scheduler``. This module belongs to the command line: a grid is made of ``slang fit``'s options and a task runs
that command.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import itertools
import json
import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from slangcli.cluster import dask_client, run_tasks
from slangcli.errors import ConfigError, SlangError
from slangcli.outputs import UnusableOutput, signal_arrived

# slang fit options a sweep sets itself (the run file's name, checkpoints, output) and never takes from a grid
SWEEP_OWNED = {"output", "resume_path", "as_json", "progress", "checkpoint_seconds", "scheduler"}
RESULTS = ("results.csv", "results.json")
RECORD_FIELDS = ("name", "status", "error", "exit_code", "seconds", "worker", "resumed_at_step")


# --------------------------------------------------------------------------------------------------- the grid


def fit_parameters() -> dict:
    """``{name: click parameter}`` of the ``slang fit`` options a grid may vary, in the command's order."""
    from slangcli.cli.fit import fit

    return {p.name: p for p in fit.params if p.name not in SWEEP_OWNED and p.name != "data"}


def option_key(param) -> str:
    """The name a grid, a spec file and the results table use for a fit option: its long form without dashes
    (``--uci-split`` -> ``uci-split``)."""
    return max(param.opts, key=len).lstrip("-")


def _is_int(param) -> bool:
    import click

    return isinstance(param.type, click.types.IntParamType)


def _is_float(param) -> bool:
    import click

    return isinstance(param.type, click.types.FloatParamType)


def _is_listable(param) -> bool:
    """Numbers and choices split on commas; free text (``--hidden 50,50``, ``--tune lr,beta``) does not."""
    import click

    return _is_int(param) or _is_float(param) or isinstance(param.type, click.Choice)


def expand(param, raw) -> list:
    """The values one given value of ``param`` stands for: ``"1,2,4"``, the integer range ``"0-19"`` (both
    ends included) or one value; each checked by the option's own type and written canonically."""
    import click

    if param.is_flag:
        if not isinstance(raw, bool):
            raise ConfigError(f"{option_key(param)}: expected true or false, got {raw!r}")
        return [raw]
    items = str(raw).split(",") if _is_listable(param) else [str(raw)]
    out = []
    for item in (i.strip() for i in items):
        span = re.fullmatch(r"(\d+)-(\d+)", item) if _is_int(param) else None
        values = [str(v) for v in range(int(span[1]), int(span[2]) + 1)] if span else [item]
        if span and not values:
            raise ConfigError(f"--{option_key(param)}: empty range {item!r}")
        for value in values:
            try:
                converted = param.type.convert(value, param, None)
            except click.BadParameter as exc:
                raise ConfigError(f"--{option_key(param)}: {exc.format_message()}") from None
            # (a float option may also take a word: --noise-precision auto)
            out.append(repr(converted) if _is_float(param) and isinstance(converted, float)
                       else str(converted) if _is_int(param) else value)
    return out


@dataclass
class Point:
    """One fit of a sweep: its parameters (``{"data": path, option key: value}``, values as on the command
    line, ``True``/``False`` for flags) and the ``slang fit`` arguments they make."""

    params: dict
    args: list = field(default_factory=list)
    name: str = ""


def _slug(text) -> str:
    return re.sub(r"[^A-Za-z0-9.+=-]+", "-", str(text)).strip("-.") or "x"


def make_point(params: dict, parameters: dict | None = None) -> Point:
    """The :class:`Point` of ``params`` (data and option keys to single values): the fit's arguments in the
    command's option order, without options given their default value, data and other paths made absolute
    (workers may run elsewhere); and its run file's name: the data's and those options' values (readable) and a
    hash of the arguments (unique)."""
    parameters = parameters or fit_parameters()
    by_key = {option_key(p): p for p in parameters.values()}
    import click

    data = os.path.abspath(params["data"])
    args, ordered, named = [data], {"data": params["data"]}, {}
    for key, param in by_key.items():
        if key not in params:
            continue
        value = params[key]
        ordered[key] = value
        if _is_default(param, value):  # the same fit as without the option: the same arguments and name
            continue
        named[key] = value
        if param.is_flag:
            args.append(param.opts[-1] if value else param.secondary_opts[-1] if param.secondary_opts else None)
            if args[-1] is None:
                raise ConfigError(f"{key}: the flag cannot be switched off")
        else:
            if isinstance(param.type, click.Path):
                value = os.path.abspath(value)
            args += [max(param.opts, key=len), str(value)]
    stem = Path(params["data"].rstrip("/")).name
    stem = Path(stem).stem if "." in stem else stem
    readable = "_".join([_slug(stem), *(f"{_slug(k)}-{_slug(v)}" for k, v in named.items())])
    return Point(params=ordered, args=args, name=f"{readable[:120]}{_name_end(args)}")


def _name_end(args: list) -> str:
    """How the run file of the fit with ``args`` is named at the end: a hash of the arguments."""
    return f"_{hashlib.sha256(json.dumps(args).encode()).hexdigest()[:8]}.h5"


def params_of(args: list, parameters: dict | None = None) -> dict | None:
    """The parameters of a fit from its arguments (as :func:`make_point` makes them, so options at their default
    are not there), or None when an argument is not a ``slang fit`` option (any more)."""
    parameters = parameters or fit_parameters()
    options = {}
    for param in parameters.values():
        key = option_key(param)
        if param.is_flag:
            options[param.opts[-1]] = (key, True)
            if param.secondary_opts:
                options[param.secondary_opts[-1]] = (key, False)
        else:
            options[max(param.opts, key=len)] = (key, None)
    if not args:
        return None
    params, rest = {"data": args[0]}, list(args[1:])
    while rest:
        key, value = options.get(rest.pop(0), (None, None))
        if key is None or (value is None and not rest):
            return None
        params[key] = rest.pop(0) if value is None else value
    return params


def _is_default(param, value) -> bool:
    """Whether ``value`` (canonical, from :func:`expand`) is what the fit uses when the option is not given."""
    if param.default is None or param.is_flag or param.multiple:
        return False
    return expand(param, param.default) == [value]


def product(grid: dict, parameters: dict | None = None) -> list[dict]:
    """Every combination of a grid ``{"data": [...], option key: [values]}`` (each value expanded by
    :func:`expand`), the last option varying fastest."""
    parameters = parameters or fit_parameters()
    by_key = {option_key(p): p for p in parameters.values()}
    keys = ["data", *(k for k in by_key if k in grid)]
    unknown = [k for k in grid if k != "data" and k not in by_key]
    if unknown:
        raise ConfigError(f"{unknown[0]!r} is not a slang fit option a sweep can vary")
    if not grid.get("data"):
        raise ConfigError("no data: give DATA files or folders (or 'data' in the spec file)")
    values = []
    for key in keys:
        given = grid[key] if isinstance(grid[key], (list, tuple)) else [grid[key]]
        if key == "data":
            values.append([str(v) for v in given])
        else:
            values.append([v for raw in given for v in expand(by_key[key], raw)])
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def read_spec(path) -> list[dict]:
    """The grids of a spec file: JSON (a list of grids, or ``{"grid": [...]}``) or TOML (``[[grid]]``
    tables). Keys are fit option names (``uci-split`` or ``uci_split``) and ``data``; values one or a list."""
    text = Path(path).read_bytes()
    try:
        if str(path).endswith(".toml"):
            import tomllib

            spec = tomllib.loads(text.decode("utf-8"))
        else:
            spec = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:  # tomllib.TOMLDecodeError and JSONDecodeError are ValueErrors
        raise ConfigError(f"{path}: not a valid spec file: {exc}") from None
    grids = spec.get("grid") if isinstance(spec, dict) else spec
    if isinstance(grids, dict):
        grids = [grids]
    if not isinstance(grids, list) or not grids or not all(isinstance(g, dict) for g in grids):
        raise ConfigError(f"{path}: expected a list of grids (tables of option: values), as 'grid' or at the top")
    return [{k.replace("_", "-"): v for k, v in g.items()} for g in grids]


def points_of(grids: Iterable[dict]) -> list[Point]:
    """The distinct fits of the union of ``grids``, in order."""
    parameters = fit_parameters()
    seen, out = set(), []
    for grid in grids:
        for params in product(grid, parameters):
            point = make_point(params, parameters)
            if point.name not in seen:
                seen.add(point.name)
                out.append(point)
    return out


# --------------------------------------------------------------------------------------------------- one fit

TAIL = 5  # the arguments a sweep adds after a fit's own: -o PATH --checkpoint-seconds S --no-progress


def _command_args(command) -> list | None:
    """The fit's own arguments in a run file's recorded command, if a sweep wrote it."""
    if len(command) < 2 + TAIL or command[-TAIL] != "-o":
        return None
    return list(command[2:-TAIL])


def _stored(path) -> tuple[str, list | None, int | None] | None:
    """``(status, fit arguments, steps done)`` of the run file at ``path``, or None when there is none
    readable."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            steps = json.loads(f["metrics"].attrs["metrics"]).get("steps")
            return str(f.attrs["status"]), _command_args(json.loads(f.attrs["command"])), steps
    except (OSError, KeyError, ValueError, AttributeError):
        return None


def is_complete(path, args) -> bool:
    stored = _stored(path)
    return stored is not None and stored[0] == "complete" and stored[1] == list(args)


def call_slang(argv: list[str]) -> tuple[int, str]:
    """Run one ``slang`` command in this process: ``(exit code, its one-line error message or "")``.

    The only place a sweep runs a fit, so that it can move to the library's API without touching the rest.
    """
    import click

    from slangcli.cli import main

    err = io.StringIO()
    message = ""
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main.main(args=argv, prog_name="slang", standalone_mode=False)
        except click.ClickException as exc:
            code, message = exc.exit_code, exc.format_message()
        except click.exceptions.Abort:
            code = 130
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    code = 0 if code is None else int(code)
    if not message:
        errors = [line for line in err.getvalue().splitlines() if line.startswith("slang: error: ")]
        message = errors[-1][len("slang: error: "):] if errors else ""
    return code, message


def _metrics(path) -> dict:
    """The scalar train and test metrics of a finished run file, as ``train_*`` / ``test_*`` columns."""
    from slangcli.io import read_run

    m = read_run(path).metrics
    out = {}
    for part in ("train", "test"):
        for key, value in (m.get(part) or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[f"{part}_{key}"] = value
    out["steps"] = m.get("steps")
    return out


def _worker_address() -> str:
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return ""


def run_fit(task: dict) -> dict:
    """One fit of a sweep (a Dask task): ``task`` has the run file's ``path``, the fit's ``args``, its
    ``params`` and ``checkpoint_seconds``. Skips a fit already complete at ``path``; continues one checkpointed
    there (a retried task whose worker died); otherwise fits afresh. Returns the fit's record."""
    started = time.perf_counter()
    path, args = task["path"], list(task["args"])
    record = {"name": os.path.basename(path), **task["params"]}
    code, message, resumed = 0, "", None
    stored = _stored(path)
    if not (stored and stored[0] == "complete" and stored[1] == args):
        tail = ["--checkpoint-seconds", str(task["checkpoint_seconds"]), "--no-progress"]
        if stored and stored[0] == "checkpoint" and stored[1] == args:
            resumed = stored[2]
            code, message = call_slang(["fit", "--resume", path, *tail])
        else:
            code, message = call_slang(["fit", *args, "-o", path, *tail])
    record.update(status="complete" if code == 0 else "failed", error=message, exit_code=code,
                  seconds=time.perf_counter() - started, worker=_worker_address(), resumed_at_step=resumed)
    if code == 0:
        try:
            record.update(_metrics(path))
        except SlangError as exc:
            record.update(status="failed", error=str(exc), exit_code=1)
    return record


# -------------------------------------------------------------------------------------------- the results table


def _columns(records: list[dict]) -> list[str]:
    """The table's columns: the name, the parameters (data, then slang fit's options in the command's order, so
    that fits of different grids share one column per option), the record's fields, the metrics."""
    params = [k for r in records for k in r if k not in RECORD_FIELDS and not k.startswith(("train_", "test_"))
              and k != "steps"]
    known = ["data", *(option_key(p) for p in fit_parameters().values())]
    params = [*(k for k in known if k in params), *params]
    metrics = [k for r in records for k in r if k.startswith(("train_", "test_")) or k == "steps"]
    return list(dict.fromkeys(["name", *params, *RECORD_FIELDS[1:], *metrics]))


def _atomic_text(path: Path, text: str) -> None:
    from slangcli.outputs import atomic_output

    with atomic_output(path) as tmp:
        Path(tmp).write_text(text)


def write_results(directory, records: list[dict]) -> None:
    """``results.csv`` and ``results.json`` in ``directory``: one row per fit, each file replaced atomically.

    The CSV has a column for every parameter of any fit, empty where a fit did not set it (it used slang fit's
    default); in the JSON each record has only its own."""
    directory = Path(directory)
    columns = _columns(records)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for r in records:
        writer.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in columns})
    _atomic_text(directory / RESULTS[0], out.getvalue())
    clean = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
             for r in records]
    _atomic_text(directory / RESULTS[1], json.dumps(clean, indent=1, allow_nan=False) + "\n")


def read_results(directory) -> dict:
    """``{name: record}`` of an earlier sweep's ``results.json`` in ``directory`` (empty if none), in its order."""
    try:
        return {r["name"]: r for r in json.loads((Path(directory) / RESULTS[1]).read_text())}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _complete_record(path) -> dict:
    """The record of the complete fit at ``path`` whose task's record never reached the table (the client stopped
    first, or the table was lost): what the run file tells, without the task's seconds and worker."""
    return {"status": "complete", "error": "", "exit_code": 0, "seconds": None, "worker": "",
            "resumed_at_step": None, **_metrics(path)}


def other_fits(directory, names: set, earlier: dict) -> dict:
    """``{name: record}`` of the complete fits of a sweep in ``directory`` besides ``names`` (those of earlier
    sweeps with other grids), sorted by name: the record in ``earlier`` (the previous table) if it has one,
    else one made from the run file. A run file counts when its status is complete and its name is the one a
    sweep gives its recorded arguments; a fit that failed has no run file and is not kept."""
    directory = Path(directory)
    if not directory.is_dir():
        return {}
    parameters, out = fit_parameters(), {}
    for path in sorted(directory.glob("*.h5")):
        if path.name in names:
            continue
        stored = _stored(path)
        if stored is None or stored[0] != "complete" or stored[1] is None or not path.name.endswith(
                _name_end(stored[1])):
            continue
        old = earlier.get(path.name)
        if old is not None and old.get("status") == "complete":
            out[path.name] = old
            continue
        try:
            out[path.name] = {"name": path.name, **(params_of(stored[1], parameters) or {}),
                              **_complete_record(path)}
        except SlangError:  # readable attributes but not a readable run: not a fit the table can show
            continue
    return out


def remove_temporaries(directory, points: Iterable[Point]) -> None:
    """Delete the temporary files a killed writer left beside the sweep's run files and tables."""
    directory = Path(directory)
    for name in [*(p.name for p in points), *RESULTS]:
        for tmp in directory.glob(f".{glob_escape(name)}.*.tmp"):
            tmp.unlink(missing_ok=True)


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


@dataclass
class SweepResult:
    records: list  # one per point, in the points' order
    ran: int  # fits run by this sweep
    skipped: int  # fits already complete in the directory
    kept: int = 0  # complete fits of earlier sweeps (not points of this one) kept in the table


def _make_directory(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UnusableOutput(f"cannot create the directory {directory}: {exc.strerror or exc}") from None


def check_directory(directory) -> None:
    """Refuse, before any work, an output directory that cannot be made or written: a file, or beneath one, or in
    a directory the user cannot write (:class:`UnusableOutput`, a usage error)."""
    path = os.path.abspath(directory)
    if os.path.exists(path) and not os.path.isdir(path):
        raise UnusableOutput(f"{path} is not a directory")
    existing = path
    while not os.path.exists(existing):  # the nearest ancestor there is
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UnusableOutput(f"cannot create the directory {path}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UnusableOutput(f"cannot write in the directory {path}" if existing == path else
                             f"cannot create the directory {path}: {existing} is not writable")


def run_sweep(points: list[Point], directory, client, *, checkpoint_seconds: float = 60.0, retries: int = 2,
              on_record: Callable[[dict, int, int], None] | None = None,
              on_skip: Callable[[int, int], None] | None = None,
              on_kept: Callable[[int], None] | None = None, table_every: float = 1.0) -> SweepResult:
    """Run the ``points`` not yet complete in ``directory`` on ``client`` (a ``distributed.Client``, or a
    function returning a context manager that gives one, called only if some fit is to run); write the table as
    they finish (at most every ``table_every`` seconds, and at the end, also when interrupted). ``on_record(record,
    done, total)`` is called for each finished fit, ``on_skip(skipped, total)`` once with the count already done,
    ``on_kept(kept)`` once if the directory holds complete fits of other grids.

    The table holds every complete fit in the directory: this sweep's points, and those of earlier sweeps with
    other grids (:func:`other_fits`), which keep their earlier rows, earlier rows first. The directory is created,
    and the table written, only once the client is there: a cluster that cannot be reached leaves nothing behind.
    When the sweep stops early (an interrupt, a signal), the table also gets the fits whose run files were
    completed but whose records had not reached this client."""
    directory = Path(directory).resolve()
    earlier = read_results(directory)
    records: dict[str, dict] = {}
    todo = {}
    for point in points:
        path = directory / point.name
        if is_complete(path, point.args):
            old = earlier.get(point.name)
            if old is not None and old.get("status") == "complete":
                records[point.name] = {**old, **point.params}  # as this grid names its parameters
            else:  # complete but not in the table (the client died before writing it)
                records[point.name] = {"name": point.name, **point.params, **_complete_record(path)}
        else:
            todo[point.name] = {"path": str(path), "args": point.args, "params": point.params,
                                "checkpoint_seconds": checkpoint_seconds}
    names = {p.name for p in points}
    others = other_fits(directory, names, earlier)
    skipped = len(records)
    if on_skip is not None:
        on_skip(skipped, len(points))
    if others and on_kept is not None:
        on_kept(len(others))
    order = [*(n for n in earlier if n in names or n in others), *(p.name for p in points if p.name not in earlier),
             *(n for n in others if n not in earlier)]
    last_write = -math.inf

    def table():
        rows = {**others, **records}
        write_results(directory, [rows[n] for n in order if n in rows])

    def finished(name, result):
        nonlocal last_write
        if isinstance(result, BaseException):
            result = {"name": name, **todo[name]["params"], "status": "failed",
                      "error": f"{type(result).__name__}: {result}", "exit_code": None, "seconds": None,
                      "worker": "", "resumed_at_step": None}
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
                run_tasks(connected, run_fit, todo, finished, retries=retries)
        else:
            _make_directory(directory)
            started = True
    except BaseException as exc:
        signal_arrived(exc)  # an interrupt, handled here by writing the table: not to stop that write again
        raise
    finally:
        if started:
            # (after a local cluster has closed, so no worker still writes; on a cluster of one's own, fits running
            # when the client stopped may finish later, and count at the next sweep)
            for name, task in todo.items():
                if name not in records and is_complete(task["path"], task["args"]):
                    with contextlib.suppress(SlangError):
                        records[name] = {"name": name, **task["params"], **_complete_record(task["path"])}
            table()
            if getattr(getattr(cluster, "status", None), "name", None) == "closed":
                # its workers are gone, also when interrupted: what they left half-written can go
                remove_temporaries(directory, points)
    # every task has finished: what a killed worker left half-written can go (not when interrupted on a cluster
    # that goes on, since cancelled tasks may still be writing; the next sweep's start removes those)
    remove_temporaries(directory, points)
    return SweepResult([records[p.name] for p in points], ran=len(todo), skipped=skipped, kept=len(others))


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
