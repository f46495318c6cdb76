"""Gaussian posteriors over the flat parameter vector, as frozen dataclasses of arrays.

Four kinds, each stored in the form its methods produce:

- ``LowRankGaussian`` (``"lowrank"``): precision ``U U^T + diag(d)`` (SLANG);
- ``DiagonalGaussian`` (``"diagonal"``): ``mean`` and ``log_sigma``, the log standard deviations; every
  mean-field posterior (``mf-*``, ``exact-mf``, ``bbb``) is stored this way, whatever its method updates;
- ``FullGaussian`` (``"full"``): precision ``chol chol^T`` by its lower Cholesky factor (``full-*``, ``exact-full``);
- ``KTiedGaussian`` (``"ktied"``): a diagonal Gaussian whose standard deviations of each weight matrix are the
  rank-k product ``U V^T`` (the k-tied Normal; ``ktied`` training and ``slang compress``).

Each kind supplies what evaluation, comparison and compression need, at a cost linear in D where its structure
allows (the full kind is O(D^2) to O(D^3) by nature): drawing samples, marginal variances, per-input quadratic
forms ``x^T Sigma x`` (for linear models), and the KL divergence to the diagonal Gaussian prior (for the ELBO).
For the KL divergence between any two kinds (``slangcli.gaussian.divergence``) each also writes its precision as
``diag(d) + U U^T`` (:meth:`precision_terms`; ``d`` may be zero), multiplies by its covariance (:meth:`cov_times`)
and gives ``log |precision|`` (:meth:`precision_logdet`).

Each kind also carries its run-file encoding (``docs/FORMAT.md``, ``/posterior``): ``encoding`` names its
``encoding-type``, :meth:`stored_arrays` gives its datasets, and the classmethod ``from_group(reader, group, model)``
reads them back and checks them against the model. ``reader`` is ``slangcli.runfile.io``'s checked access to the file:
``reader.array(group, name, shape=None)`` (a numeric dataset of finite values within ``MAX_ABS_VALUE`` in
magnitude, of ``shape`` when given),
``reader.dataset_shape(group, name)`` (None when there is no such dataset) and ``reader.fail(message)`` (raises
the file's FormatError), so every problem is one message naming the file (and the group: ``group.name``, which is
``/posterior`` or, in a mixture, ``/posterior/member_k``). The kinds are registered by name in :data:`POSTERIORS`;
``slangcli.runfile.io`` writes and reads every kind registered there.

A fifth kind is made of the others: ``MixtureGaussian`` (``"mixture"``), the equal-weight mixture of K posteriors
of the kinds above (``slang fit --members K``), registered in :data:`COMPOSITES`. Its encoding holds its members
as groups (``stored_groups``) and its count as an attribute (``stored_attributes``); its reader also uses
``reader.attr(group, name, default)``, ``reader.subgroup(group, name)`` and ``reader.check_version(group, where)``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import scipy.linalg

from slangcli.gaussian import lowrank
from slangcli.models import Layout

# Largest D for which a D x D matrix is formed (full-Gaussian methods): 800 MB per float64 matrix, and each
# Cholesky factorisation or triangular inverse is O(D^3), about a minute per step at D = 10 000 on two cores.
MAX_FULL_PARAMS = 10_000
# |log_sigma| above this would overflow sigma^2 or 1 / sigma^2 (exp(2 * 354) > the largest float64): a run file's
# log standard deviations are refused outside [-300, 300]
MAX_ABS_LOG_SIGMA = 300.0
# a stored value beyond this magnitude is refused when a run file is read: its square (variances, quadratic forms,
# the KL's mean^2 term) would overflow float64, and no fit comes anywhere near it
MAX_ABS_VALUE = 1e150


# Every ``sample`` returns its n draws as the rows of a C-contiguous ``(n, D)`` array: the network slices each
# sample's layer matrices out of its row, and those are views only when the row is contiguous (at MNIST scale
# re-copying them for every chunk of scored rows cost more than the forward pass's arithmetic). The standard
# normals are drawn in that layout too, so no (D, n) array is ever transposed in memory.


def _standard_normal_columns(rng: np.random.Generator, D: int, n: int) -> np.ndarray:
    """``(D, n)`` standard normals, Fortran-ordered: the transpose of an ``(n, D)`` draw."""
    return rng.standard_normal((n, D)).T


def _scaled_rows(rng: np.random.Generator, n: int, mean: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """``n`` draws ``mean + sigma * z`` of a diagonal Gaussian, ``(n, D)``."""
    theta = rng.standard_normal((n, mean.size))
    theta *= sigma
    theta += mean
    return theta


def _kl_to_diagonal_prior(mean, variances, precision_logdet, prior_precision) -> float:
    """``KL(N(mean, Sigma) || N(0, diag(prior_precision)^{-1}))`` from ``diag(Sigma)`` and ``log |Sigma^{-1}|``."""
    return 0.5 * float(
        np.sum(prior_precision * variances) + np.sum(prior_precision * mean**2) - mean.size
        + precision_logdet - np.sum(np.log(prior_precision))
    )


@dataclass(frozen=True)
class LowRankGaussian:
    """``N(mean, (U U^T + diag d)^{-1})``: SLANG's posterior (SLANG eq. 3). ``U : (D, L)``, ``d : (D,)``."""

    mean: np.ndarray
    U: np.ndarray
    d: np.ndarray

    kind = "lowrank"
    encoding = "lowrank-gaussian"  # the run file's encoding-type (slangcli.runfile.io)

    def stored_arrays(self) -> dict:
        """The datasets of its run-file encoding, by name."""
        return {"mean": self.mean, "U": self.U, "d": self.d}

    @classmethod
    def from_group(cls, reader, group, model) -> "LowRankGaussian":
        """The posterior stored in ``group`` (a ``/posterior`` group), checked against ``model``: shapes, finite
        values, ``d >= 1 / MAX_ABS_VALUE``."""
        D = model.n_params
        mean = reader.array(group, "mean", (D,))
        shape = reader.dataset_shape(group, "U")
        if shape is None or len(shape) != 2 or shape[0] != D:
            reader.fail(f"{group.name}/U must have shape ({D}, L)")
        U = reader.array(group, "U")
        d = reader.array(group, "d", (D,))
        if not (d > 0).all():
            reader.fail(f"{group.name}/d must be positive")
        if not (d >= 1 / MAX_ABS_VALUE).all():  # the diagonal's variances 1 / d bounded like every stored value
            reader.fail(f"{group.name}/d must be at least {1 / MAX_ABS_VALUE:g} (1 / d, a variance, at most "
                        f"{MAX_ABS_VALUE:g})")
        return cls(mean=mean, U=U, d=d)

    def std(self) -> np.ndarray:
        """Marginal standard deviations ``(D,)`` (Woodbury; no D x D matrix)."""
        return np.sqrt(self.marginal_variances())

    def n_variational_params(self) -> int:
        """``D + D L + D``: mean, U and d."""
        return self.mean.size * (2 + self.U.shape[1])

    @property
    def n_params(self) -> int:
        return self.mean.size

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` draws, ``(n, D)``."""
        eps = lowrank.sample_noise(self.U, self.d, _standard_normal_columns(rng, self.mean.size, n))
        eps += self.mean[:, None]
        return eps.T

    def marginal_variances(self) -> np.ndarray:
        return lowrank.marginal_variances(self.U, self.d)

    def quadratic_forms(self, X: np.ndarray) -> np.ndarray:
        """``x_n^T Sigma x_n`` for each row of ``X : (N, D)``."""
        return lowrank.quadratic_forms(self.U, self.d, X)

    def kl_to_prior(self, prior_precision: np.ndarray) -> float:
        return lowrank.kl_to_diagonal_prior(self.mean, self.U, self.d, prior_precision)

    def precision_terms(self) -> tuple[np.ndarray, np.ndarray]:
        """``(d : (D,), U : (D, k))`` with precision ``diag(d) + U U^T``."""
        return self.d, self.U

    def cov_times(self, V: np.ndarray) -> np.ndarray:
        """``Sigma V`` for ``V : (D, k)``, O(D L^2 + D L k) (Woodbury)."""
        return lowrank.solve(self.U, self.d, V)

    def precision_logdet(self) -> float:
        """``log |Sigma^{-1}|``."""
        return lowrank.logdet(self.U, self.d)


@dataclass(frozen=True)
class DiagonalGaussian:
    """``N(mean, diag(exp(2 log_sigma)))``: a mean-field Gaussian. ``mean, log_sigma : (D,)``."""

    mean: np.ndarray
    log_sigma: np.ndarray

    kind = "diagonal"
    encoding = "diagonal-gaussian"

    def stored_arrays(self) -> dict:
        return {"mean": self.mean, "log_sigma": self.log_sigma}

    @classmethod
    def from_group(cls, reader, group, model) -> "DiagonalGaussian":
        """Checked: shapes, finite values, ``log_sigma`` in [-300, 300]."""
        D = model.n_params
        mean = reader.array(group, "mean", (D,))
        log_sigma = reader.array(group, "log_sigma", (D,))
        if not (np.abs(log_sigma) <= MAX_ABS_LOG_SIGMA).all():
            reader.fail(f"{group.name}/log_sigma must lie in [-{MAX_ABS_LOG_SIGMA:g}, {MAX_ABS_LOG_SIGMA:g}] "
                        "(sigma^2 and 1 / sigma^2 finite)")
        return cls(mean=mean, log_sigma=log_sigma)

    def std(self) -> np.ndarray:
        return np.exp(self.log_sigma)

    def n_variational_params(self) -> int:
        """``2 D``: mean and log sigma."""
        return 2 * self.mean.size

    @classmethod
    def from_precision(cls, mean: np.ndarray, d: np.ndarray) -> "DiagonalGaussian":
        """The diagonal Gaussian with precisions ``d`` (as the natural-gradient methods keep them)."""
        return cls(mean=mean.copy(), log_sigma=-0.5 * np.log(d))

    @property
    def n_params(self) -> int:
        return self.mean.size

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return _scaled_rows(rng, n, self.mean, np.exp(self.log_sigma))

    def marginal_variances(self) -> np.ndarray:
        return np.exp(2.0 * self.log_sigma)

    def quadratic_forms(self, X: np.ndarray) -> np.ndarray:
        return (X * X) @ self.marginal_variances()

    def kl_to_prior(self, prior_precision: np.ndarray) -> float:
        return _kl_to_diagonal_prior(self.mean, self.marginal_variances(), self.precision_logdet(), prior_precision)

    def precision_terms(self) -> tuple[np.ndarray, np.ndarray]:
        return np.exp(-2.0 * self.log_sigma), np.zeros((self.mean.size, 0))

    def cov_times(self, V: np.ndarray) -> np.ndarray:
        var = self.marginal_variances()
        return V * (var if V.ndim == 1 else var[:, None])

    def precision_logdet(self) -> float:
        return -2.0 * float(np.sum(self.log_sigma))


@dataclass(frozen=True)
class FullGaussian:
    """``N(mean, (chol chol^T)^{-1})`` with ``chol : (D, D)`` the lower Cholesky factor of the precision."""

    mean: np.ndarray
    chol: np.ndarray

    kind = "full"
    encoding = "full-gaussian"

    def stored_arrays(self) -> dict:
        return {"mean": self.mean, "chol": self.chol}

    @classmethod
    def from_group(cls, reader, group, model) -> "FullGaussian":
        """Checked: shapes, finite values, ``chol`` lower triangular with a positive diagonal."""
        D = model.n_params
        mean = reader.array(group, "mean", (D,))
        chol = reader.array(group, "chol", (D, D))
        if np.any(np.triu(chol, 1)):
            reader.fail(f"{group.name}/chol must be lower triangular (nonzero entries above the diagonal)")
        if not (np.diag(chol) > 0).all():
            reader.fail(f"{group.name}/chol must have a positive diagonal")
        return cls(mean=mean, chol=chol)

    def std(self) -> np.ndarray:
        return np.sqrt(self.marginal_variances())

    def n_variational_params(self) -> int:
        """``D + D (D + 1) / 2``: mean and the precision's Cholesky factor."""
        D = self.mean.size
        return D + D * (D + 1) // 2

    @classmethod
    def from_precision(cls, mean: np.ndarray, precision: np.ndarray) -> "FullGaussian":
        return cls(mean=mean.copy(), chol=np.linalg.cholesky(precision))

    @property
    def n_params(self) -> int:
        return self.mean.size

    def _solve_chol(self, V, trans=0):
        return scipy.linalg.solve_triangular(self.chol, V, lower=True, trans=trans, check_finite=False)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        # eps = chol^{-T} z has covariance chol^{-T} chol^{-1} = (chol chol^T)^{-1}
        eps = self._solve_chol(_standard_normal_columns(rng, self.mean.size, n), trans=1)
        return np.ascontiguousarray((eps + self.mean[:, None]).T)

    def marginal_variances(self) -> np.ndarray:
        """``diag(Sigma)``: the squared column norms of ``chol^{-1}``, O(D^3)."""
        inv = self._solve_chol(np.eye(self.mean.size))
        return np.einsum("kd,kd->d", inv, inv)

    def quadratic_forms(self, X: np.ndarray) -> np.ndarray:
        """``x_n^T Sigma x_n = |chol^{-1} x_n|^2``, O(N D^2)."""
        T = self._solve_chol(X.T)
        return np.einsum("dn,dn->n", T, T)

    def kl_to_prior(self, prior_precision: np.ndarray) -> float:
        return _kl_to_diagonal_prior(self.mean, self.marginal_variances(), self.precision_logdet(), prior_precision)

    def precision_terms(self) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(self.mean.size), self.chol

    def cov_times(self, V: np.ndarray) -> np.ndarray:
        return scipy.linalg.cho_solve((self.chol, True), V, check_finite=False)

    def precision_logdet(self) -> float:
        return 2.0 * float(np.sum(np.log(np.diag(self.chol))))


@dataclass(frozen=True)
class KTiedGaussian:
    """The k-tied Normal (Swiatkowski et al., eq. 5): ``N(mean, diag(sigma^2))`` where the standard deviations of
    layer l's weight matrix ``W_l : (m, n)`` (``m = n_in``, ``n = n_out``, row-major in the flat layout) are

        sigma_{W_l} = max(U_l V_l^T, floor_l),   U_l : (m, k_l),  V_l : (n, k_l),

    and the biases keep their own ``bias_log_sigma`` (all layers' biases in layer order, ``(sum n_l,)``).

    Trained k-tied posteriors have ``U, V > 0`` (through the log domain) and ``floor = 0``: the paper's family,
    a subset of the mean field. A posterior compressed from another by a truncated SVD (``slangcli.compress.ktied``)
    has signed singular vectors, whose product can be negative, and a positive ``floor`` per layer that keeps
    every standard deviation positive. ``sizes`` are the network's layer sizes (``MLP.sizes``), which fix the
    layout. Everything else is that of the equivalent :class:`DiagonalGaussian` (:meth:`as_diagonal`).
    """

    mean: np.ndarray
    U: tuple
    V: tuple
    bias_log_sigma: np.ndarray
    floor: np.ndarray
    sizes: tuple

    kind = "ktied"
    encoding = "ktied-gaussian"

    def stored_arrays(self) -> dict:
        """``mean``, ``bias_log_sigma``, ``floor`` and ``U_l``, ``V_l`` for each layer l = 0, 1, ..."""
        out = {"mean": self.mean, "bias_log_sigma": self.bias_log_sigma, "floor": self.floor}
        for l, (U, V) in enumerate(zip(self.U, self.V)):
            out[f"U_{l}"], out[f"V_{l}"] = U, V
        return out

    @classmethod
    def from_group(cls, reader, group, model) -> "KTiedGaussian":
        """Checked against the model's layout: per-layer factor shapes, a rank >= 1, finite values, floors >= 0,
        positive factors where a layer has no floor, and positive standard deviations whose logarithms lie in
        [-300, 300] like ``log_sigma``."""
        g, layers = group, model.layout.layers
        L, B = len(layers), sum(s.n_out for s in layers)
        mean = reader.array(g, "mean", (model.n_params,))
        bias_log_sigma = reader.array(g, "bias_log_sigma", (B,))
        if not (np.abs(bias_log_sigma) <= MAX_ABS_LOG_SIGMA).all():
            reader.fail(f"{group.name}/bias_log_sigma must lie in [-{MAX_ABS_LOG_SIGMA:g}, {MAX_ABS_LOG_SIGMA:g}]")
        floor = reader.array(g, "floor", (L,))
        if not (floor >= 0).all():
            reader.fail(f"{group.name}/floor must be >= 0")
        expected = {f"{x}_{l}" for l in range(L) for x in "UV"}
        extra = sorted(n for n in g if n.startswith(("U_", "V_")) and n not in expected)
        if extra:
            reader.fail(f"{group.name}/{extra[0]} does not belong to the model's {L} layers")
        U, V = [], []
        for l, s in enumerate(layers):
            for name, rows in ((f"U_{l}", s.n_in), (f"V_{l}", s.n_out)):
                shape = reader.dataset_shape(g, name)
                if shape is not None and (len(shape) != 2 or shape[0] != rows or shape[1] < 1):
                    reader.fail(f"{group.name}/{name} has shape {shape}, expected ({rows}, k) with k >= 1 "
                                f"(layer {l} is {s.n_in} x {s.n_out})")
            u, v = reader.array(g, f"U_{l}"), reader.array(g, f"V_{l}")
            if u.shape[1] != v.shape[1]:
                reader.fail(f"{group.name}/U_{l} and V_{l} have different ranks ({u.shape[1]} and {v.shape[1]})")
            if floor[l] == 0 and not ((u > 0).all() and (v > 0).all()):
                reader.fail(f"{group.name}/U_{l} and V_{l} must be positive where the layer has no floor (floor 0)")
            U.append(u)
            V.append(v)
        posterior = cls(mean=mean, U=tuple(U), V=tuple(V), bias_log_sigma=bias_log_sigma, floor=floor,
                        sizes=tuple(model.sizes))
        for l, A in enumerate(posterior.sigma_matrices()):
            with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
                if not (np.isfinite(A).all() and (A > 0).all() and (np.abs(np.log(A)) <= MAX_ABS_LOG_SIGMA).all()):
                    reader.fail(f"{group.name}/U_{l} V_{l}^T gives standard deviations that are not positive and "
                                f"finite with log in [-{MAX_ABS_LOG_SIGMA:g}, {MAX_ABS_LOG_SIGMA:g}]")
        return posterior

    def std(self) -> np.ndarray:
        return self.sigma()

    def n_variational_params(self) -> int:
        """``D + sum_l k_l (m_l + n_l) + B`` (the k-tied paper's Table 1 count, with the biases' standard
        deviations)."""
        return self.mean.size + sum(u.size + v.size for u, v in zip(self.U, self.V)) + self.bias_log_sigma.size

    @property
    def n_params(self) -> int:
        return self.mean.size

    @property
    def layout(self) -> Layout:
        return Layout(tuple(self.sizes))

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(int(u.shape[1]) for u in self.U)

    def sigma_matrices(self) -> list[np.ndarray]:
        """``max(U_l V_l^T, floor_l) : (m, n)`` per layer, O(k m n)."""
        return [np.maximum(u @ v.T, f) for u, v, f in zip(self.U, self.V, self.floor)]

    def sigma(self) -> np.ndarray:
        """The standard deviations ``(D,)`` in the flat layout."""
        out = np.empty(self.mean.size)
        start = 0
        for s, A in zip(self.layout.layers, self.sigma_matrices()):
            out[s.W] = A.ravel()
            out[s.b] = np.exp(self.bias_log_sigma[start : start + s.n_out])
            start += s.n_out
        return out

    def as_diagonal(self) -> DiagonalGaussian:
        """The same distribution as a :class:`DiagonalGaussian`."""
        return DiagonalGaussian(mean=self.mean, log_sigma=np.log(self.sigma()))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return _scaled_rows(rng, n, self.mean, self.sigma())

    def marginal_variances(self) -> np.ndarray:
        return self.sigma() ** 2

    def quadratic_forms(self, X: np.ndarray) -> np.ndarray:
        return (X * X) @ self.marginal_variances()

    def kl_to_prior(self, prior_precision: np.ndarray) -> float:
        return self.as_diagonal().kl_to_prior(prior_precision)

    def precision_terms(self) -> tuple[np.ndarray, np.ndarray]:
        return 1.0 / self.marginal_variances(), np.zeros((self.mean.size, 0))

    def cov_times(self, V: np.ndarray) -> np.ndarray:
        var = self.marginal_variances()
        return V * (var if V.ndim == 1 else var[:, None])

    def precision_logdet(self) -> float:
        return -2.0 * float(np.sum(np.log(self.sigma())))


# The posterior kinds by name: the registry. A kind is its class (the arrays, ``sample``, ``std`` and the rest above,
# and its run-file encoding: ``encoding``, ``stored_arrays``, ``from_group``); adding one is its class and one line
# here. ``slangcli.runfile.io`` writes and reads every kind registered.
POSTERIORS = {
    "lowrank": LowRankGaussian,
    "diagonal": DiagonalGaussian,
    "full": FullGaussian,
    "ktied": KTiedGaussian,
}


@dataclass(frozen=True)
class MixtureGaussian:
    """The equal-weight mixture ``(1/K) sum_k q_k`` of K posteriors of one model (``slang fit --members K``). Each
    member ``q_k`` is a posterior of a registered kind (:data:`POSTERIORS`) fitted on its own, and keeps the noise
    precision (``noise_precision : (K,)``) and the prior precisions (``prior_precision : (K, D)``) its fit ended
    with: learned ones differ between members. ``noise_precision[0]`` and ``prior_precision[0]`` are member 0's,
    which the run's ``/model`` describes.

    Not a Gaussian: it has the mixture's moments (:attr:`mean`; :meth:`marginal_variances`, the mean of the
    members' variances plus the variance of their means) but no precision, quadratic forms or KL divergence in
    closed form. The predictive (``slangcli.predictive``) uses its members through :meth:`components`, each with
    its own noise precision; its training -ELBO is reported per member, each with its own prior.

    Run-file encoding ``mixture``: the attribute ``members`` (K), the datasets ``noise_precision`` and
    ``prior_precision``, and the groups ``member_0`` .. ``member_{K-1}``, each a posterior in its own kind's
    encoding (``docs/FORMAT.md``).
    """

    members: tuple
    noise_precision: np.ndarray
    prior_precision: np.ndarray

    kind = "mixture"
    encoding = "mixture"

    @property
    def n_members(self) -> int:
        return len(self.members)

    @property
    def n_params(self) -> int:
        return self.members[0].mean.size

    @property
    def mean(self) -> np.ndarray:
        """The mixture's mean, the members' average."""
        return np.mean([m.mean for m in self.members], axis=0)

    def marginal_variances(self) -> np.ndarray:
        """The mixture's marginal variances: the mean of the members' plus the variance of their means."""
        means = np.stack([m.mean for m in self.members])
        within = np.mean([m.marginal_variances() for m in self.members], axis=0)
        return within + np.mean((means - means.mean(axis=0)) ** 2, axis=0)

    def std(self) -> np.ndarray:
        return np.sqrt(self.marginal_variances())

    def n_variational_params(self) -> int:
        """The members' variational parameters, all of them."""
        return sum(m.n_variational_params() for m in self.members)

    def components(self, model) -> list[tuple]:
        """``(member, its model, its prior precisions)`` for each member: ``model`` with the member's noise
        precision."""
        return [(member, replace(model, noise_precision=float(tau)), prior)
                for member, tau, prior in zip(self.members, self.noise_precision, self.prior_precision)]

    def stored_attributes(self) -> dict:
        return {"members": self.n_members}

    def stored_arrays(self) -> dict:
        return {"noise_precision": self.noise_precision, "prior_precision": self.prior_precision}

    def stored_groups(self) -> dict:
        """The members, each written as a group in its own kind's encoding."""
        return {f"member_{k}": member for k, member in enumerate(self.members)}

    @classmethod
    def from_group(cls, reader, group, model) -> "MixtureGaussian":
        """Checked: the count ``members`` (a whole number >= 1) against the member groups and the per-member
        arrays; positive precisions, member 0's noise precision that of ``/model``; each member a registered kind
        (not a mixture), read and checked by its own reader."""
        where = group.name
        K = reader.attr(group, "members", None)
        if isinstance(K, (bool, np.bool_)) or not isinstance(K, (int, np.integer)) or K < 1:
            reader.fail(f"{where} lacks a whole number of members >= 1 (attribute 'members', got {K!r})")
        K, D = int(K), model.n_params
        expected = {"noise_precision", "prior_precision", *(f"member_{k}" for k in range(K))}
        extra = sorted(name for name in group if name not in expected)
        if extra:
            found = sum(name.startswith("member_") for name in group)
            reader.fail(f"{where}/{extra[0]} is not part of a mixture of {K} members (attribute 'members'"
                        + (f"; the file holds {found} member groups)" if extra[0].startswith("member_") else ")"))
        missing = [f"member_{k}" for k in range(K) if f"member_{k}" not in group]
        if missing:
            reader.fail(f"{where} lacks the group {missing[0]} (a mixture of {K} members, attribute 'members')")
        noise = reader.array(group, "noise_precision", (K,))
        if not (noise > 0).all():
            reader.fail(f"{where}/noise_precision must be positive")
        if noise[0] != model.noise_precision:
            reader.fail(f"{where}/noise_precision[0] is {float(noise[0])!r}, but /model, the first member's, has "
                        f"{model.noise_precision!r}")
        prior = reader.array(group, "prior_precision", (K, D))
        if not (prior > 0).all():
            reader.fail(f"{where}/prior_precision must be positive")
        kinds = {kind.encoding: kind for kind in POSTERIORS.values()}
        members = []
        for k in range(K):
            sub = reader.subgroup(group, f"member_{k}")
            kind = reader.attr(sub, "encoding-type", None)
            if kind == cls.encoding:
                reader.fail(f"{sub.name} is a mixture; a mixture's members are single posteriors")
            if kind not in kinds:
                reader.fail(f"{sub.name} has unknown encoding-type {kind!r}")
            reader.check_version(sub, sub.name)
            members.append(kinds[kind].from_group(reader, sub, model))
        return cls(members=tuple(members), noise_precision=noise, prior_precision=prior)


# The kinds made of registered kinds: read and written like them (``slangcli.runfile.io``), but not Gaussians (no
# KL divergence between two of them, ``slangcli.gaussian.divergence``).
COMPOSITES = {"mixture": MixtureGaussian}


def is_mixture(posterior) -> bool:
    return isinstance(posterior, MixtureGaussian)


def components(posterior, model, prior_precision) -> list[tuple]:
    """``(posterior, model, prior precisions)`` of each part of ``posterior``: a mixture's members, each with its
    own noise and prior precisions (:meth:`MixtureGaussian.components`), or the posterior itself with ``model`` and
    ``prior_precision``."""
    if is_mixture(posterior):
        return posterior.components(model)
    return [(posterior, model, prior_precision)]
