"""What the figures of ``slang plot`` show, computed from run files: plain arrays and records, no drawing.

``slangcli.plot.figures`` draws these records with matplotlib and does no arithmetic beyond axis limits; this module
never imports matplotlib, so everything a figure shows is tested without it.

- training curves: the -ELBO / N per epoch of the step methods (the epoch's mean minibatch NLL plus the KL term
  at its end; the NLL alone for runs written before the KL was recorded), or per L-BFGS iteration of the exact
  solvers, with the final training -ELBO / N and test score stored in the run;
- calibration: the reliability bins of a classifier (stored by ``slang fit``/``evaluate``, or recomputed on other
  data or bins), or the observed coverage of a regression model's central predictive intervals against their
  nominal level;
- spectrum: per weight matrix, the explained variance ``gamma_i^2 / sum_j gamma_j^2`` of each singular value of
  the matrix of posterior standard deviations (the k-tied Normal paper's Figure 2), with the kept rank of a
  compressed run;
- posterior: means and marginal variances of the weights against a reference run's, and the covariances among
  the first weights (the SLANG paper's Figure 1);
- sweep: a metric against a swept parameter, averaged over seeds and splits, one series per method.

What is computed from a stored posterior (recomputed calibration, the spectrum, the posterior's moments and KL
divergences) is computed as ``slang evaluate`` does, inside ``evaluation.computing_with``: NumPy's floating-point
warnings off, every result checked, and a non-finite result or a failed factorisation one FormatError naming the
run file (values the reader accepts can still overflow float64 arithmetic).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from slangcli.compress import ktied as compress
from slangcli.errors import ConfigError, DataError
from slangcli.gaussian import divergence
from slangcli.methods import METHODS
from slangcli.methods.base import display_name, rank_symbol
from slangcli.methods.exact import closed_form
from slangcli.predictive import metrics
from slangcli.predictive.evaluation import check_finite, computing_with, fit_draws
from slangcli.runfile.io import RUN_TYPE, Run, read_run

# central intervals whose coverage the regression calibration figure shows: 5 %, 10 %, ..., 95 % and 99 %
COVERAGE_GRID = tuple(np.round(np.r_[np.arange(0.05, 0.951, 0.05), 0.99], 2).tolist())
# the posterior figure draws the covariance among this many weights (the first ones), enough to show structure
# at a paper column's resolution
COVARIANCE_BLOCK = 64

# --metric names of the sweep figure: path in the run's metrics, axis label with units, whether lower is better
METRICS = {
    "nll": (("test", "nll"), "test NLL (nats per example)"),
    "accuracy": (("test", "accuracy"), "test accuracy (fraction)"),
    "error": (("test", "accuracy"), "test error (%)"),
    "ece": (("test", "ece"), "test expected calibration error"),
    "rmse": (("test", "rmse"), "test RMSE (target units)"),
    "loglik": (("test", "loglik"), "test log-likelihood (nats per example)"),
    "elbo": (("train", "neg_elbo_per_example"), "training -ELBO / N (nats per example)"),
    "fit_seconds": (("fit_seconds",), "fit time (s)"),
}
# parameters that index replicates of one setting: the sweep figure averages over them
REPLICATE_KEYS = ("seed", "split_seed", "uci_split")


# ------------------------------------------------------------------------------------------------ loading


def expand_runs(paths) -> list[tuple[str, bool]]:
    """The files named by ``paths``, each with whether it was found in a directory: a file as given, a directory
    as every ``*.h5`` file under it, sorted."""
    out = []
    for p in paths:
        if os.path.isdir(p):
            found = sorted(str(f) for f in Path(p).rglob("*.h5") if not f.name.startswith("."))
            if not found:
                raise DataError(f"{p}: no run files (*.h5) in this directory")
            out += [(f, True) for f in found]
        else:
            out.append((str(p), False))
    return out


def _is_run_file(path: str) -> bool:
    """Whether the HDF5 file at ``path`` says it is a slang run file (a prediction file, ``slang predict -o
    P.h5``, is another HDF5 file a run's directory may hold); the reader checks the rest."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            return f.attrs.get("encoding-type") == RUN_TYPE
    except (OSError, ValueError):
        return True  # (not readable as HDF5: the reader names what is wrong with it)


def load_runs(paths, notify=lambda msg: None) -> list[tuple[str, Run]]:
    """``(path, run)`` for every complete run named by ``paths``; checkpoints (fits still in progress), and
    files found in a directory that are not run files (predictions), are skipped with a note."""
    out = []
    for path, in_directory in expand_runs(paths):
        if in_directory and not _is_run_file(path):
            notify(f"{path}: not a run file (a prediction file?); left out")
            continue
        run = read_run(path)
        if run.status != "complete":
            notify(f"{path}: a checkpoint (fit not finished); left out")
            continue
        out.append((path, run))
    if not out:
        raise DataError("no complete run files to plot")
    return out


def method_label(run: Run, *, rank=True, compression=True, members=True) -> str:
    """``"SLANG L = 5"``, ``"k-tied k = 2"``, ``"bbb, compressed to k = 2"``, ``"SLANG L = 5, 5 members"``, else
    the method's name (without the rank, the compression or the members when these are what a sweep varies)."""
    cfg = run.config
    method, hyper = cfg.get("method", "?"), cfg.get("hyper") or {}
    module = METHODS.get(method)  # None for a method this slang does not know: its name as stored
    label = display_name(module, method)
    if rank and "rank" in hyper:
        label += f" {rank_symbol(module)} = {hyper['rank']}"
    if run.compression and compression:
        label += f", compressed to k = {run.compression.get('rank', '?')}"
    if members and _members(run) > 1:
        label += f", {_members(run)} members"
    return label


def _members(run: Run) -> int:
    """The number of posteriors of a run (``--members``; 1 before 1.5): the reader has checked that its posterior
    holds as many."""
    return int((run.config or {}).get("members", 1))


def labels_for(runs, given=()) -> list[str]:
    """One legend label per run: ``given`` ones first, then :func:`method_label`; runs that would share a label
    get the settings in which they differ (``"SLANG L = 2, split_seed = 1"``), and the file name if even these
    are equal."""
    given = list(given)
    if len(given) > len(runs):
        raise ConfigError(f"{len(given)} --label values for {len(runs)} runs")
    labels = given + [method_label(run) for _, run in runs[len(given):]]
    params = _named_data([run_parameters(run) for _, run in runs])
    base = list(labels)
    for label in set(base[len(given):]):
        same = [i for i in range(len(given), len(runs)) if base[i] == label]
        if len(same) < 2:
            continue
        differ = [k for k in sorted({k for i in same for k in params[i]} - {"method", "rank", "members"})
                  if len({_key(params[i].get(k)) for i in same}) > 1]
        for i in same:
            labels[i] = ", ".join([label, *(f"{k} = {params[i].get(k)}" for k in differ)])
    for i, (path, _) in enumerate(runs):
        if i >= len(given) and labels.count(labels[i]) > 1:
            labels[i] = f"{labels[i]} ({Path(path).stem})"
    return labels


# ------------------------------------------------------------------------------------------------ training


@dataclass(frozen=True)
class Curve:
    """One run's training record. ``x`` epochs (step methods) or L-BFGS iterations (exact solvers)."""

    label: str
    x: np.ndarray
    y: np.ndarray
    axis: str  # "epoch" or "iteration"
    quantity: str  # what y is
    final_elbo: float | None  # training -ELBO / N of the final posterior
    final_test: float | None  # its test score (NLL for classification, RMSE for regression)
    test_name: str | None


def training_curve(run: Run, label: str, run_name: str) -> Curve:
    h = run.history
    if closed_form(run.metrics.get("solver") or {}):
        raise DataError(f"{run_name}: its posterior is a linear regression's closed form, with no training to plot "
                        "(its -ELBO / N is in slang inspect)")
    if "epoch" in h and "nll" in h and h["epoch"].size and h.get("kl", np.empty(0)).shape == h["nll"].shape:
        # the epoch's mean minibatch NLL plus the KL term at its end
        x, y, axis = h["epoch"].astype(float), h["nll"] + h["kl"], "epoch"
        quantity = "training -ELBO / N"
    elif "epoch" in h and "nll" in h and h["epoch"].size:  # runs written before the KL was recorded
        x, y, axis = h["epoch"].astype(float), h["nll"], "epoch"
        quantity = "training NLL per example (mean over the epoch's minibatches)"
    elif "iteration" in h and "neg_elbo_per_example" in h and h["iteration"].size:
        x, y, axis = h["iteration"].astype(float), h["neg_elbo_per_example"], "iteration"
        quantity = "training -ELBO / N"
    else:
        raise DataError(f"{run_name}: no training history to plot (no epoch/nll or iteration records)")
    if _members(run) > 1:  # each member has its training history; the curve is the first member's
        label += f" (member 1 of {_members(run)})"
    test = run.metrics.get("test") or {}
    test_name = "nll" if "nll" in test else ("rmse" if "rmse" in test else None)
    elbo = (run.metrics.get("train") or {}).get("neg_elbo_per_example")
    return Curve(label, x, np.asarray(y, dtype=float), axis, quantity, elbo,
                 test.get(test_name) if test_name else None, test_name)


# ------------------------------------------------------------------------------------------------ calibration


@dataclass(frozen=True)
class Reliability:
    """Reliability bins of a classifier: ``edges : (B + 1,)``, ``count``, ``confidence``, ``accuracy : (B,)``
    (NaN for an empty bin), the ECE, and the number of classes (confidences are at least ``1 / classes``)."""

    label: str
    edges: np.ndarray
    count: np.ndarray
    confidence: np.ndarray
    accuracy: np.ndarray
    ece: float
    classes: int
    source: str


@dataclass(frozen=True)
class Coverage:
    """Observed fraction of test targets inside each central predictive interval of nominal ``level``."""

    label: str
    level: np.ndarray
    observed: np.ndarray
    n: int
    source: str


def _float_or_nan(values) -> np.ndarray:
    return np.array([np.nan if v is None else float(v) for v in values])


def _classes(run: Run) -> int:
    return 2 if run.model.likelihood == "bernoulli" else int(run.model.sizes[-1])


def calibration(run: Run, run_name: str, label: str, data=None, *, bins=None, samples=None, seed=None):
    """A :class:`Reliability` (classification) or :class:`Coverage` (regression) of ``run``.

    Classification uses the bins stored at fit time unless ``data`` or ``bins`` asks for others (or the run
    predates them); then it scores the run as ``slang evaluate`` does. Regression always predicts the test data
    (``data``, else the run's own): the stored coverage has only three levels. ``samples`` and ``seed`` default to
    those of the run's stored scores, as ``slang evaluate``'s do (``slangcli.predictive.evaluation.fit_draws``).
    """
    samples, seed = fit_draws(run, samples, seed)
    if run.model.likelihood == "gaussian":
        return _coverage(run, run_name, label, data, samples=samples, seed=seed)
    stored = (run.metrics.get("test") or {}).get("calibration")
    if data is None and stored is not None and bins in (None, stored["bins"]):
        test = run.metrics["test"]
        source = "stored at fit time"
    else:
        test = _score_classifier(run, run_name, data, bins=bins or 15, samples=samples, seed=seed)
        source = f"{data}" if data is not None else "the run's test data"
        stored = test["calibration"]
    return Reliability(label, np.asarray(stored["edges"], dtype=float), np.asarray(stored["count"], dtype=np.int64),
                       _float_or_nan(stored["confidence"]), _float_or_nan(stored["accuracy"]), float(test["ece"]),
                       _classes(run), source)


# The scoring below is the only use of the scores (slangcli.predictive.evaluation) in the figures: a rename there is a
# fix here alone.
def _score_classifier(run, run_name, data, *, bins, samples, seed) -> dict:
    from slangcli.data.sources import load_test
    from slangcli.predictive.evaluation import score

    X, y, _ = load_test(run, run_name, data, data_option="a data file with --data")
    with computing_with(run_name):
        out = score(run.model, run.posterior, run.prior_precision, X_train=None, y_train=None, X_test=X, y_test=y,
                    samples=samples, seed=seed, bins=bins)
    check_finite({"test": out["test"]}, "scores", run_name)
    return out["test"]


def _coverage(run, run_name, label, data, *, samples, seed) -> Coverage:
    from slangcli.data.sources import load_test

    X, y, source = load_test(run, run_name, data, data_option="a data file with --data")
    # the weight samples of `slang evaluate --seed` and `slang predict --seed` (the one predictive)
    with computing_with(run_name):
        out = metrics.regression_scores(run.posterior, run.model, X, y, samples=samples, seed=seed,
                                        levels=COVERAGE_GRID)
    check_finite({"test": out}, "scores", run_name)
    levels = np.array(COVERAGE_GRID)
    observed = np.array([out["coverage"][f"{c:g}"] for c in COVERAGE_GRID])
    return Coverage(label, levels, observed, int(out["n"]), source.get("path", "test data"))


# ------------------------------------------------------------------------------------------------ spectrum


@dataclass(frozen=True)
class Spectrum:
    """Explained variance of every singular value of each weight matrix's standard deviations, and the rank kept
    by a compression (None otherwise)."""

    label: str
    shapes: list  # (m, n) per weight matrix
    explained: list  # (min(m, n),) per weight matrix
    kept: list | None  # rank per weight matrix of a compressed run


def spectrum(run: Run, label: str, run_name: str = "run") -> Spectrum:
    """The spectrum of the run's posterior standard deviations; of a mixture's first member (each member has its own,
    and the mixture's marginal standard deviations mix them), said in the label."""
    layers = run.model.layout.layers
    posterior = run.posterior
    if _members(run) > 1:
        posterior = posterior.members[0]
        label += f" (member 1 of {_members(run)})"
    shapes = [(s.n_in, s.n_out) for s in layers]
    arrays = run.compression_arrays
    if run.compression and all(f"explained_variance_{l}" in arrays for l in range(len(layers))):
        # the spectrum of the source posterior, which the compression truncated
        explained = [np.asarray(arrays[f"explained_variance_{l}"], dtype=float) for l in range(len(layers))]
        kept = [int(layer["rank"]) for layer in run.compression.get("layers", [])] or None
        return Spectrum(label, shapes, explained, kept)
    with computing_with(run_name):
        matrices, _ = compress.std_matrices(posterior, run.model)
        explained = []
        for A in matrices:
            s = np.linalg.svd(A, compute_uv=False)
            explained.append(s**2 / np.sum(s**2))
    check_finite({"explained variance": explained}, "spectra", run_name)
    return Spectrum(label, shapes, explained, None)


# ------------------------------------------------------------------------------------------------ posterior


@dataclass(frozen=True)
class PosteriorSummary:
    """The weights of one posterior (biases left out: their prior is usually far wider, and their variances would
    set the scale of every panel): ``mean, variance : (W,)``, the covariance ``(B, B)`` of the first ``B`` weights,
    and the symmetric KL divergence (over all parameters) to the reference (None for the reference itself)."""

    label: str
    mean: np.ndarray
    variance: np.ndarray
    covariance: np.ndarray
    symmetric_kl: float | None


def summarize_posterior(run: Run, label: str, block: int = COVARIANCE_BLOCK, reference: Run | None = None, *,
                        run_name: str = "run", reference_name: str = "reference") -> PosteriorSummary:
    p = run.posterior
    weights = np.flatnonzero(~run.model.layout.bias_mask())
    first = weights[:block]
    columns = np.zeros((p.mean.size, first.size))
    columns[first, np.arange(first.size)] = 1.0
    with computing_with(run_name):
        # Sigma's columns of the first weights: O(D L B) for SLANG, never a D x D matrix for the structured kinds
        covariance = p.cov_times(columns)[first]
        variance = p.marginal_variances()[weights]
    check_finite({"marginal variance": variance, "covariance": covariance}, "moments", run_name)
    kl = None
    if reference is not None:
        with computing_with(run_name, reference_name):
            kl = divergence.symmetric_kl(p, reference.posterior)
        check_finite({"symmetric": kl}, "KL divergence", run_name, reference_name)
    return PosteriorSummary(label, p.mean[weights], variance, covariance, kl)


def compare_posterior(run: Run, run_name: str, label: str, reference: Run, reference_name: str,
                      block: int = COVARIANCE_BLOCK) -> PosteriorSummary:
    """:func:`summarize_posterior` of a run comparable with the reference (same model and training data)."""
    from slangcli.predictive.evaluation import check_comparable

    check_comparable(run, run_name, reference, reference_name)
    return summarize_posterior(run, label, block, reference, run_name=run_name, reference_name=reference_name)


# ------------------------------------------------------------------------------------------------ sweep


def run_parameters(run: Run) -> dict:
    """Every setting of a fit under one flat name: the method, its hyperparameters (``rank``, ``lr``, ...), the
    schedule and prior (``batch_size``, ``epochs``, ``prior_precision``, ...), the model (``hidden``,
    ``activation``), the data options (``split_seed``, ``uci_split``, ``test_fraction``, ...) and a compression's
    ``compress_rank``."""
    cfg = run.config
    # n_steps follows from epochs and batch size: not a setting of its own
    out = {k: v for k, v in cfg.items() if not isinstance(v, (dict, list)) and v is not None and k != "n_steps"}
    out.update({k: v for k, v in (cfg.get("hyper") or {}).items() if v is not None})
    model = cfg.get("model") or {}
    sizes = list(model.get("sizes") or run.model.sizes)
    out["hidden"] = ",".join(str(s) for s in sizes[1:-1]) or "none"
    out["activation"] = model.get("activation", run.model.activation)
    options = (run.data or {}).get("options") or {}
    out.update({k: v for k, v in options.items() if k not in ("path", "test") and v is not None})
    train = (run.data or {}).get("train") or {}
    path = train.get("folder") or train.get("path") or options.get("path")
    if path is not None:
        # the data file (or UCI folder): runs on different data are never replicates of one point
        out["data"] = str(path)
    if run.compression:
        out["compress_rank"] = run.compression.get("rank")
    out.setdefault("members", 1)  # (runs written before --members: one posterior)
    return out


def metric_value(run: Run, metric: str, run_name: str) -> float:
    """The value of ``metric`` (a name of :data:`METRICS`, or a dotted path into the run's metrics such as
    ``test.coverage.0.9``)."""
    path = METRICS[metric][0] if metric in METRICS else None
    node = run.metrics
    if path is None:
        parts = metric.split(".")
        while parts:  # keys may hold dots ("0.9"): take the longest key that matches
            for j in range(len(parts), 0, -1):
                key = ".".join(parts[:j])
                if isinstance(node, dict) and key in node:
                    node, parts = node[key], parts[j:]
                    break
            else:
                node = None
                break
    else:
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        raise DataError(f"{run_name}: no metric {metric!r} in this run")
    value = float(node)
    return 100.0 * (1.0 - value) if metric == "error" else value


def _has_metric(run: Run, metric: str) -> bool:
    try:
        metric_value(run, metric, "")
    except DataError:
        return False
    return True


def metric_label(metric: str) -> str:
    return METRICS[metric][1] if metric in METRICS else metric


@dataclass
class SweepSeries:
    """One method (and fixed setting): ``x`` the swept values, ``mean`` and ``se`` of the metric over ``n``
    replicates each. A method without the swept parameter has one point with ``x = None`` (drawn as a level)."""

    label: str
    x: list = field(default_factory=list)
    mean: list = field(default_factory=list)
    se: list = field(default_factory=list)
    n: list = field(default_factory=list)


@dataclass(frozen=True)
class Sweep:
    param: str
    metric: str
    series: list
    replicates: int  # most replicates behind one point


def _key(value):
    return json.dumps(value, sort_keys=True)


def _varying(params: list[dict], exclude) -> list[str]:
    """Parameters that take several values among the runs of one method (methods differ in their own defaults,
    such as the learning rate, without that being swept)."""
    by_method: dict[str, list[dict]] = {}
    for p in params:
        by_method.setdefault(str(p.get("method")), []).append(p)
    names = sorted({k for p in params for k in p} - {"method", *exclude})
    return [k for k in names if any(len({_key(p[k]) for p in group if k in p}) > 1 for group in by_method.values())]


def _named_data(params: list[dict]) -> list[dict]:
    """``params`` with each ``data`` path shortened for a label: its last part (the file or folder name), or more
    of its parts where that name is shared by different paths."""
    paths = sorted({p["data"] for p in params if "data" in p})
    parts = {path: Path(path).parts for path in paths}
    names = {}
    for path in paths:
        for k in range(1, len(parts[path]) + 1):
            name = str(Path(*parts[path][-k:]))
            if all(other == path or Path(*parts[other][-k:]) != Path(name) for other in paths):
                break
        names[path] = name
    return [{**p, "data": names[p["data"]]} if "data" in p else p for p in params]


def swept_parameter(params: list[dict]) -> str:
    """The one parameter (besides the method and the replicate keys) that takes several values within a method."""
    varying = _varying(params, (*REPLICATE_KEYS, "data"))  # (the data make series, not an axis)
    if len(varying) == 1:
        return varying[0]
    if not varying:
        raise ConfigError("the runs differ only in method and seed or split; nothing to sweep over (give --param)")
    raise ConfigError(f"several parameters vary ({', '.join(varying)}): choose one with --param")


def sweep(runs, metric: str, param: str | None = None) -> Sweep:
    """Group ``runs`` (``(path, run)`` pairs) by method and the settings other than ``param`` and the replicate
    keys; average ``metric`` over replicates at each value of ``param``, with standard errors ``std / sqrt(n)``
    (``ddof = 1``; 0 for a single replicate)."""
    params = _named_data([run_parameters(run) for _, run in runs])
    param = param or swept_parameter(params)
    if not any(param in p for p in params):
        known = sorted({k for p in params for k in p})
        raise ConfigError(f"--param {param!r}: no run has this parameter (known: {', '.join(known)})")
    if not any(_has_metric(run, metric) for _, run in runs):  # (a name none has: a usage error, as --param's)
        raise ConfigError(f"--metric {metric!r}: no run has this metric (known: {', '.join(METRICS)}, or a dotted "
                          "path into a run's metrics such as test.coverage.0.9)")
    # settings that vary but are not swept make series of their own (SLANG's rank is already in its label)
    varying_fixed = [k for k in _varying(params, (param, *REPLICATE_KEYS))
                     if k not in ("rank", "compress_rank", "members")]
    groups: dict[tuple, dict] = {}
    for (path, run), p in zip(runs, params):
        # a method's label keeps its own parameter (rank) unless that is swept
        label = method_label(run, rank=param != "rank", compression=param != "compress_rank",
                             members=param != "members")
        extra = [f"{k} = {p[k]}" for k in varying_fixed if k in p]
        name = ", ".join([label, *extra])
        x = p.get(param)
        groups.setdefault(name, {}).setdefault(_key(x), (x, []))[1].append(metric_value(run, metric, path))
    series, most = [], 0
    for name, points in groups.items():
        s = SweepSeries(name)
        for x, values in sorted(points.values(), key=lambda xv: (xv[0] is None, _sort_key(xv[0]))):
            v = np.asarray(values, dtype=float)
            s.x.append(x)
            s.mean.append(float(v.mean()))
            s.se.append(float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0)
            s.n.append(int(v.size))
            most = max(most, v.size)
        series.append(s)
    return Sweep(param, metric, series, most)


def _sort_key(x):
    return (0, float(x), "") if isinstance(x, (int, float)) and not isinstance(x, bool) else (1, 0.0, str(x))
