"""Shared fixtures: tiny generated data files and a real run fitted through ``slangcli.training.fitting.fit``; and checks
that apply to every test.

Every data set is drawn from its own ``np.random.default_rng(seed)``; nothing seeds a global generator. The data
are a noisy linear rule on P = 3 features, so a 2-epoch fit is far from converged but always finite.

Suite-wide checks (the command line's promise: no traceback, no temporary file left):

- a test whose captured stdout or stderr holds a traceback fails (``pytest_runtest_makereport``);
- so does a test in which a ``CliRunner.invoke`` result or a subprocess's captured output holds one, or a
  ``CliRunner.invoke`` ended in an exception other than ``SystemExit`` (the real command would have printed a
  traceback); the real functions are wrapped, their results inspected (``_Observer``). A test that means to
  produce one is marked ``traceback_expected``;
- no ``*.tmp`` file may remain under a test's ``tmp_path`` after it, nor, at the end of the session, under the
  session's temporary directory or the working tree.
"""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

import click.testing
import numpy as np
import pytest

from slangcli.data.sources import DataOptions
from slangcli.runfile.io import write_run
from slangcli.training.fitting import fit

N_ROWS, N_FEATURES = 40, 3

if "mix_stderr" in click.testing.CliRunner.__init__.__code__.co_varnames:
    # click 8.1 (the oldest slang supports) mixes a command's stderr into its output unless told otherwise; the
    # tests read ``result.stderr`` apart from ``result.stdout``, as click 8.2 and later always keep them
    _runner_init = click.testing.CliRunner.__init__

    def _separate_stderr(self, *args, mix_stderr=False, **kwargs):
        _runner_init(self, *args, mix_stderr=mix_stderr, **kwargs)

    click.testing.CliRunner.__init__ = _separate_stderr
    # and, as from click 8.2 on, a result's output is all the command printed, stdout and stderr
    click.testing.Result.output = property(lambda result: result.stdout + result.stderr)
# the lines in which slang fit states, before training, the task it inferred (slangcli.data.task.describe)
TASK_LINES = ("slang: task: ", "slang: change the task ", "slang: method: ")


@contextlib.contextmanager
def local_cluster(**env):
    """A real ``distributed.LocalCluster`` of two worker processes with one thread each and ``env`` set in them,
    set up and closed as ``slang sweep`` sets up and closes its own (``slangcli.cluster``): the workers
    drop the error Dask logs for a heartbeat that their own closing cut short, and their processes have ended
    before the scheduler closes. That error's CommClosedError traceback, logged now and then on a test's stderr at
    teardown, failed the suite-wide traceback check; closing the workers first, but waiting only until the
    scheduler had forgotten them, did not prevent it."""
    import distributed

    from slangcli.cluster import close_in_order
    from slangcli.cluster_worker import set_up_workers

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  env=env) as cluster:
        with distributed.Client(cluster) as client:
            set_up_workers(client)
        yield cluster
        close_in_order(cluster)


def message_lines(stderr: str) -> list[str]:
    """The lines of ``stderr`` besides slang fit's statement of the task (and of a network's default method)."""
    return [line for line in stderr.splitlines() if not line.startswith(TASK_LINES)]


WEIGHTS = np.array([1.5, -1.0, 0.5])


def binary_problem(n=N_ROWS, seed=0, offset=0.0, scale=1.0):
    """``X : (n, 3)`` and boolean labels from a noisy linear rule on the centred features.

    ``offset`` and ``scale`` move the features away from zero mean and unit variance, so that standardising
    them makes a difference.
    """
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((n, N_FEATURES))
    labels = Z @ WEIGHTS + 0.3 * rng.standard_normal(n) > 0
    return offset + scale * Z, labels


def csv_text(X, labels, names=("a", "b", "c"), classes=("no", "yes")) -> str:
    """CSV with a header row, the target in the last column, string labels."""
    lines = [",".join((*names, "label"))]
    lines += [",".join([*(f"{v:.6f}" for v in x), classes[int(t)]]) for x, t in zip(X, labels)]
    return "\n".join(lines) + "\n"


def libsvm_text(X, labels) -> str:
    """LIBSVM with labels -1 / +1 and every (non-zero) feature listed."""
    lines = []
    for x, t in zip(X, labels):
        pairs = " ".join(f"{j + 1}:{v:.6f}" for j, v in enumerate(x) if v != 0)
        lines.append(("+1 " if t else "-1 ") + pairs)
    return "\n".join(lines) + "\n"


def gal_folder(folder, X, y, n_train):
    """A Gal-layout UCI folder at ``folder`` of one split: ``data.txt`` (the features, then the target), the column
    index files, and the first ``n_train`` rows for training, the others for testing."""
    folder.mkdir()
    np.savetxt(folder / "data.txt", np.column_stack([X, y]))
    p = X.shape[1]
    (folder / "index_features.txt").write_text("".join(f"{j}\n" for j in range(p)))
    (folder / "index_target.txt").write_text(f"{p}\n")
    (folder / "n_splits.txt").write_text("1\n")
    (folder / "index_train_0.txt").write_text("\n".join(map(str, range(n_train))) + "\n")
    (folder / "index_test_0.txt").write_text("\n".join(map(str, range(n_train, len(X)))) + "\n")
    return folder


@pytest.fixture
def write_file(tmp_path):
    """``write_file(name, text_or_bytes) -> Path`` in this test's ``tmp_path``."""

    def write(name, content):
        path = tmp_path / name
        path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
        return path

    return write


@pytest.fixture
def make_csv(write_file):
    """``make_csv(name, n=40, seed=0, offset=0.0, scale=1.0) -> Path``: a ``binary_problem`` as CSV text."""

    def make(name, n=N_ROWS, seed=0, offset=0.0, scale=1.0):
        return write_file(name, csv_text(*binary_problem(n=n, seed=seed, offset=offset, scale=scale)))

    return make


@pytest.fixture
def train_csv(write_file):
    """40 rows, header ``a,b,c,label``, labels ``no`` / ``yes``."""
    return write_file("train.csv", csv_text(*binary_problem(seed=0)))


@pytest.fixture
def test_csv(write_file):
    """20 rows of the same distribution as ``train_csv``."""
    return write_file("test.csv", csv_text(*binary_problem(n=20, seed=1)))


@pytest.fixture
def train_libsvm(write_file):
    return write_file("train.svm", libsvm_text(*binary_problem(seed=2)))


@pytest.fixture
def test_libsvm(write_file):
    return write_file("test.svm", libsvm_text(*binary_problem(n=20, seed=3)))


@pytest.fixture
def out_dir(tmp_path):
    """An empty directory for run files, so a test can check that nothing is left behind in it."""
    path = tmp_path / "out"
    path.mkdir()
    return path


FITTED_COMMAND = ["slang", "fit", "train.csv", "-o", "run.h5", "--test-fraction", "0.25", "--standardize"]


@pytest.fixture(scope="session")
def fitted_run(tmp_path_factory):
    """A real :class:`slangcli.runfile.io.Run`: SLANG, L = 2, 2 epochs on 40 standardised rows with a 25% test split.

    Shared by the whole session: tests must not mutate it.
    """
    directory = tmp_path_factory.mktemp("fitted")
    path = directory / "train.csv"
    path.write_text(csv_text(*binary_problem(seed=0, offset=5.0, scale=3.0)))
    opts = DataOptions(path=str(path), test_fraction=0.25, standardize=True)
    return fit(opts, hyper={"rank": 2}, batch_size=8, epochs=2, seed=0, command=FITTED_COMMAND)


@pytest.fixture
def run_file(tmp_path, fitted_run):
    """``fitted_run`` written to ``tmp_path / "run.h5"``."""
    path = tmp_path / "run.h5"
    write_run(path, fitted_run)
    return path


# ------------------------------------------------------------------------------------------------ fuzzing counts


class FuzzCounts:
    """How many inputs each reader got from ``test_fuzz.py`` in this session, and the seconds spent."""

    def __init__(self):
        self.inputs, self.reader_seconds, self.total_seconds, self.hangs = {}, {}, {}, {}

    def add(self, reader, seconds, hung=False):
        self.inputs[reader] = self.inputs.get(reader, 0) + 1
        self.reader_seconds[reader] = self.reader_seconds.get(reader, 0.0) + seconds
        self.hangs[reader] = self.hangs.get(reader, 0) + hung

    def add_total(self, reader, seconds):
        self.total_seconds[reader] = self.total_seconds.get(reader, 0.0) + seconds


FUZZ_COUNTS = FuzzCounts()


@pytest.fixture(scope="session")
def fuzz_counts():
    return FUZZ_COUNTS


def pytest_terminal_summary(terminalreporter):
    if not FUZZ_COUNTS.inputs:
        return
    terminalreporter.section("fuzzed inputs per reader")
    for reader, n in FUZZ_COUNTS.inputs.items():
        hangs = FUZZ_COUNTS.hangs[reader]
        terminalreporter.write_line(
            f"{reader:<16} {n:>7} inputs   {FUZZ_COUNTS.reader_seconds[reader]:7.1f} s in the reader   "
            f"{FUZZ_COUNTS.total_seconds.get(reader, 0.0):7.1f} s in all"
            + (f"   ({hangs} hung or crashed inside libhdf5)" if hangs else "")
        )


# ------------------------------------------------------------------------------------------- suite-wide checks

TRACEBACK = "Traceback (most recent call last)"
REPO = Path(__file__).resolve().parents[1]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.passed and item.get_closest_marker("traceback_expected") is None:
        # this phase's own captures (a later phase's report repeats the earlier ones)
        for title, text in report.sections:
            if title in (f"Captured stderr {report.when}", f"Captured stdout {report.when}") and TRACEBACK in text:
                report.outcome = "failed"
                report.longrepr = f"{title} holds a traceback:\n{text}"
                break


def _text(value) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class _Observer:
    """Wraps ``CliRunner.invoke`` and ``subprocess.Popen.communicate`` (which ``subprocess.run`` and
    ``check_output`` call): each calls the real function and records a problem with its result, a traceback in
    the output or an exception the command line would have printed as one."""

    def __init__(self):
        self.problems: list[str] = []
        self.originals = {}

    def install(self):
        invoke = self.originals["invoke"] = click.testing.CliRunner.invoke
        communicate = self.originals["communicate"] = subprocess.Popen.communicate
        observer = self

        def observed_invoke(runner, cli, args=None, *rest, **kw):
            result = invoke(runner, cli, args, *rest, **kw)
            what = f"CliRunner.invoke({args!r})"
            texts = [result.output]
            try:
                texts.append(result.stderr)
            except ValueError:  # click before 8.2, with stderr mixed into the output
                pass
            observer.check(what, texts)
            if result.exception is not None and not isinstance(result.exception, SystemExit):
                observer.problems.append(f"{what} ended in {type(result.exception).__name__}: {result.exception} "
                                         "(the command would have printed a traceback)")
            return result

        def observed_communicate(proc, *args, **kw):
            out, err = communicate(proc, *args, **kw)
            observer.check(f"subprocess {proc.args!r}", [out, err])
            return out, err

        click.testing.CliRunner.invoke = observed_invoke
        subprocess.Popen.communicate = observed_communicate

    def uninstall(self):
        if self.originals:
            click.testing.CliRunner.invoke = self.originals.pop("invoke")
            subprocess.Popen.communicate = self.originals.pop("communicate")

    def check(self, what, texts):
        for text in map(_text, texts):
            if TRACEBACK in text:
                self.problems.append(f"{what} printed a traceback:\n{text}")
                return

    def take(self) -> list[str]:
        problems, self.problems = self.problems, []
        return problems


OBSERVER = _Observer()


def pytest_configure(config):
    OBSERVER.install()


def pytest_unconfigure(config):
    OBSERVER.uninstall()


def _temporary_files(directory) -> list[str]:
    """The ``*.tmp`` and ``.*.tmp`` files under ``directory`` (relative paths), the repository's .git left out."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*.tmp")
                  if ".git" not in p.relative_to(directory).parts)


@pytest.fixture(autouse=True)
def _no_traceback_nor_temporary_file(request):
    """Fails a test (at teardown) whose commands printed a traceback or that left a temporary file."""
    OBSERVER.take()  # what fixtures of a wider scope did is theirs, not this test's
    tmp_path = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    problems = OBSERVER.take()
    if request.node.get_closest_marker("traceback_expected") is not None:
        problems = []
    if tmp_path is not None:
        left = _temporary_files(tmp_path)
        if left:
            problems.append(f"temporary files left under tmp_path: {', '.join(left)}")
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def pytest_sessionfinish(session, exitstatus):
    roots = [REPO]
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is not None:
        try:
            roots.append(factory.getbasetemp())
        except (OSError, ValueError):
            pass
    left = [f"{root}/{name}" for root in roots for name in _temporary_files(root)]
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"temporary files left after the session: {', '.join(left)}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
