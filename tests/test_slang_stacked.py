"""Stacked SLANG runs (the cross-validation sweeps' engine) equal the separate runs they replace."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from slangcli.data.sources import DataOptions
from slangcli.methods import slang, slang_stacked
from slangcli.methods.base import Problem
from slangcli.models import MLP
from slangcli.training import loop as train
from slangcli.training import tuning
from slangcli.training.fitting import fit


def _data(n=120, f=4, seed=0, kind="gaussian"):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, f))
    z = np.sin(X[:, 0]) + 0.5 * X[:, 1]
    if kind == "gaussian":
        return X, z + 0.1 * rng.standard_normal(n)
    if kind == "bernoulli":
        return X, (z + 0.3 * rng.standard_normal(n) > 0).astype(float)
    return X, np.digitize(z, [-0.5, 0.5])  # three classes


def _separate(model, hyper, runs, X, y, steps, seed=3, batch=10):
    out = []
    for i in range(runs.size):
        m = replace(model, noise_precision=float(runs.noise_precision[i])) if model.likelihood == "gaussian" else model
        h = replace(hyper, lr=float(runs.lr[i]), beta=float(runs.beta[i]))
        try:
            state, _ = train.run(slang, h, Problem(m, runs.prior_precision[i], len(X)), X, y, seed=seed,
                                 batch_size=batch, n_steps=steps)
        except train.DivergenceError:
            state = None
        out.append(state)
    return out


def _assert_same(a: slang.State, b: slang.State):
    scale = np.abs(a.mu).max()
    np.testing.assert_allclose(b.mu, a.mu, rtol=0, atol=1e-9 * scale)
    np.testing.assert_allclose(b.d, a.d, rtol=1e-9)
    UUa, UUb = a.U @ a.U.T, b.U @ b.U.T  # columns may differ in sign
    np.testing.assert_allclose(UUb, UUa, rtol=0, atol=1e-9 * np.abs(UUa).max())
    assert a.t == b.t


@pytest.mark.parametrize("kind,sizes,rank", [("gaussian", (4, 16, 1), 1), ("gaussian", (4, 12, 8, 1), 3),
                                             ("bernoulli", (4, 10, 1), 2), ("categorical", (4, 10, 3), 2)])
def test_stacked_runs_equal_the_separate_runs(kind, sizes, rank):
    """Runs differing in noise precision, prior precision, lr and beta: every stacked run is its separate run
    (mean, diagonal and U U^T to 1e-9 relative) after 50 steps."""
    X, y = _data(kind=kind)
    model = MLP(sizes, likelihood=kind, noise_precision=7.0)
    hyper = slang.Hyper(rank=rank, samples=3, lr=0.1, beta=0.1, decay=0.3, momentum=0.9)
    lams = [model.prior_precision(v, 1e-6) for v in (0.1, 1.0, 10.0)]
    runs = slang_stacked.Runs(np.stack(lams), np.array([1.0, 30.0, 300.0]), np.array([0.1, 0.2, 0.05]),
                              np.array([0.1, 0.01, 0.4]))
    assert slang_stacked.stackable(model, hyper, 10)
    stacked = slang_stacked.run(runs, model, hyper, X, y, seed=3, batch_size=10, n_steps=50)
    for a, b in zip(_separate(model, hyper, runs, X, y, 50), stacked):
        _assert_same(a, b)


def test_a_diverging_run_leaves_the_others_untouched():
    X, y = _data()
    model = MLP((4, 16, 1), likelihood="gaussian")
    hyper = slang.Hyper(rank=1, samples=2, lr=0.1, beta=0.1, decay=0.0)
    lam = model.prior_precision(1.0, 1e-6)
    runs = slang_stacked.Runs(np.stack([lam] * 3), np.array([10.0, 10.0, 30.0]), np.array([0.1, 1e300, 0.2]),
                              np.array([0.1, 0.1, 0.1]))
    separate = _separate(model, hyper, runs, X, y, 40)
    assert separate[1] is None  # the middle run does diverge on its own
    stacked = slang_stacked.run(runs, model, hyper, X, y, seed=3, batch_size=10, n_steps=40)
    assert stacked[1] is None
    for i in (0, 2):
        _assert_same(separate[i], stacked[i])


def test_not_stackable_shapes():
    hyper = slang.Hyper(rank=1, samples=4)
    assert not slang_stacked.stackable(MLP((5, 1)), hyper, 10)  # linear: samples combined per example
    assert not slang_stacked.stackable(MLP((5, 20, 1)), replace(hyper, dtype="float32"), 10)
    assert not slang_stacked.stackable(MLP((5, 20, 1)), replace(hyper, rank=0), 10)
    assert not slang_stacked.stackable(MLP((5, 20, 1)), hyper, 40)  # K = 161: the Krylov route
    assert slang_stacked.stackable(MLP((5, 20, 1)), hyper, 10)


def _csv(write_file, n=60, seed=5):
    X, y = _data(n=n, f=2, seed=seed)
    lines = ["a,b,y"] + [f"{a:.6f},{b:.6f},{t:.6f}" for (a, b), t in zip(X, y)]
    return write_file("train.csv", "\n".join(lines) + "\n")


def test_tuning_search_is_the_same_stacked_or_not(write_file, monkeypatch):
    """The search's record (every candidate's fold scores) and its choice do not depend on whether the sweeps ran
    stacked; the rates are tuned too, the noise precision jointly with beta."""
    path = _csv(write_file)
    kw = dict(method="slang", hyper={"rank": 1, "samples": 2, "lr": 0.1, "beta": 0.08, "decay": 0.0},
              hidden="8", batch_size=10, epochs=4, seed=4, eval_samples=10, likelihood="gaussian",
              tune="prior-precision,noise-precision,lr,beta", tune_folds=3, tune_rounds=2)
    stacked = fit(DataOptions(path=str(path), test_fraction=0.2), **kw)
    monkeypatch.setattr(slang_stacked, "stackable", lambda *a: False)
    separate = fit(DataOptions(path=str(path), test_fraction=0.2), **kw)
    a, b = stacked.config["tuning"], separate.config["tuning"]
    assert a["best"] == b["best"] and a["rounds"] == 2
    assert len(a["candidates"]) == len(b["candidates"])
    for ca, cb in zip(a["candidates"], b["candidates"]):
        assert ca["values"] == cb["values"]
        np.testing.assert_allclose(ca["fold_loglik"], cb["fold_loglik"], rtol=1e-6)
    # the joint sweep: every (noise precision, beta) pair of the two grids was scored
    pairs = {(c["values"]["noise-precision"], c["values"]["beta"]) for c in a["candidates"]}
    grid = {(t, be) for t in a["grids"]["noise-precision"] for be in a["grids"]["beta"]}
    assert grid <= pairs
    assert stacked.config["hyper"]["lr"] == a["best"]["lr"] and stacked.config["hyper"]["beta"] == a["best"]["beta"]


def test_rates_are_tunable_only_where_the_method_has_them():
    from slangcli.errors import ConfigError
    from slangcli.methods import bbb

    assert tuning.parse_tune("lr,beta", "gaussian", slang) == ("lr", "beta")
    assert tuning.parse_tune("lr", "gaussian", bbb) == ("lr",)
    with pytest.raises(ConfigError, match="--tune beta"):
        tuning.parse_tune("beta", "gaussian", bbb)


def test_top_eigenpair_by_powers_matches_lapack_or_defers_to_it():
    """Clear gaps: the powered top eigenpair is LAPACK's (sign aside). Near-equal top eigenvalues, or a zero matrix:
    not accepted, and ``_top_eig`` then returns LAPACK's pair."""
    rng = np.random.default_rng(2)
    K = 41
    Q = np.linalg.qr(rng.standard_normal((4, K, K)))[0]
    spectra = np.stack([np.geomspace(1, 1e-8, K), np.r_[1.0, np.linspace(0.6, 0, K - 1)],
                        np.r_[1.0, 1 - 1e-3, np.zeros(K - 2)], np.zeros(K)])
    gram = np.einsum("bij,bj,bkj->bik", Q, spectra, Q)
    lam, V, ok = slang_stacked._top_eig1(gram)
    assert ok.tolist() == [True, True, False, False]
    lam2, V2 = slang_stacked._top_eig(gram, 1)
    for b in range(4):
        ref_lam, ref_V = np.linalg.eigh(gram[b])
        assert lam2[b, 0] == pytest.approx(ref_lam[-1], abs=1e-12)
        if b < 2:
            assert abs(V2[b, :, 0] @ ref_V[:, -1]) == pytest.approx(1.0, abs=1e-12)
            assert lam[b, 0] == pytest.approx(ref_lam[-1], rel=1e-12)
