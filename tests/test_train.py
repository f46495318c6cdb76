"""The training loop (``slangcli.training.loop``): reproducibility, resumption, epochs and minibatches, divergence, and
recovery of a posterior known in closed form."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np
import pytest

from slangcli import streams
from slangcli.errors import DivergenceError
from slangcli.methods import slang
from slangcli.methods.base import Problem
from slangcli.models import MLP
from slangcli.training import loop as train

STATE_ARRAYS = ("mu", "U", "d", "m")


# ---------------------------------------------------------------------------------------------------- helpers
def _logistic(n: int = 30, n_features: int = 3, hidden: tuple[int, ...] = (), seed: int = 0, activation="tanh"):
    rng = np.random.default_rng(seed)
    model = MLP((n_features, *hidden, 1), activation, "bernoulli")
    X = rng.standard_normal((n, n_features))
    y = (X[:, 0] + 0.5 * rng.standard_normal(n) > 0).astype(float)
    return Problem(model, model.prior_precision(1.0, 0.1), n), X, y


HYPER = slang.Hyper(rank=2, samples=3, lr=0.1, beta=0.1)


def _run(problem, X, y, *, seed=7, batch_size=6, n_steps=10, hyper=HYPER, **kw):
    return train.run(slang, hyper, problem, X, y, seed=seed, batch_size=batch_size, n_steps=n_steps, **kw)


def _assert_same_state(a, b):
    for name in STATE_ARRAYS:
        assert np.array_equal(getattr(a, name), getattr(b, name)), f"{name} differs"
    assert a.t == b.t


def _history_without_time(h: train.History):
    return h.epoch, h.step, h.nll


# ------------------------------------------------------------------------------------------ reproducibility
def test_same_seed_gives_identical_bits():
    """Two runs with the same seed produce bit-identical states and histories."""
    problem, X, y = _logistic(hidden=(4,))
    s1, h1 = _run(problem, X, y)
    s2, h2 = _run(problem, X, y)
    _assert_same_state(s1, s2)
    assert _history_without_time(h1) == _history_without_time(h2)


def test_different_seeds_differ():
    """Changing the seed changes the initial mean, the minibatch order and the weight samples."""
    problem, X, y = _logistic(hidden=(4,))
    s1, _ = _run(problem, X, y, seed=7)
    s2, _ = _run(problem, X, y, seed=8)
    assert not np.allclose(s1.mu, s2.mu, rtol=1e-3, atol=1e-6)
    assert not np.allclose(s1.d, s2.d, rtol=1e-3, atol=1e-6)


def test_resume_at_epoch_boundary_equals_uninterrupted_run():
    """10 steps == 5 steps, then 5 more from the returned state and history (N = 30, M = 6: 5 steps per epoch),
    bit for bit in the state and in the recorded epochs, steps and losses."""
    problem, X, y = _logistic(hidden=(4,))
    full_state, full_hist = _run(problem, X, y, n_steps=10)
    state, hist = _run(problem, X, y, n_steps=5)
    state, hist = _run(problem, X, y, n_steps=10, state=state, history=hist)
    _assert_same_state(state, full_state)
    assert _history_without_time(hist) == _history_without_time(full_hist)


def test_resume_mid_epoch_reproduces_the_state():
    """Stopping mid-epoch (N = 30, M = 8: 4 steps per epoch; stop after 5) and resuming gives the same state bits:
    the minibatch order and each step's generator are derived from (seed, epoch) and (seed, step)."""
    problem, X, y = _logistic(hidden=(4,))
    full_state, _ = _run(problem, X, y, batch_size=8, n_steps=10)
    state, hist = _run(problem, X, y, batch_size=8, n_steps=5)
    state, hist = _run(problem, X, y, batch_size=8, n_steps=10, state=state, history=hist)
    _assert_same_state(state, full_state)


def test_resume_mid_epoch_reproduces_the_history():
    """A resumed run reproduces an uninterrupted one (STYLE.md), history included: stopping after 5 steps of
    4-step epochs and resuming to 10 must record epochs [1, 2, 3] at steps [4, 8, 10], as the uninterrupted run
    does, with the same per-epoch losses."""
    problem, X, y = _logistic(hidden=(4,))
    _, full_hist = _run(problem, X, y, batch_size=8, n_steps=10)
    state, hist = _run(problem, X, y, batch_size=8, n_steps=5)
    _, hist = _run(problem, X, y, batch_size=8, n_steps=10, state=state, history=hist)
    assert (full_hist.epoch, full_hist.step) == ([1, 2, 3], [4, 8, 10])
    assert _history_without_time(hist) == _history_without_time(full_hist)


class _Recorder:
    """A step method that learns nothing and records what the loop gives it: the rows of each minibatch (the
    examples' ids are the first feature) and one draw of the step's generator. Its loss is the minibatch's size,
    so an epoch's loss, the mean of its steps' losses, is known without replaying the loop."""

    from dataclasses import dataclass as _dataclass

    @_dataclass(frozen=True)
    class Hyper:
        pass

    class State(NamedTuple):
        t: int
        rows: tuple
        draws: tuple

    @staticmethod
    def init(rng, problem, hyper):
        return _Recorder.State(0, (), (float(rng.random()),))

    @staticmethod
    def step(rng, state, problem, X, y, hyper):
        rows = state.rows + (tuple(int(v) for v in X[:, 0]),)
        return state._replace(t=state.t + 1, rows=rows, draws=state.draws + (float(rng.random()),)), \
            {"nll": float(len(X)), "kl": 0.0}

    @staticmethod
    def posterior(state):  # (the loop records the KL to the prior once an epoch)
        return SimpleNamespace(kl_to_prior=lambda prior_precision: 0.0)

    finite_fields = ()


def _recorded(n=25, batch_size=10, n_steps=8, seed=5):
    ids = np.arange(n, dtype=float)[:, None]
    problem = Problem(MLP((1, 1), "tanh", "bernoulli"), np.ones(2), n)
    return train.run(_Recorder, _Recorder.Hyper(), problem, ids, np.zeros(n), seed=seed, batch_size=batch_size,
                     n_steps=n_steps)


def test_each_epoch_visits_every_example_once_in_a_new_order():
    """N = 25, M = 10: each epoch's minibatches (10, 10, 5 rows) partition the examples, and the next epoch visits
    them in another order."""
    state, _ = _recorded(n_steps=9)
    assert [len(rows) for rows in state.rows] == [10, 10, 5] * 3
    epochs = [sum(state.rows[3 * e:3 * e + 3], ()) for e in range(3)]
    for visit in epochs:
        assert sorted(visit) == list(range(25))
    assert len(set(epochs)) == 3


def test_every_step_and_every_seed_gets_its_own_random_stream():
    """The initialisation and each step draw from generators of their own: no two draws of a run coincide, a run
    is the same draw for draw under the same seed, and another seed changes every draw and the minibatch order."""
    a, _ = _recorded(seed=5)
    again, _ = _recorded(seed=5)
    other, _ = _recorded(seed=6)
    assert a.draws == again.draws and a.rows == again.rows
    assert len(set(a.draws)) == len(a.draws)
    assert not set(a.draws) & set(other.draws)
    assert a.rows != other.rows


def test_a_step_sees_the_same_stream_when_the_loop_is_resumed():
    """Stopping after 5 steps and continuing gives the draws and minibatches of the run never stopped: a step's
    randomness depends on the seed and the step alone."""
    whole, _ = _recorded(n_steps=8)
    first, history = _recorded(n_steps=5)
    ids = np.arange(25, dtype=float)[:, None]
    problem = Problem(MLP((1, 1), "tanh", "bernoulli"), np.ones(2), 25)
    resumed, _ = train.run(_Recorder, _Recorder.Hyper(), problem, ids, np.zeros(25), seed=5, batch_size=10,
                           n_steps=8, state=first, history=history)
    assert resumed.draws == whole.draws and resumed.rows == whole.rows


# --------------------------------------------------------------------------------------- epochs and batches
def test_history_has_one_entry_per_epoch_including_a_partial_last_one():
    """N = 25, M = 10: 3 steps per epoch (10, 10, 5 examples). 8 steps record epochs 1, 2 at steps 3, 6 and the
    partial epoch 3 at step 8; each loss is the mean of that epoch's minibatch losses."""
    problem, X, y = _logistic(n=25)
    seed, M = 5, 10
    state, hist = _run(problem, X, y, seed=seed, batch_size=M, n_steps=8)
    assert state.t == 8
    assert hist.epoch == [1, 2, 3]
    assert hist.step == [3, 6, 8]
    assert len(hist.nll) == len(hist.seconds) == 3
    # each loss is the mean of that epoch's minibatch losses: the recorder's loss is the minibatch's size
    _, recorded = _recorded(n=25, batch_size=M, n_steps=8, seed=seed)
    assert recorded.nll == [np.mean([10, 10, 5]), np.mean([10, 10, 5]), np.mean([10, 10])]
    arrays = hist.as_arrays()
    assert arrays["epoch"].dtype == np.int64 and arrays["nll"].dtype == float


def test_batch_indices_cover_each_example_once_per_epoch():
    """Within an epoch the minibatches partition {0, ..., N-1} (sizes M, ..., M, N mod M); epochs reshuffle."""
    N, M, seed = 23, 5, 11
    spe = streams.steps_per_epoch(N, M)
    assert spe == 5
    orders = []
    for epoch in range(3):
        batches = [streams.batch_indices(seed, epoch * spe + j, N, M) for j in range(spe)]
        assert [len(b) for b in batches] == [5, 5, 5, 5, 3]
        order = np.concatenate(batches)
        np.testing.assert_array_equal(np.sort(order), np.arange(N))
        orders.append(order)
    assert not np.array_equal(orders[0], orders[1])


# ---------------------------------------------------------------------------------------------- divergence
# pytest turns RuntimeWarning into errors (setup.cfg); the overflow warnings on the way to divergence are not
# what these tests are about, so they are silenced and only the exception type and message are checked.


def _diverging_step(exc: pytest.ExceptionInfo) -> int:
    match = re.search(r"at step (\d+)", str(exc.value))
    assert match, f"message does not name the step: {exc.value}"
    return int(match.group(1))


def test_absurd_learning_rate_raises_divergence_naming_the_step_mlp():
    """lr = 1e6 on a small Gaussian-likelihood MLP: ``DivergenceError`` naming step k, and the same run stopped
    at k - 1 is still finite (so k is the first bad step)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 3))
    model = MLP((3, 8, 1), "tanh", "gaussian", noise_precision=2.5)
    problem = Problem(model, model.prior_precision(1.0, 1.0), 40)
    hyper = slang.Hyper(rank=1, samples=2, lr=1e6, beta=0.5, decay=0.0)
    kw = dict(seed=1, batch_size=10, hyper=hyper)
    with np.errstate(all="ignore"):
        with pytest.raises(DivergenceError, match=r"diverged at step \d+") as exc:
            _run(problem, X, X[:, 0], n_steps=200, **kw)
        k = _diverging_step(exc)
        try:
            state, _ = _run(problem, X, X[:, 0], n_steps=k - 1, **kw)
        except DivergenceError as early:
            pytest.fail(f"the run reported step {k} ({exc.value}), but stopping at step {k - 1} already fails: {early}")
    assert all(np.isfinite(getattr(state, name)).all() for name in STATE_ARRAYS)


def test_absurd_learning_rate_raises_divergence_logistic():
    """lr = 1e6 on logistic regression also ends in ``DivergenceError``, not in an exception from the linear
    algebra."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 3))
    y = (X[:, 0] > 0).astype(float)
    model = MLP((3, 1), "tanh", "bernoulli")
    problem = Problem(model, model.prior_precision(1.0, 1.0), 40)
    hyper = slang.Hyper(rank=1, samples=2, lr=1e6, beta=0.5, decay=0.0)
    with np.errstate(all="ignore"):
        with pytest.raises(DivergenceError, match=r"diverged at step \d+"):
            _run(problem, X, y, seed=1, batch_size=10, n_steps=200, hyper=hyper)


@pytest.mark.parametrize("hidden", [(), (8,)], ids=["linear", "relu-mlp"])
def test_huge_inputs_raise_divergence_at_step_one(hidden):
    """Finite but huge features (1e200) overflow the empirical Fisher (entries ~ 1e400) at the first step, so
    the state is non-finite after step 1: ``DivergenceError`` naming step 1. (ReLU passes the scale through;
    a saturating tanh would not, and is not expected to diverge.)"""
    problem, X, y = _logistic(n=40, hidden=hidden, activation="relu")
    with np.errstate(all="ignore"):
        with pytest.raises(DivergenceError, match=r"diverged at step \d+") as exc:
            _run(problem, 1e200 * X, y, seed=1, batch_size=10, n_steps=20, hyper=slang.Hyper(rank=1, samples=2))
    assert _diverging_step(exc) == 1


# ------------------------------------------------------------------------------------------------ recovery
def test_full_rank_slang_recovers_bayesian_linear_regression():
    """Bayesian linear regression, y = x~^T w + noise of known precision tau, prior N(0, diag(lambda)^{-1}):
    the posterior is N(m, P^{-1}) with ``P = tau X~^T X~ + diag(lambda)`` and ``m = P^{-1} tau X~^T y``.

    The NLL gradient is linear in the weights, so ``E_q[grad]`` is the gradient at the mean and the mean update's
    fixed point is exactly m: SLANG (L = D, constant rates, decay 0 so alpha = lr / 2) must find m within a few
    percent (and within 2 posterior standard deviations; what is left is minibatch and sampling noise).

    The precision is another matter. SLANG's curvature is the empirical Fisher
    ``sum_i g_i g_i^T = tau^2 sum_i r_i^2 x~_i x~_i^T`` (r_i the residual at a weight sample), not the Hessian
    ``tau sum_i x~_i x~_i^T``. They agree only insofar as ``tau r_i^2`` averages to 1; at the posterior
    ``E[tau r_i^2] = tau (true noise + x~_i^T Sigma x~_i)`` is close to but not exactly 1, and it depends on the
    noise realised at each example. So the precision is only checked to be the right size: every eigenvalue of
    ``P^{-1} P_SLANG`` within a factor of 3. (Early on, while the mean is far off, the large residuals inflate
    the EF many-fold and slow the mean down; hence the moderate rate and 600 steps.)
    """
    rng = np.random.default_rng(0)
    N, tau = 200, 4.0
    X = rng.standard_normal((N, 3))
    y = X @ np.array([1.0, -2.0, 1.5]) + 1.0 + rng.standard_normal(N) / np.sqrt(tau)
    model = MLP((3, 1), "tanh", "gaussian", noise_precision=tau)
    lam = model.prior_precision(1.0, 1.0)
    problem = Problem(model, lam, N)
    Xt = np.hstack([X, np.ones((N, 1))])  # the layout puts W (3 entries) before b, as in X~ = (x, 1)
    P = tau * Xt.T @ Xt + np.diag(lam)
    m = np.linalg.solve(P, tau * Xt.T @ y)
    sd = np.sqrt(np.diag(np.linalg.inv(P)))

    hyper = slang.Hyper(rank=4, samples=4, lr=0.4, beta=0.2, decay=0.0)
    state, _ = _run(problem, X, y, seed=2, batch_size=20, n_steps=600, hyper=hyper)

    rel = np.abs(state.mu - m).max() / np.abs(m).max()
    assert rel < 0.03, f"mean {state.mu} vs exact {m}: relative error {rel:.3g}"
    np.testing.assert_allclose(state.mu, m, rtol=0, atol=2 * sd.max())
    ratio = np.linalg.eigvals(np.linalg.solve(P, state.U @ state.U.T + np.diag(state.d))).real
    assert np.all((ratio > 1 / 3) & (ratio < 3)), f"eigenvalues of P^-1 P_slang: {ratio}"
