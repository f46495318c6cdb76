"""``slang fit``: fit a posterior to a data file and write the run file."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
import threading
from dataclasses import fields

import click

from slangcli.data.readers import is_stream_path
from slangcli.cli.options import FloatRange, check_output, fit_options, invocation
from slangcli.cli.output import Command, emit_json, error, metric_rows, metrics_table, needs_stdout, note, progress_bar
from slangcli.data.sources import DataOptions
from slangcli.errors import ConfigError, DivergenceError, Interrupted, SlangError
from slangcli.methods import METHODS
from slangcli.methods.base import rank_symbol
from slangcli.methods.exact import closed_form
from slangcli.runfile.io import read_run, write_run
from slangcli.runfile.outputs import OutputError, Terminated, UnusableOutput, catch_signals, check_output_path
from slangcli.training import checkpoints
from slangcli.training.checkpoints import Checkpointing
from slangcli.training.fitting import fit as fit_run, resume as resume_run
from slangcli.training.options import FitOptions


class FitCommand(Command):
    """``slang fit``: the options that say how to read the data and how to fit are generated from their
    declarations whenever they are asked for (parsing, ``--help``), placed after ``--output``."""

    @property
    def params(self):
        base = self._base_params
        at = next((i + 1 for i, p in enumerate(base) if p.name == "output"), len(base))
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


@click.command(cls=FitCommand)
@click.argument("data", required=False, type=click.Path(readable=False, path_type=str))
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True, path_type=str),
              help="Run file to write (HDF5).")
@click.option("--scheduler", metavar="ADDRESS", default=None,
              help="Run the candidate fits of --tune, the fits of --restarts and the members of --members on this "
                   "dask.distributed cluster (e.g. tcp://host:8786), with the same results as here.")
@click.option("--checkpoint-every", type=click.IntRange(min=1), default=None,
              help="Write a resumable checkpoint to OUTPUT every N steps.")
@click.option("--checkpoint-seconds", type=FloatRange(min=0), default=600.0, show_default=True,
              help="Write a resumable checkpoint to OUTPUT when this many seconds passed since the last (0: never).")
@click.option("--resume", "resume_path", type=click.Path(readable=False, dir_okay=False, path_type=str), default=None,
              help="Continue the fit checkpointed in this run file (its data, options and state) and write the "
                   "finished run to it.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a terminal only).")
@click.option("--json", "as_json", is_flag=True, callback=needs_stdout, help="Print the run summary as one JSON object on stdout.")
def fit(data, output, scheduler, checkpoint_every, checkpoint_seconds, resume_path, progress, as_json, **given):
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
    data_names = {f.name for f in fields(DataOptions) if f.metadata}
    read = {name: value for name, value in given.items() if name in data_names}
    check_output(output, [data, read["test"]])
    if _one_stream(data, read["test"]):
        what = "standard input (-)" if data == read["test"] == "-" else f"{data} and {read['test']}, one stream,"
        raise click.UsageError(f"{what} can be read only once: give it as DATA or as --test, not both")
    # the fit's own options and the methods' (not given: None, the method's default), and the data's, checked once,
    # here
    options = FitOptions.of(**{name: value for name, value in given.items()
                               if value is not None and name not in data_names})
    opts = DataOptions.of(data, **read, standardize=options.standardize)
    target = read["target"]
    if scheduler is not None and not options.tune and options.restarts == 1 and options.members == 1:
        raise click.UsageError("--scheduler runs the fits of --tune, --restarts and --members on a cluster; this fit "
                               "has none of them")
    checkpoint = checkpoints.schedule(options, checkpoint_every, checkpoint_seconds, on_cluster=scheduler is not None)
    if checkpoint is None and checkpoint_seconds and \
            ctx.get_parameter_source("checkpoint_seconds") == click.core.ParameterSource.COMMANDLINE:
        # (--checkpoint-every is refused by the schedule itself; the seconds have a default a sweep passes on)
        raise ConfigError(f"--checkpoint-seconds does not apply: "
                          f"{checkpoints.unchecked(options, scheduler is not None)}")
    _note_replaced_checkpoint(output)  # (once the options are valid: a refused fit replaces nothing)
    resolved = options.resolved_method  # (None for a network whose likelihood the data decide)
    rank = options.hyper.get("rank")
    label = (resolved or "fit") + (f" {rank_symbol(METHODS[resolved])}={rank}" if rank is not None and resolved
                                   else "")
    read_once = any(is_stream_path(path) for path in (data, read["test"]) if path is not None)
    with progress_bar(progress, label) as bar, _checkpointing(output, checkpoint, read_once,
                           checkpoints.unchecked(options, scheduler is not None)) as checkpointing, \
            _cluster_map(scheduler) as map_jobs:
        run = fit_run(opts, options, command=invocation(), progress=bar, notify=note, checkpointing=checkpointing,
                      map_jobs=map_jobs)
    if _target_note(target, run):
        note(_target_note(target, run))
    write_run(output, run)
    _report(output, run, as_json)


def _cluster_map(scheduler: str | None):
    """The cluster's ``map_jobs`` for ``--scheduler``; without one, None (the fit maps its jobs itself), and the
    cluster module, which a fit on this machine never runs, is not loaded."""
    if scheduler is None:
        return contextlib.nullcontext()
    from slangcli.cluster import cluster_map

    return cluster_map(scheduler)


# the signals that stop a fit after its current step, with a checkpoint
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# options a resumed fit accepts; everything else comes from the checkpoint
RESUME_OPTIONS = {"resume_path", "checkpoint_every", "checkpoint_seconds", "progress", "as_json"}


@contextlib.contextmanager
def _checkpointing(output: str, checkpoint: dict | None, from_stdin: bool = False, unchecked: str | None = None):
    """Checkpoint settings writing to ``output``, with SIGINT and SIGTERM turned into a request to stop after the
    current step (the fit then writes a last checkpoint and raises Interrupted, reported here). A fit without
    checkpoints (``checkpoint`` None) stops at once, and says why nothing is written (``unchecked``)."""
    if checkpoint is None:
        try:
            yield None
        except (KeyboardInterrupt, Terminated) as exc:
            signum = signal.SIGINT if isinstance(exc, KeyboardInterrupt) else exc.signum
            verb = "interrupted" if signum == signal.SIGINT else "terminated"
            error(f"{verb} ({signal.Signals(signum).name}): nothing written" + (f"; {unchecked}" if unchecked else ""))
            sys.exit(128 + signum)
        return
    stops = _Stops(output, from_stdin)
    # signal handlers can only be set from the main thread; a fit run in another thread (a slang sweep task on a
    # Dask worker) checkpoints on time and step counts only, and its process's own signals stop it
    main_thread = threading.current_thread() is threading.main_thread()
    previous = catch_signals(STOP_SIGNALS, stops.handler) if main_thread else {}
    try:
        yield Checkpointing(write=stops.write, stop=lambda: bool(stops.received), urgent=stops.urgent,
                            keep=stops.write_last.append, **checkpoint)
    except DivergenceError as exc:
        if stops.written:
            raise DivergenceError(f"{exc}; the last good checkpoint (step {stops.written[-1]}) is in {output}") \
                from None
        raise
    except Interrupted as exc:
        stops.stopped(stops.received[0] if stops.received else signal.SIGINT, str(exc), exc.hint)
    except Terminated as exc:
        stops.terminated(exc)
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class _Stops:
    """The signals that stop a checkpointed fit writing to ``output``, and what is said and kept when one does."""

    def __init__(self, output: str, from_stdin: bool):
        self.output, self.from_stdin = output, from_stdin
        self.received: list[int] = []
        self.written: list[int] = []  # the step of each checkpoint written
        self.writing = False
        self.urgent_work: list[str] = []  # the work without steps under way (reading the data, scoring), innermost last
        self.stopped_during: list[str] = []  # the work a signal stopped at once
        self.write_last: list = []  # how to write the snapshot of the last step, once the training is done

    def handler(self, signum, frame):
        # during work without steps a signal stops at once; during the steps a first one stops after the current
        # step, and a second at once (the last checkpoint stays valid), except while a checkpoint is being
        # written: that one finishes first (a second SIGTERM from a process manager must not cost the checkpoint)
        if self.urgent_work and not self.writing:
            self.received.append(signum)
            self.stopped_during.append(self.urgent_work[-1])
            raise Terminated(signum)
        if self.received and not self.writing:
            raise Terminated(signum)
        self.received.append(signum)

    @contextlib.contextmanager
    def urgent(self, what: str):
        """Work without steps, which a signal stops at once."""
        if self.received:  # asked to stop before this work began (after the last step, say): stop now
            self.stopped_during.append(what)
            raise Terminated(self.received[0])
        self.urgent_work.append(what)
        try:
            yield
        finally:
            self.urgent_work.pop()

    def write(self, run):
        """Write a checkpoint, and say what is left when it cannot be written."""
        self.writing = True
        try:
            write_run(self.output, run)
        except OutputError as exc:
            if self.received:  # the checkpoint of a signal: say that the fit was stopped, and what is left of it
                self.stopped(self.received[0], f"interrupted, and its checkpoint could not be written ({exc})")
            if self.written:  # (a full disk, say: the checkpoint before this one is intact)
                raise OutputError(f"{exc}; the fit's last checkpoint (step {self.written[-1]}) is still in "
                                  f"{self.output}") from None
            raise
        finally:
            self.writing = False
        self.written.append(run.metrics["steps"])

    def _next(self, verb: str) -> str:
        """What to do with the checkpoint: ``slang fit --resume`` (to ``verb`` it), unless the data were read once."""
        if self.from_stdin:
            return "its data came from standard input or a pipe, which --resume cannot read again"
        return f"{verb} with: slang fit --resume {shlex.quote(self.output)}"

    def stopped(self, signum: int, what: str, hint: str | None = None, at_once: bool = False):
        """Say that the fit stopped on ``signum`` (``what``) and what of it is in the output, and exit."""
        name = signal.Signals(signum).name
        if self.written:
            error(f"{what} ({name}); the fit so far (step {self.written[-1]}) is in {self.output}; "
                  f"{self._next('continue')}")
        elif at_once:
            error(f"{what} ({name}): nothing written")
        else:
            error(f"{what} ({name}), before any checkpoint: nothing written" + (f"; {hint}" if hint else ""))
        sys.exit(128 + signum)

    def terminated(self, exc: Terminated):
        """A signal that stopped work at once: during work without steps (keeping a finished training, so that
        --resume only scores it), or a second signal during the steps."""
        if not self.stopped_during:
            self.stopped(self.received[0] if self.received else exc.signum, "stopped by a second signal")
        verb = "interrupted" if exc.signum == signal.SIGINT else "terminated"
        if self.write_last:  # the training is done: keep it, so that --resume only scores it
            self.write_last[-1]()
            error(f"{verb} while {self.stopped_during[0]} ({signal.Signals(exc.signum).name}); the trained fit (step "
                  f"{self.written[-1]}, its last) is in {self.output}; {self._next('score it')}")
            sys.exit(128 + exc.signum)
        self.stopped(exc.signum, f"{verb} while {self.stopped_during[0]}", at_once=True)


def _one_stream(data, test) -> bool:
    """Whether DATA and --test name one stream (``-`` and ``/dev/stdin``, or one FIFO twice), which gives its rows to
    the first reader only."""
    if data is None or test is None or not (is_stream_path(data) and is_stream_path(test)):
        return False

    def identity(path):
        try:
            st = os.fstat(0) if path == "-" else os.stat(path)
        except (OSError, ValueError):
            return path
        return st.st_dev, st.st_ino

    return data == test or identity(data) == identity(test)


def _note_replaced_checkpoint(output: str) -> None:
    """Say so when OUTPUT holds the checkpoint of a stopped fit, which this fit replaces (the command that made it,
    run again, starts from step 0; --resume would have continued it)."""
    try:
        with open(output, "rb") as f:
            if f.read(8) != b"\x89HDF\r\n\x1a\n":
                return
        run = read_run(output)
    except (OSError, SlangError):  # (no file, or none slang reads: replaced without a word, as any file is)
        return
    if run.status == "checkpoint":
        note(f"{output} holds the checkpoint of a stopped fit (step {run.metrics.get('steps')} of "
             f"{run.metrics.get('n_steps')}), which this fit replaces; slang fit --resume {shlex.quote(output)} "
             "continues it instead")


def _resume(path: str, checkpoint: dict, progress, as_json) -> None:
    run = read_run(path)
    try:  # the checkpoint is replaced by the fit: a directory or file that cannot be written is found now, not after
        check_output_path(path)
    except UnusableOutput as exc:
        raise click.BadParameter(str(exc), param_hint="'--resume'") from None
    label = f"{run.config.get('method')} (resumed at step {run.metrics.get('steps')})"
    with progress_bar(progress, label) as bar, _checkpointing(path, checkpoint) as checkpointing:
        run = resume_run(run, path, progress=bar, notify=note, checkpointing=checkpointing)
    write_run(path, run)
    _report(path, run, as_json)


def _report(output: str, run, as_json: bool) -> None:
    m = run.metrics
    if "solver" not in m:
        done = f"{m['steps']} steps"
    elif closed_form(m["solver"]):
        rounds = m["solver"].get("prior_rounds", 1)
        done = "closed form" + (f", {rounds} rounds of learned precisions" if rounds > 1 else "")
    else:
        done = f"{m['steps']} L-BFGS iterations"
    if run.config.get("members", 1) > 1:
        done = f"{run.config['members']} members of {done}"
    metrics_table(f"{output}: {run.config['method']}, {done} in {m['fit_seconds']:.1f} s", metric_rows(m))
    if as_json:
        out = {"output": output, "metrics": {k: m[k] for k in ("test", "train", "constant") if k in m},
               "predictive": m["predictive"], "steps": m["steps"], "fit_seconds": m["fit_seconds"],
               "config": run.config}
        if "solver" in m:
            out["solver"] = m["solver"]
        if "snr_step" in run.history:
            out["snr"] = {name: run.history[name] for name in ("snr_step", "snr", "snr_paper")}
        emit_json(out)
