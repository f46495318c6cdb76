"""Scoring a posterior, comparing two, and the one posterior predictive behind evaluate, predict and the API.

:func:`score` gives the test scores of the predictive (classification NLL, accuracy and calibration; regression RMSE,
log-likelihood and interval coverage, in the target's units) and the training -ELBO / N. The predictive's weight
samples are those of ``slang predict`` for the same seed (``metrics.weight_samples``), so ``slang evaluate``,
``slang predict`` and ``FitResult.predict`` agree. :func:`compare` gives the KL divergences between two runs fitted to
the same data.

A stored posterior is computed with inside :func:`computing_with`: a run file's values are finite and bounded
(``slangcli.runfile.io``), but a posterior can still be too large or too ill-conditioned for float64 arithmetic (a mean
near the bound, a precision near zero). NumPy's floating-point warnings are then off, every result is checked instead
(:func:`check_finite`), and a failed linear-algebra routine or a non-finite result is one FormatError naming the file.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from slangcli import streams
from slangcli.data.prepare import LabelMap
from slangcli.data.readers import ARRAYS
from slangcli.data.sources import load_inputs, load_test, load_train
from slangcli.errors import ConfigError, DataError, FormatError
from slangcli.gaussian import divergence
from slangcli.gaussian.posteriors import is_mixture
from slangcli.predictive import conformal
from slangcli.predictive import metrics
from slangcli.predictive import predict as predictive_uncertainty
from slangcli.runfile.io import Run
from slangcli.threads import blas_threads


def _posteriors_of(run_names, verb: str) -> str:
    """``"a.h5: its posterior is"`` (``verb`` "is" / "gives"), or ``"a.h5, b.h5: their posteriors are"``."""
    if len(run_names) == 1:
        return f"{run_names[0]}: its posterior {verb}"
    return f"{', '.join(run_names)}: their posteriors {'are' if verb == 'is' else verb[:-1]}"


@contextlib.contextmanager
def computing_with(*run_names: str):
    """The block computes with the posteriors of the run files ``run_names``: floating-point warnings off (the
    block checks its results with :func:`check_finite`), and a failed linear-algebra routine a FormatError naming
    them."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        try:
            yield
        except np.linalg.LinAlgError as exc:
            raise FormatError(f"{_posteriors_of(run_names, 'is')} too ill-conditioned to compute with in float64 "
                              f"(a linear-algebra routine failed: {exc})") from None


def _first_non_finite(value, path=()):
    """The key path and value of the first non-finite number in ``value`` (nested dicts, lists, arrays), or
    None."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    elif isinstance(value, np.ndarray):
        if value.dtype.kind in "fc" and not np.isfinite(value).all():
            return path, value[~np.isfinite(value)].flat[0]
        return None
    else:
        if isinstance(value, (float, np.floating)) and not math.isfinite(value):
            return path, value
        return None
    for key, child in items:
        found = _first_non_finite(child, (*path, key))
        if found is not None:
            return found
    return None


def check_finite(results, what: str, *run_names: str) -> None:
    """Refuse non-finite numbers anywhere in ``results`` (the ``what`` computed from the run files ``run_names``)
    with one FormatError naming the files and the first such value."""
    found = _first_non_finite(results)
    if found is not None:
        path, value = found
        where = " ".join(str(key) for key in path)
        raise FormatError(f"{_posteriors_of(run_names, 'gives')} non-finite {what} "
                          f"({where} {float(value)}): values too large or too ill-conditioned to compute with in "
                          "float64")


def score(model, posterior, prior_precision, *, X_train, y_train, X_test=None, y_test=None, target_scale=1.0,
          predictive="auto", samples=1000, seed=0, bins=15, calibration: dict | None = None,
          target_mean=0.0) -> dict:
    """Test scores under the posterior predictive and the training -ELBO / N (the fit's objective, on the scale
    the fit trained on: a regression's standardised target, marked ``"target": "standardised"``).

    Classification: ``nll`` (nats per example), ``accuracy``, and the expected calibration error ``ece`` with its
    ``calibration`` bins (``bins`` equal-width confidence bins). Regression: ``rmse`` of the predictive mean and the
    per-point predictive ``loglik``, both in the target's original units (``target_scale``), and the ``coverage``
    of the central predictive intervals of ``metrics.COVERAGE_LEVELS``. With the ``calibration`` of a run fitted
    with ``--calibrate`` (``slangcli.predictive.conformal``), also the coverage of its calibrated intervals or
    prediction sets (and their mean size) at ``conformal.CALIBRATED_LEVELS``; ``target_mean`` and ``target_scale``
    put a regression's scores in the target's units, as the calibration's are.
    """
    metrics.check_samples(samples)
    try:
        predictive = metrics.resolve_predictive(model, predictive)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    out = {"predictive": predictive, "samples": samples if predictive == "mc" else None}
    with blas_threads(model.n_params, min(samples, 64), max(len(X_train) if X_train is not None else 1, 1)):
        if X_test is not None:
            # the one predictive (the weight samples and probabilities of slang predict for the same seed)
            probs = None
            if model.likelihood == "gaussian":
                out["test"] = metrics.regression_scores(posterior, model, X_test, y_test, samples=samples, seed=seed,
                                                        target_scale=target_scale)
            else:
                probs = predictive_uncertainty.classify(posterior, model, X_test, samples=samples, seed=seed,
                                                        predictive=predictive)["probs"]
                out["test"] = {**metrics.classification_scores(probs, y_test),
                               **metrics.calibration(probs, y_test, bins)}
            if calibration:
                scores = conformal.conformity(model, posterior, X_test, y_test, samples=samples, seed=seed,
                                              target_mean=target_mean, target_scale=target_scale, probs=probs)
                out["test"].update(conformal.coverage_metrics(model, calibration, scores, probs))
        if X_train is not None:
            if is_mixture(posterior):
                out["train"] = _members_neg_elbo(posterior, model, X_train, y_train, predictive, samples, seed)
            else:
                nelbo = metrics.neg_elbo_per_example(posterior, model, prior_precision, X_train, y_train,
                                                     predictive=predictive, samples=min(samples, 100),
                                                     rng=streams.derive_rng(seed, streams.EVAL, 1))
                out["train"] = {"neg_elbo_per_example": float(nelbo), "n": int(len(X_train))}
            if model.likelihood == "gaussian" and target_scale != 1.0:
                # the ELBO is the fit's objective, on the scale the fit trained on (its likelihood part is
                # log(target_scale) per example below the same in the target's units)
                out["train"]["target"] = "standardised"
    return out


def _members_neg_elbo(posterior, model, X_train, y_train, predictive, samples, seed) -> dict:
    """The training -ELBO / N of a mixture's members, each with its own noise and prior precisions and the draws
    of ``member_seed(seed, k)`` (member k's fit scored alone, with that seed), and their mean: an upper bound on
    the mixture's own -ELBO / N (the entropy of a mixture is at least the mean of its members'), which has no
    closed form."""
    values = [float(metrics.neg_elbo_per_example(
                  member, part_model, prior, X_train, y_train, predictive=predictive, samples=min(samples, 100),
                  rng=streams.derive_rng(streams.member_seed(seed, k), streams.EVAL, 1)))
              for k, (member, part_model, prior) in enumerate(posterior.components(model))]
    return {"neg_elbo_per_example": float(np.mean(values)), "n": int(len(X_train)), "members": values}


def _digests_of(train: dict) -> set:
    """The digests a run's training data go by: their sha256, and for arrays with whole-number targets the digests of
    them written as integers (int64 and their own type), which runs written before targets were hashed as float64
    hold for integer targets (``slangcli.api._digests``; ``sha256_as_given``: files of the few commits before)."""
    found = [train.get("sha256"), train.get("sha256_as_given"), *(train.get("sha256_as_integers") or [])]
    return {digest for digest in found if isinstance(digest, str)} or {None}


def check_comparable(run: Run, run_name: str, reference: Run, reference_name: str,
                     notify: Callable[[str], None] | None = None) -> None:
    """Refuse, with one DataError line, a reference run whose posterior is over other parameters (another model)
    or that was fitted to other training data (file checksum, the rows used, feature standardisation); and, with
    one ConfigError line, a mixture of posteriors on either side (:func:`refuse_mixture`). Other noise precisions
    (learned by default, so never equal) or prior precisions leave the parameters the same: they are compared,
    the noise precisions noted through ``notify``."""
    refuse_mixture(run, run_name, "compared with a reference posterior")
    refuse_mixture(reference, reference_name, "a reference posterior")
    a, b = run.model, reference.model
    checks = [("layer sizes", a.sizes, b.sizes), ("likelihood", a.likelihood, b.likelihood)]
    if not a.is_linear:  # the activation means nothing without hidden layers
        checks.append(("activation", a.activation, b.activation))
    if a.likelihood == "gaussian" and a.noise_precision != b.noise_precision and notify is not None:
        notify(f"{reference_name}: noise precision {b.noise_precision:.4g} against {a.noise_precision:.4g} in "
               f"{run_name}: the posteriors are over the same weights under different likelihoods")
    for what, x, z in checks:
        if x != z:
            raise DataError(f"{reference_name}: not comparable with {run_name}: different model ({what} {z} vs {x})")
    train_a, train_b = run.data["train"], reference.data["train"]
    arrays = [train.get("format") == ARRAYS for train in (train_a, train_b)]
    if arrays[0] != arrays[1]:
        # a file's sha256 is of its bytes, arrays' of their values: the same rows give two digests
        if notify is not None:
            notify(f"{reference_name}: one run was fitted to a file and the other to arrays from Python, whose "
                   "digests cannot be compared: that they were fitted to the same rows is not checked")
        why = None
    elif not _digests_of(train_a) & _digests_of(train_b):
        why = "the training files' sha256 differ" if not arrays[0] else "the training arrays' sha256 differ"
    elif not _same_rows(run.arrays.get("train_index"), reference.arrays.get("train_index")):
        why = "different rows of the training file (another split)"
    elif not _same_rows(run.calibration.get("index"), reference.calibration.get("index")):
        why = "different rows of the training file held out by --calibrate"
    else:
        why = None
    if why is None and bool(run.data.get("standardize")) != bool(reference.data.get("standardize")):
        why = "features standardised in one run only"
    if why is None:
        return
    raise DataError(f"{reference_name}: not comparable with {run_name}: fitted to different training data ({why})")


def refuse_mixture(run: Run, run_name: str, role: str) -> None:
    """Refuse a mixture of posteriors (``slang fit --members K``) as ``role`` (what the posterior would be used
    as): the KL divergences between two posteriors, and the moments the posterior figure compares, are those of
    Gaussians, and a mixture's KL divergence has no closed form."""
    if is_mixture(run.posterior):
        raise ConfigError(f"{run_name}: a mixture of {run.posterior.n_members} posteriors (--members) cannot be "
                          f"{role}: the KL divergence is computed between two Gaussian posteriors, and a "
                          "mixture's has no closed form")


def _same_rows(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and bool(np.all(a == b))


def compare(run: Run, run_name: str, reference: Run, reference_name: str) -> dict:
    """KL divergences between the two runs' posteriors (after :func:`check_comparable`)."""
    check_comparable(run, run_name, reference, reference_name)
    p, q = run.posterior, reference.posterior
    forward, backward = divergence.kl(p, q), divergence.kl(q, p)
    return {"path": reference_name, "method": reference.config.get("method"), "kind": q.kind,
            "symmetric_kl": 0.5 * (forward + backward), "kl_run_to_reference": forward,
            "kl_reference_to_run": backward}


def _scoring_data(run: Run, run_name: str, data_path, notify, without_train: str | None,
                  missing: str | None = None, layout: str | None = None, header: bool | None = None):
    """``(X_test, y_test, source, X_train, y_train, target_scale)`` for scoring a stored run; the training data
    are None when ``without_train`` is None (not needed), or with a note ending in ``without_train`` when they
    cannot be re-read."""
    X_test, y_test, source = load_test(run, run_name, data_path, missing=missing, layout=layout, header=header,
                                       notify=notify)
    X_train = y_train = None
    if without_train is not None:
        try:
            X_train, y_train = load_train(run, run_name)
        except (DataError, ConfigError) as exc:  # (gone, changed, or read from standard input or a pipe)
            notify(f"{exc}; {without_train}")
    target_scale = float(run.arrays["target_scale"][0]) if "target_scale" in run.arrays else 1.0
    return X_test, y_test, source, X_train, y_train, target_scale


def fit_draws(run: Run, samples: int | None = None, seed: int | None = None) -> tuple[int, int]:
    """``(samples, seed)`` of a predictive of ``run``: as given, or (None) those its stored scores were made with,
    so that scoring a run on its test data by default gives the scores it stores, and predictions come from the
    draws its calibration was made with: ``slang compress --evaluate``'s ``--samples`` and ``--seed`` (recorded in
    its ``metrics``), else the fit's ``--eval-samples`` and ``--seed`` (1000 and 0 when the run records none; the
    reader has checked them)."""
    config, metrics = run.config or {}, run.metrics or {}

    def recorded(key, fallback):
        value = metrics.get(key)
        counts = isinstance(value, int) and not isinstance(value, bool) and value >= (1 if key == "samples" else 0)
        return value if counts else fallback

    return (recorded("samples", config.get("eval_samples", 1000)) if samples is None else samples,
            recorded("seed", config.get("seed", 0)) if seed is None else seed)


def evaluate(run: Run, run_name: str, data_path=None, *, predictive="auto", samples=None, seed=None, bins=15,
             reference: Run | None = None, reference_name: str = "reference", missing: str | None = None,
             layout: str | None = None, header: bool | None = None,
             notify: Callable[[str], None] = lambda msg: None) -> dict:
    """Score a stored run on ``data_path`` or on its own test data, plus its training -ELBO / N (``out["train"]``:
    the value the run stores from its fit, ``stored=True``; a compressed run stores none, and its -ELBO is
    computed when its training data can be re-read, else absent); with a ``reference`` run, also the KL divergences
    between the two posteriors (``out["reference"]``). ``samples`` and ``seed``: :func:`fit_draws`; ``out["seed"]``
    is the seed used."""
    samples, seed = fit_draws(run, samples, seed)
    if reference is not None:
        check_comparable(run, run_name, reference, reference_name, notify)
    # (the fit's own value: recomputing it re-read and re-scored every training row, whatever DATA was, 10 of the
    # 12.7 s of scoring 200 rows of a 200-class model)
    stored_train = run.metrics.get("train")
    X_test, y_test, source, X_train, y_train, target_scale = _scoring_data(
        run, run_name, data_path, notify, None if stored_train
        else "the training -ELBO is not reported (the run stores none)", missing, layout, header)
    target_mean = float(run.arrays["target_mean"][0]) if "target_mean" in run.arrays else 0.0
    with computing_with(run_name):
        out = score(run.model, run.posterior, run.prior_precision, X_train=X_train, y_train=y_train,
                    X_test=X_test, y_test=y_test, target_scale=target_scale, predictive=predictive,
                    samples=samples, seed=seed, bins=bins, calibration=run.calibration, target_mean=target_mean)
    check_finite({k: out[k] for k in ("test", "train") if k in out}, "scores", run_name)
    if X_train is None and stored_train:
        out["train"] = dict(stored_train, stored=True)
    out["data"], out["seed"] = source, seed
    if reference is not None:
        with computing_with(run_name, reference_name):
            out["reference"] = compare(run, run_name, reference, reference_name)
        check_finite(out["reference"], "KL divergences", run_name, reference_name)
    return out


@dataclass
class Predictions:
    """Per-example predictions of a run on a data set.

    ``arrays`` holds, in output order, under the names of the HDF5 predictions file (``docs/FORMAT.md``):
    ``row`` (the 0-based data row predicted; not from :func:`predict_arrays`), then
    classification ``probabilities : (N, C)``, ``predicted`` (label values), ``entropy_total``,
    ``entropy_aleatoric``, ``entropy_epistemic``; regression ``mean``, ``std_total``, ``std_aleatoric``,
    ``std_epistemic``, ``lower``, ``upper`` (original units); for a run fitted with ``--calibrate``
    (``slangcli.predictive.conformal``), regression ``calibrated_lower``, ``calibrated_upper`` (the split-conformal
    interval of the same level, ``mean -+ q std_total``), classification ``calibrated_set`` ``(N, C)`` (1 for the
    classes in the prediction set) and ``calibrated_set_size``; and ``target`` (label values or original units) when
    the data carry the target column. ``classes`` are the label values of the probability columns, ``info`` a
    JSON-ready description (likelihood, predictive, samples, seed, interval, data, rows, and a calibrated run's
    ``calibration``: ``n``, ``fraction``, ``level``, ``quantile`` (null: infinite), how its scores were made).
    """

    arrays: dict
    classes: list | None
    info: dict


def predict(run: Run, run_name: str, data_path, *, samples: int | None = None, seed: int | None = None,
            interval: float = 0.95, missing: str | None = None, layout: str | None = None, header: bool | None = None,
            notify: Callable[[str], None] = lambda msg: None) -> Predictions:
    """Per-example predictions with their uncertainty (``slangcli.predictive.predict``) of the run on ``data_path``.

    Logistic regression uses the exact 1-D quadrature predictive (``samples`` and ``seed`` are then unused);
    every other model ``samples`` Monte-Carlo weight samples drawn from ``seed``'s own stream (``streams.PREDICT``),
    by default the fit's (:func:`fit_draws`). ``missing``, ``layout`` and ``header`` are those of
    :func:`slangcli.data.sources.load_inputs`: by default a row with a missing value keeps its place, its
    predictions empty (NaN, and "" for string labels); the ``row`` array says which data row each prediction is of.
    """
    samples, seed = fit_draws(run, samples, seed)
    metrics.check_samples(samples)
    if not 0.0 < interval < 1.0:
        raise ConfigError(f"--interval must lie strictly between 0 and 1, got {interval}")
    X, target, source, rows = load_inputs(run, data_path, missing=missing, layout=layout, header=header,
                                          notify=notify)
    with computing_with(run_name):
        out = predict_arrays(run, X, samples=samples, seed=seed, interval=interval)
    # (calibrated bounds are infinite where the calibration rows are too few for a finite interval at this level)
    infinite = out.info.get("calibration") and out.info["calibration"]["quantile"] is None
    check_finite({name: values for name, values in out.arrays.items()
                  if not (infinite and name.startswith("calibrated_"))}, "predictions", run_name)
    if target is not None:
        out.arrays["target"] = target
    if source.get("rows_missing"):
        out.arrays = {name: _in_place(values, rows, source["rows"]) for name, values in out.arrays.items()}
        rows = np.arange(source["rows"])
    out.arrays = {"row": rows.astype(np.int64), **out.arrays}
    out.info.update(run=run_name, data=source)
    return out


def _in_place(values: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """``values`` of the data rows ``rows`` put in their places among ``n`` rows, the others empty: NaN, or ""
    for string labels."""
    full = np.full((n, *values.shape[1:]), "" if values.dtype.kind == "U" else np.nan,
                   dtype=values.dtype if values.dtype.kind == "U" else np.float64)
    full[rows] = values
    return full


def predict_arrays(run: Run, X: np.ndarray, *, samples: int | None = None, seed: int | None = None,
                   interval: float = 0.95) -> Predictions:
    """Per-example predictions of ``run`` on features ``X`` prepared as in the fit (:func:`transform`): the one
    predictive behind ``slang predict``, ``slang evaluate`` and the Python API (``samples`` and ``seed``:
    :func:`fit_draws`)."""
    samples, seed = fit_draws(run, samples, seed)
    metrics.check_samples(samples)
    if not 0.0 < interval < 1.0:
        raise ConfigError(f"--interval must lie strictly between 0 and 1, got {interval}")
    model = run.model
    with blas_threads(model.n_params, min(samples, metrics.SAMPLE_CHUNK), max(len(X), 1)):
        if model.likelihood == "gaussian":
            out = predictive_uncertainty.regress(
                run.posterior, model, X, samples=samples, seed=seed, level=interval,
                target_mean=float(run.arrays["target_mean"][0]), target_scale=float(run.arrays["target_scale"][0]))
            arrays = {name: out[name] for name in ("mean", "std_total", "std_aleatoric", "std_epistemic", "lower",
                                                   "upper")}
            classes = None
        else:
            out = predictive_uncertainty.classify(run.posterior, model, X, samples=samples, seed=seed)
            labels = LabelMap(tuple(run.data["labels"]["classes"]))
            arrays = {"probabilities": out["probs"], "predicted": labels.decode(np.argmax(out["probs"], axis=1))}
            arrays.update((name, out[name]) for name in ("entropy_total", "entropy_aleatoric", "entropy_epistemic"))
            classes = list(labels.values)
    mc = out["predictive"] == "mc"
    info = {"run": None, "likelihood": model.likelihood, "predictive": out["predictive"],
            "samples": samples if mc else None, "draws": metrics.drawn(run.posterior, samples) if mc else None,
            "seed": seed if mc else None,
            "interval": interval if model.likelihood == "gaussian" else None, "data": {"rows": int(len(X))}}
    if run.calibration:
        # the split-conformal intervals or sets of the same level, from the same predictive (the run's scores)
        q = conformal.quantile(run.calibration["scores"], interval)
        if model.likelihood == "gaussian":
            arrays["calibrated_lower"], arrays["calibrated_upper"] = conformal.intervals(out["mean"], out["std_total"],
                                                                                         q)
        else:
            arrays["calibrated_set"] = conformal.sets(out["probs"], q)
            arrays["calibrated_set_size"] = arrays["calibrated_set"].sum(axis=1)
        info["calibration"] = {**{key: run.calibration[key] for key in ("n", "fraction", "seed", "score", "predictive",
                                                                        "samples")},
                               "level": interval, "quantile": None if math.isinf(q) else q}
    return Predictions(arrays=arrays, classes=classes, info=info)
