"""``slangcli.data.task``: the statement of the inferred task, the integer-target hint, the row-identifier warning."""

from __future__ import annotations

import numpy as np
import pytest

from types import SimpleNamespace

from slangcli.data.task import (decimal_comma_indicators, decimal_commas, describe, identifier_columns,
                                integer_target_hint, one_level_per_row)


def features(n=100, seed=0):
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.normal(size=n), rng.integers(1, 11, size=n), rng.integers(0, 10**4, size=n)])


@pytest.mark.parametrize(
    "column, kind",
    [
        (lambda n, rng: rng.permutation(n), "row numbers"),  # a row count, shuffled
        (lambda n, rng: np.arange(1, n + 1), "row numbers"),
        (lambda n, rng: rng.choice(10**7, size=n, replace=False) + 10**5, "distinct integers"),
        # a sample id repeated for a few re-measured samples is still an id
        (lambda n, rng: np.repeat(rng.choice(10**7, size=n, replace=False), 1)[np.r_[0:n - 5, 0:5]],
         "distinct integers"),
    ],
)
def test_identifier_columns_are_named(column, kind):
    X = features()
    X = np.column_stack([X[:, :1], column(len(X), np.random.default_rng(1)), X[:, 1:]])
    [warning] = identifier_columns(X, ("a", "id", "b", "c"))
    assert warning.startswith(f"warning: feature 'id' looks like a row identifier ({kind} from ")
    assert warning.endswith("and is used as a feature; --drop-columns id leaves it out")
    # a file without a header: the option takes the column's index
    [warning] = identifier_columns(X, ("x0", "x1", "x2", "x3"))
    assert warning.endswith("--drop-columns 1 leaves it out")


@pytest.mark.parametrize(
    "column",
    [
        lambda n, rng: rng.integers(0, 10**4, size=n),  # many repeats: a count, not an id
        lambda n, rng: rng.normal(size=n) * 1e6,  # not integers
        lambda n, rng: rng.choice(10**4, size=n, replace=False),  # distinct, but range under 100 per row
        lambda n, rng: rng.choice(3 * n, size=n, replace=False),  # distinct from near 0, but a third of the range
        lambda n, rng: 1950 + rng.choice(int(1.5 * n), size=n, replace=False),  # dense, but far from 0 (years)
        lambda n, rng: np.sort(rng.choice(int(1.5 * n), size=n, replace=False)),  # days with gaps: no index
        lambda n, rng: rng.choice(10**6, size=n, replace=False) * 1e12,  # magnitudes beyond exact integers
    ],
)
def test_other_columns_are_not_identifiers(column):
    X = np.column_stack([features(), column(100, np.random.default_rng(2))])
    assert identifier_columns(X, ("a", "b", "c", "d")) == []


@pytest.mark.parametrize("name", ["", "Unnamed: 0", "index"])
def test_a_column_named_as_a_pandas_index_is_an_identifier_at_any_density(name):
    """pandas writes its index with an empty header cell (read back as "Unnamed: 0"): distinct whole numbers under
    such a name are row numbers however few of the table's rows are there (10 % of them here)."""
    rng = np.random.default_rng(3)
    X = np.column_stack([rng.permutation(1000)[:100], features()])
    [warning] = identifier_columns(X, (name, "a", "b", "c"), positions=[0, 1, 2, 3])
    assert "(row numbers from " in warning
    option = "0" if not name else "'Unnamed: 0'" if name == "Unnamed: 0" else name
    assert warning.endswith(f"--drop-columns {option} leaves it out")
    assert identifier_columns(X, ("id", "a", "b", "c")) == []  # (named otherwise, 10 % is not enough to tell)


@pytest.mark.parametrize("split", [[], ["--test-fraction", "0.3"], ["--calibrate", "0.4"], ["--missing", "drop"]])
def test_an_index_is_judged_on_every_row_of_the_file(tmp_path, split):
    """A file's index is consecutive over its rows and not over a split's part of them, and it counts the data rows
    where some are left out for a missing value: a headerless file written with its index was fitted with the index
    as a feature, without a word, once a split or --missing drop took some rows."""
    from click.testing import CliRunner

    from slangcli.cli import main

    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 2))
    rows = [f"{i},{a:.4f},{b:.4f},{int(a > 0)}\n" for i, (a, b) in enumerate(X)]
    for i in (5, 50, 90):  # (a missing value: --missing drop leaves the row out, a gap in the index)
        rows[i] = f"{i},,{X[i, 1]:.4f},{int(X[i, 0] > 0)}\n"
    (tmp_path / "indexed.csv").write_text("".join(rows))
    done = CliRunner().invoke(main, ["fit", str(tmp_path / "indexed.csv"), *split, "--epochs", "1", "-o",
                                     str(tmp_path / "r.h5"), *([] if "--missing" in split else ["--missing",
                                                                                                "impute"])])
    assert done.exit_code == 0, done.output
    assert "warning: feature 'x0' looks like a row identifier (row numbers from 0 to 119)" in done.stderr


def test_an_index_is_judged_on_every_row_given_from_python():
    """slangcli.fit with calibrate judged the rows it kept, the command line every row of the file."""
    import slangcli

    rng = np.random.default_rng(0)
    X = np.column_stack([np.arange(120.0), rng.normal(size=(120, 2))])
    y = (X[:, 1] > 0).astype(int)
    with pytest.warns(UserWarning, match=r"feature 'x0' looks like a row identifier \(row numbers from 0 to 119\)"):
        slangcli.fit(X, y, calibrate=0.4, epochs=1)


def test_a_shuffled_part_of_an_index_is_one_in_a_headerless_file_only():
    """The shuffled training part of a split of a headerless file written with its index (70 % of 0..N-1, in no
    order) is an index; a named column as dense (a day or rank of a shuffled split) and days with gaps in order,
    ascending or descending, are not."""
    rng = np.random.default_rng(1)
    X = features()
    part = rng.permutation(int(len(X) / 0.7))[:len(X)].astype(float)
    [warning] = identifier_columns(np.column_stack([X[:, :1], part, X[:, 1:]]), ("x0", "x1", "x2", "x3"))
    assert "feature 'x1' looks like a row identifier (row numbers from " in warning
    assert identifier_columns(np.column_stack([X[:, :1], part, X[:, 1:]]), ("a", "day", "b", "c")) == []
    for days in (np.sort(part), np.sort(part)[::-1]):
        assert identifier_columns(np.column_stack([X[:, :1], days, X[:, 1:]]), ("x0", "x1", "x2", "x3")) == []


def test_small_files_are_not_judged():
    assert identifier_columns(np.arange(19.0)[:, None] * 1e5, ("id",)) == []


def test_integer_target_hint():
    hint = integer_target_hint([3.0, 4.0, 5.0, 6.0, 7.0, 8.0], "quality")
    assert hint == ("hint: 'quality' has 6 integer values (3 to 8), fitted as 6 unordered classes; if it measures "
                    "a quantity, --likelihood gaussian fits it as regression")
    assert integer_target_hint([0.0, 1.0, 2.0, 3.0], 4) is None  # a handful
    assert integer_target_hint(list("abcdef"), "y") is None
    assert integer_target_hint(None, "y") is None
    assert "column 4 has 5 integer values (1 to 5)" in integer_target_hint([1.0, 2.0, 3.0, 4.0, 5.0], 4)


def test_a_regression_of_many_whole_numbers_is_hinted_to_be_classes_perhaps(tmp_path):
    """A target of 200 integer labels was fitted as a regression with no word but the general advice; the only
    hint pointed the other way (--likelihood gaussian). Past 50 values auto still fits a regression, and says how
    to fit classes; a target with a fraction gets no such hint."""
    from click.testing import CliRunner

    from slangcli.cli import main

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 2))
    label = rng.integers(0, 200, size=400)
    np.savetxt(tmp_path / "c.csv", np.column_stack([X, label]), delimiter=",", header="a,b,label", comments="",
               fmt="%g")
    done = CliRunner().invoke(main, ["fit", str(tmp_path / "c.csv"), "--epochs", "1", "-o", str(tmp_path / "c.h5")])
    assert done.exit_code == 0, done.stderr
    assert "slang: hint: 'label' holds whole numbers only (0 to 199), more distinct values than auto takes for " \
           "classes, fitted as a regression; if they are class labels, --likelihood categorical fits them as " \
           "classes" in done.stderr, done.stderr
    np.savetxt(tmp_path / "r.csv", np.column_stack([X, label + 0.5]), delimiter=",", header="a,b,y", comments="",
               fmt="%g")
    done = CliRunner().invoke(main, ["fit", str(tmp_path / "r.csv"), "--epochs", "1", "-o", str(tmp_path / "r.h5")])
    assert done.exit_code == 0 and "hint" not in done.stderr, done.stderr
    # whole numbers that cannot be class codes (prices in whole units, a negative balance): no such hint
    for values in (100_000 + 250 * label, label - 100):
        np.savetxt(tmp_path / "q.csv", np.column_stack([X, values]), delimiter=",", header="a,b,y", comments="",
                   fmt="%d")
        done = CliRunner().invoke(main, ["fit", str(tmp_path / "q.csv"), "--epochs", "1", "-o", str(tmp_path / "q.h5")])
        assert done.exit_code == 0 and "hint" not in done.stderr, done.stderr


def test_describe_names_every_part_and_the_options():
    data = {"train": {"target": "y", "rows_dropped": 3}, "test": {"source": "file", "rows_dropped": 1},
            "targets": {"likelihood": "gaussian"}, "standardize": True}
    arrays = {"target_mean": np.array([5.5]), "target_scale": np.array([0.75])}
    first, second = describe(data, arrays, "gaussian", 11, 651)
    assert first == ("task: regression (gaussian likelihood) of 'y', mean 5.5 and std 0.75 (fitted on the "
                     "standardised scale); 11 features, 651 parameters; features standardised (--no-standardize "
                     "keeps them as read); 3 rows with a missing value dropped (--missing drop); 1 row of the test "
                     "file with a missing value dropped (--missing drop)")
    assert second == "change the task with --likelihood, --target, --drop-columns or --columns"
    data = {"train": {"target": None}, "targets": {"classes": ["a", "b", "c"]}, "standardize": False}
    first, _ = describe(data, {}, "categorical", 4, 15)
    assert first == ("task: 3-class classification (categorical likelihood) of the target, classes a, b, c; "
                     "4 features, 15 parameters; features as read (--standardize scales them)")


def test_numbers_with_a_decimal_comma_are_named(tmp_path):
    """A ';'-separated file of numbers written 0,126 (as many locales write them) was read as one category per
    value (577 one-hot features, accuracy 0.49) and a target so written as 59 classes, without a word."""
    from click.testing import CliRunner

    from slangcli.cli import main
    from slangcli.data.schema import Column

    # (pandas writes small numbers with decimal="," in scientific notation: -2,59e-05; one such cell hid the column)
    columns = [Column("x1", 0, "categorical", ("-0,004", "1,250", ",5", "-2,592261998183278e-05")),
               Column("city", 1, "categorical", ("Paris", "Lyon")),
               Column("pair", 2, "categorical", ("1,2", "3")),  # not every value a number
               Column("x", 3, "numeric")]
    warnings = decimal_commas(columns, ["0,5", "1,25"])
    assert len(warnings) == 2
    assert warnings[0].startswith("warning: column 'x1' is read as a category of 4 levels, but its cells look like "
                                  "numbers with a decimal comma ('-0,004', ...); slang reads numbers with a decimal "
                                  "point")
    assert warnings[1].startswith("warning: the target is fitted as 2 classes, but its values look like numbers")
    assert decimal_commas([], ["a,b", "1,5"]) == [] and decimal_commas([], [0.5, 1.25]) == []
    rng = np.random.default_rng(0)
    rows = "".join(f"{a:.3f};{b:.3f};{a + b:.3f}\n".replace(".", ",") for a, b in rng.normal(size=(40, 2)))
    (tmp_path / "euro.csv").write_text("x1;x2;y\n" + rows)
    done = CliRunner().invoke(main, ["fit", str(tmp_path / "euro.csv"), "--epochs", "1", "-o",
                                     str(tmp_path / "e.h5")])
    said = [line for line in done.stderr.splitlines() if "decimal comma" in line]
    assert [line.split(": warning: ")[1].split(",")[0] for line in said] == [
        "column 'x1' is read as a category of 40 levels", "column 'x2' is read as a category of 40 levels",
        "the target is fitted as 40 classes"], done.stderr


def test_a_poor_fit_of_decimal_commas_read_as_categories_names_them_as_its_cause(tmp_path):
    """Numbers written with decimal commas become one-hot levels, rare 0/1 indicators: a poor fit of them named
    standardised indicators as its likely cause and advised --no-standardize, which does not help. It names the
    columns of decimal commas now."""
    assert decimal_comma_indicators(["bp=0,0017", "bp=-2,5e-05", "s2=1,5", "sex=a"]) == \
        "the one-hot levels of columns 'bp' and 's2'"
    assert decimal_comma_indicators(["sex=a", "sex=b", "bp=0,5"]) is None and decimal_comma_indicators([]) is None
    from slangcli.data.readers.text import _comma_hint

    assert _comma_hint("-2,59e-05") == ": a decimal comma, which slang does not read (write '-2.59e-05')"
    from click.testing import CliRunner

    from slangcli.cli import main

    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 3)) * 1e-2
    y = 150 + 5000 * X.sum(axis=1) + rng.normal(size=300) * 10
    rows = "".join(";".join(f"{v:.6g}".replace(".", ",") for v in x) + f";{t:.0f}\n" for x, t in zip(X, y))
    (tmp_path / "euro.csv").write_text("a;b;c;y\n" + rows)
    done = CliRunner().invoke(main, ["fit", str(tmp_path / "euro.csv"), "--test-fraction", "0.3", "--epochs", "5",
                                     "-o", str(tmp_path / "e.h5")])
    [poor] = [line for line in done.stderr.splitlines() if "likely cause" in line]
    assert "likely cause: the one-hot levels of columns 'a', 'b' and 'c', numbers with a decimal comma" in poor, poor


def test_a_category_or_a_target_of_one_value_a_row_is_named():
    levels = [f"{v:.3f} {v / 2:.3f}" for v in range(40)]  # two numbers the delimiter left in one cell
    columns = [SimpleNamespace(name="a", levels=levels), SimpleNamespace(name="b", levels=["x", "y"])]
    [warning] = one_level_per_row(columns, 40)
    assert warning.startswith("warning: column 'a' is read as a category of 40 levels in 40 training rows, about one "
                              "a row")
    [warning] = one_level_per_row((), 40, classes=[str(k) for k in range(38)])
    assert warning.startswith("warning: the target is fitted as 38 classes in 40 training rows")
    assert one_level_per_row(columns[1:], 40, classes=["x", "y"]) == []
    assert one_level_per_row(columns, 19) == []  # too few rows to tell


def test_an_identifier_without_a_usable_name_is_named_by_its_file_column():
    """A pandas index column (header cell '') got the advice "--drop-columns  leaves it out", which the option
    refuses; it is now its 0-based file column."""
    X = np.column_stack([features(), np.random.default_rng(1).choice(10**7, size=100, replace=False)])
    [warning] = identifier_columns(X, ("a", "b", "c", ""), positions=[1, 2, 3, 0])
    assert warning.endswith("--drop-columns 0 leaves it out")
