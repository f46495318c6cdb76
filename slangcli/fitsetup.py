"""What a step method's fit needs besides its training state, and the training loop run from it.

A :class:`Setup` is built from the fit's options (``slangcli.fitting.fit_prepared``) or from a checkpoint
(``slangcli.fitting.resume``); a fresh fit, a resumed one (``slangcli.checkpoints``) and each restart
(``slangcli.restarts``) train from it through :func:`train_steps`, so all three run the same loop with the same
thread policy and gradient-SNR records.
"""

from __future__ import annotations

from dataclasses import dataclass

from slangcli import learned, streams, train
from slangcli.methods.base import Problem, samples_per_step
from slangcli.models import MLP
from slangcli.prepare import Prepared
from slangcli.threads import blas_threads


@dataclass
class Setup:
    """Everything a fit needs besides its training state: rebuilt from the options (``fit``) or from a
    checkpoint (``resume``)."""

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

    def learner(self, problem: Problem | None = None) -> learned.Learner:
        """A fresh learner of this fit's learned precisions, from ``problem`` (default: the setup's)."""
        n, batch = self.problem.n_data, self.config["batch_size"]
        return learned.Learner(problem or self.problem, noise=self.learn_noise, prior=self.learn_prior,
                               window=streams.steps_per_epoch(n, batch) if batch else 1,
                               warmup=learned.warmup_steps(self.model, self.config.get("n_steps")),
                               data=(self.prepared.X_train, self.prepared.y_train))


def snr_options(cfg: dict) -> dict:
    """``train.run``'s gradient-SNR arguments from the run's config (``--snr``; none recorded when absent)."""
    snr = cfg.get("snr") or {}
    return {"snr_every": snr.get("every") or 0, "snr_draws": snr.get("draws", 10)}


def train_steps(setup: Setup, learner: learned.Learner, *, seed: int, state=None, history=None, progress=None,
                after_step=None):
    """``train.run`` of the setup's method on its training data from ``state`` (None: fresh, from ``seed``) to the
    configured last step; returns ``(state, history)``."""
    cfg, p = setup.config, setup.prepared
    with blas_threads(setup.model.n_params, samples_per_step(setup.hyper), cfg["batch_size"]):
        return train.run(setup.module, setup.hyper, learner.problem, p.X_train, p.y_train, seed=seed,
                         batch_size=cfg["batch_size"], n_steps=cfg["n_steps"], state=state, history=history,
                         progress=progress, after_step=after_step, learner=learner, **snr_options(cfg))
