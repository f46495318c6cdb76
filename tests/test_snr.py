"""Gradient signal-to-noise ratio of the standard-deviation parameters (``reparam.snr``, ``train.gradient_snr``).

- ``snr`` on hand-worked draws, both definitions (``|E g| / std g`` and the paper's ``E[g^2] / Var[g^2]``), and
  the parameters it leaves out (zero variance).
- ``gradient_snr`` is exactly the documented estimate: draws of ``std_gradients`` on fresh minibatches from the
  SNR stream of the step, replayed here by hand.
- Recording the SNR leaves the optimisation bit for bit unchanged (its own random stream), for bbb and ktied.
- The std parameters are the right ones: per weight matrix, ``m n`` log sigmas (bbb) or ``k (m + n)`` log factors
  (ktied), biases excluded.
- Through ``slang fit``: the history arrays, and the refusal for methods without reparameterisation gradients.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from slangcli.cli import main
from slangcli.gaussian import noise
from slangcli.methods import bbb, ktied
from slangcli.methods.base import Problem
from slangcli.methods.reparam import snr
from slangcli.models import MLP
from slangcli.runfile.io import read_run
from slangcli.training import loop as train


def test_snr_by_hand():
    # parameter 0: draws 1, 3 -> mean 2, std sqrt(2) -> 2 / sqrt(2) = sqrt(2); squares 1, 9 -> mean 5, var 32
    # parameter 1: draws -2, 0 -> |mean| 1, std sqrt(2) -> 1 / sqrt(2); squares 4, 0 -> mean 2, var 8
    # parameter 2: draws 5, 5 -> zero variance, left out of both averages
    # parameter 3: draws 1, 1 + 2^-52 -> a spread at rounding level, deterministic, left out too
    draws = np.array([[1.0, -2.0, 5.0, 1.0], [3.0, 0.0, 5.0, 1.0 + 2.0**-52]])
    ratio, paper = snr(draws)
    assert ratio == pytest.approx((np.sqrt(2) + 1 / np.sqrt(2)) / 2, rel=1e-14)
    assert paper == pytest.approx((5 / 32 + 2 / 8) / 2, rel=1e-14)
    assert all(np.isnan(snr(np.ones((3, 2)))))
    with pytest.raises(ValueError, match="two draws"):
        snr(np.ones((1, 2)))


def _problem(seed=0):
    rng = np.random.default_rng(seed)
    model = MLP((4, 6, 3), "tanh", "categorical")
    X = rng.standard_normal((60, 4))
    y = np.argmax(X[:, :3] + 0.3 * rng.standard_normal((60, 3)), axis=1)
    return Problem(model, model.prior_precision(1.0, 1e-2), 60), X, y


@pytest.mark.parametrize("method,hyper", [(bbb, bbb.Hyper(samples=2, lr=0.02)),
                                          (ktied, ktied.Hyper(samples=2, lr=0.02, rank=2))])
def test_recording_the_snr_leaves_the_run_unchanged(method, hyper):
    problem, X, y = _problem()
    plain, _ = train.run(method, hyper, problem, X, y, seed=3, batch_size=10, n_steps=20)
    state, history = train.run(method, hyper, problem, X, y, seed=3, batch_size=10, n_steps=20, snr_every=5,
                               snr_draws=4)
    for a, b in zip(plain, state):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    arrays = history.as_arrays()
    assert arrays["snr_step"].tolist() == [5, 10, 15, 20]
    assert arrays["snr"].shape == arrays["snr_paper"].shape == (4, 2)
    assert np.isfinite(arrays["snr"]).all() and (arrays["snr"] > 0).all()
    assert "snr" not in train.run(method, hyper, problem, X, y, seed=3, batch_size=10, n_steps=2)[1].as_arrays()


class _Known:
    """A method whose standard-deviation gradients are known: per draw, layer 0 is ``N(2, 0.5^2)`` noise in 3
    coordinates from the generator it is given, layer 1 the rows of the minibatch (the examples' ids, the first
    feature) and one uniform draw, recorded to check where they come from."""

    Hyper = type(None)  # (no hyperparameters)

    def __init__(self):
        self.seen = []

    def std_gradients(self, rng, state, problem, X, y, hyper, kl=None):
        rows = X[:, 0].copy()
        self.seen.append((tuple(rows.astype(int)), float(rng.random())))
        return [2.0 + 0.5 * rng.standard_normal(3), rows]


def test_gradient_snr_draws_fresh_minibatches_and_noise_from_a_stream_of_its_own():
    """Every draw is a minibatch without repeated rows and new noise; the estimate is the ratio of the draws' mean
    and spread (here |E g| / std g = 2 / 0.5 = 4, within sampling error), the same for the same seed and step, and
    another at another step."""
    ids = np.arange(60, dtype=float)[:, None]
    problem = Problem(MLP((1, 1), "tanh", "bernoulli"), np.ones(2), 60)
    state = SimpleNamespace(t=7)
    method = _Known()
    ratio, _ = train.gradient_snr(method, None, problem, ids, np.zeros(60), state, seed=0, batch_size=10,
                                  draws=4000)
    assert ratio[0] == pytest.approx(4.0, rel=0.05)
    rows = [r for r, _ in method.seen]
    assert all(len(set(r)) == 10 for r in rows)
    assert len(set(rows)) > 3990 and len({u for _, u in method.seen}) == 4000
    again, other = _Known(), _Known()
    train.gradient_snr(again, None, problem, ids, np.zeros(60), state, seed=0, batch_size=10, draws=5)
    train.gradient_snr(other, None, problem, ids, np.zeros(60), SimpleNamespace(t=8), seed=0, batch_size=10,
                       draws=5)
    assert again.seen == method.seen[:5]
    assert not {u for _, u in other.seen} & {u for _, u in again.seen}


def test_std_parameters_are_the_weight_scales_only():
    problem, X, y = _problem(2)
    rng = np.random.default_rng(0)
    b_state = bbb.init(rng, problem, bbb.Hyper())
    k_state = ktied.init(rng, problem, ktied.Hyper(rank=2))
    assert [g.size for g in bbb.std_gradients(rng, b_state, problem, X[:10], y[:10], bbb.Hyper())] == [24, 18]
    assert [g.size for g in ktied.std_gradients(rng, k_state, problem, X[:10], y[:10], ktied.Hyper(rank=2))] == [
        2 * (4 + 6), 2 * (6 + 3)]
    # the bbb draw is the log_sigma part of its full gradient at the same noise
    eps = noise.standard_normal(np.random.default_rng(5), (12, problem.model.n_params))
    full, _ = bbb.gradient(b_state, eps, problem, X[:10], y[:10])
    parts = bbb.std_gradients(np.random.default_rng(5), b_state, problem, X[:10], y[:10], bbb.Hyper())
    layers = problem.model.layout.layers
    np.testing.assert_array_equal(np.concatenate(parts), np.concatenate([full[1][s.W] for s in layers]))


def test_fit_records_the_snr_in_the_run_file(train_csv, out_dir):
    out = out_dir / "k.h5"
    result = CliRunner().invoke(main, ["fit", str(train_csv), "-o", str(out), "--method", "ktied", "--hidden", "3",
                                       "--rank", "2", "--epochs", "2", "--batch-size", "8", "--samples", "2",
                                       "--snr", "2", "--snr-draws", "3", "--test-fraction", "0.25", "--json"])
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    run = read_run(out)
    assert run.config["snr"] == {"every": 2, "draws": 3}
    assert run.history["snr_step"].tolist() == [2, 4, 6, 8] and run.history["snr"].shape == (4, 2)
    assert summary["snr"]["snr_step"] == [2, 4, 6, 8]


@pytest.mark.parametrize("args,message", [
    (["--method", "slang", "--snr", "2"], "--snr does not apply to --method slang"),
    (["--method", "bbb", "--snr", "0"], "--snr"),
    (["--method", "bbb", "--snr", "2", "--snr-draws", "1"], "--snr-draws"),
])
def test_snr_option_errors(train_csv, out_dir, args, message):
    result = CliRunner().invoke(main, ["fit", str(train_csv), "-o", str(out_dir / "r.h5"), "--epochs", "1", *args])
    assert result.exit_code == 2 and message in result.stderr, result.stderr
    assert list(out_dir.iterdir()) == []
