"""A sweep's results table: ``results.csv`` and ``results.json`` in its directory, one row per fit.

Each row is a fit's record (``slangcli.sweep.tasks.run_fit``): its parameters, status, error message, exit code,
seconds, worker, the step it resumed at, and its train and test metrics. The table holds every complete fit in the
directory, also those of earlier sweeps with other grids (:func:`other_fits`), so it never loses a fit whose run
file is there; both files are replaced atomically.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path
from typing import Iterable

from slangcli import __version__
from slangcli.errors import SlangError
from slangcli.runfile.outputs import atomic_output
from slangcli.sweep.grid import Point, name_end, parameters, params_of
from slangcli.sweep.tasks import metrics_of, stored

RESULTS = ("results.csv", "results.json")
RECORD_FIELDS = ("name", "status", "error", "exit_code", "seconds", "worker", "resumed_at_step")


def _columns(records: list[dict]) -> list[str]:
    """The table's columns: the name, the parameters (data, then slang fit's options in the command's order, so
    that fits of different grids share one column per option), the record's fields, the metrics."""
    params = [k for r in records for k in r if k not in RECORD_FIELDS and not k.startswith(("train_", "test_"))
              and k != "steps"]
    known = ["data", *parameters()]
    params = [*(k for k in known if k in params), *params]
    metrics = [k for r in records for k in r if k.startswith(("train_", "test_")) or k == "steps"]
    return list(dict.fromkeys(["name", *params, *RECORD_FIELDS[1:], *metrics]))


def _atomic_text(path: Path, text: str) -> None:
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
    clean = [json_record(r) for r in records]
    _atomic_text(directory / RESULTS[1], json.dumps(clean, indent=1, allow_nan=False) + "\n")


def json_record(record: dict) -> dict:
    """A fit's record (or a point's parameters) as ``results.json`` and ``--json`` give it (:func:`_json_value`)."""
    given = parameters()
    return {k: _json_value(given.get(k), v) for k, v in record.items()}


def _json_value(param, value):
    """A value as ``results.json`` holds it: a number option's value as a JSON number (``"epochs": 20``, so that
    ``jq 'select(.epochs == 20)'`` and pandas read numbers), a precision's word as written (``"auto"``), other
    options' values as the command line writes them (``"hidden": "50,50"``); a metric that is not finite as null."""
    if param is not None and isinstance(value, str) and param.kind in ("int", "float", "precision"):
        try:
            number = int(value) if param.kind == "int" else float(value)
        except ValueError:  # (a precision's word, or a value an older table holds that is no number: as written)
            return value
        # (--lr inf fails its fit, and its row keeps the value as written: JSON has no infinity)
        return number if math.isfinite(number) else value
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def read_results(directory) -> dict:
    """``{name: record}`` of an earlier sweep's ``results.json`` in ``directory`` (empty if none), in its order."""
    try:
        return {r["name"]: r for r in json.loads((Path(directory) / RESULTS[1]).read_text())}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def complete_record(path) -> dict:
    """The record of the complete fit at ``path`` whose task's record never reached the table (the client stopped
    first, or the table was lost): what the run file tells, without the task's seconds and worker."""
    return {"status": "complete", "error": "", "exit_code": 0, "seconds": None, "worker": "",
            "resumed_at_step": None, **metrics_of(path)}


def other_fits(directory, names: set, earlier: dict) -> dict:
    """``{name: record}`` of the complete fits of a sweep in ``directory`` besides ``names`` (those of earlier
    sweeps with other grids), sorted by name: the record in ``earlier`` (the previous table) if it has one,
    else one made from the run file. A run file counts when its status is complete, its name is the one a sweep
    gives its recorded arguments and this version of slang wrote it; a fit that failed has no run file and is not
    kept."""
    directory = Path(directory)
    if not directory.is_dir():
        return {}
    given, out = parameters(), {}
    for path in sorted(directory.glob("*.h5")):
        if path.name in names:
            continue
        found = stored(path)
        if found is None or found[0] != "complete" or found[1] is None or not path.name.endswith(name_end(found[1])):
            continue
        if found[4] != __version__:  # (another version's fit: a table must not mix them, as a rerun refits them)
            continue
        old = earlier.get(path.name)
        if old is not None and old.get("status") == "complete":
            out[path.name] = old
            continue
        try:
            out[path.name] = {"name": path.name, **(params_of(found[1], given) or {}), **complete_record(path)}
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
