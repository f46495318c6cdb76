"""Scores of a Gaussian posterior: posterior-predictive NLL and accuracy (classification), RMSE and
log-likelihood (regression), and the ELBO.

Predictive distributions:

- ``mc``: ``p(y|x) ~= (1/S) sum_s p(y | x, theta_s)`` with ``theta_s ~ q`` (any model).
- ``quadrature`` (Bayesian logistic regression only): the logit is Gaussian under q,
  ``f ~ N(x~^T mu, x~^T Sigma x~)`` with ``x~ = (x, 1)``, and ``p(y=1|x) = E[sigmoid(f)]`` is a one-dimensional
  integral done to about 1e-12 (``slangcli.gaussian.quadrature``). This is the exact predictive, the quantity the SLANG
  paper's NLL column reports.

The class probabilities of both are ``slangcli.predictive.predict.classify``'s (the one classification predictive, of
``slang evaluate``, ``slang predict``, the API and ``--tune``); the scores here take them as given.

The ELBO is ``E_q[log p(D|theta)] - KL(q || p)``; reported as ``-ELBO / N`` in nats per training example. Its
expected log-likelihood uses the same two routes (exact for logistic regression, Monte Carlo otherwise), and the
KL is exact.

Calibration:

- classification: the expected calibration error of Guo et al. (ICML 2017, eq. 3),
  ``ECE = sum_b (n_b / N) |acc_b - conf_b|`` over equal-width confidence bins ``(b/B, (b+1)/B]``, where the
  confidence of an example is its largest predictive probability and ``acc_b`` the fraction of the bin's examples
  whose most probable class is the true one.
- regression: the coverage of central predictive intervals, the fraction of targets inside
  ``[Q((1-c)/2), Q((1+c)/2)]`` of each example's predictive distribution, the Monte-Carlo mixture
  ``(1/S) sum_s N(f_s, 1/tau)`` (``slangcli.predictive.mixture``). Its CDF ``F`` is continuous and strictly increasing,
  so ``y`` is inside exactly when ``(1-c)/2 <= F(y) <= (1+c)/2``: coverage needs ``F(y_n)`` (the probability integral
  transform), a running sum over weight samples, and no quantile search.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

import numpy as np
import scipy.special

from slangcli._startup import memory_limit
from slangcli.errors import ConfigError
from slangcli.gaussian.posteriors import is_mixture
from slangcli.gaussian.quadrature import expect_softplus
from slangcli.models import MLP
from slangcli.streams import PREDICT, derive_rng, member_seed

PREDICTIVES = ("auto", "quadrature", "mc")
# Monte-Carlo weight samples of a predictive (an evaluation, a prediction, a fit's final scores): at most this many.
# More than 10 million would take days at any size and, for regression, hold 80 MB per example (the command line's
# options and the Python API refuse more before anything is drawn).
MAX_SAMPLES = 10**7
# central predictive intervals whose coverage `slang evaluate` reports for regression
COVERAGE_LEVELS = (0.5, 0.9, 0.95)
# activations held by one forward pass (weight samples x rows x widest layer), about 128 MB in float64
ACTIVATION_BUDGET = 1 << 24


# arrays as large as a categorical model's outputs that its predictive holds at once (the logits, logsumexp's
# temporaries, the log-probabilities, the probabilities and their product): for a 200-class model they, not the
# layers, set the memory, and scoring 200 rows peaked at about 1 GB, 7 times the budget
SOFTMAX_TEMPORARIES = 8


def row_chunks(model: MLP, n_rows: int, n_samples: int):
    """Row slices for forward passes whose activations, and a categorical model's softmax temporaries, stay within
    ACTIVATION_BUDGET."""
    width = max(model.sizes)
    if model.likelihood == "categorical":
        width = max(width, SOFTMAX_TEMPORARIES * model.sizes[-1])
    step = max(1, ACTIVATION_BUDGET // (n_samples * width))
    return [slice(lo, lo + step) for lo in range(0, n_rows, step)]


def resolve_predictive(model: MLP, predictive: str) -> str:
    if predictive == "auto":
        return "quadrature" if (model.is_linear and model.likelihood == "bernoulli") else "mc"
    if predictive == "quadrature" and not (model.is_linear and model.likelihood == "bernoulli"):
        raise ValueError("the quadrature predictive needs a logistic-regression model (no hidden layer, binary)")
    return predictive


def _with_bias(X):
    return np.hstack([X, np.ones((X.shape[0], 1))])


# cells (rows x (features + 1)) of the inputs with their bias column held at once by logit_moments, 32 MB
MOMENT_CELLS = 1 << 22
# and at most this many rows, the blocks of slang predict before they were set here
MOMENT_ROWS = 1 << 14


def moment_rows(width: int) -> int:
    """Rows per block of :func:`logit_moments` for inputs ``width`` wide (with the bias): a power of two (so that a
    block never splits the groups of rows a BLAS kernel handles together) within ``MOMENT_CELLS``."""
    fit = max(1, MOMENT_CELLS // max(width, 1))
    return min(MOMENT_ROWS, 1 << (fit.bit_length() - 1))


def logit_moments(posterior, X):
    """Mean and variance ``(N,)`` of the logit ``f = x~^T theta`` under q (a model without hidden layer).

    Computed for a block of rows at a time (:func:`moment_rows`): the inputs with their bias column and the
    posterior's quadratic forms take temporaries as wide as the inputs (a copy of all the data at once)."""
    n = X.shape[0]
    step = moment_rows(X.shape[1] + 1)
    if n <= step:
        return _moments(posterior, _with_bias(X))
    m, v = np.empty(n), np.empty(n)
    for lo in range(0, n, step):
        m[lo : lo + step], v[lo : lo + step] = _moments(posterior, _with_bias(X[lo : lo + step]))
    return m, v


def expected_squared_residual(posterior, X, y) -> float:
    """``E_q[sum_n (y_n - f_n)^2]`` of a model without hidden layer, exactly: ``sum_n (y_n - m_n)^2 + v_n`` with
    the moments of :func:`logit_moments`."""
    m, v = logit_moments(posterior, X)
    return float(np.sum((y - m) ** 2 + v))


# the variance given to a row whose logit's moments overflow (see _moments): its square root, 1e100, is so far
# beyond the sigmoid's width that E[sigmoid(f)] is P(f > 0) to every digit
HUGE_VARIANCE = 1e200


def _moments(posterior, Xb):
    """``(x~^T mu, x~^T Sigma x~)`` of the rows ``Xb``. Where either overflows (features of 1e155 and more), the
    row is scaled down by its largest entry first: the sigmoid is then a step at the logit's scale, the predictive
    ``P(f > 0) = Phi(m / sqrt(v))`` depends only on that ratio, and the row gets moments of that ratio at
    :data:`HUGE_VARIANCE`. (Without it a full or diagonal posterior's infinite variance gave p = 0.5 for such a row,
    and a low-rank one's NaN was refused.)"""
    with np.errstate(over="ignore", invalid="ignore"):
        m, v = Xb @ posterior.mean, posterior.quadratic_forms(Xb)
    bad = ~(np.isfinite(m) & np.isfinite(v))
    if bad.any() and np.isfinite(Xb[bad]).all():
        rows = Xb[bad] / np.abs(Xb[bad]).max(axis=1, keepdims=True)
        m_unit, v_unit = rows @ posterior.mean, posterior.quadratic_forms(rows)
        ratio = m_unit / np.sqrt(np.maximum(v_unit, np.finfo(float).tiny))
        m[bad], v[bad] = ratio * np.sqrt(HUGE_VARIANCE), HUGE_VARIANCE
    return m, v


# weight samples drawn at once by the predictive (memory stays bounded for large S)
SAMPLE_CHUNK = 64


def check_samples(samples, option: str = "--samples") -> None:
    """Refuse a count of predictive weight samples outside ``1 .. MAX_SAMPLES`` (one ConfigError naming
    ``option``), before any is drawn."""
    if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or not 1 <= samples <= MAX_SAMPLES:
        raise ConfigError(f"{option} must be a whole number from 1 to {MAX_SAMPLES}, got {samples!r}")


def check_draws(n: int, n_params: int, what: str) -> None:
    """Refuse ``n`` draws of ``n_params`` parameters held at once (``what`` says whose: ``"n = 10"``) when they
    would take more memory than this process can have (``_startup.memory_limit``): one ConfigError naming the
    size, instead of memory exhausted (or a machine swapping) once they are drawn."""
    limit = memory_limit()
    need = 8 * int(n) * int(n_params)
    if limit is not None and need > limit:
        raise ConfigError(f"{what}: {n} draws of {n_params} parameters take {need / 2**30:,.4g} GiB ({n} x "
                          f"{n_params} x 8 bytes), more than the {limit / 2**30:,.3g} GiB of memory this process "
                          "can have")


_SCORING = contextvars.ContextVar("slang_scoring_progress", default=None)


@contextlib.contextmanager
def scoring_progress(start):
    """Within this context, every pass of Monte-Carlo weight draws over the data (a predictive's, the training
    -ELBO's) reports how far it is: ``start(total)`` is called as the pass begins, with its number of weight
    draws, and returns ``report(done)``, called after each chunk of draws, and with ``None`` when the pass ends. A
    display lives in the caller (the command line's bar): the scores only count."""
    token = _SCORING.set(start)
    try:
        yield
    finally:
        _SCORING.reset(token)


def _reported(chunks: Iterator[np.ndarray], samples: int) -> Iterator[np.ndarray]:
    """``chunks`` of weight draws, each reported to the :func:`scoring_progress` of the context, if any."""
    start = _SCORING.get()
    if start is None:
        yield from chunks
        return
    report, done = start(samples), 0
    try:
        for theta in chunks:
            yield theta
            done += len(theta)
            report(done)
    finally:
        report(None)


def weight_samples(posterior, seed: int, samples: int) -> Iterator[np.ndarray]:
    """The predictive's ``samples`` weight draws ``theta_s ~ q`` as chunks ``(<= SAMPLE_CHUNK, D)``, chunk ``k``
    from the generator ``(seed, PREDICT, k)``: the same on every call, whatever the data."""
    yield from _reported((posterior.sample(derive_rng(seed, PREDICT, k), min(SAMPLE_CHUNK, samples - start))
                          for k, start in enumerate(range(0, samples, SAMPLE_CHUNK))), samples)


def draw_parts(posterior, model: MLP, seed: int, samples: int) -> list[tuple]:
    """The predictive's Monte-Carlo draws by part, ``(posterior, model, seed, samples)``: the posterior itself, or
    for each member k of a mixture of K (``slang fit --members K``) ``(member, its model, member_seed(seed, k),
    ceil(samples / K))``, the model with the member's noise precision. The members share the draws evenly, each
    from its own stream (member 0 from ``seed``'s, so that its draws are those of the single fit's predictive), and
    the pooled draws weigh every member equally: ``K ceil(samples / K)`` in all, ``samples`` when K divides it."""
    if not is_mixture(posterior):
        return [(posterior, model, seed, samples)]
    K = posterior.n_members
    each = -(-samples // K)
    return [(member, part_model, member_seed(seed, k), each)
            for k, (member, part_model, _) in enumerate(posterior.components(model))]


def drawn(posterior, samples: int) -> int:
    """The weight draws the predictive makes when asked for ``samples``: ``K ceil(samples / K)`` for a mixture of
    K (:func:`draw_parts`), ``samples`` otherwise."""
    if not is_mixture(posterior):
        return samples
    K = posterior.n_members
    return K * -(-samples // K)


def _sample_chunks(posterior, rng, samples):
    """Weight samples in chunks of at most 64, so memory stays bounded for large S."""
    def chunks():
        left = samples
        while left > 0:
            n = min(64, left)
            yield posterior.sample(rng, n)
            left -= n
    yield from _reported(chunks(), samples)


def classification_scores(probs: np.ndarray, y: np.ndarray) -> dict:
    """Test NLL (nats per example) and accuracy from predictive probabilities ``(N, C)`` and codes ``y``."""
    y = y.astype(np.int64)
    p_true = probs[np.arange(len(y)), y]
    # a probability that underflowed to 0 would make the NLL infinite; the floor keeps the score finite
    # (it is reached only by confidently wrong predictions, and then dominates the NLL as it should)
    nll = -np.mean(np.log(np.maximum(p_true, 1e-300)))
    return {"nll": float(nll), "accuracy": float(np.mean(np.argmax(probs, axis=1) == y)), "n": int(len(y))}


def calibration(probs: np.ndarray, y: np.ndarray, bins: int = 15) -> dict:
    """Expected calibration error and its reliability bins from predictive probabilities ``(N, C)`` and codes ``y``.

    Returns ``{"ece": float, "calibration": {"bins", "edges" (B + 1), "count", "confidence", "accuracy" (B each;
    None for an empty bin)}}``. Bin b holds the confidences in ``(edges[b], edges[b + 1]]`` (the first also 0), with
    the edges exactly as reported, so a confidence on an edge falls where the listed edges say.
    """
    if bins < 1:
        raise ValueError(f"the number of calibration bins must be >= 1, got {bins}")
    y = y.astype(np.int64)
    confidence = probs.max(axis=1)
    correct = (np.argmax(probs, axis=1) == y).astype(float)
    edges = np.linspace(0.0, 1.0, bins + 1)
    b = np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, bins - 1)
    count = np.bincount(b, minlength=bins)
    conf_sum = np.bincount(b, weights=confidence, minlength=bins)
    correct_sum = np.bincount(b, weights=correct, minlength=bins)
    # (n_b / N) |acc_b - conf_b| = |sum of correct - sum of confidences| / N: no division by an empty bin's n_b
    ece = float(np.sum(np.abs(correct_sum - conf_sum)) / max(len(y), 1))
    mean_conf = [float(c / n) if n else None for c, n in zip(conf_sum, count)]
    accuracy = [float(a / n) if n else None for a, n in zip(correct_sum, count)]
    return {"ece": ece, "calibration": {"bins": int(bins), "edges": edges.tolist(), "count": count.tolist(),
                                        "confidence": mean_conf, "accuracy": accuracy}}


def coverage(pit: np.ndarray, levels=COVERAGE_LEVELS) -> dict:
    """Fraction of targets inside each central predictive interval, from ``pit = F_n(y_n) : (N,)``.

    ``y`` lies in ``[Q((1-c)/2), Q((1+c)/2)]`` exactly when ``|F(y) - 1/2| <= c / 2`` (``F`` continuous and strictly
    increasing). Keys are the levels as text (``"0.9"``), so that they survive JSON.
    """
    return {f"{c:g}": float(np.mean(np.abs(pit - 0.5) <= 0.5 * c)) for c in levels}


def expected_nll(posterior, model: MLP, X, y, *, predictive="auto", samples=100, rng=None) -> float:
    """``E_q[-log p(D | theta)]`` summed over the rows of ``X``: exact for logistic regression (quadrature) and
    for linear regression with one noise precision (``log(2 pi / tau) / 2 + tau ((y - x~ . mu)^2 + x~^T Sigma x~) /
    2`` per row), from ``samples`` weight draws otherwise."""
    if model.is_linear and model.likelihood == "gaussian" and model.noise_weights is None:
        tau = model.noise_precision
        return 0.5 * X.shape[0] * np.log(2 * np.pi / tau) + 0.5 * tau * expected_squared_residual(posterior, X, y)
    predictive = resolve_predictive(model, predictive)
    if predictive == "quadrature":
        # the terms E[softplus(f_n)] - y_n m_n of a block of rows at a time (the moments, the quadrature's output
        # and the products of all rows at once took five vectors of the rows), then summed as before
        terms = np.empty(X.shape[0])
        step = moment_rows(X.shape[1] + 1)
        for lo in range(0, X.shape[0], step):
            m, v = logit_moments(posterior, X[lo : lo + step])
            terms[lo : lo + step] = expect_softplus(m, v) - y[lo : lo + step] * m
        return float(np.sum(terms))
    total = 0.0
    for theta in _sample_chunks(posterior, rng, samples):
        for rows in row_chunks(model, X.shape[0], theta.shape[0]):
            total += float(model.nll(theta, X[rows], y[rows]).sum())
    return total / samples


def neg_elbo_per_example(posterior, model: MLP, prior_precision, X, y, *, predictive="auto", samples=100, rng=None):
    """``-ELBO / N`` on the training data ``(X, y)``."""
    enll = expected_nll(posterior, model, X, y, predictive=predictive, samples=samples, rng=rng)
    return (enll + posterior.kl_to_prior(prior_precision)) / X.shape[0]


def regression_scores(posterior, model: MLP, X, y, *, samples=1000, rng=None, seed=None, target_scale=1.0,
                      levels=COVERAGE_LEVELS) -> dict:
    """RMSE of the predictive mean and per-point predictive log-likelihood, in the original target units.

    ``y`` is on the standardised scale the model was fitted on (``y_orig = mean + target_scale * y``). The
    log-likelihood is ``(1/N) sum_n log((1/S) sum_s N(y_n | f_s(x_n), 1/tau))`` (``tau`` the model's noise
    precision, or its noise model's for each prediction), moved to the original units by
    the change of variables (``- log target_scale``). ``coverage`` is that of the central intervals of
    ``levels`` (default ``COVERAGE_LEVELS``) of the same mixture (invariant under the affine change of units). With
    ``seed`` the weight samples are the predictive's own (:func:`weight_samples`, those of ``slang predict``), else
    drawn from ``rng``. A mixture of posteriors pools its members' draws (:func:`draw_parts`), each with its
    member's noise precision.
    """
    total_f = np.zeros(X.shape[0])
    log_sum = np.full(X.shape[0], -np.inf)
    cdf_sum = np.zeros(X.shape[0])
    drawn = 0
    # (with ``rng`` the seeds are unused: every part draws from ``rng`` in turn)
    for part, part_model, part_seed, n in draw_parts(posterior, model, 0 if seed is None else seed, samples):
        draws = weight_samples(part, part_seed, n) if seed is not None else _sample_chunks(part, rng, n)
        for theta in draws:
            for rows in row_chunks(part_model, X.shape[0], theta.shape[0]):
                f, inputs = part_model.forward(theta, X[rows])
                f = f[..., 0]  # (S, n)
                tau = part_model.noise_precisions(X[rows], f, inputs[-1])  # a number, or (S, n) with a noise model
                total_f[rows] += f.sum(0)
                logp = 0.5 * np.log(tau / (2 * np.pi)) - 0.5 * tau * (y[rows] - f) ** 2
                log_sum[rows] = np.logaddexp(log_sum[rows], scipy.special.logsumexp(logp, axis=0))
                cdf_sum[rows] += scipy.special.ndtr(np.sqrt(tau) * (y[rows] - f)).sum(0)
        drawn += n
    mean_f = total_f / drawn
    rmse = target_scale * np.sqrt(np.mean((mean_f - y) ** 2))
    loglik = np.mean(log_sum - np.log(drawn)) - np.log(target_scale)
    return {"rmse": float(rmse), "loglik": float(loglik), "n": int(len(y)), "coverage": coverage(cdf_sum / drawn, levels)}
