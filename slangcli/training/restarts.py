"""Restarts (``slang fit --restarts R``): R fits of a step method from different seeds, of which the one with the
lowest -ELBO on the training data is kept. The test data play no part in the choice.

Restart 0 trains with the fit's own seed and restart r with :func:`restart_seed` (derived from the seed, so the
same command gives the same restarts); each restart is a pure function of its plan and seed, so a cluster's map
runs them with the same results as the serial loop.
"""

from __future__ import annotations

import time

import numpy as np

from slangcli import streams
from slangcli.errors import DivergenceError
from slangcli.predictive.evaluation import score
from slangcli.training.plan import Outcome, Plan, train_steps


def restart_seed(seed: int, r: int) -> int:
    """The training seed of restart ``r`` (restart 0 trains with ``seed`` itself)."""
    return seed if r == 0 else int(streams.derive_rng(seed, streams.RESTART, r).integers(2**31))


def _restart(plan: Plan, seed: int, progress=None, scoring: int | None = None):
    """One restart's fit from ``seed``: ``(posterior, history, steps, training -ELBO / N, problem)`` (the problem
    with any learned precisions as they ended), or the DivergenceError it ended in (returned, so that a cluster's
    map carries it back like a result). The -ELBO's draws are those of the seed ``scoring`` (default: the fit's),
    the same for every restart of a fit."""
    cfg, p = plan.config, plan.prepared
    learner = plan.learner()
    try:
        state, history = train_steps(plan, learner, seed=seed, progress=progress)
    except DivergenceError as exc:
        return exc
    posterior = plan.module.posterior(state)
    with np.errstate(over="ignore", invalid="ignore"):  # the training part of the run's own scores
        scores = score(learner.problem.model, posterior, learner.problem.prior_precision, X_train=p.X_train,
                       y_train=p.y_train, samples=cfg["eval_samples"],
                       seed=cfg["seed"] if scoring is None else scoring)
    nelbo = scores["train"]["neg_elbo_per_example"]
    return (posterior, {**history.as_arrays(), **learner.history()}, int(state.t),
            nelbo if np.isfinite(nelbo) else float("inf"), learner.problem)


def train_restarts(plan: Plan, restarts: int, progress, notify, map_jobs=None, seed: int | None = None) -> Outcome:
    """``restarts`` fits from different seeds (initial mean, minibatches, weight noise), derived from ``seed``
    (default: the fit's; a member of ``--members`` has its own, which also draws the -ELBO's samples, so that the
    member's restarts are those of a fit with its seed); returns the one with the lowest -ELBO on the
    training data (its problem with any learned precisions as they ended), with every restart's seed and -ELBO as
    its ``restarts`` record, and the seconds all restarts took. A restart that diverges is left out; if all do, the
    first one's error is raised. With ``map_jobs`` (a cluster's map) the restarts run there, with the same
    results."""
    cfg = plan.config
    seeds = [restart_seed(cfg["seed"] if seed is None else seed, r) for r in range(restarts)]
    started = time.perf_counter()
    if map_jobs is None:
        outcomes = [_restart(plan, s, progress, seed) for s in seeds]
    else:
        outcomes = map_jobs(_restart, [(plan, s, None, seed) for s in seeds])
    best, elbos, error = None, [], None
    for r, (seed, outcome) in enumerate(zip(seeds, outcomes)):
        if isinstance(outcome, DivergenceError):
            error = error or outcome
            elbos.append(None)
            notify(f"restart {r + 1} of {restarts} (seed {seed}): {outcome}")
            continue
        posterior, history, steps, nelbo, problem = outcome
        elbos.append(nelbo)
        notify(f"restart {r + 1} of {restarts} (seed {seed}): training -ELBO per example {nelbo:.4f}")
        if best is None or nelbo < best[0]:
            best = (nelbo, r, posterior, history, steps, problem)
    if best is None:
        raise error
    _, chosen, posterior, history, steps, problem = best
    return Outcome(posterior, history, steps, time.perf_counter() - started, problem,
                   restarts={"seeds": seeds, "neg_elbo_per_example": elbos, "chosen": chosen})
