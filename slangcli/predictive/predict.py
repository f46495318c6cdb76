"""Per-example predictions and their uncertainty under a Gaussian posterior ``q(theta)``.

Classification, in nats (Houlsby et al. 2011; Depeweg et al., ICML 2018, eq. 13):

- predictive probabilities ``p(y|x) = E_q p(y|x, theta)``;
- total uncertainty, the predictive entropy ``H[E_q p(y|x, theta)]``;
- aleatoric, the expected entropy ``E_q H[p(y|x, theta)]``;
- epistemic, their difference, the mutual information ``I[y; theta | x] >= 0``.

For Bayesian logistic regression (no hidden layer, Bernoulli) the logit is Gaussian under q, ``f ~ N(m, v)``, and
both expectations are one-dimensional integrals done by quadrature to about 1e-12 (``slangcli.gaussian.quadrature``):
the probabilities are exactly those of ``slang evaluate``. Otherwise all three come from the same S weight samples, so
the mutual information of the sampled mixture is itself non-negative (concavity of the entropy) and only rounding can
take it below 0; it is clamped there.

Regression: the predictive distribution is the mixture ``(1/S) sum_s N(f_s, 1/tau)`` over weight samples
(``slangcli.predictive.mixture``): its mean, its standard deviation split into aleatoric ``sqrt(1/tau)`` and epistemic
(the standard deviation of ``f_s`` over the samples), ``total^2 = aleatoric^2 + epistemic^2``, and the exact quantiles
of the mixture for a central interval. Everything is mapped to the target's original units, ``y = target_mean +
target_scale * y_standardised``.

A mixture of K posteriors (``slang fit --members K``) predicts with the equal-weight mixture of its members'
predictives. Its Monte-Carlo draws are pooled: ``ceil(S / K)`` from each member, member k's from the stream of
``member_seed(seed, k)`` (``metrics.draw_parts``), each with its member's noise precision. Classification's
probabilities and expected entropy are then the average of the members' (exactly so for quadrature, where each
member's are computed alone), and the mutual information includes the members' disagreement; regression's
epistemic variance is that of the pooled outputs, which is the members' mean epistemic variance plus the variance
of their means, and its aleatoric variance the members' mean noise variance.

Weight samples come in chunks of ``SAMPLE_CHUNK``; chunk k is drawn from ``derive_rng(seed, PREDICT, k)``, so a chunk
can be drawn again identically. Classification accumulates over the chunks in one pass. Regression needs all S
outputs of an example for its quantiles: it keeps an ``S x rows`` block within ``BLOCK_BUDGET`` and draws the
samples again for the next block of rows, instead of holding ``S x D`` weights.
"""

from __future__ import annotations

import numpy as np
import scipy.special

from slangcli.gaussian.posteriors import is_mixture
from slangcli.gaussian.quadrature import bernoulli_entropy, expect_bernoulli_entropy, expect_sigmoid
from slangcli.models import MLP
from slangcli.predictive import metrics
from slangcli.predictive import mixture
from slangcli.predictive.metrics import weight_samples

# outputs f_s(x_n) held at once by regression (S x rows), 32 MB in float64; the quantile search holds a few
# temporaries of the same shape
BLOCK_BUDGET = 1 << 22


def uses_quadrature(model: MLP) -> bool:
    return model.is_linear and model.likelihood == "bernoulli"


def _entropy_split(probs, aleatoric):
    total = scipy.special.entr(probs).sum(axis=1)
    return {"probs": probs, "entropy_total": total, "entropy_aleatoric": aleatoric,
            "entropy_epistemic": np.maximum(total - aleatoric, 0.0)}


def classify(posterior, model: MLP, X: np.ndarray, *, samples: int = 1000, seed: int = 0,
             predictive: str = "auto") -> dict:
    """Predictive class probabilities ``probs : (N, C)`` and ``entropy_total``, ``entropy_aleatoric``,
    ``entropy_epistemic : (N,)`` (nats), plus ``predictive``: ``"quadrature"`` or ``"mc"``.

    The one predictive of classification: ``slang predict``, ``slang evaluate`` and the Python API all call this,
    so the same ``seed`` and ``samples`` give the same probabilities. ``predictive="auto"`` is exact quadrature
    for logistic regression and Monte Carlo otherwise (``metrics.resolve_predictive``)."""
    if model.likelihood == "gaussian":
        raise ValueError("class probabilities need a classification model")
    if is_mixture(posterior):  # the average of the members' predictives, each from its share of the draws
        parts = [classify(member, part_model, X, samples=n, seed=part_seed, predictive=predictive)
                 for member, part_model, part_seed, n in metrics.draw_parts(posterior, model, seed, samples)]
        return {**_entropy_split(np.mean([p["probs"] for p in parts], axis=0),
                                 np.mean([p["entropy_aleatoric"] for p in parts], axis=0)),
                "predictive": parts[0]["predictive"]}
    n = X.shape[0]
    if metrics.resolve_predictive(model, predictive) == "quadrature":
        # (both compute in blocks of rows: the memory is that of these vectors)
        m, v = metrics.logit_moments(posterior, X)
        probs = np.empty((n, 2))
        probs[:, 0], probs[:, 1] = expect_sigmoid(-m, v), expect_sigmoid(m, v)
        return {**_entropy_split(probs, expect_bernoulli_entropy(m, v)), "predictive": "quadrature"}
    bernoulli = model.likelihood == "bernoulli"
    prob_sum = np.zeros((n, 2 if bernoulli else model.sizes[-1]))
    entropy_sum = np.zeros(n)
    for theta in weight_samples(posterior, seed, samples):
        for rows in metrics.row_chunks(model, n, theta.shape[0]):
            f = model.forward(theta, X[rows])[0]  # (S, n, outputs)
            if bernoulli:
                z = f[..., 0]
                # both classes from their own sigmoid: 1 - sigmoid(z) would lose the small probability
                prob_sum[rows, 0] += scipy.special.expit(-z).sum(axis=0)
                prob_sum[rows, 1] += scipy.special.expit(z).sum(axis=0)
                entropy_sum[rows] += bernoulli_entropy(z).sum(axis=0)
            else:
                log_p = f - scipy.special.logsumexp(f, axis=-1, keepdims=True)
                p = np.exp(log_p)
                prob_sum[rows] += p.sum(axis=0)
                entropy_sum[rows] -= (p * log_p).sum(axis=(0, 2))
    return {**_entropy_split(prob_sum / samples, entropy_sum / samples), "predictive": "mc"}


def regress(posterior, model: MLP, X: np.ndarray, *, samples: int = 1000, seed: int = 0, level: float | None = 0.95,
            target_mean: float = 0.0, target_scale: float = 1.0) -> dict:
    """Predictive ``mean``, ``std_total``, ``std_aleatoric``, ``std_epistemic`` and the central ``level`` interval
    ``lower``, ``upper`` (all ``(N,)``, original units) of a regression model, from ``samples`` weight samples;
    ``level=None``: the moments alone (the same numbers, without the quantile search)."""
    if model.likelihood != "gaussian":
        raise ValueError("a predictive interval needs a regression model")
    if level is not None and not 0.0 < level < 1.0:
        raise ValueError(f"the interval level must lie strictly between 0 and 1, got {level}")
    n = X.shape[0]
    parts = metrics.draw_parts(posterior, model, seed, samples)
    drawn = sum(part[3] for part in parts)
    modelled = model.noise_weights is not None  # a noise model: a noise level per draw and row, set below
    if modelled:
        sigma = aleatoric = None
    elif len(parts) == 1:
        sigma = aleatoric = 1.0 / np.sqrt(model.noise_precision)
    else:  # one noise level per draw, its member's: (drawn, 1)
        sigma = np.repeat([1.0 / np.sqrt(m.noise_precision) for _, m, _, _ in parts], [p[3] for p in parts])[:, None]
        aleatoric = float(np.sqrt(np.mean(sigma**2)))
    names = ("mean", "std_epistemic", "std_total") + (("lower", "upper") if level is not None else ())
    out = {name: np.empty(n) for name in names}
    out["std_aleatoric"] = np.empty(n)
    block = max(1, BLOCK_BUDGET // drawn)
    for lo in range(0, n, block):
        Xb = X[lo : lo + block]
        f = np.empty((drawn, Xb.shape[0]))
        if modelled:
            sigma = np.empty((drawn, Xb.shape[0]))
        s = 0
        for part, part_model, part_seed, part_samples in parts:
            for theta in weight_samples(part, part_seed, part_samples):
                for rows in metrics.row_chunks(part_model, Xb.shape[0], theta.shape[0]):
                    out_f, inputs = part_model.forward(theta, Xb[rows])
                    f[s : s + theta.shape[0], rows] = out_f[..., 0]
                    if modelled:
                        tau = part_model.noise_precisions(Xb[rows], f[s : s + theta.shape[0], rows], inputs[-1])
                        sigma[s : s + theta.shape[0], rows] = 1.0 / np.sqrt(tau)
                s += theta.shape[0]
        rows = slice(lo, lo + Xb.shape[0])
        out["std_aleatoric"][rows] = np.sqrt(np.mean(sigma**2, axis=0)) if modelled else aleatoric
        out["mean"][rows], out["std_epistemic"][rows], out["std_total"][rows] = mixture.moments(f, sigma)
        if level is not None:
            out["lower"][rows] = mixture.quantile(0.5 * (1.0 - level), f, sigma)
            out["upper"][rows] = mixture.quantile(0.5 * (1.0 + level), f, sigma)
    # original units: an increasing affine map, so quantiles map to quantiles and standard deviations scale
    for name in ("mean", "lower", "upper")[: 3 if level is not None else 1]:
        out[name] = target_mean + target_scale * out[name]
    for name in ("std_epistemic", "std_total"):
        out[name] = target_scale * out[name]
    out["std_aleatoric"] = target_scale * out.pop("std_aleatoric")  # (last, where readers of this dict find it)
    return {**out, "level": None if level is None else float(level), "predictive": "mc"}
