"""Run slang on every class of bad input and write what the user sees to docs/BAD_INPUTS.md.

    python benchmarks/bad_inputs.py            # regenerate docs/BAD_INPUTS.md
    python benchmarks/bad_inputs.py --check    # exit 1 if docs/BAD_INPUTS.md is out of date
    python benchmarks/bad_inputs.py --stdout   # print the page instead

Each case writes its files into a fresh directory and runs this checkout's ``slang`` there in a subprocess
(the console script's entry point, ``slangcli.__main__:main`` with the program name ``slang``), so messages name
the files as the user typed them; the few absolute paths a run file records are shown relative to that
directory. The script checks what it documents: the exit code each case expects, no traceback, and on exit 1
exactly one line ``slang: error: ...``; it stops with an error otherwise, so the page never shows a crash.
A case may run under a file-size or address-space limit, with stdout redirected or closed, or be sent signals
once its command reaches a point (a temporary file exists, or stderr shows a text); a signalled command must stop
within SIGNAL_SECONDS. About 160 commands, 5-8 minutes.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import html
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import h5py
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from slangcli.data.sources import DataOptions
from slangcli.runfile.io import write_run  # noqa: E402
from slangcli.training.fitting import fit  # noqa: E402

PAGE = REPO / "docs" / "BAD_INPUTS.md"
HANG_SECONDS = 60  # a command that has not finished by then is stopped and documented as hanging
TRIGGER_SECONDS = 300  # how long a signal case waits for its trigger (a tuning round on a loaded machine)
SIGNAL_SECONDS = 10  # a command given a signal must stop within this time (it stops at once: a few steps)
CLOSED = "closed"  # Case.stdout: a pipe whose reader has gone, as with `| head -c 0`
NO_STDOUT = "no stdout"  # Case.stdout: file descriptor 1 closed before the command starts, as with `>&-`
# permission bits bind root only without the capabilities that override them (CI runs as root)
AS_A_USER = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
FAST = ["--epochs", "2", "--rank", "1"]
# lines a fit writes before training (the task it inferred), and after it (a fit of two epochs on a few rows has
# learned next to nothing, and says so) before an error of writing its output
TASK_LINES = ("slang: task: ", "slang: change the task ", "slang: warning: the fit is barely better",
              "slang: warning: the fit is worse than")

GOOD_CSV = "a,b,label\n" + "".join(
    f"{x:.2f},{y:.2f},{'yes' if x + y > 0 else 'no'}\n"
    for x, y in np.random.default_rng(0).standard_normal((16, 2))
)
# a header cell named "2" that is not the column at index 2
NUMBER_HEADER = "x,2,y\n" + "".join(
    f"{x:.2f},{int(x > 0)},{y:.2f}\n" for x, y in np.random.default_rng(2).standard_normal((16, 2)))
# without a header: a row id, two features and the label
HEADERLESS_ID_CSV = "".join(f"{100 + k},{line}\n" for k, line in enumerate(GOOD_CSV.splitlines()[1:]))
# a regression target (a network's outputs can overflow)
REGRESSION_CSV = "a,b,y\n" + "".join(
    f"{x:.2f},{y:.2f},{x - y + 0.1 * e:.3f}\n" for x, y, e in np.random.default_rng(6).standard_normal((24, 3)))
# 200 rows, three features, a noisy linear rule: a --tune search whose first round takes a while
TUNE_CSV = "a,b,c,label\n" + "".join(
    f"{a:.4f},{b:.4f},{c:.4f},{'yes' if a - b + 0.5 * c + 0.3 * e > 0 else 'no'}\n"
    for a, b, c, e in np.random.default_rng(7).standard_normal((200, 4)))

# columns of text: a category (colour) and a boolean (smoker), with an NA cell in each
CATEGORY_CSV = "a,colour,smoker,label\n" + "".join(
    f"{x:.2f},{('red', 'green', 'blue')[k % 3] if k != 4 else 'NA'},{('yes', 'no')[k % 2] if k != 7 else 'NA'},"
    f"{'yes' if x + (k % 3 == 0) > 0.5 else 'no'}\n"
    for k, x in enumerate(np.random.default_rng(8).standard_normal(16)))


def scaled_csv(power: int, target: bool = False) -> str:
    """GOOD_CSV's features (or, ``target``, a regression target made of them) at the magnitude 10**power."""
    rows = np.random.default_rng(0).standard_normal((16, 2))
    if target:
        return "a,b,y\n" + "".join(f"{x:.2f},{y:.2f},{x + y:.2f}e{power}\n" for x, y in rows)
    return "a,b,label\n" + "".join(f"{x:.2f}e{power},{y:.2f}e{power},{'yes' if x + y > 0 else 'no'}\n"
                                    for x, y in rows)


GOOD_SVM = "".join(
    f"{'+1' if x > 0 else '-1'} 1:{x:.2f} 3:{y:.2f}\n" for x, y in np.random.default_rng(1).standard_normal((16, 2))
)


# ------------------------------------------------------------------------------------------------ cases


@dataclass(frozen=True)
class Signal:
    """``times`` signals ``number`` sent to a case's command as soon as it reaches a point: a file matching
    ``glob`` exists in its directory (``.p.csv*.tmp``: inside the write of p.csv), or its stderr holds ``text``."""

    number: int
    glob: str | None = None
    text: str | None = None
    times: int = 1


@dataclass
class Case:
    section: str
    what: str  # the bad input, in words
    args: list  # slang's arguments
    exit: int  # the exit code slang must give (None: must hang)
    files: Callable[[Path], None] = lambda d: None  # writes the case's files into its directory
    fsize: int | None = None  # a file-size limit (ulimit -f, in bytes) for the command: a disk that fills up
    stdout: str | None = None  # a file stdout is redirected to (/dev/full: a full disk), or CLOSED
    memory: int | None = None  # an address-space limit (ulimit -v, in bytes) for the command
    signal: Signal | None = None  # signals sent to the command, and when
    before: str = ""  # Python run before the command in its process (to lower a limit for the page)
    unprivileged: bool = False  # run where permission bits apply (root without CAP_DAC_OVERRIDE)


def text(name, content):
    def write(d):
        (d / name).write_bytes(content if isinstance(content, bytes) else content.encode())

    return write


def endless_pipe(name, line):
    """A FIFO ``name`` that ``yes LINE`` writes into without end (it stops when the reader closes it)."""

    def write(d):
        os.mkfifo(d / name)
        subprocess.Popen(f"exec yes {shlex.quote(line)} > {shlex.quote(name)}", shell=True, cwd=d,
                         stderr=subprocess.DEVNULL)

    return write


def both(*writers):
    def write(d):
        for w in writers:
            w(d)

    return write


def csv_fit(what, content, *options, code=1, name="train.csv"):
    return Case("CSV data", what, ["fit", name, "-o", "run.h5", *FAST, *options], code, text(name, content))


def svm_fit(what, content, *options, code=1):
    return Case("LIBSVM data", what, ["fit", "train.svm", "-o", "run.h5", *FAST, *options], code,
                text("train.svm", content))


def idx_bytes(array, dims=None, type_code=0x08):
    dims = np.shape(array) if dims is None else dims
    header = bytes([0, 0, type_code, len(dims)]) + b"".join(int(d).to_bytes(4, "big") for d in dims)
    return header + np.asarray(array, dtype=np.uint8).tobytes()


IMAGES, LABELS = "toy-images-idx3-ubyte", "toy-labels-idx1-ubyte"
PIXELS = np.arange(6 * 2 * 2, dtype=np.uint8).reshape(6, 2, 2)
DIGITS = np.array([0, 1, 0, 1, 0, 1], dtype=np.uint8)


def idx(images=None, labels=None, gz=False):
    def write(d):
        suffix = ".gz" if gz else ""
        for name, content in ((IMAGES, images), (LABELS, labels)):
            if content is not None:
                (d / (name + suffix)).write_bytes(gzip.compress(content, mtime=0) if gz else content)

    return write


def idx_fit(what, images, labels, *options, code=1, gz=False):
    name = IMAGES + (".gz" if gz else "")
    return Case("IDX (MNIST) data", what, ["fit", name, "-o", "run.h5", *FAST, *options], code,
                idx(images, labels, gz))


GOOD_IMAGES, GOOD_LABELS = idx_bytes(PIXELS), idx_bytes(DIGITS)

UCI = {
    "data.txt": "".join(f"{a:.3f} {b:.3f} {a - b:.3f}\n" for a, b in np.random.default_rng(2).standard_normal((8, 2))),
    "index_features.txt": "0\n1\n",
    "index_target.txt": "2\n",
    "n_splits.txt": "1\n",
    "index_train_0.txt": "0\n1\n2\n3\n4\n5\n",
    "index_test_0.txt": "6\n7\n",
}


def uci(**changes):
    def write(d):
        folder = d / "toy"
        folder.mkdir()
        for name, content in {**UCI, **{k.replace("__", "."): v for k, v in changes.items()}}.items():
            if content is not None:
                (folder / name).write_text(content)

    return write


def uci_fit(what, code=1, options=("--uci-split", "0"), **changes):
    return Case("Gal-layout UCI folder", what, ["fit", "toy", "-o", "run.h5", *FAST, *options], code, uci(**changes))


def fitted(edit=None, *, test_fraction=0.25, name="run.h5", data=GOOD_CSV, data_options=None, **options):
    """Files: train.csv (``data``) and a run file fitted to it (in-process, with ``data_options`` of DataOptions and
    ``options`` of the fit), then ``edit(path)`` applied to the run file."""

    def write(d):
        (d / "train.csv").write_text(data)
        options.setdefault("hyper", {"rank": 1})
        run = fit(DataOptions(path=str(d / "train.csv"), test_fraction=test_fraction, **(data_options or {})),
                  batch_size=8, epochs=2, command=["slang", "fit", "train.csv", "-o", name], **options)
        write_run(d / name, run)
        if edit is not None:
            edit(d / name)

    return write


def h5edit(change):
    def edit(path):
        with h5py.File(path, "r+") as f:
            change(f)

    return edit


def replace(name, value):
    def change(f):
        del f[name]
        f.create_dataset(name, data=value)

    return h5edit(change)


def fill(name, value):
    """Every value of the dataset ``name`` set to ``value``."""
    return h5edit(lambda f: f[name].__setitem__(Ellipsis, value))


def link_mean(kind):
    """/posterior/mean replaced by a soft link to a copy inside the file, or an external link to another file."""

    def edit(path):
        with h5py.File(path, "r+") as f:
            mean = f["posterior/mean"][()]
            del f["posterior/mean"]
            if kind == "soft":
                f["history/kept"] = mean
                f["posterior/mean"] = h5py.SoftLink("/history/kept")
            else:
                with h5py.File(path.parent / "elsewhere.h5", "w") as other:
                    other["mean"] = mean
                f["posterior/mean"] = h5py.ExternalLink("elsewhere.h5", "/mean")

    return edit


def as_format_1_3(f):
    """The run file as slang's format 1.3 wrote it: no data schema."""
    del f["data/schema"]
    for name in ("/", "/data", "/model", "/posterior", "/history", "/metrics"):
        f[name].attrs["encoding-version"] = "1.3"


def schema_edit(change):
    """An edit of the run file's stored data schema (its JSON) by ``change(record)``."""
    def edit(f):
        record = json.loads(f["data/schema/json"][()])
        change(record)
        del f["data/schema/json"]
        f["data/schema"].create_dataset("json", data=json.dumps(record))

    return h5edit(edit)


def train_on_test_rows(f):
    """/data/train_index replaced by a copy of /data/test_index."""
    test = f["data/test_index"][()]
    del f["data/train_index"]
    f.create_dataset("data/train_index", data=test)


def set_attr(where, name, value):
    return h5edit(lambda f: f[where].attrs.__setitem__(name, value))


def truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def overwrite(path):
    data = bytearray(path.read_bytes())
    data[96:608] = np.random.default_rng(3).bytes(512)
    path.write_bytes(bytes(data))


def zero_heap_object(path):
    """Zero the 16-byte global-heap object header in front of the root's encoding-type string."""
    data = bytearray(path.read_bytes())
    at = data.index(b"slang-run", data.index(b"GCOL"))
    data[at - 16 : at] = bytes(16)
    path.write_bytes(bytes(data))


def run_case(what, edit, *command, code=1, test_fraction=0.25):
    return Case("Run files", what, [*command] if command else ["evaluate", "run.h5"], code,
                fitted(edit, test_fraction=test_fraction))


def cli(what, *options, code=2, files=None, output="run.h5"):
    return Case("Command line", what, ["fit", "train.csv", "-o", output, *options], code,
                files or text("train.csv", GOOD_CSV))


def checkpointed(name="ck.h5", cwd=None):
    """Files: train.csv and the checkpoint of a fit stopped after its first step; with ``cwd``, both in that
    subdirectory, fitted from there with a relative data path."""

    def write(d):
        from slangcli.training.checkpoints import Checkpointing

        here = d / cwd if cwd else d
        here.mkdir(exist_ok=True)
        (here / "train.csv").write_text(GOOD_CSV)
        calls = []
        old = os.getcwd()
        os.chdir(here)
        try:
            fit(DataOptions(path="train.csv"), method="bbb", batch_size=8, epochs=4,
                command=["slang", "fit", "train.csv", "-o", name],
                checkpointing=Checkpointing(write=lambda run: write_run(here / name, run),
                                            stop=lambda: calls.append(1) or len(calls) > 1, every_steps=1))
        except Exception:  # noqa: BLE001 - Interrupted: the checkpoint is written
            pass
        finally:
            os.chdir(old)

    return write


def nan_lr_checkpoint(d):
    checkpointed()(d)
    with h5py.File(d / "ck.h5", "r+") as f:
        f.attrs["config"] = f.attrs["config"].replace('"lr": 0.01', '"lr": NaN')


def out_case(what, output, *, code=2, extra=None, command="predict"):
    args = {"predict": ["predict", "run.h5", "train.csv", "-o", output],
            "compress": ["compress", "run.h5", "-k", "1", "-o", output],
            "fit": ["fit", "train.csv", *FAST, "-o", output]}[command]
    return Case("Output files, signals and resources", what, args, code, both(fitted(), extra or (lambda d: None)))


def sweep_case(what, *options, code=2, **case):
    return Case("Sweeps", what, ["sweep", "train.csv", "--epochs", "2", *options], code, text("train.csv", GOOD_CSV),
                **case)


def many_rows(d):
    """train.csv, a run fitted to it, and many.csv: 30 000 rows to predict (a write that takes long enough to aim a
    signal at)."""
    fitted()(d)
    rng = np.random.default_rng(4)
    (d / "many.csv").write_text("a,b,label\n" + "".join(f"{x:.3f},{y:.3f},{'yes' if x + y > 0 else 'no'}\n"
                                                         for x, y in rng.standard_normal((30000, 2))))


def wide_run(d):
    """run.h5: a network 2-200000-1 with a mean-field posterior (a million weights, 24 MB), made from a fitted run
    without training it: its compressed files take long enough to write to aim a signal at."""
    import dataclasses

    from slangcli.gaussian.posteriors import DiagonalGaussian
    from slangcli.runfile.io import read_run

    fitted()(d)
    run = read_run(d / "run.h5")
    model = dataclasses.replace(run.model, sizes=(2, 200000, 1))
    D = model.n_params
    rng = np.random.default_rng(5)
    posterior = DiagonalGaussian(mean=0.1 * rng.standard_normal(D), log_sigma=-2 + 0.1 * rng.standard_normal(D))
    write_run(d / "run.h5", dataclasses.replace(run, model=model, prior_precision=np.ones(D), posterior=posterior))


def wider_svm_test(d):
    (d / "train.svm").write_text(GOOD_SVM)
    (d / "test.svm").write_text("+1 1:0.5 9:1\n-1 1:-0.5\n")


CASES = [
    csv_fit("non-numeric feature cell", "a,b,label\n1,2,no\n1,x,yes\n"),
    csv_fit("empty feature cell (missing value)", "a,b,label\n1,2,no\n1,,yes\n"),
    csv_fit("NaN feature", "a,b,label\n1,2,no\n1,nan,yes\n"),
    csv_fit("infinite feature", "a,b,label\n1,2,no\n-inf,2,yes\n"),
    csv_fit("number too large for float64 (overflows to inf)", "a,b,label\n1,2,no\n1e999,2,yes\n"),
    csv_fit("row with fewer cells than the header", "a,b,label\n1,2,no\n1,yes\n3,4,no\n"),
    csv_fit("row with more cells", "a,b,label\n1,2,no\n1,2,3,yes\n"),
    csv_fit("empty file", ""),
    csv_fit("only blank lines and comments", "\n# nothing here\n\n"),
    csv_fit("header row only", "a,b,label\n"),
    csv_fit("a single column", "label\nyes\nno\n"),
    csv_fit("--delimiter that is not the file's", GOOD_CSV, "--delimiter", ";"),
    csv_fit("mixed delimiters", "a,b,label\n1,2,no\n1;2;yes\n"),
    csv_fit("unterminated quoted cell", 'a,b,label\n1,"2,no\n3,4,yes\n'),
    csv_fit("stray carriage return inside a line", "a,b,label\n1,2\r,no\n"),
    csv_fit("not UTF-8 (Latin-1 byte)", "a,b,label\n1,2,no\n1,2,caf\xe9\n".encode("latin-1")),
    csv_fit("binary file (NUL bytes)", b"a,b,label\n\x00\x01\x02\n"),
    csv_fit("corrupt gzip stream", gzip.compress(GOOD_CSV.encode(), mtime=0)[:40], name="train.csv.gz"),
    csv_fit("a file compressed with bzip2 (slang reads plain text and gzip)", bz2.compress(GOOD_CSV.encode()),
            name="train.csv.bz2"),
    csv_fit("a 30 KB gzip file of 30 MB of blank lines (read in blocks: the memory of an empty file)",
            gzip.compress(b"\n" * (30 << 20), mtime=0), name="blank.csv.gz"),
    Case("CSV data", "gzip data expanding beyond the limit, max(1 GiB, 1000 x the compressed size) (lowered to 1 MiB "
         "and 100 x for this page, as the tests do)", ["fit", "bomb.csv.gz", "-o", "run.h5", *FAST], 1,
         text("bomb.csv.gz", gzip.compress(b"1,2,0\n" * (1 << 20), mtime=0)),
         before="import slangcli.data.readers._common as c; c.GZIP_FLOOR = 1 << 20; c.GZIP_RATIO = 100; "),
    Case("CSV data", "a device as DATA (/dev/urandom: data without end)", ["fit", "/dev/urandom", "-o", "run.h5",
                                                                            *FAST], 1),
    Case("CSV data", "a pipe without end (a FIFO fed by `yes 1,2,0`, as `<(yes 1,2,0)` is) beyond the limit of a "
         "stream, 1 GiB (lowered to 1 MiB for this page, as the tests do)", ["fit", "data.csv", "-o", "run.h5", *FAST],
         1, endless_pipe("data.csv", "1,2,0"),
         before="import slangcli.data.readers._common as c; c.STREAM_LIMIT = 1 << 20; "),
    csv_fit("a file name holding a newline (escaped: the message stays one line)", "a,b,label\n1,2,no\n1,x,yes\n",
            name="tr\nain.csv"),
    csv_fit("missing value token in a feature", "a,b,label\n1,2,no\n1,?,yes\n3,NA,no\n"),
    csv_fit("text that is not a --na-values token", "a,b,label\n1,2,no\n1,?,yes\n3,NA,no\n", "--na-values", "?",
            "--missing", "drop"),
    csv_fit("every row has a missing value, --missing drop", "a,b,label\n1,?,no\n,2,yes\n", "--missing", "drop"),
    csv_fit("columns of text (accepted: a categorical column one-hot, a yes/no column boolean), --missing impute",
            CATEGORY_CSV, "--missing", "impute", code=0),
    csv_fit("a column of numbers and text (a typo in a column of numbers is not made a category)",
            "a,b,label\n1,2.5,no\n3,4.5,yes\n5,4.x,no\n"),
    csv_fit("a column of text with more than 1000 levels (an identifier, not a category)",
            "name,a,label\n" + "".join(f"p{k},{k % 7},{'yes' if k % 2 else 'no'}\n" for k in range(1001))),
    csv_fit("--categorical names the target", GOOD_CSV, "--categorical", "label"),
    csv_fit("--categorical names a column left out", GOOD_CSV, "--categorical", "a", "--drop-columns", "a"),
    csv_fit("a column without a value in any training row, --missing impute",
            "a,b,label\n1,NA,no\n2,NA,yes\n3,NA,no\n", "--missing", "impute"),
    csv_fit("every target missing, --missing impute (a target is never imputed)",
            "a,b,label\n1,2,NA\n2,3,?\n", "--missing", "impute"),
    csv_fit("--drop-columns names the target", GOOD_CSV, "--drop-columns", "label"),
    csv_fit("--drop-columns index out of range", GOOD_CSV, "--drop-columns", "3"),
    csv_fit("--columns names no column", GOOD_CSV, "--columns", "a,c"),
    csv_fit("--drop-columns of every feature", GOOD_CSV, "--drop-columns", "a,b"),
    csv_fit("empty target cell", "a,b,label\n1,2,no\n1,2,\n"),
    csv_fit("NaN label", "a,b,label\n1,2,0\n1,2,nan\n"),
    csv_fit("only one label value", "a,b,label\n1,2,no\n3,4,no\n"),
    csv_fit("three label values for a binary model", "a,b,label\n1,2,a\n3,4,b\n5,6,c\n", "--likelihood",
            "bernoulli"),
    csv_fit("--target names no column", GOOD_CSV, "--target", "nosuch"),
    csv_fit("--target index out of range", GOOD_CSV, "--target", "7"),
    csv_fit("--target name without a header row", GOOD_CSV.split("\n", 1)[1], "--target", "label"),
    csv_fit("regression target that is constant", "a,b,y\n1,2,5\n3,4,5\n", "--likelihood", "gaussian"),
    csv_fit("regression target that is not numeric", GOOD_CSV, "--likelihood", "gaussian"),
    csv_fit("features near 1e300, used as read (--no-standardize)", scaled_csv(300), "--no-standardize"),
    Case("CSV data", "features near 1e300 used as read, --method exact-full",
         ["fit", "train.csv", "-o", "run.h5", "--method", "exact-full", "--no-standardize"], 1,
         text("train.csv", scaled_csv(300))),
    csv_fit("features near 1e300, standardised by default (accepted: they fit as any others)", scaled_csv(300),
            code=0),
    csv_fit("features near 1e-300, used as read (accepted, with a warning)", scaled_csv(-300), "--no-standardize",
            code=0),
    csv_fit("features near 1e100, used as read: the fit diverges (the message names their magnitude)",
            scaled_csv(100), "--no-standardize"),
    csv_fit("regression target near 1e-300 (accepted: standardised, it is not constant)", scaled_csv(-300, True),
            "--likelihood", "gaussian", code=0),
    Case("CSV data", "test file with another number of features",
         ["fit", "train.csv", "--test", "test.csv", "-o", "run.h5", *FAST], 1,
         both(text("train.csv", GOOD_CSV), text("test.csv", "a,b,c,label\n1,2,3,no\n"))),
    Case("CSV data", "test file with a level of a categorical column unseen in the training file",
         ["fit", "train.csv", "--test", "test.csv", "-o", "run.h5", *FAST, "--missing", "impute"], 1,
         both(text("train.csv", CATEGORY_CSV),
              text("test.csv", "a,colour,smoker,label\n1,red,no,no\n2,pink,yes,no\n"))),
    Case("CSV data", "test file with a label unseen in training",
         ["fit", "train.csv", "--test", "test.csv", "-o", "run.h5", *FAST], 1,
         both(text("train.csv", GOOD_CSV), text("test.csv", "a,b,label\n1,2,no\n1,2,maybe\n"))),
    Case("CSV data", "missing data file", ["fit", "train.csv", "-o", "run.h5", *FAST], 1),
    Case("CSV data", "data path is a directory", ["fit", "data", "-o", "run.h5", *FAST], 1,
         lambda d: (d / "data").mkdir()),
    svm_fit("feature index 0 (indices are 1-based)", "+1 0:1 2:3\n-1 1:1\n"),
    svm_fit("indices not increasing", "+1 1:1 3:2\n-1 3:1 2:2\n"),
    svm_fit("repeated index", "+1 2:1 2:2\n-1 1:1\n"),
    svm_fit("value that is not a number", "+1 1:1 2:abc\n-1 1:1\n"),
    svm_fit("index that is not an integer", "+1 1.5:1\n-1 1:1\n"),
    svm_fit("NaN value", "+1 1:nan\n-1 1:1\n"),
    svm_fit("--drop-columns on a LIBSVM file", GOOD_SVM, "--drop-columns", "1"),
    svm_fit("missing label on a later line", "+1 1:1\n2:1 3:0.5\n"),
    svm_fit("missing label on the first line (idx:val tokens alone: recognised as LIBSVM)", "1:0.5 2:1\n-1 1:1\n"),
    svm_fit("missing label on the first line, --format libsvm", "1:0.5 2:1\n-1 1:1\n", "--format", "libsvm"),
    svm_fit("ranking data (qid:)", "+1 qid:3 1:1\n-1 qid:3 1:2\n"),
    svm_fit("index above --n-features", "+1 1:1\n-1 5:1\n", "--n-features", "3"),
    svm_fit("index far beyond the file's size", "+1 1:1\n-1 1234567890:1\n"),
    svm_fit("only labels, no features", "+1\n-1\n"),
    Case("LIBSVM data", "test file wider than the training file (accepted: padded with zero columns)",
         ["fit", "train.svm", "--test", "test.svm", "-o", "run.h5", *FAST], 0, wider_svm_test),
    idx_fit("truncated images file", GOOD_IMAGES[:-5], GOOD_LABELS),
    idx_fit("truncated images file (gzip)", GOOD_IMAGES[:-5], GOOD_LABELS, gz=True),
    idx_fit("trailing bytes after the images", GOOD_IMAGES + b"\x00", GOOD_LABELS),
    idx_fit("header declaring 4 294 967 295 images", idx_bytes(PIXELS, dims=(2**32 - 1, 2, 2)), GOOD_LABELS),
    idx_fit("wrong magic number (so not recognised as IDX)", b"\x08\x03\x00\x00" + GOOD_IMAGES[4:], GOOD_LABELS),
    idx_fit("wrong magic number, --format idx", b"\x08\x03\x00\x00" + GOOD_IMAGES[4:], GOOD_LABELS, "--format",
            "idx"),
    idx_fit("labels file given as the images", GOOD_LABELS, GOOD_LABELS, "--format", "idx"),
    idx_fit("data type other than unsigned byte", idx_bytes(PIXELS, type_code=0x0D), GOOD_LABELS),
    idx_fit("labels file missing", GOOD_IMAGES, None),
    idx_fit("label count differs from image count", GOOD_IMAGES, idx_bytes(DIGITS[:4])),
    idx_fit("corrupt gzip stream", gzip.compress(GOOD_IMAGES, mtime=0)[:30] + b"\x00" * 8, None, gz=False),
    uci_fit("index file missing", index_target__txt=None),
    uci_fit("folder given without --uci-split", code=2, options=()),
    uci_fit("split beyond n_splits.txt", options=("--uci-split", "3")),
    uci_fit("row index beyond data.txt", index_test_0__txt="6\n8\n"),
    uci_fit("row index repeated", index_train_0__txt="0\n1\n2\n1\n"),
    uci_fit("row both in the training and the test set", index_test_0__txt="6\n2\n"),
    uci_fit("target column also a feature", index_features__txt="0\n2\n"),
    uci_fit("index that is not an integer", index_features__txt="0\n1.5\n"),
    uci_fit("ragged data.txt", **{"data__txt": UCI["data.txt"] + "1 2\n"}),
    uci_fit("non-numeric value in data.txt", **{"data__txt": "1 2 x\n" + UCI["data.txt"]}),
    run_case("missing run file", None, "evaluate", "absent.h5"),
    Case("Run files", "a text file, not HDF5", ["inspect", "notes.h5"], 1, text("notes.h5", "not HDF5\n")),
    run_case("truncated run file", truncate),
    run_case("512 bytes overwritten", overwrite),
    run_case("written by a newer major format version", set_attr("/", "encoding-version", "2.0"), "inspect",
             "run.h5"),
    run_case("HDF5 file that is not a slang run", h5edit(lambda f: f.attrs.__delitem__("encoding-type"))),
    run_case("unknown posterior encoding", set_attr("/posterior", "encoding-type", "kfac-gaussian")),
    run_case("posterior dataset missing", h5edit(lambda f: f["posterior"].__delitem__("d"))),
    run_case("posterior mean of the wrong shape", replace("posterior/mean", np.zeros(2))),
    run_case("NaN in the posterior mean", replace("posterior/mean", np.array([0.0, np.nan, 0.0]))),
    run_case("non-positive precision diagonal", replace("posterior/d", np.array([1.0, 0.0, 1.0]))),
    run_case("configuration attribute that is not JSON", set_attr("/", "config", "{not json")),
    run_case("recorded command that is not a list of strings", set_attr("/", "command", "2.0"), "inspect",
             "run.h5"),
    run_case("test split index beyond the training rows", replace("data/test_index", np.array([3, 99]))),
    run_case("test split index listing a row twice", replace("data/test_index", np.array([1, 1, 2, 3]))),
    run_case("training split index equal to the test index (evaluate would score the training -ELBO on test rows)",
             h5edit(train_on_test_rows)),
    # (16 rows: 12 in training, of which --calibrate 0.25 holds out 3)
    Case("Run files", "calibration scores not sorted (a corrupted /calibration group)", ["evaluate", "run.h5"], 1,
         fitted(replace("calibration/scores", np.array([0.5, 0.2, 0.9])), calibrate=0.25)),
    Case("Run files", "calibration rows among the rows trained on", ["predict", "run.h5", "train.csv", "-o", "p.csv"],
         1, fitted(h5edit(lambda f: f["calibration/index"].__setitem__(0, f["data/train_index"][0])), calibrate=0.25)),
    run_case("training data changed since the fit",
             lambda p: (p.parent / "train.csv").write_text(GOOD_CSV + "1,1,no\n")),
    run_case("training data removed since the fit", lambda p: (p.parent / "train.csv").unlink()),
    run_case("no test data recorded and none given", None, test_fraction=None, code=2),
    run_case("slang compress --evaluate on a run without test data", None, "compress", "run.h5", "-k", "1", "-o",
             "c.h5", "--evaluate", test_fraction=None, code=2),
    Case("Run files", "evaluation data without a header row, of another number of columns",
         ["evaluate", "run.h5", "other.csv"], 1, both(fitted(), text("other.csv", "1,2,3,no\n"))),
    run_case("corrupted global heap (libhdf5 would loop forever: stopped after 5 s)", zero_heap_object, "inspect",
             "run.h5"),
    cli("unknown option", "--bogus"),
    cli("option value that is not a number", "--lr", "abc"),
    cli("test fraction outside (0, 1)", "--test-fraction", "1.5"),
    cli("--calibrate outside (0, 1)", "--calibrate", "1"),
    cli("--calibrate holding out no row of 16", *FAST, "--calibrate", "0.01", code=1),
    cli("unsupported delimiter", "--delimiter", "|"),
    cli("--test together with --test-fraction", "--test", "train.csv", "--test-fraction", "0.3"),
    cli("--drop-columns together with --columns", "--drop-columns", "a", "--columns", "b"),
    cli("--epochs together with --iterations", "--epochs", "2", "--iterations", "5"),
    cli("--beta above 1", "--beta", "1.5"),
    cli("zero prior precision", "--prior-precision", "0"),
    cli("malformed --hidden", "--hidden", "4,x"),
    cli("--uci-split on a file, not a folder", "--uci-split", "0"),
    cli("--n-features 0", "--n-features", "0"),
    cli("output directory does not exist", output="nodir/run.h5"),
    cli("output path is the input file", output="train.csv"),
    cli("diverging run (learning rate 1e300)", *FAST, "--lr", "1e300", code=1),
    cli("diverging run whose loss stays finite (learning rate 1e8: a millionfold its first epoch's)", "--epochs",
        "5", "--rank", "1", "--lr", "1e8", code=1),
    cli("noise precision beyond 1e150", "--noise-precision", "1e300"),
    cli("a run file to standard output (-o -)", *FAST, output="-"),
    Case("Run files", "prediction data with the training columns in another order (matched by name)",
         ["predict", "run.h5", "swapped.csv", "-o", "p.csv"], 0,
         both(fitted(), text("swapped.csv", "b,a,label\n" + "".join(
             ",".join([r.split(",")[1], r.split(",")[0], r.split(",")[2]]) + "\n"
             for r in GOOD_CSV.splitlines()[1:])))),
    Case("Run files", "prediction data whose header names differ from the run's features",
         ["predict", "run.h5", "other.csv", "-o", "p.csv"], 1,
         both(fitted(), text("other.csv", GOOD_CSV.replace("a,b,label", "a,c,label", 1)))),
    Case("Run files", "prediction data with a column the run does not know (ignored, named in a note)",
         ["predict", "run.h5", "extra.csv", "-o", "p.csv"], 0,
         both(fitted(), text("extra.csv", "".join(f"{cell},{line}\n" for cell, line in zip(
             ["id", *(f"X{k}" for k in range(16))], GOOD_CSV.splitlines()))))),
    Case("Run files", "prediction data without a header row whose width fits two layouts (the fit left out one "
         "column: its columns without the target, or the features and the target)",
         ["predict", "run.h5", "no-id.csv", "-o", "p.csv"], 1,
         both(fitted(data=HEADERLESS_ID_CSV, data_options={"drop_columns": "0"}),
              text("no-id.csv", "".join(line.split(",", 1)[1] + "\n" for line in HEADERLESS_ID_CSV.splitlines())))),
    Case("Run files", "prediction data with a missing value (the row kept, its predictions empty)",
         ["predict", "run.h5", "gap.csv", "-o", "p.csv"], 0,
         both(fitted(), text("gap.csv", "".join(("?," + line.split(",", 1)[1] if k == 3 else line) + "\n"
                                               for k, line in enumerate(GOOD_CSV.splitlines()))))),
    Case("Run files", "prediction data with a level of a categorical column the fit never saw",
         ["predict", "run.h5", "new.csv", "-o", "p.csv"], 1,
         both(fitted(data=CATEGORY_CSV, data_options={"missing": "impute"}),
              text("new.csv", "a,colour,smoker\n0.5,red,yes\n0.5,purple,no\n"))),
    Case("Run files", "prediction data whose boolean column holds another word",
         ["predict", "run.h5", "new.csv", "-o", "p.csv"], 1,
         both(fitted(data=CATEGORY_CSV, data_options={"missing": "impute"}),
              text("new.csv", "a,colour,smoker\n0.5,red,maybe\n"))),
    Case("Run files", "prediction data with missing values, fit with --missing impute (accepted: imputed as in the "
         "fit, the default)", ["predict", "run.h5", "new.csv", "-o", "p.csv"], 0,
         both(fitted(data=CATEGORY_CSV, data_options={"missing": "impute"}),
              text("new.csv", "a,colour,smoker\nNA,red,NA\n0.5,NA,no\n"))),
    run_case("predict --missing impute on a run written before 1.4 (no values stored to impute)",
             h5edit(as_format_1_3), "predict", "run.h5", "train.csv", "-o", "p.csv", "--missing", "impute"),
    run_case("a stored data schema whose inputs are not the model's",
             schema_edit(lambda record: record["columns"].pop()), "inspect", "run.h5"),
    Case("Run files", "evaluation data without the target column",
         ["evaluate", "run.h5", "features.csv"], 1,
         both(fitted(), text("features.csv", "\n".join(",".join(r.split(",")[:2])
                                                       for r in GOOD_CSV.splitlines()) + "\n"))),
    Case("Run files", "slang compress on a checkpoint (a fit stopped part-way)", ["compress", "ck.h5", "-k", "1",
                                                                               "-o", "c.h5"], 1, checkpointed()),
    Case("Run files", "slang fit --resume from another working directory (the recorded absolute paths are read)",
         ["fit", "--resume", "sub/ck.h5", "--no-progress"], 0, checkpointed(cwd="sub")),
    Case("Run files", "a checkpoint whose stored lr is NaN", ["fit", "--resume", "ck.h5"], 1, nan_lr_checkpoint),
    run_case("unknown posterior encoding stored as a fixed-length byte string (named as text)",
             set_attr("/posterior", "encoding-type", np.bytes_(b"kfac-gaussian")), "inspect", "run.h5"),
    Case("Run files", "a FIFO as the run file (refused before opening it, which would wait for a writer)",
         ["evaluate", "pipe.h5"], 1, lambda d: os.mkfifo(d / "pipe.h5")),
    Case("Run files", "a device as the run file", ["inspect", "/dev/null"], 1),
    run_case("posterior mean of 1e300 (beyond the reader's bound: its square overflows)",
             fill("posterior/mean", 1e300)),
    Case("Run files", "regression network (--hidden 4) whose posterior mean is 1e149: within the bound, but its "
         "predictions overflow", ["evaluate", "run.h5"], 1,
         fitted(fill("posterior/mean", 1e149), data=REGRESSION_CSV, hidden=(4,))),
    Case("Run files", "slang plot --kind spectrum of a rank-2 SLANG posterior whose U is 1e149 (U U^T overflows)",
         ["plot", "run.h5", "--kind", "spectrum", "-o", "p.png"], 1,
         fitted(fill("posterior/U", 1e149), hyper={"rank": 2})),
    Case("Run files", "slang plot --kind posterior of a rank-2 SLANG posterior whose U is 1e149",
         ["plot", "run.h5", "--kind", "posterior", "--reference", "ref.h5", "-o", "p.png"], 1,
         both(fitted(name="ref.h5", hyper={"rank": 2}), fitted(fill("posterior/U", 1e149), hyper={"rank": 2}))),
    Case("Run files", "slang plot --kind calibration of the regression network whose posterior mean is 1e149",
         ["plot", "run.h5", "--kind", "calibration", "-o", "p.png"], 1,
         fitted(fill("posterior/mean", 1e149), data=REGRESSION_CSV, hidden=(4,))),
    run_case("/posterior/mean an external link into another file", link_mean("external")),
    run_case("/posterior/mean a soft link within the file", link_mean("soft")),
    cli("--target 2 where a header column is named 2 (the name wins, and is said)", *FAST, "--target", "2",
        code=0, files=text("train.csv", NUMBER_HEADER)),
    cli("--target #2: a 0-based position, whatever the header says", *FAST, "--target", "#2", code=0,
        files=text("train.csv", NUMBER_HEADER)),
    cli("--restarts 3 (three fits from different seeds, the best kept)", *FAST, "--restarts", "3", code=0),
    cli("--members 3 (three posteriors from different seeds, their mixture kept)", *FAST, "--members", "3", code=0),
    cli("--members 0", *FAST, "--members", "0"),
    cli("--members 2 with a deterministic solver (--method exact-full: every member would be the same posterior)",
        "--method", "exact-full", "--members", "2"),
    Case("Run files", "evaluate --reference with a mixture of posteriors (--members 2: no KL divergence in closed "
         "form)", ["evaluate", "run.h5", "--reference", "ref.h5"], 2,
         both(fitted(name="ref.h5"), fitted(members=2))),
    Case("Run files", "a mixture of posteriors whose member 1 is of an unknown kind", ["inspect", "run.h5"], 1,
         fitted(set_attr("/posterior/member_1", "encoding-type", "student-t"), members=2)),
    Case("Run files", "a mixture of posteriors whose 'members' attribute says 3 but that holds 2",
         ["evaluate", "run.h5"], 1, fitted(set_attr("/posterior", "members", 3), members=2)),
    Case("Run files", "a mixture of posteriors whose member 0 has a negative diagonal precision d",
         ["predict", "run.h5", "train.csv", "-o", "p.csv"], 1, fitted(fill("posterior/member_0/d", -1.0), members=2)),
    cli("--noise-model linear for a classification (yes/no labels)", *FAST, "--noise-model", "linear"),
    Case("Run files", "a noise model with a NaN weight (/model/noise_weights)",
         ["predict", "run.h5", "train.csv", "-o", "p.csv"], 1,
         fitted(h5edit(lambda f: f["model/noise_weights"].__setitem__(0, np.nan)), data=REGRESSION_CSV,
                hidden=(4,))),
    cli("--seed of 2**64", "--seed", str(2**64)),
    cli("--test-fraction nan", "--test-fraction", "nan"),
    out_case("-o a device (/dev/null)", "/dev/null"),
    out_case("-o a FIFO", "fifo", extra=lambda d: os.mkfifo(d / "fifo")),
    out_case("-o a dangling symbolic link", "link", extra=lambda d: (d / "link").symlink_to("nowhere")),
    out_case("-o a symbolic link to /dev/stdout", "out", extra=lambda d: (d / "out").symlink_to("/dev/stdout"),
             command="fit"),
    out_case("-o an existing directory", "existing", extra=lambda d: (d / "existing").mkdir()),
    out_case("compress -o a new directory name (trailing /)", "newdir/", command="compress"),
    out_case("-o a name of 250 characters (refused before the fit)", "r" * 250 + ".h5", command="fit"),
    Case("Output files, signals and resources", "disk full: a file-size limit of 4 KiB (ulimit -f)",
         ["fit", "train.csv", "--hidden", "32", "--method", "slang", *FAST, "-o", "run.h5"], 1,
         text("train.csv", GOOD_CSV),
         fsize=4096),
    Case("Output files, signals and resources", "disk full: a file-size limit of 4 KiB, slang predict -o OUT.h5",
         ["predict", "run.h5", "train.csv", "-o", "p.h5"], 1, fitted(), fsize=4096),
    Case("Output files, signals and resources", "stdout on a full disk (slang predict -o - > /dev/full)",
         ["predict", "run.h5", "train.csv", "-o", "-"], 1, fitted(), stdout="/dev/full"),
    Case("Output files, signals and resources", "--samples 10**12 (refused before allocating)",
         ["predict", "run.h5", "train.csv", "-o", "p.csv", "--samples", str(10**12)], 2, fitted()),
    Case("Output files, signals and resources", "--bins 10**12 (refused before allocating)",
         ["evaluate", "run.h5", "--bins", str(10**12)], 2, fitted()),
    Case("Run files", "a 20 KB run file declaring an 8 TB chunked dataset", ["evaluate", "run.h5"], 1,
         fitted(h5edit(lambda f: f["history"].create_dataset("huge", shape=(10**12,), dtype="f8",
                                                             chunks=(1024,))))),
    Case("Output files, signals and resources", "a step's weight samples beyond the memory the process can have "
         "(ulimit -v 700000, nine million weights): refused before the fit",
         ["fit", "train.csv", "--hidden", "3000,3000", "--method", "slang", *FAST, "-o", "run.h5"], 2,
         text("train.csv", GOOD_CSV), memory=700 << 20),
    Case("Output files, signals and resources", "memory exhausted during the fit (ulimit -v 700000, nine million "
         "weights, one weight sample a step)", ["fit", "train.csv", "--hidden", "3000,3000", "--method", "slang",
                                               "--samples", "1", *FAST, "-o", "run.h5"], 1,
         text("train.csv", GOOD_CSV), memory=700 << 20),
    Case("Output files, signals and resources", "SIGTERM while slang predict writes its CSV file",
         ["predict", "run.h5", "many.csv", "-o", "p.csv"], 143, many_rows, signal=Signal(15, glob=".p.csv*.tmp")),
    Case("Output files, signals and resources", "SIGINT (Ctrl-C) while slang compress writes its files",
         ["compress", "run.h5", "-k", "1", "-o", "c.h5"], 130, wide_run, signal=Signal(2, glob=".c.h5*.tmp")),
    Case("Output files, signals and resources", "SIGINT (Ctrl-C) while slang predict writes its CSV file",
         ["predict", "run.h5", "many.csv", "-o", "p.csv"], 130, many_rows, signal=Signal(2, glob=".p.csv*.tmp")),
    Case("Output files, signals and resources", "SIGHUP while slang predict writes its CSV file",
         ["predict", "run.h5", "many.csv", "-o", "p.csv"], 129, many_rows, signal=Signal(1, glob=".p.csv*.tmp")),
    Case("Output files, signals and resources", "SIGTERM during --tune, once the first round's 'slang: tuning' lines "
         "appear (stops at once)", ["fit", "data.csv", "--tune", "prior-precision", "--epochs", "150", "-o",
                                    "out.h5"], 143, text("data.csv", TUNE_CSV),
         signal=Signal(15, text="slang: tuning")),
    Case("Output files, signals and resources", "SIGINT (Ctrl-C) during --tune, once the first round's 'slang: "
         "tuning' lines appear", ["fit", "data.csv", "--tune", "prior-precision", "--epochs", "150", "-o",
                                  "out.h5"], 130, text("data.csv", TUNE_CSV), signal=Signal(2, text="slang: tuning")),
    Case("Output files, signals and resources", "stdout closed by its reader (slang evaluate run.h5 --json | "
         "head -c 0): quiet", ["evaluate", "run.h5", "--json"], 141, fitted(), stdout=CLOSED),
    Case("Output files, signals and resources", "stdout closed (slang inspect run.h5 --json >&-): refused before "
         "any work", ["inspect", "run.h5", "--json"], 1, fitted(), stdout=NO_STDOUT),
    Case("Output files, signals and resources", "stdout closed (slang predict run.h5 train.csv -o - >&-)",
         ["predict", "run.h5", "train.csv", "-o", "-"], 1, fitted(), stdout=NO_STDOUT),
    out_case("-o '' (an empty path; refused before the fit)", "", command="fit"),
    Case("Output files, signals and resources", "-o a read-only file (chmod 444), the same in every command",
         ["predict", "run.h5", "train.csv", "-o", "p.csv"], 2, both(fitted(), text("p.csv", "kept\n"),
                                                                    lambda d: (d / "p.csv").chmod(0o444)),
         unprivileged=True),
    Case("Run files", "a run file the user may not read (chmod 000)", ["inspect", "run.h5"], 1,
         fitted(lambda path: path.chmod(0)), unprivileged=True),
    Case("Output files, signals and resources", "an address-space limit of 300 MB (ulimit -v 307200): refused up "
         "front", ["evaluate", "run.h5"], 1, fitted(), memory=300 << 20),
    Case("Output files, signals and resources", "an address-space limit of 200 000 KB (ulimit -v 200000; OpenBLAS "
         "spun forever in import scipy)", ["evaluate", "run.h5"], 1, fitted(), memory=200000 << 10),
    cli("features near 1e160, used as read, are refused", *FAST, "--no-standardize", code=1,
        files=text("train.csv", "a,b,label\n" + "".join(f"{v:.3e},1,{k % 2}\n" for k, v in
                                                       enumerate(np.linspace(-1e160, 1e160, 12))))),
    sweep_case("-o beneath a file (refused before a cluster starts)", "-o", "train.csv/out"),
    sweep_case("--scheduler that is not an address (DIR not made)", "-o", "out", "--scheduler", "no such thing"),
    sweep_case("--scheduler where nothing listens (DIR not made; Dask's connection timeout, 30 s, lowered to 2 s "
               "for the page)", "-o", "out", "--scheduler", "tcp://127.0.0.1:9", code=1,
               before="import dask; dask.config.set({'distributed.comm.timeouts.connect': '2s'}); "),
    Case("Sweeps", "slang fit --restarts with a --scheduler that is not an address (checked as slang sweep checks it)",
         ["fit", "train.csv", "-o", "run.h5", "--epochs", "2", "--restarts", "2", "--scheduler", "no such thing"], 2,
         text("train.csv", GOOD_CSV)),
    Case("Sweeps", "slang fit --restarts with a --scheduler where nothing listens (Dask's connection timeout, 30 s, "
         "lowered to 2 s for the page)",
         ["fit", "train.csv", "-o", "run.h5", "--epochs", "2", "--restarts", "2", "--scheduler", "tcp://127.0.0.1:9"],
         1, text("train.csv", GOOD_CSV),
         before="import dask; dask.config.set({'distributed.comm.timeouts.connect': '2s'}); "),
    Case("Sweeps", "slang fit --members on a --scheduler with --checkpoint-every (members trained on a cluster are not "
         "checkpointed)",
         ["fit", "train.csv", "-o", "run.h5", "--epochs", "2", "--members", "2", "--checkpoint-every", "5",
          "--scheduler", "tcp://127.0.0.1:9"], 2, text("train.csv", GOOD_CSV)),
    sweep_case("SIGTERM to a sweep of 200 fits on 2 local workers once its table is written (the fits finished so "
               "far are in it)", "--seed", "0-199", "-o", ".", "--workers", "2", code=143,
               signal=Signal(15, glob="results.json")),
]


# ------------------------------------------------------------------------------------------------ running


def slang(case, cwd):
    """(exit code or None if stopped, stderr) of this checkout's slang run in ``cwd`` with ``case``'s arguments,
    limits, stdout and signal."""
    import locale
    import resource
    import time

    def limit():
        if case.stdout == NO_STDOUT:
            os.close(1)
        if case.fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (case.fsize, case.fsize))
        if case.memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (case.memory, case.memory))

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
               NO_COLOR="1", TERM="dumb", COLUMNS="100")
    command = [*(AS_A_USER if case.unprivileged else []), sys.executable, "-c",
               f"{case.before}from slangcli.__main__ import main; main(prog_name='slang')", *case.args]
    # a signal case runs again when the command ended before its trigger was seen (a loaded machine)
    for _ in range(3 if case.signal else 1):
        with open(os.devnull if case.stdout in (None, CLOSED, NO_STDOUT) else case.stdout, "w") as sink:
            proc = subprocess.Popen(command, cwd=cwd, env=env, stderr=subprocess.PIPE, preexec_fn=limit,
                                    stdout=subprocess.PIPE if case.stdout == CLOSED else sink)
            if case.stdout == CLOSED:
                proc.stdout.close()  # the reader went away before the command wrote anything
            seen, sent = b"", None
            if case.signal is not None:
                seen, sent = _signal_when_triggered(proc, cwd, case.signal)
            try:
                _, rest = proc.communicate(timeout=HANG_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                return None, ""
            if sent is not None and time.monotonic() - sent > SIGNAL_SECONDS:
                raise SystemExit(f"bad_inputs.py: {case.what}: still running {SIGNAL_SECONDS} s after the signal")
        if case.signal is None or sent is not None:
            break
        time.sleep(1)
    return proc.returncode, (seen + rest).decode(locale.getpreferredencoding(False))


def _signal_when_triggered(proc, cwd, signal):
    """Send ``signal`` to ``proc`` as soon as its trigger is seen (what the command wrote to stderr meanwhile is
    read here); returns (that stderr, the time the signal was sent, or None if the command ended first or a
    triggering file was gone once the signal was sent: a write that had ended, whose outcome would differ)."""
    import fnmatch
    import select
    import time

    seen = b""
    deadline = time.monotonic() + TRIGGER_SECONDS
    while proc.poll() is None and time.monotonic() < deadline:
        if signal.text is not None:
            if select.select([proc.stderr], [], [], 0.01)[0]:
                seen += os.read(proc.stderr.fileno(), 65536)
            triggered = [] if signal.text.encode() in seen else None
        else:
            triggered = [p for p in Path(cwd).iterdir() if fnmatch.fnmatchcase(p.name, signal.glob)] or None
            time.sleep(0.0005)
        if triggered is not None:
            for _ in range(signal.times):
                proc.send_signal(signal.number)
            sent = time.monotonic()
            return seen, sent if all(p.exists() for p in triggered) else None
    return seen, None


def check(case, code, stderr):
    problems = []
    if code != case.exit:
        problems.append(f"exit {code}, expected {case.exit}")
    if "Traceback" in stderr:
        problems.append("a traceback")
    # a fit states the task it inferred before training, so a divergence comes after those lines
    lines = [line for line in stderr.splitlines() if not line.startswith(TASK_LINES)]
    if code == 1 and (len(lines) != 1 or not lines[0].startswith("slang: error: ")):
        problems.append("not one line 'slang: error: ...'")
    if problems:
        raise SystemExit(f"bad_inputs.py: {case.section} / {case.what}: {', '.join(problems)}:\n{stderr}")


def cell(code, stderr, directory):
    if code is None:
        return f"(nothing: stopped after {HANG_SECONDS} s)"
    if not stderr:
        return "(nothing)"
    lines = stderr.replace(str(directory) + os.sep, "").replace(str(directory), ".").rstrip("\n").split("\n")
    if code == 0:  # the notes, not the metrics table
        lines = [line for line in lines if line.startswith("slang: ")] + ["(then the metrics table)"]
    elif code == 141:  # stdout's reader went away: the metrics table still goes to stderr, and no message
        lines = [line for line in lines if line.startswith("slang: ")] + ["(the metrics table only)"]
    return "<code>" + "<br>".join(html.escape(line, quote=False).replace("|", "&#124;") for line in lines) + "</code>"


def _quoted(arg):
    """``arg`` as a shell would need it: ``$'...'`` with escapes for a name holding a newline (bash, zsh)."""
    if arg.isprintable():
        return shlex.quote(arg)
    return "$'" + arg.encode("unicode_escape").decode("ascii").replace("'", "\\'") + "'"


def command_cell(args):
    return "`" + " ".join(_quoted(str(a)) for a in ["slang", *args]).replace("|", "\\|") + "`"


def generate(progress=lambda message: None) -> str:
    sections = {}
    with tempfile.TemporaryDirectory(prefix="slang-bad-inputs-") as tmp:
        for k, case in enumerate(CASES):
            directory = Path(tmp) / f"case{k:03d}"
            directory.mkdir()
            case.files(directory)
            progress(f"{case.section}: {case.what}")
            code, stderr = slang(case, directory)
            check(case, code, stderr)
            left = sorted(str(p.relative_to(directory)) for p in directory.rglob("*.tmp"))
            if left:
                raise SystemExit(f"bad_inputs.py: {case.section} / {case.what}: left {', '.join(left)}")
            shown_code = "—" if code is None else str(code)
            sections.setdefault(case.section, []).append(
                f"| {case.what.replace('|', '&#124;')} | {command_cell(case.args)} | {shown_code} | {cell(code, stderr, directory)} |")
            shutil.rmtree(directory)
    lines = [
        "# Bad inputs and what slang says",
        "",
        "Generated by `python benchmarks/bad_inputs.py` (do not edit by hand): each row ran the command shown in",
        "a directory holding the bad input, and shows the exit code and everything slang printed on stderr.",
        "Exit codes: 0 success, 1 bad data, bad run file or diverged fit (one line `slang: error: FILE...`),",
        "2 usage error (also an output that cannot be a regular file: a device, a FIFO, a directory, a dangling",
        "symlink, a name too long), 3 an optional extra not installed (the message names its `pip install`),",
        "128 + N when stopped by signal N (130 SIGINT, 143 SIGTERM, 129 SIGHUP; a fit checkpoints first), 141 when",
        "the reader of stdout went away. No case leaves a temporary file.",
        "Property-based tests (`tests/test_fuzz.py`) check the same contract on random inputs.",
        "",
    ]
    for section, rows in sections.items():
        lines += [f"## {section}", "", "| bad input | command | exit | stderr |", "|---|---|---|---|", *rows, ""]
    lines += [
        "The corrupted-global-heap row is a libhdf5 bug (HDF5 2.0.0 through h5py 3.16): reading a",
        "variable-length string attribute whose global-heap object header was overwritten loops forever inside",
        "the C library, where it cannot be interrupted; 1 in 70 to 1 in 200 random byte-level corruptions of a run",
        "file hit it, and the HDF5 1.12 of h5py 3.8 crashes on others, not always the same way twice. slang",
        "therefore reads and checks a run file in a forked child process that sends the run back; a child that",
        "crashes, or has not finished after 5 s (`slangcli.runfile.io.READ_SECONDS`, plus a second per 50 MB), makes",
        "the file corrupted, and the command's own process never opens it with libhdf5.",
        "",
    ]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = p.add_mutually_exclusive_group()
    group.add_argument("--check", action="store_true", help="exit 1 if docs/BAD_INPUTS.md is out of date")
    group.add_argument("--stdout", action="store_true", help="print the page instead of writing it")
    args = p.parse_args(argv)
    page = generate(progress=lambda message: print(message, file=sys.stderr, flush=True))
    if args.stdout:
        sys.stdout.write(page)
    elif args.check:
        if not PAGE.exists() or PAGE.read_text() != page:
            raise SystemExit(f"{PAGE} is out of date: run python benchmarks/bad_inputs.py")
    else:
        PAGE.write_text(page)
        print(f"wrote {PAGE}", file=sys.stderr)


if __name__ == "__main__":
    main()
