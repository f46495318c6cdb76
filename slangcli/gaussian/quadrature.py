"""One-dimensional Gaussian expectations of the logistic sigmoid, its derivative and softplus, to about 1e-12.

For ``f ~ N(m, s^2)``:

- When ``s <= 2`` the integrand, written in the standard variable ``z`` (``f = m + s z``), is analytic within
  ``pi / s`` of the real axis, and 96-point Gauss-Hermite quadrature is accurate to about 1e-15.
- When ``s > 2`` the integrand is too sharp in ``z``. Split off its kink at ``f = 0``:
  ``sigmoid(f) = [f > 0] + r(f)`` and ``softplus(f) = max(f, 0) + log(1 + e^{-|f|})``. The step and ramp parts have
  closed forms (``Phi(m/s)`` and ``m Phi(m/s) + s phi(m/s)``); the remainders are smooth on each side of 0 and
  below 1e-17 beyond ``|f| = 40``, so Gauss-Legendre quadrature on ``[-40, 0]`` and ``[0, 40]`` in ``f`` (where the
  Gaussian density, of width ``s > 2``, is smooth too) converges fast. ``sigmoid'(f) = sigmoid(f) sigmoid(-f)`` has
  no kink and decays like ``e^{-|f|}``, so it is all remainder.

Measured against adaptive quadrature (``scipy.integrate.quad`` at 1e-14) over ``m`` in [-30, 20] and ``s`` in
[0.01, 100]: absolute errors below 2e-13 (sigmoid, softplus) and 8e-13 (sigmoid').

The Bernoulli entropy ``h(f) = H[sigmoid(f)] = log(1 + e^{-|f|}) + |f| sigmoid(-|f|)`` is analytic (even in f,
no kink) and decays like ``|f| e^{-|f|}``, so it is all remainder as well: Gauss-Hermite when ``s <= 2``,
Gauss-Legendre in ``f`` on ``[-40, 40]`` when ``s > 2`` (96-point Gauss-Hermite alone is off by 1e-2 at
``s = 100``: the integrand is then about ``1 / s`` wide in ``z``). Measured against adaptive quadrature over the same
range: absolute errors below 1e-12.

Memory: each expectation holds a few ``rows x nodes`` temporaries (96 Gauss-Hermite or 64 Gauss-Legendre nodes), so it
is computed ``ROWS`` elements at a time, and its memory is that of its inputs and output whatever their length (ten
million logits at once took 15 GB). Each element's value does not depend on the others: with one BLAS thread the
blocks give the same values bit for bit as one pass (``ROWS`` is a power of two, so a block never splits the groups
of rows a BLAS kernel handles together; measured with OpenBLAS). With several threads the last bit of a few values
depends on how BLAS divides the rows among them, in blocks as in one pass.

Used for the posterior predictive of Bayesian logistic regression,
``p(y=1|x) = E[sigmoid(f)]`` with ``f ~ N(x^T mu, x^T Sigma x)``, for its exact expected log-likelihood, for its
expected entropy ``E[h(f)]`` (the aleatoric part of the predictive entropy, ``slangcli.predictive.predict``), and for
the gradient of that expectation in the exact-VI solvers (``slangcli.methods.exact``):
``d/dm E[softplus(f)] = E[sigmoid(f)]`` and ``d/dv E[softplus(f)] = E[sigmoid'(f)] / 2``.
"""

from __future__ import annotations

import numpy as np
import scipy.special

_GH_Z, _GH_W = np.polynomial.hermite_e.hermegauss(96)
_GH_W = _GH_W / _GH_W.sum()
_GL_X, _GL_W = np.polynomial.legendre.leggauss(64)
_CUT = 40.0
# nodes and weights on [0, CUT]
_GL_F = 0.5 * _CUT * (_GL_X + 1.0)
_GL_WF = 0.5 * _CUT * _GL_W
SHARP = 2.0
# elements per block of a quadrature (see the module docstring): its temporaries then take a few MB each
ROWS = 1 << 13


def _split(m, v):
    m = np.asarray(m, dtype=float)
    s = np.sqrt(np.maximum(np.asarray(v, dtype=float), 0.0))
    m, s = np.broadcast_arrays(m, s)
    return m, s, s <= SHARP


def _normal_pdf(x, loc, scale):
    z = (x - loc) / scale
    return np.exp(-0.5 * z * z) / (scale * np.sqrt(2.0 * np.pi))


def _in_blocks(compute, m, s):
    """``compute(m, s)`` for 1-D ``m`` and ``s``, ``ROWS`` elements at a time."""
    if m.size <= ROWS:
        return compute(m, s)
    out = np.empty(m.size)
    for lo in range(0, m.size, ROWS):
        out[lo : lo + ROWS] = compute(m[lo : lo + ROWS], s[lo : lo + ROWS])
    return out


def _gh(fn, m, s):
    return _in_blocks(lambda mb, sb: (fn(mb[:, None] + sb[:, None] * _GH_Z) * _GH_W).sum(axis=1), m, s)


def _remainder(r_pos, r_neg, m, s):
    """``int r(f) N(f | m, s^2) df`` with ``r = r_pos`` on f > 0 and ``r_neg`` on f < 0, both decaying."""

    def compute(mb, sb):
        dens_pos = _normal_pdf(_GL_F, mb[:, None], sb[:, None])
        dens_neg = _normal_pdf(-_GL_F, mb[:, None], sb[:, None])
        return (dens_pos * r_pos(_GL_F) + dens_neg * r_neg(-_GL_F)) @ _GL_WF

    return _in_blocks(compute, m, s)


def expect_sigmoid(m, v) -> np.ndarray:
    """``E[sigmoid(f)]`` for ``f ~ N(m, v)``, elementwise."""
    m, s, smooth = _split(m, v)
    out = np.empty(m.shape)
    out[smooth] = _gh(scipy.special.expit, m[smooth], s[smooth])
    sharp = ~smooth
    if sharp.any():
        ms, ss = m[sharp], s[sharp]
        out[sharp] = scipy.special.ndtr(ms / ss) + _remainder(
            lambda f: -scipy.special.expit(-f), scipy.special.expit, ms, ss
        )
    return out


def _softplus(f):
    return np.logaddexp(0.0, f)


def expect_softplus(m, v) -> np.ndarray:
    """``E[log(1 + e^f)]`` for ``f ~ N(m, v)``, elementwise."""
    m, s, smooth = _split(m, v)
    out = np.empty(m.shape)
    out[smooth] = _gh(_softplus, m[smooth], s[smooth])
    sharp = ~smooth
    if sharp.any():
        ms, ss = m[sharp], s[sharp]
        r = ms / ss
        ramp = ms * scipy.special.ndtr(r) + ss * _normal_pdf(r, 0.0, 1.0)
        tail = lambda f: np.log1p(np.exp(-np.abs(f)))  # noqa: E731
        out[sharp] = ramp + _remainder(tail, tail, ms, ss)
    return out


def _sigmoid_grad(f):
    # sigmoid(f) (1 - sigmoid(f)) written without the cancellation of 1 - sigmoid(f) at large f
    return scipy.special.expit(f) * scipy.special.expit(-f)


def _expect_even(fn, m, v) -> np.ndarray:
    """``E[fn(f)]`` for ``f ~ N(m, v)`` and an even ``fn`` (its own reflection): Gauss-Hermite where the density
    is narrow, the split quadrature (``_remainder`` with ``fn`` on both sides) elsewhere."""
    m, s, smooth = _split(m, v)
    out = np.empty(m.shape)
    out[smooth] = _gh(fn, m[smooth], s[smooth])
    sharp = ~smooth
    if sharp.any():
        out[sharp] = _remainder(fn, fn, m[sharp], s[sharp])
    return out


def expect_sigmoid_grad(m, v) -> np.ndarray:
    """``E[sigmoid'(f)] = E[sigmoid(f) (1 - sigmoid(f))]`` for ``f ~ N(m, v)``, elementwise."""
    return _expect_even(_sigmoid_grad, m, v)


def bernoulli_entropy(f) -> np.ndarray:
    """``H[sigmoid(f)]`` in nats, elementwise, written in ``|f|`` so that neither term cancels the other (the
    textbook ``softplus(f) - f sigmoid(f)`` loses all digits for large ``f``)."""
    a = np.abs(f)
    return np.logaddexp(0.0, -a) + a * scipy.special.expit(-a)


def expect_bernoulli_entropy(m, v) -> np.ndarray:
    """``E[H[sigmoid(f)]]`` for ``f ~ N(m, v)``, elementwise, in nats."""
    return _expect_even(bernoulli_entropy, m, v)
