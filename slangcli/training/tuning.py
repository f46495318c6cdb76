"""Hyperparameters from the training data alone: k-fold cross-validated predictive log-likelihood.

Tunable: the prior precision (every model), the Gaussian noise precision (regression), and the step methods'
learning rate ``lr`` and, for the natural-gradient methods, the precision rate ``beta``. The search is coordinate
search over grids: each parameter in turn takes every value of its grid with the others held at their best so
far, then each precision is refined once at the geometric midpoints beside its best value (so the cost is about
the sum of the grid sizes, not their product). The precisions' grids are fixed logarithmic ones; ``lr`` and ``beta`` are
searched by factors of 2 around the run's own values. The noise precision and ``beta`` are searched jointly, on
their product grid, when both are tuned: a high noise precision needs a slow precision average (small ``beta``)
and fails outright with a fast one, so neither can be chosen with the other held fixed.

A candidate's score is the mean over folds of the held-out per-example predictive log-likelihood of a posterior
trained on the other folds: ``log p(y | x)`` under the posterior predictive, by quadrature for logistic
regression and Monte Carlo otherwise, on the standardised target scale for regression (a constant shift from the
original units, the same for every candidate). It is the predictive of ``slang evaluate`` and ``slang predict``
(``predict.classify``, ``metrics.regression_scores``) with ``SCORE_SAMPLES`` weight samples: a classifier's drawn
as a fit scores itself, from the seed its training ran with, a regression's from the fold's own tuning stream;
either way every candidate of a fold is scored on the same draws.
``Search.rounds`` may score on only the first few of the ``k`` folds (each fit still trains on ``(k - 1) / k`` of
the rows). The folds are a seeded permutation of the *training* rows; test rows never enter. A candidate whose fit
diverges scores minus infinity.

Every candidate of a sweep trains on a fold from the same seed. For SLANG on a small network the sweep's fits run
stacked (``slangcli.methods.slang_stacked``): one pass of the network for all of them per step, several times
faster than one after the other and equal to it to rounding.

A search asked to stop (``stop()`` turns true: the fit's signal handler) stops within a training step of the fit in
progress, here or between two candidates, and raises :class:`Interrupted`; the candidates scored so far are not
kept (a search has no checkpoint: run again, it starts anew). Fits sent to a cluster (``map_jobs``) run to their
end; the search then stops before its next round.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from slangcli import streams
from slangcli.errors import ConfigError, DivergenceError, Interrupted
from slangcli.methods.base import Problem, describe, hyper_names, samples_per_step
from slangcli.models import MLP
from slangcli.predictive import metrics
from slangcli.predictive.predict import classify
from slangcli.threads import blas_threads
from slangcli.training import loop as train

TUNABLE = ("prior-precision", "noise-precision", "lr", "beta")
GRIDS = {
    "prior-precision": tuple(10.0 ** np.arange(-2.0, 2.01, 1.0)),  # 0.01 ... 100
    "noise-precision": tuple(10.0 ** np.arange(0.0, 3.01, 0.5)),  # 1 ... 1000 (on the standardised target)
}
# factors on the run's own value (the rates' useful range depends on the method and its optimiser)
FACTORS = {
    "lr": tuple(2.0 ** np.arange(-1.0, 1.01)),  # lr / 2, lr, 2 lr
    "beta": tuple(2.0 ** np.arange(-3.0, 0.01)),  # beta / 8 ... beta
}
RATES = ("lr", "beta")
# fits of one sweep trained stacked at a time (memory grows with it; the gain levels off beyond)
STACK_MAX = 40
TUNE = streams.TUNE  # random stream of the fold assignment and the tuning fits
SCORE_SAMPLES = 100


@dataclass(frozen=True)
class Search:
    params: tuple[str, ...]
    folds: int = 5
    epochs: int | None = None  # None: the fit's own length
    rounds: int | None = None  # score on the first this many folds only (None: all)


def parse_tune(text: str | None, likelihood: str, method=None) -> tuple[str, ...]:
    """``"prior-precision,noise-precision"`` -> the parameters, validated against the model's likelihood and the
    method's hyperparameters."""
    if not text:
        return ()
    params = tuple(p.strip() for p in text.split(",") if p.strip())
    for p in params:
        if p not in TUNABLE:
            raise ConfigError(f"--tune: unknown hyperparameter {p!r} (choose from {', '.join(TUNABLE)})")
        if p == "noise-precision" and likelihood != "gaussian":
            raise ConfigError("--tune noise-precision applies to regression (a gaussian likelihood) only")
        if p in RATES and method is not None and p not in hyper_names(method):
            raise ConfigError(f"--tune {p}: the method has no --{p}")
    if len(set(params)) != len(params):
        raise ConfigError("--tune names a hyperparameter twice")
    return params


def fold_indices(n: int, k: int, seed: int) -> list[np.ndarray]:
    """``k`` disjoint validation index sets covering ``range(n)``, from a seeded permutation."""
    if not 2 <= k <= n:
        raise ConfigError(f"--tune-folds must be between 2 and the {n} training rows, got {k}")
    perm = streams.derive_rng(seed, TUNE).permutation(n)
    return [np.sort(part) for part in np.array_split(perm, k)]


def heldout_loglik(model: MLP, posterior, X, y, seed: int, rng) -> float:
    """Mean per-example predictive log-likelihood of ``(X, y)``: a classifier's from the weight samples of the
    predictive for ``seed`` (``metrics.weight_samples``), a regression's from ``rng`` (the tuning stream of its
    fold, which the UCI protocol's recorded searches were made with)."""
    if model.likelihood == "gaussian":
        return metrics.regression_scores(posterior, model, X, y, samples=SCORE_SAMPLES, rng=rng)["loglik"]
    probs = classify(posterior, model, X, samples=SCORE_SAMPLES, seed=seed)["probs"]
    return -metrics.classification_scores(probs, y)["nll"]


def grid(param: str, start: dict) -> tuple[float, ...]:
    """The values a sweep of ``param`` tries, given the starting values."""
    if param in FACTORS:
        values = [float(start[param] * f) for f in FACTORS[param]]
        return tuple(v for v in values if param != "beta" or v < 1.0)
    # the starting value too (a learned one, slangcli.training.learned), so the search never ends worse than where it
    # began
    return tuple(sorted({float(v) for v in GRIDS[param]} | {float(start[param])}))


# what a stopped search tells its user besides the count (slangcli.errors.Interrupted's hint)
NOT_KEPT = "a --tune search is not checkpointed, so the same command tunes again from the start"


def search(search: Search, *, values: dict, build: Callable[[dict], tuple[MLP, np.ndarray]], method, hyper,
           X: np.ndarray, y: np.ndarray, seed: int, batch_size: int, epochs: int,
           notify: Callable[[str], None] = lambda msg: None, map_jobs: Callable | None = None,
           stop: Callable[[], bool] | None = None) -> tuple[dict, dict]:
    """Coordinate search of ``search.params`` starting from ``values`` (option name -> value; ``lr`` and
    ``beta`` are taken from ``hyper`` when tuned).

    ``build(values) -> (model, prior_precision)`` makes the model of a candidate. Returns the best values and a
    JSON-able record of every candidate's fold scores. The fits of each round of candidates, one job per stack of
    candidates and fold, run here one after the other, or through ``map_jobs(function, jobs)`` (a cluster's map):
    every job is a pure function of its arguments, so the result does not depend on where the jobs ran.

    ``stop()`` is polled after every training step of the fits run here and before each round; when it turns
    true the search raises :class:`Interrupted` (what it scored so far is lost).
    """
    folds = fold_indices(len(X), search.folds, seed)[: search.rounds or search.folds]
    epochs = search.epochs or epochs
    start = dict(values)
    for p in RATES:
        if p in search.params:
            start[p] = float(getattr(hyper, p))
    score = _Scores(search.params, folds, dict(build=build, method=method, hyper=hyper, X=X, y=y, seed=seed,
                                           batch_size=batch_size, epochs=epochs), notify, map_jobs, stop)
    cache = score.cache
    best = dict(start)

    def sweep(params: tuple[str, ...]) -> None:
        cands = [dict(best)]
        for p in params:
            cands = [{**c, p: v} for c in cands for v in grid(p, start)]
        scored = score(cands)
        winner = cands[int(np.argmax(scored))]
        best.update({p: winner[p] for p in params})

    # the noise precision first: in regression it moves the held-out likelihood far more than the prior does
    order = sorted(search.params, key=lambda p: TUNABLE.index(p) if p != "noise-precision" else -1)
    joint = ("noise-precision", "beta") if {"noise-precision", "beta"} <= set(order) else None
    for p in order:
        if joint and p == "beta":
            continue
        sweep(joint if joint and p == "noise-precision" else (p,))
    # one refinement of the precisions (the rates' factor-2 grids are fine enough): the geometric midpoints beside
    # each best value, one parameter after the other
    for p in order:
        if p in GRIDS:
            ratio = np.sqrt(GRIDS[p][1] / GRIDS[p][0])
            cands = [{**best, p: v} for v in (best[p] / ratio, best[p], best[p] * ratio)]
            best[p] = cands[int(np.argmax(score(cands)))][p]
    record = {
        "params": list(search.params), "folds": search.folds, "rounds": len(folds), "epochs": epochs,
        "grids": {p: list(grid(p, start)) for p in search.params},
        "candidates": [{"values": dict(k), "fold_loglik": sc, "mean_loglik": float(np.mean(sc))}
                       for k, sc in cache.items()],
        "best": {p: best[p] for p in search.params},
    }
    return best, record


class _Scores:
    """``scores(candidates)``: each candidate's mean held-out log-likelihood over ``folds``; a candidate is scored
    once (``cache``: its fold scores by its values). The fits of candidates not scored yet run in stacks of at
    most ``STACK_MAX``, one job per stack and fold, here one after the other or through ``map_jobs``."""

    def __init__(self, params, folds, fits: dict, notify, map_jobs, stop):
        self.params, self.folds, self.fits = params, folds, fits
        self.notify, self.map_jobs, self.stop = notify, map_jobs, stop
        self.cache: dict = {}

    @staticmethod
    def key(candidate: dict) -> tuple:
        return tuple(sorted(candidate.items()))

    def interrupted(self) -> Interrupted:
        n = len(self.cache)
        return Interrupted(0, 0, checkpointed=False, hint=NOT_KEPT,
                           message=f"interrupted while tuning, after {n} candidate{'' if n == 1 else 's'} scored")

    def __call__(self, candidates: list[dict]) -> list[float]:
        f, key = self.fits, self.key
        todo = list({key(c): c for c in candidates if key(c) not in self.cache}.values())
        chunks = [todo[lo : lo + STACK_MAX] for lo in range(0, len(todo), STACK_MAX)]
        n = len(f["X"])
        jobs = [(chunk, f["build"], f["method"], f["hyper"], f["X"], f["y"],
                 np.setdiff1d(np.arange(n), val, assume_unique=True), val, f["seed"], k, f["batch_size"],
                 f["epochs"]) for chunk in chunks for k, val in enumerate(self.folds)]
        if self.stop is not None and self.stop():
            raise self.interrupted()
        if self.map_jobs is None:  # lazily, one job at a time: each polls stop() after every step
            results = (_fold_scores(*job, stop=self.stop) for job in jobs)
        else:
            results = iter(self.map_jobs(_fold_scores, jobs))
        for chunk in chunks:
            scores = [[] for _ in chunk]
            for _ in self.folds:
                fold = next(results)
                if fold is None:
                    raise self.interrupted()
                for j, s in enumerate(fold):
                    scores[j].append(s)
            for c, sc in zip(chunk, scores):
                self.cache[key(c)] = sc
                self.notify(f"tuning {', '.join(f'{p} {c[p]:g}' for p in self.params)}: "
                            f"held-out log-likelihood {np.mean(sc):.4f}")
        return [float(np.mean(self.cache[key(c)])) for c in candidates]


def _fold_scores(candidates: list[dict], build, method, hyper, X, y, fit_rows, val, seed: int, k: int,
                 batch_size: int, epochs: int, stop: Callable[[], bool] | None = None) -> list[float] | None:
    """Held-out log-likelihood on fold ``k`` of each candidate, trained on ``fit_rows`` (minus infinity for one
    that diverges); stacked when the method and shapes allow. None when ``stop()`` turned true (it is polled after
    every training step and before each candidate)."""
    stopped = stop if stop is not None else lambda: False
    batch = min(batch_size, len(fit_rows))
    n_steps = epochs * streams.steps_per_epoch(len(fit_rows), batch)
    fold_seed = int(streams.derive_rng(seed, TUNE, 2, k).integers(2**31))
    built = [build(c) for c in candidates]
    hypers = [replace(hyper, **{p: c[p] for p in RATES if p in c}) for c in candidates]
    Xf, yf = X[fit_rows], y[fit_rows]
    model0 = built[0][0]
    stacks = describe(method).stacked  # the method's module of stacked runs, if it has one
    stacked = stacks() if stacks is not None else None
    if stacked is not None and len(candidates) > 1 and stacked.stackable(model0, hyper, batch):
        runs = stacked.Runs(prior_precision=np.stack([lam for _, lam in built]),
                            noise_precision=np.array([m.noise_precision for m, _ in built]),
                            lr=np.array([h.lr for h in hypers]), beta=np.array([h.beta for h in hypers]))
        with blas_threads(model0.n_params, samples_per_step(hyper), batch):
            states = stacked.run(runs, model0, hyper, Xf, yf, seed=fold_seed, batch_size=batch, n_steps=n_steps,
                                 stop=stop)
    else:
        states = []
        for (model, lam), h in zip(built, hypers):
            if stopped():
                return None
            with blas_threads(model.n_params, samples_per_step(h), batch):
                try:
                    state, _ = train.run(method, h, Problem(model, lam, len(fit_rows)), Xf, yf, seed=fold_seed,
                                         batch_size=batch, n_steps=n_steps, after_step=lambda *_: stopped())
                except DivergenceError:
                    state = None
            states.append(state)
    out = []
    for (model, _), state in zip(built, states):
        if stopped():  # (a state stopped part-way has t < n_steps: never scored)
            return None
        if state is None:
            out.append(-np.inf)
            continue
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            s = heldout_loglik(model, method.posterior(state), X[val], y[val], fold_seed,
                               streams.derive_rng(seed, TUNE, 1, k))
        out.append(s if np.isfinite(s) else -np.inf)
    return out
