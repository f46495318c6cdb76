"""``slang predict`` on the command line: outputs, data with and without the target, errors, reproducibility.

Runs are fitted once per module through the CLI (logistic regression, a small classification network and a small
regression network, 2 epochs each); the predictions are read back from CSV and HDF5.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

import slangcli.predictive.tables
from conftest import binary_problem, csv_text, gal_folder
from slangcli.errors import DataError
from test_cli import FAST, assert_empty, assert_error, assert_ok, invoke, parse_one_json_object

LR_COLUMNS = ["row", "p_no", "p_yes", "predicted", "entropy_total", "entropy_aleatoric", "entropy_epistemic"]
REGRESSION_COLUMNS = ["row", "mean", "std_total", "std_aleatoric", "std_epistemic"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``{"dir", "data", "features", "lr", "net", "reg", "reg_data"}``: data files and fitted run files."""
    d = tmp_path_factory.mktemp("predict")
    X, labels = binary_problem(seed=0)
    data = d / "data.csv"
    data.write_text(csv_text(X, labels))
    features = d / "features.csv"
    features.write_text("a,b,c\n" + "".join(",".join(f"{v:.6f}" for v in x) + "\n" for x in X))
    rng = np.random.default_rng(1)
    Xr = rng.standard_normal((40, 3))
    yr = 20.0 + 5.0 * np.sin(Xr[:, 0]) + Xr[:, 1] + 0.3 * rng.standard_normal(40)
    reg_data = d / "reg.csv"
    reg_data.write_text("a,b,c,y\n" + "".join(",".join(f"{v:.6f}" for v in (*x, t)) + "\n" for x, t in zip(Xr, yr)))
    out = {"dir": d, "data": data, "features": features, "reg_data": reg_data}
    for name, source, extra in (("lr", data, []),
                                ("net", data, ["--hidden", "4", "--method", "slang", "--eval-samples", "50"]),
                                ("reg", reg_data, ["--hidden", "4", "--method", "slang", "--likelihood", "gaussian",
                                                   "--eval-samples", "50"])):
        out[name] = d / f"{name}.h5"
        assert_ok(invoke("fit", source, "-o", out[name], *FAST, "--test-fraction", "0.25", *extra))
    return out


def read_csv(text: str) -> tuple[list[str], dict[str, list[str]]]:
    rows = list(csv.reader(io.StringIO(text)))
    header, body = rows[0], rows[1:]
    return header, {name: [row[j] for row in body] for j, name in enumerate(header)}


def predict_csv(*args) -> tuple[list[str], dict[str, list[str]]]:
    result = invoke("predict", *args, "-o", "-")
    assert_ok(result)
    return read_csv(result.stdout)


# ------------------------------------------------------------------------------------------------ predict


def test_csv_to_a_file_and_to_stdout(runs, tmp_path):
    out = tmp_path / "pred.csv"
    result = invoke("predict", runs["lr"], runs["data"], "-o", out)
    assert_ok(result)
    assert result.stdout == ""
    assert "40 predictions" in result.stderr and "quadrature" in result.stderr
    text = out.read_text()
    header, cols = read_csv(text)
    assert header == [*LR_COLUMNS, "target"]
    assert len(cols["p_no"]) == 40 and cols["row"] == [str(k) for k in range(40)]
    p = np.array([cols["p_no"], cols["p_yes"]], dtype=float).T
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-11)
    assert cols["predicted"] == np.where(p[:, 1] > p[:, 0], "yes", "no").tolist()
    assert cols["target"] == np.where(binary_problem(seed=0)[1], "yes", "no").tolist()
    total, aleatoric, epistemic = (np.array(cols[f"entropy_{k}"], dtype=float)
                                   for k in ("total", "aleatoric", "epistemic"))
    np.testing.assert_allclose(total, aleatoric + epistemic, rtol=1e-10, atol=1e-12)
    assert (epistemic >= 0).all() and (total <= np.log(2) + 1e-12).all()

    stdout = invoke("predict", runs["lr"], runs["data"], "-o", "-")
    assert_ok(stdout)
    assert stdout.stdout == text


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_csv_on_stdout_is_utf8_whatever_the_locale(tmp_path, encoding):
    """Labels beyond the locale's encoding (under ``LC_ALL=C`` without Python's UTF-8 mode, or a Latin-1 locale)
    ended ``predict -o -`` in a UnicodeEncodeError traceback; stdout gets the file's UTF-8 bytes."""
    X, y = binary_problem(n=40, seed=1)
    data = tmp_path / "cities.csv"
    data.write_text(csv_text(X, y, classes=("Zürich", "東京")), encoding="utf-8")
    assert_ok(invoke("fit", data, "-o", tmp_path / "run.h5", *FAST))
    assert_ok(invoke("predict", tmp_path / "run.h5", data, "-o", tmp_path / "p.csv"))
    env = {**os.environ, "PYTHONIOENCODING": encoding, "PYTHONUTF8": "0"}
    done = subprocess.run([sys.executable, "-m", "slangcli", "predict", tmp_path / "run.h5", data, "-o", "-"],
                          capture_output=True, env=env, timeout=120)
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
    assert done.stdout == (tmp_path / "p.csv").read_bytes() and "東京".encode() in done.stdout


@pytest.mark.parametrize("name", ["out.json", "out.PARQUET", "out.csv.bz2", "out.xlsx"])
def test_an_output_named_for_another_format_is_refused(runs, tmp_path, name):
    """``-o out.json`` wrote CSV under a JSON name, without a word; a name of a format predict does not write is a
    usage error now, before any work (a name of no known format, out.txt, still gets CSV)."""
    result = invoke("predict", runs["lr"], runs["data"], "-o", tmp_path / name)
    assert result.exit_code == 2 and "predict writes CSV" in result.stderr and not (tmp_path / name).exists()
    assert_ok(invoke("predict", runs["lr"], runs["data"], "-o", tmp_path / "out.txt"))
    assert (tmp_path / "out.txt").read_text().startswith("row,")


def test_evaluate_on_the_training_file_says_so(runs, tmp_path):
    """evaluate RUN.h5 TRAIN.csv scored the training rows (with a split, training and test rows together) under the
    heading "test", without a word; a note now says DATA is the file the run was fitted to. A copy of it is too (its
    bytes are the data), another file is not."""
    done = invoke("evaluate", runs["lr"], runs["data"])
    assert_ok(done)
    assert (f"slang: {runs['data']} is the file the run was fitted to (the same sha256): its scores are of its "
            "training rows and its held-out test rows together") in done.stderr.splitlines()
    copy, fewer = tmp_path / "copy.csv", tmp_path / "fewer.csv"
    copy.write_bytes(runs["data"].read_bytes())
    lines = runs["data"].read_text().splitlines(keepends=True)
    fewer.write_text("".join(lines[:1] + lines[2:]))  # (one row fewer: other data)
    assert "is the file the run was fitted to" in invoke("evaluate", runs["lr"], copy).stderr
    done = invoke("evaluate", runs["lr"], fewer)
    assert_ok(done)
    assert "is the file the run was fitted to" not in done.stderr
    assert_ok(invoke("fit", runs["data"], "--calibrate", "0.3", "-o", tmp_path / "cal.h5", *FAST))
    assert_ok(invoke("compress", tmp_path / "cal.h5", "--rank", "1", "-o", tmp_path / "calk.h5"))
    for run in ("cal.h5", "calk.h5"):  # (a compressed run keeps no calibration: its config says the rows were held)
        assert "its scores are of its training rows and its held-out --calibrate rows together" in invoke(
            "evaluate", tmp_path / run, runs["data"]).stderr


def test_a_headerless_file_with_an_index_first_is_warned_about(runs, tmp_path):
    """``df.to_csv(header=False)`` keeps pandas' index: four columns, the training file's width, so the file was read
    as features and target, one column off (the index as feature a, c as the target), without a word. The index
    lies tens of training standard deviations from a's mean: predict and evaluate warn."""
    rows = runs["reg_data"].read_text().splitlines()[1:]
    shifted, plain = tmp_path / "shifted.csv", tmp_path / "plain.csv"
    shifted.write_text("".join(f"{i},{','.join(row.split(',')[:3])}\n" for i, row in enumerate(rows)))
    plain.write_text("".join(f"{row}\n" for row in rows))
    warning = f"slang: warning: {shifted}: 1 of the 3 features lies far from the training rows"
    for command in (["predict", runs["reg"], shifted, "-o", tmp_path / "p.csv"], ["evaluate", runs["reg"], shifted]):
        done = invoke(*command)
        assert_ok(done)
        assert any(line.startswith(warning) and "'a' at " in line for line in done.stderr.splitlines()), done.stderr
    done = invoke("predict", runs["reg"], plain, "-o", tmp_path / "q.csv")
    assert_ok(done)
    assert "far from the training rows" not in done.stderr
    # a rare 0/1 flag of the training rows is far out, standardised, wherever it is 1: rows that have it are no alarm
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 2))
    flag = np.zeros(400)
    flag[:2] = 1
    y = X[:, 0] + rng.normal(size=400)
    (tmp_path / "flag.csv").write_text("a,b,flag,y\n" + "".join(f"{a},{b},{f:g},{t}\n" for (a, b), f, t in
                                                                 zip(X, flag, y)))
    assert_ok(invoke("fit", tmp_path / "flag.csv", "-o", tmp_path / "flag.h5", *FAST))
    (tmp_path / "flagged.csv").write_text("a,b,flag\n" + "".join(f"{a},{b},1\n" for a, b in X[:5]))
    done = invoke("predict", tmp_path / "flag.h5", tmp_path / "flagged.csv", "-o", tmp_path / "r.csv")
    assert_ok(done)
    assert "far from the training rows" not in done.stderr
    # ... nor a -1/+1 flag (a column of two values is not judged); and fewer than five rows are not judged (one
    # row's rare value is no sign)
    (tmp_path / "pm.csv").write_text("a,b,flag,y\n" + "".join(f"{a},{b},{2 * f - 1:g},{t}\n" for (a, b), f, t in
                                                               zip(X, flag, y)))
    assert_ok(invoke("fit", tmp_path / "pm.csv", "-o", tmp_path / "pm.h5", *FAST))
    (tmp_path / "plus.csv").write_text("a,b,flag\n" + "".join(f"{a},{b},1\n" for a, b in X[:6]))
    assert "far from the training rows" not in invoke("predict", tmp_path / "pm.h5", tmp_path / "plus.csv", "-o",
                                                      tmp_path / "s.csv").stderr
    (tmp_path / "one.csv").write_text(f"a,b,flag\n{15 * X[:, 0].std()},0,-1\n")
    assert "far from the training rows" not in invoke("predict", tmp_path / "pm.h5", tmp_path / "one.csv",
                                                      "-o", tmp_path / "t.csv").stderr


def test_a_gz_output_is_gzip_compressed_csv(runs, tmp_path):
    """-o out.csv.gz wrote plain text under a name that pandas (and gzip) read as compressed."""
    import gzip

    out = tmp_path / "out.csv.gz"
    result = invoke("predict", runs["lr"], runs["data"], "-o", out, "--json")
    assert_ok(result)
    summary = parse_one_json_object(result.stdout)
    assert summary["format"] == "csv" and summary["compressed"] == "gzip"
    plain = invoke("predict", runs["lr"], runs["data"], "-o", "-").stdout
    with gzip.open(out, "rt", encoding="utf-8", newline="") as stream:
        assert stream.read() == plain
    again = tmp_path / "again.csv.gz"
    assert_ok(invoke("predict", runs["lr"], runs["data"], "-o", again))
    assert again.read_bytes() == out.read_bytes()  # no time stamp: the same command writes the same bytes


def test_hdf5_output(runs, tmp_path):
    out = tmp_path / "pred.h5"
    assert_ok(invoke("predict", runs["lr"], runs["data"], "-o", out))
    _, cols = predict_csv(runs["lr"], runs["data"])
    with h5py.File(out, "r") as f:
        assert f.attrs["encoding-type"] == "slang-predictions" and f.attrs["encoding-version"] == "1.2"
        assert json.loads(f.attrs["columns"]) == ["row", "probabilities", "predicted", "entropy_total",
                                                  "entropy_aleatoric", "entropy_epistemic", "target"]
        assert f["row"].dtype == np.int64 and f["row"][()].tolist() == list(range(40))
        info = json.loads(f.attrs["info"])
        assert info["predictive"] == "quadrature" and info["data"]["has_target"] is True
        # which run made them (its bytes: a path can be refitted), by which command and versions
        assert info["run_sha256"] == hashlib.sha256(Path(runs["lr"]).read_bytes()).hexdigest()
        assert info["command"] == ["slang", "predict", str(runs["lr"]), str(runs["data"]), "-o", str(out)]
        assert json.loads(f.attrs["versions"])["numpy"] == np.__version__
        assert [c.decode() for c in f["classes"][()]] == ["no", "yes"]
        probs = f["probabilities"][()]
        assert probs.shape == (40, 2) and probs.dtype == np.float64
        np.testing.assert_allclose(probs[:, 1], np.array(cols["p_yes"], dtype=float), rtol=1e-11)
        assert [v.decode() for v in f["predicted"][()]] == cols["predicted"]
        np.testing.assert_allclose(f["entropy_total"][()], np.array(cols["entropy_total"], dtype=float), rtol=1e-11)


def test_data_without_the_target_column(runs):
    header, cols = predict_csv(runs["lr"], runs["features"])
    assert header == LR_COLUMNS
    _, with_target = predict_csv(runs["lr"], runs["data"])
    assert {name: with_target[name] for name in LR_COLUMNS} == cols


def test_wrong_width_is_refused_and_nothing_is_written(runs, write_file, out_dir):
    narrow = write_file("narrow.csv", "1,2\n3,4\n")
    out = out_dir / "pred.csv"
    assert_error(invoke("predict", runs["lr"], narrow, "-o", out), 1, f"{narrow}:1: 2 columns, expected 3 "
                 "(features only) or 4 (features and the target)")
    assert_empty(out_dir)


@pytest.fixture(scope="module")
def with_id(tmp_path_factory):
    """``(dir, run, rows)``: train.csv with the header ``id,a,b,c,label``, a run fitted to it with ``--drop-columns
    id --missing drop``, and the file's rows as lists of cells."""
    d = tmp_path_factory.mktemp("with-id")
    X, labels = binary_problem(seed=2)
    rows = [[str(1000 + 7 * k), *(f"{v:.6f}" for v in x), "yes" if t else "no"]
            for k, (x, t) in enumerate(zip(X, labels))]
    (d / "train.csv").write_text("id,a,b,c,label\n" + "".join(",".join(r) + "\n" for r in rows))
    assert_ok(invoke("fit", d / "train.csv", "-o", d / "run.h5", *FAST, "--drop-columns", "id", "--missing", "drop"))
    return d, d / "run.h5", rows


def write_columns(path, header, rows, columns):
    """A CSV file of the named ``columns`` of ``rows`` (cells under ``header``), in that order."""
    order = [header.index(name) for name in columns]
    path.write_text(",".join(columns) + "\n" + "".join(",".join(r[j] for j in order) + "\n" for r in rows))
    return path


HEADER = ["id", "a", "b", "c", "label"]


def test_a_row_with_a_missing_value_keeps_its_place(with_id):
    """4 rows in, one with a missing value: 3 rows came out, nothing saying which (the fit's --missing drop was
    applied). Now every row keeps its place, the incomplete one empty, and a row column numbers them; --missing
    drop leaves it out, the row column saying which rows are there; --missing error refuses the file."""
    d, run, rows = with_id
    rows = [list(r) for r in rows[:4]]
    rows[2][2] = "?"
    data = write_columns(d / "gap.csv", HEADER, rows, HEADER)
    result = invoke("predict", run, data, "-o", "-")
    assert_ok(result)
    assert f"{data}: 1 row with a missing value (line 4) has its predictions left empty" in result.stderr
    assert re.search(r"3 predictions of .* written to stdout; 1 row of 4 left empty", result.stderr)
    header, cols = read_csv(result.stdout)
    assert cols["row"] == ["0", "1", "2", "3"]
    assert [cols[name][2] for name in header[1:]] == [""] * (len(header) - 1)
    assert all(cols["p_yes"][k] != "" for k in (0, 1, 3))

    assert "--missing impute fills them in" in result.stderr  # (the run stores the values to impute)

    _, dropped = predict_csv(run, data, "--missing", "drop")
    assert dropped["row"] == ["0", "1", "3"]
    assert dropped["p_yes"] == [cols["p_yes"][k] for k in (0, 1, 3)]
    assert_error(invoke("predict", run, data, "-o", "-", "--missing", "error"), 1,
                 f"{data}:4: column 2 ('b'): missing value '?'")


@pytest.mark.parametrize("missing", [None, "error", "drop"])
def test_a_row_without_its_target_is_predicted(with_id, missing):
    """A file of rows to predict, with the target column present but empty, was refused ("every data row has a
    missing value: nothing is left to read"), and a row lacking only its target had its prediction left empty: the
    target is no input of a prediction. Only a missing feature makes a row incomplete."""
    d, run, rows = with_id
    rows = [list(r) for r in rows[:4]]
    complete = invoke("predict", run, write_columns(d / "complete.csv", HEADER, rows, HEADER), "-o", "-")
    assert_ok(complete)
    _, expected = read_csv(complete.stdout)
    for r in rows:
        r[-1] = ""
    data = write_columns(d / "unlabelled.csv", HEADER, rows, HEADER)
    result = invoke("predict", run, data, "-o", "-", *(["--missing", missing] if missing else []))
    assert_ok(result)
    _, cols = read_csv(result.stdout)
    assert cols["row"] == ["0", "1", "2", "3"] and cols["target"] == [""] * 4
    assert cols["p_yes"] == expected["p_yes"] and "left empty" not in result.stderr
    # scoring does need the targets
    assert_error(invoke("evaluate", run, data), 1, f"{data}: every data row has a missing value")


def _same_probabilities(run, data, expected):
    """Predict ``data`` with ``run``: its probabilities must be ``expected``'s; returns the result and its columns."""
    result = invoke("predict", run, data, "-o", "-")
    assert_ok(result)
    _, cols = read_csv(result.stdout)
    assert {name: cols[name] for name in ("p_no", "p_yes")} == {name: expected[name] for name in ("p_no", "p_yes")}
    return result, cols


def test_a_features_only_file_need_not_keep_the_columns_the_fit_left_out(with_id, tmp_path):
    """A file of the features alone was refused ("--drop-columns 'id' names no column") unless it still had the
    id column the fit left out: its header's names now say which columns are the features, in any order."""
    d, run, rows = with_id
    _, expected = predict_csv(run, d / "train.csv")
    _same_probabilities(run, write_columns(tmp_path / "features.csv", HEADER, rows, ["a", "b", "c"]), expected)
    result, cols = _same_probabilities(run, write_columns(tmp_path / "other-order.csv", HEADER, rows,
                                                          ["c", "a", "b", "label"]), expected)
    assert "feature columns matched by name" in result.stderr and cols["target"] == expected["target"]


def test_a_headerless_file_in_the_training_layout_is_read_by_the_recorded_positions(with_id, tmp_path):
    """After a fit on a file with a header and --drop-columns, the training file's rows without their header were
    refused ("5 columns, expected 3 (the model's features only)"), and with --layout full the message lost its
    expected width ("expected  for --layout full"). The run's schema records each column's position: the file is
    read by them, as its header would be."""
    d, run, rows = with_id
    _, expected = predict_csv(run, d / "train.csv")
    bare = tmp_path / "bare.csv"
    bare.write_text("".join(",".join(r) + "\n" for r in rows))
    _same_probabilities(run, bare, expected)
    _, cols = predict_csv(run, bare, "--layout", "full")
    assert cols["p_yes"] == expected["p_yes"] and cols["target"] == expected["target"]
    # a run that does not record the positions (written before its schema did) says what to do, whole
    from slangcli.data import columns
    from slangcli.runfile.io import read_run

    stored = read_run(run)
    stored.data["schema"] = None
    with pytest.raises(DataError, match=r"^f\.csv:1: --layout full: the run knows the training file's other columns "
                                        r"by name only: give the file its header row to match them by name$"):
        columns.choose_reading(stored, 5, "f.csv:1", "full")


def test_a_header_given_to_a_run_that_knows_positions_only_is_named_as_unused(runs, tmp_path):
    """A run fitted to a file without a header reads DATA by position; a header row there was dropped and its names
    silently not used (columns c,a,b read as a,b,c: accuracy 0.39 against 0.98). A note now says so."""
    d = runs["dir"]
    bare = d / "bare.csv"
    bare.write_text("".join(line + "\n" for line in runs["data"].read_text().splitlines()[1:]))
    run = tmp_path / "bare.h5"
    assert_ok(invoke("fit", bare, "-o", run, *FAST))
    result = invoke("predict", run, runs["data"], "-o", "-")
    assert_ok(result)
    assert f"{runs['data']}: the column names are not used: the run knows its features by position only" \
        in result.stderr
    assert "not used" not in invoke("predict", run, bare, "-o", "-").stderr


def test_a_header_of_a_dataframes_integer_column_names_is_a_header(tmp_path):
    """``DataFrame.to_csv`` writes integer column names as a header row of numbers, which predict scored as a row of
    data (61 predictions of 60 rows, every later row shifted by one). A first row holding every feature name of the
    run is now a header, with a note; --no-header reads it as data."""
    pd = pytest.importorskip("pandas")
    import slangcli

    X, labels = binary_problem(seed=0)
    frame = pd.DataFrame(X)  # columns 0, 1, 2
    run = tmp_path / "ints.h5"
    slangcli.fit(frame, labels, epochs=2).save(run)
    data = tmp_path / "new.csv"
    frame.to_csv(data, index=False)
    result = invoke("predict", run, data, "-o", "-")
    assert_ok(result)
    header, columns = read_csv(result.stdout)
    assert len(columns["row"]) == len(X) and columns["row"][0] == "0"
    np.testing.assert_allclose(np.array(columns[header[2]], dtype=float),  # the second class's probability
                               slangcli.load(run).predict_proba(X)[:, 1], rtol=1e-9)
    assert f"{data}: the first row holds the run's feature names ('0', '1', '2'), so it is read as a header row " \
           "(--no-header reads it as data)" in result.stderr
    result = invoke("predict", run, data, "-o", "-", "--no-header")
    assert_ok(result)
    assert len(read_csv(result.stdout)[1]["row"]) == len(X) + 1
    # evaluate takes the same option, for a DATA file only
    assert_error(invoke("evaluate", run, "--no-header"), 2, "--header/--no-header applies to a DATA file")


def test_an_extra_column_is_ignored_and_named(with_id, tmp_path):
    """A column the run does not know was read as a feature ("cannot parse 'not a number' as a number"), counted
    against the model's width, or the last column taken for the target; it is now ignored, with a note naming it
    (not for a column the fit itself left out)."""
    d, run, rows = with_id
    _, expected = predict_csv(run, d / "train.csv")
    data = write_columns(tmp_path / "data.csv", [*HEADER, "note"], [[*r, "not a number"] for r in rows],
                         ["note", "c", "id", "b", "a"])
    result, cols = _same_probabilities(run, data, expected)
    assert f"{data}: column 'note' ignored: not among the model's features" in result.stderr
    assert "'id'" not in result.stderr and "target" not in cols


def test_a_missing_feature_column_is_named(with_id, tmp_path):
    """A file that lost a feature column was refused with a count of columns, or read the target's labels as a
    feature ("cannot parse 'yes' as a number"); the column is now named."""
    _, run, rows = with_id
    data = write_columns(tmp_path / "lacking.csv", HEADER, rows, ["id", "a", "c", "label"])
    assert_error(invoke("predict", run, data, "-o", "-"), 1,
                 f"{data}:1: column 'b' is missing (the model's 3 features are 'a', 'b', 'c')")
    assert_error(invoke("evaluate", run, data), 1, f"{data}:1: column 'b' is missing")


def test_missing_run_file(runs, tmp_path):
    absent = tmp_path / "absent.h5"
    assert_error(invoke("predict", absent, runs["data"], "-o", tmp_path / "p.csv"), 1,
                 f"slang: error: {absent}: no such file")


@pytest.mark.parametrize("which", ["data", "lr"])
def test_output_over_an_input_is_refused(runs, which):
    before = runs[which].read_bytes()
    result = invoke("predict", runs["lr"], runs["data"], "-o", runs[which])
    assert result.exit_code == 2
    assert "refusing to overwrite" in result.stderr
    assert runs[which].read_bytes() == before


@pytest.mark.parametrize("name", ["pred.csv", "pred.h5"])
def test_a_failure_while_writing_leaves_no_partial_file(runs, out_dir, monkeypatch, name):
    def fail():
        raise DataError("simulated failure half-way through writing")

    if name.endswith(".csv"):
        original = slangcli.predictive.tables._csv_cells

        def half(*args):
            original(*args)
            fail()
        monkeypatch.setattr(slangcli.predictive.tables, "_csv_cells", half)
    else:
        original = h5py.Group.create_dataset
        written = []

        def second_fails(self, *args, **kwargs):
            written.append(args[0])
            if len(written) == 2:
                fail()
            return original(self, *args, **kwargs)
        monkeypatch.setattr(h5py.Group, "create_dataset", second_fails)
    assert_error(invoke("predict", runs["lr"], runs["data"], "-o", out_dir / name), 1, "simulated failure")
    assert_empty(out_dir)


def test_same_seed_same_output_and_another_seed_differs(runs, tmp_path):
    paths = {}
    for key, seed in (("a", 3), ("b", 3), ("c", 4)):
        paths[key] = tmp_path / f"{key}.csv"
        assert_ok(invoke("predict", runs["net"], runs["data"], "-o", paths[key], "--seed", seed, "--samples", 100))
    assert paths["a"].read_bytes() == paths["b"].read_bytes()
    a, c = (read_csv(paths[k].read_text())[1] for k in "ac")
    assert a["target"] == c["target"]
    assert not np.allclose(np.array(a["p_yes"], dtype=float), np.array(c["p_yes"], dtype=float), rtol=1e-9)


def test_regression_columns_interval_and_json(runs, tmp_path):
    out = tmp_path / "reg.csv"
    result = invoke("predict", runs["reg"], runs["reg_data"], "-o", out, "--interval", "0.9", "--samples", "200",
                    "--json")
    assert_ok(result)
    summary = parse_one_json_object(result.stdout)
    assert summary["columns"] == [*REGRESSION_COLUMNS, "lower_90", "upper_90", "target"]
    assert summary["predictive"] == "mc" and summary["samples"] == 200 and summary["interval"] == 0.9
    assert summary["format"] == "csv" and summary["data"]["rows"] == 40
    _, cols = read_csv(out.read_text())
    v = {name: np.array(values, dtype=float) for name, values in cols.items()}
    np.testing.assert_allclose(v["std_total"] ** 2, v["std_aleatoric"] ** 2 + v["std_epistemic"] ** 2, rtol=1e-10)
    assert (v["lower_90"] < v["mean"]).all() and (v["mean"] < v["upper_90"]).all()
    # original units: the targets are around 20, the standardised scale around 0
    assert 10 < np.median(v["mean"]) < 30
    np.testing.assert_allclose(v["target"], np.loadtxt(runs["reg_data"], delimiter=",", skiprows=1)[:, 3],
                               rtol=1e-12)


def test_json_with_stdout_output_is_a_usage_error(runs):
    result = invoke("predict", runs["lr"], runs["data"], "-o", "-", "--json")
    assert result.exit_code == 2 and result.stdout == ""
    assert "--json" in result.stderr


def test_predict_help():
    result = invoke("predict", "--help")
    assert_ok(result)
    assert "--interval" in result.stdout and "entropy_epistemic" in result.stdout


def test_a_run_that_cannot_impute_is_not_told_to(tmp_path):
    """A run fitted to a UCI folder stores no values to impute: predicting a row with a missing value suggested
    --missing impute, which then refused the run (probe 10)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 2))
    folder = gal_folder(tmp_path / "toy", X, X @ [1.0, -1.0], 30)
    run = tmp_path / "run.h5"
    assert_ok(invoke("fit", folder, "--uci-split", "0", "--iterations", "3", "--eval-samples", "10", "-o", run))
    data = tmp_path / "gap.csv"
    data.write_text("0.5,1.0\n,2.0\n")
    result = invoke("predict", run, data, "-o", "-")
    assert_ok(result)
    assert ("1 row with a missing value (line 2) has its predictions left empty (--missing drop leaves such rows "
            "out, --missing error refuses them)") in result.stderr
    assert_error(invoke("predict", run, data, "-o", "-", "--missing", "impute"), 1, "the run stores none")


def test_options_that_do_not_apply_are_said_to_be_unused(runs, tmp_path):
    """--samples and --seed on a logistic regression (exact quadrature), and --interval on a classification run
    without calibration, were taken and silently did nothing."""
    unused = ("slang: --samples 50 and --seed 3 not used: a logistic regression's predictive is exact "
              "(one-dimensional quadrature), with no weight samples")
    interval = ("slang: --interval 0.8 not used: a classification run has no intervals, and this one no calibrated "
                "prediction sets (slang fit --calibrate) whose level it would set")
    done = invoke("predict", runs["lr"], runs["data"], "-o", tmp_path / "p.csv", "--samples", "50", "--seed", "3",
                  "--interval", "0.8")
    assert_ok(done)
    assert unused in done.stderr.splitlines() and interval in done.stderr.splitlines()
    done = invoke("evaluate", runs["lr"], "--samples", "50", "--seed", "3")
    assert_ok(done)
    assert unused + " (--predictive mc uses them)" in done.stderr.splitlines()
    # where they are used, or left at their defaults, nothing is said
    for args in (["predict", runs["lr"], runs["data"], "-o", tmp_path / "q.csv"],
                 ["predict", runs["net"], runs["data"], "-o", tmp_path / "r.csv", "--samples", "50"],
                 ["predict", runs["reg"], runs["reg_data"], "-o", tmp_path / "s.csv", "--interval", "0.8"],
                 ["evaluate", runs["lr"], "--predictive", "mc", "--samples", "50"]):
        done = invoke(*args)
        assert_ok(done)
        assert "not used" not in done.stderr, done.stderr
