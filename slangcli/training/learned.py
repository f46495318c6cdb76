"""Hyperparameters learned along with the posterior: the noise precision and the prior precisions.

Both are the maximisers of the ELBO given the current Gaussian ``q = N(mu, Sigma)``, which is how variational EM
treats them (the ELBO is concave in each, with a closed-form optimum):

- **Noise precision** (Gaussian likelihood). The ELBO's terms in tau are
  ``N/2 log tau - tau/2 E_q[sum_n (y_n - f(x_n; theta))^2]``, maximal at ``tau = N / E_q[sum_n r_n^2] = 1 / s``
  with ``s`` the expected squared residual per example. ``s`` is estimated from what every step already computes:
  the mean Gaussian NLL of the minibatch at the step's weight samples from q, ``nll = tau s_t / 2 - log(tau) / 2
  + log(2 pi) / 2`` at the tau the step used, so ``s_t = (2 nll - log(2 pi) + log tau) / tau`` exactly, for every
  step method without touching it. ``s_t`` is unbiased for the current q but noisy (M examples, S samples), so it
  is smoothed: ``s <- s + rho_t (s_t - s)`` with ``rho_t = 1 / min(t, W)``, the running mean of the first W steps
  and then an exponential moving average over about W steps, W one epoch (at most :data:`MAX_WINDOW` steps).
  tau is updated after every step. Once the last step is done, tau is set to the optimum at the final posterior
  itself (:meth:`Learner.finish`: exact for a linear model, from :data:`NOISE_MODEL_DRAWS` weight draws for a
  network), which the run stores: the running estimate follows the minibatches' noise, within a few percent of
  that optimum on small training sets.

  A network starts this update after a **warm-up** (:data:`NOISE_WARMUP`, the first 10 % of its steps). At first
  q is about as wide as the prior, so the sampled weights' residuals are mostly q's own spread; tau taken from them
  falls to ~0.1 on a standardised target, the data then weigh little against the prior, q stays wide and its mean
  smooth, and EM settles in a low fixed point in which a wide q explains the residuals as noise (UCI energy, SLANG,
  scored on held-out training rows: median tau 33 and training -ELBO 0.76 per example without the warm-up, 220 and
  0.35 with it). During the warm-up tau is instead the noise precision of the posterior mean's fit,
  ``N / sum_n (y_n - f(x_n; mu))^2`` over the training rows, set at every epoch end (its initial value until the
  first): it leaves out q's spread, so it is about at or above the EM update's value, and EM approaches its fixed
  point from above. It costs one pass of the mean over the training rows per warm-up epoch.
- **Prior precisions** (empirical Bayes), one per weight matrix, the biases apart (they keep their given
  precision). The ELBO's terms in the precision ``lambda_l`` of the ``n_l`` weights of layer l are
  ``n_l/2 log lambda_l - lambda_l/2 sum_{i in l} (mu_i^2 + Sigma_ii)``, maximal at
  ``lambda_l = n_l / sum_{i in l} (mu_i^2 + Sigma_ii)``: the posterior's mean and marginal variances
  (``posterior.marginal_variances()``), after every epoch.
- **A noise model** (``slang fit --noise-model linear``): a noise precision per prediction, ``tau(x, f) = exp(c +
  w . x + w_f f)`` (``MLP.noise_weights``), fitted once to the trained posterior: the maximiser given q of the
  expected log-likelihood ``sum_n E_q[log tau_n / 2 - tau_n r_n^2 / 2]``, concave in ``(c, w, w_f)``, estimated
  from :data:`NOISE_MODEL_DRAWS` weight draws on at most :data:`NOISE_MODEL_ROWS` training rows, with a standard
  Gaussian prior on ``w`` and ``w_f`` (``c`` starts at the constant optimum and is free). ``--noise-model hidden``
  (the default for a regression network) adds the network's last hidden layer of each draw, ``v . h``, with the
  prior on the weights of its standardised units. The posterior is not refitted: training and its ELBO keep the
  constant noise precision.

:class:`Learner` holds the current values and the record of their trajectory; the training loop
(``slangcli.training.loop.run``) asks it for the problem of each step and tells it each step's loss. Its state is a few
scalars and one vector, stored in checkpoints, so a resumed fit continues bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import scipy.optimize

from slangcli import streams
from slangcli.gaussian.posteriors import components
from slangcli.methods.base import Problem
from slangcli.models import LOG_NOISE_BOUNDS, NOISE_BOUNDS
from slangcli.predictive.metrics import expected_squared_residual, row_chunks
from slangcli.threads import blas_threads

# The smoothing window of the expected squared residual, in steps: one epoch, but at most this many steps, so that
# on large training sets tau still follows the posterior within a fraction of the first epoch.
MAX_WINDOW = 200
# The fraction of a network fit's steps during which tau is the posterior mean's residual precision rather than the
# EM update's (measured on held-out training rows of the UCI folders: docs/LEARNED.md)
NOISE_WARMUP = 0.1
# tau and lambda stay within these bounds: beyond them the float64 arithmetic of a step loses its meaning
BOUNDS = NOISE_BOUNDS
# the noise model's fit: weight draws from q, and at most this many training rows (a seeded subset beyond)
NOISE_MODEL_DRAWS = 50
NOISE_MODEL_ROWS = 20_000
# and at most this many numbers of the draws' last hidden layers for the hidden noise model (64 MiB): fewer rows
# for a wide layer (3 355 for 50 units, 419 for 400)
NOISE_MODEL_ENTRIES = 2**23
# a hidden unit whose spread over the draws and rows is below this fraction of the widest unit's is left out of the
# hidden noise model
SILENT_UNIT = 1e-6
_LOG_2PI = math.log(2.0 * math.pi)


def squared_residual(nll: float, tau: float) -> float:
    """The mean squared residual of a Gaussian-likelihood minibatch from its mean NLL at noise precision ``tau``."""
    return (2.0 * nll - _LOG_2PI + math.log(tau)) / tau


def warmup_steps(model, n_steps: int | None) -> int:
    """The warm-up of a fit of ``n_steps`` steps: :data:`NOISE_WARMUP` of them for a network, none for a linear
    model (whose ELBO has a single optimum) or a solver."""
    return 0 if model.is_linear or not n_steps else int(NOISE_WARMUP * n_steps)


# activations (rows x the widths of the layers) of one forward pass of mean_residual: 16 MB an array
RESIDUAL_CELLS = 1 << 21


def mean_residual(model, mean: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    """The mean squared residual per example of the network at weights ``mean`` on ``(X, y)``.

    The forward pass holds every layer's activations of the rows it is given: all the training rows at once took
    gigabytes for millions of them, so it goes through blocks of rows within ``RESIDUAL_CELLS`` (training data
    within one block, as every data set of the benchmarks is, are computed in one pass, as before)."""
    step = max(1, RESIDUAL_CELLS // sum(model.sizes))
    if len(X) <= step:
        f, _ = model.forward(mean[None, :], X)
        return float(np.mean((f[0, :, 0] - y) ** 2))
    squared = np.empty(len(X))
    for lo in range(0, len(X), step):
        f, _ = model.forward(mean[None, :], X[lo : lo + step])
        squared[lo : lo + step] = (f[0, :, 0] - y[lo : lo + step]) ** 2
    return float(np.mean(squared))


def expected_residual(model, posterior, X: np.ndarray, y: np.ndarray, seed: int) -> float:
    """``E_q[r^2]`` per example on ``(X, y)``: exact for a linear model (``(y - x~ . mu)^2 + x~^T Sigma x~``, ``x~``
    the features with a one for the bias), else the mean over :data:`NOISE_MODEL_DRAWS` weight draws from the
    stream ``(seed, NOISE)`` on at most :data:`NOISE_MODEL_ROWS` rows, drawn without replacement."""
    if model.is_linear:
        return expected_squared_residual(posterior, X, y) / len(X)
    rng = streams.derive_rng(seed, streams.NOISE)
    if len(X) > NOISE_MODEL_ROWS:
        rows = np.sort(rng.choice(len(X), NOISE_MODEL_ROWS, replace=False))
        X, y = X[rows], y[rows]
    theta = posterior.sample(rng, NOISE_MODEL_DRAWS)
    total = 0.0
    for rows in row_chunks(model, len(X), NOISE_MODEL_DRAWS):
        total += float(np.sum((model.forward(theta, X[rows])[0][..., 0] - y[rows]) ** 2))
    return total / (NOISE_MODEL_DRAWS * len(X))


def noise_optimum(mean_squared_residual: float) -> float:
    """``tau = N / E_q[sum r^2]`` given the expected squared residual per example."""
    # (Python's min and max: np.clip costs more than the rest of a small network's learner step)
    return float(min(max(1.0 / max(mean_squared_residual, 1.0 / BOUNDS[1]), BOUNDS[0]), BOUNDS[1]))


def prior_optimum(mean: np.ndarray, variances: np.ndarray, model) -> np.ndarray:
    """``lambda_l = n_l / sum_{i in l} (mu_i^2 + Sigma_ii)`` for each weight matrix l: ``(n_layers,)``."""
    out = []
    for s in model.layout.layers:
        second = float(np.sum(mean[s.W] ** 2) + np.sum(variances[s.W]))
        out.append((s.W.stop - s.W.start) / max(second, 1e-300))
    return np.clip(np.asarray(out), *BOUNDS)


def with_weight_precisions(problem: Problem, layer_precisions: np.ndarray) -> Problem:
    """The problem with each weight matrix's prior precision replaced (biases unchanged)."""
    lam = problem.prior_precision.copy()
    for s, value in zip(problem.model.layout.layers, layer_precisions):
        lam[s.W] = value
    return replace(problem, prior_precision=lam)


def weight_precisions(problem: Problem) -> np.ndarray:
    """The prior precision of each weight matrix (the first entry of its slice)."""
    return np.array([problem.prior_precision[s.W.start] for s in problem.model.layout.layers])


@dataclass
class Learner:
    """The learned hyperparameters of one fit: which are learned, their current values (in ``problem``), the
    smoothed squared residual, and the trajectory (one record per epoch end)."""

    problem: Problem
    noise: bool = False
    prior: bool = False
    window: int = 1
    # the warm-up: for steps 1..warmup tau is the posterior mean's residual precision on the training rows ``data``
    # ``(X, y)``, set at epoch ends (0: none)
    warmup: int = 0
    data: tuple | None = None
    residual: float = float("nan")  # smoothed E_q[r^2] per example (nan: no step after the warm-up yet)
    # trajectory: the values in force at the end of each epoch
    step: list = field(default_factory=list)
    noise_precision: list = field(default_factory=list)
    prior_precision: list = field(default_factory=list)  # per record, (n_layers,)

    def __post_init__(self):
        if self.noise and self.problem.model.likelihood != "gaussian":
            self.noise = False  # nothing to learn: classification has no noise precision
        self.window = max(1, min(int(self.window), MAX_WINDOW))
        if not self.noise or self.data is None:
            self.warmup = 0

    @property
    def active(self) -> bool:
        return self.noise or self.prior

    def after_step(self, method, state, info: dict, epoch_end: bool, record: bool) -> None:
        """Update the learned values after step ``state.t`` (its mean loss ``info["nll"]``, computed with the
        values of ``self.problem``): tau after every step (during the warm-up, at the end of an epoch), the prior
        precisions at the end of an epoch; the values are recorded when ``record`` (where the loop records its
        history: at epoch ends and at the last step)."""
        if self.noise and state.t <= self.warmup:
            if epoch_end:
                s = mean_residual(self.problem.model, method.posterior(state).mean, *self.data)
                model = replace(self.problem.model, noise_precision=noise_optimum(s))
                self.problem = replace(self.problem, model=model)
        elif self.noise:
            tau = self.problem.model.noise_precision
            s_t = squared_residual(info["nll"], tau)
            rate = 1.0 / min(state.t - self.warmup, self.window)
            self.residual = s_t if not math.isfinite(self.residual) else self.residual + rate * (s_t - self.residual)
            model = replace(self.problem.model, noise_precision=noise_optimum(self.residual))
            self.problem = replace(self.problem, model=model)
        if self.prior and epoch_end:
            posterior = method.posterior(state)
            self.problem = with_weight_precisions(
                self.problem, prior_optimum(posterior.mean, posterior.marginal_variances(), self.problem.model))
        if record:
            self.record(state.t)

    def finish(self, posterior, X: np.ndarray, y: np.ndarray, seed: int) -> None:
        """The last M-step, once training ends: tau becomes the ELBO's optimum ``N / E_q[sum r^2]`` at the final
        posterior (:func:`expected_residual`), instead of the running estimate of the last steps, which follows
        the minibatches' noise (on 200 rows it wandered within 7.5 % of the optimum over the last epochs)."""
        if self.noise:
            tau = noise_optimum(expected_residual(self.problem.model, posterior, X, y, seed))
            self.problem = replace(self.problem, model=replace(self.problem.model, noise_precision=tau))
            if self.noise_precision:  # the last record (the last step's) holds the value the run keeps
                self.noise_precision[-1] = tau

    def record(self, t: int) -> None:
        if self.step and self.step[-1] == t:  # a partial epoch recorded before, now continued
            self.step.pop(), self.noise_precision.pop(), self.prior_precision.pop()
        self.step.append(int(t))
        self.noise_precision.append(float(self.problem.model.noise_precision))
        self.prior_precision.append(weight_precisions(self.problem))

    def history(self) -> dict:
        """The trajectory as the run file's history arrays (empty when nothing is learned)."""
        if not self.active or not self.step:
            return {}
        out = {"learned_step": np.asarray(self.step, dtype=np.int64)}
        if self.noise:
            out["noise_precision"] = np.asarray(self.noise_precision, dtype=float)
        if self.prior:
            out["prior_precision"] = np.asarray(self.prior_precision, dtype=float)
        return out

    def restore_history(self, history: dict) -> None:
        steps = history.get("learned_step")
        if steps is None:
            return
        self.step = [int(v) for v in steps]
        self.noise_precision = ([float(v) for v in history["noise_precision"]] if "noise_precision" in history
                                else [float(self.problem.model.noise_precision)] * len(self.step))
        self.prior_precision = ([np.asarray(v, dtype=float) for v in history["prior_precision"]]
                                if "prior_precision" in history else [weight_precisions(self.problem)] * len(self.step))


def shared_optimum(problem: Problem) -> float:
    """The one weight precision closest to the learned per-layer ones in the ELBO's sense: the optimum of a single
    precision shared by all weights, ``sum_l n_l / sum_l (n_l / lambda_l)`` (each layer's second moment is
    ``n_l / lambda_l`` at its optimum). The starting point of ``--tune prior-precision``."""
    layers = problem.model.layout.layers
    sizes = np.array([s.W.stop - s.W.start for s in layers], dtype=float)
    return float(sizes.sum() / np.sum(sizes / weight_precisions(problem)))


# the exact solvers' prior precisions: alternate a solve and the update until they change by less than this
# (relative), or at most SOLVE_ROUNDS solves
SOLVE_TOL = 1e-4
SOLVE_ROUNDS = 50
CLOSED_FORM_ROUNDS = 2000
# ... and the most work, in floating-point operations, all its rounds may take (about 10 s here): at D = 801 and
# 300 rows, 2 000 rounds took 8 minutes, where 50 take 12 s
CLOSED_FORM_WORK = 10**11


def solve_em(method, problem: Problem, X: np.ndarray, y: np.ndarray, hyper, noise: bool = False,
             prior: bool = True):
    """Variational EM for a solver: the exact q for the current precisions, then the ELBO optimum given q of the
    prior precisions (``prior``) and of the noise precision (``noise``, a linear regression's), until they change
    by less than :data:`SOLVE_TOL`, in at most :data:`SOLVE_ROUNDS` solves (:data:`CLOSED_FORM_ROUNDS` for a linear
    regression's closed form, whose rounds are cheap and whose EM can be slow). Returns ``(posterior, info, problem,
    history)``: the last solve's posterior and ``info`` (its iterations summed over the rounds, ``prior_rounds``
    the rounds, ``settled`` whether the precisions settled), the problem it was solved for, and the precisions'
    trajectory, one record per solve."""
    rounds = SOLVE_ROUNDS
    if problem.model.likelihood == "gaussian":  # (each round a D x D factorisation: at most CLOSED_FORM_WORK flops)
        D = problem.model.n_params
        rounds = int(min(CLOSED_FORM_ROUNDS, max(SOLVE_ROUNDS, CLOSED_FORM_WORK // (D**3 + len(X) * D**2))))
    steps, lams, noises, iterations, settled = [], [], [], 0, False
    for round_ in range(1, rounds + 1):
        posterior, info = method.solve(problem, X, y, hyper)
        iterations += info["solver"]["iterations"]
        steps.append(round_)
        lams.append(problem.prior_precision)
        noises.append(problem.model.noise_precision)
        changes = [0.0]
        if prior:
            old = weight_precisions(problem)
            new = prior_optimum(posterior.mean, posterior.marginal_variances(), problem.model)
            changes.append(float(np.max(np.abs(new - old) / old)))
            problem = with_weight_precisions(problem, new)
        if noise:
            tau = noise_optimum(expected_residual(problem.model, posterior, X, y, 0))
            changes.append(abs(tau - noises[-1]) / noises[-1])
            problem = replace(problem, model=replace(problem.model, noise_precision=tau))
        if max(changes) <= SOLVE_TOL:
            settled = True
            break
    # the posterior is the last solve's, for the precisions it was solved with
    problem = replace(problem, model=replace(problem.model, noise_precision=noises[-1]), prior_precision=lams[-1])
    info["solver"] = dict(info["solver"], iterations=iterations, prior_rounds=round_, settled=settled)
    history = {"learned_step": np.asarray(steps, dtype=np.int64)}
    if prior:
        history["prior_precision"] = np.asarray([weight_precisions(replace(problem, prior_precision=lam))
                                                 for lam in lams], dtype=float)
    if noise:
        history["noise_precision"] = np.asarray(noises, dtype=float)
    return posterior, info, problem, history


def fit_noise_model(model, posterior, X: np.ndarray, y: np.ndarray, seed: int, kind: str = "linear") -> tuple:
    """The weights ``(c, w_1 .. w_{n_0}, w_f)`` of the noise model ``tau(x, f) = exp(c + w . x + w_f f)`` that
    maximise ``sum_n mean_s [eta_sn / 2 - exp(eta_sn) r_sn^2 / 2] - (|w|^2 + w_f^2) / 2``, ``eta_sn = log tau(x_n,
    f_sn)`` and ``r_sn = y_n - f_sn``, over weight draws ``theta_s ~ q`` (a mixture's members share them equally)
    and the training rows ``(X, y)`` (at most :data:`NOISE_MODEL_ROWS`, drawn without replacement, from the stream
    ``(seed, NOISE_MODEL)``).

    ``kind="hidden"`` (a network): ``eta_sn`` has the further term ``v . h_sn``, ``h_sn`` draw s's last hidden
    layer at ``x_n``, and the weights are ``(c, w, v, w_f)``. The prior is a standard Gaussian on each weight of
    the hidden units *standardised* (by their mean and standard deviation over the draws and rows), so that it
    weighs a unit the same whatever the scale of its activations; the weights returned act on the raw units. The
    rows are fewer where the draws' hidden layers would pass :data:`NOISE_MODEL_ENTRIES` numbers."""
    rng = streams.derive_rng(seed, streams.NOISE_MODEL)
    parts = components(posterior, model, None)
    each = -(-NOISE_MODEL_DRAWS // len(parts))
    H = model.sizes[-2] if kind == "hidden" else 0
    most = NOISE_MODEL_ROWS if not H else max(1, min(NOISE_MODEL_ROWS, NOISE_MODEL_ENTRIES // (each * len(parts) * H)))
    if len(X) > most:
        rows = np.sort(rng.choice(len(X), most, replace=False))
        X, y = X[rows], y[rows]
    F = np.empty((each * len(parts), len(X)))
    Hs = np.empty((each * len(parts), len(X), H)) if H else None
    with blas_threads(model.n_params, len(F), len(X)):  # (as a training step of that many draws and rows)
        for k, (part, part_model, _) in enumerate(parts):
            theta = part.sample(rng, each)
            for rows in row_chunks(part_model, len(X), each):  # the activations of all rows at once may not fit
                f, inputs = part_model.forward(theta, X[rows])
                F[k * each : (k + 1) * each, rows] = f[..., 0]
                if H:
                    Hs[k * each : (k + 1) * each, rows] = inputs[-1]
    R2 = (y - F) ** 2
    p = X.shape[1]
    if H:  # standardised units; a unit that (nearly) never varies, a dead ReLU or a saturated sigmoid, gets no
        # weight: its column is 0. (Standardised, its spread of 1e-16 would become a raw weight of 1e16 or more,
        # which rows beyond the training range, where the unit moves, would meet.)
        centre = Hs.mean(axis=(0, 1))
        Hs -= centre
        spread = np.sqrt(np.einsum("snh,snh->h", Hs, Hs) / (Hs.shape[0] * Hs.shape[1]))  # (no temporary as large)
        silent = spread <= SILENT_UNIT * max(float(spread.max()), np.finfo(float).tiny)
        spread[silent] = 1.0
        Hs[..., silent] = 0.0
        Hs /= spread
    start = np.zeros(p + H + 2)
    start[0] = -math.log(max(float(R2.mean()), NOISE_BOUNDS[0]))  # the constant noise model's optimum
    with blas_threads(p + H + 2, F.shape[0], len(X)):  # (matrix-vector products, which threads only slow down)
        found = scipy.optimize.minimize(noise_model_objective, start, args=(X, F, R2, Hs), jac=True,
                                        method="L-BFGS-B")
    v = found.x
    if H:  # back to the raw units: v . (h - centre) / spread = (v / spread) . h - v . centre / spread
        scaled = v[p + 1 : p + 1 + H] / spread
        v = np.concatenate([[v[0] - scaled @ centre], v[1 : p + 1], scaled, [v[-1]]])
    return tuple(float(w) for w in v)


def noise_model_objective(v: np.ndarray, X: np.ndarray, F: np.ndarray, R2: np.ndarray,
                          Hs: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """What :func:`fit_noise_model` minimises, and its gradient, at the weights ``v = (c, w, w_f)``: ``mean_s
    sum_n [exp(eta_sn) R2_sn / 2 - eta_sn / 2] + (|w|^2 + w_f^2) / 2``, ``eta_sn = c + x_n . w + w_f F_sn`` (within
    the noise bounds), for inputs ``X : (n, p)``, draws' outputs ``F : (S, n)`` and squared residuals ``R2``. With
    hidden units ``Hs : (S, n, H)``, ``v = (c, w, v_h, w_f)`` and ``eta_sn`` adds ``Hs_sn . v_h``."""
    S, p = F.shape[0], X.shape[1]
    H = 0 if Hs is None else Hs.shape[2]
    eta = v[0] + (X @ v[1 : p + 1])[None, :] + v[-1] * F
    if H:  # (as one matrix of S n rows: a BLAS matrix-vector product each way)
        Hs = Hs.reshape(-1, H)
        eta = eta + (Hs @ v[p + 1 : p + 1 + H]).reshape(F.shape)
    eta = np.clip(eta, *LOG_NOISE_BOUNDS)
    tau_r2 = np.exp(eta) * R2
    g = (0.5 * tau_r2 - 0.5) / S  # the derivative in eta, per draw and row
    w = v[1:]
    value = float((0.5 * tau_r2 - 0.5 * eta).sum() / S + 0.5 * w @ w)
    parts = [[g.sum()], X.T @ g.sum(axis=0) + v[1 : p + 1]]
    if H:
        parts.append(g.ravel() @ Hs + v[p + 1 : p + 1 + H])
    return value, np.concatenate([*parts, [(g * F).sum() + v[-1]]])
