"""What a run file records of the software and machine that wrote it (``slangcli.runfile.provenance``): the versions
of its packages, the environment (platform, working directory, BLAS libraries and threads), and for a resumed fit
the checkpoints it continued, with who wrote them."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from click.testing import CliRunner

from conftest import binary_problem, csv_text
from slangcli.cli import main
from slangcli.data.sources import DataOptions
from slangcli.errors import Interrupted
from slangcli.runfile.io import read_run, write_run
from slangcli.runfile.provenance import versions
from slangcli.training.checkpoints import Checkpointing
from slangcli.training.fitting import fit, resume


@pytest.fixture
def data_csv(write_file):
    return write_file("data.csv", csv_text(*binary_problem(n=60, seed=3)))


def test_a_run_records_its_environment_and_the_versions_of_its_packages(data_csv, tmp_path, monkeypatch):
    """The command's relative paths are relative to a working directory the run did not record, and the BLAS
    library and threads that a fit's last bits depend on were not recorded either."""
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(main, ["fit", "data.csv", "-o", "run.h5", "--epochs", "1"])
    assert done.exit_code == 0, done.output
    run = read_run(tmp_path / "run.h5")
    environment = run.meta["environment"]
    assert environment["cwd"] == str(tmp_path) and run.command[2] == "data.csv"
    assert environment["platform"] and environment["machine"] and environment["cpu_count"] >= 1
    assert environment["blas"] and all(isinstance(lib["num_threads"], int) and lib["internal_api"]
                                       for lib in environment["blas"])
    assert {"slang", "python", "numpy", "scipy", "h5py", "click", "rich", "threadpoolctl"} <= set(run.meta["versions"])
    assert "resumed" not in run.meta


def _checkpoint(data_csv):
    written, steps = [], []
    with pytest.raises(Interrupted):
        fit(DataOptions(path=str(data_csv)), method="slang", hyper={"samples": 2, "rank": 2}, epochs=4, seed=1,
            eval_samples=10, checkpointing=Checkpointing(write=written.append,
                                                         stop=lambda: steps.append(1) or len(steps) > 5))
    return written[-1]


def test_a_resumed_fit_records_the_checkpoint_it_continued(data_csv, tmp_path):
    """A fit resumed under other versions recorded only the newer ones, and nothing said it was resumed."""
    checkpoint = _checkpoint(data_csv)
    path = tmp_path / "ck.h5"
    write_run(path, checkpoint)
    said = []
    done = resume(read_run(path), str(path), notify=said.append)
    assert said == []  # the same versions: nothing to warn of
    (record,) = done.meta["resumed"]
    assert record == {"step": 5, "slang_version": checkpoint.meta["slang_version"],
                      "versions": checkpoint.meta["versions"], "created": checkpoint.meta["created"]}
    write_run(tmp_path / "done.h5", done)
    assert read_run(tmp_path / "done.h5").meta["resumed"] == [record]
    inspected = CliRunner().invoke(main, ["inspect", str(tmp_path / "done.h5")])
    assert (f"resumed    at step 5, from a checkpoint slang {record['slang_version']} wrote ({record['created']})"
            in inspected.stderr.splitlines())


def test_a_checkpoint_of_other_versions_is_resumed_with_a_warning(data_csv, tmp_path):
    checkpoint = _checkpoint(data_csv)
    older = dict(checkpoint.meta["versions"], numpy="1.0.0")
    path = tmp_path / "ck.h5"
    write_run(path, replace(checkpoint, meta=dict(checkpoint.meta, versions=older)))
    said = []
    done = resume(read_run(path), str(path), notify=said.append)
    assert said == [f"warning: {path} was written by other versions than these (numpy 1.0.0 -> "
                    f"{versions()['numpy']}): the resumed fit may differ in its last bits from one never stopped; "
                    "the run records both (/ attribute 'resumed')"]
    assert done.meta["resumed"][0]["versions"]["numpy"] == "1.0.0"
    assert done.meta["versions"]["numpy"] == versions()["numpy"]


@pytest.mark.parametrize("key,value", [("seed", None), ("seed", -3), ("seed", 1.5), ("eval_samples", "abc"),
                                       ("eval_samples", 0)])
def test_a_damaged_seed_or_sample_count_is_a_format_error(data_csv, tmp_path, key, value):
    """evaluate and predict default to the fit's seed and samples: a damaged one gave a traceback (TypeError,
    ValueError from NumPy) or was used rounded (1.5 as 1)."""
    import json

    import h5py

    from slangcli.errors import FormatError

    path = tmp_path / "run.h5"
    done = CliRunner().invoke(main, ["fit", str(data_csv), "-o", str(path), "--epochs", "1"])
    assert done.exit_code == 0, done.output
    with h5py.File(path, "r+") as f:
        config = json.loads(f.attrs["config"])
        config[key] = value
        f.attrs["config"] = json.dumps(config)
    with pytest.raises(FormatError, match=f"/ attribute 'config' '{key}' must be a whole number"):
        read_run(path)


def test_inspect_prints_the_files_strings_as_text_not_markup(data_csv, tmp_path):
    """A run's strings were printed as rich markup: "[/bold]" in a resume record ended inspect with a MarkupError
    traceback, and "[red]x" lost its brackets."""
    import json

    import h5py

    path = tmp_path / "run.h5"
    assert CliRunner().invoke(main, ["fit", str(data_csv), "-o", str(path), "--epochs", "1"]).exit_code == 0
    with h5py.File(path, "r+") as f:
        f.attrs["resumed"] = json.dumps([{"step": "[/bold]", "slang_version": "[red]x", "created": "[b]"}])
        f.attrs["slang_version"] = "[red]0.1"
    done = CliRunner().invoke(main, ["inspect", str(path)])
    assert done.exit_code == 0, done.output
    lines = done.stderr.splitlines()
    assert lines[0].startswith(f"{path}  (slang [red]0.1, ")
    assert "resumed    at step [/bold], from a checkpoint slang [red]x wrote ([b])" in lines


def test_the_environment_of_a_process_whose_working_directory_is_gone(monkeypatch):
    from slangcli.runfile import provenance

    def gone():
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(provenance.os, "getcwd", gone)
    assert provenance.environment()["cwd"] is None


def test_a_version_change_counts_only_what_the_arithmetic_depends_on():
    """A newer click or pandas warned that a resumed fit "may differ in its last bits"; a newer BLAS did not."""
    from slangcli.runfile.provenance import environment, version_change

    now = {"versions": versions(), "environment": environment()}
    assert version_change(now) is None
    assert version_change(dict(now, versions=dict(now["versions"], click="0.1", pandas="0.1"))) is None
    assert version_change(dict(now, versions=dict(now["versions"], scipy="0.1"))).startswith("scipy 0.1 -> ")
    if now["environment"]["blas"]:
        older = [dict(lib, version="0.0.1") for lib in now["environment"]["blas"]]
        said = version_change(dict(now, environment=dict(now["environment"], blas=older)))
        assert said.startswith("BLAS ") and "0.0.1 -> " in said
