"""IVON (``slangcli.methods.ivon``).

- One update against a reference written here in the published form (per-example Hessian estimate ``h``, weight
  decay ``delta = lambda / N``, ``ess = N``, mean minibatch gradients from the logistic-regression formula), over
  two steps so that momentum, debiasing, the Riemannian correction, the rate rescaling and clipping all act.
- Recovery: for Bayesian linear regression the mean-field optimum is known in closed form (mean ``mu*``, the
  exact posterior mean, and precisions ``P_jj`` with ``P = tau X~^T X~ + diag(lambda)``). IVON's fixed point is
  that optimum: the price estimate is unbiased for the (constant) Hessian, so ``d -> diag(P)``, and the expected
  mean gradient at ``mu`` vanishes only at ``mu*``.
- The Riemannian correction keeps the precision positive whatever the estimate; hyperparameters are validated.
- ``--dtype float32`` (network and state in single precision) follows the float64 trajectory to single-precision
  rounding, and its posterior is float64.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from slangcli import streams
from slangcli.errors import ConfigError
from slangcli.gaussian.posteriors import DiagonalGaussian
from slangcli.methods import METHODS, ivon
from slangcli.methods.base import Problem
from slangcli.models import MLP


def _reference_step(mean, hess, mom, t, eps, X, y, lam, n, hyper, tau=None):
    """One step of the published algorithm: ``(mean, hess, mom)`` of a linear logistic regression (or, given the
    noise precision ``tau``, a linear Gaussian regression) whose parameters are the weights followed by the bias;
    ``lam`` the per-parameter prior precision."""
    wd = lam / n
    sigma = 1.0 / np.sqrt(n * (hess + wd))
    Xb = np.hstack([X, np.ones((X.shape[0], 1))])
    grads, nxgs = [], []
    for e in eps:
        theta = mean + sigma * e
        residual = 1.0 / (1.0 + np.exp(-(Xb @ theta))) - y if tau is None else tau * (Xb @ theta - y)
        g = Xb.T @ residual / X.shape[0]  # gradient of the mean NLL over the minibatch
        grads.append(g)
        nxgs.append(sigma * e * g)
    avg_grad, avg_nxg = np.mean(grads, 0), np.mean(nxgs, 0)
    f = avg_nxg * (hess + wd) * n
    b1, b2 = hyper.beta1, hyper.beta2
    new_hess = b2 * hess + (1 - b2) * f + 0.5 * (1 - b2) ** 2 * (hess - f) ** 2 / (hess + wd)
    new_mom = b1 * mom + (1 - b1) * avg_grad
    step = (new_mom / (1 - b1**t) + wd * mean) / (new_hess + wd)
    n_clipped = 0
    if hyper.clip_radius is not None:
        n_clipped = int(np.sum(np.abs(step) > hyper.clip_radius))
        step = np.clip(step, -hyper.clip_radius, hyper.clip_radius)
    new_mean = mean - hyper.lr * (hyper.hess_init + wd) * step
    return new_mean, new_hess, new_mom, n_clipped


def test_two_updates_equal_the_published_algorithm():
    rng = np.random.default_rng(0)
    N, M, P = 40, 10, 4
    X = rng.standard_normal((N, P))
    y = (rng.random(N) < 0.5).astype(float)
    model = MLP((P, 1), likelihood="bernoulli")
    problem = Problem(model, model.prior_precision(2.0, 0.1), N)
    lam = problem.prior_precision
    # a fast Hessian average so that the estimate visibly moves the precision; a radius that clips some entries
    hyper = ivon.Hyper(samples=3, lr=0.3, beta1=0.8, beta2=0.7, hess_init=0.5, clip_radius=0.2, dtype="float64")
    state = ivon.init(np.random.default_rng(1), problem, hyper)
    np.testing.assert_allclose(state.d, N * 0.5 + lam, rtol=1e-15)
    mean, hess, mom = state.mu.copy(), np.full(P + 1, 0.5), np.zeros(P + 1)
    clipped = 0
    for t in (1, 2):
        idx = rng.choice(N, M, replace=False)
        eps = rng.standard_normal((3, P + 1))
        state, info = ivon.update(state, eps, problem, X[idx], y[idx], hyper)
        wd = lam / N
        mean, hess, mom, n_clipped = _reference_step(mean, hess, mom, t, eps, X[idx], y[idx], lam, N, hyper)
        clipped += n_clipped
        assert state.t == t and np.isfinite(info["nll"])
        np.testing.assert_allclose(state.mu, mean, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(state.d, N * (hess + wd), rtol=1e-12)
        np.testing.assert_allclose(state.m, N * mom, rtol=1e-12, atol=1e-14)
    assert 0 < clipped < 2 * (P + 1), clipped  # both branches of the clipping were exercised
    assert not np.allclose(state.d, N * 0.5 + lam, rtol=1e-3)  # the estimate moved the precision


def test_noise_precision_divides_the_published_rate():
    """At noise precision tau the update is the published one at rate ``lr / tau`` and clipping radius
    ``r * tau``; when a learned tau moves (4 -> 2.5 -> 10), the gradient momentum is rescaled with it (the Hessian
    estimate is not) and the next step is the published one at the new rate. At tau = 1 nothing changes (the test
    above)."""
    rng = np.random.default_rng(8)
    N, M, P = 40, 10, 3
    X = rng.standard_normal((N, P))
    y = X @ np.array([0.5, -1.0, 2.0]) + 0.1 * rng.standard_normal(N)
    hyper = ivon.Hyper(samples=2, lr=0.2, beta1=0.8, beta2=0.7, hess_init=0.5, clip_radius=0.5, dtype="float64")
    taus = (4.0, 4.0, 2.5, 10.0)

    def problem_at(tau):
        model = MLP((P, 1), likelihood="gaussian", noise_precision=tau)
        return Problem(model, model.prior_precision(2.0, 0.1), N)

    state = ivon.init(np.random.default_rng(1), problem_at(taus[0]), hyper)
    lam = problem_at(1.0).prior_precision
    np.testing.assert_allclose(state.d, N * 0.5 + lam, rtol=1e-15)
    mean, hess, mom, before = state.mu.copy(), np.full(P + 1, 0.5), np.zeros(P + 1), taus[0]
    clipped = 0
    for t, tau in enumerate(taus, start=1):
        mom = mom * (tau / before)
        idx = rng.choice(N, M, replace=False)
        eps = rng.standard_normal((2, P + 1))
        state, _ = ivon.update(state, eps, problem_at(tau), X[idx], y[idx], hyper)
        published = ivon.Hyper(samples=2, lr=0.2 / tau, beta1=0.8, beta2=0.7, hess_init=0.5, clip_radius=0.5 * tau,
                               dtype="float64")
        mean, hess, mom, n_clipped = _reference_step(mean, hess, mom, t, eps, X[idx], y[idx], lam, N, published,
                                                     tau=tau)
        clipped += n_clipped
        np.testing.assert_allclose(state.mu, mean, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(state.d, N * (hess + lam / N), rtol=1e-12)
        np.testing.assert_allclose(state.m, N * mom, rtol=1e-12, atol=1e-14)
        assert state.tau == tau
        before = tau
    assert 0 < clipped < len(taus) * (P + 1), clipped  # both branches of the clipping were exercised
    # negative control: the published algorithm at tau = 4 at the rate as given moves the mean 4x as far in its
    # first step
    unclipped = dataclasses.replace(hyper, clip_radius=None)
    init = ivon.init(np.random.default_rng(1), problem_at(4.0), unclipped)
    scaled, _ = ivon.update(init, eps, problem_at(4.0), X[idx], y[idx], unclipped)
    plain = _reference_step(init.mu, np.full(P + 1, 0.5), np.zeros(P + 1), 1, eps, X[idx], y[idx], lam, N,
                            unclipped, tau=4.0)[0]
    assert np.abs(plain - init.mu).max() > 3 * np.abs(scaled.mu - init.mu).max()


def test_step_draws_its_noise_and_posterior_is_the_diagonal_precision():
    model = MLP((3, 4, 1), "tanh", "bernoulli")
    rng = np.random.default_rng(2)
    X, y = rng.standard_normal((8, 3)), (rng.random(8) < 0.5).astype(float)
    problem = Problem(model, model.prior_precision(1.0, 1e-5), 8)
    hyper = ivon.Hyper()
    state = ivon.init(np.random.default_rng(0), problem, hyper)
    a, _ = ivon.step(np.random.default_rng(3), state, problem, X, y, hyper)
    b, _ = ivon.step(np.random.default_rng(3), state, problem, X, y, hyper)
    for x, z in zip(a, b):
        np.testing.assert_array_equal(x, z)
    post = ivon.posterior(a)
    assert isinstance(post, DiagonalGaussian) and post.kind == "diagonal"
    assert a.d.dtype == np.float32 and post.log_sigma.dtype == np.float64  # float32 by default, as the reference
    np.testing.assert_allclose(post.marginal_variances(), 1.0 / a.d.astype(float), rtol=1e-14)
    assert METHODS["ivon"] is ivon


def test_riemannian_correction_keeps_the_precision_positive():
    """A strongly negative curvature estimate (a concave likelihood in one direction) with beta2 = 0 would make
    ``beta2 d + (1 - beta2) dhat`` negative; the correction keeps ``d`` positive: ``d'/d = 1 - z + z^2 / 2`` with
    ``z = (1 - beta2)(1 - dhat / d)``."""
    rng = np.random.default_rng(5)
    model = MLP((2, 1), likelihood="gaussian", noise_precision=1.0)
    problem = Problem(model, model.prior_precision(1.0, 1.0), 4)
    state = ivon.init(rng, problem, ivon.Hyper())
    for b2 in (0.0, 0.5, 0.99):
        hyper = ivon.Hyper(beta2=b2)
        for _ in range(50):
            X, y = rng.standard_normal((4, 2)) * 10, rng.standard_normal(4) * 100
            s, _ = ivon.update(state, rng.standard_normal((1, 3)) * 5, problem, X, y, hyper)
            assert np.all(s.d > 0)


N, P, TAU = 200, 3, 4.0


def _linear_regression(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, P))
    y = X @ np.array([1.0, -0.5, 0.3]) + 0.2 + rng.standard_normal(N) / np.sqrt(TAU)
    model = MLP((P, 1), likelihood="gaussian", noise_precision=TAU)
    problem = Problem(model, model.prior_precision(1.0, 0.5), N)
    Xb = np.hstack([X, np.ones((N, 1))])
    prec = TAU * Xb.T @ Xb + np.diag(problem.prior_precision)
    mu_star = np.linalg.solve(prec, TAU * Xb.T @ y)
    return problem, X, y, mu_star, np.diag(prec)


def test_recovers_the_exact_mean_field_posterior_of_linear_regression():
    """Full batch, S = 16, beta2 = 0.995 (the published 0.99999 averages over 1e5 steps), 4000 steps from ``init``
    (``h_0 = 1``, so ``d`` starts at ``N + lambda``, 3-5x off); the average of the last 2000 iterates has its mean
    within 0.05 posterior standard deviations of ``mu*`` and its log precision within 0.03 of ``log P_jj``
    (measured: below 0.008 and 0.013)."""
    problem, X, y, mu_star, prec_diag = _linear_regression(seed=3)
    hyper = ivon.Hyper(samples=16, lr=0.1, beta2=0.995, dtype="float64")
    state = ivon.init(np.random.default_rng(4), problem, hyper)
    assert np.abs(np.log(state.d) - np.log(prec_diag)).min() > 0.9  # negative control: far off at the start
    mu_sum, logd_sum, n_avg = 0.0, 0.0, 2000
    for t in range(4000):
        state, _ = ivon.step(streams.derive_rng(5, streams.STEP, t), state, problem, X, y, hyper)
        if t >= 4000 - n_avg:
            mu_sum, logd_sum = mu_sum + state.mu, logd_sum + np.log(state.d)
    np.testing.assert_allclose((mu_sum / n_avg - mu_star) * np.sqrt(prec_diag), 0.0, rtol=0, atol=0.05)
    np.testing.assert_allclose(logd_sum / n_avg, np.log(prec_diag), rtol=0, atol=0.03)


@pytest.mark.parametrize("samples", [1, 2])
def test_float32_follows_the_float64_trajectory_to_single_precision(samples):
    """Fed the same noise and minibatches for 40 steps (tanh, so that no unit sits on a kink that rounding could
    flip; a fast Hessian average so that the precision moves), the float32 state stays within 1e-5 of the float64
    one relative to each array's largest entry (measured: below 1e-6): single-precision rounding (6e-8 per
    operation) accumulated over the steps. The state is float32 throughout; the posterior is float64."""
    rng = np.random.default_rng(11)
    N, M, P = 64, 16, 5
    X = rng.standard_normal((N, P))
    y = (X[:, 0] - X[:, 1] + 0.5 * rng.standard_normal(N) > 0).astype(float)
    model = MLP((P, 8, 1), "tanh", "bernoulli")
    problem = Problem(model, model.prior_precision(1.0, 1e-5), N)
    hyper = {"samples": samples, "lr": 0.1, "beta2": 0.9}
    states = {dt: ivon.init(np.random.default_rng(0), problem, ivon.Hyper(**hyper, dtype=dt))
              for dt in ("float64", "float32")}
    for _ in range(40):
        idx = rng.choice(N, M, replace=False)
        eps = rng.standard_normal((samples, model.n_params)).astype(np.float32)
        for dt in states:
            states[dt], info = ivon.update(states[dt], eps, problem, X[idx], y[idx], ivon.Hyper(**hyper, dtype=dt))
            assert np.isfinite(info["nll"])
    single, double = states["float32"], states["float64"]
    for name in ("mu", "d", "m"):
        a, b = getattr(single, name), getattr(double, name)
        assert a.dtype == np.float32 and b.dtype == np.float64, name
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * np.abs(b).max(), err_msg=name)
    assert np.abs(double.d / (N + problem.prior_precision) - 1).max() > 0.1  # the precision moved from N h_0 + lambda
    post = ivon.posterior(single)
    assert post.mean.dtype == np.float64 and post.log_sigma.dtype == np.float64


@pytest.mark.parametrize("bad,message", [
    ({"samples": 0}, "--samples"), ({"lr": 0.0}, "--lr"), ({"beta1": 1.0}, "--beta1"), ({"beta2": -0.1}, "--beta2"),
    ({"hess_init": 0.0}, "--hess-init"), ({"hess_init": float("nan")}, "--hess-init"),
    ({"clip_radius": 0.0}, "--clip-radius"), ({"clip_radius": float("nan")}, "--clip-radius"),
({"dtype": "float16"}, "--dtype"),
])
def test_invalid_hyperparameters_are_config_errors(bad, message):
    with pytest.raises(ConfigError, match=message):
        ivon.Hyper(**bad)


def test_clipping_defaults_to_radius_one_and_inf_turns_it_off():
    assert ivon.Hyper().clip_radius == 1.0 and ivon.Hyper().lr == 0.2
    assert ivon.Hyper(clip_radius=float("inf")).clip_radius is None


@pytest.mark.parametrize("likelihood", ["bernoulli", "gaussian"])
def test_same_noise_same_trajectory_as_the_reference_package(likelihood):
    """Where PyTorch and the ``ivon-opt`` package happen to be installed (slang never requires them): fed the
    same standard normals, the package's optimiser (float64, a torch copy of the network, one parameter group for
    the weights and one for the biases) and ``ivon.update`` follow the same trajectory, mean and precision, to
    rounding, over 30 steps with two samples per step and clipping."""
    torch = pytest.importorskip("torch")
    ivon_opt = pytest.importorskip("ivon")
    rng = np.random.default_rng(7)
    N, M, P = 40, 8, 3
    X = rng.standard_normal((N, P))
    y = (X[:, 0] > 0).astype(float) if likelihood == "bernoulli" else X @ np.array([1.0, -1.0, 0.5])
    model = MLP((P, 4, 1), "relu", likelihood)
    problem = Problem(model, model.prior_precision(2.0, 0.5), N)
    hyper = ivon.Hyper(samples=2, lr=0.1, beta2=0.99, hess_init=0.5, clip_radius=0.5, dtype="float64")
    state = ivon.init(np.random.default_rng(0), problem, hyper)
    lays = model.layout.layers
    lins = [torch.nn.Linear(s.n_in, s.n_out, dtype=torch.float64) for s in lays]
    with torch.no_grad():
        for lin, (W, b) in zip(lins, model.layout.unflatten(state.mu)):
            lin.weight.copy_(torch.from_numpy(W.T.copy()))
            lin.bias.copy_(torch.from_numpy(b.copy()))
    net = torch.nn.Sequential(lins[0], torch.nn.ReLU(), lins[1])
    opt = ivon_opt.IVON([{"params": [lin.weight for lin in lins], "weight_decay": 2.0 / N},
                         {"params": [lin.bias for lin in lins], "weight_decay": 0.5 / N}],
                        lr=0.1, ess=N, hess_init=0.5, beta2=0.99, mc_samples=2, clip_radius=0.5)

    def loss(f, t):
        if likelihood == "bernoulli":
            return torch.nn.functional.binary_cross_entropy_with_logits(f[:, 0], t)
        return 0.5 * ((f[:, 0] - t) ** 2).mean()

    def flat(tensors):  # slang's layout: each layer's W as (n_in, n_out) rows, then b
        out = np.empty(model.n_params)
        for s, (w, b) in zip(lays, tensors):
            out[s.W], out[s.b] = w.detach().numpy().T.ravel(), b.detach().numpy()
        return out

    real_randn = torch.randn
    try:
        for _ in range(30):
            idx = rng.choice(N, M, replace=False)
            eps = rng.standard_normal((2, model.n_params))
            state, _ = ivon.update(state, eps, problem, X[idx], y[idx], hyper)
            # the package draws one torch.randn per parameter group and sample: hand it the same normals
            draws = [torch.from_numpy(np.concatenate(part)) for e in eps
                     for part in ([e[s.W].reshape(s.n_in, s.n_out).T.ravel() for s in lays], [e[s.b] for s in lays])]
            torch.randn = lambda *args, **kwargs: draws.pop(0)
            for _ in range(2):
                with opt.sampled_params(train=True):
                    opt.zero_grad()
                    loss(net(torch.from_numpy(X[idx])), torch.from_numpy(y[idx])).backward()
            opt.step()
            torch.randn = real_randn
            assert not draws
    finally:
        torch.randn = real_randn
    np.testing.assert_allclose(flat((lin.weight, lin.bias) for lin in lins), state.mu, rtol=1e-10, atol=1e-12)
    hess = [g["hess"] + g["weight_decay"] for g in opt.param_groups]  # flat per group, in parameter order
    sizes = [[lin.weight.numel() for lin in lins], [lin.bias.numel() for lin in lins]]
    parts = [torch.split(h, n) for h, n in zip(hess, sizes)]
    d = N * flat((w.reshape(lin.weight.shape), b) for lin, w, b in zip(lins, parts[0], parts[1]))
    np.testing.assert_allclose(d, state.d, rtol=1e-10)
    assert np.abs(state.mu - ivon.init(np.random.default_rng(0), problem, hyper).mu).max() > 0.05  # it moved
