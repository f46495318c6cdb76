"""The data schema (``slangcli.data.schema``): columns of text as categories and booleans, ``--missing impute``, and one
reading of a model's input by every door: ``slang fit``, ``slang evaluate``, ``slang predict``,
``FitResult.predict`` and ``slangcli.fit``; and run files of format 1.3, which have no schema, read as before.

The data have the shape of Palmer penguins (``penguins.csv`` of the ``palmerpenguins`` package): the columns
``species,island,bill_length_mm,bill_depth_mm,flipper_length_mm,body_mass_g,sex,year``, text in species, island
and sex, ``NA`` for a missing value: a row with every measurement and the sex missing, rows with the sex missing, a
row with the body mass missing. The values are drawn here (seeded), each species with its own measurements.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

import slangcli
from slangcli.cli import main
from slangcli.data.schema import Schema, check_record
from slangcli.errors import DataError, FormatError
from slangcli.runfile.io import read_run
from test_cli import assert_error, assert_ok

README = Path(__file__).resolve().parents[1] / "README.md"
COLUMNS = ("species", "island", "bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g", "sex", "year")
ISLANDS = {"Adelie": ("Biscoe", "Dream", "Torgersen"), "Chinstrap": ("Dream",), "Gentoo": ("Biscoe",)}
# each species' mean bill length, bill depth, flipper length and body mass, and their spread within a species
MEANS = {"Adelie": (38.8, 18.3, 190.0, 3700.0), "Chinstrap": (48.8, 18.4, 196.0, 3730.0),
         "Gentoo": (47.5, 15.0, 217.0, 5080.0)}
SPREAD = (2.5, 1.1, 6.5, 300.0)
# 1-based data rows with gaps: every measurement and the sex; the sex alone; the body mass alone
ALL_MISSING, SEX_MISSING, MASS_MISSING = (4,), (9, 22), (13,)


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def penguins_rows(n=80, seed=0, gaps=True) -> list[list[str]]:
    """``n`` rows of penguin cells (header not included); with ``gaps``, the ``NA`` cells described above."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        species = ("Adelie", "Chinstrap", "Gentoo")[i % 3]
        islands = ISLANDS[species]
        island = islands[int(rng.integers(len(islands)))]
        sex = ("female", "male")[int(rng.integers(2))]
        male = 1.0 if sex == "male" else -1.0
        bill, depth, flipper, mass = (m + 0.5 * male * s + s * rng.standard_normal()
                                      for m, s in zip(MEANS[species], SPREAD))
        year = 2007 + int(rng.integers(3))
        row = [species, island, f"{bill:.1f}", f"{depth:.1f}", f"{flipper:.0f}", f"{mass:.0f}", sex, str(year)]
        if gaps and i + 1 in ALL_MISSING:
            row[2:7] = ["NA"] * 5
        if gaps and i + 1 in SEX_MISSING:
            row[6] = "NA"
        if gaps and i + 1 in MASS_MISSING:
            row[5] = "NA"
        rows.append(row)
    return rows


def write_rows(path, rows, columns=COLUMNS, order=None, header=True) -> Path:
    """The rows (cells in the order of ``columns``) written as CSV, their columns in ``order`` (default: as they
    are)."""
    order = list(order or columns)
    take = [list(columns).index(c) for c in order]
    lines = [",".join(order)] if header else []
    lines += [",".join(row[j] for j in take) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def readme_command(target: str, files: Path, output: Path, *extra) -> list[str]:
    """The README's one command that fits ``penguins.csv`` to ``target``, with its paths put in ``files`` and at
    ``output``."""
    [line] = [line for line in README.read_text().splitlines()
              if line.startswith("slang fit penguins.csv ") and f"--target {target} " in line]
    args = shlex.split(line)[2:]
    args = [str(files / a) if a == "penguins.csv" else a for a in args]
    args[args.index("-o") + 1] = str(output)
    return [*args, *extra]


def predictions(run, data, *extra) -> dict:
    """``slang predict``'s arrays (from its HDF5 output, float64) for the data file ``data``."""
    out = Path(data).with_name(Path(data).stem + "-pred.h5")
    assert_ok(invoke("predict", run, data, "-o", out, *extra))
    with h5py.File(out, "r") as f:
        return {name: f[name].asstr()[()] if h5py.check_string_dtype(f[name].dtype) else f[name][()] for name in f}


def frame_of(path):
    """The CSV file at ``path`` as a pandas DataFrame: a column of numbers as float64 (parsed as slang parses them;
    ``NA`` is NaN), any other of strings (``NA`` is None)."""
    pd = pytest.importorskip("pandas")
    header, *rows = [line.split(",") for line in Path(path).read_text().splitlines()]
    columns = {}
    for j, name in enumerate(header):
        cells = [row[j] for row in rows]
        if all(cell == "NA" or re.fullmatch(r"-?[\d.]+", cell) for cell in cells):
            columns[name] = np.array([np.nan if cell == "NA" else float(cell) for cell in cells])
        else:
            columns[name] = [None if cell == "NA" else cell for cell in cells]
    return pd.DataFrame(columns)


@pytest.fixture(scope="module")
def penguins(tmp_path_factory):
    """``{"dir", "data", "species", "mass", "mass50"}``: the penguin file and the README's fits of it (species,
    body mass, body mass with ``--hidden 50``), each with its standard error."""
    d = tmp_path_factory.mktemp("penguins")
    data = write_rows(d / "penguins.csv", penguins_rows())
    out = {"dir": d, "data": data}
    for name, target, extra in (("species", "species", []), ("mass", "body_mass_g", []),
                                ("mass50", "body_mass_g", ["--hidden", "50"])):
        out[name] = d / f"{name}.h5"
        done = invoke("fit", *readme_command(target, d, out[name], *extra, "--json"))
        assert_ok(done)
        out[f"{name}_stderr"] = done.stderr
    return out


# ------------------------------------------------------------------------------------------------ the schema itself


def test_a_schema_fitted_on_raw_columns_encodes_them():
    """Kinds from the text, levels from every row, the values a missing cell gets from the training rows; the
    encoding one indicator per level, a boolean one column, a number itself."""
    X = np.array([[1.0, np.nan, np.nan], [3.0, np.nan, np.nan], [np.nan, np.nan, np.nan], [8.0, np.nan, np.nan]])
    text = {1: np.array(["b", "a", "b", "c"]), 2: np.array(["Yes", "no", "", "YES"])}
    schema = Schema.fit(X, text, names=("x", "letter", "flag"), path="data", train=np.array([0, 1, 2]))
    assert [(c.kind, c.levels, c.fill) for c in schema.columns] == [
        ("numeric", (), 2.0), ("categorical", ("a", "b", "c"), "b"), ("boolean", (), 0.0)]
    assert schema.encoded_names == ("x", "letter=a", "letter=b", "letter=c", "flag")
    np.testing.assert_array_equal(schema.encode(X, text, impute=True), [[1, 0, 1, 0, 1], [3, 1, 0, 0, 0],
                                                                        [2, 0, 1, 0, 0], [8, 0, 0, 1, 1]])
    with pytest.raises(DataError, match=r"^row 2, column 'x': missing value"):
        schema.encode(X, text)
    unseen = {1: np.array(["b", "z", "b", "c"]), 2: text[2]}
    with pytest.raises(DataError, match=r"^row 1, column 'letter': level 'z' was not seen in training \(known "
                                        r"levels: a, b, c\)$"):
        schema.encode(X, unseen, impute=True)
    # stored and read back, the schema is the same; a record that is not one is refused
    again = Schema.from_record(json.loads(json.dumps(schema.record())), {})
    np.testing.assert_array_equal(again.encode(X, text, impute=True), schema.encode(X, text, impute=True))
    check_record(schema.record(), 5)
    with pytest.raises(DataError, match="encodes 5 model inputs, but the model takes 4"):
        check_record(schema.record(), 4)


def test_levels_of_numbers_sort_and_match_by_value():
    X = np.full((4, 1), np.nan)
    schema = Schema.fit(X, {0: np.array(["10", "4", "6.0", "4"])}, names=("cyl",), path="data")
    assert schema.columns[0].levels == ("4", "6.0", "10")
    np.testing.assert_array_equal(schema.encode(X[:3], {0: np.array(["4.0", "6", "1e1"])}),
                                  [[1, 0, 0], [0, 1, 0], [0, 0, 1]])
    # the training rows themselves may write one value two ways: one level, named by its first text (two levels
    # "6" and "6.0" were made, and "6.00" at prediction was refused as unseen)
    X = np.full((6, 1), np.nan)
    schema = Schema.fit(X, {0: np.array(["4", "6", "6.0", "8", "4.0", "6"])}, names=("cyl",), path="data")
    assert schema.columns[0].levels == ("4", "6", "8")
    np.testing.assert_array_equal(schema.encode(X[:4], {0: np.array(["6.0", "6.00", "4.0", "8"])}),
                                  [[0, 1, 0], [0, 1, 0], [1, 0, 0], [0, 0, 1]])


# ------------------------------------------------------------------------------------------------ the README's fits


def test_the_readme_commands_fit_penguins(penguins):
    """Every column but the target is a feature: island and sex one-hot (and species, for the body mass), the
    measurements and the year numbers; the missing cells are imputed, a row without its target left out."""
    species = read_run(penguins["species"])
    assert species.data["feature_names"] == [
        "island=Biscoe", "island=Dream", "island=Torgersen", "bill_length_mm", "bill_depth_mm", "flipper_length_mm",
        "body_mass_g", "sex=female", "sex=male", "year"]
    assert species.model.sizes[0] == 10 and species.data["labels"]["classes"] == ["Adelie", "Chinstrap", "Gentoo"]
    kinds = {c["name"]: c["kind"] for c in species.data["schema"]["columns"]}
    assert kinds == {"island": "categorical", "bill_length_mm": "numeric", "bill_depth_mm": "numeric",
                     "flipper_length_mm": "numeric", "body_mass_g": "numeric", "sex": "categorical",
                     "year": "numeric"}
    assert species.metrics["test"]["accuracy"] >= 0.9
    assert "penguins.csv: 8 missing cells imputed" in penguins["species_stderr"]
    assert "'island', 'sex' one-hot (3, 2 levels)" in penguins["species_stderr"]

    mass = read_run(penguins["mass"])
    assert mass.data["feature_names"][:3] == ["species=Adelie", "species=Chinstrap", "species=Gentoo"]
    assert mass.data["train"]["rows"] == 78 and mass.data["train"]["rows_dropped"] == 2
    assert mass.data["train"]["dropped_lines"] == [5, 14]
    assert ("penguins.csv: 2 rows with a missing target left out (lines 5, 14): a target is never imputed"
            in penguins["mass_stderr"])
    for name in ("mass", "mass50"):
        run = read_run(penguins[name])
        # clearly better than the constant predictor (the training mean)
        assert run.metrics["test"]["rmse"] < 0.6 * run.metrics["constant"]["rmse"], name


def test_predict_reads_columns_in_any_order_with_or_without_the_target(penguins):
    d, run = penguins["dir"], penguins["species"]
    rows = penguins_rows()
    expected = predictions(run, penguins["data"])
    assert len(expected["row"]) == 80  # every row predicted, its gaps imputed as in the fit
    order = ["year", "sex", "body_mass_g", "flipper_length_mm", "species", "bill_depth_mm", "island",
             "bill_length_mm"]
    shuffled = predictions(run, write_rows(d / "shuffled.csv", rows, order=order))
    features = predictions(run, write_rows(d / "features.csv", rows, order=[c for c in order if c != "species"]))
    for got in (shuffled, features):
        for name in ("probabilities", "entropy_total", "entropy_epistemic"):
            assert np.array_equal(got[name], expected[name]), name
        assert np.array_equal(got["predicted"], expected["predicted"])
    assert "target" not in features and list(shuffled["target"]) == [r[0] for r in rows]


def test_evaluate_scores_the_run_and_other_files(penguins):
    done = invoke("evaluate", penguins["species"], "--json")
    assert_ok(done)
    stored = read_run(penguins["species"]).metrics["test"]
    assert json.loads(done.stdout)["metrics"]["test"]["nll"] == pytest.approx(stored["nll"], rel=1e-12)
    done = invoke("evaluate", penguins["mass"], penguins["data"], "--json")
    assert_ok(done)
    assert json.loads(done.stdout)["metrics"]["test"]["n"] == 78
    assert "2 rows with a missing target left out (lines 5, 14)" in done.stderr


def test_an_unseen_level_is_refused_naming_file_line_column_and_level(penguins):
    rows = penguins_rows(5, seed=3, gaps=False)
    rows[1][1] = "Atlantis"
    data = write_rows(penguins["dir"] / "atlantis.csv", rows)
    message = (f"slang: error: {data}:3: column 1 ('island'): level 'Atlantis' was not seen in training (known "
               "levels: Biscoe, Dream, Torgersen)")
    for command in (["predict", penguins["species"], data, "-o", penguins["dir"] / "a.csv"],
                    ["evaluate", penguins["species"], data]):
        stderr = assert_error(invoke(*command), 1)
        assert stderr.splitlines() == [message]
    assert not (penguins["dir"] / "a.csv").exists()
    result = slangcli.load(penguins["species"])
    frame = pytest.importorskip("pandas").DataFrame(rows, columns=COLUMNS).drop(columns="species")
    with pytest.raises(DataError, match=re.escape("X: row 1, column 'island': level 'Atlantis' was not seen in "
                                                  "training (known levels: Biscoe, Dream, Torgersen)")):
        result.predict(frame)


def test_fitresult_predict_on_a_dataframe_with_text_equals_slang_predict(penguins):
    """The file as a DataFrame (its numbers parsed as slang parses them, ``NA`` missing): text columns and gaps
    included, ``FitResult.predict`` gives ``slang predict``'s numbers bit for bit."""
    frame = frame_of(penguins["data"])
    for name in ("species", "mass50"):
        expected = predictions(penguins[name], penguins["data"])
        got = slangcli.load(penguins[name]).predict(frame[list(reversed(frame.columns))])
        for key, values in got.arrays.items():
            if key == "predicted":
                assert list(values) == list(expected[key].astype(str))
            else:
                assert np.array_equal(values, expected[key]), (name, key)
    with pytest.raises(DataError, match=r"X: row 3, column 'bill_length_mm': missing value"):
        slangcli.load(penguins["species"]).predict(frame, missing="error")


def test_the_command_line_and_python_fit_the_same_posterior_from_text_columns(tmp_path):
    """``slang fit`` on a CSV file and ``slangcli.fit`` on the same rows as a DataFrame with text columns: the same
    schema and the same posterior, bit for bit."""
    data = write_rows(tmp_path / "penguins.csv", penguins_rows(gaps=False))
    frame = frame_of(data)
    for target, extra in (("species", []), ("body_mass_g", ["--hidden", "8"])):
        out = tmp_path / f"{target}.h5"
        assert_ok(invoke("fit", data, "--target", target, "--epochs", "5", "-o", out, *extra))
        cli = read_run(out)
        api = slangcli.fit(frame.drop(columns=target), frame[target], epochs=5, hidden=tuple(map(int, extra[1:]))).run
        assert api.data["feature_names"] == cli.data["feature_names"]
        # (their positions differ: the file's columns count the target, the DataFrame's do not)
        assert ([{**c, "position": None} for c in api.data["schema"]["columns"]]
                == [{**c, "position": None} for c in cli.data["schema"]["columns"]])
        for name, values in cli.posterior.stored_arrays().items():
            assert np.array_equal(api.posterior.stored_arrays()[name], values), (target, name)
        for name in ("feature_mean", "feature_scale"):
            assert np.array_equal(api.arrays[name], cli.arrays[name])


# ------------------------------------------------------------------------------------------------ kinds of columns


def test_booleans_are_one_column(tmp_path):
    rng = np.random.default_rng(1)
    words = ["yes", "no", "Yes", "NO"]
    lines = ["x,smoker,y"] + [f"{rng.normal():.3f},{words[i % 4]},{'ab'[i % 2]}" for i in range(30)]
    data = tmp_path / "smokers.csv"
    data.write_text("\n".join(lines) + "\n")
    out = tmp_path / "run.h5"
    assert_ok(invoke("fit", data, "--epochs", "2", "-o", out))
    run = read_run(out)
    assert run.data["feature_names"] == ["x", "smoker"]
    assert run.data["schema"]["columns"][1] == {"name": "smoker", "position": 1, "kind": "boolean", "fill": 0.0}
    new = tmp_path / "new.csv"
    new.write_text("x,smoker\n0.5,TRUE\n0.5,yes\n0.5,No\n")
    got = predictions(out, new)
    assert np.array_equal(got["probabilities"][0], got["probabilities"][1])
    assert not np.array_equal(got["probabilities"][0], got["probabilities"][2])
    new.write_text("x,smoker\n0.5,yes\n0.5,maybe\n")
    stderr = assert_error(invoke("predict", out, new, "-o", "-"), 1)
    assert stderr.splitlines() == [f"slang: error: {new}:3: column 1 ('smoker'): 'maybe' is not a boolean (the "
                                   "column holds true and false, or yes and no)"]


def test_categorical_makes_an_integer_column_categories_matched_by_value(tmp_path):
    rng = np.random.default_rng(2)
    cylinders = [4, 6, 8, 10]
    lines = ["cyl,weight,mpg"] + [f"{cylinders[i % 4]},{rng.normal(3, 0.5):.2f},{rng.normal(20, 4):.1f}"
                                  for i in range(40)]
    data = tmp_path / "cars.csv"
    data.write_text("\n".join(lines) + "\n")
    out = tmp_path / "run.h5"
    assert_ok(invoke("fit", data, "--categorical", "cyl", "--likelihood", "gaussian", "--epochs", "2", "-o", out))
    run = read_run(out)
    # the levels in numeric order, not as text ("10" before "4")
    assert run.data["feature_names"] == ["cyl=4", "cyl=6", "cyl=8", "cyl=10", "weight"]
    new = tmp_path / "new.csv"
    new.write_text("cyl,weight\n6,3.1\n6.0,3.1\n8,3.1\n")
    got = predictions(out, new)
    assert got["mean"][0] == got["mean"][1] != got["mean"][2]
    new.write_text("cyl,weight\n5,3.1\n")
    assert_error(invoke("predict", out, new, "-o", "-"), 1,
                 f"{new}:2: column 0 ('cyl'): level '5' was not seen in training (known levels: 4, 6, 8, 10)")
    # without --categorical the column is a number
    assert_ok(invoke("fit", data, "--likelihood", "gaussian", "--epochs", "2", "-o", out))
    assert read_run(out).data["feature_names"] == ["cyl", "weight"]


def test_a_column_of_numbers_and_text_is_refused_naming_both(tmp_path):
    data = tmp_path / "typo.csv"
    data.write_text("a,b,y\n1,2.5,0\n3,4.5,1\n5,x,0\n")
    stderr = assert_error(invoke("fit", data, "-o", tmp_path / "r.h5"), 1)
    assert stderr.splitlines() == [
        f"slang: error: {data}:4: column 1 ('b'): cannot parse 'x' as a number (the column's other cells are "
        "numbers: '2.5' on line 2; a missing-value token goes in --na-values; --categorical b reads every cell of "
        "the column as a category)"]
    assert_ok(invoke("fit", data, "--categorical", "b", "--epochs", "2", "-o", tmp_path / "r.h5"))
    assert read_run(tmp_path / "r.h5").data["feature_names"] == ["a", "b=2.5", "b=4.5", "b=x"]


def test_a_headerless_file_with_a_text_column(tmp_path):
    rows = penguins_rows(45, seed=4, gaps=False)
    # the island, the measurements, then the species last (the default target)
    data = write_rows(tmp_path / "bare.csv", rows, order=COLUMNS[1:6] + ("species",), header=False)
    out = tmp_path / "run.h5"
    assert_ok(invoke("fit", data, "--epochs", "3", "-o", out))
    run = read_run(out)
    assert run.data["train"]["header"] is False
    assert run.data["feature_names"] == ["x0=Biscoe", "x0=Dream", "x0=Torgersen", "x1", "x2", "x3", "x4"]
    expected = predictions(out, data)
    features = write_rows(tmp_path / "features.csv", rows, order=COLUMNS[1:6], header=False)
    assert np.array_equal(predictions(out, features)["probabilities"], expected["probabilities"])


# ------------------------------------------------------------------------------------------------ missing values


def test_imputed_values_are_stored_and_applied(penguins):
    """The values a missing cell gets are the training rows' mean and most frequent level, stored in the run; a row
    with a gap is predicted as the same row with the value written in."""
    run = read_run(penguins["species"])
    train = run.arrays["train_index"]
    rows = penguins_rows()
    columns = {c["name"]: c for c in run.data["schema"]["columns"]}
    present = [float(rows[i][2]) for i in train if rows[i][2] != "NA"]
    assert columns["bill_length_mm"]["fill"] == pytest.approx(np.mean(present), rel=1e-12)
    sexes = [rows[i][6] for i in train if rows[i][6] != "NA"]
    assert columns["sex"]["fill"] == max(("female", "male"), key=lambda s: (sexes.count(s), s == "female"))
    gap = [list(rows[0]), list(rows[0])]
    gap[0][2], gap[0][6] = "NA", "NA"
    gap[1][2], gap[1][6] = repr(columns["bill_length_mm"]["fill"]), columns["sex"]["fill"]
    got = predictions(penguins["species"], write_rows(penguins["dir"] / "gap.csv", gap))
    assert np.array_equal(got["probabilities"][0], got["probabilities"][1])
    # --missing keep (predict's default for a fit that did not impute) leaves the row empty instead
    kept = predictions(penguins["species"], penguins["dir"] / "gap.csv", "--missing", "keep")
    assert np.isnan(kept["probabilities"][0]).all() and not np.isnan(kept["probabilities"][1]).any()


def test_predict_makes_a_prediction_for_a_row_without_its_target(penguins):
    got = predictions(penguins["mass"], penguins["data"])
    assert len(got["mean"]) == 80 and not np.isnan(got["mean"]).any()
    assert np.isnan(got["target"][[3, 12]]).all() and not np.isnan(np.delete(got["target"], [3, 12])).any()


def test_impute_for_a_fit_that_did_not_impute(tmp_path):
    """A fit with --missing drop stores the values to impute too: predict and evaluate impute when told."""
    data = write_rows(tmp_path / "penguins.csv", penguins_rows())
    out = tmp_path / "run.h5"
    assert_ok(invoke("fit", data, "--target", "species", "--missing", "drop", "--epochs", "2", "-o", out))
    assert read_run(out).data["train"]["rows_dropped"] == 4
    assert len(predictions(out, data)["row"]) == 80  # (keep: four rows left empty)
    got = predictions(out, data, "--missing", "impute")
    assert not np.isnan(got["probabilities"]).any()
    assert_ok(invoke("evaluate", out, data, "--missing", "impute"))


# ------------------------------------------------------------------------------------------------ run files


def as_format_1_3(path) -> None:
    """The run file at ``path`` made what slang's format 1.3 wrote for the same fit: no data schema, no
    ``categorical`` data option, every group's version 1.3."""
    with h5py.File(path, "r+") as f:
        del f["data/schema"]
        provenance = json.loads(f["data"].attrs["provenance"])
        del provenance["options"]["categorical"]
        f["data"].attrs["provenance"] = json.dumps(provenance, sort_keys=True)

        def downgrade(name, obj):
            if "encoding-version" in obj.attrs:
                obj.attrs["encoding-version"] = "1.3"

        f.attrs["encoding-version"] = "1.3"
        f.visititems(downgrade)


@pytest.mark.parametrize("extra", [[], ["--drop-columns", "a", "--missing", "drop"]], ids=["plain", "dropped"])
def test_a_format_1_3_run_file_reads_and_predicts_as_before(make_csv, tmp_path, extra):
    data = make_csv("data.csv")
    new, old = tmp_path / "new.h5", tmp_path / "old.h5"
    assert_ok(invoke("fit", data, "--test-fraction", "0.25", "--epochs", "2", "-o", new, *extra))
    old.write_bytes(new.read_bytes())
    as_format_1_3(old)
    run = read_run(old)
    assert "schema" not in run.data and run.data["feature_names"] == read_run(new).data["feature_names"]
    for name, values in predictions(new, data).items():
        assert np.array_equal(predictions(old, data)[name], values), name
    scores = [json.loads(invoke("evaluate", path, "--json").stdout)["metrics"] for path in (new, old)]
    assert scores[0] == scores[1]
    stderr = assert_error(invoke("predict", old, data, "-o", "-", "--missing", "impute"), 1)
    assert "the run stores none (it was written before slang imputed missing values" in stderr


def test_a_schema_that_is_not_one_is_refused(penguins, tmp_path):
    path = tmp_path / "bad.h5"
    path.write_bytes(penguins["species"].read_bytes())
    with h5py.File(path, "r+") as f:
        record = json.loads(f["data/schema/json"][()])
        record["columns"][0]["levels"] = record["columns"][0]["levels"][:2]
        del f["data/schema/json"]
        f["data/schema"].create_dataset("json", data=json.dumps(record))
    with pytest.raises(FormatError, match=re.escape(f"{path}: /data/schema encodes 9 model inputs, but the model "
                                                    "takes 10")):
        read_run(path)


def test_a_test_file_with_a_level_the_training_file_lacks(tmp_path):
    train = write_rows(tmp_path / "train.csv", penguins_rows(30, gaps=False))
    rows = penguins_rows(6, seed=5, gaps=False)
    rows[3][6] = "unknown"
    test = write_rows(tmp_path / "test.csv", rows)
    stderr = assert_error(invoke("fit", train, "--test", test, "--target", "species", "-o", tmp_path / "r.h5"), 1)
    assert stderr.splitlines() == [f"slang: error: {test}:5: column 6 ('sex'): level 'unknown' was not seen in "
                                   "training (known levels: female, male)"]


# ------------------------------------------------------------------------------------- slang fit --test, by name


def _write(path, header, rows):
    path.write_text(",".join(header) + "\n" + "".join(",".join(f"{v:.6f}" for v in r) + "\n" for r in rows))


@pytest.fixture
def shuffled_test(tmp_path):
    """A training file ``a,b,c,y`` whose target depends on ``a`` alone, and test files of the same rows: in the
    training file's column order, with the columns reversed (target first), and without a header row."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((160, 3))
    y = 3.0 * X[:, 0] + 0.1 * rng.standard_normal(160)
    _write(tmp_path / "train.csv", ["a", "b", "c", "y"], np.column_stack([X[:120], y[:120]]))
    test = np.column_stack([X[120:], y[120:]])
    _write(tmp_path / "same.csv", ["a", "b", "c", "y"], test)
    _write(tmp_path / "reversed.csv", ["y", "c", "b", "a"], test[:, ::-1])
    (tmp_path / "bare.csv").write_text("".join(",".join(f"{v:.6f}" for v in r) + "\n" for r in test))
    return tmp_path


def _fit_test_scores(data, test, *extra):
    out = data / f"{test}.h5"
    result = CliRunner().invoke(main, ["fit", str(data / "train.csv"), "--test", str(data / test), "--epochs", "3",
                                       "-o", str(out), *extra])
    assert_ok(result)
    return read_run(out).metrics["test"], result.stderr


def test_a_test_file_is_matched_to_the_training_file_by_its_header_names(shuffled_test):
    """`slang fit --test` reads the test file's columns by name, as `slang evaluate` does: the same rows with the
    columns in another order (the target first) score exactly as in the training file's order. (Read by position,
    the reversed file's target column was a feature and a feature the target: RMSE 6.1 against 0.43.)"""
    same, _ = _fit_test_scores(shuffled_test, "same.csv")
    reversed_, err = _fit_test_scores(shuffled_test, "reversed.csv")
    assert reversed_ == same
    assert "feature columns matched by name" in err
    # evaluate reads the reversed file to the same scores
    result = CliRunner().invoke(main, ["evaluate", str(shuffled_test / "reversed.csv.h5"),
                                       str(shuffled_test / "reversed.csv"), "--json"])
    assert_ok(result)
    assert json.loads(result.stdout)["metrics"]["test"]["rmse"] == same["rmse"]
    # a file without a header row is read by position, as before
    bare, _ = _fit_test_scores(shuffled_test, "bare.csv")
    assert bare == same


def test_a_named_test_file_beside_a_headerless_training_file_is_said_to_be_read_by_position(tmp_path):
    """The training file has no header row, so its features have no names to match; a test file with one was read
    by position without a word (its columns in another order: wrong stored test scores), where evaluate and predict
    say that the names are not used. From Python, X_test as a DataFrame beside X as an array warns alike."""
    import warnings

    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(12)
    X = rng.normal(size=(80, 3))
    y = 2 * X[:, 0] + 0.5 * X[:, 1] + 0.3 * rng.normal(size=80)
    np.savetxt(tmp_path / "train.csv", np.column_stack([X, y])[:60], delimiter=",", fmt="%.6f")
    test = pd.DataFrame(X[60:], columns=["x0", "x1", "x2"]).assign(y=y[60:])
    test.to_csv(tmp_path / "test.csv", index=False)
    result = CliRunner().invoke(main, ["fit", str(tmp_path / "train.csv"), "--test", str(tmp_path / "test.csv"),
                                       "--method", "exact-full", "-o", str(tmp_path / "r.h5")])
    assert_ok(result)
    assert (f"slang: {tmp_path / 'test.csv'}: the column names are not used: the training file "
            f"{tmp_path / 'train.csv'} has no header row, so the columns are taken in its order"
            in result.stderr.splitlines())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        slangcli.fit(X[:60], y[:60], X_test=test[["x0", "x1", "x2"]], y_test=y[60:], method="exact-full")
    assert [str(w.message) for w in caught] == [
        "X_test: the column names are not used: the run knows its features by position only (it was fitted "
        "without names), so the columns are taken in the training data's order"]
    assert caught[0].filename == __file__


def test_a_test_files_label_column_is_found_by_name_wherever_it_stands(tmp_path):
    """A test file with its column of text labels first was read by position: the labels went to a feature column
    of numbers ("cannot parse 'x' as a number"), where evaluate of the same file matched it by name."""
    (tmp_path / "train.csv").write_text("a,b,label\n" + "".join(f"{i},{(3 * i) % 7},{'xy'[i % 2]}\n"
                                                                for i in range(12)))
    (tmp_path / "test.csv").write_text("label,a,b\nx,1.5,3\ny,3,1\n")
    (tmp_path / "bare.csv").write_text("1.5,3,x\n3,1,y\n")  # no header row: by position
    scores = {}
    for test in ("test.csv", "bare.csv"):
        result = CliRunner().invoke(main, ["fit", str(tmp_path / "train.csv"), "--test", str(tmp_path / test),
                                           "--epochs", "2", "-o", str(tmp_path / f"{test}.h5"), "--json"])
        assert_ok(result)
        scores[test] = json.loads(result.stdout)["metrics"]["test"]
    assert scores["test.csv"] == scores["bare.csv"]
    # a test file's column of text that the training file lacks is named as such, not as a cell that is no number
    (tmp_path / "id.csv").write_text("a,b,id,label\n1.5,3,id1,x\n3,1,id2,y\n")
    (tmp_path / "text.csv").write_text("a,b,label\nfoo,3,x\nbar,1,y\n")
    for test, says in (("id.csv", "the header row has feature column(s) 'id' the training data do not"),
                       ("text.csv", "text.csv:2: column 0 ('a'): cannot parse 'foo' as a number (the column is numeric "
                                    "in the training data)")):
        result = CliRunner().invoke(main, ["fit", str(tmp_path / "train.csv"), "--test", str(tmp_path / test),
                                           "--epochs", "2", "-o", str(tmp_path / "r.h5")])
        assert_error(result, 1, says)


def test_a_test_file_without_a_training_feature_is_refused_naming_it(shuffled_test):
    _write(shuffled_test / "renamed.csv", ["a", "b", "d", "y"], np.zeros((3, 4)))
    result = CliRunner().invoke(main, ["fit", str(shuffled_test / "train.csv"), "--test",
                                       str(shuffled_test / "renamed.csv"), "--epochs", "1",
                                       "-o", str(shuffled_test / "r.h5")])
    assert_error(result, 1, "renamed.csv", "lacks the training data's feature column(s) 'c'", "'d'")
    assert not (shuffled_test / "r.h5").exists()


def test_python_categorical_equals_the_command_lines(tmp_path):
    """``slangcli.fit(frame, y, categorical=["zone"])`` and ``slang fit FILE --categorical zone`` on the same rows:
    the same schema (levels "1", "2", "3") and the same posterior, bit for bit; predictions read the column as
    categories, from integers or floats alike, and refuse a level unseen in training."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(4)
    zone = rng.integers(1, 4, 90)
    x = rng.standard_normal(90)
    y = np.where(zone == 2, 2.0, -1.0) + x + 0.1 * rng.standard_normal(90)
    data = tmp_path / "zones.csv"
    data.write_text("x,zone,y\n" + "".join(f"{a:.6f},{z},{t:.6f}\n" for a, z, t in zip(x, zone, y)))
    out = tmp_path / "zones.h5"
    assert_ok(invoke("fit", data, "--categorical", "zone", "--epochs", "5", "-o", out))
    cli = read_run(out)
    frame = pd.DataFrame({"x": np.round(x, 6), "zone": zone})
    result = slangcli.fit(frame, np.round(y, 6), categorical=["zone"], epochs=5)
    api = result.run
    assert api.data["feature_names"] == cli.data["feature_names"] == ["x", "zone=1", "zone=2", "zone=3"]
    for name, values in cli.posterior.stored_arrays().items():
        assert np.array_equal(api.posterior.stored_arrays()[name], values), name
    assert api.data["options"]["categorical"] == "zone"
    as_ints = result.predict(frame.head(5)).mean
    as_floats = result.predict(frame.head(5).astype({"zone": float})).mean
    np.testing.assert_array_equal(as_ints, as_floats)
    with pytest.raises(DataError, match="'4'"):
        result.predict(pd.DataFrame({"x": [0.0], "zone": [4]}))
    # positions and a comma-separated string say the same; a name X does not have is refused, naming the columns
    by_position = slangcli.fit(frame, np.round(y, 6), categorical="1", epochs=5).run
    assert np.array_equal(by_position.posterior.mean, api.posterior.mean)
    with pytest.raises(DataError, match="X: categorical 'area' names no column"):
        slangcli.fit(frame, y, categorical=["area"], epochs=1)


def test_two_inputs_of_one_name_are_refused(tmp_path):
    """A category 'a' with the level 'b' beside a column named 'a=b' gave two features named 'a=b': a prediction
    file's or a DataFrame's columns, matched by name, could not tell them apart."""
    from slangcli.cli import main

    data = tmp_path / "names.csv"
    data.write_text("a,a=b,y\nb,1,0\nc,2,1\nb,3,0\nc,4,1\n")
    done = CliRunner().invoke(main, ["fit", str(data), "-o", str(tmp_path / "r.h5"), "--epochs", "1"])
    assert done.exit_code == 1 and not (tmp_path / "r.h5").exists()
    assert done.stderr.splitlines()[-1] == (f"slang: error: {data}: the level 'b' of column 'a' and column 'a=b' "
                                            "would both be the model's input 'a=b'; rename the column")
