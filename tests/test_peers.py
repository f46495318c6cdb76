"""``benchmarks/peers.py`` on small data of the shared mirror's layout (a LIBSVM ``usps_3vs5`` and a Gal-layout
``bostonHousing``): slang's methods end to end with clean JSON; the PyTorch reference (only where torch and
ivon-opt are installed, which slang never requires) starts from slang's initial mean and IVON's initial
precision in slang's parameter layout; a missing reference package is a clear message."""

import importlib.util
import json
import sys

import numpy as np
import pytest

from test_benchmark_scripts import REPO, _gal_folder


def _load(name: str, monkeypatch):
    """The script as a module, registered in ``sys.modules`` (its dataclasses look their module up there)."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


def _data_dir(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "libsvm").mkdir()
    X = rng.uniform(-1, 1, (60, 6))
    y = np.where(X[:, 0] + 0.3 * rng.standard_normal(60) > 0, 1, -1)
    lines = [f"{'+1' if t > 0 else '-1'} " + " ".join(f"{j + 1}:{v:.3f}" for j, v in enumerate(row))
             for row, t in zip(X, y)]
    (tmp_path / "libsvm" / "usps_3vs5").write_text("\n".join(lines) + "\n")
    _gal_folder(tmp_path / "uci", "bostonHousing", 50, 3, 5, seed=1)
    return tmp_path


def test_slang_methods_run_on_both_kinds_of_data(tmp_path, capsys, monkeypatch):
    peers = _load("peers", monkeypatch)
    peers.main(["--data-dir", str(_data_dir(tmp_path)), "--dataset", "usps,boston", "--methods", "ivon,mf-ef",
                "--hyper", "mf-ef:samples=2", "--epochs", "1", "--splits", "2", "--seeds", "0,1", "--eval-samples", "5",
                "--json", "-"])
    out = json.loads(capsys.readouterr().out)
    runs = {(r["dataset"], r["split"], r["seed"], r["method"], r["epochs"]) for r in out["runs"]}
    assert runs == {(d, k, s, m, e) for d in ("usps", "boston") for k in (0, 1) for s in (0, 1)
                    for m in ("ivon", "mf-ef") for e in (1,)}
    for r in out["runs"]:
        assert np.isfinite(r["nll"]) and r["cpu_seconds"] >= 0 and r["seconds"] > 0
        assert ("accuracy" in r) == (r["dataset"] == "usps") and ("rmse" in r) == (r["dataset"] == "boston")
    assert {r["hyper"]["samples"] for r in out["runs"] if r["method"] == "mf-ef"} == {2}
    assert {r["hyper"]["lr"] for r in out["runs"] if r["method"] == "ivon"} == {0.2}  # the script's default
    assert {(e["dataset"], e["method"], e["epochs"], e["splits"], e["runs"]) for e in out["table"]} == \
        {(d, m, e, 2, 4) for d in ("usps", "boston") for m in ("ivon", "mf-ef") for e in (1,)}


def test_hyper_options_keep_whole_numbers_whole(monkeypatch):
    peers = _load("peers", monkeypatch)
    assert peers.parse_hyper(["ivon:lr=0.2,samples=4,hess-init=1e-1", "slang:rank=8,dtype=float32",
                              "ivon:beta1=1.0"]) == \
        {"ivon": {"lr": 0.2, "samples": 4, "hess_init": 0.1, "beta1": 1.0}, "slang": {"rank": 8, "dtype": "float32"}}


def test_reference_starts_where_slang_starts(tmp_path, monkeypatch):
    """No steps: the reference's posterior is slang's initial mean and ``sigma = 1 / sqrt(N h_0 + lambda)``, entry
    by entry in slang's layout (weights transposed from torch's (n_out, n_in)), to float32 rounding."""
    pytest.importorskip("torch")
    pytest.importorskip("ivon")
    peers = _load("peers", monkeypatch)
    opts, hidden, k = peers.dataset_splits("usps", _data_dir(tmp_path), 1.0)[0]
    s = peers.load("usps", opts, hidden, k, 1.0)
    problem = peers.Problem(s.model, s.model.prior_precision(2.0, 1e-5), len(s.X_train))
    post, *_ = peers.fit_reference({"hess_init": 0.3}, s, problem, seed=3, batch_size=8, n_steps=0)
    mean0 = s.model.init_mean(peers.streams.derive_rng(3, peers.streams.INIT))
    np.testing.assert_allclose(post.mean, mean0, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.exp(-2 * post.log_sigma), len(s.X_train) * 0.3 + problem.prior_precision,
                               rtol=1e-5)


def test_missing_reference_package_is_a_message(tmp_path, monkeypatch):
    peers = _load("peers", monkeypatch)
    monkeypatch.setitem(sys.modules, "ivon", None)  # import ivon raises ImportError
    with pytest.raises(SystemExit, match="pip install torch ivon-opt"):
        peers.main(["--data-dir", str(_data_dir(tmp_path)), "--dataset", "usps", "--methods", "ivon-ref",
                    "--epochs", "1", "--splits", "1"])


def test_unreadable_data_is_a_message(tmp_path, monkeypatch):
    peers = _load("peers", monkeypatch)
    with pytest.raises(SystemExit, match="no such file"):
        peers.main(["--data-dir", str(tmp_path), "--dataset", "usps", "--methods", "ivon", "--epochs", "1"])


def test_validation_holds_out_a_fifth_of_the_training_part(tmp_path, monkeypatch):
    peers = _load("peers", monkeypatch)
    opts, hidden, k = peers.dataset_splits("usps", _data_dir(tmp_path), 1.0)[1]
    full = peers.load("usps", opts, hidden, k, 1.0)
    val = peers.load("usps", opts, hidden, k, 1.0, validation=True)
    assert val.held_out == "validation" and len(val.X_test) == len(full.X_train) // 5
    assert len(val.X_train) + len(val.X_test) == len(full.X_train)
    rows = {tuple(r) for r in full.X_train}
    assert all(tuple(r) in rows for r in np.vstack([val.X_train, val.X_test]))  # the test part is not used
    assert not any(tuple(r) in {tuple(t) for t in val.X_train} for r in val.X_test)
