"""Checks and helpers shared by the commands."""

from __future__ import annotations

import os

import click

DELIMITERS = {",": ",", ";": ";", "tab": "\t", "\\t": "\t", "\t": "\t", "whitespace": "whitespace", " ": "whitespace"}


def check_delimiter(ctx, param, value):
    if value is None:
        return None
    if value not in DELIMITERS:
        raise click.BadParameter(f"{value!r} is not one of ',', ';', 'tab', 'whitespace'")
    return DELIMITERS[value]


def check_output(output: str, inputs: list) -> None:
    """Refuse, before any work, an output path that cannot be written or that would overwrite an input."""
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise click.BadParameter(f"directory {os.path.dirname(output) or '.'} does not exist", param_hint="'-o'")
    if not os.access(parent, os.W_OK):
        raise click.BadParameter(f"directory {os.path.dirname(output) or '.'} is not writable", param_hint="'-o'")
    for path in inputs:
        if path is not None and os.path.exists(path) and os.path.exists(output) and os.path.samefile(path, output):
            raise click.BadParameter(f"{output} is an input file; refusing to overwrite it", param_hint="'-o'")


def invocation() -> list[str]:
    """The command line that started this command (``["slang", "fit", ...]``)."""
    root = click.get_current_context().find_root()
    return ["slang", *root.meta.get("slang.argv", [])[1:]]
