"""The training of a step method's posteriors from a plan: one (a fit), or K of them (``slang fit --members K``), an
ensemble kept as their equal-weight mixture (``slangcli.gaussian.posteriors.MixtureGaussian``).

:func:`train_one` trains one posterior from the plan, from a seed, with checkpoints; :func:`train_members` trains
the K members, one after another, through it (or, with ``--restarts``, each through its own restarts). Member 0
trains from the fit's own seed, so that one member is the single fit, bit for bit; member k >= 1 from
``streams.member_seed(seed, k)``: its own initial mean, minibatch order and weight noise, and its own learned noise
and prior precisions (each member's learner starts from the plan's values). The plan is made once: ``--tune``
chooses its hyperparameters before (single fits from the fit's seed), and every member trains with them. With
``--restarts R`` each member is the best of its own R restarts (seeds ``restart_seed(member_seed(seed, k), r)``).
A member is a function of the plan and its seed alone, so a trainer that steps the K members together can take
:func:`train_members`' place, and a cluster's map trains them at once (``slang fit --members K --scheduler``, one
task per member, without checkpoints) with the same result.

Checkpoints (``slangcli.training.checkpoints``): while member k of K > 1 trains, a checkpoint's posterior is the
mixture of the members done and of member k so far, its ``/state`` member k's (attribute ``member``: k), its
``/model`` member 0's, and its history every member's (member k >= 1's arrays named ``member<k>_<name>``, as in the
finished run). Resuming keeps the members done as stored, continues member k from its state and trains the members
after it from the plan's start: the same result, bit for bit, as the fit never stopped. A stop request is polled
after every step, and before the first step of member 0 (or of the member a resume continues) only: a request that
arrives between two members stops the fit after the next member's first step, with a checkpoint.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from slangcli import streams
from slangcli.errors import DivergenceError, FormatError, Interrupted
from slangcli.gaussian.posteriors import MixtureGaussian
from slangcli.methods.base import Problem
from slangcli.runfile.io import Run, member_name
from slangcli.training import checkpoints
from slangcli.training import learned
from slangcli.training.checkpoints import Checkpointing
from slangcli.training.plan import Outcome, Plan, train_steps
from slangcli.training.restarts import train_restarts


def member_seeds(seed: int, K: int) -> list[int]:
    """The training seeds of K members: ``seed`` itself for member 0, ``streams.member_seed(seed, k)`` after."""
    return [streams.member_seed(seed, k) for k in range(K)]


def train_one(plan: Plan, seed: int, *, state=None, history=None, learner: learned.Learner | None = None,
              elapsed: float = 0.0, progress=None, checkpointing: Checkpointing | None = None,
              wrap: Callable[[Run], Run] | None = None, poll: bool = True, where: str = "") -> Outcome:
    """Train the plan's method from ``seed`` (from ``state``, ``history`` and ``learner`` when resuming; fresh
    otherwise) to the planned last step, writing checkpoints as ``checkpointing`` asks (each snapshot made into
    its run by ``wrap``, when given); ``elapsed`` are its seconds before. ``poll``: ask ``checkpointing.stop()``
    before the first step too. A stop raises :class:`Interrupted` (``where`` follows its step count: ``" of member
    2 of 5"``)."""
    cfg = plan.config
    learner = learner or plan.learner()
    started = time.perf_counter()
    first_step = 0 if state is None else state.t
    after_step = None if checkpointing is None else checkpoints.writer(checkpointing, plan, learner, elapsed,
                                                                        started, wrap)
    stopped = poll and checkpointing is not None and checkpointing.stop()
    if not stopped:
        state, history = train_steps(plan, learner, seed=seed, state=state, history=history, progress=progress,
                                     after_step=after_step)
    if stopped or state.t < cfg["n_steps"]:
        step = first_step if state is None else state.t
        raise Interrupted(step, cfg["n_steps"], checkpointed=step > first_step,
                          message=f"interrupted at step {step} of {cfg['n_steps']}{where}" if where else None)
    if checkpointing is not None:
        seconds = elapsed + time.perf_counter() - started

        def write_last():  # (the trained state, should the scoring that follows be stopped)
            run = checkpoints.snapshot(plan, state, history, seconds, learner)
            checkpointing.write(run if wrap is None else wrap(run))

        checkpointing.keep(write_last)
    return Outcome(plan.module.posterior(state), {**history.as_arrays(), **learner.history()}, int(state.t),
                   elapsed + time.perf_counter() - started, learner.problem)


@dataclass
class Resumed:
    """A fit of several members read back from its checkpoint: the members done (``done``), and member
    ``k``'s plan (the fit's with member k's precisions as they were), state, history, learner and seconds so far."""

    k: int
    done: list
    plan: Plan
    state: object
    history: object
    learner: learned.Learner
    elapsed: float


def train_members(plan: Plan, K: int, *, restarts: int = 1, progress=None, notify=lambda msg: None,
                  checkpointing: Checkpointing | None = None, map_jobs=None,
                  resumed: Resumed | None = None) -> Outcome:
    """The K posteriors of the plan (module docstring): one fit's outcome for K = 1, else the outcome whose posterior
    is the mixture of the K members (:func:`combine`). ``progress(t, n)`` counts the steps of all members;
    ``resumed`` continues a checkpoint of a fit of several members (:func:`restore`)."""
    seeds = member_seeds(plan.config["seed"], K)
    if K == 1:
        if restarts > 1:
            return train_restarts(plan, restarts, progress, notify, map_jobs)
        return train_one(plan, seeds[0], progress=progress, checkpointing=checkpointing)
    if map_jobs is not None and restarts == 1 and resumed is None:
        return _members_on_cluster(plan, seeds, notify, map_jobs)
    done = list(resumed.done) if resumed is not None else []
    for k in range(len(done), K):
        where = f" of member {k + 1} of {K}"
        member_progress = None if progress is None else (lambda t, n, k=k: progress(k * n + t, K * n))
        wrap = None if checkpointing is None else (lambda run, k=k, before=tuple(done): checkpoint_run(K, k, before,
                                                                                                       run))
        if restarts > 1:
            outcome = train_restarts(plan, restarts, member_progress,
                                     lambda msg, k=k: notify(f"member {k + 1} of {K}: {msg}"), map_jobs, seeds[k])
        elif resumed is not None and k == resumed.k:
            outcome = train_one(resumed.plan, seeds[k], state=resumed.state, history=resumed.history,
                                learner=resumed.learner, elapsed=resumed.elapsed, progress=member_progress,
                                checkpointing=checkpointing, wrap=wrap, where=where)
        else:
            outcome = train_one(plan, seeds[k], progress=member_progress, checkpointing=checkpointing, wrap=wrap,
                                poll=k == 0, where=where)
        notify(f"member {k + 1} of {K} (seed {seeds[k]}): trained in {outcome.fit_seconds:.1f} s")
        done.append(outcome)
    return combine(done, seeds)


def _member(plan: Plan, seed: int):
    """One member trained from ``seed`` on a cluster's worker: its outcome, or the DivergenceError it ended in
    (returned, so that the cluster's map carries it back like a result)."""
    try:
        return train_one(plan, seed)
    except DivergenceError as exc:
        return exc


def _members_on_cluster(plan: Plan, seeds: list[int], notify, map_jobs) -> Outcome:
    """The K members trained at once by ``map_jobs`` (a cluster's map, ``slang fit --members K --scheduler``), one
    task each, without checkpoints: the mixture :func:`train_members` makes one after another, bit for bit."""
    outcomes = map_jobs(_member, [(plan, seed) for seed in seeds])
    for k, (seed, outcome) in enumerate(zip(seeds, outcomes)):
        if isinstance(outcome, DivergenceError):
            raise outcome
        notify(f"member {k + 1} of {len(seeds)} (seed {seed}): trained in {outcome.fit_seconds:.1f} s")
    return combine(list(outcomes), seeds)


def _mixture(posteriors, problems) -> MixtureGaussian:
    return MixtureGaussian(members=tuple(posteriors),
                           noise_precision=np.array([float(p.model.noise_precision) for p in problems]),
                           prior_precision=np.stack([p.prior_precision for p in problems]))


def merged_history(histories: list[dict]) -> dict:
    """The members' histories in one run's: member 0's arrays under their own names (what a single fit's readers
    read), member k's under ``member<k>_<name>``."""
    out = dict(histories[0])
    for k, history in enumerate(histories[1:], start=1):
        out.update((f"member{k}_{name}", values) for name, values in history.items())
    return out


def split_history(history: dict, K: int) -> list[dict]:
    """The K members' histories of a :func:`merged_history`."""
    out = [{} for _ in range(K)]
    for name, values in history.items():
        k, own = member_name(name)
        if k < K:
            out[k][own] = values
    return out


def combine(outcomes: list[Outcome], seeds: list[int]) -> Outcome:
    """The members' outcomes as one: the mixture of their posteriors (each with the noise and prior precisions it
    ended with), their histories (:func:`merged_history`), member 0's problem and steps, their seconds in all, and
    their restarts' records when they had restarts."""
    if len(outcomes) == 1:
        return outcomes[0]
    restarts = [o.restarts for o in outcomes] if outcomes[0].restarts is not None else None
    return Outcome(_mixture([o.posterior for o in outcomes], [o.problem for o in outcomes]),
                   merged_history([o.history for o in outcomes]), outcomes[0].steps,
                   sum(o.fit_seconds for o in outcomes), outcomes[0].problem, restarts=restarts,
                   members={"seeds": list(seeds), "fit_seconds": [o.fit_seconds for o in outcomes]})


def checkpoint_run(K: int, k: int, done: tuple, run: Run) -> Run:
    """The checkpoint of member ``k`` of ``K`` in progress (``run``, its own snapshot) with the members ``done``:
    the mixture of theirs and its posterior so far, member 0's model and prior, every member's history, its state
    marked with ``member`` k, and the seconds of all (``metrics`` ``member_seconds``: the members done)."""
    problems = [o.problem for o in done] + [Problem(run.model, run.prior_precision, 0)]
    seconds = [o.fit_seconds for o in done]
    return replace(run, model=problems[0].model, prior_precision=problems[0].prior_precision,
                   posterior=_mixture([o.posterior for o in done] + [run.posterior], problems),
                   history=merged_history([o.history for o in done] + [run.history]),
                   metrics={**run.metrics, "fit_seconds": sum(seconds) + run.metrics["fit_seconds"], "member": k,
                            "members": K, "member_seconds": seconds},
                   state={"arrays": run.state["arrays"], "scalars": {**run.state["scalars"], "member": k}})


def restore(run: Run, run_name: str, plan: Plan) -> Resumed:
    """The checkpoint ``run`` of a fit of several members, planned by ``plan`` (with the precisions every member
    starts from), as :func:`train_members` continues it. The reader has checked that the mixture holds the members
    up to the one in progress (``state`` ``member``); the seconds of the members done must be there too."""
    posterior, k = run.posterior, int(run.state["scalars"]["member"])
    seconds = run.metrics.get("member_seconds")
    if not (isinstance(seconds, list) and len(seconds) == k
            and all(isinstance(s, (int, float)) and not isinstance(s, bool) for s in seconds)):
        raise FormatError(f"{run_name}: /metrics lacks 'member_seconds', the seconds of the {k} members done")
    histories = split_history(run.history, k + 1)
    parts = posterior.components(plan.model)
    n = plan.problem.n_data
    done = [Outcome(member, histories[j], int(plan.config["n_steps"]), float(seconds[j]),
                    Problem(model, prior, n)) for j, (member, model, prior) in enumerate(parts[:k])]
    _, model, prior = parts[k]
    member_plan = replace(plan, model=model, problem=Problem(model, prior, n))
    state, history, learner = checkpoints.restore(replace(run, history=histories[k]), run_name, member_plan)
    elapsed = float(run.metrics.get("fit_seconds", 0.0)) - float(sum(seconds))
    return Resumed(k, done, member_plan, state, history, learner, elapsed)
