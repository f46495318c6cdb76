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
