"""A fit's plan, what it gave, and the training loop run from the plan.

A :class:`Plan` is built once, from the fit's options (``slangcli.training.fitting.fit_prepared``) or from a checkpoint
(``slangcli.training.fitting.resume``), and never changed: a fresh fit, a resumed one
(``slangcli.training.checkpoints``) and each restart (``slangcli.training.restarts``) train from it through
:func:`train_steps`, so all three run the same loop with the same thread policy and gradient-SNR records. What training
or solving gives is an :class:`Outcome`, from which the run is assembled (``slangcli.training.fitting``).
"""

from __future__ import annotations

from dataclasses import dataclass

from slangcli import streams
from slangcli.data.prepare import Prepared
from slangcli.methods.base import Problem, samples_per_step
from slangcli.models import MLP
from slangcli.threads import blas_threads
from slangcli.training import learned
from slangcli.training import loop as train


@dataclass(frozen=True)
class Plan:
    """What to train and how: the method and its hyperparameters, the model and problem it starts from, the
    prepared data, the run's configuration record (``config``, as stored in the run file: read, never written),
    the command line, which precisions are learned along the way, and the checkpoints a resumed fit continued
    (``slangcli.runfile.provenance.resume_record``, recorded in every run written from the plan)."""

    method: str
    module: object
    hyper: object
    model: MLP
    problem: Problem
    prepared: Prepared
    config: dict
    command: list
    learn_noise: bool = False
    learn_prior: bool = False
    resumed: tuple = ()

    def learner(self, problem: Problem | None = None) -> learned.Learner:
        """A fresh learner of this fit's learned precisions, from ``problem`` (default: the plan's)."""
        n, batch = self.problem.n_data, self.config["batch_size"]
        return learned.Learner(problem or self.problem, noise=self.learn_noise, prior=self.learn_prior,
                               window=streams.steps_per_epoch(n, batch) if batch else 1,
                               warmup=learned.warmup_steps(self.model, self.config.get("n_steps")),
                               data=(self.prepared.X_train, self.prepared.y_train))


def snr_options(cfg) -> dict:
    """``train.run``'s gradient-SNR arguments from the run's config (``--snr``; none recorded when absent)."""
    snr = cfg.get("snr") or {}
    return {"snr_every": snr.get("every") or 0, "snr_draws": snr.get("draws", 10)}


@dataclass(frozen=True)
class Outcome:
    """What a plan's training or solve gave: the posterior, its history (arrays by name), the steps (or solver
    iterations) and seconds it took, the problem it ended with (learned precisions as they ended; member 0's for a
    mixture of members), and the solver's, the restarts' or the members' record when there is one."""

    posterior: object
    history: dict
    steps: int
    fit_seconds: float
    problem: Problem
    solver: dict | None = None
    restarts: dict | list | None = None  # a list of the members' records for a fit of several members
    members: dict | None = None  # a fit of several members: their "seeds" and "fit_seconds"


def train_steps(plan: Plan, learner: learned.Learner, *, seed: int, state=None, history=None, progress=None,
                after_step=None):
    """``train.run`` of the plan's method on its training data from ``state`` (None: fresh, from ``seed``) to the
    configured last step; returns ``(state, history)``."""
    cfg, p = plan.config, plan.prepared
    with blas_threads(plan.model.n_params, samples_per_step(plan.hyper), cfg["batch_size"]):
        return train.run(plan.module, plan.hyper, learner.problem, p.X_train, p.y_train, seed=seed,
                         batch_size=cfg["batch_size"], n_steps=cfg["n_steps"], state=state, history=history,
                         progress=progress, after_step=after_step, learner=learner, **snr_options(cfg))
