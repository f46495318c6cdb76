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
# weight samples of `slang predict`, chunk by chunk; 4 is left to the gradient-SNR draws of the issue-5 branch
PREDICT = 5


def derive_rng(seed: int, stream: int, *index: int) -> np.random.Generator:
    return np.random.default_rng([seed, stream, *index])


@dataclass
class History:
    """Per-epoch record: the mean minibatch NLL per example (over the epoch's steps and weight samples).

    A run that ends mid-epoch records that epoch as a last, partial entry.
    """

    epoch: list = field(default_factory=list)
    step: list = field(default_factory=list)
    nll: list = field(default_factory=list)
    seconds: list = field(default_factory=list)
    # the epoch in progress: running sum and count of step losses, and its seconds so far, so that a run stopped
    # mid-epoch and resumed records the same history as one never stopped
    open_sum: float = 0.0
    open_count: int = 0
    open_seconds: float = 0.0

    def as_arrays(self) -> dict[str, np.ndarray]:
        return {
            "epoch": np.asarray(self.epoch, dtype=np.int64),
            "step": np.asarray(self.step, dtype=np.int64),
            "nll": np.asarray(self.nll, dtype=float),
            "seconds": np.asarray(self.seconds, dtype=float),
        }


def steps_per_epoch(n_data: int, batch_size: int) -> int:
    return -(-n_data // batch_size)


def epoch_order(seed: int, epoch: int, n_data: int) -> np.ndarray:
    """The order in which epoch ``epoch`` (0-based) visits the training examples."""
    return derive_rng(seed, ORDER, epoch).permutation(n_data)


def batch_indices(seed: int, t: int, n_data: int, batch_size: int) -> np.ndarray:
    """Example indices of global step ``t`` (0-based)."""
    epoch, j = divmod(t, steps_per_epoch(n_data, batch_size))
    return epoch_order(seed, epoch, n_data)[j * batch_size : (j + 1) * batch_size]


def _diverged(step: int, epoch: int, what: str) -> str:
    return (f"training diverged at step {step} (epoch {epoch + 1}): {what}; "
            "try a smaller --lr or --beta, or a larger --prior-precision")


def _check_finite(state, step: int, epoch: int) -> None:
    """O(D) per step: the mean and the diagonal precision (a non-finite U reaches d through its correction), or
    the log standard deviations (Bayes by Backprop). A non-finite dense precision fails its Cholesky
    factorisation, which is reported as a failed linear-algebra routine."""
    for name in ("mu", "d", "log_sigma"):
        value = getattr(state, name, None)
        if value is not None and not np.isfinite(value).all():
            raise DivergenceError(_diverged(step, epoch, f"non-finite parameters ({name})"))


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
    after_step: Callable[[object, History], bool] | None = None,
):
    """Run ``method`` from ``state`` (or a fresh ``method.init``) until ``n_steps`` steps in total.

    ``after_step(state, history)`` is called after every step (checkpoints are written from it); returning True
    stops the run there. Returns ``(state, history)``, with ``state.t < n_steps`` when stopped early. Raises
    ``DivergenceError`` on a non-finite loss or state (before ``after_step`` sees that state).
    """
    if state is None:
        state = method.init(derive_rng(seed, INIT), problem, hyper)
    history = history if history is not None else History()
    if history.open_count and history.step and history.step[-1] == state.t:
        # the previous run ended mid-epoch and recorded that epoch as partial: continue it instead
        for column in (history.epoch, history.step, history.nll, history.seconds):
            column.pop()
    n = problem.n_data
    spe = steps_per_epoch(n, batch_size)
    order, order_epoch = None, -1
    last = time.perf_counter()
    # overflow and invalid operations are detected below, from the values, with a message naming the step
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        while state.t < n_steps:
            t = state.t
            epoch, j = divmod(t, spe)
            if epoch != order_epoch:
                order, order_epoch = epoch_order(seed, epoch, n), epoch
            idx = order[j * batch_size : (j + 1) * batch_size]
            try:
                state, info = method.step(derive_rng(seed, STEP, t), state, problem, X[idx], y[idx], hyper)
            except np.linalg.LinAlgError:
                raise DivergenceError(_diverged(t + 1, epoch, "a linear-algebra routine failed")) from None
            if not np.isfinite(info["nll"]):
                raise DivergenceError(_diverged(t + 1, epoch, "the loss is not finite"))
            _check_finite(state, t + 1, epoch)
            now = time.perf_counter()
            history.open_sum += info["nll"]
            history.open_count += 1
            history.open_seconds += now - last
            last = now
            if j == spe - 1 or state.t == n_steps:
                history.epoch.append(epoch + 1)
                history.step.append(state.t)
                history.nll.append(history.open_sum / history.open_count)
                history.seconds.append(history.open_seconds)
                if j == spe - 1:
                    history.open_sum, history.open_count, history.open_seconds = 0.0, 0, 0.0
            if progress is not None:
                progress(state.t, n_steps)
            if after_step is not None and after_step(state, history):
                break
    return state, history
