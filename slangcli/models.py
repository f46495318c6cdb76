"""Multilayer perceptrons with hand-written, per-example back-propagation over a leading sample axis.

A network maps ``x : (n_0,)`` through dense layers ``h_l = act(h_{l-1} W_l + b_l)`` (no activation on the last
layer) to the output ``f``. Logistic (and softmax, and linear) regression is the network with no hidden layer.
Parameters live in one flat vector ``theta : (D,)``; :class:`Layout` is the single definition of which slice is
which layer's ``W_l : (n_in, n_out)`` (row-major) and ``b_l : (n_out,)``.

Per-example gradients follow Goodfellow's outer-product construction: the gradient of example ``i``'s negative
log-likelihood with respect to ``W_l`` under weight sample ``s`` is ``a_{s,i} delta_{s,i}^T`` where ``a`` is the
layer input and ``delta`` the back-propagated gradient with respect to the layer's pre-activation; for ``b_l`` it is
``delta_{s,i}``. They are returned in this factored form (:class:`FactoredGrads`), never as a D x (S M) matrix
unless asked. The same back-propagation, started from the columns of a square root of the output Hessian instead
of ``delta``, gives the per-example generalized Gauss-Newton matrices in the same factored form
(:meth:`MLP.ggn_factors`).

Likelihoods, with ``delta_out = dNLL/df`` (valid because each output activation is the canonical link of its
likelihood: sigmoid with Bernoulli, softmax with categorical, identity with Gaussian):

- ``bernoulli``: one output, ``NLL = log(1 + e^f) - y f``, ``delta = sigmoid(f) - y``
- ``categorical``: K outputs, ``NLL = logsumexp(f) - f_y``, ``delta = softmax(f) - onehot(y)``
- ``gaussian``: one output, noise precision tau, ``NLL = tau (f - y)^2 / 2 - log(tau) / 2 + log(2 pi) / 2``,
  ``delta = tau (f - y)``

A Gaussian model may also carry a noise model (``noise_weights``, ``slang fit --noise-model``): the noise precision
of a prediction ``f`` at input ``x`` is ``tau(x, f) = exp(c + w . x + w_f f)`` (``linear``), or for a network
``exp(c + w . x + v . h + w_f f)`` with ``h`` the last hidden layer's activations of the same weight draw
(``hidden``: a second, log-precision readout of the hidden layer, as a deep ensemble's variance head is). It is
fitted to a trained posterior (``slangcli.training.learned.fit_noise_model``) and used by the predictive; training
and its objective use the constant ``noise_precision``.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import NamedTuple

import numpy as np
import scipy.special

from slangcli.errors import ConfigError

LIKELIHOODS = ("bernoulli", "categorical", "gaussian")
# a noise model's precisions stay within these (those of a learned constant one, slangcli.training.learned.BOUNDS)
NOISE_BOUNDS = (1e-8, 1e8)
LOG_NOISE_BOUNDS = (math.log(NOISE_BOUNDS[0]), math.log(NOISE_BOUNDS[1]))


def _relu(z):
    return np.maximum(z, 0.0)


def _relu_grad(h):
    return (h > 0).astype(h.dtype)


def _tanh_grad(h):
    return 1.0 - h * h


def _sigmoid_grad(h):
    return h * (1.0 - h)


# Activation and its derivative, the derivative written in terms of the activation's *output* h (what the
# forward pass stores), which is exact for all three: relu'(z) = [h > 0], tanh' = 1 - h^2, sigmoid' = h (1 - h).
ACTIVATIONS = {
    "relu": (_relu, _relu_grad),
    "tanh": (np.tanh, _tanh_grad),
    "sigmoid": (scipy.special.expit, _sigmoid_grad),
}


class LayerSlices(NamedTuple):
    W: slice
    b: slice
    n_in: int
    n_out: int


@dataclass(frozen=True)
class Layout:
    """Which slice of the flat parameter vector holds each layer's weights and biases."""

    sizes: tuple[int, ...]

    # cached: the slices are read several times per training step, and building them costs more than a small
    # network's arithmetic (a frozen dataclass still has the instance dict that cached_property writes to)
    @cached_property
    def layers(self) -> tuple[LayerSlices, ...]:
        out, start = [], 0
        for n_in, n_out in zip(self.sizes[:-1], self.sizes[1:]):
            w = slice(start, start + n_in * n_out)
            b = slice(w.stop, w.stop + n_out)
            out.append(LayerSlices(w, b, n_in, n_out))
            start = b.stop
        return tuple(out)

    @property
    def n_params(self) -> int:
        return sum(i * o + o for i, o in zip(self.sizes[:-1], self.sizes[1:]))

    def bias_mask(self) -> np.ndarray:
        """Boolean (D,) marking the bias entries."""
        mask = np.zeros(self.n_params, dtype=bool)
        for layer in self.layers:
            mask[layer.b] = True
        return mask

    def unflatten(self, theta: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Views ``(W : (..., n_in, n_out), b : (..., n_out))`` per layer of ``theta : (..., D)``."""
        lead = theta.shape[:-1]
        return [
            (theta[..., s.W].reshape(*lead, s.n_in, s.n_out), theta[..., s.b]) for s in self.layers
        ]


@lru_cache(maxsize=64)
def _layout(sizes: tuple[int, ...]) -> Layout:
    """One :class:`Layout` per architecture, shared by its models: a learned noise or prior precision makes a new
    model after every step, and the layout's slices should not be rebuilt with it."""
    return Layout(sizes)


@dataclass(frozen=True)
class MLP:
    """A network architecture with its likelihood. ``sizes = (n_0, n_1, ..., n_out)``."""

    sizes: tuple[int, ...]
    activation: str = "relu"
    likelihood: str = "bernoulli"
    noise_precision: float = 1.0
    # the noise model ``(c, w_1 .. w_{n_0}, w_f)`` of :meth:`noise_precisions`, or ``(c, w_1 .. w_{n_0}, v_1 .. v_H,
    # w_f)`` over the last hidden layer's H units too; None: the constant noise_precision
    noise_weights: tuple | None = None

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ConfigError(f"unknown activation {self.activation!r} (choose from {', '.join(ACTIVATIONS)})")
        if self.likelihood not in LIKELIHOODS:
            raise ConfigError(f"unknown likelihood {self.likelihood!r} (choose from {', '.join(LIKELIHOODS)})")
        if len(self.sizes) < 2 or min(self.sizes) < 1:
            raise ConfigError(f"invalid layer sizes {self.sizes}")
        if self.likelihood in ("bernoulli", "gaussian") and self.sizes[-1] != 1:
            raise ConfigError(f"a {self.likelihood} likelihood needs one output, not {self.sizes[-1]}")
        if self.likelihood == "gaussian" and not self.noise_precision > 0:
            raise ConfigError(f"noise precision must be positive, got {self.noise_precision}")
        if self.noise_weights is not None:
            if self.likelihood != "gaussian":
                raise ConfigError(f"a noise model needs a gaussian likelihood, not {self.likelihood}")
            sizes = {self.sizes[0] + 2: "linear"}
            if len(self.sizes) > 2:
                sizes[self.sizes[0] + self.sizes[-2] + 2] = "hidden"
            if len(self.noise_weights) not in sizes or not np.isfinite(self.noise_weights).all():
                raise ConfigError(f"a noise model of {self.sizes[0]} inputs"
                                  + (f" and {self.sizes[-2]} last hidden units" if len(self.sizes) > 2 else "")
                                  + f" has {' or '.join(map(str, sizes))} finite weights, not "
                                  f"{len(self.noise_weights)}")

    @property
    def noise_model(self) -> str:
        """The kind of noise model: ``constant`` (none), ``linear`` or ``hidden`` (:meth:`noise_precisions`)."""
        if self.noise_weights is None:
            return "constant"
        return "linear" if len(self.noise_weights) == self.sizes[0] + 2 else "hidden"

    def noise_precisions(self, X: np.ndarray, f: np.ndarray, hidden: np.ndarray | None = None):
        """The noise precision of the predictions ``f : (S, n)`` at the inputs ``X : (n, n_0)``: without a noise
        model the constant ``noise_precision`` (a float), else ``tau = exp(c + X w + w_f f) : (S, n)``, and with the
        ``hidden`` noise model ``+ hidden v``, ``hidden : (S, n, H)`` the last hidden layer of the draws that made
        ``f`` (:meth:`forward`'s last layer input), within :data:`NOISE_BOUNDS`."""
        if self.noise_weights is None:
            return self.noise_precision
        w = np.asarray(self.noise_weights, dtype=float)
        n0 = self.sizes[0]
        eta = w[0] + (X @ w[1 : n0 + 1])[None, :] + w[-1] * f
        if len(w) > n0 + 2:
            if hidden is None:
                raise ValueError("the hidden noise model needs the last hidden layer of the draws that made f "
                                 "(forward's last layer input)")
            eta = eta + hidden @ w[n0 + 1 : -1]
        return np.exp(np.clip(eta, *LOG_NOISE_BOUNDS))

    @property
    def layout(self) -> Layout:
        return _layout(tuple(operator.index(n) for n in self.sizes))  # (Python ints: the cache is shared)

    @property
    def n_params(self) -> int:
        return self.layout.n_params

    @property
    def is_linear(self) -> bool:
        """No hidden layer: every weight sample sees the same layer input."""
        return len(self.sizes) == 2

    def prior_precision(self, weight: float, bias: float, hidden_bias: float | None = None) -> np.ndarray:
        """Per-parameter prior precision lambda : (D,): ``weight`` on the weights, ``bias`` on the output layer's
        biases and ``hidden_bias`` (``bias`` when None) on the hidden layers'."""
        lam = np.where(self.layout.bias_mask(), bias, weight).astype(float)
        if hidden_bias is not None:
            for s in self.layout.layers[:-1]:
                lam[s.b] = hidden_bias
        return lam

    def init_mean(self, rng: np.random.Generator) -> np.ndarray:
        """A standard layer initialisation: zeros for a linear model (its objective is convex), else
        He-uniform (relu) or Glorot-uniform (tanh, sigmoid) weights and zero biases."""
        theta = np.zeros(self.n_params)
        if self.is_linear:
            return theta
        for s in self.layout.layers:
            fan = 6.0 / s.n_in if self.activation == "relu" else 6.0 / (s.n_in + s.n_out)
            theta[s.W] = rng.uniform(-np.sqrt(fan), np.sqrt(fan), s.n_in * s.n_out)
        return theta

    # ------------------------------------------------------------------ forward
    def forward(self, theta: np.ndarray, X: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """Outputs ``f : (S, N, n_out)`` for weight samples ``theta : (S, D)`` and inputs ``X : (N, n_0)``.

        Also returns the inputs of every layer: the first is ``X`` itself (shared by all samples), the others
        ``(S, N, n_in)``.
        """
        act = ACTIVATIONS[self.activation][0]
        inputs: list[np.ndarray] = [X]
        h = None
        params = self.layout.unflatten(theta)
        for k, (W, b) in enumerate(params):
            if k == 0:
                # one GEMM for all samples: X (N, n0) @ [W_1 | ... | W_S] (n0, S n1)
                S, n_in, n_out = W.shape
                z = (X @ W.transpose(1, 0, 2).reshape(n_in, S * n_out)).reshape(len(X), S, n_out)
                z = z.transpose(1, 0, 2) + b[:, None, :]
            else:
                z = h @ W + b[:, None, :]
            if k < len(params) - 1:
                h = act(z)
                inputs.append(h)
            else:
                h = z
        return h, inputs

    def nll_and_delta(self, f: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per-example NLL ``(S, N)`` and ``dNLL/df : (S, N, n_out)`` for outputs ``f : (S, N, n_out)``.

        ``y``: (N,) codes in {0, 1} (bernoulli), {0..K-1} (categorical), or real targets (gaussian).
        """
        if self.likelihood == "bernoulli":
            z = f[..., 0]
            nll = np.logaddexp(0.0, z) - y * z
            delta = (scipy.special.expit(z) - y)[..., None]
        elif self.likelihood == "categorical":
            lse = scipy.special.logsumexp(f, axis=-1)
            idx = np.arange(f.shape[1])
            nll = lse - f[:, idx, y]
            delta = np.exp(f - lse[..., None])
            delta[:, idx, y] -= 1.0
        else:
            tau = self.noise_precision
            r = f[..., 0] - y
            nll = 0.5 * tau * r * r - 0.5 * np.log(tau) + 0.5 * np.log(2 * np.pi)
            delta = (tau * r)[..., None]
        # float targets would promote float32 outputs; back-propagation stays in the outputs' precision
        return nll, delta.astype(f.dtype, copy=False)

    def nll(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Per-example negative log-likelihood ``(S, N)`` at weight samples ``theta : (S, D)``."""
        f, _ = self.forward(theta, X)
        return self.nll_and_delta(f, y)[0]

    def per_example_grads(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, "FactoredGrads"]:
        """Per-example NLL ``(S, N)`` and its per-example gradients, factored, by back-propagation."""
        grad_act = ACTIVATIONS[self.activation][1]
        f, inputs = self.forward(theta, X)
        nll, delta = self.nll_and_delta(f, y)
        params = self.layout.unflatten(theta)
        deltas = [delta]
        for k in range(len(params) - 1, 0, -1):
            W = params[k][0]
            delta = (delta @ W.transpose(0, 2, 1)) * grad_act(inputs[k])
            deltas.append(delta)
        return nll, FactoredGrads(self.layout, inputs, deltas[::-1])

    # ------------------------------------------------------------------ Gauss-Newton
    def output_hessian_root(self, f: np.ndarray) -> np.ndarray:
        """A square root ``R : (S, N, n_out, K)`` of the Hessian of the NLL in the outputs, per sample and example:
        ``R R^T = d^2 NLL / df df^T``.

        - ``bernoulli``: ``K = 1``, ``sqrt(p (1 - p))`` with ``p = sigmoid(f)``;
        - ``gaussian``: ``K = 1``, ``sqrt(tau)``;
        - ``categorical``: ``K = n_out`` columns ``sqrt(p_j) (e_j - p)``, so that
          ``R R^T = diag(p) - 2 p p^T + p p^T sum_j p_j = diag(p) - p p^T``.

        With canonical links the output Hessian does not depend on the label.
        """
        if self.likelihood == "bernoulli":
            z = f[..., 0]
            # sigmoid(z) sigmoid(-z) = p (1 - p), without the cancellation of 1 - p when p is near 1
            return np.sqrt(scipy.special.expit(z) * scipy.special.expit(-z))[..., None, None]
        if self.likelihood == "gaussian":
            return np.full((*f.shape, 1), np.sqrt(self.noise_precision))
        p = scipy.special.softmax(f, axis=-1)
        root = np.sqrt(p)
        R = -p[..., :, None] * root[..., None, :]  # R[a, j] = -p_a sqrt(p_j)
        K = f.shape[-1]
        R[..., np.arange(K), np.arange(K)] += root
        return R

    def ggn_factors(self, theta: np.ndarray, X: np.ndarray) -> "FactoredGrads":
        """Factors of the per-example generalized Gauss-Newton matrices, ``G G^T = sum_si J_si^T H_si J_si``.

        ``J_si`` is the Jacobian of the outputs in theta and ``H_si = R_si R_si^T`` the output Hessian
        (:meth:`output_hessian_root`), at weight sample s and example i. The columns of ``J^T R`` are obtained by
        back-propagating each column of ``R`` in place of the output gradient ``delta``, through the same
        per-example backprop as :meth:`per_example_grads`. The result is a ``FactoredGrads`` whose sample axis
        enumerates (sample s, Hessian column k) as ``s K + k``; it has ``K`` times the columns of the gradients.
        For a network without hidden layer this is the exact Hessian of the NLL (e.g. ``p (1 - p) x~ x~^T`` for
        logistic regression); otherwise the Gauss-Newton part of it, which is PSD.
        """
        grad_act = ACTIVATIONS[self.activation][1]
        f, inputs = self.forward(theta, X)
        R = self.output_hessian_root(f)
        S, N, n_out, K = R.shape
        delta = R.transpose(0, 3, 1, 2).reshape(S * K, N, n_out)
        params = self.layout.unflatten(theta)
        deltas = [delta]
        for k in range(len(params) - 1, 0, -1):
            W = params[k][0]  # (S, n_in, n_out): the K columns of sample s go through sample s's weights
            n_in = W.shape[1]
            back = (delta.reshape(S, K * N, -1) @ W.transpose(0, 2, 1)).reshape(S, K, N, n_in)
            delta = (back * grad_act(inputs[k])[:, None]).reshape(S * K, N, n_in)
            deltas.append(delta)
        # hidden-layer inputs are per sample: repeat them for the K columns of each sample (the first layer's
        # input X is shared by all)
        inputs = [inputs[0], *(np.repeat(a, K, axis=0) for a in inputs[1:])]
        return FactoredGrads(self.layout, inputs, deltas[::-1])


def _rows(a: np.ndarray) -> np.ndarray:
    """``(S, N, n) -> (S N, n)``: sample-major rows, the column order of G."""
    return a.reshape(-1, a.shape[-1])


class FactoredGrads:
    """Per-example gradients ``G : (D, S N)`` of one minibatch, held as per-layer inputs and output gradients.

    Column ``(s, i)`` (sample-major) of ``G`` is the gradient of example ``i``'s NLL at weight sample ``s``.
    ``inputs[l]`` is ``(N, n_in)`` when shared by all samples (the first layer) or ``(S, N, n_in)``;
    ``deltas[l]`` is ``(S, N, n_out)``. For a dense layer the blocks of ``G^T G`` are elementwise products of
    input and output-gradient Grams, ``(A A^T + 1) * (Delta Delta^T)`` (the 1 for the bias), and ``U^T G``,
    ``G W`` and ``diag(G G^T)`` are products with ``A`` and ``Delta``; none needs ``G`` itself.
    """

    def __init__(self, layout: Layout, inputs: list[np.ndarray], deltas: list[np.ndarray]):
        self.layout = layout
        self.inputs = inputs
        self.deltas = deltas
        self.n_samples, self.n_examples = deltas[0].shape[:2]
        self._augmented = None

    @property
    def n_columns(self) -> int:
        return self.n_samples * self.n_examples

    def _each(self):
        for s, A, Dl in zip(self.layout.layers, self.inputs, self.deltas):
            yield s, A, Dl, A.ndim == 2

    def _each_augmented(self):
        """Per layer: its slices, the input with a column of ones appended as rows ``[a^T, 1]`` (``(N, n_in + 1)``
        when shared, else ``(S N, n_in + 1)``), its output gradients and whether the input is shared.

        A layer's weights and bias are consecutive in the parameter vector, the bias after the ``n_in`` weight
        rows, so ``[W; b]`` is the ``(n_in + 1, n_out)`` block from ``s.W.start`` to ``s.b.stop``: with the ones
        column, products with the weights and the bias are one GEMM, without a broadcast pass for the bias. Built
        once per minibatch (block Lanczos multiplies by ``G`` and ``G^T`` several times)."""
        if self._augmented is None:
            self._augmented = []
            for A in self.inputs:
                rows = A if A.ndim == 2 else _rows(A)
                aug = np.empty((rows.shape[0], rows.shape[1] + 1), dtype=rows.dtype)
                aug[:, :-1] = rows
                aug[:, -1] = 1.0
                self._augmented.append(aug)
        for s, aug, Dl, A in zip(self.layout.layers, self._augmented, self.deltas, self.inputs):
            yield s, aug, Dl, A.ndim == 2

    def sum(self, scale: float = 1.0) -> np.ndarray:
        """``scale G 1 : (D,)``, the gradient summed over examples and samples (and scaled)."""
        out = np.empty(self.layout.n_params, dtype=self.deltas[0].dtype)
        for s, A, Dl, shared in self._each():
            # the scale goes on the small output gradients, and the products land in ``out`` directly: at
            # D of 1e5 and more, each extra pass over a D-vector costs about as much as the products
            Dl = Dl * scale if scale != 1.0 else Dl
            W = out[s.W].reshape(s.n_in, s.n_out)
            if shared:
                np.matmul(A.T, Dl.sum(0), out=W)
            else:
                np.matmul(_rows(A).T, _rows(Dl), out=W)
            out[s.b] = Dl.sum((0, 1))
        return out

    def sample_sums(self, scale: float = 1.0) -> np.ndarray:
        """``(S, D)``: row s is ``scale sum_i g_si``, the (scaled) minibatch gradient at weight sample s."""
        S = self.n_samples
        out = np.empty((S, self.layout.n_params), dtype=self.deltas[0].dtype)
        for s, A, Dl, shared in self._each():
            Dl = Dl * scale if scale != 1.0 else Dl
            At = A.T if shared else A.transpose(0, 2, 1)
            W = out[:, s.W].reshape(S, s.n_in, s.n_out)  # a view: each sample's block is contiguous, row-major
            np.matmul(At, Dl, out=W)
            out[:, s.b] = Dl.sum(1)
        return out

    def sq_sum(self) -> np.ndarray:
        """``diag(G G^T) : (D,)``."""
        out = np.empty(self.layout.n_params, dtype=self.deltas[0].dtype)
        for s, A, Dl, shared in self._each():
            D2 = Dl * Dl
            if shared:
                out[s.W] = ((A * A).T @ D2.sum(0)).ravel()
            else:
                out[s.W] = (_rows(A * A).T @ _rows(D2)).ravel()
            out[s.b] = D2.sum((0, 1))
        return out

    def gram(self) -> np.ndarray:
        """``G^T G : (S N, S N)``."""
        S, N = self.n_samples, self.n_examples
        out = np.zeros((S * N, S * N), dtype=self.deltas[0].dtype)
        for s, A, Dl, shared in self._each():
            Df = Dl.reshape(S * N, -1)
            if shared:
                AA = A @ A.T + 1.0
                AA = np.tile(AA, (S, S))
            else:
                Af = A.reshape(S * N, -1)
                AA = Af @ Af.T + 1.0
            out += AA * (Df @ Df.T)
        return out

    def left(self, U: np.ndarray) -> np.ndarray:
        """``U^T G : (k, S N)`` for ``U : (D, k)`` (fastest when ``U`` is Fortran-ordered, i.e. ``U.T``
        C-contiguous, as :meth:`right` returns it)."""
        S, N = self.n_samples, self.n_examples
        Ut = U.T
        k = Ut.shape[0]
        out = np.zeros((k, S, N), dtype=np.result_type(U, self.deltas[0]))
        for s, A, Dl, shared in self._each():
            Uk = Ut[:, s.W].reshape(k, s.n_in, s.n_out)
            if shared:
                AU = np.matmul(A, Uk)  # (k, N, n_out): a_i^T U_k for each k
                out += np.einsum("kno,sno->ksn", AU, Dl)
            else:
                AU = np.matmul(_rows(A), Uk).reshape(k, S, N, s.n_out)
                out += np.einsum("ksno,sno->ksn", AU, Dl)
            out += np.einsum("ko,sno->ksn", Ut[:, s.b], Dl)
        return out.reshape(k, S * N)

    def right(self, Wt: np.ndarray) -> np.ndarray:
        """``G Wt : (D, k)`` for ``Wt : (S N, k)``, returned Fortran-ordered (its transpose is C-contiguous).

        One GEMM per column and layer, written in place: for a dense layer column ``j`` is
        ``A^T (Delta * w_j)`` (with the S samples summed first where the input is shared).
        """
        S, N = self.n_samples, self.n_examples
        k = Wt.shape[1]
        w = Wt.reshape(S, N, k)
        out = np.empty((k, self.layout.n_params), dtype=np.result_type(Wt, self.deltas[0]))
        for s, A, Dl, shared in self._each():
            if shared:
                # sum_s w[s, n, j] delta[s, n, :] for every (n, j): (N, k, n_out)
                Dw = np.matmul(w.transpose(1, 2, 0), Dl.transpose(1, 0, 2))
                AT = A.T
                for j in range(k):
                    np.matmul(AT, Dw[:, j, :], out=out[j, s.W].reshape(s.n_in, s.n_out))
            else:
                AT, Dr, wr = _rows(A).T, _rows(Dl), w.reshape(S * N, k)
                for j in range(k):
                    np.matmul(AT, Dr * wr[:, j : j + 1], out=out[j, s.W].reshape(s.n_in, s.n_out))
            out[:, s.b] = np.einsum("snk,sno->ko", w, Dl)
        return out.T

    def matmat(self, V: np.ndarray) -> np.ndarray:
        """``G V : (D, k)`` (C-ordered) for ``V : (S N, k)``, for small k: one GEMM per layer.

        Layer rows ``(i, o)`` of column ``j`` are ``sum_n a_n[i] delta_n[o] v_n[j]``, i.e. ``A^T`` times the
        ``(rows, n_out k)`` array ``delta * v``; a shared input first sums ``delta * v`` over the S samples.
        """
        S, N = self.n_samples, self.n_examples
        k = V.shape[1]
        w = V.reshape(S, N, k)
        out = np.empty((self.layout.n_params, k), dtype=np.result_type(V, self.deltas[0]))
        for s, aug, Dl, shared in self._each_augmented():
            if shared:
                Z = np.matmul(Dl.transpose(1, 2, 0), w.transpose(1, 0, 2))  # (N, n_out, k), summed over samples
            else:
                Z = _rows(Dl)[:, :, None] * w.reshape(S * N, 1, k)  # (S N, n_out, k)
            # weight rows and bias rows together: [A, 1]^T Z (the bias rows are the sums of Z over examples)
            block = out[s.W.start : s.b.stop].reshape(s.n_in + 1, s.n_out * k)
            np.matmul(aug.T, Z.reshape(Z.shape[0], -1), out=block)
        return out

    def rmatmat(self, W: np.ndarray) -> np.ndarray:
        """``G^T W : (S N, k)`` for ``W : (D, k)``, for small k: entry ``(s n, j)`` of a layer is
        ``a_sn^T W_j delta_sn + b_j^T delta_sn`` with ``W_j`` the layer's ``(n_in, n_out)`` block of column j."""
        S, N = self.n_samples, self.n_examples
        k = W.shape[1]
        # row-major, so each layer's block reshapes to (n_in, n_out k) without a strided gather (a column slice of
        # a Fortran-ordered basis, as block Lanczos passes, costs three times the whole product otherwise)
        W = np.ascontiguousarray(W)
        out = np.zeros((S, N, k), dtype=np.result_type(W, self.deltas[0]))
        for s, aug, Dl, shared in self._each_augmented():
            Wb = W[s.W.start : s.b.stop].reshape(s.n_in + 1, s.n_out * k)  # [W_j; b_j] of every column j
            if shared:
                Y = (aug @ Wb).reshape(N, s.n_out, k)  # (N, n_out, k)
                out += np.matmul(Dl.transpose(1, 0, 2), Y).transpose(1, 0, 2)
            else:
                Y = (aug @ Wb).reshape(S * N, s.n_out, k)
                if s.n_out == 1:  # a batched matmul of 1 x 1 matrices costs far more than the product
                    out += (Y[:, 0, :] * _rows(Dl)).reshape(S, N, k)
                else:
                    out += np.matmul(_rows(Dl)[:, None, :], Y).reshape(S, N, k)
        return out.reshape(S * N, k)

    def gram_flops(self) -> int:
        """Approximate multiply-adds of :meth:`gram`."""
        S, N = self.n_samples, self.n_examples
        total = 0
        for s, A, Dl, shared in self._each():
            total += (N * N * s.n_in if shared else (S * N) ** 2 * s.n_in) + (S * N) ** 2 * (s.n_out + 1)
        return total

    def matmat_flops(self) -> int:
        """Approximate multiply-adds of one column of :meth:`matmat` plus :meth:`rmatmat`."""
        S, N = self.n_samples, self.n_examples
        total = 0
        for s, A, Dl, shared in self._each():
            rows = N if shared else S * N
            total += 2 * rows * s.n_in * s.n_out + 2 * S * N * s.n_out
        return total

    def dense(self) -> np.ndarray:
        """``G : (D, S N)`` materialised, for small D: each layer's rows are the outer products
        ``a_si delta_si^T`` laid out as ``(n_in, n_out)`` blocks, followed by the bias rows ``delta_si``."""
        S, N = self.n_samples, self.n_examples
        out = np.empty((self.layout.n_params, S * N), dtype=self.deltas[0].dtype)
        for s, A, Dl, shared in self._each():
            block = out[s.W].reshape(s.n_in, s.n_out, S, N)
            if shared:
                np.multiply(A.T[:, None, None, :], Dl.transpose(2, 0, 1)[None], out=block)
            else:
                np.multiply(A.transpose(2, 0, 1)[:, None], Dl.transpose(2, 0, 1)[None], out=block)
            out[s.b] = Dl.transpose(2, 0, 1).reshape(s.n_out, S * N)
        return out

    def combine_samples(self) -> "FactoredGrads":
        """An equivalent factor ``G~`` with ``G~ G~^T = G G^T`` and fewer columns, for a network without hidden
        layer.

        There every sample sees the same input ``x_i``, so ``sum_s g_si g_si^T = x~_i x~_i^T (x) C_i`` with
        ``C_i = sum_s delta_si delta_si^T`` (K x K) and ``x~ = (x, 1)``. Factoring ``C_i = R_i R_i^T`` leaves
        ``min(S, K)`` columns per example instead of S: for a binary model one column, ``sqrt(sum_s delta_si^2)``.
        Valid for ``G G^T`` and everything derived from it, not for ``G 1`` (take :meth:`sum` first).
        """
        if len(self.inputs) != 1 or self.inputs[0].ndim != 2:
            raise ValueError("combine_samples needs a network without hidden layers")
        Dl = self.deltas[0]
        S, N, K = Dl.shape
        if K == 1:
            R = np.sqrt(np.einsum("sno,sno->n", Dl, Dl))[None, :, None]
        elif S > K:
            C = np.einsum("sna,snb->nab", Dl, Dl)
            lam, V = np.linalg.eigh(C)
            R = (V * np.sqrt(np.maximum(lam, 0.0))[:, None, :]).transpose(2, 0, 1)  # (K, N, K)
        else:
            return self
        return FactoredGrads(self.layout, self.inputs, [R])
