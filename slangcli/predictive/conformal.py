"""Split-conformal prediction (``slang fit --calibrate F``): intervals and prediction sets with a coverage guarantee.

A fit with ``--calibrate`` holds out a fraction of its training rows, fits on the rest, and scores the held-out
(calibration) rows with the one predictive of ``slang evaluate`` and ``slang predict``
(``slangcli.predictive.predict``). The nonconformity score of a row (:func:`conformity`) is

- regression: ``s = |y - mean| / std_total``, the predictive mean and total standard deviation in the target's units;
- classification: ``s = 1 - p(y | x)``, one minus the predictive probability of the true class.

With the n calibration scores, the level-``c`` quantile ``q_c`` is the ``k``-th smallest score, ``k = ceil((n + 1)
c)`` (:func:`rank`), infinite when ``k > n`` (:func:`quantile`). The calibrated interval of a regression is ``mean +-
q_c std_total``; the prediction set of a classifier ``{k : 1 - p_k <= q_c}``. A new row's target is inside exactly
when its own score is at most ``q_c``, and if the new row and the calibration rows are exchangeable (drawn alike,
independently), that happens with probability at least ``c``, over the calibration rows and the new row together
(Vovk et al. 2005; Lei et al., JASA 2018, theorem 2.2): a marginal guarantee, whatever the model, which is held fixed.
For continuous scores without ties it is also below ``c + 1 / (n + 1)``. Conditional on the calibration rows, the
coverage of new rows is Beta(k, n + 1 - k) distributed (Vovk 2012), with mean ``k / (n + 1) >= c``.

The guarantee is for the predictive the scores were computed with: the fit's ``--eval-samples`` weight samples from
its ``--seed`` (the quadrature predictive of logistic regression has none). ``predict`` and ``evaluate`` with other
samples or another seed use a predictive that differs by Monte-Carlo noise.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from slangcli.predictive import predict as predictive_uncertainty
from slangcli.runfile.checked import CALIBRATION_SCORES as SCORES  # (the scores, by task, as the run file names them)

# the levels whose coverage evaluate (and a fit with test data) reports for a calibrated run
CALIBRATED_LEVELS = (0.9, 0.95)


def score_name(likelihood: str) -> str:
    """The name of the nonconformity score of a model of ``likelihood``."""
    return SCORES["regression" if likelihood == "gaussian" else "classification"]


def rank(n: int, level: float) -> int:
    """``ceil((n + 1) level)``, the rank (1-based) of the level-``level`` quantile among ``n`` scores. ``level`` is
    taken as the decimal it is written as (0.9 is 9/10, not the binary fraction just above it, which would make
    ``ceil(10 * 0.9)`` 10)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"a coverage level must lie strictly between 0 and 1, got {level}")
    return math.ceil((n + 1) * Fraction(repr(float(level))))


def quantile(scores: np.ndarray, level: float) -> float:
    """The level-``level`` quantile of the calibration ``scores`` (sorted ascending): the :func:`rank`-th smallest;
    ``inf`` when the rank exceeds their number (too few rows for a finite set with the guarantee)."""
    k = rank(len(scores), level)
    return float(scores[k - 1]) if k <= len(scores) else math.inf


def least_rows(level: float) -> int:
    """The fewest calibration rows whose level-``level`` quantile is finite (``rank(n, level) <= n``): 19 for 0.95."""
    c = Fraction(repr(float(level)))
    return max(1, math.ceil(c / (1 - c)))


def too_few(n: int, likelihood: str, levels=CALIBRATED_LEVELS) -> str | None:
    """What to say of ``n`` calibration rows too few for a finite calibrated interval or set at some of
    ``levels`` (None when they suffice for all)."""
    short = [c for c in levels if n < least_rows(c)]
    if not short:
        return None
    what = "intervals" if likelihood == "gaussian" else "prediction sets"
    need = " and ".join(f"{100 * c:g}% ({least_rows(c)} rows)" for c in short)
    return (f"{n} calibration row{'s are' if n != 1 else ' is'} too few for finite calibrated {what} at {need}: "
            + ("they are -inf to inf" if likelihood == "gaussian" else "they hold every class")
            + ", and their coverage of 1 says nothing")


def conformity(model, posterior, X: np.ndarray, y: np.ndarray, *, samples: int, seed: int, target_mean: float = 0.0,
               target_scale: float = 1.0, predictive: str = "auto", probs: np.ndarray | None = None) -> np.ndarray:
    """The nonconformity scores ``(N,)`` of the rows ``(X, y)`` as prepared for the model (``y`` standardised in
    regression, class codes in classification) under the one predictive of ``slang predict``: ``samples`` weight
    samples from ``seed``. ``probs``: the predictive class probabilities, when they are at hand already."""
    if model.likelihood == "gaussian":
        out = predictive_uncertainty.regress(posterior, model, X, samples=samples, seed=seed, level=None,
                                             target_mean=target_mean, target_scale=target_scale)
        return np.abs(target_mean + target_scale * y - out["mean"]) / out["std_total"]
    if probs is None:
        probs = predictive_uncertainty.classify(posterior, model, X, samples=samples, seed=seed,
                                                predictive=predictive)["probs"]
    # (an average of probabilities can exceed 1 by a rounding error: the score stays >= 0, as the run file promises)
    return np.maximum(1.0 - probs[np.arange(len(y)), y.astype(np.int64)], 0.0)


def record(model, posterior, X: np.ndarray, y: np.ndarray, index: np.ndarray, *, fraction: float, seed: int,
           samples: int, target_mean: float = 0.0, target_scale: float = 1.0) -> dict:
    """The calibration of a fit (the run file's ``/calibration``): the held-out rows' scores, sorted, and how they
    were made."""
    scores = np.sort(conformity(model, posterior, X, y, samples=samples, seed=seed, target_mean=target_mean,
                                target_scale=target_scale))
    mc = not predictive_uncertainty.uses_quadrature(model)
    return {"n": int(len(scores)), "fraction": float(fraction), "seed": int(seed),
            "score": score_name(model.likelihood), "predictive": "mc" if mc else "quadrature",
            "samples": int(samples) if mc else None, "scores": scores, "index": np.asarray(index, dtype=np.int64)}


def intervals(mean: np.ndarray, std_total: np.ndarray, q: float) -> tuple[np.ndarray, np.ndarray]:
    """The calibrated intervals ``mean -+ q std_total`` (``-inf``, ``inf`` where ``q`` is infinite)."""
    if math.isinf(q):
        return np.full(mean.shape, -np.inf), np.full(mean.shape, np.inf)
    return mean - q * std_total, mean + q * std_total


def sets(probs: np.ndarray, q: float) -> np.ndarray:
    """The prediction sets ``{k : 1 - p_k <= q}`` as 0/1 indicators ``(N, C)`` (every class where ``q`` is
    infinite)."""
    return (1.0 - probs <= q).astype(np.int64)


def coverage_metrics(model, calibration: dict, scores: np.ndarray, probs: np.ndarray | None = None,
                 levels=CALIBRATED_LEVELS) -> dict:
    """The coverage of the calibrated intervals (regression) or prediction sets (classification, with their mean
    size) on test rows whose nonconformity ``scores`` are given, by level (keys as text, as ``coverage``'s)."""
    q = {f"{c:g}": quantile(calibration["scores"], c) for c in levels}
    out = {"calibrated_coverage" if model.likelihood == "gaussian" else "calibrated_set_coverage":
           {key: float(np.mean(scores <= value)) for key, value in q.items()}}
    if model.likelihood != "gaussian":
        out["calibrated_set_size"] = {key: float(np.mean(sets(probs, value).sum(axis=1))) for key, value in q.items()}
    out["calibration_n"] = int(calibration["n"])
    # the levels whose quantile is infinite (too few calibration rows): covered by intervals that say nothing
    out["calibrated_infinite"] = [key for key, value in q.items() if math.isinf(value)]
    return out


def predictive_differs(calibration: dict, samples: int | None, seed: int | None) -> str | None:
    """What a prediction or evaluation with ``samples`` and ``seed`` should say when its Monte-Carlo predictive is
    not the one the calibration scores were computed with (None when it is)."""
    if calibration["predictive"] != "mc" or (samples, seed) == (calibration["samples"], calibration["seed"]):
        return None
    return (f"the calibration scores used the fit's predictive ({calibration['samples']} samples, seed "
            f"{calibration['seed']}) and these predictions {samples} samples, seed {seed}: the guarantee holds up "
            f"to their Monte-Carlo difference (--samples {calibration['samples']} --seed {calibration['seed']} "
            "gives the fit's own)")


def guarantee(calibration: dict, likelihood: str, samples: int | None = None, seed: int | None = None) -> str:
    """What the calibrated intervals or sets of level ``calibration["level"]`` (a prediction's ``info``) promise, in
    one line; ``samples`` and ``seed``: the prediction's own, named when they differ from the calibration's."""
    n, level = calibration["n"], calibration["level"]
    what = (f"calibrated {100 * level:g}% interval" if likelihood == "gaussian"
            else f"calibrated {100 * level:g}% prediction set")
    if calibration["quantile"] is None:
        text = (f"split conformal: {n} calibration row{'s are' if n != 1 else ' is'} too few for a finite {what} "
                f"with a guarantee (that takes at least {least_rows(level)}): "
                + ("its bounds are -inf and inf" if likelihood == "gaussian" else "it holds every class"))
    else:
        holds = "its target" if likelihood == "gaussian" else "its true label"
        text = (f"split-conformal guarantee: for a new row exchangeable with the {n} calibration rows (drawn alike "
                f"and independently), the {what} holds {holds} with probability at least {level:g} (marginal "
                "coverage, on average over such rows, not for every input)")
    differs = predictive_differs(calibration, samples, seed)
    return f"{text}; {differs}" if differs else text
