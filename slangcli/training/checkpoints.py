"""Checkpoints of a step method's fit: when one is written (:class:`Checkpointing`, :func:`writer`), the run file
of a fit stopped after step ``t`` (:func:`snapshot`, status ``"checkpoint"``, format in ``docs/FORMAT.md``
``/state``), and the training state read back from it (:func:`restore`).

A checkpoint stores the method's state arrays in their own dtype, its numeric fields, and the running sums of the
epoch in progress; random streams are not stored, because every one is derived from the seed and the step
(``slangcli.streams``). So a fit resumed from a checkpoint equals, bit for bit, the fit that was never stopped.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Callable, ContextManager

import numpy as np

from slangcli import streams
from slangcli.errors import ConfigError, FormatError
from slangcli.methods import METHODS
from slangcli.methods.base import describe, is_solver
from slangcli.runfile.io import Run
from slangcli.runfile.provenance import meta
from slangcli.training import learned
from slangcli.training import loop as train
from slangcli.training.options import FitOptions
from slangcli.training.plan import Plan


def _no_urgency(what: str):
    return contextlib.nullcontext()


@dataclass
class Checkpointing:
    """When a step method's fit writes a resumable snapshot of itself (a run file with status "checkpoint"), and
    how: ``write(run)`` stores it (atomically); ``stop()`` is polled after every step and, when it returns True,
    the fit writes a last snapshot and raises :class:`Interrupted`.

    ``urgent(what)`` is a context manager around work that has no step to stop after: reading the data, scoring
    the fitted posterior (``what`` names it). A stop request during it, or pending when it begins, ends the fit at
    once: the command line's signal handler raises its exception there, instead of one that comes after the
    work (reading ten million rows took 20 s; scoring with ``--eval-samples 10000000``, hours).

    ``keep(write_last)`` is told, once the last step is done, how to write that step's snapshot
    (``write_last()``): the command line calls it when a stop request ends the scoring that follows, so that the
    training is not lost and ``slang fit --resume`` only scores it."""

    write: Callable[[Run], None]
    every_steps: int | None = None
    every_seconds: float | None = None
    stop: Callable[[], bool] = lambda: False
    urgent: Callable[[str], ContextManager] = _no_urgency
    keep: Callable[[Callable[[], None]], None] = lambda write_last: None


def schedule(options: FitOptions, every_steps: int | None, every_seconds: float | None,
             on_cluster: bool = False) -> dict | None:
    """When a fresh fit with ``options`` checkpoints, as :class:`Checkpointing`'s ``every_steps`` and
    ``every_seconds`` (0: never by time), or None when it does not: a solver is solved at once (and refuses
    ``every_steps``), restarts are not checkpointed unless ``every_steps`` asks (``--restarts`` then refuses it),
    and neither are members trained on a cluster (``on_cluster``: ``--members`` with ``--scheduler``, which refuses
    ``every_steps``). The one rule of ``slang fit`` and of a sweep's fits."""
    method = options.resolved_method
    if method is not None and is_solver(METHODS[method]):
        if every_steps is not None:
            raise ConfigError(f"--checkpoint-every does not apply to --method {method}: it is solved at once")
        return None
    if on_cluster and options.members > 1 and options.restarts == 1:
        if every_steps is not None:
            raise ConfigError("--members with --scheduler trains the members on the cluster, without checkpoints: "
                              "give --checkpoint-every without --scheduler")
        return None
    if options.restarts > 1 and every_steps is None:
        return None
    return {"every_steps": every_steps, "every_seconds": every_seconds or None}


def unchecked(options: FitOptions, on_cluster: bool = False) -> str:
    """Why :func:`schedule` gives a fit with ``options`` no checkpoints, in the words a stopped fit says it with."""
    method = options.resolved_method
    if method is not None and is_solver(METHODS[method]):
        return f"--method {method} is solved at once, without checkpoints"
    if on_cluster and options.members > 1 and options.restarts == 1:
        return "members trained on a cluster (--scheduler) are not checkpointed"
    return "a fit of --restarts is not checkpointed"


def writer(checkpointing: Checkpointing, plan: Plan, learner: learned.Learner, elapsed: float, started: float,
           wrap: Callable[[Run], Run] | None = None):
    """``train.run``'s ``after_step``: writes a snapshot when one is due (every ``every_steps`` steps or
    ``every_seconds`` seconds) or when ``checkpointing.stop()`` asks to stop, and returns that answer. ``elapsed``
    are the fit's seconds before this run of the loop, which began at ``started`` (``time.perf_counter``).
    ``wrap`` makes the run file of the snapshot (``slangcli.training.members``: with the members done)."""
    last_write = started

    def after_step(state, history) -> bool:
        nonlocal last_write
        stop = checkpointing.stop()
        now = time.perf_counter()
        due = (checkpointing.every_steps and state.t % checkpointing.every_steps == 0) or \
              (checkpointing.every_seconds and now - last_write >= checkpointing.every_seconds)
        if (due or stop) and state.t < plan.config["n_steps"]:
            run = snapshot(plan, state, history, elapsed + now - started, learner)
            checkpointing.write(run if wrap is None else wrap(run))
            last_write = time.perf_counter()
        return stop

    return after_step


def snapshot(plan: Plan, state, history: train.History, fit_seconds: float, learner: learned.Learner) -> Run:
    """The run file of a fit stopped after step ``state.t``: the posterior so far and the state to resume (the
    learned precisions in force are the run's model and prior, their smoothing state a scalar)."""
    arrays = {name: value for name, value in zip(state._fields, state) if isinstance(value, np.ndarray)}
    scalars = {"t": int(state.t), "history_open_sum": float(history.open_sum),
               "history_open_count": int(history.open_count), "history_open_seconds": float(history.open_seconds)}
    if learner.noise and np.isfinite(learner.residual):
        # (none yet before the first update of the noise precision: absent, which the restore reads as NaN, the
        # learner's own start; a NaN attribute would make the checkpoint unreadable)
        scalars["learned_residual"] = float(learner.residual)
    scalars.update({name: value for name, value in zip(state._fields, state)
                    if name != "t" and isinstance(value, (int, float))})
    metrics = {"steps": int(state.t), "n_steps": plan.config["n_steps"], "fit_seconds": fit_seconds}
    return Run(model=learner.problem.model, prior_precision=learner.problem.prior_precision,
               posterior=plan.module.posterior(state), config=plan.config, data=plan.prepared.data,
               arrays=plan.prepared.arrays, history={**history.as_arrays(), **learner.history()}, metrics=metrics,
               command=plan.command, meta=meta(plan.resumed), status="checkpoint",
               state={"arrays": arrays, "scalars": scalars})


def restore(run: Run, run_name: str, plan: Plan):
    """The training state stored in the checkpoint ``run`` of the fit planned by ``plan``: ``(state, history, learner)``,
    each as it was after the checkpoint's step. Every stored array is checked against the method's own state
    (a fresh one is the template of fields, shapes, dtypes and memory order)."""
    config = plan.config
    template = plan.module.init(streams.derive_rng(config["seed"], streams.INIT), plan.problem, plan.hyper)
    stored, scalars = run.state["arrays"], run.state["scalars"]
    values = {}
    for name, value in zip(template._fields, template):
        if name == "t":
            values[name] = int(scalars["t"])
        elif isinstance(value, np.ndarray) and name in stored:
            got = stored[name]
            if got.shape != value.shape:
                raise FormatError(f"{run_name}: /state/{name} has shape {got.shape}, expected {value.shape}")
            # the template's dtype and memory order (SLANG keeps U Fortran-ordered): BLAS kernels, and so the
            # rounding of every later step, depend on the layout
            order = "F" if value.flags.f_contiguous and not value.flags.c_contiguous else "C"
            values[name] = np.array(got, dtype=value.dtype, order=order)
        elif isinstance(value, np.ndarray) and name not in describe(plan.module).cache_fields:
            raise FormatError(f"{run_name}: /state lacks {name!r}")
        elif isinstance(value, (int, float)) and name in scalars:
            values[name] = type(value)(scalars[name])
        else:
            values[name] = None if isinstance(value, np.ndarray) else value
    state = template._replace(**values)
    # (at the last step: a trained fit whose scoring was stopped; resuming it only scores)
    if not 0 < state.t <= config["n_steps"]:
        raise FormatError(f"{run_name}: /state is at step {state.t} of {config['n_steps']}")
    history = train.History(
        epoch=[int(v) for v in run.history.get("epoch", [])], step=[int(v) for v in run.history.get("step", [])],
        nll=[float(v) for v in run.history.get("nll", [])], seconds=[float(v) for v in run.history.get("seconds", [])],
        kl=[float(v) for v in run.history.get("kl", [])],
        open_sum=float(scalars.get("history_open_sum", 0.0)), open_count=int(scalars.get("history_open_count", 0)),
        open_seconds=float(scalars.get("history_open_seconds", 0.0)),
        # the gradient SNR's records (--snr) before the checkpoint, which a resumed fit continues
        snr_step=[int(v) for v in run.history.get("snr_step", [])],
        snr=[[float(x) for x in row] for row in run.history.get("snr", [])],
        snr_paper=[[float(x) for x in row] for row in run.history.get("snr_paper", [])])
    learner = plan.learner()
    learner.residual = float(scalars.get("learned_residual", float("nan")))
    learner.restore_history(run.history)
    return state, history, learner
