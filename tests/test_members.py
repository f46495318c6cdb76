"""Ensembles of posteriors, ``slang fit --members K``: the mixture run file (its encoding, its checks, old files),
the mixture predictive (the average of the members' predictives), the training of K members (member 0 is the single
fit, bit for bit; the others differ), and every command on a mixture file."""

from __future__ import annotations

import dataclasses
import re

import h5py
import numpy as np
import pytest

from slangcli.errors import FormatError
from slangcli.gaussian.posteriors import DiagonalGaussian, MixtureGaussian
from slangcli.methods import METHODS
from slangcli.methods.base import is_solver
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
     r"/posterior/noise_precision\[0\] is 2\.0, but /model, the first member's, has 1\.0"),
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
    another noise precision (constant noise: each member's own)."""
    import slangcli

    rng = np.random.default_rng(5)
    X = rng.normal(size=(30, 2))
    y = X @ [1.0, -2.0] + rng.normal(0, 0.3, 30)
    run = slangcli.fit(X, y, hidden=3, iterations=20, eval_samples=8, seed=2, noise_model="constant").run
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


# ------------------------------------------------------------------------------------------------ training


def _same_posterior(a, b):
    """Identical posteriors, bit for bit (a mixture member by member, with its precisions)."""
    assert type(a) is type(b)
    for name, value in vars(a).items():
        other = getattr(b, name)
        if isinstance(value, tuple) and value and not isinstance(value[0], np.ndarray) and hasattr(value[0],
                                                                                                  "mean"):
            for x, z in zip(value, other, strict=True):
                _same_posterior(x, z)
        elif isinstance(value, tuple):
            for x, z in zip(value, other, strict=True):
                assert np.asarray(x).tobytes() == np.asarray(z).tobytes(), name
        else:
            assert np.asarray(value).tobytes() == np.asarray(other).tobytes(), name


def _regression(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    return X, np.sin(X[:, 0]) + X[:, 1] + rng.normal(0, 0.2, n)


FAST = dict(hidden=3, epochs=3, batch_size=8, eval_samples=12, seed=4)


def test_one_member_is_the_fit_without_the_option_bit_for_bit():
    import slangcli

    X, y = _regression()
    plain = slangcli.fit(X[:30], y[:30], X_test=X[30:], y_test=y[30:], **FAST)
    one = slangcli.fit(X[:30], y[:30], X_test=X[30:], y_test=y[30:], members=1, **FAST)
    _same_posterior(plain.posterior, one.posterior)
    assert plain.posterior.kind == "lowrank" and plain.config["members"] == 1 and "member_seeds" not in plain.config
    assert one.metrics["test"] == plain.metrics["test"] and one.metrics["train"] == plain.metrics["train"]
    for name, values in plain.history.items():
        if name != "seconds":
            assert values.tobytes() == one.history[name].tobytes(), name
    assert set(one.history) == set(plain.history)


def test_members_are_whole_fits_from_their_own_seeds():
    """Member 0 is the single fit; member k the single fit with --seed member_seed(seed, k), its own learned noise
    precision included; the members differ."""
    import slangcli
    from slangcli.streams import member_seed

    X, y = _regression()
    three = slangcli.fit(X[:30], y[:30], X_test=X[30:], y_test=y[30:], members=3, **FAST)
    post = three.posterior
    assert post.kind == "mixture" and post.n_members == 3
    assert three.config["members"] == 3
    assert three.config["member_seeds"] == [4, member_seed(4, 1), member_seed(4, 2)]
    assert len(set(three.config["member_seeds"])) == 3
    for k in range(3):
        alone = slangcli.fit(X[:30], y[:30], X_test=X[30:], y_test=y[30:], **{**FAST, "seed": member_seed(4, k)})
        _same_posterior(post.members[k], alone.posterior)
        assert post.noise_precision[k] == alone.model.noise_precision
        assert post.prior_precision[k].tobytes() == alone.run.prior_precision.tobytes()
        assert three.metrics["train"]["members"][k] == alone.metrics["train"]["neg_elbo_per_example"]
        history = alone.history if k == 0 else {n[len(f"member{k}_"):]: v for n, v in three.history.items()
                                                if n.startswith(f"member{k}_")}
        assert history["nll"].tobytes() == (three.history if k == 0 else history)["nll"].tobytes()
    assert not np.array_equal(post.members[0].mean, post.members[1].mean)
    assert len(set(post.noise_precision.tolist())) == 3  # learned per member
    assert three.model.noise_precision == post.noise_precision[0]
    assert three.metrics["fit_seconds"] == pytest.approx(sum(three.metrics["member_seconds"]))


@pytest.mark.parametrize("method", [name for name, m in METHODS.items() if not is_solver(m)])
def test_every_step_method_trains_members(method):
    """Member 0 of every registered step method is its single fit; member 1 is another posterior of the same
    kind."""
    import slangcli

    X, y = _regression(n=24)
    hyper = {"rank": 1} if method in ("slang", "ktied") else {}
    kw = dict(method=method, hidden=2, iterations=4, batch_size=8, eval_samples=4, seed=1, **hyper)
    single = slangcli.fit(X, (y > 0).astype(int), **kw)
    two = slangcli.fit(X, (y > 0).astype(int), members=2, **kw)
    assert two.posterior.kind == "mixture"
    _same_posterior(two.posterior.members[0], single.posterior)
    assert type(two.posterior.members[1]) is type(single.posterior)
    assert not np.array_equal(two.posterior.members[1].mean, single.posterior.mean)
    assert two.predict_proba(X[:3], samples=4).shape == (3, 2)


@pytest.mark.parametrize("values, says", [
    ({"members": 0}, "--members must be a whole number >= 1, got 0"),
    ({"members": 2, "method": "exact-full"},
     "--members applies to the step methods: --method exact-full is solved deterministically, so every member would "
     "be the same posterior"),
    ({"members": 2, "method": "exact-mf"}, "--method exact-mf is solved deterministically"),
])
def test_bad_member_counts_are_refused(values, says):
    from slangcli.errors import ConfigError
    from slangcli.training.options import FitOptions

    with pytest.raises(ConfigError, match=re.escape(says)):
        FitOptions.of(**values)


def test_with_restarts_each_member_is_the_best_of_its_own_restarts():
    import slangcli
    from slangcli.streams import member_seed
    from slangcli.training.restarts import restart_seed

    X, y = _regression()
    fit = slangcli.fit(X, y, members=2, restarts=2, **{**FAST, "epochs": 2})
    records = fit.config["restarts"]
    assert isinstance(records, list) and len(records) == 2
    for k, record in enumerate(records):
        assert record["seeds"] == [restart_seed(member_seed(4, k), r) for r in range(2)]
        alone = slangcli.fit(X, y, restarts=2, **{**FAST, "epochs": 2, "seed": member_seed(4, k)})
        assert alone.config["restarts"] == {**record}
        _same_posterior(fit.posterior.members[k], alone.posterior)


def test_tune_chooses_once_and_every_member_trains_with_its_choice():
    import slangcli

    X, y = _regression()
    kw = dict(FAST, epochs=2, tune="prior-precision", tune_folds=2, noise_precision=10.0)
    single = slangcli.fit(X, y, **kw)
    two = slangcli.fit(X, y, members=2, **kw)
    assert two.config["tuning"] == single.config["tuning"]
    assert two.config["prior_precision"] == single.config["prior_precision"]
    _same_posterior(two.posterior.members[0], single.posterior)


@pytest.fixture
def regression_csv(tmp_path):
    X, y = _regression(n=48, seed=7)
    path = tmp_path / "reg.csv"
    path.write_text("a,b,y\n" + "".join(f"{a:.10f},{b:.10f},{t:.10f}\n" for (a, b), t in zip(X, y)))
    return path


@pytest.mark.parametrize("stop_after", [5, 18, 19, 40], ids=["member-0", "member-end", "member-1", "member-2"])
def test_an_interrupted_fit_of_members_resumes_to_the_same_bits(tmp_path, regression_csv, stop_after):
    """A regression network that learns its noise precision, three members of 18 steps: stopped in member 0, at
    the end of member 0 (the stop then comes after member 1's first step), in member 1 and in member 2."""
    from slangcli.data.sources import DataOptions
    from slangcli.errors import Interrupted
    from slangcli.training.checkpoints import Checkpointing
    from slangcli.training.fitting import fit, resume

    opts = DataOptions(path=str(regression_csv), test_fraction=0.25)
    kwargs = dict(hidden="3", batch_size=12, epochs=6, seed=2, eval_samples=10, members=3)
    reference = fit(opts, **kwargs)
    assert reference.config["n_steps"] == 18
    written, polls = [], []
    with pytest.raises(Interrupted) as info:
        fit(opts, **kwargs, checkpointing=Checkpointing(write=written.append,
                                                        stop=lambda: polls.append(1) or len(polls) > stop_after))
    member, step = divmod(max(stop_after, 19) if stop_after == 18 else stop_after, 18)
    assert str(info.value) == f"interrupted at step {step} of 18 of member {member + 1} of 3"
    path = tmp_path / "ck.h5"
    write_run(path, written[-1])
    stored = read_run(path)
    assert stored.posterior.n_members == member + 1 and stored.metrics["member"] == member
    assert stored.model.noise_precision == stored.posterior.noise_precision[0]
    resumed = resume(stored, str(path))
    _same_posterior(resumed.posterior, reference.posterior)
    assert resumed.metrics["test"] == reference.metrics["test"]
    # the run records where it was resumed: the step within the member in progress, and that member
    assert [(r["step"], r["member"]) for r in resumed.meta["resumed"]] == [
        (int(stored.state["scalars"]["t"]), int(stored.state["scalars"]["member"]))]
    for name, values in reference.history.items():
        if not name.endswith("seconds"):
            assert resumed.history[name].tobytes() == values.tobytes(), name
    assert resumed.model.noise_precision == reference.model.noise_precision
    assert resumed.config == reference.config


def test_a_checkpoint_of_members_without_its_record_is_refused(tmp_path, regression_csv):
    from slangcli.data.sources import DataOptions
    from slangcli.errors import Interrupted
    from slangcli.training.checkpoints import Checkpointing
    from slangcli.training.fitting import fit, resume

    opts = DataOptions(path=str(regression_csv))
    written, polls = [], []
    with pytest.raises(Interrupted):
        fit(opts, hidden="3", batch_size=12, epochs=2, members=2, eval_samples=4,
            checkpointing=Checkpointing(write=written.append, stop=lambda: polls.append(1) or len(polls) > 8))
    path = tmp_path / "ck.h5"
    run = written[-1]
    write_run(path, dataclasses.replace(run, metrics={k: v for k, v in run.metrics.items() if k != "member_seconds"}))
    with pytest.raises(FormatError, match=r"ck\.h5: /metrics lacks 'member_seconds', the seconds of the 1 members "
                                          r"done$"):
        resume(read_run(path), str(path))
    state = {"arrays": run.state["arrays"], "scalars": {**run.state["scalars"], "member": 2}}
    write_run(path, dataclasses.replace(run, state=state))
    with pytest.raises(FormatError, match=r"ck\.h5: /state attribute 'member' must be the member in progress, from "
                                          r"0 to 1, got 2$"):
        read_run(path)
    state = {"arrays": run.state["arrays"], "scalars": {**run.state["scalars"], "member": 0}}
    write_run(path, dataclasses.replace(run, state=state))
    with pytest.raises(FormatError, match=r"ck\.h5: /posterior is a mixture of 2 members, but the checkpoint is at "
                                          r"member 1 of 2 \(it holds members 1 to 1\)$"):
        read_run(path)


# ------------------------------------------------------------------------------------------------ every command


@pytest.fixture(scope="module")
def mixture_cli(tmp_path_factory):
    """``slang fit --members 3`` of a small regression network, and a single fit of the same data, as files."""
    from click.testing import CliRunner

    from slangcli.cli import main

    directory = tmp_path_factory.mktemp("members")
    X, y = _regression(n=48, seed=9)
    data = directory / "reg.csv"
    data.write_text("a,b,y\n" + "".join(f"{a:.10f},{b:.10f},{t:.10f}\n" for (a, b), t in zip(X, y)))
    common = [str(data), "--hidden", "3", "--epochs", "3", "--batch-size", "12", "--test-fraction", "0.25",
              "--eval-samples", "30"]
    for name, extra in (("mix.h5", ["--members", "3"]), ("one.h5", [])):
        done = CliRunner().invoke(main, ["fit", *common, *extra, "-o", str(directory / name)])
        assert done.exit_code == 0, done.output
    return directory


def _cli(*args):
    from click.testing import CliRunner

    from slangcli.cli import main

    return CliRunner().invoke(main, [str(a) for a in args])


def test_slang_fit_reports_its_members(tmp_path, mixture_cli):
    done = _cli("fit", mixture_cli / "reg.csv", "--hidden", "3", "--epochs", "3", "--batch-size", "12",
                "--test-fraction", "0.25", "--eval-samples", "30", "--members", "3", "-o", tmp_path / "again.h5",
                "--json")
    assert done.exit_code == 0, done.output
    assert "member 3 of 3 (seed " in done.stderr and "3 members of 9 steps" in done.stderr
    assert "-ELBO / N, mean of 3 members" in done.stderr
    import json

    out = json.loads(done.stdout)
    assert out["config"]["members"] == 3 and len(out["config"]["member_seeds"]) == 3
    # the same command, the same bits
    _same_posterior(read_run(tmp_path / "again.h5").posterior, read_run(mixture_cli / "mix.h5").posterior)


def test_evaluate_and_predict_use_the_mixture(mixture_cli):
    import json

    run = read_run(mixture_cli / "mix.h5")
    done = _cli("evaluate", mixture_cli / "mix.h5", "--samples", "30", "--json")
    assert done.exit_code == 0, done.output
    scores = json.loads(done.stdout)["metrics"]
    # evaluate's scores of the run's own test data with the fit's samples and seed are the fit's; the training
    # -ELBO is the fit's own (stored)
    assert scores["test"] == run.metrics["test"] and scores["train"] == {**run.metrics["train"], "stored": True}
    assert len(scores["train"]["members"]) == 3
    out = mixture_cli / "p.csv"
    done = _cli("predict", mixture_cli / "mix.h5", mixture_cli / "reg.csv", "-o", out, "--samples", "30")
    assert done.exit_code == 0, done.output
    import csv

    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 48
    from slangcli.api import load

    direct = load(mixture_cli / "mix.h5").predict(np.loadtxt(mixture_cli / "reg.csv", delimiter=",", skiprows=1)
                                                  [:, :2], samples=30)
    np.testing.assert_allclose([float(r["mean"]) for r in rows], direct.mean, rtol=1e-10)
    np.testing.assert_allclose([float(r["std_epistemic"]) for r in rows], direct.std_epistemic, rtol=1e-10)


def test_the_draws_reported_are_the_draws_made(mixture_cli, tmp_path):
    """A mixture of 3 asked for 7 samples makes ceil(7 / 3) = 3 draws of each member's, 9 in all: reported as 7.
    The reports keep the samples asked for (what --samples reproduces, and what a calibration records) and say the
    draws beside them."""
    import json

    from slangcli.api import load

    done = _cli("evaluate", mixture_cli / "mix.h5", "--samples", "7", "--json")
    assert done.exit_code == 0, done.output
    out = json.loads(done.stdout)
    assert (out["samples"], out["draws"]) == (7, 9)
    assert "(mc, 7 samples (9 draws, 3 from each of 3 members), seed 0)" in done.stderr
    done = _cli("predict", mixture_cli / "mix.h5", mixture_cli / "reg.csv", "-o", "-", "--samples", "6")
    assert done.exit_code == 0, done.output
    assert "(mc, 6 samples, seed 0)" in done.stderr  # (3 divides 6: nothing to add)
    X = np.loadtxt(mixture_cli / "reg.csv", delimiter=",", skiprows=1)[:, :2]
    info = load(mixture_cli / "mix.h5").predict(X, samples=7).info
    assert (info["samples"], info["draws"]) == (7, 9)
    # a calibrated mixture whose samples 3 does not divide: its own predictive is the calibration's, said as such
    fitted = _cli("fit", mixture_cli / "reg.csv", "--hidden", "3", "--epochs", "2", "--members", "3",
                  "--eval-samples", "7", "--calibrate", "0.3", "-o", tmp_path / "cal.h5")
    assert fitted.exit_code == 0, fitted.output
    done = _cli("predict", tmp_path / "cal.h5", mixture_cli / "reg.csv", "-o", tmp_path / "p.csv")
    assert done.exit_code == 0 and "Monte-Carlo difference" not in done.stderr, done.stderr
    done = _cli("evaluate", tmp_path / "cal.h5", mixture_cli / "reg.csv")
    assert done.exit_code == 0 and "Monte-Carlo difference" not in done.stderr, done.stderr


def test_inspect_says_it_is_a_mixture_of_members(mixture_cli):
    import json

    done = _cli("inspect", mixture_cli / "mix.h5")
    assert done.exit_code == 0, done.output
    assert "posterior  mixture of 3 members (equal weights, --members), D = 13" in done.stderr
    for k in range(3):
        assert f"  member {k + 1}  lowrank-gaussian (/posterior/member_{k}), mean (13,), U (13, 5), d (13,); noise precision " in done.stderr
    summary = json.loads(_cli("inspect", mixture_cli / "mix.h5", "--json").stdout)["posterior"]
    assert summary["type"] == "mixture" and [m["type"] for m in summary["members"]] == ["lowrank-gaussian"] * 3
    assert summary["noise_precision"] == read_run(mixture_cli / "mix.h5").posterior.noise_precision.tolist()


def test_compress_compresses_every_member(mixture_cli, tmp_path):
    from slangcli.compress import ktied

    done = _cli("compress", mixture_cli / "mix.h5", "-k", "1", "-o", tmp_path / "c.h5", "--evaluate",
                "--samples", "30")
    assert done.exit_code == 0, done.output
    assert "member 1 of a mixture of 3" in done.stderr
    source, out = read_run(mixture_cli / "mix.h5"), read_run(tmp_path / "c.h5")
    assert out.posterior.kind == "mixture" and [m.kind for m in out.posterior.members] == ["ktied"] * 3
    for member, original in zip(out.posterior.members, source.posterior.members):
        _same_posterior(member, ktied.compress(original, source.model, 1)[0])
    assert out.posterior.noise_precision.tobytes() == source.posterior.noise_precision.tobytes()
    assert len(out.compression["member_layers"]) == 3 and "member2_singular_values_0" in out.compression_arrays
    assert out.compression["params_before"] == source.posterior.n_variational_params()
    assert _cli("evaluate", tmp_path / "c.h5", "--samples", "10").exit_code == 0


@pytest.mark.parametrize("kind", ["training", "calibration", "spectrum"])
def test_plot_draws_what_reads_a_mixture(mixture_cli, tmp_path, kind):
    pytest.importorskip("matplotlib")
    samples = ["--samples", "30"] if kind == "calibration" else []  # (an option of calibration only)
    done = _cli("plot", mixture_cli / "mix.h5", "--kind", kind, "-o", tmp_path / f"{kind}.png", *samples)
    assert done.exit_code == 0, done.output
    assert (tmp_path / f"{kind}.png").stat().st_size > 0


def test_the_figures_say_whose_curve_and_spectrum_they_show(mixture_cli):
    from slangcli.plot import plotdata

    run = read_run(mixture_cli / "mix.h5")
    assert plotdata.training_curve(run, "x", "mix.h5").label == "x (member 1 of 3)"
    spectrum = plotdata.spectrum(run, "x", "mix.h5")
    alone = plotdata.spectrum(_member_runs(run)[0], "x", "mix.h5")
    assert spectrum.label == "x (member 1 of 3)"
    for a, b in zip(spectrum.explained, alone.explained):
        np.testing.assert_array_equal(a, b)
    assert plotdata.method_label(run) == "SLANG L = 5, 3 members"
    assert plotdata.run_parameters(run)["members"] == 3


@pytest.mark.parametrize("command", [
    ["evaluate", "mix.h5", "--reference", "one.h5"],
    ["evaluate", "one.h5", "--reference", "mix.h5"],
    ["plot", "mix.h5", "--kind", "posterior", "--reference", "one.h5", "-o", "p.png"],
    ["plot", "one.h5", "--kind", "posterior", "--reference", "mix.h5", "-o", "p.png"],
], ids=["evaluate-run", "evaluate-reference", "plot-run", "plot-reference"])
def test_a_mixture_is_refused_where_a_kl_divergence_is_asked_for(mixture_cli, command, monkeypatch):
    monkeypatch.chdir(mixture_cli)
    done = _cli(*command)
    assert done.exit_code == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("slang: error: mix.h5: a mixture of 3 posteriors (--members) "
                                                   "cannot be ")
    assert "a mixture's has no closed form" in lines[0]
    assert not (mixture_cli / "p.png").exists()


def test_a_closed_form_method_refuses_members_on_the_command_line(mixture_cli, tmp_path):
    done = _cli("fit", mixture_cli / "reg.csv", "--method", "exact-mf", "--members", "2", "-o", tmp_path / "x.h5")
    assert done.exit_code == 2 and not (tmp_path / "x.h5").exists()
    assert done.stderr.strip().splitlines()[-1] == (
        "slang: error: --members applies to the step methods: --method exact-mf is solved deterministically, so every "
        "member would be the same posterior")
    done = _cli("fit", mixture_cli / "reg.csv", "--members", "0", "-o", tmp_path / "x.h5")
    assert done.exit_code == 2 and "--members" in done.stderr and not (tmp_path / "x.h5").exists()


def test_the_python_api_and_the_estimators_predict_with_the_mixture(mixture_cli):
    import slangcli
    from slangcli import SLANGClassifier, SLANGRegressor
    from slangcli.streams import member_seed

    result = slangcli.load(mixture_cli / "mix.h5")
    assert repr(result).endswith("slang mixture of 3 lowrank posterior, gaussian model 2-3-1, 13 parameters>")
    X = np.random.default_rng(0).normal(size=(6, 2))
    p = result.predict(X, samples=12, seed=1)
    assert p.std.shape == (6,) and (p.std_epistemic > 0).all()
    # the draws behind predict: member after member, ceil(12 / 3) each
    theta = result.sample(12, seed=1)
    members = [slangcli.FitResult(r).sample(4, seed=member_seed(1, k)) for k, r in enumerate(_member_runs(result.run))]
    np.testing.assert_array_equal(theta, np.concatenate(members))
    assert result.sample(7, seed=1).shape == (7, 13)
    compressed = result.compress(1)
    assert compressed.posterior.kind == "mixture" and compressed.posterior.members[2].kind == "ktied"

    X, y = _regression(n=40, seed=2)
    regressor = SLANGRegressor(hidden=(3,), epochs=2, batch_size=10, members=2, predict_samples=10).fit(X, y)
    assert regressor.get_params()["members"] == 2 and regressor.result_.posterior.n_members == 2
    mean, std = regressor.predict(X[:5], return_std=True)
    assert mean.shape == std.shape == (5,) and (std > 0).all()
    assert regressor.set_params(members=1).fit(X, y).result_.posterior.kind == "lowrank"
    classifier = SLANGClassifier(hidden=(3,), epochs=2, batch_size=10, members=3, predict_samples=9).fit(X, y > 0)
    probabilities = classifier.predict_proba(X[:4])
    assert probabilities.shape == (4, 2)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-12)
    assert classifier.result_.posterior.n_members == 3


def test_a_sweep_varies_members(tmp_path, mixture_cli):
    from slangcli.sweep import make_task, points_of, run_fit
    from slangcli.sweep.grid import parameters

    assert parameters()["members"].kind == "int" and parameters()["members"].default == 1
    points = points_of([{"data": str(mixture_cli / "reg.csv"), "members": "1,2", "epochs": "2", "hidden": "3",
                         "batch-size": "12", "eval-samples": "8"}])
    assert [p.params.get("members") for p in points] == ["1", "2"]
    # (the default is left out of a fit's arguments, and of its run file's name)
    assert "--members" not in points[0].args
    at = points[1].args.index("--members")
    assert points[1].args[at + 1] == "2" and "members" in points[1].name
    for p in points:
        record = run_fit(make_task(p, str(tmp_path / p.name)))
        assert record["status"] == "complete", record
    kinds = [read_run(tmp_path / p.name).posterior.kind for p in points]
    assert kinds == ["lowrank", "mixture"]


def test_inspect_and_slang_fit_resume_on_a_checkpoint_of_members(tmp_path, regression_csv):
    from slangcli.data.sources import DataOptions
    from slangcli.errors import Interrupted
    from slangcli.training.checkpoints import Checkpointing
    from slangcli.training.fitting import fit

    opts = DataOptions(path=str(regression_csv), test_fraction=0.25)
    kwargs = dict(hidden="3", batch_size=12, epochs=3, seed=2, eval_samples=10, members=2)
    reference = fit(opts, **kwargs)
    path, polls = tmp_path / "ck.h5", []
    with pytest.raises(Interrupted):
        fit(opts, **kwargs, command=["slang", "fit"], checkpointing=Checkpointing(
            write=lambda run: write_run(path, run), stop=lambda: polls.append(1) or len(polls) > 12))
    done = _cli("inspect", path)
    assert done.exit_code == 0, done.output
    assert "status     checkpoint at step 3 of 9 of member 2 of 2" in done.stderr
    assert "posterior  mixture of 2 members" in done.stderr
    done = _cli("fit", "--resume", path, "--no-progress")
    assert done.exit_code == 0, done.output
    assert "2 members of 9 steps" in done.stderr
    _same_posterior(read_run(path).posterior, reference.posterior)
