"""``benchmarks/field.py`` without its optional packages: the exact scores of the deep ensemble's Gaussian mixture
(log-density, quantiles by bisection, interval coverage), slang's fit in the script equal to ``slang fit``'s own
(its run file's test log-likelihood), and a missing torch or ngboost named with its install command while slang
still runs."""

import importlib.util
import json
import sys

import numpy as np
import pytest
import scipy.special
import scipy.stats

from test_benchmark_scripts import REPO, _gal_folder


def _load(monkeypatch):
    """The script as a module (it imports its shared helpers from beside it)."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    spec = importlib.util.spec_from_file_location("field", REPO / "benchmarks" / "field.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "field", module)
    spec.loader.exec_module(module)
    return module


def _mixtures(seed: int, members: int = 5, n: int = 40):
    rng = np.random.default_rng(seed)
    mean = rng.normal(0.0, 3.0, (members, n))
    sd = rng.uniform(0.05, 2.0, (members, n))
    return mean, sd


def test_mixture_quantiles_are_the_roots_of_the_mixture_cdf(monkeypatch):
    field = _load(monkeypatch)
    mean, sd = _mixtures(0)
    for p in (0.025, 0.05, 0.5, 0.95, 0.975):
        q = field.mixture_quantile(p, mean, sd)
        # F(q) = p, up to the CDF's slope times the rounding of q
        assert np.allclose(field.mixture_cdf(q, mean, sd), p, rtol=0, atol=1e-12)
    # one component: the Normal's own quantile
    q = field.mixture_quantile(0.975, mean[:1], sd[:1])
    assert np.allclose(q, mean[0] + sd[0] * scipy.special.ndtri(0.975), rtol=0, atol=1e-12)
    # equal components: the same
    q = field.mixture_quantile(0.1, np.repeat(mean[:1], 3, axis=0), np.repeat(sd[:1], 3, axis=0))
    assert np.allclose(q, mean[0] + sd[0] * scipy.special.ndtri(0.1), rtol=0, atol=1e-12)
    with pytest.raises(ValueError):
        field.mixture_quantile(1.0, mean, sd)


def test_mixture_scores_are_exact(monkeypatch):
    field = _load(monkeypatch)
    mean, sd = _mixtures(1)
    var = sd**2
    y = np.random.default_rng(2).normal(0.0, 3.0, mean.shape[1])
    density = scipy.stats.norm.pdf(y, mean, sd).mean(axis=0)
    assert np.allclose(field.mixture_logpdf(y, mean, var), np.log(density), rtol=1e-12, atol=0)
    # far out, where every density underflows, the log-density stays finite (summed in log space)
    far = field.mixture_logpdf(np.full(mean.shape[1], 1e4), mean, var)
    assert np.all(np.isfinite(far)) and np.all(far < -1e5)
    scores = field.mixture_scores(y, mean, var)
    assert scores["loglik"] == pytest.approx(np.mean(np.log(density)), rel=1e-12)
    assert scores["rmse"] == pytest.approx(np.sqrt(np.mean((mean.mean(axis=0) - y) ** 2)), rel=1e-12)
    # y inside the central c interval exactly when its probability integral transform is within c / 2 of 1/2
    pit = field.mixture_cdf(y, mean, sd)
    for c in field.LEVELS:
        assert scores[f"coverage_{c:g}"] == np.mean(np.abs(pit - 0.5) <= c / 2)
    m, v = field.mixture_moments(mean, var)
    assert np.allclose(m, mean.mean(axis=0)) and np.allclose(v, var.mean(axis=0) + mean.var(axis=0))


def test_slang_in_the_script_is_slang_fit_and_missing_packages_are_named(tmp_path, capsys, monkeypatch):
    """slang's fit in the script scores as ``slang fit FOLDER --uci-split K --hidden 50`` with the same options
    (its run file, from a process of its own); torch and ngboost, when missing, are named with their install
    command and the script runs slang alone."""
    field = _load(monkeypatch)
    _gal_folder(tmp_path / "uci", "bostonHousing", 60, 3, 2, seed=3)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name in ("torch", "ngboost") else real_find_spec(name, *args))
    field.main(["--data-dir", str(tmp_path), "--sets", "boston", "--splits", "0-1", "--process",
                "--slang-options", "--epochs 2 --eval-samples 20", "--json", "-"])
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert "ensemble needs torch" in captured.err and "pip install torch" in captured.err
    assert "pip install ngboost" in captured.err
    rows = out["regression"]["rows"]
    assert [(r["set"], r["split"], r["method"]) for r in rows] == [("boston", 0, "slang"), ("boston", 1, "slang")]
    for r in rows:
        assert r["command"][1:] == ["--uci-split", str(r["split"]), "--hidden", "50", "--epochs", "2",
                                    "--eval-samples", "20"]
        assert r["process_score"] == r["loglik"] and "process_differs" not in r
        assert r["cpu_seconds"] > 0 and r["process_cpu_seconds"] > 0 and r["steps"] == 2 * 2  # 48 rows, batch 32
        assert 0 <= r["coverage_0.9"] <= r["coverage_0.95"] <= 1
    (summary,) = out["regression"]["summary"]
    assert summary["splits"] == 2 and summary["loglik"] == pytest.approx(np.mean([r["loglik"] for r in rows]))


def test_slang_options_that_are_not_a_fits_are_refused(monkeypatch):
    field = _load(monkeypatch)
    assert field.parse_slang_options("--epochs 40 --no-standardize") == {"epochs": "40", "standardize": False}
    with pytest.raises(SystemExit, match="not slang fit options"):
        field.parse_slang_options("--no-such-option 3")
    with pytest.raises(SystemExit, match="one fit"):
        field.slang_point({"kind": "uci", "folder": "x", "split": 0}, {"epochs": "40,80"})
