"""``slang fit``: fit a posterior to a data file and write the run file."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading

import click

from slangcli import checkpoints
from slangcli.cli import main
from slangcli.cli.options import SEED, FloatRange, check_delimiter, check_output, fit_options, invocation
from slangcli.cli.output import emit_json, error, metric_rows, metrics_table, needs_stdout, note, progress_bar
from slangcli.cluster import cluster_map
from slangcli.errors import DivergenceError, Interrupted
from slangcli.io import read_run, write_run
from slangcli.outputs import Terminated
from slangcli.methods import METHODS
from slangcli.methods.base import rank_symbol
from slangcli.options import FitOptions
from slangcli.readers import MISSING_POLICIES, NA_VALUES
from slangcli.workflow import Checkpointing, DataOptions, fit as fit_run, resume as resume_run


class FitCommand(click.Command):
    """``slang fit``: the options of the fit itself are generated from their declaration whenever they are asked
    for (parsing, ``--help``, ``slang sweep``'s grid), placed after the data options (``--split-seed``)."""

    @property
    def params(self):
        base = self._base_params
        at = next((i + 1 for i, p in enumerate(base) if p.name == "split_seed"), len(base))
        return _Params(base[:at] + fit_options() + base[at:], base)

    @params.setter
    def params(self, value):
        self._base_params = list(value)


class _Params(list):
    """The parameters as a list whose ``append`` and ``pop`` also change the stored ones (click adds and removes
    its help option that way)."""

    def __init__(self, items, base: list):
        super().__init__(items)
        self._base = base

    def append(self, item):
        super().append(item)
        self._base.append(item)

    def pop(self, *index):
        self._base.pop(*index)
        return super().pop(*index)


def _target(value):
    """The --target text as given: the reader decides (a header name that matches exactly wins, else a number is
    a 0-based index; "#3" is always an index), and the fit says which column it took."""
    return value


def _target_note(target: str | None, run) -> str | None:
    chosen = run.data.get("train", {}).get("target")
    if target is None or chosen is None:
        return None
    if isinstance(chosen, str) and chosen == target.strip():
        how = "by header name" + ("; '#N' takes the column at 0-based position N" if target.strip().lstrip("+-")
                                  .isdigit() else "")
        return f"--target {target}: the column named {chosen!r} ({how})"
    where = target.strip().lstrip("#")
    return f"--target {target}: the column at 0-based position {where}" + (
        f", named {chosen!r}" if isinstance(chosen, str) else "")


@main.command(cls=FitCommand)
@click.argument("data", required=False, type=click.Path(readable=False, path_type=str))
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True, path_type=str),
              help="Run file to write (HDF5).")
@click.option("--format", "fmt", type=click.Choice(["auto", "csv", "libsvm", "idx", "uci"]), default="auto",
              show_default=True, help="Input format of DATA (and --test); a folder is read as a Gal-layout UCI set.")
@click.option("--uci-split", type=click.IntRange(min=0), default=None,
              help="Train/test split K of a Gal-layout UCI folder (index_train_K.txt, index_test_K.txt).")
@click.option("--target", default=None, help="Target column: a header name (wins when one matches exactly), a 0-based index, or #N for "
                   "the index even when a header cell is named N (default: last).")
@click.option("--delimiter", default=None, callback=check_delimiter,
              help="CSV delimiter: ',', ';', 'tab' (or '\\t') or 'whitespace' (default: detect).")
@click.option("--header/--no-header", default=None, help="Whether the CSV has a header row (default: detect).")
@click.option("--drop-columns", metavar="COLS", default=None,
              help="CSV columns not to use as features: header names or 0-based indices, comma-separated.")
@click.option("--columns", metavar="COLS", default=None,
              help="Use only these CSV columns as features (names or 0-based indices, comma-separated).")
@click.option("--na-values", metavar="TOKENS", default=None,
              help="Comma-separated cell texts that mean a missing value (an empty item: the empty cell) "
                   f"[default: empty cell, {', '.join(NA_VALUES[1:])}].")
@click.option("--missing", type=click.Choice(MISSING_POLICIES), default="error", show_default=True,
              help="A row with a missing value: stop with an error naming it, drop the row (counted on stderr "
                   "and in the run file), or impute: fill a missing feature with the training rows' mean (numbers) "
                   "or most frequent value (categories), stored and reapplied by evaluate and predict; a row whose "
                   "target is missing is left out.")
@click.option("--categorical", metavar="COLS", default=None,
              help="CSV columns of numbers to one-hot encode as categories (integer codes), like a column of text: "
                   "header names or 0-based indices, comma-separated.")
@click.option("--n-features", type=click.IntRange(min=1), default=None,
              help="LIBSVM width (default: the highest index in the training and test files).")
@click.option("--test", "test_path", type=click.Path(readable=False, dir_okay=False, path_type=str), default=None,
              help="Test data file (same format as DATA).")
@click.option("--test-fraction", type=FloatRange(0, 1, min_open=True, max_open=True), default=None,
              help="Hold out this fraction of DATA as the test set.")
@click.option("--split-seed", type=SEED, default=0, show_default=True, help="Seed of the --test-fraction split.")
@click.option("--scheduler", metavar="ADDRESS", default=None,
              help="Run the candidate fits of --tune and the fits of --restarts on this dask.distributed cluster "
                   "(e.g. tcp://host:8786), with the same results as here.")
@click.option("--checkpoint-every", type=click.IntRange(min=1), default=None,
              help="Write a resumable checkpoint to OUTPUT every N steps.")
@click.option("--checkpoint-seconds", type=FloatRange(min=0), default=600.0, show_default=True,
              help="Write a resumable checkpoint to OUTPUT when this many seconds passed since the last (0: never).")
@click.option("--resume", "resume_path", type=click.Path(readable=False, dir_okay=False, path_type=str), default=None,
              help="Continue the fit checkpointed in this run file (its data, options and state) and write the "
                   "finished run to it.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a terminal only).")
@click.option("--json", "as_json", is_flag=True, callback=needs_stdout, help="Print the run summary as one JSON object on stdout.")
def fit(data, output, fmt, target, delimiter, header, drop_columns, columns, na_values, missing, categorical,
        n_features, test_path, test_fraction, split_seed, uci_split, scheduler, checkpoint_every, checkpoint_seconds,
        resume_path, progress, as_json, **given):
    """Fit a Gaussian posterior to DATA and write it, with metrics, to OUTPUT.

    DATA is a CSV-like or LIBSVM file (- reads it from standard input), an MNIST-style IDX images file (its
    labels file beside it), or a Gal-layout UCI folder (with --uci-split K). Each method takes only its own options
    (listed with their defaults under each option); giving another is an error.

    A step method's fit writes a checkpoint to OUTPUT every --checkpoint-every steps or --checkpoint-seconds, and
    on SIGINT or SIGTERM before it exits (with 128 + the signal number); `slang fit --resume OUTPUT` continues it
    and gives the same result as a fit never stopped.
    """
    ctx = click.get_current_context()
    checkpoint = dict(every_steps=checkpoint_every, every_seconds=checkpoint_seconds or None)
    if resume_path is not None:
        given = [p for p in ctx.command.params if p.name not in RESUME_OPTIONS
                 and ctx.get_parameter_source(p.name) == click.core.ParameterSource.COMMANDLINE]
        if given:
            raise click.UsageError(f"{given[0].opts[-1] if given[0].opts else given[0].name.upper()} cannot be "
                                   "combined with --resume: a resumed fit uses its own data and settings")
        return _resume(resume_path, checkpoint, progress, as_json)
    if data is None:
        raise click.UsageError("missing argument DATA (or --resume RUN.h5)")
    if output is None:
        raise click.UsageError("missing option -o / --output")
    check_output(output, [data, test_path])
    if drop_columns is not None and columns is not None:
        raise click.UsageError("give either --drop-columns or --columns, not both")
    if data == "-" and test_path == "-":
        raise click.UsageError("standard input (-) can be read only once: give it as DATA or as --test, not both")
    # the fit's own options and the methods' (not given: None, the method's default), checked once, here
    options = FitOptions.of(**{name: value for name, value in given.items() if value is not None})
    opts = DataOptions(path=data, format=fmt, target=_target(target), delimiter=delimiter, header=header,
                       n_features=n_features, test=test_path, test_fraction=test_fraction, split_seed=split_seed,
                       standardize=options.standardize, uci_split=uci_split,
                       drop_columns=drop_columns, columns=columns,
                       na_values=NA_VALUES if na_values is None else tuple(v.strip() for v in na_values.split(",")),
                       missing=missing, categorical=categorical)
    checkpoint = checkpoints.schedule(options, checkpoint_every, checkpoint_seconds)
    resolved = options.resolved_method  # (None for a network whose likelihood the data decide)
    if scheduler is not None and not options.tune and options.restarts == 1:
        raise click.UsageError("--scheduler runs the fits of --tune and --restarts on a cluster; this fit has neither")
    rank = options.hyper.get("rank")
    label = (resolved or "fit") + (f" {rank_symbol(METHODS[resolved])}={rank}" if rank is not None and resolved
                                   else "")
    with progress_bar(progress, label) as bar, _checkpointing(output, checkpoint) as checkpointing, \
            cluster_map(scheduler) as map_jobs:
        run = fit_run(opts, options, command=invocation(), progress=bar, notify=note, checkpointing=checkpointing,
                      map_jobs=map_jobs)
    if _target_note(target, run):
        note(_target_note(target, run))
    write_run(output, run)
    _report(output, run, as_json)


# the signals that stop a fit after its current step, with a checkpoint
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# options a resumed fit accepts; everything else comes from the checkpoint
RESUME_OPTIONS = {"resume_path", "checkpoint_every", "checkpoint_seconds", "progress", "as_json"}


@contextlib.contextmanager
def _checkpointing(output: str, checkpoint: dict | None):
    """Checkpoint settings writing to ``output``, with SIGINT and SIGTERM turned into a request to stop after the
    current step (the fit then writes a last checkpoint and raises Interrupted, reported here)."""
    if checkpoint is None:
        yield None
        return
    received: list[int] = []
    written: list[int] = []
    writing: list[bool] = []
    urgent_work: list[str] = []  # the work without steps under way (reading the data, scoring), innermost last
    stopped_during: list[str] = []  # the work a signal stopped at once

    def handler(signum, frame):
        # during work without steps a signal stops at once; during the steps a first one stops after the current
        # step, and a second at once (the last checkpoint stays valid), except while a checkpoint is being
        # written: that one finishes first (a second SIGTERM from a process manager must not cost the checkpoint)
        if urgent_work and not writing:
            received.append(signum)
            stopped_during.append(urgent_work[-1])
            raise Terminated(signum)
        if received and not writing:
            raise Terminated(signum)
        received.append(signum)

    @contextlib.contextmanager
    def urgent(what: str):
        if received:  # asked to stop before this work began (after the last step, say): stop now
            stopped_during.append(what)
            raise Terminated(received[0])
        urgent_work.append(what)
        try:
            yield
        finally:
            urgent_work.pop()

    def write(run):
        writing.append(True)
        try:
            write_run(output, run)
        finally:
            writing.clear()
        written.append(run.metrics["steps"])

    def stopped(signum: int, what: str, hint: str | None = None, at_once: bool = False):
        name = signal.Signals(signum).name
        if written:
            error(f"{what} ({name}); the fit so far (step {written[-1]}) is in {output}; continue with: "
                  f"slang fit --resume {output}")
        elif at_once:
            error(f"{what} ({name}): nothing written")
        else:
            error(f"{what} ({name}), before any checkpoint: nothing written" + (f"; {hint}" if hint else ""))
        sys.exit(128 + signum)

    # signal handlers can only be set from the main thread; a fit run in another thread (a slang sweep task on a
    # Dask worker) checkpoints on time and step counts only, and its process's own signals stop it
    main_thread = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS} if main_thread else {}
    try:
        yield Checkpointing(write=write, stop=lambda: bool(received), urgent=urgent, **checkpoint)
    except DivergenceError as exc:
        if written:
            raise DivergenceError(f"{exc}; the last good checkpoint (step {written[-1]}) is in {output}") from None
        raise
    except Interrupted as exc:
        stopped(received[0] if received else signal.SIGINT, str(exc), exc.hint)
    except Terminated as exc:
        if stopped_during:
            verb = "interrupted" if exc.signum == signal.SIGINT else "terminated"
            stopped(exc.signum, f"{verb} while {stopped_during[0]}", at_once=True)
        stopped(received[0] if received else exc.signum, "stopped by a second signal")
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _resume(path: str, checkpoint: dict, progress, as_json) -> None:
    run = read_run(path)
    label = f"{run.config.get('method')} (resumed at step {run.metrics.get('steps')})"
    with progress_bar(progress, label) as bar, _checkpointing(path, checkpoint) as checkpointing:
        run = resume_run(run, path, progress=bar, notify=note, checkpointing=checkpointing)
    write_run(path, run)
    _report(path, run, as_json)


def _report(output: str, run, as_json: bool) -> None:
    m = run.metrics
    done = f"{m['steps']} L-BFGS iterations" if "solver" in m else f"{m['steps']} steps"
    metrics_table(f"{output}: {run.config['method']}, {done} in {m['fit_seconds']:.1f} s", metric_rows(m))
    if as_json:
        out = {"output": output, "metrics": {k: m[k] for k in ("test", "train") if k in m},
               "predictive": m["predictive"], "steps": m["steps"], "fit_seconds": m["fit_seconds"],
               "config": run.config}
        if "solver" in m:
            out["solver"] = m["solver"]
        if "snr_step" in run.history:
            out["snr"] = {name: run.history[name] for name in ("snr_step", "snr", "snr_paper")}
        emit_json(out)
