"""The k-tied Normal paper's MNIST experiments: post-hoc compression (Table 2) and k-tied training (Figure 4).

    python benchmarks/ktied_mnist.py --epochs 300 --json ktied_mnist.json          # the long run (hours)
    python benchmarks/ktied_mnist.py --epochs 1 --train-subset 2000 --test-subset 500 --iterations 20 \\
        --eval-samples 5 --eval-every 10 --snr-every 10                            # a smoke run (seconds)

Protocol (``../shared/reference/README.md`` and the paper's Sections 2-3, Appendix A):

- Data: MNIST IDX files in ``$SLANG_DATA_DIR/mnist`` (default ``../shared/datasets``), pixels in [0, 1]; the first
  50 000 training images train, the last 10 000 validate (the -ELBO curves), the 10 000 test images score.
- Network 784-400-400-10, ReLU, softmax likelihood; prior ``N(0, sigma_p^2)`` on every weight and bias
  (``--prior-std``, the paper's choice from {0.2, 0.3}); posterior means He-initialised, standard deviations
  starting at 0.01; Adam (``--lr``, from the paper's {1e-4, 3e-4, 1e-3, 3e-3}); ``--samples`` weight samples per
  step (one, as a reparameterised TensorFlow layer draws); optional linear KL annealing over
  ``--kl-anneal-steps`` steps for every training run (Appendix A.2 uses it for k-tied training: 5e-5 or 5e-6 of
  the KL weight per batch, i.e. 20 000 or 200 000 steps).
- Post-hoc (Table 2): Bayes by Backprop (``bbb``) trained for ``--epochs``, then its standard deviations compressed
  to ranks 1, 2, 3 (``slangcli.compress.ktied``: truncated SVD per weight matrix, floored at 1e-6 of the layer's largest
  standard deviation).
- k-tied training (Figure 4): ``ktied`` with k = 1, 2, 3 for the same budget, from the same seed (the same
  initial means as bbb).
- Test metrics of every posterior, as the paper reports them: with ``--eval-samples`` (100) weight samples
  ``theta_s``, per sample the test NLL per example, the accuracy and the test -ELBO per example
  ``NLL_s + KL(q || p) / N_train``; mean and standard error over the samples. Also the usual posterior-predictive
  NLL and accuracy of the averaged softmax.
- Curves: every ``--eval-every`` steps, the validation -ELBO per example (``--curve-samples`` weight samples), and
  with ``--snr-every`` the gradient SNR of each weight matrix's standard-deviation parameters
  (``slangcli.training.loop.gradient_snr``: ``|E g| / std g`` and the paper's footnote-2 ``E[g^2] / Var[g^2]``, from
  ``--snr-draws`` independent minibatch-and-noise draws at the current parameters; the paper instead takes a
  window of the last 10 training batches). The paper's SNR table is for the second layer ("Dense 2").

Variational parameter counts follow the paper's Table 1 (mean field 2 D; k-tied D + sum_l k (m_l + n_l) + biases).
The printed table sets every row beside the paper's (``ktied_results.csv``). The four training runs (bbb and
ktied at each rank) are independent tasks of ``slang sweep``'s machinery, on a local Dask cluster of ``--jobs``
processes or on the cluster at ``--scheduler``.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.special

from results import write_json
from slangcli import streams
from slangcli.cluster import dask_client, run_tasks
from slangcli.compress import ktied as compress
from slangcli.data.readers import read_idx
from slangcli.methods import METHODS
from slangcli.methods.base import Problem
from slangcli.models import MLP
from slangcli.predictive.metrics import ACTIVATION_BUDGET
from slangcli.threads import blas_threads, keep_freed_memory
from slangcli.training import loop as train

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = Path(os.environ.get("SLANG_DATA_DIR", HERE.parents[1] / "shared" / "datasets"))
SIZES = (784, 400, 400, 10)
N_TRAIN = 50_000


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    p.add_argument("--epochs", type=int, default=300, help="training budget of every run, in epochs")
    p.add_argument("--iterations", type=int, default=None, help="cap on the steps of every run (smoke runs)")
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--samples", type=int, default=1, help="weight samples per training step")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--prior-std", type=float, default=0.2)
    p.add_argument("--init-std", type=float, default=0.01)
    p.add_argument("--kl-anneal-steps", type=int, default=0)
    p.add_argument("--ranks", default="1,2,3")
    p.add_argument("--eval-samples", type=int, default=100)
    p.add_argument("--eval-every", type=int, default=1000, help="steps between validation -ELBO points")
    p.add_argument("--curve-samples", type=int, default=4)
    p.add_argument("--snr-every", type=int, default=1000)
    p.add_argument("--snr-draws", type=int, default=10)
    p.add_argument("--train-subset", type=int, default=None, help="use only the first N training images")
    p.add_argument("--test-subset", type=int, default=None, help="score only the first N test (and validation) images")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reference", type=Path, default=HERE.parents[1] / "shared" / "reference" / "ktied_results.csv")
    p.add_argument("--json", type=Path, default=None, help="write the results as JSON to this file ('-': stdout)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes of the local Dask cluster (runs at a time)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS", help="run on this Dask cluster instead")
    return p.parse_args(argv)


def load(a):
    mnist = a.data_dir / "mnist"
    train_table = read_idx(mnist / "train-images-idx3-ubyte.gz")
    test_table = read_idx(mnist / "t10k-images-idx3-ubyte.gz")
    X, y = train_table.X, train_table.y.astype(np.int64)
    X_val, y_val = X[N_TRAIN:], y[N_TRAIN:]
    X_tr, y_tr = X[:N_TRAIN], y[:N_TRAIN]
    if a.train_subset:
        X_tr, y_tr = X_tr[: a.train_subset], y_tr[: a.train_subset]
    X_te, y_te = test_table.X, test_table.y.astype(np.int64)
    if a.test_subset:
        X_te, y_te, X_val, y_val = X_te[: a.test_subset], y_te[: a.test_subset], X_val[: a.test_subset], y_val[
            : a.test_subset]
    return (X_tr, y_tr), (X_val, y_val), (X_te, y_te)


def per_sample_scores(posterior, model, X, y, n_samples, rng):
    """Per weight sample: NLL per example and accuracy, ``(S,)`` each; and the predictive (averaged softmax)
    probabilities ``(N, 10)``."""
    nll, acc = np.empty(n_samples), np.empty(n_samples)
    probs = np.zeros((X.shape[0], model.sizes[-1]))
    chunk = max(1, ACTIVATION_BUDGET // (X.shape[0] * max(model.sizes)))
    done = 0
    while done < n_samples:
        n = min(chunk, n_samples - done)
        theta = posterior.sample(rng, n)
        f, _ = model.forward(theta, X)  # (n, N, 10)
        logp = f - scipy.special.logsumexp(f, axis=-1, keepdims=True)
        nll[done : done + n] = -logp[:, np.arange(len(y)), y].mean(1)
        acc[done : done + n] = (np.argmax(f, axis=-1) == y).mean(1)
        probs += np.exp(logp).sum(0)
        done += n
    return nll, acc, probs / n_samples


def mean_sem(x):
    return {"mean": float(np.mean(x)), "sem": float(np.std(x, ddof=1) / np.sqrt(len(x))) if len(x) > 1 else None}


def score(posterior, problem, X, y, n_samples, seed):
    """The paper's test metrics (mean and SEM over weight samples) and the predictive ones."""
    rng = streams.derive_rng(seed, streams.EVAL, 0)  # the same samples' noise for every posterior
    nll, acc, probs = per_sample_scores(posterior, problem.model, X, y, n_samples, rng)
    kl_per_example = posterior.kl_to_prior(problem.prior_precision) / problem.n_data
    p_true = probs[np.arange(len(y)), y]
    return {"neg_elbo": mean_sem(nll + kl_per_example), "nll": mean_sem(nll), "accuracy": mean_sem(100 * acc),
            "kl_per_example": kl_per_example,
            "predictive": {"nll": float(-np.mean(np.log(np.maximum(p_true, 1e-300)))),
                           "accuracy": float(100 * np.mean(np.argmax(probs, 1) == y))},
            "params": compress.n_variational_params(posterior)}


def validation_neg_elbo(posterior, problem, X, y, n_samples, seed, step):
    rng = streams.derive_rng(seed, streams.EVAL, 1, step)
    nll, _, _ = per_sample_scores(posterior, problem.model, X, y, n_samples, rng)
    return float(nll.mean() + posterior.kl_to_prior(problem.prior_precision) / problem.n_data)


def train_with_curves(method_name, hyper, problem, data, val, a, n_steps):
    """Train in segments of ``--eval-every`` steps (the loop resumes exactly), scoring the validation -ELBO after
    each; the SNR is recorded by the loop itself."""
    module = METHODS[method_name]
    X, y = data
    state = history = None
    curve, started = [], time.perf_counter()
    train_seconds = 0.0
    with blas_threads(problem.model.n_params, hyper.samples, a.batch_size):
        targets = list(range(a.eval_every, n_steps, a.eval_every)) + [n_steps]
        for target in targets:
            t0 = time.perf_counter()
            state, history = train.run(module, hyper, problem, X, y, seed=a.seed, batch_size=a.batch_size,
                                       n_steps=target, state=state, history=history, snr_every=a.snr_every,
                                       snr_draws=a.snr_draws)
            train_seconds += time.perf_counter() - t0
            curve.append([target, validation_neg_elbo(module.posterior(state), problem, *val, a.curve_samples,
                                                      a.seed, target)])
    h = history.as_arrays()
    snr = {k: h[k].tolist() for k in ("snr_step", "snr", "snr_paper") if k in h}
    return module.posterior(state), {"curve": curve, "snr": snr, "train_seconds": train_seconds,
                                     "wall_seconds": time.perf_counter() - started, "steps": n_steps}


def reference_rows(path: Path) -> dict:
    if not path.exists():
        return {}
    with open(path) as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    return {(r["experiment"], r["rank"]): r for r in rows if r["model"] == "MNIST_MLP"}


def fmt(m) -> str:
    return f"{m['mean']:.3f} ± {m['sem']:.3f}" if m["sem"] is not None else f"{m['mean']:.3f}"


def setup(a):
    """The data, problem, step count and shared hyperparameters of every run."""
    data, val, test = load(a)
    model = MLP(SIZES, activation="relu", likelihood="categorical")
    lam = model.prior_precision(1.0 / a.prior_std**2, 1.0 / a.prior_std**2)
    problem = Problem(model, lam, len(data[0]))
    n_steps = a.epochs * streams.steps_per_epoch(problem.n_data, a.batch_size)
    if a.iterations is not None:
        n_steps = min(n_steps, a.iterations)
    common = {"samples": a.samples, "lr": a.lr, "init_std": a.init_std, "kl_anneal_steps": a.kl_anneal_steps}
    return data, val, test, problem, n_steps, common


def run_one(job: dict) -> dict:
    """One training run (a Dask task): ``bbb`` with its post-hoc compressions to every rank, or ``ktied`` at one
    rank; returns its part of the results."""
    keep_freed_memory()  # as the slang command does
    a, ranks = job["args"], job["ranks"]
    data, val, test, problem, n_steps, common = setup(a)
    if job["method"] == "ktied":
        post, info = train_with_curves("ktied", METHODS["ktied"].Hyper(rank=job["rank"], **common), problem, data,
                                       val, a, n_steps)
        return {**info, "test": score(post, problem, *test, a.eval_samples, a.seed)}
    bbb_post, info = train_with_curves("bbb", METHODS["bbb"].Hyper(**common), problem, data, val, a, n_steps)
    out = {"bbb": {**info, "test": score(bbb_post, problem, *test, a.eval_samples, a.seed)}, "posthoc": {},
           "sizes": {"n_steps": n_steps, "n_train": problem.n_data, "n_test": len(test[0])}}
    for k in ranks:
        post, layers = compress.compress(bbb_post, problem.model, k)
        out["posthoc"][k] = {"test": score(post, problem, *test, a.eval_samples, a.seed),
                             "layers": [c.summary() for c in layers]}
    out["spectrum"] = [{"shape": list(c.shape), "explained_variance_top5": c.explained_variance[:5].tolist()}
                       for c in compress.compress(bbb_post, problem.model, 1)[1]]
    return out


def main(argv=None):
    a = parse_args(argv)
    ranks = [int(k) for k in a.ranks.split(",")]
    out = {"config": {**vars(a), "data_dir": str(a.data_dir), "reference": str(a.reference),
                      "json": str(a.json) if a.json else None, "sizes": SIZES},
           "posthoc": {}, "ktied": {}}
    # the four training runs are independent: tasks of slang sweep's machinery, on a local Dask cluster of
    # --jobs processes or on the cluster at --scheduler
    jobs = {"bbb": {"args": a, "ranks": ranks, "method": "bbb"},
            **{f"ktied-{k}": {"args": a, "ranks": ranks, "method": "ktied", "rank": k} for k in ranks}}
    results = {}

    def finished(key, result):
        if isinstance(result, BaseException):
            sys.exit(f"ktied_mnist.py: the {key} run failed: {type(result).__name__}: {result}")
        results[key] = result
        print(f"[{len(results)}/{len(jobs)}] {key} done", file=sys.stderr)

    with dask_client(a.scheduler, a.jobs) as client:
        run_tasks(client, run_one, jobs, finished)
    out["config"].update(results["bbb"]["sizes"])
    out.update({"bbb": results["bbb"]["bbb"], "posthoc": results["bbb"]["posthoc"],
                "spectrum": results["bbb"]["spectrum"]})
    out["ktied"] = {k: results[f"ktied-{k}"] for k in ranks}
    report(out, reference_rows(a.reference))
    if a.json is not None:
        write_json(out, a.json)


def report(out, ref):
    """A table on stderr: each posterior's test metrics beside the paper's."""
    def row(label, test, paper):
        ours = (f"{label:22s} {fmt(test['neg_elbo']):>17s} {fmt(test['nll']):>17s} {fmt(test['accuracy']):>17s} "
                f"{test['params'] / 1000:8.0f}k")
        if paper:
            ours += (f"   | paper {paper['neg_elbo']:>6s} {paper['nll']:>6s} {paper['accuracy_percent']:>5s}"
                     + (f" {paper['params_thousands']}k" if paper["params_thousands"] else ""))
        print(ours, file=sys.stderr)

    c = out["config"]
    print(f"MNIST 784-400-400-10, {c['n_steps']} steps of {c['batch_size']} ({c['n_train']} training images), "
          f"{c['eval_samples']} weight samples on {c['n_test']} test images", file=sys.stderr)
    print(f"{'posterior':22s} {'-ELBO/N':>17s} {'NLL':>17s} {'accuracy %':>17s} {'params':>9s}", file=sys.stderr)
    row("bbb (mean field)", out["bbb"]["test"], ref.get(("posthoc", "full")))
    for k, r in out["posthoc"].items():
        row(f"bbb compressed k={k}", r["test"], ref.get(("posthoc", str(k))))
    row("bbb (as trained)", out["bbb"]["test"], ref.get(("ktied_train", "full")))
    for k, r in out["ktied"].items():
        row(f"ktied k={k}", r["test"], ref.get(("ktied_train", str(k))))
    for name, r in [("bbb", out["bbb"]), *((f"ktied k={k}", r) for k, r in out["ktied"].items())]:
        snr = r["snr"]
        if snr.get("snr_step"):
            layer2 = [f"{s}: {v[1]:.3g} / {p[1]:.3g}" for s, v, p in zip(snr["snr_step"], snr["snr"],
                                                                         snr["snr_paper"])]
            print(f"SNR layer 2 (|E g|/std g / E[g^2]/Var[g^2]) {name}: " + ", ".join(layer2[-3:]), file=sys.stderr)
        print(f"validation -ELBO/N {name}: " + ", ".join(f"{s}: {v:.3f}" for s, v in r["curve"][-3:])
              + f"  ({r['train_seconds']:.0f} s training)", file=sys.stderr)


if __name__ == "__main__":
    main()
