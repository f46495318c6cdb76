"""The one training loop every method runs in.

Randomness is derived, never carried (``slangcli.streams``): the generator of step ``t`` is
``default_rng([seed, STEP, t])`` and the order of epoch ``e`` is a permutation drawn from
``default_rng([seed, ORDER, e])``. A run can therefore stop after any step and continue from its state alone,
bit for bit. Each epoch visits the training set once in a fresh random order (``streams.Minibatches``).

Gradient signal-to-noise ratio (optional, for the methods with ``std_gradients``, ``slangcli.methods.base.Method``):
every ``snr_every`` steps, ``snr_draws`` independent gradients of the standard-deviation parameters are drawn at
the current state, each on its own random minibatch of the training batch size and its own weight noise, from the
generator ``default_rng([seed, SNR, t])``: a stream of its own, so recording the SNR leaves the run bit for bit as
it would be without it. Their per-parameter ratios are averaged per weight matrix (``slangcli.methods.reparam.snr``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from slangcli.errors import DivergenceError
from slangcli.gaussian.posteriors import MAX_ABS_LOG_SIGMA, MAX_ABS_VALUE
from slangcli.methods.base import Problem, describe
from slangcli.methods.reparam import snr
from slangcli.streams import INIT, SNR, STEP, Minibatches, derive_rng


@dataclass
class History:
    """Per-epoch record: the mean minibatch NLL per example (over the epoch's steps and weight samples), and the
    KL divergence of the posterior to the prior per example at the epoch's end (the two make the epoch's -ELBO / N).

    A run that ends mid-epoch records that epoch as a last, partial entry. When asked, also the gradient SNR of the
    standard-deviation parameters at steps ``snr_step``, one value per weight matrix (``snr``, ``snr_paper``).
    """

    epoch: list = field(default_factory=list)
    step: list = field(default_factory=list)
    nll: list = field(default_factory=list)
    seconds: list = field(default_factory=list)
    # KL(q || p) / N of the posterior at the end of each epoch: with nll, the epoch's -ELBO / N
    kl: list = field(default_factory=list)
    # the epoch in progress: running sum and count of step losses, and its seconds so far, so that a run stopped
    # mid-epoch and resumed records the same history as one never stopped
    open_sum: float = 0.0
    open_count: int = 0
    open_seconds: float = 0.0
    snr_step: list = field(default_factory=list)
    snr: list = field(default_factory=list)  # per record, (n_layers,) |E g| / std g
    snr_paper: list = field(default_factory=list)  # per record, (n_layers,) E[g^2] / Var[g^2]

    def reopen(self, t: int) -> None:
        """Continue at step ``t`` the epoch a run that stopped there recorded as partial (its running sums are
        kept), instead of recording it twice."""
        if self.open_count and self.step and self.step[-1] == t:
            for column in (self.epoch, self.step, self.nll, self.seconds):
                column.pop()
            if len(self.kl) > len(self.epoch):  # (checkpoints written before kl was recorded have none)
                self.kl.pop()

    def add_step(self, nll: float, seconds: float) -> None:
        self.open_sum += nll
        self.open_count += 1
        self.open_seconds += seconds

    def close_epoch(self, epoch: int, t: int, kl: Callable[[], float] | None, complete: bool) -> None:
        """Record the epoch ``epoch`` (0-based) as it stands after step ``t``: its mean loss and seconds, and
        ``kl()`` unless a resumed checkpoint lacks the earlier epochs' (``kl`` None: not recorded); a ``complete``
        epoch starts the next one's sums."""
        self.epoch.append(epoch + 1)
        self.step.append(t)
        self.nll.append(self.open_sum / self.open_count)
        self.seconds.append(self.open_seconds)
        if kl is not None and len(self.kl) == len(self.epoch) - 1:
            self.kl.append(kl())
        if complete:
            self.open_sum, self.open_count, self.open_seconds = 0.0, 0, 0.0

    def as_arrays(self) -> dict[str, np.ndarray]:
        out = {
            "epoch": np.asarray(self.epoch, dtype=np.int64),
            "step": np.asarray(self.step, dtype=np.int64),
            "nll": np.asarray(self.nll, dtype=float),
            "seconds": np.asarray(self.seconds, dtype=float),
        }
        if self.kl:
            out["kl"] = np.asarray(self.kl, dtype=float)
        if self.snr_step:
            out["snr_step"] = np.asarray(self.snr_step, dtype=np.int64)
            out["snr"] = np.asarray(self.snr, dtype=float)
            out["snr_paper"] = np.asarray(self.snr_paper, dtype=float)
        return out


def gradient_snr(method, hyper, problem: Problem, X: np.ndarray, y: np.ndarray, state, *, seed: int, batch_size: int,
                 draws: int, kl: float | None = None) -> tuple[list[float], list[float]]:
    """``(snr, snr_paper)`` per weight matrix at ``state``, from ``draws`` independent gradients of its
    standard-deviation parameters (the method's ``std_gradients``), each on a fresh minibatch drawn without replacement
    and fresh weight noise, all from the SNR stream of step ``state.t``. ``kl`` overrides the step's KL weight
    (0: the expected log-likelihood's gradient alone)."""
    rng = derive_rng(seed, SNR, state.t)
    n = problem.n_data
    batch = min(batch_size, n)
    std_gradients = describe(method).std_gradients
    samples = []
    for _ in range(draws):
        idx = rng.choice(n, size=batch, replace=False)
        samples.append(std_gradients(rng, state, problem, X[idx], y[idx], hyper, kl))
    ratios = [snr(np.stack([g[l] for g in samples])) for l in range(len(samples[0]))]
    return [r[0] for r in ratios], [r[1] for r in ratios]


def _diverged(step: int, epoch: int, what: str) -> str:
    return (f"training diverged at step {step} (epoch {epoch + 1}): {what}; "
            "try a smaller --lr or --beta, or a larger --prior-precision")


# a step's loss this many times its first epoch's mean (at least 1 nat) is a divergence, finite or not: at --lr 1e8
# a fit's loss grew 1e27-fold an epoch and its mean reached 1e71, still below MAX_ABS_VALUE, and the fit ended with
# exit 0 and a warning that blamed its length. No fit that converges rises a millionfold above its first epoch.
LOSS_GROWTH = 1e6


def _check_growth(nll: float, history: History, step: int, epoch: int) -> None:
    """Refuse a loss :data:`LOSS_GROWTH` times the first epoch's mean (the first epoch's: recorded in the run, so
    that a resumed fit checks what the uninterrupted one does)."""
    if epoch and history.nll and nll > LOSS_GROWTH * max(abs(history.nll[0]), 1.0):
        raise DivergenceError(_diverged(step, epoch, f"the loss rose to {nll:.3g} per example, from "
                                                     f"{history.nll[0]:.3g} in the first epoch"))


def _check_finite(names: tuple, state, step: int, epoch: int) -> None:
    """O(D) per step: the state arrays ``names`` the method declares (its ``finite_fields``): the mean and the
    diagonal precision (a non-finite U reaches d through its correction), or the log standard deviations (Bayes by
    Backprop) or log scales (k-tied). A non-finite dense precision fails its Cholesky factorisation, which is
    reported as a failed linear-algebra routine. Values a run file may not hold (``slangcli.runfile.io``) are a
    divergence too, so that no checkpoint or run is written that slang could not read back: beyond
    ``MAX_ABS_VALUE`` in magnitude, a log standard deviation beyond ``MAX_ABS_LOG_SIGMA`` (its square's exponential
    must stay finite) or a k-tied log scale beyond half of it (two of them make a standard deviation), a diagonal
    precision ``d`` below ``1 / MAX_ABS_VALUE``."""
    for name in names:
        value = getattr(state, name, None)
        if value is None:
            continue
        # (a k-tied layer's standard deviations are products of two scales, exp(log U + log V): half the bound each)
        bound = (MAX_ABS_LOG_SIGMA / 2 if name == "log_scale" else MAX_ABS_LOG_SIGMA if name.startswith("log")
                 else MAX_ABS_VALUE)
        # one reduction per array (NaN makes the maximum NaN, which fails the test); compared as a Python float, since
        # a float32 state would turn the bound into infinity
        if float(np.abs(value).max(initial=0.0)) <= bound:
            if name == "d" and value.size and not float(value.min()) >= 1.0 / MAX_ABS_VALUE:
                raise DivergenceError(_diverged(step, epoch, f"a precision below {1.0 / MAX_ABS_VALUE:g} ({name})"))
            continue
        if not np.isfinite(value).all():
            raise DivergenceError(_diverged(step, epoch, f"non-finite parameters ({name})"))
        raise DivergenceError(_diverged(step, epoch, f"parameters beyond {bound:g} in magnitude ({name})"))


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
    snr_every: int = 0,
    snr_draws: int = 10,
    learner=None,
):
    """Run ``method`` from ``state`` (or a fresh ``method.init``) until ``n_steps`` steps in total.

    With ``snr_every > 0`` the gradient SNR is recorded after every step whose count ``t`` is a multiple of it
    (:func:`gradient_snr`). ``after_step(state, history)`` is called after every step (checkpoints are written
    from it); returning True stops the run there. Returns ``(state, history)``, with ``state.t < n_steps`` when
    stopped early. Raises ``DivergenceError`` on a non-finite loss or state (before ``after_step`` sees it).

    With a ``learner`` (``slangcli.training.learned.Learner``) each step uses the learner's current problem (its learned
    noise and prior precisions) and the learner updates them after the step, before ``after_step`` sees it; once
    the last step is done, a learned noise precision takes its optimum at the final posterior (``learner.finish``).
    """
    if state is None:
        state = method.init(derive_rng(seed, INIT), problem, hyper)
    history = history if history is not None else History()
    if state.t < n_steps:  # (at the last step, a trained fit resumed to be scored: its last epoch stays recorded)
        history.reopen(state.t)
    n = problem.n_data
    batches = Minibatches(seed, n, batch_size)
    spe = batches.per_epoch
    finite_fields = describe(method).finite_fields
    last = time.perf_counter()
    # overflow and invalid operations are detected below, from the values, with a message naming the step
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        while state.t < n_steps:
            t = state.t
            epoch, j, idx = batches(t)
            if learner is not None:
                problem = learner.problem
            try:
                state, info = method.step(derive_rng(seed, STEP, t), state, problem, X[idx], y[idx], hyper)
            except np.linalg.LinAlgError:
                raise DivergenceError(_diverged(t + 1, epoch, "a linear-algebra routine failed")) from None
            if not np.isfinite(info["nll"]):
                raise DivergenceError(_diverged(t + 1, epoch, "the loss is not finite"))
            _check_finite(finite_fields, state, t + 1, epoch)
            _check_growth(info["nll"], history, t + 1, epoch)
            if learner is not None:
                learner.after_step(method, state, info, epoch_end=j == spe - 1,
                                   record=j == spe - 1 or state.t == n_steps)
                problem = learner.problem
            now = time.perf_counter()
            history.add_step(info["nll"], now - last)
            last = now
            if snr_every and state.t % snr_every == 0:
                ratio, paper = gradient_snr(method, hyper, problem, X, y, state, seed=seed, batch_size=batch_size,
                                            draws=snr_draws)
                history.snr_step.append(state.t)
                history.snr.append(ratio)
                history.snr_paper.append(paper)
                last = time.perf_counter()  # the epoch's seconds are training time, without the SNR's draws
            if j == spe - 1 or state.t == n_steps:
                history.close_epoch(epoch, state.t, lambda: method.posterior(state).kl_to_prior(
                    problem.prior_precision) / n, complete=j == spe - 1)
                last = time.perf_counter()  # the epoch's seconds are training time, without the KL
            if progress is not None:
                progress(state.t, n_steps)
            if after_step is not None and after_step(state, history):
                break
    if learner is not None and state.t == n_steps:
        learner.finish(method.posterior(state), X, y, seed)
    return state, history
