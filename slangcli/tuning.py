"""Hyperparameters from the training data alone: k-fold cross-validated predictive log-likelihood.

The prior precision (every model) and the Gaussian noise precision (regression) are chosen by coordinate search
over logarithmic grids: each parameter in turn (the noise precision first) takes every value of its grid with the
others held at their best so far, then each is refined once at the geometric midpoints beside its best value (so
the cost is about the sum of the grid sizes, not their product). A candidate's score is the mean
over ``k`` folds of the held-out per-example predictive log-likelihood of a posterior trained on the other folds:
``log p(y | x)`` under the posterior predictive, by quadrature for logistic regression and Monte Carlo
otherwise, on the standardised target scale for regression (a constant shift from the original units, the same
for every candidate). The folds are a seeded permutation of the *training* rows; test rows never enter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from slangcli import metrics, train
from slangcli.errors import ConfigError
from slangcli.methods.base import Problem
from slangcli.models import MLP
from slangcli.threads import blas_threads

TUNABLE = ("prior-precision", "noise-precision")
GRIDS = {
    "prior-precision": tuple(10.0 ** np.arange(-2.0, 2.01, 1.0)),  # 0.01 ... 100
    "noise-precision": tuple(10.0 ** np.arange(0.0, 3.01, 0.5)),  # 1 ... 1000 (on the standardised target)
}
TUNE = train.TUNE  # random stream of the fold assignment and the tuning fits
SCORE_SAMPLES = 100


@dataclass(frozen=True)
class Search:
    params: tuple[str, ...]
    folds: int = 5
    epochs: int | None = None  # None: the fit's own length


def parse_tune(text: str | None, likelihood: str) -> tuple[str, ...]:
    """``"prior-precision,noise-precision"`` -> the parameters, validated against the model's likelihood."""
    if not text:
        return ()
    params = tuple(p.strip() for p in text.split(",") if p.strip())
    for p in params:
        if p not in TUNABLE:
            raise ConfigError(f"--tune: unknown hyperparameter {p!r} (choose from {', '.join(TUNABLE)})")
        if p == "noise-precision" and likelihood != "gaussian":
            raise ConfigError("--tune noise-precision applies to regression (a gaussian likelihood) only")
    if len(set(params)) != len(params):
        raise ConfigError("--tune names a hyperparameter twice")
    return params


def fold_indices(n: int, k: int, seed: int) -> list[np.ndarray]:
    """``k`` disjoint validation index sets covering ``range(n)``, from a seeded permutation."""
    if not 2 <= k <= n:
        raise ConfigError(f"--tune-folds must be between 2 and the {n} training rows, got {k}")
    perm = train.derive_rng(seed, TUNE).permutation(n)
    return [np.sort(part) for part in np.array_split(perm, k)]


def heldout_loglik(model: MLP, posterior, X, y, rng) -> float:
    """Mean per-example predictive log-likelihood of ``(X, y)``."""
    if model.likelihood == "gaussian":
        return metrics.regression_scores(posterior, model, X, y, samples=SCORE_SAMPLES, rng=rng)["loglik"]
    probs = metrics.predictive_probs(posterior, model, X, samples=SCORE_SAMPLES, rng=rng)
    return -metrics.classification_scores(probs, y)["nll"]


def search(search: Search, *, values: dict, build: Callable[[dict], tuple[MLP, np.ndarray]], method, hyper,
           X: np.ndarray, y: np.ndarray, seed: int, batch_size: int, epochs: int,
           notify: Callable[[str], None] = lambda msg: None) -> tuple[dict, dict]:
    """Coordinate search of ``search.params`` starting from ``values`` (option name -> value).

    ``build(values) -> (model, prior_precision)`` makes the model of a candidate. Returns the best values and a
    JSON-able record of every candidate's fold scores.
    """
    folds = fold_indices(len(X), search.folds, seed)
    epochs = search.epochs or epochs
    cache: dict = {}
    best = dict(values)

    def score(candidate: dict) -> float:
        key = tuple(sorted(candidate.items()))
        if key not in cache:
            model, lam = build(candidate)
            scores = []
            for k, val in enumerate(folds):
                fit_rows = np.setdiff1d(np.arange(len(X)), val, assume_unique=True)
                batch = min(batch_size, len(fit_rows))
                problem = Problem(model, lam, len(fit_rows))
                n_steps = epochs * train.steps_per_epoch(len(fit_rows), batch)
                with blas_threads(model.n_params, hyper.samples, batch):
                    fold_seed = int(train.derive_rng(seed, TUNE, 2, k).integers(2**31))
                    state, _ = train.run(method, hyper, problem, X[fit_rows], y[fit_rows], seed=fold_seed,
                                         batch_size=batch, n_steps=n_steps)
                    scores.append(heldout_loglik(model, method.posterior(state), X[val], y[val],
                                                 train.derive_rng(seed, TUNE, 1, k)))
            cache[key] = scores
            notify(f"tuning {', '.join(f'{p} {v:g}' for p, v in candidate.items())}: "
                   f"held-out log-likelihood {np.mean(scores):.4f}")
        return float(np.mean(cache[key]))

    # the noise precision first: in regression it moves the held-out likelihood far more than the prior does
    order = sorted(search.params, key=lambda p: p != "noise-precision")
    for param in order:
        scored = [(score({**best, param: v}), v) for v in GRIDS[param]]
        best[param] = max(scored, key=lambda sv: sv[0])[1]
    for param in order:  # one refinement: the geometric midpoints beside the best grid value
        ratio = np.sqrt(GRIDS[param][1] / GRIDS[param][0])
        scored = [(score({**best, param: v}), v) for v in (best[param] / ratio, best[param], best[param] * ratio)]
        best[param] = max(scored, key=lambda sv: sv[0])[1]
    record = {
        "params": list(search.params), "folds": search.folds, "epochs": epochs, "grids": {p: list(GRIDS[p])
                                                                                          for p in search.params},
        "candidates": [{"values": dict(key), "fold_loglik": scores, "mean_loglik": float(np.mean(scores))}
                       for key, scores in cache.items()],
        "best": {p: best[p] for p in search.params},
    }
    return best, record
