"""Tests of the ``slang`` command line: exit codes, ``--json`` stdout, one-line stderr messages, no leftovers.

Exit-code policy: 0 success; 1 bad data, bad run file or a diverged fit, with ONE line ``slang: error: ...`` on
stderr and no traceback; 2 usage errors (bad option value, conflicting options, invalid hyperparameters).
Commands run in-process through ``click.testing.CliRunner`` (stdout and stderr kept apart), except for a few
that run the real console entry point ``python -m slangcli`` in a subprocess.

In-process, an exception that escapes the command shows up as ``result.exception`` being something other than
``SystemExit``: that is the in-process form of "a traceback was printed".
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shlex
import os
import re
import subprocess
import sys

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from rich.console import Console

import slangcli.cli.output
from conftest import binary_problem, gal_folder, message_lines
from slangcli.cli import main
from slangcli.runfile.io import read_run

FAST = ["--epochs", "2", "--rank", "2", "--batch-size", "8"]
PROGRESS_MARKS = ("\r", "\x1b[", "╸", "╺", "slang L=")
STEPS_DONE = r"(?<!\d)(\d+)/\1(?!\d)"  # the bar's "completed/total" column at the end, e.g. "10/10"


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def parse_one_json_object(stdout: str) -> dict:
    """The single JSON object that makes up all of ``stdout`` (one line)."""
    obj, end = json.JSONDecoder().raw_decode(stdout)
    assert stdout[end:] == "\n", f"more than one JSON value on stdout: {stdout!r}"
    assert isinstance(obj, dict)
    return obj


def assert_ok(result) -> None:
    assert result.exit_code == 0, result.stderr
    assert result.exception is None


def assert_error(result, code: int, *mentions) -> str:
    """Exit ``code`` without an escaped exception, nothing on stdout, each of ``mentions`` on stderr.

    For exit 1 the message must be exactly one line ``slang: error: ...``. Returns stderr.
    """
    assert result.exit_code == code, (result.exit_code, result.stderr, result.exception)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    if code == 1:
        lines = message_lines(result.stderr)
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("slang: error: ")
    for text in mentions:
        assert str(text) in result.stderr
    return result.stderr


def assert_empty(directory) -> None:
    """No run file and no temporary file left behind."""
    assert sorted(p.name for p in directory.iterdir()) == []


def fit_json(*args) -> dict:
    result = invoke("fit", *args, "--json")
    assert_ok(result)
    return parse_one_json_object(result.stdout)


def evaluate_json(*args) -> dict:
    result = invoke("evaluate", *args, "--json")
    assert_ok(result)
    return parse_one_json_object(result.stdout)


def assert_same_scores(evaluated: dict, fitted: dict) -> None:
    """``evaluate``'s scores equal those the fit stored (same deterministic quadrature predictive)."""
    assert set(evaluated) == {"test", "train"}
    for split, names in (("test", ("nll", "accuracy")), ("train", ("neg_elbo_per_example",))):
        for name in names:
            assert evaluated[split][name] == pytest.approx(fitted[split][name], rel=1e-12, abs=1e-14)


# ------------------------------------------------------------------------------------------------ fit / evaluate


@pytest.mark.parametrize("fmt", ["csv", "libsvm"])
@pytest.mark.parametrize("source", ["fraction", "file"])
def test_fit_then_evaluate(request, out_dir, fmt, source):
    train = request.getfixturevalue(f"train_{fmt}")
    test = ["--test-fraction", "0.25"] if source == "fraction" else ["--test", request.getfixturevalue(f"test_{fmt}")]
    out = out_dir / "run.h5"
    summary = fit_json(train, "-o", out, *FAST, *test)

    assert out.is_file()
    m = summary["metrics"]
    assert np.isfinite(m["test"]["nll"]) and m["test"]["nll"] > 0
    assert 0.0 <= m["test"]["accuracy"] <= 1.0
    assert m["test"]["n"] == (10 if source == "fraction" else 20)
    assert np.isfinite(m["train"]["neg_elbo_per_example"])
    assert summary["output"] == str(out)

    evaluated = evaluate_json(out)
    assert_same_scores(evaluated["metrics"], m)
    assert evaluated["predictive"] == summary["predictive"] == "quadrature"


def test_evaluate_other_data_reapplies_standardisation_and_labels(make_csv, write_file, out_dir):
    # features far from zero mean / unit scale: the scores below match only if evaluate standardises the
    # new file with the stored training statistics
    train = make_csv("train.csv", seed=0, offset=50.0, scale=4.0)
    test = make_csv("test.csv", n=20, seed=1, offset=50.0, scale=4.0)
    out = out_dir / "run.h5"
    fitted = fit_json(train, "-o", out, *FAST, "--standardize", "--test", test)
    assert set(read_run(out).arrays) == {"feature_mean", "feature_scale"}

    copy = write_file("copy_of_test.csv", test.read_bytes())
    evaluated = evaluate_json(out, copy)
    assert evaluated["data"]["path"] == os.path.abspath(copy)
    assert_same_scores(evaluated["metrics"], fitted["metrics"])

    # the training file as DATA runs too (its labels are coded through the stored mapping)
    assert evaluate_json(out, train)["metrics"]["test"]["n"] == 40


def test_evaluate_rejects_label_not_seen_in_training(train_csv, write_file, out_dir):
    out = out_dir / "run.h5"
    assert_ok(invoke("fit", train_csv, "-o", out, *FAST))
    other = write_file("other.csv", "a,b,c,label\n1,2,3,no\n0,1,0,maybe\n")
    assert_error(invoke("evaluate", out, other, "--json"), 1, other, "'maybe'", "not seen in training")


def test_evaluate_without_test_data_fails(train_csv, out_dir):
    """A missing DATA argument, not bad data: a usage error (it exited 1, the code of a malformed file)."""
    out = out_dir / "run.h5"
    assert_ok(invoke("fit", train_csv, "-o", out, *FAST))
    assert_error(invoke("evaluate", out), 2, out, "the run has no test data; pass a data file")


def test_inspect_json(train_csv, out_dir):
    out = out_dir / "run.h5"
    fitted = fit_json(train_csv, "-o", out, *FAST, "--test-fraction", "0.25", "--seed", "7")
    result = invoke("inspect", out, "--json")
    assert_ok(result)
    s = parse_one_json_object(result.stdout)

    assert s["method"] == "slang"
    assert s["posterior"]["type"] == "lowrank-gaussian"
    assert s["posterior"]["arrays"] == {"mean": [4], "U": [4, 2], "d": [4]}
    assert s["model"]["sizes"] == [3, 1]
    assert s["config"]["hyper"]["rank"] == 2
    assert s["config"]["seed"] == 7
    assert s["config"]["n_steps"] == 2 * 4  # 2 epochs of ceil(30 / 8) steps
    # a step method's epochs; no solver's iterations (they said 0, as of a fit that had not run)
    assert (s["history"]["epochs"], s["history"]["iterations"]) == (2, None)
    train = s["data"]["train"]
    assert train["sha256"] == hashlib.sha256(train_csv.read_bytes()).hexdigest()
    assert train["path"] == os.path.abspath(train_csv)
    assert (train["format"], train["rows"], train["rows_used"]) == ("csv", 40, 30)
    assert s["data"]["labels"]["classes"] == ["no", "yes"]
    assert s["data"]["test"]["source"] == "split"
    assert s["metrics"]["test"] == fitted["metrics"]["test"]
    assert s["metrics"]["train"] == fitted["metrics"]["train"]


def test_plain_inspect_writes_only_to_stderr(train_csv, out_dir):
    out = out_dir / "run.h5"
    assert_ok(invoke("fit", train_csv, "-o", out, *FAST))
    result = invoke("inspect", out)
    assert_ok(result)
    assert result.stdout == ""
    assert str(out) in result.stderr
    assert hashlib.sha256(train_csv.read_bytes()).hexdigest()[:16] in result.stderr
    # logistic regression has no hidden units to name the activation of ("relu hidden units" was shown)
    assert "no hidden layer, bernoulli likelihood" in result.stderr and "hidden units" not in result.stderr


def test_inspect_shows_whole_number_labels_as_the_task_line_does(write_file, out_dir):
    # a file's labels 0 and 1 are stored as numbers; inspect showed them as 0.0 and 1.0
    X, labels = binary_problem(seed=0)
    data = write_file("numbers.csv", "a,b,c,y\n" + "".join(f"{a},{b},{c},{int(t)}\n"
                                                           for (a, b, c), t in zip(X, labels)))
    assert_ok(invoke("fit", data, "-o", out_dir / "run.h5", *FAST))
    assert "labels     0, 1 -> 0..1" in invoke("inspect", out_dir / "run.h5").stderr


def test_run_file_records_the_fit_command(train_csv, out_dir):
    out = out_dir / "run.h5"
    args = ["fit", str(train_csv), "-o", str(out), *FAST]
    assert_ok(invoke(*args))
    assert read_run(out).command == ["slang", *args]


def test_inspect_shows_the_command_as_a_shell_would_run_it(train_csv, tmp_path):
    """inspect printed the command's words joined by spaces: a path with a space, or --na-values "NA, ?", could not
    be pasted back; and a path with brackets was read as markup."""
    folder = tmp_path / "my data [1]"
    folder.mkdir()
    data = folder / "train set.csv"
    data.write_bytes(train_csv.read_bytes())
    out = folder / "run [x].h5"
    args = ["fit", str(data), "-o", str(out), "--na-values", "NA, ?", *FAST]
    assert_ok(invoke(*args))
    lines = invoke("inspect", out).stderr.splitlines()
    assert lines[0].startswith(f"{out}  (slang ")
    assert lines[1] == "command    " + shlex.join(["slang", *args])


# ------------------------------------------------------------------------------------------------ LIBSVM width


NARROW = "+1 1:0.5 3:1.0\n-1 2:-1.0\n+1 1:1.5\n-1 3:-0.5 \n"  # highest index 3
WIDE = "-1 1:0.25\n+1 2:1.0 5:2.0\n"  # index 5, on line 2


def test_libsvm_test_file_wider_than_training(write_file, out_dir):
    train, test = write_file("narrow.svm", NARROW), write_file("wide.svm", WIDE)
    out = out_dir / "run.h5"
    result = invoke("fit", train, "-o", out, "--epochs", "2", "--rank", "1", "--test", test, "--json")
    assert_ok(result)
    # (four training rows and two epochs: the fit's warning that it learned next to nothing is beside the point)
    note = [line for line in message_lines(result.stderr) if line.startswith("slang: ")
            and not line.startswith("slang: warning: the fit is barely better")]
    assert len(note) == 1 and str(train) in note[0] and "5 feature columns" in note[0], result.stderr
    assert parse_one_json_object(result.stdout)["metrics"]["test"]["n"] == 2
    assert read_run(out).model.sizes == (5, 1)
    # evaluate re-reads the narrow training file at the widened width
    assert evaluate_json(out)["metrics"]["train"]["n"] == 4


def test_libsvm_test_file_beyond_n_features(write_file, out_dir):
    train, test = write_file("narrow.svm", NARROW), write_file("wide.svm", WIDE)
    result = invoke("fit", train, "-o", out_dir / "run.h5", *FAST, "--n-features", "4", "--test", test)
    assert_error(result, 1, f"{test}:2:", "feature index 5 exceeds --n-features 4")
    assert_empty(out_dir)


# ------------------------------------------------------------------------------------------------ malformed data

GOOD = "a,b,label\n1,2,0\n1,3,1\n3,4,0\n2,2,1\n"

# id -> (training file text or None for a missing file, test file text or None, extra options, fragments expected
# on stderr); "{train}" and "{test}" stand for the two file names.
MALFORMED = {
    "non-numeric cell": ("a,b,label\n1,2,0\n1,x,1\n3,4,0\n", None, [], ["{train}:3:", "'x'"]),
    "NaN": ("a,b,label\n1,2,0\n1,nan,1\n3,4,0\n", None, [], ["{train}:3:", "NaN"]),
    "inf": ("a,b,label\n1,2,0\n1,2,1\n-inf,4,0\n", None, [], ["{train}:4:", "-inf"]),
    "ragged row": ("a,b,label\n1,2,0\n1,1\n3,4,0\n", None, [], ["{train}:3:", "expected 3 cells, found 2"]),
    "empty file": ("", None, [], ["{train}:", "empty"]),
    "header only": ("a,b,label\n", None, [], ["{train}:", "no data rows"]),
    "missing target column": (GOOD, None, ["--target", "nosuch"], ["{train}:", "'nosuch'"]),
    "three labels": ("a,b,label\n1,2,0\n1,3,1\n3,4,2\n", None, ["--likelihood", "bernoulli"],
                     ["{train}:", "a binary model needs exactly 2 label values, found 3"]),
    "test feature count": (GOOD, "a,b,c,label\n1,2,3,0\n1,3,3,1\n", [], ["{test}:", "has feature column(s) 'c' the training data do not"]),
    "libsvm index 0": ("+1 0:1 2:3\n-1 1:1\n", None, [], ["{train}:1:", "1-based"]),
    "libsvm unsorted": ("+1 1:1 2:3\n-1 3:1 2:2\n", None, [], ["{train}:2:", "strictly increasing"]),
    "libsvm beyond n-features": ("+1 1:1\n-1 1:2 3:1\n", None, ["--n-features", "2"],
                                 ["{train}:2:", "exceeds --n-features 2"]),
    "missing data file": (None, None, [], ["{train}:", "no such file"]),
    "missing test file": (GOOD, None, ["--test", "{test}"], ["{test}:", "no such file"]),
    "test label unseen": (GOOD, "a,b,label\n1,2,0\n1,3,7\n", [], ["{test}:", "'7'", "not seen in training"]),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_input_fails_cleanly(tmp_path, out_dir, case):
    train_text, test_text, extra, expected = MALFORMED[case]
    train, test = tmp_path / "train.dat", tmp_path / "test.dat"
    if train_text is not None:
        train.write_text(train_text)
    options = [o.format(test=test) for o in extra]
    if test_text is not None:
        test.write_text(test_text)
        options += ["--test", str(test)]
    result = invoke("fit", train, "-o", out_dir / "run.h5", "--epochs", "2", "--rank", "1", *options)
    assert_error(result, 1, *(e.format(train=train, test=test) for e in expected))
    assert_empty(out_dir)


# ------------------------------------------------------------------------------------------------ usage errors

# id -> (options, text expected on stderr, whether the message is slang's own one-line "slang: error:")
USAGE = {
    "lr not a number": (["--lr", "abc"], "--lr", False),
    "test fraction out of range": (["--test-fraction", "1.5"], "--test-fraction", False),
    "unknown format": (["--format", "xml"], "--format", False),
    "zero epochs": (["--epochs", "0"], "--epochs", False),
    "unknown option": (["--bogus"], "--bogus", False),
    "test and test fraction": (["--test", "{train}", "--test-fraction", "0.3"], "--test-fraction", True),
    "epochs and iterations": (["--epochs", "2", "--iterations", "20"], "--iterations", True),
    "beta above 1": (["--beta", "1.5"], "--beta", True),
    "momentum 1": (["--momentum", "1"], "--momentum", True),
    "negative decay": (["--decay", "-1"], "--decay", True),
    "zero prior precision": (["--prior-precision", "0"], "--prior-precision", True),
}


@pytest.mark.parametrize("case", list(USAGE))
def test_usage_error_exits_2(train_csv, out_dir, case):
    options, mention, ours = USAGE[case]
    options = [o.format(train=train_csv) for o in options]
    result = invoke("fit", train_csv, "-o", out_dir / "run.h5", *options)
    stderr = assert_error(result, 2, mention)
    if ours:
        assert stderr.startswith("slang: error: ") and stderr.count("\n") == 1, stderr
    assert_empty(out_dir)


@pytest.mark.parametrize("command", ["fit --seed -1", "fit --split-seed -1 --test-fraction 0.5",
                                     "evaluate --seed -1 --predictive mc"])
def test_negative_seed_is_a_usage_error(train_csv, test_csv, out_dir, command):
    out = out_dir / "run.h5"
    if command.startswith("evaluate"):
        assert_ok(invoke("fit", train_csv, "-o", out, *FAST, "--test", test_csv))
        result = invoke("evaluate", out, *command.split()[1:])
    else:
        result = invoke("fit", train_csv, "-o", out, *FAST, *command.split()[1:])
    assert_error(result, 2, "seed")


def test_bad_delimiter_is_a_usage_error(train_csv, out_dir):
    assert_error(invoke("fit", train_csv, "-o", out_dir / "run.h5", *FAST, "--delimiter", "|"), 2, "--delimiter")


def test_infinite_learning_rate_is_a_usage_error(train_csv, out_dir):
    assert_error(invoke("fit", train_csv, "-o", out_dir / "run.h5", *FAST, "--lr", "inf"), 2, "--lr")


def test_missing_output_directory(train_csv, tmp_path):
    result = invoke("fit", train_csv, "-o", tmp_path / "nodir" / "run.h5", *FAST)
    assert result.exit_code in (1, 2)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "nodir" in result.stderr and "Traceback" not in result.stderr


# ------------------------------------------------------------------------------------------------ divergence


# No filterwarnings mark: the suite turns RuntimeWarning into an error, so these also check that numpy's overflow
# warnings on the way to inf are silenced by the engine rather than escaping.


def test_divergence_exits_1(train_csv, out_dir):
    result = invoke("fit", train_csv, "-o", out_dir / "run.h5", *FAST, "--lr", "1e300")
    assert_error(result, 1, "training diverged", "--lr")
    assert_empty(out_dir)


@pytest.mark.parametrize("options", [["--lr", "1e8", "--rank", "2"], ["--lr", "1e3", "--rank", "2"],
                                     ["--method", "ivon", "--lr", "1e6", "--clip-radius", "inf"]])
def test_a_fit_blowing_up_below_the_overflow_is_a_divergence(make_csv, out_dir, options):
    """At --lr 1e8 the loss grew 1e27-fold an epoch and the mean reached 1e71, below the 1e150 that stopped a fit:
    the fit ended with exit 0 and a warning blaming its length. A loss a millionfold its first epoch's now stops it."""
    result = invoke("fit", make_csv("b.csv", n=60, seed=3), "-o", out_dir / "run.h5", "--epochs", "5", *options)
    assert_error(result, 1, "training diverged at step", "the loss rose to", "in the first epoch", "--lr")
    assert_empty(out_dir)


def test_overflowing_features_are_refused_unless_standardised(make_csv, out_dir):
    # features near 1e160 overflow G G^T to inf, where np.linalg.eigh fails to converge: used as read, features
    # beyond 1e150 are refused before the fit, naming their magnitude; standardised, they fit
    train = make_csv("huge.csv", n=20, scale=1e160)
    result = invoke("fit", train, "-o", out_dir / "run.h5", "--epochs", "2", "--rank", "1", "--no-standardize")
    assert_error(result, 1, "huge.csv: feature ", "e+160 in magnitude, beyond 1e+150", "--standardize")
    assert_empty(out_dir)
    assert_ok(invoke("fit", train, "-o", out_dir / "run.h5", "--epochs", "2", "--rank", "1", "--standardize"))


# ------------------------------------------------------------------------------------------------ reproducibility


def test_same_seed_same_bits(train_csv, out_dir):
    runs = {}
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        out = out_dir / f"{name}.h5"
        assert_ok(invoke("fit", train_csv, "-o", out, *FAST, "--seed", seed))
        runs[name] = read_run(out).posterior
    for field in ("mean", "U", "d"):
        a, b = getattr(runs["a"], field), getattr(runs["b"], field)
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), field
    assert not np.array_equal(runs["a"].mean, runs["c"].mean)
    with h5py.File(out_dir / "a.h5", "r") as fa, h5py.File(out_dir / "b.h5", "r") as fb:
        for field in ("mean", "U", "d"):
            assert fa["posterior"][field][()].tobytes() == fb["posterior"][field][()].tobytes()


# ------------------------------------------------------------------------------------------------ progress, help


def test_progress_is_off_when_stderr_is_not_a_terminal(train_csv, out_dir):
    result = invoke("fit", train_csv, "-o", out_dir / "run.h5", *FAST)
    assert_ok(result)
    assert not any(mark in result.stderr for mark in PROGRESS_MARKS), repr(result.stderr)
    assert not re.search(STEPS_DONE, result.stderr)


def test_progress_marks_do_show_on_a_terminal(train_csv, out_dir, monkeypatch):
    """Positive control for the test above: on a (forced) terminal the default shows the bar, and
    ``--no-progress`` removes it."""
    for flag, shown in ((None, True), ("--no-progress", False)):
        buffer = io.StringIO()
        monkeypatch.setattr(slangcli.cli.output, "stderr", Console(file=buffer, force_terminal=True, width=100))
        assert_ok(invoke("fit", train_csv, "-o", out_dir / "run.h5", *FAST, *([flag] if flag else [])))
        text = buffer.getvalue()
        assert bool(re.search(STEPS_DONE, text) and "slang L=2" in text) is shown, repr(text)


@pytest.mark.parametrize("command", [[], ["fit"], ["evaluate"], ["inspect"]], ids=lambda c: c[0] if c else "slang")
def test_help(command):
    result = invoke(*command, "--help")
    assert_ok(result)
    assert result.stdout.startswith("Usage:")


def _modules_after(*args):
    """The ``slangcli`` modules and whether NumPy is loaded after ``slang ARGS`` in a fresh interpreter."""
    code = ("import sys\nfrom slangcli.cli import main\ntry:\n    main(sys.argv[1:], prog_name='slang')\n"
            "except SystemExit:\n    pass\nprint(sorted(m for m in sys.modules if m.startswith('slangcli.cli.')), "
            "'numpy' in sys.modules, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    return done.stdout, done.stderr.splitlines()[-1]


def test_a_command_loads_only_its_own_module():
    # the commands are loaded on first use: `slang --version` is instant and a fit does not import the sweep,
    # the figures or the compression; `slang --help` still lists every command, in the order of a workflow
    out, loaded = _modules_after("--version")
    assert out.startswith("slang, version") and loaded == "['slangcli.cli.output'] False"
    out, loaded = _modules_after("fit", "--help")
    assert "--method" in out and loaded == "['slangcli.cli.fit', 'slangcli.cli.options', 'slangcli.cli.output'] True"
    out, _ = _modules_after("--help")
    listed = re.findall(r"^  (\w+)  ", out.split("Commands:")[1], flags=re.M)
    assert listed == ["fit", "evaluate", "predict", "compress", "inspect", "plot", "sweep"]


# ------------------------------------------------------------------------------------------------ bad run files


@pytest.fixture(params=["random bytes", "truncated", "text"])
def corrupt_run(request, run_file, tmp_path):
    path = tmp_path / "bad.h5"
    if request.param == "random bytes":
        path.write_bytes(np.random.default_rng(0).bytes(4096))
    elif request.param == "truncated":
        data = run_file.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    else:
        path.write_text("this is a text file\n")
    return path


@pytest.mark.parametrize("command", ["evaluate", "inspect"])
def test_corrupt_run_file(corrupt_run, command):
    assert_error(invoke(command, corrupt_run, "--json"), 1, f"slang: error: {corrupt_run}: ")


def test_evaluate_ignores_data_options_it_does_not_know(train_csv, out_dir):
    # found by test_fuzz.py: DataOptions(**options) raised TypeError on a key this slang does not know; the
    # format promises that a 1.x reader ignores what a newer minor version adds
    out = out_dir / "run.h5"
    assert_ok(invoke("fit", train_csv, "-o", out, *FAST, "--test-fraction", "0.25"))
    expected = evaluate_json(out)["metrics"]
    with h5py.File(out, "r+") as f:
        provenance = json.loads(f["data"].attrs["provenance"])
        provenance["options"]["resample"] = "bootstrap"
        f["data"].attrs["provenance"] = json.dumps(provenance)
    assert evaluate_json(out)["metrics"] == expected


def test_a_folder_that_is_no_uci_folder_is_named_as_such(tmp_path, out_dir):
    # found writing docs/BAD_INPUTS.md: any directory was called "a Gal-layout UCI folder"
    folder = tmp_path / "data"
    folder.mkdir()
    assert_error(invoke("fit", folder, "-o", out_dir / "run.h5", *FAST), 1, f"{folder}: is a directory, not a file")
    assert_empty(out_dir)


@pytest.mark.parametrize("command", ["evaluate", "inspect"])
def test_missing_run_file(tmp_path, command):
    path = tmp_path / "absent.h5"
    assert_error(invoke(command, path), 1, f"slang: error: {path}: no such file")


# ------------------------------------------------------------------------------------------------ console script


def slang(*args, cwd):
    return subprocess.run([sys.executable, "-m", "slangcli", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_console_script_exit_codes_and_json(train_csv, tmp_path):
    out = tmp_path / "run.h5"
    done = slang("fit", train_csv, "-o", out, *FAST, "--test-fraction", "0.25", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = parse_one_json_object(done.stdout)
    assert set(summary["metrics"]["test"]) >= {"nll", "accuracy"}
    assert "neg_elbo_per_example" in summary["metrics"]["train"]
    assert not any(mark in done.stderr for mark in PROGRESS_MARKS)  # stderr is a pipe: no progress bar
    assert read_run(out).command[:2] == ["slang", "fit"]

    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,label\n1,2,0\n1,x,1\n")
    done = slang("fit", bad, "-o", tmp_path / "bad.h5", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [f"slang: error: {bad}:3: column 1 ('b'): cannot parse 'x' as a number (the "
                                        "column's other cells are numbers: '2' on line 2; a missing-value token goes in "
                                        "--na-values; --categorical b reads every cell of the column as a category)"]

    done = slang("fit", train_csv, "-o", tmp_path / "x.h5", "--beta", "1.5", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["slang: error: --beta must be in (0, 1), got 1.5"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv", "run.h5", "train.csv"]


def test_console_script_divergence(tmp_path):
    train = tmp_path / "train.csv"
    train.write_text(GOOD)
    out = tmp_path / "out"
    out.mkdir()
    done = slang("fit", train, "-o", out / "run.h5", "--epochs", "2", "--rank", "1", "--lr", "1e300", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout == ""
    lines = message_lines(done.stderr)
    assert len(lines) == 1, done.stderr  # no numpy RuntimeWarning before the message
    assert lines[0].startswith("slang: error: training diverged")
    assert_empty(out)


def test_rank_above_the_parameter_count_is_clamped_with_a_note(train_csv, out_dir):
    """--rank larger than D means a full-rank precision: the fit uses L = D and says so on stderr."""
    out = out_dir / "run.h5"
    result = invoke("fit", train_csv, "-o", out, *FAST, "--rank", "999")
    assert_ok(result)
    D = read_run(out).posterior.mean.size
    assert f"using rank {D}" in result.stderr
    assert read_run(out).posterior.U.shape == (D, D)


def test_output_over_an_input_file_is_refused(train_csv):
    before = train_csv.read_bytes()
    result = invoke("fit", train_csv, "-o", train_csv, *FAST)
    assert result.exit_code == 2
    assert "refusing to overwrite" in result.stderr
    assert train_csv.read_bytes() == before


def test_a_run_file_to_standard_output_is_refused(train_csv, tmp_path, monkeypatch):
    """`fit -o -` and `compress -o -` wrote an HDF5 file named '-' with exit 0 (and a later sweep -o - then found
    a file where its directory should be); only predict writes to standard output."""
    monkeypatch.chdir(tmp_path)
    result = invoke("fit", train_csv, "-o", "-", *FAST)
    assert_error(result, 2, "'-' is standard output, where only slang predict writes")
    made = invoke("fit", train_csv, "-o", "run.h5", *FAST)
    assert made.exit_code == 0, made.stderr
    result = invoke("compress", "run.h5", "--rank", "1", "-o", "-")
    assert_error(result, 2, "'-' is standard output")
    assert not (tmp_path / "-").exists()


def test_uci_folder_regression_fit_and_reevaluation(tmp_path, monkeypatch):
    """A Gal-layout folder with --uci-split: regression metrics at fit time, and `evaluate` re-reads the folder
    (verified by checksum) from another working directory and reproduces them."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.1 * rng.standard_normal(40)
    folder = gal_folder(tmp_path / "toy", X, y, 30)
    out = tmp_path / "run.h5"
    fitted = invoke("fit", folder, "--uci-split", "0", "--hidden", "8", "--method", "slang", "--epochs", "3",
                    "--rank", "1", "--batch-size", "10", "--eval-samples", "50", "-o", out, "--json")
    assert_ok(fitted)
    test = json.loads(fitted.stdout)["metrics"]["test"]
    assert set(test) >= {"rmse", "loglik"} and test["n"] == 10
    # the constant predictor's scores, which the run stores beside them and inspect --json shows
    assert json.loads(fitted.stdout)["metrics"]["constant"] == read_run(out).metrics["constant"]
    monkeypatch.chdir(tmp_path.parent)
    again = invoke("evaluate", out, "--samples", "50", "--json")
    assert_ok(again)
    evaluated = json.loads(again.stdout)
    np.testing.assert_allclose(evaluated["metrics"]["test"]["rmse"], test["rmse"], rtol=1e-12)
    # the weight samples' seed is reported, as predict --json reports it
    assert evaluated["samples"] == 50 and evaluated["seed"] == 0
    # the training -ELBO is on the standardised target's scale, and says so; the test metrics are in its units
    train = json.loads(fitted.stdout)["metrics"]["train"]
    assert train["target"] == "standardised" and evaluated["metrics"]["train"]["target"] == "standardised"
    assert "-ELBO / N (at fit), standardised target" in again.stderr


@pytest.mark.parametrize("option", [["--target", "2"], ["--drop-columns", "1"], ["--columns", "0,1"],
                                    ["--delimiter", ";"], ["--no-header"], ["--n-features", "3"]])
def test_a_csv_option_given_with_a_uci_folder_is_refused(tmp_path, option):
    """A UCI folder's target and features are those its index files name: --target 2 was taken, said to be applied
    ("--target 2: the column at 0-based position 2") and not applied, and the others ignored without a word."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 3))
    folder = gal_folder(tmp_path / "toy", X, X @ np.array([1.0, -2.0, 0.5]), 30)
    done = invoke("fit", folder, "--uci-split", "0", *option, "--epochs", "1", "-o", tmp_path / "run.h5")
    kind = "LIBSVM" if option[0] == "--n-features" else "CSV"
    flag = "--header/--no-header" if option[0] == "--no-header" else option[0]
    assert_error(done, 2, f"{flag} applies to a {kind} file; a Gal-layout UCI folder's target and features are those "
                          "its index_target.txt and index_features.txt name")
    assert not (tmp_path / "run.h5").exists()
    done = invoke("fit", folder, "--uci-split", "0", "--epochs", "1", "-o", tmp_path / "run.h5")
    assert_ok(done)
    assert "slang: change the task with --likelihood" in done.stderr.splitlines()


def test_a_uci_folder_whose_column_files_changed_is_refused(tmp_path):
    """Which column is the target was not part of a UCI fit's provenance: after index_target.txt and
    index_features.txt swapped two columns, evaluate and predict scored the old posterior on the new columns (RMSE
    700 times the fit's), with exit 0, and --resume trained on the new target."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 3))
    folder = gal_folder(tmp_path / "toy", X, X @ np.array([1.0, -2.0, 0.5]), 30)
    out = tmp_path / "run.h5"
    assert_ok(invoke("fit", folder, "--uci-split", "0", "--hidden", "4", "--epochs", "2", "--eval-samples", "20",
                     "-o", out))
    (folder / "index_features.txt").write_text("0\n1\n3\n")
    (folder / "index_target.txt").write_text("2\n")
    assert_error(invoke("evaluate", out), 1, f"{out}: its training data {folder / 'index_features.txt'} changed "
                                             "since the fit (sha256 differs); pass the data explicitly")
    given = (f"{folder}: its index_features.txt and index_target.txt choose features x0, x1, x3 and target column "
             "2; the fit had x0, x1, x2 and 3")
    assert_error(invoke("evaluate", out, folder), 1, given)
    assert_error(invoke("predict", out, folder, "-o", tmp_path / "p.csv"), 1, given)
    assert not (tmp_path / "p.csv").exists()


def test_a_split_that_leaves_one_class_for_training_says_so(tmp_path):
    """The only row of a rare class drawn into the test rows gave "imb.csv: need at least 2 label values, found 1",
    blaming a file that has two."""
    data = tmp_path / "imb.csv"
    data.write_text("a,b,label\n" + "".join(f"{i / 10},{i % 3},neg\n" for i in range(30)) + "0.1,0.2,pos\n")
    pos = 30  # the data row of the one 'pos'
    from slangcli.data.prepare import train_test_split

    seed = next(s for s in range(100) if pos in train_test_split(31, 0.3, s)[1])
    result = invoke("fit", data, "-o", tmp_path / "r.h5", *FAST, "--test-fraction", "0.3", "--split-seed", seed)
    assert_error(result, 1, f"{data}: the rows left for training hold one label value, 'neg', of the file's 2: the "
                            f"test rows of --test-fraction 0.3 (--split-seed {seed}) took the others (another "
                            "--split-seed, or fewer rows held out, keeps them)")
    # two rows, one test row: the training row is moved in place over the other, and the file's labels were
    # counted after the move ("need at least 2 label values, found 1")
    (tmp_path / "two.csv").write_text("a,y\n1,0\n2,1\n")
    result = invoke("fit", tmp_path / "two.csv", "-o", tmp_path / "r.h5", *FAST, "--test-fraction", "0.5")
    assert_error(result, 1, "two.csv: the rows left for training hold one label value, ", "of the file's 2: the test "
                            "rows of --test-fraction 0.5 (--split-seed 0) took the others")


@pytest.mark.parametrize("how", ["evaluate", "predict", "fit --test", "fit --test-fraction"])
def test_an_unseen_label_is_named_by_its_line(tmp_path, how):
    """Unseen labels were named "data row N" (1-based, and for a --test-fraction split counted within the test
    rows), where every other data error names the file's line."""
    train = tmp_path / "train.csv"
    train.write_text("a,b,label\n" + "".join(f"{i / 10},{i % 3},{'xy'[i % 2]}\n" for i in range(20)))
    other = tmp_path / "other.csv"
    other.write_text("a,b,label\n# a comment line\n0.1,1,x\n0.2,2,maybe\n")
    run = tmp_path / "r.h5"
    if how == "fit --test-fraction":
        from slangcli.data.prepare import train_test_split

        bad = 17  # the data row given a label of its own, held out by the split (one label alone never is trained)
        train.write_text(train.read_text().replace(f"{bad / 10},{bad % 3},y\n", f"{bad / 10},{bad % 3},maybe\n"))
        seed = next(s for s in range(200) if bad in train_test_split(20, 0.25, s)[1])
        result = invoke("fit", train, "--likelihood", "categorical", "-o", run, *FAST, "--test-fraction", "0.25",
                        "--split-seed", seed)
        # 'maybe' is then no class at all: a categorical fit of the training rows knows x and y; the message says
        # that the split put it there (it read as if the file were wrong)
        assert_error(result, 1, f"{train}:{bad + 2}: label 'maybe' not seen in training data",
                     f"every row of it is among the test rows of --test-fraction 0.25 (--split-seed {seed}); a "
                     "smaller --test-fraction, or another --split-seed, keeps some in training")
        return
    if how == "fit --test":
        assert_error(invoke("fit", train, "--test", other, "-o", run, *FAST), 1,
                     f"{other}:4: label 'maybe' not seen in training data")
        return
    assert_ok(invoke("fit", train, "-o", run, *FAST))
    if how == "evaluate":
        assert_error(invoke("evaluate", run, other), 1, f"{other}:4: label 'maybe' not seen in training data")
        return
    # predict needs no target: the row is predicted, its label said in a note and its target cell left empty
    result = invoke("predict", run, other, "-o", "-")
    assert_ok(result)
    assert f"slang: {other}:4: label 'maybe' was not seen in training (known: x, y): the row is predicted, its " \
           "target cell left empty" in result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [row["target"] for row in rows] == ["x", ""] and rows[1]["predicted"] in ("x", "y")


def test_predict_names_the_first_two_rows_of_unseen_labels_and_counts_the_rest(tmp_path):
    train = tmp_path / "train.csv"
    train.write_text("a,b,label\n" + "".join(f"{i / 10},{i % 3},{'xy'[i % 2]}\n" for i in range(20)))
    other = tmp_path / "other.csv"
    other.write_text("a,b,label\n0.1,1,x\n0.2,2,maybe\n0.3,0,\n0.4,1,z\n0.5,2,w\n")
    assert_ok(invoke("fit", train, "-o", tmp_path / "r.h5", *FAST))
    result = invoke("predict", tmp_path / "r.h5", other, "-o", "-")
    assert_ok(result)
    # (the row without a target is no unseen label: its cell is empty as a missing one's)
    assert f"slang: {other}:3: label 'maybe' was not seen in training (known: x, y), nor were the labels of 2 more " \
           f"rows (next at {other}:5): the rows are predicted, their target cells left empty" in result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [row["target"] for row in rows] == ["x", "", "", "", ""] and all(row["predicted"] for row in rows)


def test_a_regression_target_that_is_not_a_number_is_named_by_its_line(tmp_path):
    """One typo in a numeric target gave "a regression target must be numeric", with no line, column or cell."""
    rng = np.random.default_rng(0)
    lines = ["a,b,mass"] + [f"{a:.4f},{b:.4f},{a - b:.4f}" for a, b in rng.normal(size=(30, 2))]
    good = tmp_path / "good.csv"
    good.write_text("\n".join(lines) + "\n")
    lines[12] = lines[12].rsplit(",", 1)[0] + ",heavy"
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(lines) + "\n")
    said = f"{bad}:13: the target 'heavy' is not a number (a regression target must be numeric)"
    assert_error(invoke("fit", bad, "--likelihood", "gaussian", "-o", tmp_path / "r.h5", *FAST), 1, said)
    # the row held out by a split (or by --calibrate) is named too: the training rows left are all numbers
    from slangcli.data.prepare import train_test_split

    seed = next(s for s in range(100) if 11 in train_test_split(30, 0.3, s)[1])
    assert_error(invoke("fit", bad, "--likelihood", "gaussian", "--test-fraction", "0.3", "--split-seed", seed,
                        "-o", tmp_path / "r.h5", *FAST), 1, said)
    assert_ok(invoke("fit", good, "-o", tmp_path / "r.h5", *FAST))
    assert_error(invoke("evaluate", tmp_path / "r.h5", bad), 1, said)
    assert_error(invoke("predict", tmp_path / "r.h5", bad, "-o", tmp_path / "p.csv"), 1, said)
