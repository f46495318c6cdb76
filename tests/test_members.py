"""Ensembles of posteriors, ``slang fit --members K``: the mixture run file (its encoding, its checks, old files),
the mixture predictive (the average of the members' predictives), the training of K members (member 0 is the single
fit, bit for bit; the others differ), and every command on a mixture file."""

from __future__ import annotations

import dataclasses

import h5py
import numpy as np
import pytest

from slangcli.errors import FormatError
from slangcli.gaussian.posteriors import DiagonalGaussian, MixtureGaussian
from slangcli.runfile.io import read_run, write_run


def _mixture_of(run, *members):
    """``run`` with the mixture of ``members`` (its own posterior first) as its posterior, each with the run's noise
    and prior precisions (the prior of member k scaled by k + 1, so that the members' priors differ)."""
    members = (run.posterior, *members)
    K = len(members)
    posterior = MixtureGaussian(members=members, noise_precision=np.full(K, run.model.noise_precision),
                                prior_precision=np.stack([run.prior_precision * (k + 1) for k in range(K)]))
    return dataclasses.replace(run, posterior=posterior, config={**run.config, "members": K})


@pytest.fixture
def mixture_run(fitted_run):
    """A logistic regression's run whose posterior is a mixture of its low-rank posterior and a mean-field one."""
    rng = np.random.default_rng(1)
    D = fitted_run.model.n_params
    diagonal = DiagonalGaussian(mean=fitted_run.posterior.mean + rng.normal(0, 0.5, D),
                                log_sigma=np.log(rng.uniform(0.2, 0.6, D)))
    return _mixture_of(fitted_run, diagonal)


@pytest.fixture
def mixture_file(tmp_path, mixture_run):
    path = tmp_path / "mixture.h5"
    write_run(path, mixture_run)
    return path


# ------------------------------------------------------------------------------------------------ the run file


def test_a_mixture_round_trips_through_its_run_file_exactly(mixture_file, mixture_run):
    with h5py.File(mixture_file, "r") as f:
        g = f["posterior"]
        assert g.attrs["encoding-type"] == "mixture" and g.attrs["members"] == 2
        assert sorted(g) == ["member_0", "member_1", "noise_precision", "prior_precision"]
        assert g["member_0"].attrs["encoding-type"] == "lowrank-gaussian"
        assert g["member_1"].attrs["encoding-type"] == "diagonal-gaussian"
    back = read_run(mixture_file).posterior
    assert type(back) is MixtureGaussian and back.n_members == 2
    for got, want in zip(back.members, mixture_run.posterior.members):
        assert type(got) is type(want)
        for name, value in vars(want).items():
            assert getattr(got, name).tobytes() == value.tobytes(), name
    assert back.prior_precision.tobytes() == mixture_run.posterior.prior_precision.tobytes()
    assert back.noise_precision.tobytes() == mixture_run.posterior.noise_precision.tobytes()


def test_the_mixture_has_the_moments_of_a_mixture(mixture_run):
    post = mixture_run.posterior
    means = np.stack([m.mean for m in post.members])
    np.testing.assert_allclose(post.mean, means.mean(axis=0), rtol=1e-15)
    variances = np.stack([m.marginal_variances() for m in post.members])
    # E[theta^2] - E[theta]^2 of the equal-weight mixture
    second = (variances + means**2).mean(axis=0)
    np.testing.assert_allclose(post.marginal_variances(), second - means.mean(axis=0) ** 2, rtol=1e-12)
    assert post.n_variational_params() == sum(m.n_variational_params() for m in post.members)


def _damaged(path, damage):
    with h5py.File(path, "r+") as f:
        damage(f["posterior"])
    return path


def _replace(g, name, data):
    del g[name]
    g.create_dataset(name, data=data)


@pytest.mark.parametrize("damage, says", [
    (lambda g: g.attrs.__setitem__("members", 3),
     r"/posterior lacks the group member_2 \(a mixture of 3 members, attribute 'members'\)"),
    (lambda g: g.attrs.__setitem__("members", 1),
     r"/posterior/member_1 is not part of a mixture of 1 members \(attribute 'members'; the file holds 2 member "
     r"groups\)"),
    (lambda g: g.attrs.__setitem__("members", 0), r"/posterior lacks a whole number of members >= 1"),
    (lambda g: g.attrs.__delitem__("members"), r"/posterior lacks a whole number of members >= 1"),
    (lambda g: _replace(g, "noise_precision", np.ones(3)), r"/posterior/noise_precision has shape \(3,\), expected"),
    (lambda g: _replace(g, "noise_precision", np.array([1.0, -1.0])), r"/posterior/noise_precision must be positive"),
    (lambda g: _replace(g, "noise_precision", np.array([2.0, 1.0])),
     r"/posterior/noise_precision\[0\] is 2\.0, but /model, member 0's, has 1\.0"),
    (lambda g: _replace(g, "prior_precision", np.ones((2, 3))), r"/posterior/prior_precision has shape \(2, 3\)"),
    (lambda g: g["member_1"].attrs.__setitem__("encoding-type", "student-t"),
     r"/posterior/member_1 has unknown encoding-type 'student-t'"),
    (lambda g: g["member_1"].attrs.__setitem__("encoding-type", "mixture"),
     r"/posterior/member_1 is a mixture; a mixture's members are single posteriors"),
    (lambda g: _replace(g["member_1"], "log_sigma", np.full(4, 400.0)),
     r"/posterior/member_1/log_sigma must lie in \[-300, 300\]"),
    (lambda g: _replace(g["member_0"], "d", -np.ones(4)), r"/posterior/member_0/d must be positive"),
    (lambda g: _replace(g["member_0"], "mean", np.full(4, np.nan)), r"/posterior/member_0/mean holds non-finite"),
    (lambda g: g.__delitem__("member_0"), r"/posterior lacks the group member_0"),
    (lambda g: g["member_1"].attrs.__setitem__("encoding-version", "2.0"),
     r"written by slang file format 2\.0 \(/posterior/member_1\)"),
], ids=["K-beyond-groups", "group-beyond-K", "K-zero", "K-missing", "noise-shape", "noise-negative",
        "noise-not-model", "prior-shape", "unknown-kind", "nested-mixture", "member-checks", "member-d",
        "member-nan", "member-missing", "member-newer"])
def test_a_damaged_mixture_is_refused_in_one_line_naming_the_file_and_the_object(mixture_file, damage, says):
    _damaged(mixture_file, damage)
    with pytest.raises(FormatError, match=r"^.*mixture\.h5: " + says) as info:
        read_run(mixture_file)
    assert "\n" not in str(info.value)


def test_the_count_of_members_must_be_the_fits(tmp_path, fitted_run, mixture_run):
    path = tmp_path / "k.h5"
    write_run(path, dataclasses.replace(mixture_run, config={**mixture_run.config, "members": 3}))
    with pytest.raises(FormatError, match=r"k\.h5: /posterior is a mixture of 2 members, but / attribute 'config' "
                                          r"'members' says 3$"):
        read_run(path)
    write_run(path, dataclasses.replace(fitted_run, config={**fitted_run.config, "members": 2}))
    with pytest.raises(FormatError, match=r"k\.h5: /posterior is a single lowrank-gaussian posterior, but / "
                                          r"attribute 'config' says 2 members$"):
        read_run(path)
    write_run(path, dataclasses.replace(fitted_run, config={**fitted_run.config, "members": 0}))
    with pytest.raises(FormatError, match=r"'members' must be a whole number >= 1, got 0$"):
        read_run(path)


def test_files_without_members_read_as_one_member(run_file):
    """A file of 1.4 or before: no config 'members', a single posterior."""
    with h5py.File(run_file, "r+") as f:
        import json

        config = json.loads(f.attrs["config"])
        config.pop("members", None)
        f.attrs["config"] = json.dumps(config)
        for obj in (f, *f.values()):
            obj.attrs["encoding-version"] = "1.4"
    run = read_run(run_file)
    assert run.posterior.kind == "lowrank" and "members" not in run.config


# ------------------------------------------------------------------------------------------------ the predictive


def _member_runs(run):
    """Each member of ``run``'s mixture as a run of its own (its noise and prior precisions)."""
    return [dataclasses.replace(run, posterior=member, model=model, prior_precision=prior,
                                config={**run.config, "members": 1})
            for member, model, prior in run.posterior.components(run.model)]


def test_logistic_regression_averages_the_members_exact_probabilities(mixture_run):
    """The quadrature route is per member: the mixture's probabilities are exactly the average of the members',
    its expected entropy the average of theirs, and its mutual information includes their disagreement."""
    from slangcli.predictive.evaluation import predict_arrays

    X = np.random.default_rng(3).normal(size=(25, 3))
    mixed = predict_arrays(mixture_run, X).arrays
    members = [predict_arrays(run, X).arrays for run in _member_runs(mixture_run)]
    assert predict_arrays(mixture_run, X).info["predictive"] == "quadrature"
    np.testing.assert_array_equal(mixed["probabilities"],
                                  np.mean([m["probabilities"] for m in members], axis=0))
    np.testing.assert_array_equal(mixed["entropy_aleatoric"],
                                  np.mean([m["entropy_aleatoric"] for m in members], axis=0))
    # the entropy of the average is at least the average entropy: the members' disagreement is epistemic
    assert (mixed["entropy_epistemic"] >= np.mean([m["entropy_epistemic"] for m in members], axis=0) - 1e-12).all()
    assert (mixed["entropy_epistemic"] > np.mean([m["entropy_epistemic"] for m in members], axis=0) + 1e-3).any()


def test_monte_carlo_classification_shares_the_draws_among_the_members(mixture_run):
    """Each member gets ceil(S / K) of the draws, from the stream of member_seed(seed, k): the mixture's
    probabilities are the average of the members' own with those draws."""
    from slangcli.predictive.predict import classify
    from slangcli.streams import member_seed

    X = np.random.default_rng(4).normal(size=(10, 3))
    mixed = classify(mixture_run.posterior, mixture_run.model, X, samples=7, seed=11, predictive="mc")
    members = [classify(run.posterior, run.model, X, samples=4, seed=member_seed(11, k), predictive="mc")
               for k, run in enumerate(_member_runs(mixture_run))]
    assert mixed["predictive"] == "mc"
    np.testing.assert_array_equal(mixed["probs"], np.mean([m["probs"] for m in members], axis=0))
    assert member_seed(11, 0) == 11 and member_seed(11, 1) != 11


@pytest.fixture(scope="module")
def regression_mixture():
    """A regression network's run whose posterior is a mixture of its fitted posterior and a mean-field one with
    another noise precision."""
    import slangcli

    rng = np.random.default_rng(5)
    X = rng.normal(size=(30, 2))
    y = X @ [1.0, -2.0] + rng.normal(0, 0.3, 30)
    run = slangcli.fit(X, y, hidden=3, iterations=20, eval_samples=8, seed=2).run
    D = run.model.n_params
    other = DiagonalGaussian(mean=run.posterior.mean + rng.normal(0, 0.3, D), log_sigma=np.full(D, -1.5))
    mixed = _mixture_of(run, other)
    posterior = dataclasses.replace(mixed.posterior, noise_precision=mixed.posterior.noise_precision * [1.0, 4.0])
    return dataclasses.replace(mixed, posterior=posterior), X


def test_regression_pools_the_members_draws_with_their_own_noise(regression_mixture):
    """Mean: the mean of the members' means. Variance: the law of total variance, the members' mean variance
    plus the variance of their means (aleatoric: their mean noise variance). The members' predictions are their
    own, alone, with the same draws (ceil(S / K) each, from member_seed(seed, k))."""
    from slangcli.predictive.evaluation import predict_arrays
    from slangcli.predictive.mixture import cdf
    from slangcli.streams import member_seed

    run, X = regression_mixture
    mixed = predict_arrays(run, X, samples=9, seed=3, interval=0.9).arrays
    members = [predict_arrays(r, X, samples=5, seed=member_seed(3, k), interval=0.9).arrays
               for k, r in enumerate(_member_runs(run))]
    means = np.stack([m["mean"] for m in members])
    np.testing.assert_allclose(mixed["mean"], means.mean(axis=0), rtol=1e-12, atol=1e-12)
    total = np.mean([m["std_total"] ** 2 for m in members], axis=0) + means.var(axis=0)
    np.testing.assert_allclose(mixed["std_total"] ** 2, total, rtol=1e-10)
    np.testing.assert_allclose(mixed["std_aleatoric"] ** 2, np.mean([m["std_aleatoric"] ** 2 for m in members],
                                                                    axis=0), rtol=1e-12)
    np.testing.assert_allclose(mixed["std_total"] ** 2, mixed["std_aleatoric"] ** 2 + mixed["std_epistemic"] ** 2,
                               rtol=1e-12)
    assert (mixed["std_epistemic"] > np.mean([m["std_epistemic"] for m in members], axis=0)).all()
    # the interval's ends are the quantiles of the pooled mixture: its CDF, each member's half, is 0.05 and 0.95
    scale, shift = float(run.arrays["target_scale"][0]), float(run.arrays["target_mean"][0])
    for end, p in (("lower", 0.05), ("upper", 0.95)):
        z = (mixed[end] - shift) / scale
        at = [cdf(z, _outputs(r, X, 5, member_seed(3, k)), 1 / np.sqrt(r.model.noise_precision))
              for k, r in enumerate(_member_runs(run))]
        np.testing.assert_allclose(np.mean(at, axis=0), p, rtol=0, atol=1e-9)


def _outputs(run, X, samples, seed):
    """The network's outputs ``(samples, N)`` under the predictive's draws of ``run``'s posterior."""
    from slangcli.predictive.metrics import weight_samples

    return np.concatenate([run.model.forward(theta, X)[0][..., 0] for theta in weight_samples(run.posterior, seed,
                                                                                              samples)])


def test_regression_scores_use_the_same_pooled_predictive(regression_mixture):
    from slangcli.predictive.evaluation import predict_arrays, score
    from slangcli.streams import member_seed

    run, X = regression_mixture
    y = np.linspace(-1, 1, len(X))
    scale = float(run.arrays["target_scale"][0])
    out = score(run.model, run.posterior, run.prior_precision, X_train=X, y_train=y, X_test=X, y_test=y,
                target_scale=scale, samples=9, seed=3)
    mean = (predict_arrays(run, X, samples=9, seed=3).arrays["mean"] - float(run.arrays["target_mean"][0])) / scale
    np.testing.assert_allclose(out["test"]["rmse"], scale * np.sqrt(np.mean((mean - y) ** 2)), rtol=1e-12)
    members = [score(r.model, r.posterior, r.prior_precision, X_train=X, y_train=y, samples=9,
                     seed=member_seed(3, k))["train"]["neg_elbo_per_example"]
               for k, r in enumerate(_member_runs(run))]
    assert out["train"]["members"] == members
    assert out["train"]["neg_elbo_per_example"] == pytest.approx(np.mean(members), rel=1e-15)
