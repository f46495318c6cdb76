"""Column selection (``--drop-columns``, ``--columns``), missing values (``--na-values``, ``--missing``) and data
on standard input (``-``): the reader, the options stored in the run file and reapplied by evaluate and predict."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from slangcli.cli import main
from slangcli.data.readers import read_table
from slangcli.errors import DataError
from slangcli.runfile.io import read_run, write_run

FAST = ["--epochs", "2", "--rank", "1", "--batch-size", "8"]


def invoke(*args, input=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input)


def labelled_rows(n=40, seed=0):
    """``id,a,b,c,label``: a row id, three features and a 0/1 label that depends on a and b."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = (X[:, 0] - X[:, 1] > 0).astype(int)
    return [f"{1000 + 7 * i},{x[0]:.4f},{x[1]:.4f},{x[2]:.4f},{label}" for i, (x, label) in enumerate(zip(X, y))]


@pytest.fixture
def gappy(write_file):
    """A headerless file whose lines 3 and 6 hold a '?' and an 'NA' in column 2."""
    rows = labelled_rows()
    rows[2] = re.sub(r"^([^,]*,[^,]*,)[^,]*", r"\1?", rows[2])
    rows[5] = re.sub(r"^([^,]*,[^,]*,)[^,]*", r"\1NA", rows[5])
    return write_file("gappy.csv", "\n".join(rows) + "\n")


# ------------------------------------------------------------------------------------------------ reader


def test_missing_value_error_names_line_column_token_count_and_option(gappy):
    message = (re.escape(f"{gappy}:3: column 2: missing value '?' (2 rows have a missing value; --missing drop "
                         "leaves such rows out, --missing impute fills such cells in)") + "$")
    with pytest.raises(DataError, match=message):
        read_table(gappy)


def test_missing_drop_leaves_rows_out_and_records_them(gappy):
    full = read_table(gappy, na_values=["?", "NA"], missing="drop")
    assert full.X.shape == (38, 4) and full.y.shape == (38,)
    assert full.provenance["rows_dropped"] == 2 and full.provenance["dropped_lines"] == [3, 6]
    assert full.provenance["rows"] == 38
    rows = [r for k, r in enumerate(labelled_rows()) if k not in (2, 5)]
    expected = np.array([[float(v) for v in r.split(",")[:4]] for r in rows])
    np.testing.assert_array_equal(full.X, expected)


def test_na_values_are_the_only_missing_tokens(gappy):
    # without 'NA' among the tokens, line 6's cell is text that is not a number
    with pytest.raises(DataError, match=re.escape(f"{gappy}:6: column 2: cannot parse 'NA' as a number")):
        read_table(gappy, na_values=["?"], missing="drop")


def test_missing_target_and_nan_token(write_file):
    path = write_file("t.csv", "a,b,y\n1,2,yes\n3,NaN,no\n5,6,?\n7,8,no\n9,1,\n")
    with pytest.raises(DataError, match=re.escape(f"{path}:3: column 1 ('b'): missing value 'NaN' (3 rows")):
        read_table(path)
    table = read_table(path, missing="drop")
    assert table.y.tolist() == ["yes", "no"] and table.provenance["dropped_lines"] == [3, 4, 6]
    path = write_file("u.csv", "a,y\n?,1\n,2\n")
    with pytest.raises(DataError, match=re.escape(f"{path}: every data row has a missing value")):
        read_table(path, missing="drop")


@pytest.mark.parametrize(
    "option, value, names",
    [
        ("drop_columns", "0", ("x1", "x2", "x3")),
        ("drop_columns", "x0,3", ("x1", "x2")),
        ("drop_columns", [0, -2], ("x1", "x2")),
        ("columns", "2,1", ("x1", "x2")),  # file order, whatever the order given
        ("columns", "1,4", ("x1",)),  # the target among them stays the target
    ],
)
def test_column_selection_keeps_file_numbering(write_file, option, value, names):
    path = write_file("c.csv", "\n".join(labelled_rows(8)) + "\n")
    table = read_table(path, **{option: value})
    assert table.feature_names == names
    full = np.array([[float(v) for v in r.split(",")] for r in labelled_rows(8)])
    np.testing.assert_array_equal(table.X, full[:, [int(n[1:]) for n in names]])
    assert table.provenance["target"] == 4


def test_column_selection_by_header_name(write_file):
    path = write_file("h.csv", "id,a,b,c,label\n" + "\n".join(labelled_rows(8)) + "\n")
    table = read_table(path, drop_columns="id,c")
    assert table.feature_names == ("a", "b") and table.provenance["columns_dropped"] == ["id", "c"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"drop_columns": "4"}, "--drop-columns 4: column 4 is the target (choose another with --target)"),
        ({"drop_columns": "5"}, "--drop-columns 5: out of range (5 columns, 0 to 4)"),
        ({"drop_columns": "id"}, "--drop-columns 'id': the file has no header row, so columns are named by 0-based "
                                 "index"),
        ({"drop_columns": "0,"}, "--drop-columns takes column names or 0-based indices separated by commas"),
        ({"columns": "0", "drop_columns": "1"}, "give either --drop-columns or --columns, not both"),
        ({"columns": "4"}, "no feature column left after --columns"),
    ],
)
def test_column_selection_errors(write_file, kwargs, message):
    path = write_file("c.csv", "\n".join(labelled_rows(8)) + "\n")
    with pytest.raises(DataError, match=re.escape(f"{path}: {message}")):
        read_table(path, **kwargs)


def test_unknown_header_name_lists_the_columns(write_file):
    path = write_file("h.csv", "id,a,b,c,label\n" + "\n".join(labelled_rows(8)) + "\n")
    with pytest.raises(DataError, match=re.escape("--columns 'z' names no column (columns: id, a, b, c, label)")):
        read_table(path, columns="a,z")


def test_libsvm_refuses_column_options(write_file):
    path = write_file("d.svm", "+1 1:1 2:0.5\n-1 2:1\n")
    with pytest.raises(DataError, match="the drop-columns option applies to CSV input, and this file is LIBSVM"):
        read_table(path, drop_columns="0")


# ------------------------------------------------------------------------------------------------ command line


def test_fit_stores_the_options_and_evaluate_and_predict_reapply_them(gappy, tmp_path):
    run = tmp_path / "run.h5"
    done = invoke("fit", gappy, "-o", run, "--missing", "drop", "--drop-columns", "0", "--test-fraction", "0.25",
                  *FAST)
    assert done.exit_code == 0, done.output
    assert "2 rows with a missing value dropped" in done.stderr
    stored = read_run(run)
    assert stored.model.sizes[0] == 3
    assert stored.data["train"]["rows_dropped"] == 2 and stored.data["train"]["dropped_lines"] == [3, 6]
    assert stored.data["options"]["drop_columns"] == "0" and stored.data["options"]["missing"] == "drop"
    assert stored.data["options"]["na_values"] == ["", "NA", "NaN", "?"]
    assert invoke("evaluate", run).exit_code == 0  # re-reads the training file with the stored options
    done = invoke("evaluate", run, gappy, "--json")
    assert done.exit_code == 0, done.output
    out = tmp_path / "p.csv"
    done = invoke("predict", run, gappy, "-o", out, "--missing", "drop")
    assert done.exit_code == 0, done.output
    assert f"{gappy}: 2 rows with a missing value left out (--missing drop), lines 3, 6" in done.stderr
    assert len(out.read_text().splitlines()) == 1 + 38
    # a file to predict on without the target column: 4 columns, of which column 0 is dropped; 4 columns are also
    # the width of the 3 features and the target, so --layout says which
    bare = tmp_path / "bare.csv"
    bare.write_text("".join(r.rsplit(",", 1)[0] + "\n" for r in labelled_rows(5)))
    done = invoke("predict", run, bare, "-o", out)
    assert done.exit_code == 1 and "give --layout to say which" in done.stderr
    done = invoke("predict", run, bare, "-o", out, "--layout", "full")
    assert done.exit_code == 0, done.output
    assert out.read_text().splitlines()[0].split(",")[-1] == "entropy_epistemic"  # no target column


def test_run_file_without_the_options_reads_as_before(train_csv, tmp_path):
    """A run file written before these options existed lacks them in its data options: the defaults apply."""
    run = tmp_path / "run.h5"
    assert invoke("fit", train_csv, "-o", run, "--test-fraction", "0.25", *FAST).exit_code == 0
    old = read_run(run)
    for key in ("drop_columns", "columns", "na_values", "missing"):
        del old.data["options"][key]
    write_run(run, old)
    done = invoke("evaluate", run, "--json")
    assert done.exit_code == 0, done.output
    assert invoke("predict", run, train_csv, "-o", tmp_path / "p.csv").exit_code == 0


def test_missing_value_message_on_the_command_line(gappy, tmp_path):
    done = invoke("fit", gappy, "-o", tmp_path / "run.h5", *FAST)
    assert done.exit_code == 1
    assert done.stderr.splitlines() == [
        f"slang: error: {gappy}:3: column 2: missing value '?' (2 rows have a missing value; --missing drop leaves "
        "such rows out, --missing impute fills such cells in)"]
    assert not (tmp_path / "run.h5").exists()
    done = invoke("fit", gappy, "-o", tmp_path / "run.h5", "--na-values", "?", "--missing", "drop", *FAST)
    assert done.exit_code == 1 and "column 2: cannot parse 'NA' as a number" in done.stderr


def test_data_from_standard_input(gappy, tmp_path):
    run = tmp_path / "run.h5"
    text = gappy.read_bytes()
    done = invoke("fit", "-", "-o", run, "--missing", "drop", "--test-fraction", "0.25", *FAST, input=text)
    assert done.exit_code == 0, done.output
    stored = read_run(run)
    assert stored.data["train"]["path"] == "-" and stored.data["options"]["path"] == "-"
    done = invoke("evaluate", run)
    assert done.exit_code == 2  # DATA is missing, as for a run without test data
    assert done.stderr.strip() == (f"slang: error: {run}: its training data were read from standard input; pass "
                                   "the data explicitly")
    done = invoke("evaluate", run, gappy, "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["metrics"]["train"]["stored"]  # the training -ELBO is the fit's, as always
    # a compressed run stores no training -ELBO, and its training data cannot be read again: scored without it, as
    # when its training file is gone (it was refused, exit 2, with DATA given)
    assert invoke("compress", run, "--rank", "1", "-o", tmp_path / "c.h5").exit_code == 0
    done = invoke("evaluate", tmp_path / "c.h5", gappy, "--json")
    assert done.exit_code == 0, done.output
    assert "train" not in json.loads(done.stdout)["metrics"] and json.loads(done.stdout)["metrics"]["test"]
    assert (f"{tmp_path / 'c.h5'}: its training data were read from standard input; pass the data explicitly; "
            "the training -ELBO is not reported") in done.stderr
    done = invoke("predict", run, "-", "-o", "-", input=text)
    assert done.exit_code == 0, done.output
    assert len(done.stdout.splitlines()) == 1 + 40  # the rows with a missing value are kept, their cells empty


def test_drop_columns_and_columns_together_is_a_usage_error(gappy, tmp_path):
    done = invoke("fit", gappy, "-o", tmp_path / "run.h5", "--drop-columns", "0", "--columns", "1", *FAST)
    assert done.exit_code == 2 and "give either --drop-columns or --columns, not both" in done.stderr


def test_evaluate_and_predict_take_missing_for_their_data(gappy, write_file, tmp_path):
    """A fit on complete data (the default --missing error) scores data with gaps when told to; predict keeps
    their rows, empty, unless told otherwise."""
    clean = write_file("clean.csv", "\n".join(labelled_rows(seed=1)) + "\n")
    run = tmp_path / "run.h5"
    assert invoke("fit", clean, "-o", run, *FAST).exit_code == 0
    done = invoke("predict", run, gappy, "-o", tmp_path / "p.csv", "--missing", "error")
    assert done.exit_code == 1 and "--missing drop leaves such rows out" in done.stderr
    done = invoke("predict", run, gappy, "-o", tmp_path / "p.csv", "--missing", "drop")
    assert done.exit_code == 0, done.output
    assert len((tmp_path / "p.csv").read_text().splitlines()) == 1 + 38
    assert invoke("evaluate", run, gappy).exit_code == 1
    done = invoke("evaluate", run, gappy, "--missing", "drop", "--json")
    assert done.exit_code == 0, done.output
    assert '"rows_dropped": 2' in done.stdout
    # said on stderr, as predict and fit --test say it (evaluate left the rows out without a word)
    assert f"slang: {gappy}: 2 rows with a missing value left out (--missing drop), lines 3, 6: they are not scored " \
           "(--missing impute fills them in, --missing error refuses them)" in done.stderr.splitlines()
    # the run's own test file is read as the fit read it: said so, and --missing without DATA is refused (it was
    # taken and did nothing)
    fitted = invoke("fit", clean, "--test", gappy, "--missing", "drop", "-o", tmp_path / "t.h5", *FAST)
    assert fitted.exit_code == 0, fitted.output
    done = invoke("evaluate", tmp_path / "t.h5")
    assert done.exit_code == 0, done.output
    assert f"slang: {gappy}: 2 rows with a missing value left out (--missing drop), lines 3, 6: they are not scored " \
           "(as the fit left them out)" in done.stderr.splitlines()
    done = invoke("evaluate", tmp_path / "t.h5", "--missing", "impute")
    assert done.exit_code == 2 and "--missing applies to a DATA file" in done.stderr, done.output


def test_ambiguous_names_are_numbered_from_zero(write_file):
    path = write_file("dup.csv", "a,b,a,y\n1,2,3,0\n4,5,6,1\n")
    with pytest.raises(DataError, match=re.escape("target column 'a' is ambiguous (columns 0, 2 share that name)")):
        read_table(path, target="a")
    with pytest.raises(DataError, match=re.escape("--drop-columns 'a' is ambiguous (columns 0, 2 share that name)")):
        read_table(path, drop_columns="a")


def test_standard_input_is_read_once(gappy, tmp_path):
    done = invoke("fit", "-", "--test", "-", "-o", tmp_path / "run.h5", *FAST, input=gappy.read_bytes())
    assert done.exit_code == 2 and "standard input (-) can be read only once" in done.stderr
