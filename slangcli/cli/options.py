"""Checks and helpers shared by the commands."""

from __future__ import annotations

import os

import click

from slangcli.declare import AUTO, DELIMITERS, MAX_SEED, choices_of, flag_of, help_of
from slangcli.methods import METHODS
from slangcli.methods.base import OptionSpec
from slangcli.predictive.metrics import MAX_SAMPLES
from slangcli.runfile.outputs import UnusableOutput, check_output_path
from slangcli.training.options import NETWORK_RATES, NETWORK_RATES_WHEN, command_line, shown_default



# the largest seed every consumer takes (NumPy's generators take any, an HDF5 attribute an int64)
SEED = click.IntRange(0, MAX_SEED)


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
    """Refuse, before any work, an output path that cannot be written (``slangcli.runfile.outputs.check_output_path``:
    special files, directories, names too long, unwritable directories) or that would overwrite an input. ``-``
    is refused: only ``slang predict`` writes to standard output (a run file named ``-`` was written instead)."""
    if output == "-":
        raise click.BadParameter("'-' is standard output, where only slang predict writes; give a file name (./- for "
                                 "a file named '-')", param_hint="'-o'")
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


class Precision(click.types.FloatParamType):
    """A positive number, or ``auto`` (learned); range checks are the declaration's, with one message."""

    name = "FLOAT|auto"

    def convert(self, value, param, ctx):
        if isinstance(value, float) or value == AUTO:
            return value
        try:
            return float(value)
        except ValueError:
            self.fail(f"{value!r} is neither a number nor auto", param, ctx)


class Choices(click.Choice):
    """A choice among a declaration's choices, read when the command line is parsed: ``--method`` takes the names
    in the registry then, so a method registered at run time (``slangcli.methods.register``) is a valid one."""

    def __init__(self, field):
        self._field = field
        super().__init__([])

    @property
    def choices(self):
        return choices_of(self._field)

    @choices.setter
    def choices(self, value):  # click.Choice.__init__ assigns it; the declaration is the source
        pass


def _click_type(f):
    meta = f.metadata
    kind = meta["kind"]
    if kind == "choice":
        return Choices(f)
    if kind == "count":
        return click.IntRange(meta["least"], meta["most"])
    if kind == "precision":
        return Precision()
    if kind == "positive":
        return float
    if kind == "fraction":
        return FloatRange(0, 1, min_open=True, max_open=True)
    if kind == "path":
        return click.Path(readable=False, dir_okay=False, path_type=str)
    return str


def _command_line_default(f):
    """A field's default as the command line writes it (the declaration's, in its text form; None for a list of
    texts: not given)."""
    if f.metadata["kind"] == "tokens":
        return None
    if f.metadata["kind"] == "widths":
        return ",".join(str(w) for w in f.default)
    if f.metadata["kind"] == "precision" and isinstance(f.default, float):
        return f"{f.default:g}"
    return f.default


def _declared_option(f) -> click.Option:
    """The command-line option of a declared field (``slangcli.declare.option``): of
    :class:`slangcli.training.options.FitOptions` or of ``slangcli.data.sources.DataOptions``."""
    meta = f.metadata
    shown = shown_default(f)
    help_text = help_of(f) + (f"  [default: {shown}]" if shown is not None else "")
    if meta["kind"] == "switch":
        return click.Option([f"{flag_of(f)}/--no-{flag_of(f)[2:]}", f.name], default=f.default, help=help_text)
    declarations = [flag_of(f), *([meta["short"]] if meta["short"] else []), f.name]
    return click.Option(declarations, type=_click_type(f), default=_command_line_default(f), metavar=meta["metavar"],
                        help=help_text, callback=check_delimiter if meta["kind"] == "delimiter" else None)


def _method_option(spec) -> click.Option:
    """The option of a method's hyperparameter, generated from the methods' declarations
    (``slangcli.methods.base.hyperparameter``). Its default is None, "not given": the method's own default
    applies, and the help lists the defaults per method (and the task's, ``slangcli.training.options.NETWORK_RATES``),
    so it cannot drift. ``FitOptions`` refuses an option the chosen method does not have."""
    kind = click.Choice(spec.choices) if spec.choices else spec.kind
    declarations = [spec.flag, *([spec.short] if spec.short else []), spec.name]
    help_text = spec.help_text()
    if spec.name in NETWORK_RATES:
        help_text = f"{help_text[:-1]}; {NETWORK_RATES_WHEN}: {NETWORK_RATES[spec.name]:g}]"
    return click.Option(declarations, type=kind, default=None, help=help_text)


def fit_options() -> list[click.Option]:
    """``slang fit``'s options that say how to read the data and how to fit, generated from their declarations
    in the command's order (``slangcli.training.options.command_line``); built again when the registry of methods
    changes."""
    key = tuple((name, id(method)) for name, method in METHODS.items())
    if _FIT_OPTIONS.get("key") != key:
        options = [_method_option(item) if isinstance(item, OptionSpec) else _declared_option(item)
                   for item in command_line()]
        _FIT_OPTIONS.update(key=key, options=options)
    return _FIT_OPTIONS["options"]


_FIT_OPTIONS: dict = {}
