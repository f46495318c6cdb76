"""``slang compress`` and ``slang fit --method ktied`` from the command line.

Exit codes as in ``test_cli``: 0 success; 1 (one ``slang: error:`` line) for a missing or invalid run file or data
that cannot be read back; 2 for usage errors (bad ``--rank``, an output that would overwrite the input). No run
file and no temporary file is left behind by a failed command, whichever rank failed.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from click.testing import CliRunner

import slangcli.runfile.io
from slangcli.cli import main
from slangcli.compress.ktied import FLOOR_RELATIVE
from slangcli.gaussian.posteriors import KTiedGaussian
from slangcli.runfile.io import read_run

STEP = ["--epochs", "3", "--batch-size", "8", "--samples", "2", "--test-fraction", "0.25"]


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def ok_json(*args) -> dict:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def error(result, code: int, *mentions) -> str:
    assert result.exit_code == code, (result.exit_code, result.stderr, result.exception)
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.stderr
    assert result.stdout == ""
    if code == 1:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("slang: error: "), result.stderr
    for text in mentions:
        assert text in result.stderr, result.stderr
    return result.stderr


@pytest.fixture
def bbb_run(train_csv, tmp_path):
    """Bayes by Backprop on 3 features with a hidden layer of 4: weight matrices 3 x 4 and 4 x 1."""
    path = tmp_path / "bbb.h5"
    ok_json("fit", train_csv, "-o", path, "--method", "bbb", "--hidden", "4", *STEP)
    return path


def test_compress_several_ranks_json(bbb_run, out_dir):
    out = ok_json("compress", bbb_run, "--rank", "1,2,3", "-o", out_dir / "c.h5")
    names = sorted(p.name for p in out_dir.iterdir())
    assert names == ["c-k1.h5", "c-k2.h5", "c-k3.h5"]
    source = read_run(bbb_run)
    sha = hashlib.sha256(bbb_run.read_bytes()).hexdigest()
    assert out["source"]["sha256"] == sha and out["source"]["params"] == 2 * 21
    assert [s["shape"] for s in out["spectrum"]] == [[3, 4], [4, 1]]
    assert out["floor_relative"] == FLOOR_RELATIVE
    for entry, k in zip(out["outputs"], (1, 2, 3)):
        run = read_run(entry["path"])
        assert entry["rank"] == k and isinstance(run.posterior, KTiedGaussian)
        assert run.posterior.ranks == (k, 1)  # the 4 x 1 layer keeps its full rank 1
        assert run.posterior.mean.tobytes() == source.posterior.mean.tobytes()
        c = run.compression
        assert c["source"]["sha256"] == sha and c["rank"] == k and c["params_before"] == 42
        assert c["params_after"] == entry["params_after"] == 21 + k * 7 + 5 + 5
        assert [layer["rank"] for layer in c["layers"]] == [k, 1]
        for layer in out["spectrum"]:  # "layer" counts from 1, as stderr does; "index" is the datasets' suffix
            assert layer["layer"] == layer["index"] + 1
            np.testing.assert_allclose(run.compression_arrays[f"explained_variance_{layer['index']}"],
                                       layer["explained_variance"], rtol=1e-15, atol=0)
        assert run.metrics == {} and entry["metrics"] is None
        assert run.command[:2] == ["slang", "compress"]
    # rank 3 = min(3, 4) is exact: the source's standard deviations
    exact = read_run(out_dir / "c-k3.h5").posterior
    np.testing.assert_allclose(exact.sigma(), np.exp(source.posterior.log_sigma), rtol=1e-12, atol=0)


def test_one_rank_writes_exactly_the_output_and_inspect_shows_it(bbb_run, out_dir):
    result = invoke("compress", bbb_run, "-k", "2", "-o", out_dir / "one.h5")
    assert result.exit_code == 0 and result.stdout == ""
    assert "explained variance per singular value" in result.stderr and "k-tied compression" in result.stderr
    assert [p.name for p in out_dir.iterdir()] == ["one.h5"]
    shown = invoke("inspect", out_dir / "one.h5")
    assert shown.exit_code == 0 and "compressed from" in shown.stderr and "ktied-gaussian" in shown.stderr
    described = ok_json("inspect", out_dir / "one.h5")
    assert described["posterior"]["arrays"]["U"] == [[3, 2], [4, 1]]
    assert described["compression"]["rank"] == 2


def test_evaluate_scores_source_and_every_rank(bbb_run, out_dir):
    """--evaluate: one row per posterior; stored in each file; ``slang evaluate`` with the same samples and seed
    reproduces them; ``--reference`` gives the KL between compressed and source posteriors."""
    out = ok_json("compress", bbb_run, "--rank", "1,3", "-o", out_dir / "c.h5", "--evaluate", "--samples", "50")
    assert set(out["source"]["scores"]) >= {"test", "train"}
    for entry in out["outputs"]:
        m = entry["metrics"]
        assert 0 <= m["test"]["accuracy"] <= 1 and np.isfinite(m["train"]["neg_elbo_per_example"])
        assert read_run(entry["path"]).metrics["test"] == m["test"]
        again = ok_json("evaluate", entry["path"], "--samples", "50")["metrics"]
        assert again["test"]["nll"] == pytest.approx(m["test"]["nll"], rel=1e-12)
        # by default too: evaluate draws as the stored scores were made (compress's --samples and --seed, which
        # the file records), not as the source's fit scored
        assert ok_json("evaluate", entry["path"])["metrics"]["test"] == m["test"]
    full = out["outputs"][1]["metrics"]  # rank 3: exact, so the same scores as the source (common samples)
    assert full["test"]["nll"] == pytest.approx(out["source"]["scores"]["test"]["nll"], rel=1e-9)
    ref = ok_json("evaluate", out_dir / "c-k1.h5", "--reference", bbb_run, "--samples", "10")["metrics"]["reference"]
    assert ref["symmetric_kl"] > 0 and np.isfinite(ref["symmetric_kl"])


def test_rank_above_min_m_n_is_noted(bbb_run, out_dir):
    result = invoke("compress", bbb_run, "--rank", "7", "-o", out_dir / "c.h5")
    assert result.exit_code == 0
    assert "--rank 7 exceeds min(m, n) of layer 1 (3 x 4), layer 2 (4 x 1)" in result.stderr
    assert read_run(out_dir / "c.h5").posterior.ranks == (3, 1)


def test_compress_a_slang_run(run_file, out_dir):
    """A SLANG posterior of logistic regression (one 3 x 1 weight matrix): rank 1 is exact, on the marginal
    standard deviations."""
    ok_json("compress", run_file, "--rank", "1", "-o", out_dir / "s.h5")
    source, comp = read_run(run_file).posterior, read_run(out_dir / "s.h5").posterior
    np.testing.assert_allclose(comp.sigma(), np.sqrt(source.marginal_variances()), rtol=1e-12, atol=0)


@pytest.mark.parametrize("rank", ["0", "-1", "a", "", "1,,2", "2,2"])
def test_bad_rank_is_a_usage_error(bbb_run, out_dir, rank):
    error(invoke("compress", bbb_run, "--rank", rank, "-o", out_dir / "c.h5"), 2, "--rank")
    assert list(out_dir.iterdir()) == []


def test_missing_and_corrupt_input(out_dir, tmp_path):
    error(invoke("compress", tmp_path / "absent.h5", "--rank", "1", "-o", out_dir / "c.h5"), 1, "absent.h5",
          "no such file")
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"not an hdf5 file at all")
    error(invoke("compress", bad, "--rank", "1", "-o", out_dir / "c.h5"), 1, "bad.h5", "not an HDF5 file")
    assert list(out_dir.iterdir()) == []


def test_output_over_the_input_is_refused(bbb_run, tmp_path):
    before = bbb_run.read_bytes()
    error(invoke("compress", bbb_run, "--rank", "1", "-o", bbb_run), 2, "refusing to overwrite")
    # with several ranks the derived names are checked too: bbb.h5 is out-k... never, but bbb-k1.h5 is
    derived = tmp_path / "bbb-k1.h5"
    derived.write_bytes(before)
    error(invoke("compress", derived, "--rank", "1,2", "-o", tmp_path / "bbb.h5"), 2, "refusing to overwrite")
    assert bbb_run.read_bytes() == before and derived.read_bytes() == before


def test_missing_output_directory(bbb_run, tmp_path):
    error(invoke("compress", bbb_run, "--rank", "1", "-o", tmp_path / "nowhere" / "c.h5"), 2, "does not exist")


def test_a_derived_output_name_that_is_a_directory_is_refused(bbb_run, out_dir):
    (out_dir / "c-k2.h5").mkdir()
    error(invoke("compress", bbb_run, "--rank", "1,2", "-o", out_dir / "c.h5"), 2, "c-k2.h5 is a directory")
    assert sorted(p.name for p in out_dir.iterdir()) == ["c-k2.h5"]


def test_failed_evaluation_writes_nothing(bbb_run, train_csv, out_dir):
    """--evaluate re-reads the training file (the test set is a split of it); when it has changed, the command
    fails with one line and leaves no output of any rank."""
    train_csv.write_text(train_csv.read_text() + "1,2,3,yes\n")
    result = invoke("compress", bbb_run, "--rank", "1,2", "-o", out_dir / "c.h5", "--evaluate")
    assert result.exit_code == 1 and result.stdout == "" and isinstance(result.exception, SystemExit)
    last = result.stderr.splitlines()[-1]  # after the note on rank 2's clamp
    assert last.startswith("slang: error: ") and "sha256" in last, result.stderr
    assert list(out_dir.iterdir()) == []


def test_evaluate_on_a_run_without_test_data_says_how_to_score(train_csv, tmp_path, out_dir):
    """compress takes no data file, so "pass a data file" could not be followed: the message names the two ways
    that work, and it comes before any compression."""
    run = tmp_path / "no-test.h5"
    ok_json("fit", train_csv, "-o", run, "--method", "bbb", "--hidden", "4", "--epochs", "2")
    stderr = error(invoke("compress", run, "--rank", "1", "-o", out_dir / "c.h5", "--evaluate"), 2,
                   f"{run}: the run has no test data, and compress --evaluate scores on the run's own test data: fit "
                   "with --test FILE or --test-fraction F, or score a compressed file with slang evaluate OUT.h5 DATA")
    assert "pass a data file" not in stderr
    assert list(out_dir.iterdir()) == []


def test_failed_write_of_a_later_rank_leaves_no_file(bbb_run, out_dir, monkeypatch):
    """A write that fails on the second file (disk full, simulated) removes the first file's temporary too."""
    original, calls = slangcli.runfile.io._json_attr, []

    def json_attr(obj, name, value):
        if name == "summary":
            calls.append(name)
            if len(calls) == 2:
                raise OSError("disk full (simulated)")
        original(obj, name, value)

    monkeypatch.setattr(slangcli.runfile.io, "_json_attr", json_attr)
    result = invoke("compress", bbb_run, "--rank", "1,2", "-o", out_dir / "c.h5")
    # an OSError while writing is the output's problem: one line naming the file, exit 1 (slangcli.runfile.outputs)
    assert result.exit_code == 1 and len(calls) == 2
    assert result.stderr.strip().splitlines()[-1].startswith("slang: error: cannot write "), result.stderr
    assert list(out_dir.iterdir()) == []


def test_help_states_the_floor():
    shown = invoke("compress", "--help").stdout
    assert f"{FLOOR_RELATIVE:.0e}".replace("e-0", "e-") in shown and "--evaluate" in shown


# ------------------------------------------------------------------------------------------------ fit ktied
def test_fit_ktied_then_evaluate_and_compress(train_csv, out_dir):
    out = out_dir / "k.h5"
    result = invoke("fit", train_csv, "-o", out, "--method", "ktied", "--hidden", "4", "--rank", "2",
                    "--kl-anneal-steps", "5", "--init-noise", "0.2", *STEP, "--json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert "layer 2 (4 x 1): rank 1" in result.stderr  # the clamp note
    run = read_run(out)
    assert run.config["method"] == "ktied" and run.config["hyper"]["rank"] == 2
    assert run.config["hyper"]["kl_anneal_steps"] == 5 and run.config["hyper"]["init_noise"] == 0.2
    post = run.posterior
    assert isinstance(post, KTiedGaussian) and post.ranks == (2, 1) and (post.floor == 0).all()
    evaluated = ok_json("evaluate", out)["metrics"]
    for split, name in (("test", "nll"), ("test", "accuracy"), ("train", "neg_elbo_per_example")):
        assert evaluated[split][name] == pytest.approx(summary["metrics"][split][name], rel=1e-12)
    assert invoke("inspect", out).exit_code == 0
    # a trained rank-2 posterior compresses to itself at rank 2
    ok_json("compress", out, "--rank", "2", "-o", out_dir / "again.h5")
    np.testing.assert_allclose(read_run(out_dir / "again.h5").posterior.sigma(), post.sigma(), rtol=1e-10, atol=0)


def test_fit_ktied_rank_zero_is_refused(train_csv, out_dir):
    error(invoke("fit", train_csv, "-o", out_dir / "k.h5", "--method", "ktied", "--rank", "0", *STEP), 2,
          "--rank must be a whole number >= 1 for ktied")
