"""A user's own file, first try: synthetic files with the shape of two well-known public files, each fitted in the
one command the README documents, and the natural wrong first try answered with a message that names the fix.

- *Breast Cancer Wisconsin (Original)* (``breast-cancer-wisconsin.data``): no header; 11 columns: a sample id
  (integers around 1e6, a few repeated), nine cytology scores 1..10, the class 2 (benign) or 4 (malignant);
  699 rows, 16 of them with ``?`` for the sixth column (``bare_nuclei``, 0-based column 6).
- *Wine Quality, red* (``winequality-red.csv``): ``;``-separated, a quoted header, eleven physico-chemical
  measurements and the integer ``quality`` 3..8; 1599 rows.

The values are drawn here (seeded), with each column's scale like the public file's; nothing is downloaded.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from slangcli.cli import main
from slangcli.runfile.io import read_run

WINE_COLUMNS = ("fixed acidity", "volatile acidity", "citric acid", "residual sugar", "chlorides",
                "free sulfur dioxide", "total sulfur dioxide", "density", "pH", "sulphates", "alcohol")
# mean and standard deviation of each column of the public file, and the decimals it is written with
WINE_SCALES = ((8.32, 1.74, 1), (0.528, 0.179, 3), (0.271, 0.195, 2), (2.54, 1.41, 1), (0.0875, 0.047, 3),
               (15.9, 10.5, 0), (46.5, 32.9, 0), (0.99675, 0.00189, 5), (3.31, 0.154, 2), (0.658, 0.170, 2),
               (10.42, 1.07, 1))


README = Path(__file__).resolve().parents[1] / "README.md"


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def documented(data: str, files: Path, output: Path, *extra) -> list[str]:
    """The README's one command for the file ``data``, with the file and output paths put in ``files`` and at
    ``output``, and ``extra`` arguments appended."""
    [line] = [line for line in README.read_text().splitlines() if line.startswith(f"slang fit {data} ")]
    args = shlex.split(line)[2:]
    args = [str(files / a) if a == data else a for a in args]
    args[args.index("-o") + 1] = str(output)
    return [*args, *extra]


def breast_cancer_original(seed=0) -> str:
    rng = np.random.default_rng(seed)
    n = 699
    malignant = rng.random(n) < 241 / 699
    ids = rng.integers(61_634, 13_454_353, size=n)
    repeated = rng.choice(n, size=40, replace=False)
    ids[repeated[20:]] = ids[repeated[:20]]  # some samples were measured twice
    centre = np.where(malignant, 7.0, 2.0)[:, None]
    scores = np.clip(np.rint(centre + rng.normal(0.0, 1.8, size=(n, 9))), 1, 10).astype(int)
    cells = np.column_stack([ids, scores, np.where(malignant, 4, 2)]).astype(str)
    cells[rng.choice(n, size=16, replace=False), 6] = "?"
    return "".join(",".join(row) + "\n" for row in cells)


def wine_quality_red(seed=0) -> str:
    rng = np.random.default_rng(seed)
    n = 1599
    z = rng.normal(size=(n, len(WINE_COLUMNS)))
    # quality rises with alcohol and sulphates and falls with volatile acidity, as in the public file
    score = 5.64 + 0.42 * z[:, 10] - 0.30 * z[:, 1] + 0.18 * z[:, 9] - 0.10 * z[:, 6] + rng.normal(0.0, 0.55, n)
    quality = np.clip(np.rint(score), 3, 8).astype(int)
    lines = [";".join(f'"{name}"' for name in (*WINE_COLUMNS, "quality"))]
    for row, q in zip(z, quality):
        cells = [f"{max(mean + std * v, 0.0):.{decimals}f}" for v, (mean, std, decimals) in zip(row, WINE_SCALES)]
        lines.append(";".join([*cells, str(q)]))
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("own")
    (d / "breast-cancer-wisconsin.data").write_text(breast_cancer_original())
    (d / "winequality-red.csv").write_text(wine_quality_red())
    return d


def test_the_fixtures_have_the_public_files_shape(files):
    rows = (files / "breast-cancer-wisconsin.data").read_text().splitlines()
    assert len(rows) == 699 and {len(r.split(",")) for r in rows} == {11}
    assert sum(r.split(",")[6] == "?" for r in rows) == 16
    assert {r.split(",")[-1] for r in rows} == {"2", "4"}
    assert 1e5 < np.median([int(r.split(",")[0]) for r in rows]) < 1e7
    rows = (files / "winequality-red.csv").read_text().splitlines()
    assert len(rows) == 1600 and rows[0].startswith('"fixed acidity";"volatile acidity";')
    assert sorted({int(r.split(";")[-1]) for r in rows[1:]}) == [3, 4, 5, 6, 7, 8]


def test_breast_cancer_first_try_names_the_missing_value_option(files, tmp_path):
    data = files / "breast-cancer-wisconsin.data"
    done = invoke("fit", data, "-o", tmp_path / "bc.h5")
    assert done.exit_code == 1
    [line] = done.stderr.splitlines()
    assert re.fullmatch(rf"slang: error: {re.escape(str(data))}:\d+: column 6: missing value '\?' \(16 rows have a "
                        r"missing value; --missing drop leaves such rows out, --missing impute fills such cells "
                        r"in\)", line), line
    assert not (tmp_path / "bc.h5").exists()


def test_breast_cancer_second_try_names_the_id_column(files, tmp_path):
    data = files / "breast-cancer-wisconsin.data"
    done = invoke("fit", data, "-o", tmp_path / "bc.h5", "--missing", "drop", "--test-fraction", "0.3",
                  "--epochs", "1")
    assert done.exit_code == 0, done.output
    assert re.search(r"warning: feature 'x0' looks like a row identifier \(distinct integers from \d+ to \d+\) and "
                     r"is used as a feature; --drop-columns 0 leaves it out", done.stderr), done.stderr


def test_breast_cancer_in_one_command(files, tmp_path):
    run = tmp_path / "bc.h5"
    done = invoke("fit", *documented("breast-cancer-wisconsin.data", files, run, "--json"))
    assert done.exit_code == 0, done.output
    assert ("task: binary classification (bernoulli likelihood) of column 10, classes 2, 4; 9 features, "
            "10 parameters" in done.stderr)
    assert "16 rows with a missing value dropped (--missing drop)" in done.stderr
    assert "row identifier" not in done.stderr
    summary = json.loads(done.stdout)
    assert summary["metrics"]["test"]["accuracy"] >= 0.95
    stored = read_run(run)
    assert stored.data["train"]["rows_dropped"] == 16 and stored.data["train"]["columns_dropped"] == [0]
    assert stored.data["feature_names"] == [f"x{k}" for k in range(1, 10)]
    assert invoke("evaluate", run).exit_code == 0
    assert "columns dropped 0; 16 rows with a missing value dropped" in invoke("inspect", run).stderr


def test_breast_cancer_predict_file_without_a_header_has_one_reading(files, tmp_path):
    """The documented fit leaves out the id (column 0) of 11 columns. A headerless file of 10 columns that kept the
    class but not the id was read as the id and 9 features: the class taken for a feature, a real feature lost,
    every probability wrong, exit 0. 10 columns are both the training file's columns without the class and the 9
    features with the class: refused, naming both readings and --layout, which decides. Every other width has
    one reading."""
    run = tmp_path / "bc.h5"
    done = invoke("fit", *documented("breast-cancer-wisconsin.data", files, run, "--epochs", "5"))
    assert done.exit_code == 0, done.output
    rows = [line.split(",") for line in (files / "breast-cancer-wisconsin.data").read_text().splitlines()[:40]
            if "?" not in line]

    def predict(name, cells, *options):
        data = tmp_path / name
        data.write_text("".join(",".join(r) + "\n" for r in cells))
        return data, invoke("predict", run, data, "-o", tmp_path / f"{name}.csv", *options)

    def probabilities(name):
        lines = (tmp_path / f"{name}.csv").read_text().splitlines()
        return [line.split(",")[1:3] for line in lines[1:]]

    _, done = predict("full.data", rows)  # as the training file: 11 columns
    assert done.exit_code == 0, done.output
    expected = probabilities("full.data")
    data, done = predict("no-id.data", [r[1:] for r in rows])
    assert done.exit_code == 1
    assert done.stderr.splitlines() == [
        f"slang: error: {data}:1: 10 columns could be the training file's columns without the target (--layout "
        "full; column 0 ignored as in the fit) or the model's 9 features and the target (--layout features; the "
        "target in column 9); give --layout to say which"]
    assert not (tmp_path / "no-id.data.csv").exists()
    for name, cells, options in (("no-id.data", [r[1:] for r in rows], ["--layout", "features"]),
                                 ("no-class.data", [r[:-1] for r in rows], ["--layout", "full"]),
                                 ("features.data", [r[1:-1] for r in rows], [])):
        _, done = predict(name, cells, *options)
        assert done.exit_code == 0, done.output
        assert probabilities(name) == expected, name
    done = invoke("evaluate", run, tmp_path / "no-id.data", "--layout", "features", "--json")
    assert done.exit_code == 0 and json.loads(done.stdout)["metrics"]["test"]["accuracy"] >= 0.8, done.output


def test_wine_first_try_hints_at_regression(files, tmp_path):
    done = invoke("fit", files / "winequality-red.csv", "--target", "quality", "-o", tmp_path / "w.h5",
                  "--epochs", "1")
    assert done.exit_code == 0, done.output
    assert ("task: 6-class classification (categorical likelihood) of 'quality', classes 3, 4, 5, 6, 7, 8; "
            "11 features" in done.stderr)
    assert ("hint: 'quality' has 6 integer values (3 to 8), fitted as 6 unordered classes; if it measures a "
            "quantity, --likelihood gaussian fits it as regression" in done.stderr)


def test_wine_in_one_command(files, tmp_path):
    # shortened to 20 epochs to keep the test fast
    done = invoke("fit", *documented("winequality-red.csv", files, tmp_path / "w.h5", "--epochs", "20", "--json"))
    assert done.exit_code == 0, done.output
    assert re.search(r"task: regression \(gaussian likelihood\) of 'quality', mean 5\.\d+ and std 0\.\d+ \(fitted "
                     r"on the standardised scale\); 11 features, 651 parameters; features standardised",
                     done.stderr), done.stderr
    assert "hint:" not in done.stderr
    assert json.loads(done.stdout)["metrics"]["test"]["rmse"] < wine_quality().std()  # beats a constant


@pytest.mark.slow
def test_wine_in_the_documented_command(files, tmp_path):
    """The README's command verbatim (200 epochs, about 40 s)."""
    done = invoke("fit", *documented("winequality-red.csv", files, tmp_path / "w.h5", "--json"))
    assert done.exit_code == 0, done.output
    # the signal explains about half the variance of the score before rounding: about 0.62 is the best RMSE
    assert json.loads(done.stdout)["metrics"]["test"]["rmse"] < 0.8 * wine_quality().std()


def wine_quality():
    return np.array([int(r.rsplit(";", 1)[1]) for r in wine_quality_red().splitlines()[1:]])
