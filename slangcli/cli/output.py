"""Where output goes: human messages, tables and progress to stderr; data to stdout."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import sys
import time

import click
from rich.console import Console
from rich.progress import (BarColumn, DownloadColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)
from rich.table import Table

from slangcli.runfile.outputs import check_stdout, discard_stdout as stdout_gone, one_line, writing_stdout  # noqa: F401
from slangcli.runfile.outputs import output_error, utf8_stdout

class _Console(Console):
    """rich's console, except where its reader went away: rich then exits with 1 itself (``SystemExit(1)``), which
    said "bad data" of a fit whose run file was written; the BrokenPipeError goes to the command line's handler,
    which exits with 141 as for a closed stdout."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


def _width() -> int | None:
    """The messages' width where rich's own choice would lose text: written to a file or a pipe, 80 columns at
    least (a small COLUMNS cut the tables' numbers to ``0.4…``); on a terminal at least 40 (``COLUMNS=0`` printed
    nothing at all). None: rich's choice (the terminal's width, or COLUMNS)."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        return None
    least = 40 if sys.stderr is not None and sys.stderr.isatty() else 80
    return least if columns < least else None


stderr = _Console(stderr=True, highlight=False, soft_wrap=True, width=_width())


# Every message is one line: the paths, cells and names it quotes come from the user, and a newline or a terminal
# escape in them is written as its escape here, once, rather than at each place that names a file.


def error(message: str) -> None:
    try:
        click.echo(f"slang: error: {one_line(message)}", err=True)
    except BrokenPipeError:  # (stderr's reader went away: the error's exit code still says what happened)
        pass


def note(message: str) -> None:
    click.echo(f"slang: {one_line(message)}", err=True)


def _clean(obj):
    """JSON-safe copy: non-finite floats become null, numpy scalars and arrays plain Python."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "tolist"):
        return _clean(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def needs_stdout(ctx, param, value):
    """Callback of the ``--json`` options: a closed stdout is refused before any work, not after it."""
    if value:
        check_stdout("the JSON output")
    return value


def emit_json(obj) -> None:
    """Exactly one JSON object on stdout (ASCII: non-ASCII text as JSON escapes), all of it or an error."""
    text = json.dumps(_clean(obj), allow_nan=False) + "\n"
    with writing_stdout(), utf8_stdout() as out:
        out.write(text)


def metric_rows(scores: dict) -> list[tuple[str, str, object]]:
    """Table rows of the scores returned by ``predictive.evaluation.score``/``evaluate``."""
    rows = []
    test = scores.get("test")
    if test is not None:
        if "rmse" in test:
            rows += [("test", "RMSE", test["rmse"]), ("test", "log-likelihood", test["loglik"])]
            # runs written before calibration was measured have no coverage
            rows += [("test", f"coverage of {100 * float(level):g}% interval", value)
                     for level, value in test.get("coverage", {}).items()]
            # a run fitted with --calibrate: its split-conformal intervals beside the Bayesian ones
            rows += [("test", f"coverage of calibrated {100 * float(level):g}% interval" + _infinite(test, level),
                      value) for level, value in test.get("calibrated_coverage", {}).items()]
        else:
            rows += [("test", "NLL (nats)", test["nll"]), ("test", "accuracy", test["accuracy"])]
            if "ece" in test:
                rows.append(("test", f"ECE ({test['calibration']['bins']} bins)", test["ece"]))
            for level, value in test.get("calibrated_set_coverage", {}).items():
                rows += [("test", f"coverage of calibrated {100 * float(level):g}% set" + _infinite(test, level),
                          value),
                         ("test", f"mean size of calibrated {100 * float(level):g}% set",
                          test["calibrated_set_size"][level])]
        if "calibration_n" in test:
            rows.append(("test", "calibration rows (split conformal)", test["calibration_n"]))
        rows.append(("test", "examples", test["n"]))
    if "train" in scores:
        members = scores["train"].get("members")
        # a mixture's own -ELBO has no closed form: its members' mean, each with its own prior (an upper bound)
        mean_of = f", mean of {len(members)} member{'s' if len(members) != 1 else ''}" if members else ""
        rows.append(("train", "-ELBO / N" + mean_of + (" (at fit)" if scores["train"].get("stored") else "")
                     + (", standardised target" if scores["train"].get("target") == "standardised" else ""),
                     scores["train"]["neg_elbo_per_example"]))
    ref = scores.get("reference")
    if ref is not None:
        # KL divergences of close posteriors are small: significant digits, not four decimals
        rows += [("reference", "symmetric KL", f"{ref['symmetric_kl']:.4g}"),
                 ("reference", "KL(run || reference)", f"{ref['kl_run_to_reference']:.4g}"),
                 ("reference", "KL(reference || run)", f"{ref['kl_reference_to_run']:.4g}")]
    return rows


def _infinite(test: dict, level: str) -> str:
    """A calibrated level too few calibration rows give a finite interval or set: said beside its coverage."""
    return " (infinite)" if level in test.get("calibrated_infinite", ()) else ""


def predictive_said(predictive: str, samples: int | None, draws: int | None, seed: int | None,
                    members: int = 1) -> str:
    """How a predictive was computed, for a report's title: ``mc, 1000 samples, seed 0``; a mixture of ``members``
    whose members share the samples unevenly says the ``draws`` made (``slangcli.predictive.metrics.drawn``: ``mc,
    7 samples (9 draws, 3 from each of 3 members), seed 0``)."""
    if not samples:
        return predictive
    shared = f" ({draws} draws, {draws // members} from each of {members} members)" if draws != samples else ""
    return f"{predictive}, {samples} samples{shared}, seed {seed}"


def unused_draws(samples: int | None, seed: int | None, predictive: str) -> str | None:
    """The note that ``--samples`` or ``--seed``, given, were not used (the exact predictive of a logistic
    regression draws no weights), or None."""
    given = [f"{flag} {value}" for flag, value in (("--samples", samples), ("--seed", seed)) if value is not None]
    if predictive != "quadrature" or not given:
        return None
    return (f"{' and '.join(given)} not used: a logistic regression's predictive is exact (one-dimensional "
            "quadrature), with no weight samples")


def metrics_table(title: str, rows: list[tuple[str, str, object]]) -> None:
    table = Table(title=title, title_justify="left", show_header=True, header_style="bold")
    table.add_column("split")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for split, name, value in rows:
        table.add_row(split, name, _shown(value))
    stderr.print(table)


def _shown(value) -> str:
    """A table's number: four decimals, or four significant digits for a magnitude that four decimals would show
    as 0.0000 or as hundreds of digits (the RMSE of a target near 1e-300 or 1e300)."""
    if not isinstance(value, float):
        return str(value)
    if value == 0 or not math.isfinite(value) or 1e-4 <= abs(value) < 1e9:
        return f"{value:.4f}"
    return f"{value:.4g}"


def calibration_table(scores: dict) -> None:
    """The non-empty reliability bins behind the ECE, if the scores have them."""
    cal = (scores.get("test") or {}).get("calibration")
    if cal is None:
        return
    table = Table(title=f"calibration: {cal['bins']} equal-width confidence bins (empty ones omitted)",
                  title_justify="left", show_header=True, header_style="bold")
    for name in ("confidence bin", "examples", "mean confidence", "accuracy"):
        table.add_column(name, justify="right")
    edges = cal["edges"]
    for b, n in enumerate(cal["count"]):
        if n:
            table.add_row(f"({edges[b]:.3f}, {edges[b + 1]:.3f}]", str(n), f"{cal['confidence'][b]:.4f}",
                          f"{cal['accuracy'][b]:.4f}")
    stderr.print(table)


def checkpoint_note(run, run_file: str, what: str = "scores") -> str | None:
    """What ``evaluate`` (``what``: its scores) and ``predict`` (its predictions) say of a checkpoint (a fit that
    was stopped): its posterior is the fit's so far, a fit of several members mixes those trained so far, and a
    calibration comes only with the finished fit. None for a finished run."""
    if run.status != "checkpoint":
        return None
    m = run.metrics
    steps, n_steps = m.get("steps"), m.get("n_steps")
    done = steps == n_steps
    where = f"step {steps} of {n_steps}"
    if "member" in m:
        k, K = int(m["member"]), int(m["members"])
        where += f" of member {k + 1} of {K}; " + (
            f"member 1 so far, {'trained, not yet scored' if done else 'partly trained'}" if k == 0 else
            f"the mixture of the {k + 1} members so far" + ("" if done else ", the last one partly trained"))
    elif done:
        where += ", trained, not yet scored"
    text = f"{run_file} is a checkpoint, not a finished fit ({where}): these are the {what} of its posterior so far"
    if run.config.get("calibrate"):
        text += "; its calibration comes with the finished fit (no calibrated intervals yet)"
    if run.config.get("noise_model") in ("linear", "hidden") and getattr(run.model, "noise_weights", None) is None:
        text += "; its noise model comes with the finished fit (the constant noise precision predicts here)"
    # (imported here: every command imports this module, --version too, which loads no NumPy)
    from slangcli.data.readers import data_read_once

    if data_read_once(run.data):
        return text + "; its data came from standard input or a pipe, which --resume cannot read again"
    return text + f"; slang fit --resume {shlex.quote(run_file)} finishes it"


# a pass of weight draws shows a bar once it has taken this many seconds (a module attribute, read at each call)
SCORING_DELAY = 1.0


class _CountColumn(ProgressColumn):
    """Steps as ``done/total``; a file's bytes read as sizes (``12.3/99.8 MB``)."""

    def __init__(self):
        super().__init__()
        self._steps, self._bytes = MofNCompleteColumn(), DownloadColumn()

    def render(self, task):
        return (self._bytes if task.fields.get("bytes") else self._steps).render(task)


class progress_bar:
    """A progress callback ``(done, total)``: a rich bar on a terminal, nothing otherwise (null object). Within it,
    a large data file being read (``slangcli.data.readers.reading_progress``: :meth:`reading`) and a slow pass of
    weight draws (``slangcli.predictive.metrics.scoring_progress``: :meth:`scoring`) get bars of their own,
    removed when they end."""

    def __init__(self, enabled: bool | None, description: str):
        self.enabled = stderr.is_terminal if enabled is None else enabled
        self.description = description
        self._progress = None
        self._task = None

    def __enter__(self):
        self._hooks = contextlib.ExitStack()
        if self.enabled:
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), _CountColumn(),
                                      TimeElapsedColumn(), TimeRemainingColumn(), console=stderr, transient=True)
            self._progress.__enter__()
            # the work inside reports to the bar: the data files it reads, its passes of weight draws (imported
            # here: every command loads this module, and `slang --version` needs no NumPy)
            from slangcli.data.readers import reading_progress
            from slangcli.predictive.metrics import scoring_progress

            self._hooks.enter_context(reading_progress(self.reading))
            self._hooks.enter_context(scoring_progress(self.scoring))
        return self

    def __exit__(self, *exc):
        self._hooks.close()
        if self._progress is not None:
            self._progress.__exit__(*exc)
        return False

    def __call__(self, done: int, total: int) -> None:
        if self._progress is None:
            return
        if self._task is None:
            self._task = self._progress.add_task(self.description, total=total)
        self._progress.update(self._task, completed=done)

    def scoring(self, total: int):
        """The ``start`` of ``slangcli.predictive.metrics.scoring_progress``: a pass of weight draws gets a bar of its
        own, once it has taken :data:`SCORING_DELAY` seconds (a pass of a second or less would only flash), removed
        when it ends."""
        if self._progress is None:
            return lambda done: None
        began, task = time.monotonic(), None

        def report(done):
            nonlocal task
            if done is None:
                if task is not None:
                    self._progress.remove_task(task)
                return
            if task is None and time.monotonic() - began >= SCORING_DELAY:
                task = self._progress.add_task("scoring: weight draws", total=total)
            if task is not None:
                self._progress.update(task, completed=done)
        return report

    def reading(self, name: str, size: int):
        if self._progress is None:
            return lambda done: None
        task = self._progress.add_task(f"reading {one_line(name)}", total=size, bytes=True)

        def report(done):
            if done is None:
                self._progress.remove_task(task)
            else:
                self._progress.update(task, completed=done)
        return report


# ------------------------------------------------------------------------------------------- --help, --version


def writing_eagerly(callback):
    """An eager option's callback (``--help``, ``--version``) whose output to stdout fails as every other output
    does: a closed pipe (``| true``) exits 141 quietly, a full or failing stdout (``> /dev/full``) exits 1 with one
    line. Click prints these while it parses the command line, before the group's handlers are in force (a full
    stdout ended in a traceback, a closed pipe in exit 1)."""
    if getattr(callback, "writes_safely", False):
        return callback

    def eager(ctx, param, value):
        try:
            return callback(ctx, param, value)
        except BrokenPipeError:
            stdout_gone()
            ctx.exit(141)
        except OSError as exc:
            stdout_gone()
            error(str(output_error("stdout", exc)))
            ctx.exit(1)

    eager.writes_safely = True
    return eager


class HelpWritten:
    """A click command (or group) whose ``--help`` is written as :func:`writing_eagerly` says."""

    def get_help_option(self, ctx):
        option = super().get_help_option(ctx)
        if option is not None:
            option.callback = writing_eagerly(option.callback)
        return option


class Command(HelpWritten, click.Command):
    """A ``slang`` command."""
