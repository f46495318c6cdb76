"""The one training loop every method runs in.

Randomness is derived, never carried: the generator of step ``t`` is ``default_rng([seed, STEP, t])`` and the
order of epoch ``e`` is a permutation drawn from ``default_rng([seed, ORDER, e])``. A run can therefore stop
after any step and continue from its state alone, bit for bit.

Minibatches: each epoch visits the training set once in a fresh random order, in ``ceil(N / M)`` minibatches
(the last one smaller when M does not divide N).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from slangcli.errors import DivergenceError
from slangcli.methods.base import Problem

# Stream identifiers of the derived generators.
INIT, ORDER, STEP, EVAL = 0, 1, 2, 3


def derive_rng(seed: int, stream: int, *index: int) -> np.random.Generator:
    return np.random.default_rng([seed, stream, *index])


@dataclass
class History:
    """Per-epoch record: the mean minibatch NLL per example (over the epoch's steps and weight samples)."""

    epoch: list = field(default_factory=list)
    step: list = field(default_factory=list)
    nll: list = field(default_factory=list)
    seconds: list = field(default_factory=list)

    def as_arrays(self) -> dict[str, np.ndarray]:
        return {
            "epoch": np.asarray(self.epoch, dtype=np.int64),
            "step": np.asarray(self.step, dtype=np.int64),
            "nll": np.asarray(self.nll, dtype=float),
            "seconds": np.asarray(self.seconds, dtype=float),
        }


def steps_per_epoch(n_data: int, batch_size: int) -> int:
    return -(-n_data // batch_size)


def batch_indices(seed: int, t: int, n_data: int, batch_size: int) -> np.ndarray:
    """Example indices of global step ``t`` (0-based)."""
    spe = steps_per_epoch(n_data, batch_size)
    epoch, j = divmod(t, spe)
    order = derive_rng(seed, ORDER, epoch).permutation(n_data)
    return order[j * batch_size : (j + 1) * batch_size]


def _check_finite(state, t: int, what: str) -> None:
    for name, value in state._asdict().items():
        if isinstance(value, np.ndarray) and not np.isfinite(value).all():
            raise DivergenceError(
                f"training diverged at step {t}: non-finite {what} ({name}); "
                "try a smaller --lr or --beta, or a larger --prior-precision"
            )


def run(
    method,
    hyper,
    problem: Problem,
    X: np.ndarray,
    y: np.ndarray,
    *,
    seed: int,
    batch_size: int,
    n_steps: int,
    state=None,
    history: History | None = None,
    progress: Callable[[int, int], None] | None = None,
):
    """Run ``method`` from ``state`` (or a fresh ``method.init``) until ``n_steps`` steps in total.

    Returns ``(state, history)``. Raises ``DivergenceError`` on a non-finite loss or state.
    """
    if state is None:
        state = method.init(derive_rng(seed, INIT), problem, hyper)
    history = history if history is not None else History()
    n = problem.n_data
    spe = steps_per_epoch(n, batch_size)
    epoch_nll, epoch_start = [], time.perf_counter()
    order, order_epoch = None, -1
    while state.t < n_steps:
        t = state.t
        epoch, j = divmod(t, spe)
        if epoch != order_epoch:
            order, order_epoch = derive_rng(seed, ORDER, epoch).permutation(n), epoch
        idx = order[j * batch_size : (j + 1) * batch_size]
        state, info = method.step(derive_rng(seed, STEP, t), state, problem, X[idx], y[idx], hyper)
        if not np.isfinite(info["nll"]):
            raise DivergenceError(
                f"training diverged at step {t + 1} (epoch {epoch + 1}): the loss is not finite; "
                "try a smaller --lr or --beta, or a larger --prior-precision"
            )
        epoch_nll.append(info["nll"])
        if j == spe - 1 or state.t == n_steps:
            _check_finite(state, state.t, "parameters")
            now = time.perf_counter()
            history.epoch.append(epoch + 1)
            history.step.append(state.t)
            history.nll.append(float(np.mean(epoch_nll)))
            history.seconds.append(now - epoch_start)
            epoch_nll, epoch_start = [], now
        if progress is not None:
            progress(state.t, n_steps)
    return state, history
