"""``slang sweep`` on a real ``distributed.LocalCluster`` of worker processes: the grid, the run files and table
against serial fits, reruns, sweeps of other grids in the same directory, a worker killed mid-fit, an interrupted
or terminated sweep, a bad data file, an output directory or a scheduler that cannot be used, and no dask."""

from __future__ import annotations

import csv
import errno
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from conftest import binary_problem, csv_text, local_cluster

import slangcli
from slangcli.cli import main
from slangcli.sweep import make_point, make_task, points_of, read_spec, run_fit, run_sweep, write_results

distributed = pytest.importorskip("distributed")

FIT = ["--epochs", "2", "--test-fraction", "0.25", "--batch-size", "8"]


@pytest.fixture(scope="module")
def cluster():
    """Two worker processes, one thread each, shared by the tests that do not kill workers."""
    with local_cluster(OPENBLAS_NUM_THREADS="1") as c:
        yield c


@pytest.fixture
def data(tmp_path):
    """Two small CSV files and one that cannot be read."""
    (tmp_path / "a.csv").write_text(csv_text(*binary_problem(seed=0)))
    (tmp_path / "b.csv").write_text(csv_text(*binary_problem(n=50, seed=1)))
    (tmp_path / "bad.csv").write_text("a,b,label\n1,2,yes\n3,oops,no\n")
    return tmp_path


def sweep(args, cluster=None):
    """``slang sweep ARGS --json`` in-process: (exit code, JSON summary, stderr)."""
    extra = ["--scheduler", cluster.scheduler_address] if cluster is not None else []
    result = CliRunner().invoke(main, ["sweep", *args, *extra, "--json"])
    summary = json.loads(result.stdout) if result.stdout.strip() else None
    # (shown by pytest when the test fails: why each fit failed, expected or not)
    print(f"slang sweep {' '.join(args)}: exit code {result.exit_code}\n{result.stderr}")
    return result.exit_code, summary, result.stderr


def posterior_arrays(path) -> dict:
    with h5py.File(path, "r") as f:
        # everything but the timings
        return {f"{g}/{k}": f[g][k][()] for g in ("posterior", "history") for k in f[g] if k != "seconds"}


# What two run files of the same fit may differ in, and nothing else: how long the fit took, when the file was
# written, and where (the output path in the recorded command). Keys as run_file_contents names them. (The worker
# that ran a fit is in the results table, not the run file; timeless() leaves it out there.)
LEFT_OUT = {
    "history/seconds": "seconds since the start at each epoch's end",
    "metrics@metrics.fit_seconds": "the fit's own clock",
    "@created": "the time the file was written",
    "@command[-o]": "the output path in the recorded command",
    "@environment.cwd": "the working directory of the process that wrote it (a worker's)",
    "@environment.blas": "the BLAS libraries' threads in that process",
}


def left_out() -> list[str]:
    """What :func:`run_file_contents` leaves out of a run file, with why."""
    return [f"{key}: {why}" for key, why in LEFT_OUT.items()]


def _flatten(prefix, value, out):
    """A JSON value into ``out``: objects by dotted keys under ``prefix``, anything else as it is."""
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}", v, out)
    else:
        out[prefix] = value


def run_file_contents(path) -> tuple[dict, set]:
    """Every dataset and attribute of the run file at ``path``, as ``{key: value}``, and the :data:`LEFT_OUT` keys
    it had. Datasets by their path (``posterior/U``); attributes as ``OBJECT@NAME`` (``@status`` on the file,
    ``model@sizes``); JSON attributes parsed and flattened (``metrics@metrics.test.nll``); the recorded command
    without its output path (kept as ``@command[-o]``)."""
    out = {}
    with h5py.File(path, "r") as f:
        def attributes(name, obj):
            for key, value in obj.attrs.items():
                where = f"{name}@{key}"
                if isinstance(value, str) and value.startswith(("[", "{")):
                    value = json.loads(value)
                if where == "@command":
                    at = value.index("-o")
                    out["@command[-o]"] = value[at + 1]
                    value = [*value[:at + 1], "OUT", *value[at + 2:]]
                _flatten(where, value, out)

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                out[name] = obj[()]
            attributes(name, obj)

        attributes("", f)
        f.visititems(visit)
    present = {key for key in LEFT_OUT if key in out}
    return {k: v for k, v in out.items() if k not in LEFT_OUT}, present


def assert_same_run(got_path, expected_path) -> None:
    """Two run files hold the same datasets and attributes with the same values (and dtypes), but for LEFT_OUT."""
    got, got_left = run_file_contents(got_path)
    expected, expected_left = run_file_contents(expected_path)
    # (each left-out item is really there: the list names what the files hold, not what they once held)
    assert got_left == expected_left == set(LEFT_OUT), left_out()
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        assert type(got[key]) is type(value), key
        if isinstance(value, np.ndarray):
            assert got[key].dtype == value.dtype and got[key].shape == value.shape, key
        if key in ROUNDED:
            np.testing.assert_allclose(got[key], value, rtol=1e-13, atol=0, err_msg=f"{got_path} {key}")
            continue
        np.testing.assert_equal(got[key], value, err_msg=f"{got_path} {key} (left out: {left_out()})")


# What may differ in its last bits between a fit and the same fit resumed in another process, and nothing else: the
# KL divergence to the prior recorded at each epoch's end is a diagnostic recomputed from the state (the state and
# the posterior are compared bit for bit), and NumPy's sums of its D terms can round differently when the arrays
# sit at other memory alignments, the likely cause of what was seen once with the oldest supported versions: one
# epoch's value 1 unit in the last place apart.
ROUNDED = {"history/kl"}


def timeless(csv_path) -> list[str]:
    """The table's lines without its seconds and worker columns."""
    lines = [line.split(",") for line in Path(csv_path).read_text().splitlines()]
    drop = {lines[0].index("seconds"), lines[0].index("worker")}
    return [",".join(v for j, v in enumerate(line) if j not in drop) for line in lines]


def status(path):
    try:
        with h5py.File(path, "r") as f:
            return f.attrs["status"]
    except OSError:  # replaced while being opened
        return None


def no_temporaries(directory) -> bool:
    return not [p for p in Path(directory).iterdir() if p.name.endswith(".tmp") or p.name.startswith(".")]


# --------------------------------------------------------------------------------------------------- the grid


def test_grid_lists_ranges_and_repeats(data):
    a, b = str(data / "a.csv"), str(data / "b.csv")
    points = points_of([{"data": [a, b], "method": ["slang,bbb"], "seed": ["0-2"], "hidden": ["5", "4,4"]}])
    assert len(points) == 2 * 2 * 3 * 2 and len({p.name for p in points}) == len(points)
    p = points[6 + 3 + 1]  # hidden, method, seed: the last varies fastest
    assert p.params == {"data": a, "hidden": "4,4", "method": "bbb", "seed": "1"}
    assert p.args == [a, "--hidden", "4,4", "--method", "bbb", "--seed", "1"]
    # the name is the parameters' (readable) and does not depend on the order they were given in
    assert p.name.startswith("a_hidden-4-4_method-bbb_seed-1_") and p.name.endswith(".h5")
    assert make_point({"seed": "1", "method": "bbb", "hidden": "4,4", "data": a}).name == p.name
    # an option at slang fit's default is the fit without it: same arguments, same run file (the seed here; a
    # network's default method is ivon, so --method slang stays)
    assert points[0].params == {"data": a, "hidden": "5", "method": "slang", "seed": "0"}
    assert points[0].args == [a, "--hidden", "5", "--method", "slang"]
    assert points[0].name == make_point({"data": a, "hidden": "5", "method": "slang"}).name
    floats = points_of([{"data": [a], "prior-precision": ["1e-5,0.5"], "standardize": [True, False]}])
    # (options vary in slang fit's order of options, the last fastest)
    assert [q.params["prior-precision"] for q in floats] == ["1e-05", "0.5", "1e-05", "0.5"]
    assert floats[2].args == [a, "--no-standardize", "--prior-precision", "1e-05"]


def test_a_methods_own_hyperparameter_goes_only_to_the_methods_that_take_it(data, tmp_path):
    """The README's sweep, --method slang,bbb --rank 1,2,4,8, failed every BBB fit ("--rank does not apply to
    --method bbb") and exited 1, where --dry-run had listed them as to do. The rank now goes to the SLANG fits only,
    BBB's are made once per other setting, and stderr says so; a hyperparameter no method of the grid takes is a
    usage error, before anything runs."""
    a = str(data / "a.csv")
    points = points_of([{"data": [a], "method": ["slang,bbb"], "rank": ["1,2"], "seed": ["0-1"]}])
    assert [(p.params["method"], p.params.get("rank"), p.params.get("seed")) for p in points] == [
        ("slang", "1", "0"), ("slang", "1", "1"), ("slang", "2", "0"), ("slang", "2", "1"), ("bbb", None, "0"),
        ("bbb", None, "1")]
    code, listed, err = sweep([a, "--method", "slang,bbb", "--rank", "1,2", "-o", str(tmp_path / "out"),
                               "--dry-run"])
    assert code == 0 and "slang: --rank applies to slang only: the bbb fits are made without it" in err, err
    assert err.count("todo") == 3
    # (numbers as JSON numbers, as in results.json)
    assert [(f["method"], f.get("rank"), f["complete"]) for f in listed["fits"]] == [
        ("slang", 1, False), ("slang", 2, False), ("bbb", None, False)]
    # without --method the fit decides, and says so if it does not take the option (as slang fit does)
    assert [p.params.get("rank") for p in points_of([{"data": [a], "rank": ["1,2"]}])] == ["1", "2"]
    code, _, err = sweep([a, "--method", "bbb,mf-ef", "--rank", "1,2", "-o", str(tmp_path / "out"), "--dry-run"])
    assert code == 2 and "--rank applies to none of the grid's methods (bbb, mf-ef)" in err
    assert not (tmp_path / "out").exists()


def test_a_fit_whose_data_file_changed_is_not_complete(data, tmp_path):
    """A sweep run again after its data file changed found its fits complete by their options alone, refitted
    nothing and tabled fits of data that no longer existed (train_n 600 of a 300-row file). The run file records
    the data's sha256, as slang fit --resume checks it: a changed file makes the fit one to run again."""
    from slangcli.sweep import is_complete

    csv = tmp_path / "d.csv"
    shutil.copy(data / "a.csv", csv)
    point = points_of([{"data": [str(csv)], "epochs": ["2"]}])[0]
    path = str(tmp_path / "out" / point.name)
    (tmp_path / "out").mkdir()
    assert run_fit(make_task(point, path))["status"] == "complete" and is_complete(path, point.args)
    rows = csv.read_text().splitlines(keepends=True)
    csv.write_text("".join(rows[: len(rows) // 2]))
    assert not is_complete(path, point.args)
    record = run_fit(make_task(point, path))
    assert record["status"] == "complete" and record["train_n"] == len(rows) // 2 - 1
    assert is_complete(path, point.args)
    csv.unlink()  # a data file gone: nothing says the fit is of data that is there
    assert not is_complete(path, point.args)


def test_a_run_another_version_of_slang_wrote_is_not_complete(data, tmp_path):
    """A sweep run again by another version of slang (other defaults) counted the fits of the older version as done
    and tabled the two versions' fits together; such a run is fitted again."""
    from slangcli.sweep import is_complete

    point = points_of([{"data": [str(data / "a.csv")], "epochs": ["2"]}])[0]
    path = str(tmp_path / point.name)
    assert run_fit(make_task(point, path))["status"] == "complete" and is_complete(path, point.args)
    from slangcli.sweep.results import other_fits

    assert list(other_fits(tmp_path, set(), {})) == [point.name]
    with h5py.File(path, "r+") as f:
        f.attrs["slang_version"] = "0.0.1"
    assert not is_complete(path, point.args)
    assert other_fits(tmp_path, set(), {}) == {}  # (nor tabled beside this version's fits)
    assert run_fit(make_task(point, path))["status"] == "complete" and is_complete(path, point.args)
    with h5py.File(path, "r") as f:
        assert f.attrs["slang_version"] == slangcli.__version__


def test_the_json_table_holds_numbers_as_numbers(tmp_path):
    """results.json gives a number option's value as a JSON number and a precision's word, a network and a text as
    written, a metric that is not finite as null; results.csv writes each as the command line does."""
    record = {"name": "a.h5", "data": "a.csv", "epochs": "20", "prior-precision": "auto", "noise-precision": "0.5",
              "rank": "2", "hidden": "50,50", "method": "slang", "status": "complete", "error": "", "exit_code": 0,
              "seconds": 1.5, "worker": "w", "resumed_at_step": None, "test_nll": float("nan"), "steps": 40}
    write_results(tmp_path, [record, {**record, "name": "b.h5", "prior-precision": "0.1"}])
    rows = json.loads((tmp_path / "results.json").read_text())
    assert rows[0] == {**record, "epochs": 20, "noise-precision": 0.5, "rank": 2, "test_nll": None}
    assert rows[1]["prior-precision"] == 0.1
    table = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert [r["prior-precision"] for r in table] == ["auto", "0.1"] and table[0]["epochs"] == "20"
    assert table[0]["hidden"] == "50,50" and table[0]["noise-precision"] == "0.5"
    # a value that is not finite (--lr inf fails its fit) or, in an older table, no number stays as written: JSON
    # has no infinity, and the table was not written at all
    write_results(tmp_path, [{**record, "lr": "inf", "epochs": "one", "prior-precision": "nan"}])
    [row] = json.loads((tmp_path / "results.json").read_text())
    assert (row["lr"], row["epochs"], row["prior-precision"]) == ("inf", "one", "nan")


def test_spec_files_json_and_toml(data, tmp_path):
    a = str(data / "a.csv")
    (tmp_path / "s.toml").write_text(f'[[grid]]\ndata = "{a}"\nmethod = "slang"\nrank = [1, 2]\n\n'
                                     f'[[grid]]\ndata = "{a}"\nmethod = "bbb"\nuci_split = 0\n')
    toml = read_spec(tmp_path / "s.toml")
    assert toml == [{"data": a, "method": "slang", "rank": [1, 2]}, {"data": a, "method": "bbb", "uci-split": 0}]
    (tmp_path / "s.json").write_text(json.dumps(toml))
    assert read_spec(tmp_path / "s.json") == toml
    assert [p.params.get("rank") for p in points_of(toml)] == ["1", "2", None]


# Run-file names of grids as earlier versions of slang sweep gave them: a directory of finished fits must still be
# recognised as complete. Each grid exercises other kinds of option: lists and ranges, switches, precisions
# ("auto", numbers written as floats, the default left out), data options (a relative name made absolute, the
# delimiter's and target's texts), a method's own options, --checkpoint-every, long names cut at 120 characters.
EARLIER_NAMES = [
    ({"data": ["/data/a.csv", "/data/uci/wine-quality-red/"], "method": ["slang,bbb"], "seed": ["0-1"],
      "hidden": ["4,4"]},
     ["a_hidden-4-4_method-slang_27f5b460.h5", "a_hidden-4-4_method-slang_seed-1_b4b167c7.h5",
      "a_hidden-4-4_method-bbb_63539110.h5", "a_hidden-4-4_method-bbb_seed-1_9140a752.h5",
      "wine-quality-red_hidden-4-4_method-slang_dfacbc1e.h5",
      "wine-quality-red_hidden-4-4_method-slang_seed-1_4f61721f.h5",
      "wine-quality-red_hidden-4-4_method-bbb_0902d547.h5",
      "wine-quality-red_hidden-4-4_method-bbb_seed-1_7129dae7.h5"]),
    ({"data": "/data/a.csv", "standardize": [True, False], "prior-precision": ["1e-5,auto,1"],
      "noise-precision": "2", "bias-prior-precision": "1e-05"},
     ["a_standardize-True_prior-precision-1e-05_noise-precision-2.0_eea94046.h5",
      "a_standardize-True_prior-precision-auto_noise-precision-2.0_6c748386.h5",
      "a_standardize-True_noise-precision-2.0_49b08e8b.h5",
      "a_standardize-False_prior-precision-1e-05_noise-precision-2.0_70738cf9.h5",
      "a_standardize-False_prior-precision-auto_noise-precision-2.0_4b40839a.h5",
      "a_standardize-False_noise-precision-2.0_10fa5575.h5"]),
    ({"data": "/data/b.txt", "format": "csv", "target": "#3", "delimiter": "tab", "header": False, "columns": "a,b",
      "na-values": "NA,?", "missing": "drop", "test": "/data/b_test.txt", "split-seed": ["0", "7"]},
     ["b_format-csv_target-3_delimiter-tab_header-False_columns-a-b_na-values-NA_missing-drop_test-data-b-test.txt_"
      "fac75126.h5",
      "b_format-csv_target-3_delimiter-tab_header-False_columns-a-b_na-values-NA_missing-drop_test-data-b-test.txt_"
      "split-seed-7_345a952c.h5"]),
    ({"data": "/data/c.csv", "test-fraction": 0.25, "likelihood": "gaussian", "samples": 3, "lr": "0.01",
      "rank": [1, 2], "batch-size": 8, "epochs": 2, "eval-samples": [1000, 20], "checkpoint-every": 100},
     ["c_test-fraction-0.25_likelihood-gaussian_samples-3_lr-0.01_rank-1_batch-size-8_epochs-2_checkpoint-every-100_"
      "b4f33876.h5",
      "c_test-fraction-0.25_likelihood-gaussian_samples-3_lr-0.01_rank-1_batch-size-8_epochs-2_eval-samples-20_"
      "checkpoint-every_76bc98a5.h5",
      "c_test-fraction-0.25_likelihood-gaussian_samples-3_lr-0.01_rank-2_batch-size-8_epochs-2_checkpoint-every-100_"
      "b18d7c02.h5",
      "c_test-fraction-0.25_likelihood-gaussian_samples-3_lr-0.01_rank-2_batch-size-8_epochs-2_eval-samples-20_"
      "checkpoint-every_a052e025.h5"]),
    ({"data": "/data/uci/boston", "uci-split": "0-1", "method": "ivon", "dtype": "float32", "iterations": 1500,
      "tune": "prior-precision,lr", "tune-folds": "3", "restarts": "2", "snr": 10, "activation": "tanh",
      "n-features": 12, "drop-columns": "x"},
     ["boston_uci-split-0_drop-columns-x_n-features-12_activation-tanh_method-ivon_dtype-float32_iterations-1500_"
      "snr-10_tune-pr_2d2422d0.h5",
      "boston_uci-split-1_drop-columns-x_n-features-12_activation-tanh_method-ivon_dtype-float32_iterations-1500_"
      "snr-10_tune-pr_7b6568a2.h5"]),
]


@pytest.mark.parametrize("grid, names", EARLIER_NAMES, ids=["lists", "precisions", "data-options", "method-options",
                                                            "uci"])
def test_run_file_names_are_those_of_earlier_versions(grid, names):
    assert [p.name for p in points_of([grid])] == names


# values a grid may give each kind of option, the accepted and the refused
TRIED = {"int": ["0", "1", "7", "007", "-1", "x", "1.5", str(2**63)],
         "float": ["0.5", "1e-5", "2", "0", "1", "-1", "inf", "nan", "auto", "x"],
         "text": ["a,b", ",", ";", "tab", "whitespace", "|", "x y"]}


def _click_reading(param, text):
    """The canonical text of ``text`` as the click option ``param`` of slang fit reads it (its type and callback),
    or None when it refuses it."""
    import click

    try:
        value = param.type.convert(text, param, None)
        if param.callback is not None:
            value = param.callback(None, param, value)
    except click.BadParameter:
        return None
    if isinstance(value, float):
        return repr(value)
    return str(value) if isinstance(param.type, click.types.IntParamType) else text


def test_the_grid_reads_slang_fits_options_as_its_command_line_does():
    """The options a grid may vary (``slangcli.sweep.parameters``, declared without click) are slang fit's click
    options but those the sweep sets itself: the same options in the same order, with the same long flag (a
    switch's negative form too) and default, and every value read as the click option reads it (the same accepted,
    in the same canonical text; the same refused), so that a sweep's fits and run-file names are the command's."""
    import click

    from slangcli.cli.sweep import fit_parameters, option_key
    from slangcli.errors import ConfigError
    from slangcli.sweep.grid import expand, parameters

    clicks, library = fit_parameters(), parameters()
    assert list(library) == [option_key(p) for p in clicks.values()]
    for (key, param), option in zip(library.items(), clicks.values()):
        assert param.flag == max(option.opts, key=len), key
        if option.is_flag:
            assert param.kind == "switch" and param.off == option.secondary_opts[-1], key
            continue
        assert param.listable == isinstance(option.type, (click.types.IntParamType, click.types.FloatParamType,
                                                          click.Choice)), key
        assert (param.kind == "path") == isinstance(option.type, click.Path), key
        assert (param.default is None) == (option.default is None), key
        if option.default is not None:
            assert expand(param, param.default) == [_click_reading(option, option.default)], key
        tried = {"int": TRIED["int"], "float": TRIED["float"], "precision": TRIED["float"],
                 "choice": [*option.type.choices, "nope"] if isinstance(option.type, click.Choice) else []}
        for text in tried.get(param.kind, TRIED["text"]):
            try:
                got = expand(param, text)
            except ConfigError:
                got = None
            expected = _click_reading(option, text)
            assert got == (None if expected is None else [expected]), (key, text)


@pytest.mark.parametrize("args, message", [
    (["--rank", "1,x"], "--rank"),
    (["--method", "slang,nope"], "--method"),
    (["--seed", "5-2"], "empty range"),
    (["--delimiter", "|"], "--delimiter: '|' is not one of"),
])
def test_bad_grid_is_a_usage_error(data, tmp_path, args, message):
    code, _, err = sweep([str(data / "a.csv"), *args, "-o", str(tmp_path / "out"), "--dry-run"])
    assert code == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_without_dask_says_how_to_install_it(data, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed raises ImportError
    code, _, err = sweep([str(data / "a.csv"), "-o", str(tmp_path / "out")])
    # exit 3, as slang plot without matplotlib (it exited 2, a usage error's code)
    assert code == 3 and "pip install 'slangcli[dask]'" in err and len(err.strip().splitlines()) == 1
    # and one fit's restarts on a cluster, in the same words
    result = CliRunner().invoke(main, ["fit", str(data / "a.csv"), "--restarts", "2", "--scheduler",
                                       "tcp://127.0.0.1:1", "-o", str(tmp_path / "r.h5")])
    assert result.exit_code == 3 and "pip install 'slangcli[dask]'" in result.stderr, result.stderr
    assert not (tmp_path / "r.h5").exists()


# --------------------------------------------------------------------------------------------------- on Dask


def test_sweep_equals_serial_fits_and_reruns_only_what_changed(cluster, data, tmp_path):
    """Run files and table equal a serial run's (every dataset and attribute of the run files, but for the timings,
    the creation time and the output path: LEFT_OUT; the table but for its seconds and worker); a bad file fails
    alone with its message; a rerun runs nothing; a changed grid runs only its new fits."""
    out, serial = tmp_path / "out", tmp_path / "serial"
    grid = [str(data / "a.csv"), str(data / "b.csv"), str(data / "bad.csv"), "--method", "slang,bbb", *FIT]
    code, summary, err = sweep([*grid, "-o", str(out)], cluster)
    assert code == 1 and summary["ran"] == 6 and summary["complete"] == 4 and summary["failed"] == 2
    assert all(f["name"].startswith("bad_") and "bad.csv:3: column 1" in f["error"]
               for f in summary["failures"])
    records = json.loads((out / "results.json").read_text())
    assert len(records) == 6 and len({r["worker"] for r in records if r["status"] == "complete"}) >= 1

    # the same fits one after another in this process
    serial.mkdir()
    points = points_of([{"data": [str(data / n) for n in ("a.csv", "b.csv", "bad.csv")],
                         "method": ["slang,bbb"], "epochs": "2", "test-fraction": "0.25", "batch-size": "8"}])
    write_results(serial, [run_fit(make_task(p, str(serial / p.name), 60.0)) for p in points])
    assert timeless(out / "results.csv") == timeless(serial / "results.csv")
    run_files = sorted(p.name for p in out.glob("*.h5"))
    assert run_files == sorted(p.name for p in serial.glob("*.h5")) and len(run_files) == 4
    for name in run_files:
        assert_same_run(out / name, serial / name)
    assert no_temporaries(out)

    # the finished sweep again (without the bad file): nothing runs, the files stay as they are
    stamps = {p.name: p.stat().st_mtime_ns for p in out.glob("*.h5")}
    grid.remove(str(data / "bad.csv"))
    code, summary, err = sweep([*grid, "-o", str(out)], cluster)
    assert code == 0 and summary["ran"] == 0 and summary["skipped"] == 4, (summary, err)
    assert stamps == {p.name: p.stat().st_mtime_ns for p in out.glob("*.h5")}
    # a changed grid: a second seed adds four fits; only those run
    code, summary, err = sweep([*grid, "--seed", "0,1", "-o", str(out)], cluster)
    assert code == 0 and summary["ran"] == 4 and summary["skipped"] == 4, (summary, err)
    assert all(p.stat().st_mtime_ns == stamps[p.name] for p in out.glob("*.h5") if p.name in stamps)
    assert len(json.loads((out / "results.json").read_text())) == 8


def test_options_that_do_not_go_together_fail_their_fits_alone(cluster, data, tmp_path):
    """A fit whose options slang fit refuses together fails without running, with slang fit's message and exit code
    2 in its row; the other fits of the grid run. A grid of such fits alone needs no cluster."""
    a, out = str(data / "a.csv"), tmp_path / "out"
    code, summary, err = sweep([a, "--method", "slang,exact-mf", "--checkpoint-every", "50", "--test-fraction",
                                "0.25", "-o", str(out)], cluster)
    assert code == 1 and summary["ran"] == 2 and summary["complete"] == 1 and summary["failed"] == 1
    rows = {r["method"]: r for r in json.loads((out / "results.json").read_text())}
    message = "--checkpoint-every does not apply to --method exact-mf: it is solved at once"
    assert rows["slang"]["status"] == "complete" and rows["exact-mf"]["status"] == "failed"
    assert rows["exact-mf"]["error"] == message and rows["exact-mf"]["exit_code"] == 2
    assert f"slang: error: {rows['exact-mf']['name']}: {message}" in err.splitlines()
    assert sorted(p.name for p in out.glob("*.h5")) == [rows["slang"]["name"]]

    with socket.socket() as s:  # a scheduler that is not there: the sweep does not connect
        s.bind(("127.0.0.1", 0))
        nowhere = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    code, summary, _ = sweep([a, "--method", "exact-mf", "--epochs", "2", "-o", str(out), "--scheduler", nowhere])
    row = json.loads((out / "results.json").read_text())[-1]
    assert code == 1 and summary["failed"] == 1 and row["exit_code"] == 2
    assert row["error"] == ("--epochs does not apply to --method exact-mf: it is solved on the whole training set, "
                            "not trained in steps")


def test_a_run_file_of_a_sweep_is_the_one_its_recorded_command_makes(tmp_path):
    """The command a sweep's run file records is a ``slang fit`` command line that makes the same run file (but
    for its timings, its time and its output path): the sweep reads its data and fit options as slang fit does."""
    path = tmp_path / "semi.txt"
    X, labels = binary_problem(n=60, seed=3)
    rows = [f"{k};{x[0]:.6f};{'yes' if t else 'no'};{x[1]:.6f};{'?' if k == 7 else f'{x[2]:.6f}'}"
            for k, (x, t) in enumerate(zip(X, labels))]
    path.write_text("id;a;label;b;c\n" + "\n".join(rows) + "\n")
    (point,) = points_of([{"data": str(path), "format": "csv", "target": "label", "delimiter": ";", "header": True,
                           "drop-columns": "id", "na-values": "?,NA", "missing": "drop", "test-fraction": "0.25",
                           "split-seed": "3", "prior-precision": "0.5", "hidden": "4", "method": "slang",
                           "rank": "1", "samples": "2", "batch-size": "8", "epochs": "2", "seed": "1",
                           "eval-samples": "20", "checkpoint-every": "3"}])
    swept = tmp_path / point.name
    record = run_fit(make_task(point, str(swept), checkpoint_seconds=30.0))
    assert record["status"] == "complete", record["error"]
    with h5py.File(swept, "r") as f:
        command = json.loads(f.attrs["command"])
    at = command.index("-o")
    assert command[:2] == ["slang", "fit"] and command[at + 1] == str(swept)
    assert command[2:at] == point.args and command[at + 2:] == ["--checkpoint-seconds", "30.0", "--no-progress"]
    again = tmp_path / "again.h5"
    done = CliRunner().invoke(main, [*command[1:at], "-o", str(again), *command[at + 2:]])
    assert done.exit_code == 0, done.output
    assert_same_run(swept, again)


LIBRARY_SWEEP = """
import json, sys
from pathlib import Path

from slangcli.sweep import make_task, points_of, run_fit, run_sweep, write_results

def command_line():
    return sorted(m for m in sys.modules if m.split(".")[0] in ("click", "rich") or m.startswith("slangcli.cli"))

def slang_command_line():
    return [m for m in command_line() if m.startswith("slangcli")]

data, out = sys.argv[1], Path(sys.argv[2])
points = points_of([{"data": data, "seed": "0,1", "epochs": "2", "batch-size": "8", "test-fraction": "0.25"}])
(out / "serial").mkdir(parents=True)
write_results(out / "serial", [run_fit(make_task(p, str(out / "serial" / p.name))) for p in points])
serial = command_line()

from slangcli.cluster import dask_client  # (distributed itself imports click)

with dask_client(workers=1) as client:
    result = run_sweep(points, out / "dask", client)
    workers = list(client.run(slang_command_line).values())
print(json.dumps({"serial": serial, "sweep": slang_command_line(),
                  "workers": workers, "status": [r["status"] for r in result.records]}))
"""


def test_the_sweep_library_runs_without_the_command_line(data, tmp_path):
    """``slangcli.sweep`` in a Python process of its own: its points, tasks, fits and table import neither click
    nor rich nor the command line (``slangcli.cli``); nor does a sweep on a local Dask cluster, in this process or
    on its worker (where Dask's own modules bring click)."""
    proc = subprocess.run([sys.executable, "-c", LIBRARY_SWEEP, str(data / "a.csv"), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert found == {"serial": [], "sweep": [], "workers": [[]], "status": ["complete", "complete"]}, found
    assert timeless(tmp_path / "out" / "serial" / "results.csv") == timeless(tmp_path / "out" / "dask" / "results.csv")


def test_worker_killed_mid_fit_is_retried_from_its_checkpoint(data, tmp_path):
    """SIGKILL the worker process running a fit: the fit is rerun elsewhere (continuing from its checkpoint),
    every fit is in the table once, complete, equal to the fit never stopped, and no temporary file is left."""
    out = tmp_path / "out"
    long_fit = {"iterations": "1500", "checkpoint-every": "100", "batch-size": "8", "test-fraction": "0.25"}
    points = points_of([{"data": [str(data / "a.csv"), str(data / "b.csv")], **long_fit}])
    with local_cluster(OPENBLAS_NUM_THREADS="1") as cluster, distributed.Client(cluster) as client:
        done = {}
        thread = threading.Thread(target=lambda: done.update(result=run_sweep(points, out, client)))
        thread.start()
        victim = killed = None
        deadline = time.monotonic() + 60
        while victim is None and time.monotonic() < deadline:
            # a worker whose fit has written its first checkpoint (and has far to go: 1500 steps)
            for worker, keys in client.processing().items():
                names = [key.rsplit("-", 1)[0] for key in keys]  # the key is NAME-TOKEN
                if names and status(out / names[0]) == "checkpoint":
                    victim, killed = worker, names[0]
            time.sleep(0.02)
        assert victim is not None
        pid = client.run(os.getpid, workers=[victim])[victim]
        os.kill(pid, signal.SIGKILL)
        thread.join(timeout=120)
    records = done["result"].records
    assert sorted(r["name"] for r in records) == sorted(p.name for p in points)
    assert all(r["status"] == "complete" for r in records), [r["error"] for r in records]
    table = json.loads((out / "results.json").read_text())
    assert sorted(r["name"] for r in table) == sorted(p.name for p in points)
    assert no_temporaries(out)
    # the killed fit continued from its checkpoint and equals the one never stopped
    resumed = {r["name"]: r["resumed_at_step"] for r in records}
    assert 0 < resumed.pop(killed) < 1500 and set(resumed.values()) == {None}
    serial = tmp_path / "serial"
    serial.mkdir()
    p = next(p for p in points if p.name == killed)
    run_fit(make_task(p, str(serial / p.name), checkpoint_seconds=0))
    got, expected = posterior_arrays(out / p.name), posterior_arrays(serial / p.name)
    for key in expected:
        if key.startswith("history/"):
            # an epoch's recorded KL and NLL are sums recomputed from the state, which the fit that ran here (the
            # test's process) and the resumed one (a worker) can round differently in the last bit: 1 of 375 KL
            # entries differed by 5.6e-17, in 1 of 8 runs, before and after the run-file reader's change
            np.testing.assert_allclose(got[key], expected[key], rtol=1e-13, atol=0, err_msg=f"{p.name} {key}")
        else:
            np.testing.assert_array_equal(got[key], expected[key], err_msg=f"{p.name} {key}")


def test_interrupted_sweep_continues_with_the_missing_fits(cluster, data, tmp_path):
    """Ctrl-C (SIGINT) of the client: exit 130, the finished fits in the table; the same command again runs
    only the fits that were not finished."""
    out = tmp_path / "out"
    grid = [str(data / "a.csv"), "--seed", "0-3", "--iterations", "1500", "--batch-size", "8", "--test-fraction",
            "0.25", "-o", str(out)]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    # SIGINT restored to its default in the child: a test run started in the background of a non-interactive shell
    # inherits it ignored, and the sweep would never see the Ctrl-C this test sends
    proc = subprocess.Popen([sys.executable, "-m", "slangcli", "sweep", *grid, "--workers", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not (out / "results.json").exists():
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err
    tabled = [r["name"] for r in json.loads((out / "results.json").read_text()) if r["status"] == "complete"]
    # (a fit that finished while the client stopped is in the table too: it is rewritten once the workers are gone)
    finished = [p.name for p in out.glob("*.h5") if status(p) == "complete"]
    assert 1 <= len(finished) < 4 and sorted(tabled) == sorted(finished)
    stamps = {name: (out / name).stat().st_mtime_ns for name in finished}
    code, summary, _ = sweep(grid, cluster)
    assert code == 0 and summary["skipped"] == len(finished) and summary["ran"] == 4 - len(finished)
    assert stamps == {name: (out / name).stat().st_mtime_ns for name in finished}
    assert len(json.loads((out / "results.json").read_text())) == 4 and no_temporaries(out)


def start_sweep(args) -> subprocess.Popen:
    """``slang sweep ARGS`` as a command of its own at a terminal: a process group of its own (a shell's job),
    SIGINT at its default (a test run in the background of a non-interactive shell inherits it ignored)."""
    return subprocess.Popen([sys.executable, "-m", "slangcli", "sweep", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"), text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _job_processes(pgid: int) -> str:
    """``ps``'s lines for the processes of the process group ``pgid``: pid, parent, state, age and command."""
    listing = subprocess.run(["ps", "-eo", "pid,ppid,pgid,stat,etime,args"], capture_output=True, text=True).stdout
    lines = listing.splitlines()
    return "\n".join([lines[0], *(line for line in lines[1:] if line.split()[2] == str(pgid))])


def wait_for_table_writes(out, writes, proc, timeout=120.0) -> None:
    """Until the table has been written ``writes`` times (as many distinct modification times), the sweep running."""
    seen, deadline = set(), time.monotonic() + timeout
    while len(seen) < writes and time.monotonic() < deadline and proc.poll() is None:
        try:
            seen.add((out / "results.json").stat().st_mtime_ns)
        except FileNotFoundError:
            pass
        time.sleep(0.01)
    assert len(seen) >= writes and proc.poll() is None, "the sweep ended before it could be stopped"


@pytest.mark.parametrize("signum, to", [(signal.SIGINT, "group"), (signal.SIGTERM, "group"),
                                        (signal.SIGTERM, "driver"), (signal.SIGHUP, "group")],
                         ids=["ctrl-c", "sigterm-to-the-job", "sigterm-to-the-sweep", "sighup-to-the-job"])
def test_a_stopped_sweep_says_one_line_and_tables_every_finished_fit(data, tmp_path, signum, to):
    """A sweep on a local cluster of 2 workers, stopped by Ctrl-C at a terminal (SIGINT to every process of the
    job: the sweep and its workers), SIGTERM to the job, SIGTERM to the sweep alone, or the SIGHUP of a closed
    terminal, after its table has been rewritten: exit 128 + the signal, one line on stderr naming each table file
    once (no worker's traceback; the SIGHUP ended multiprocessing's resource tracker, whose successor printed a
    KeyError traceback for each worker's semaphore), the
    table holding exactly the fits complete on disk, no temporary file, and no process of the job left."""
    out = tmp_path / "out"
    proc = start_sweep([str(data / "a.csv"), "--seed", "0-199", *FIT, "-o", str(out), "--workers", "2"])
    try:
        wait_for_table_writes(out, 2, proc)
        if to == "group":
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:  # name what still holds the sweep's pipes open, for the failure to say
            pytest.fail(f"the stopped sweep's output stayed open for 120 s (exit code {proc.poll()}); the processes "
                        f"of its job:\n{_job_processes(proc.pid)}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 128 + signum, err
    lines = err.splitlines()
    stopped = "interrupted (SIGINT)" if signum == signal.SIGINT else f"terminated ({signal.Signals(signum).name})"
    assert len(lines) == 1 and lines[0].count("results.csv") == 1 and lines[0].count("results.json") == 1, err
    assert lines[0].startswith(f"slang: error: {stopped}; the fits done so far are in "), err
    tabled = [r["name"] for r in json.loads((out / "results.json").read_text()) if r["status"] == "complete"]
    finished = [p.name for p in out.glob("*.h5") if status(p) == "complete"]
    assert 0 < len(finished) < 200 and sorted(tabled) == sorted(finished)
    assert no_temporaries(out)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the workers (and multiprocessing's resource tracker) end with the sweep
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("processes of the stopped sweep's job are still running")


def _deaf_worker():  # (a worker process as the sweep sets it up: deaf to the signals that stop a sweep)
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    time.sleep(60)


def test_a_worker_process_left_after_the_cluster_closed_is_ended():
    """A local worker's process that outlives its cluster's orderly close (on a loaded machine a sweep stopped by
    SIGTERM exited while one did, and it held the sweep's stderr open for minutes) is ended with SIGKILL: it ignores
    the other signals. Other child processes, and the workers of another cluster, are left alone."""
    import multiprocessing

    from slangcli.cluster import WORKER_PROCESS, _kill_leftover_workers, _worker_processes

    others = _worker_processes()  # (a cluster of this test process, such as the fixture's, if one is up)
    context = multiprocessing.get_context("spawn")
    worker = context.Process(target=_deaf_worker, name=f"{WORKER_PROCESS} (from Nanny)", daemon=True)
    other = context.Process(target=time.sleep, args=(60,), name="another child", daemon=True)
    worker.start()
    other.start()
    try:
        time.sleep(1.0)  # (its signal handlers are set)
        started = time.monotonic()
        _kill_leftover_workers(others, wait=0.5)
        assert not worker.is_alive() and worker.exitcode == -signal.SIGKILL
        assert time.monotonic() - started < 5 and other.is_alive() and all(p.is_alive() for p in others)
    finally:
        for process in (worker, other):
            if process.is_alive():
                process.kill()
            process.join()


def test_the_schedulers_errors_about_cancelled_tasks_results_are_dropped():
    """A stopped sweep cancels its pending tasks; the scheduler's errors about results of tasks already forgotten
    (in either version's wording) are dropped, those about tasks it still knows, or that shut a worker down, kept."""
    from slangcli.cluster import CancelledGathers

    def record(message, *args):
        return logging.LogRecord("distributed.scheduler", logging.ERROR, __file__, 1, message, args, None)

    old = "Couldn't gather keys %s state: %s workers: %s"
    new = "Couldn't gather keys: %s"
    shut = "Shut down workers that don't have promised key: %s, %s"
    quiet = CancelledGathers()
    for dropped in (record(old, {"a-1": []}, [None], []), record(new, {"a-1": "forgotten"}),
                    record(shut, "[]", "a-1")):
        assert not quiet.filter(dropped), dropped.getMessage()
    for kept in (record(old, {"a-1": ["tcp://w:1"]}, ["memory"], ["tcp://w:1"]), record(new, {"a-1": "memory"}),
                 record(new, {"a-1": "forgotten", "b-2": "processing"}), record(shut, "['tcp://w:1']", "a-1"),
                 record("Something else: %s", "x")):
        assert quiet.filter(kept), kept.getMessage()


def sync():
    """Stands for ``distributed.utils.sync``: its callback has the same qualified name."""
    def cancel():
        pass
    return cancel


def test_the_name_error_of_a_call_interrupted_before_it_started_is_dropped():
    """A Ctrl-C that reaches a client's call before it has started made distributed 2026.8 log, through Tornado,
    a NameError of its callback ``sync.<locals>.cancel``; that record is dropped, any other error of a callback
    (another exception, or the same exception of another callback) kept."""
    import functools

    from slangcli.cluster import CancelBeforeStart

    def record(callback, exc):
        try:
            raise exc
        except Exception:
            exc_info = sys.exc_info()
        return logging.LogRecord("tornado.application", logging.ERROR, __file__, 1, "Exception in callback %r",
                                 (functools.partial(callback),), exc_info)

    def other():
        pass

    quiet = CancelBeforeStart()
    assert sync().__qualname__ == "sync.<locals>.cancel"
    assert not quiet.filter(record(sync(), NameError("future")))
    for kept in (record(sync(), ValueError("x")), record(other, NameError("future")),
                 logging.LogRecord("tornado.application", logging.ERROR, __file__, 1, "Uncaught", (), None)):
        assert quiet.filter(kept), kept.getMessage()


def test_the_local_clusters_workers_leave_the_stopping_signals_to_the_sweep(cluster):
    """The workers of a sweep's local cluster (as conftest.local_cluster starts them, with the same set-up) ignore
    SIGINT, SIGTERM and SIGHUP, and drop the error Dask logs for a heartbeat cut short by the worker's own closing,
    and only that."""
    from distributed.core import Status

    from slangcli.cluster_worker import ClosingHeartbeat

    def setup():
        return (tuple(signal.getsignal(s) == signal.SIG_IGN for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)),
                tuple(type(f).__name__ for f in logging.getLogger("distributed.worker").filters))

    with distributed.Client(cluster) as client:
        assert set(client.run(setup).values()) == {((True, True, True), ("ClosingHeartbeat",))}
    worker = type("Worker", (), {"status": Status.running})()
    cut_short, other = (logging.LogRecord("distributed.worker", logging.ERROR, __file__, 1, message, None, None)
                        for message in ("Failed to communicate with scheduler during heartbeat.",
                                        "Unexpected exception during heartbeat. Closing worker."))
    quiet = ClosingHeartbeat(worker)
    assert quiet.filter(cut_short) and quiet.filter(other)
    for closing in (Status.closing, Status.closing_gracefully, Status.closed):
        worker.status = closing
        assert not quiet.filter(cut_short) and quiet.filter(other)


# ------------------------------------------------------------------------------------------ what DIR holds


def test_a_sweep_of_another_grid_keeps_the_fits_already_in_the_directory(cluster, data, tmp_path):
    """Every complete fit in DIR stays in the table: a sweep of another grid (another seed, then another option,
    so another column) adds its rows after the earlier ones, which keep theirs, and says so; a failed fit of an
    earlier grid (no run file) is not kept; a lost table is rebuilt from the run files and the commands they
    record."""
    out, a = tmp_path / "out", str(data / "a.csv")
    code, summary, err = sweep([a, str(data / "bad.csv"), "--seed", "0,1", *FIT, "-o", str(out)], cluster)
    assert code == 1 and summary["complete"] == 2 and summary["failed"] == 2, (summary, err)
    complete = [r for r in json.loads((out / "results.json").read_text()) if r["status"] == "complete"]

    code, summary, err = sweep([a, "--seed", "2", *FIT, "-o", str(out)], cluster)
    table = json.loads((out / "results.json").read_text())
    assert code == 0 and table[:2] == complete and [r["seed"] for r in table] == [0, 1, 2]
    assert summary["ran"] == 1 and summary["kept"] == 2
    assert f"slang: the table keeps the 2 complete fits of other grids in {out}" in err.splitlines()

    code, summary, _ = sweep([a, "--method", "bbb", *FIT, "-o", str(out)], cluster)
    table = json.loads((out / "results.json").read_text())
    assert code == 0 and len(table) == 4 and summary["ran"] == 1 and summary["kept"] == 3
    assert "method" not in table[0] and "seed" not in table[3]  # each record as its own grid named it
    # one CSV column per option, empty where a fit did not set it (it had slang fit's default)
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [(r["seed"], r["method"]) for r in rows] == [("0", ""), ("1", ""), ("2", ""), ("", "bbb")]
    assert [r["name"] for r in rows] == [r["name"] for r in table]
    assert {r["name"] for r in rows} == {p.name for p in out.glob("*.h5")}
    assert all(r["status"] == "complete" and float(r["test_nll"]) > 0 for r in rows)

    # the table lost: rebuilt, this grid's fit first, then the others by name, their parameters from their commands
    (out / "results.csv").unlink()
    (out / "results.json").unlink()
    code, summary, _ = sweep([a, "--seed", "2", *FIT, "-o", str(out)], cluster)
    assert code == 0 and summary["ran"] == 0 and summary["kept"] == 3
    rebuilt = {r["name"]: r for r in json.loads((out / "results.json").read_text())}
    assert list(rebuilt) == [table[2]["name"], *sorted(r["name"] for r in table if r is not table[2])]
    given = {"data": a, "epochs": 2, "test-fraction": 0.25, "batch-size": 8}
    # (seed 0 is slang fit's default: not in the command, so not a parameter of the rebuilt row)
    assert [{k: rebuilt[r["name"]].get(k) for k in ("seed", "method")} for r in table] == [
        {"seed": None, "method": None}, {"seed": 1, "method": None}, {"seed": 2, "method": None},
        {"seed": None, "method": "bbb"}]
    for earlier in table:
        r = rebuilt[earlier["name"]]
        assert {k: r[k] for k in given} == given and r["status"] == "complete"
        assert {k: v for k, v in r.items() if k.startswith(("train_", "test_"))} == {
            k: v for k, v in earlier.items() if k.startswith(("train_", "test_"))}


# ------------------------------------------------------------------------------ what cannot be used


def test_an_output_directory_that_cannot_be_made_is_a_usage_error(cluster, data, tmp_path, monkeypatch):
    """-o beneath a file, or where the system refuses to make the directory although the permission bits allow it
    (root squashed on NFS, an access control list; permission bits do not stop root): exit 2, one line naming the
    directory, nothing made."""
    a = str(data / "a.csv")
    (tmp_path / "file").write_text("mine\n")
    code, _, err = sweep([a, *FIT, "-o", str(tmp_path / "file" / "out")], cluster)
    assert code == 2 and err.splitlines() == [
        f"slang: error: cannot create the directory {tmp_path / 'file' / 'out'}: {tmp_path / 'file'} is not a "
        "directory"]
    assert (tmp_path / "file").read_text() == "mine\n"

    refused = tmp_path / "refused"
    refused.mkdir()
    make = os.mkdir

    def mkdir(path, *args, **kwargs):
        if os.fspath(path).startswith(str(refused)):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
        return make(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    code, _, err = sweep([a, *FIT, "-o", str(refused / "out")], cluster)
    assert code == 2 and err.splitlines() == [
        f"slang: error: cannot create the directory {refused / 'out'}: {os.strerror(errno.EACCES)}"]
    assert list(refused.iterdir()) == []


def test_a_directory_the_user_cannot_write_is_a_usage_error(data, tmp_path):
    """-o in a directory without write permission: exit 2 and one line before any cluster starts (skipped where
    permission bits do not stop this user: root)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        if os.access(ro, os.W_OK):  # root: permission bits bind it only without CAP_DAC_OVERRIDE
            if os.geteuid() != 0 or shutil.which("setpriv") is None:
                pytest.skip("this user writes in a directory without write permission")
            proc = subprocess.run(["setpriv", "--bounding-set=-dac_override,-dac_read_search", sys.executable, "-m",
                                   "slangcli", "sweep", str(data / "a.csv"), *FIT, "-o", str(ro / "out"), "--json"],
                                  capture_output=True, text=True, timeout=120)
            code, err = proc.returncode, proc.stderr
        else:
            code, _, err = sweep([str(data / "a.csv"), *FIT, "-o", str(ro / "out")])
        assert code == 2 and err.splitlines() == [
            f"slang: error: cannot create the directory {ro / 'out'}: {ro} is not writable"], err
        assert list(ro.iterdir()) == []
    finally:
        ro.chmod(0o755)


@pytest.mark.parametrize("input_is", ["data", "linked data", "spec", "uci folder"])
def test_a_sweep_never_writes_its_table_over_a_file_it_reads(data, tmp_path, input_is):
    """A data file named results.csv in DIR (or linked there), or a spec named results.json, became the results
    table: the data were lost, and a second fit read the table. Refused before any cluster starts, exit 2, the
    files untouched; the library's run_sweep refuses it too."""
    from slangcli.runfile.outputs import UnusableOutput
    from slangcli.sweep import points_of, run_sweep

    out = tmp_path / "out"
    out.mkdir()
    original = (data / "a.csv").read_bytes()
    args = [str(out / "results.csv"), *FIT]
    if input_is == "data":
        (out / "results.csv").write_bytes(original)
    elif input_is == "linked data":
        (out / "results.csv").symlink_to(data / "a.csv")
        args[0] = str(data / "a.csv")
    elif input_is == "uci folder":  # (a file of a folder given as DATA)
        from conftest import gal_folder

        X = np.random.default_rng(0).standard_normal((40, 3))
        folder = gal_folder(tmp_path / "toy", X, X[:, 0], 30)
        (out / "results.csv").symlink_to(folder / "data.txt")
        args = [str(folder), "--uci-split", "0", "--epochs", "2"]
    else:
        (out / "results.json").write_text('[{"epochs": [2]}]')
        args = [str(data / "a.csv"), "--spec", str(out / "results.json")]
    named = "results.json" if input_is == "spec" else "results.csv"
    code, _, err = sweep([*args, "-o", str(out)])
    linked = {"linked data": f" ({data / 'a.csv'})", "uci folder": f" ({tmp_path / 'toy' / 'data.txt'})"}.get(
        input_is, "")
    assert code == 2 and err.splitlines() == [
        f"slang: error: {out / named} is an input file{linked}; refusing to overwrite it: give the sweep another "
        "directory"], err
    assert sorted(p.name for p in out.iterdir()) == [named]
    assert (data / "a.csv").read_bytes() == original
    if input_is in ("data", "linked data"):
        assert (out / "results.csv").read_bytes() == original
        with pytest.raises(UnusableOutput, match="is an input file"):
            run_sweep(points_of([{"data": [args[0]], "epochs": [2]}]), out, lambda: None)


def tree(path) -> dict | None:
    """What a directory holds, and when it was last changed: None when it does not exist."""
    if not path.exists():
        return None
    return {"": path.stat().st_mtime_ns, **{p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in path.iterdir()}}


@pytest.mark.parametrize("existing", [False, True], ids=["new-dir", "existing-dir"])
@pytest.mark.parametrize("scheduler", ["not-an-address", "nothing-listening"])
def test_a_scheduler_that_cannot_be_used_leaves_nothing(data, tmp_path, existing, scheduler):
    """--scheduler that is not an address: exit 2; one where nothing listens: exit 1; each with one line, and DIR
    as it was (not made when it did not exist)."""
    import dask

    out = tmp_path / "out"
    if existing:
        out.mkdir()
        (out / "notes.txt").write_text("mine\n")
    before = tree(out)
    grid = [str(data / "a.csv"), *FIT, "-o", str(out)]
    if scheduler == "not-an-address":
        code, _, err = sweep([*grid, "--scheduler", "no such thing"])
        assert code == 2 and err.splitlines() == [
            "slang: error: --scheduler no such thing: not the address of a Dask scheduler (missing port number in "
            "address 'no such thing')"]
    else:
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
            code, _, err = sweep([*grid, "--scheduler", f"tcp://127.0.0.1:{port}"])
        assert code == 1 and len(err.splitlines()) == 1
        assert err.startswith(f"slang: error: cannot connect to the Dask scheduler at tcp://127.0.0.1:{port}: ")
    assert tree(out) == before


def test_a_sweep_of_members_and_calibrate_writes_the_fits_slang_fit_writes(cluster, data, tmp_path):
    """--members and --calibrate as grid parameters on the cluster: each run file equals `slang fit`'s of its point
    (a mixture of two members, calibration scores of held-out rows), as the serial fits in this process make it."""
    out, serial = tmp_path / "out", tmp_path / "serial"
    code, summary, err = sweep([str(data / "a.csv"), "--members", "1,2", "--calibrate", "0.25", *FIT,
                                "-o", str(out)], cluster)
    assert code == 0 and summary["ran"] == 2 and summary["complete"] == 2, err
    serial.mkdir()
    points = points_of([{"data": [str(data / "a.csv")], "members": "1,2", "calibrate": "0.25", "epochs": "2",
                         "test-fraction": "0.25", "batch-size": "8"}])
    write_results(serial, [run_fit(make_task(p, str(serial / p.name), 60.0)) for p in points])
    run_files = sorted(p.name for p in out.glob("*.h5"))
    assert run_files == sorted(p.name for p in serial.glob("*.h5")) and len(run_files) == 2
    for name in run_files:
        # as assert_same_run, with the members' own clocks (member<k>_seconds, member_seconds) left out too
        got, expected = (run_file_contents(d / name)[0] for d in (out, serial))
        timed = {key for key in {*got, *expected} if "seconds" in key or key in LEFT_OUT}
        assert sorted(set(got) - timed) == sorted(set(expected) - timed)
        for key in set(expected) - timed:
            np.testing.assert_equal(got[key], expected[key], err_msg=f"{name} {key}")
    members = {slangcli.load(out / name).config["members"] for name in run_files}
    assert members == {1, 2}
    assert all(slangcli.load(out / name).calibration["n"] > 0 for name in run_files)
    # the table holds the metrics by level, the calibrated coverage among them, as the run files have them
    for row in json.loads((out / "results.json").read_text()):
        test = slangcli.load(out / row['name']).metrics["test"]
        by_level = {key: value for key, value in test.items() if isinstance(value, dict) and key != "calibration"}
        assert any(key.startswith("calibrated") for key in by_level)
        for key, levels in by_level.items():
            for level, value in levels.items():
                assert row[f"test_{key}_{level}"] == value


def test_a_point_on_a_uci_folder_is_done_only_while_every_file_of_it_is_unchanged(tmp_path):
    """A sweep re-run after index_target.txt changed counted a UCI point as done: the column files were not among
    the files whose digests decide it."""
    from conftest import gal_folder
    from slangcli.data.readers import read_uci_folder
    from slangcli.sweep import tasks

    X = np.random.default_rng(0).standard_normal((20, 2))
    folder = gal_folder(tmp_path / "toy", X, X[:, 0], 15)
    table = read_uci_folder(folder, 0)[0]
    files = tasks._data_files({"train": table.provenance})
    assert sorted(Path(path).name for path, _ in files) == ["data.txt", "index_features.txt", "index_target.txt",
                                                            "index_test_0.txt", "index_train_0.txt"]
    assert tasks._same_data(files)
    (folder / "index_target.txt").write_text("0\n")
    assert not tasks._same_data(files)
