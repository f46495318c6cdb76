"""Checks and helpers shared by the commands."""

from __future__ import annotations

import os

import click

from slangcli.metrics import MAX_SAMPLES
from slangcli.outputs import UnusableOutput, check_output_path

DELIMITERS = {",": ",", ";": ";", "tab": "\t", "\\t": "\t", "\t": "\t", "whitespace": "whitespace", " ": "whitespace"}


# the largest seed every consumer takes (NumPy's generators take any, an HDF5 attribute an int64)
SEED = click.IntRange(0, 2**63 - 1)


# Monte-Carlo weight samples of an evaluation or prediction (metrics.MAX_SAMPLES: more would take days), and
# calibration bins: at most this many. More bins than a million cannot be filled by any test set slang reads, and
# 10**12 of them would need 8 TB (checked here, before anything is allocated).
MAX_BINS = 10**6
SAMPLES = click.IntRange(1, MAX_SAMPLES)
BINS = click.IntRange(1, MAX_BINS)


class FloatRange(click.FloatRange):
    """click's FloatRange that also refuses NaN (which passes every comparison's negation)."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if number != number:
            self.fail(f"{value!r} is not a number", param, ctx)
        return number


def check_delimiter(ctx, param, value):
    if value is None:
        return None
    if value not in DELIMITERS:
        raise click.BadParameter(f"{value!r} is not one of ',', ';', 'tab', 'whitespace'")
    return DELIMITERS[value]


def check_output(output: str, inputs: list) -> None:
    """Refuse, before any work, an output path that cannot be written (``slangcli.outputs.check_output_path``:
    special files, directories, names too long, unwritable directories) or that would overwrite an input."""
    try:
        check_output_path(output)
    except UnusableOutput as exc:
        raise click.BadParameter(str(exc), param_hint="'-o'") from None
    for path in inputs:
        if path is not None and os.path.exists(path) and os.path.exists(output) and os.path.samefile(path, output):
            raise click.BadParameter(f"{output} is an input file; refusing to overwrite it", param_hint="'-o'")


def invocation() -> list[str]:
    """The command line that started this command (``["slang", "fit", ...]``)."""
    root = click.get_current_context().find_root()
    return ["slang", *root.meta.get("slang.argv", [])[1:]]
