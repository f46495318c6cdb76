"""Where the table-printing benchmark scripts send their output: the human-readable table goes to stdout unless
``--json -`` claims stdout for the JSON record, in which case the table goes to stderr."""

from __future__ import annotations

import json
import sys
from pathlib import Path


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
