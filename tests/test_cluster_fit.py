"""``slang fit --tune ... --scheduler ADDRESS`` and ``--restarts N --scheduler ADDRESS``: the candidate fits and the
restarts run on a real dask.distributed cluster (worker processes) and give the run of a local fit, bit for bit."""

from __future__ import annotations

import socket

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import local_cluster, message_lines

from slangcli.cli import main
from slangcli.runfile.io import read_run

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def scheduler():
    with local_cluster(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1") as cluster:
        yield cluster.scheduler_address


@pytest.fixture
def data(tmp_path):
    rng = np.random.default_rng(7)
    X = rng.standard_normal((60, 2))
    y = X @ np.array([1.0, -0.5]) + 0.3 * rng.standard_normal(60)
    path = tmp_path / "data.csv"
    path.write_text("a,b,y\n" + "".join(f"{a:.6f},{b:.6f},{t:.6f}\n" for (a, b), t in zip(X, y)))
    return path


def _fit(data, out, *extra):
    done = CliRunner().invoke(main, ["fit", str(data), "-o", str(out), "--likelihood", "gaussian", "--hidden", "4",
                                     "--method", "slang", "--rank", "1", "--samples", "2", "--batch-size", "10",
                                     "--epochs", "3", "--eval-samples", "20", "--test-fraction", "0.25", "--no-progress",
                                     *extra])
    assert done.exit_code == 0, done.output
    return read_run(out)


def _same(a, b):
    assert np.array_equal(a.posterior.mean, b.posterior.mean) and np.array_equal(a.posterior.U, b.posterior.U)
    assert a.metrics["test"] == b.metrics["test"]


@pytest.mark.parametrize("extra", [["--tune", "prior-precision,noise-precision", "--tune-folds", "2"],
                                   ["--restarts", "3"]], ids=["tune", "restarts"])
def test_cluster_fits_equal_local_fits(scheduler, data, tmp_path, extra):
    local = _fit(data, tmp_path / "local.h5", *extra)
    remote = _fit(data, tmp_path / "remote.h5", *extra, "--scheduler", scheduler)
    _same(local, remote)
    with distributed.Client(scheduler) as client:  # the fits did run there
        prefixes = client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.task_prefixes))
    assert ("fold_scores" if "--tune" in extra else "restart") in prefixes, prefixes
    assert local.config["tuning"] == remote.config["tuning"]
    assert local.config["restarts"] == remote.config["restarts"]


def test_scheduler_without_tune_or_restarts_is_a_usage_error(data, tmp_path):
    done = CliRunner().invoke(main, ["fit", str(data), "-o", str(tmp_path / "r.h5"), "--scheduler", "tcp://x:1"])
    assert done.exit_code == 2 and "--scheduler" in done.output


@pytest.mark.parametrize("scheduler", ["not-an-address", "nothing-listening"])
def test_a_scheduler_that_cannot_be_used_is_refused_as_slang_sweep_refuses_it(data, tmp_path, scheduler):
    """``--scheduler`` of ``slang fit --restarts`` that is not an address: exit 2; one where nothing listens (within
    Dask's connection timeout): exit 1; each in one line, with ``slang sweep``'s message, and no run file."""
    import dask

    out = tmp_path / "r.h5"
    args = ["fit", str(data), "-o", str(out), "--restarts", "2", "--epochs", "1", "--no-progress", "--scheduler"]
    if scheduler == "not-an-address":
        done = CliRunner().invoke(main, [*args, "no such thing"])
        assert done.exit_code == 2 and message_lines(done.stderr) == [
            "slang: error: --scheduler no such thing: not the address of a Dask scheduler (missing port number in "
            "address 'no such thing')"], done.output
    else:
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
        with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
            done = CliRunner().invoke(main, [*args, address])
        lines = message_lines(done.stderr)
        assert done.exit_code == 1 and len(lines) == 1, done.output
        assert lines[0].startswith(f"slang: error: cannot connect to the Dask scheduler at {address}: ")
    assert not out.exists()

