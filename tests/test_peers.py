"""``benchmarks/peers.py`` on small data of the shared mirror's layout (a LIBSVM ``usps_3vs5`` and a Gal-layout
``bostonHousing``): slang's methods end to end with clean JSON; a learned noise precision is the one ``slang fit``
learns; the reference's noise precision rules (fixed, learned by slang, chosen on the validation fold, rescaled
rates) with the reference replaced by a stand-in, so they run without torch; the PyTorch reference itself (only
where torch and ivon-opt are installed, which slang never requires) starts from slang's initial mean and IVON's
initial precision in slang's parameter layout; a missing reference package is a clear message."""

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
    # slang's ivon at slang fit's defaults (the reference at the package's, rate 0.2 without clipping: below)
    assert {(r["hyper"]["lr"], r["hyper"]["clip_radius"]) for r in out["runs"] if r["method"] == "ivon"} == {(0.2, 1.0)}
    # regression at the fixed noise precision 1 unless asked otherwise
    assert {(r["noise_precision"], r["noise_rule"]) for r in out["runs"] if r["dataset"] == "boston"} == \
        {(1.0, "fixed")}
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


def test_learned_noise_precision_is_the_one_slang_fit_learns(tmp_path, capsys, monkeypatch):
    """``--noise-precision auto``: slang's methods learn tau on regression (nothing on classification), with the
    network rates of slangcli.training.options for the methods that take them; the learned value and the fit's posterior
    are those of ``slang fit --noise-precision auto`` with the same options."""
    from slangcli.data.sources import load_training
    from slangcli.training import options
    from slangcli.training.fitting import fit_prepared

    peers = _load("peers", monkeypatch)
    data = _data_dir(tmp_path)
    peers.main(["--data-dir", str(data), "--dataset", "usps,boston", "--methods", "slang,ivon", "--noise-precision",
                "auto", "--epochs", "2", "--splits", "1", "--eval-samples", "5", "--json", "-"])
    out = json.loads(capsys.readouterr().out)
    assert out["noise_precision"] == "auto"
    boston = {r["method"]: r for r in out["runs"] if r["dataset"] == "boston"}
    usps = {r["method"]: r for r in out["runs"] if r["dataset"] == "usps"}
    assert all(r["noise_precision"] is None and r["noise_rule"] is None for r in usps.values())
    assert all(r["noise_rule"] == "learned" and r["noise_precision"] != 1.0 for r in boston.values())
    assert boston["slang"]["hyper"]["beta"] == options.NETWORK_RATES["beta"]
    assert boston["slang"]["hyper"]["decay"] == options.NETWORK_RATES["decay"]
    assert usps["slang"]["hyper"]["decay"] == 0.51  # classification: the method's own rates
    assert "beta" not in boston["ivon"]["hyper"]
    assert {e["noise_precision_median"] for e in out["table"] if e["dataset"] == "boston"} == \
        {boston["slang"]["noise_precision"], boston["ivon"]["noise_precision"]}
    opts, hidden, _ = peers.dataset_splits("boston", data, 1.0)[0]
    run = fit_prepared(load_training(opts), method="slang", hyper={"rank": 8, "samples": 4},
                                hidden=hidden, noise_precision="auto", epochs=2, batch_size=32, seed=0,
                                eval_samples=5, hidden_bias_prior_precision=peers.BIAS_PRIOR)
    assert run.config["hyper"]["beta"] == options.NETWORK_RATES["beta"]
    np.testing.assert_allclose(boston["slang"]["noise_precision"], run.model.noise_precision, rtol=1e-9)


def test_reference_noise_precision_rules(tmp_path, capsys, monkeypatch):
    """The reference variants (a stand-in for the PyTorch reference: torch is not needed): ``learned`` takes what
    slang learned on the same split and seed (at the same epochs, else its longest run), a list takes the value
    with the best NLL on the validation fold (a diverging candidate never), ``--reference-rescale`` divides lr and
    multiplies hess_init by tau; the pairs are by split and seed."""
    peers = _load("peers", monkeypatch)
    calls = []

    def stand_in(hyper, s, problem, *, seed, batch_size, n_steps):
        tau = problem.model.noise_precision
        calls.append((len(s.X_train), tau, hyper, n_steps))
        mean = s.model.init_mean(peers.streams.derive_rng(seed, peers.streams.INIT))
        if tau == 4.0:
            mean = np.full_like(mean, np.nan)  # a diverged fit
        log_sigma = np.full_like(mean, np.log(0.1 / tau))  # the NLL differs from one tau to the next
        return peers.DiagonalGaussian(mean=mean, log_sigma=log_sigma), 0.0, 0.0, dict(hyper)

    monkeypatch.setattr(peers, "fit_reference", stand_in)
    peers.main(["--data-dir", str(_data_dir(tmp_path)), "--dataset", "boston", "--methods", "slang,ivon-ref",
                "--noise-precision", "auto", "--reference-noise-precision", "learned", "--reference-noise-precision",
                "2", "--reference-noise-precision", "0.5,1,4", "--reference-rescale", "--epochs", "1",
                "--method-epochs", "ivon-ref:1,2", "--splits", "2", "--seeds", "0,1", "--eval-samples", "5",
                "--pair", "slang:1,ivon-ref@learned:2", "--json", "-"])
    out = json.loads(capsys.readouterr().out)
    runs = out["runs"]
    slang = {(r["split"], r["seed"]): r for r in runs if r["method"] == "slang"}
    assert {r["method"] for r in runs} == {"slang", "ivon-ref@learned", "ivon-ref@2", "ivon-ref@val"}
    assert {(r["method"], r["epochs"]) for r in runs if r["method"] != "slang"} == \
        {(m, e) for m in ("ivon-ref@learned", "ivon-ref@2", "ivon-ref@val") for e in (1, 2)}
    for r in runs:
        if r["method"] == "ivon-ref@learned":
            assert r["noise_precision"] == slang[r["split"], r["seed"]]["noise_precision"]
            assert r["noise_from"] == {"method": "slang", "epochs": 1}  # 2 epochs: slang's longest run
        if r["method"] == "ivon-ref@2":
            assert r["noise_precision"] == 2.0 and r["hyper"]["lr"] == 0.1 and r["hyper"]["hess_init"] == 2.0
        if r["method"] == "ivon-ref@val":
            choice = r["noise_validation_nll"]
            assert set(choice) == {"0.5", "1", "4"} and choice["4"] is None
            best = min((v, float(c)) for c, v in choice.items() if v is not None)[1]
            assert r["noise_precision"] == best and r["noise_rule"] == "best on the validation fold"
            assert r["hyper"]["lr"] == pytest.approx(0.2 / best) and r["hyper"]["clip_radius"] is None
    n_train = {len_ for len_, *_ in calls}
    assert len(n_train) == 2  # the validation fold's fits train on fewer rows
    (pair,) = out["paired"]
    assert pair["runs"] == 4 and pair["a"] == {"method": "slang", "epochs": 1}
    diffs = [slang[r["split"], r["seed"]]["nll"] - r["nll"] for r in runs
             if (r["method"], r["epochs"]) == ("ivon-ref@learned", 2)]
    assert pair["nll_difference"] == pytest.approx(np.mean(diffs))


def test_diverged_slang_fits_are_recorded_and_left_out(tmp_path, capsys, monkeypatch):
    peers = _load("peers", monkeypatch)
    real = peers.fit_slang

    def diverging(method, *args, seed, **kw):
        if seed == 1:
            raise peers.DivergenceError("diverged")
        return real(method, *args, seed=seed, **kw)

    monkeypatch.setattr(peers, "fit_slang", diverging)
    peers.main(["--data-dir", str(_data_dir(tmp_path)), "--dataset", "boston", "--methods", "ivon", "--epochs", "1",
                "--splits", "1", "--seeds", "0,1", "--eval-samples", "5", "--json", "-"])
    out = json.loads(capsys.readouterr().out)
    (e,) = out["table"]
    assert e["runs"] == 2 and e["diverged"] == 1 and np.isfinite(e["nll"])
    assert [bool(r.get("diverged")) for r in out["runs"]] == [False, True]
