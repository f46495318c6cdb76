"""``slang fit --tune ... --scheduler ADDRESS``, ``--restarts N --scheduler ADDRESS`` and ``--members K --scheduler
ADDRESS``: the candidate fits, the restarts and the members run on a real dask.distributed cluster (worker
processes) and give the run of a local fit, bit for bit."""

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
    for p, q in zip(getattr(a.posterior, "members", [a.posterior]), getattr(b.posterior, "members", [b.posterior]),
                    strict=True):
        assert np.array_equal(p.mean, q.mean) and np.array_equal(p.U, q.U) and np.array_equal(p.d, q.d)
    assert a.metrics["test"] == b.metrics["test"]
    assert a.model.noise_weights == b.model.noise_weights


@pytest.mark.parametrize("extra, task", [(["--tune", "prior-precision,noise-precision", "--tune-folds", "2"],
                                          "fold_scores"),
                                         (["--restarts", "3"], "restart"),
                                         (["--members", "3"], "member")], ids=["tune", "restarts", "members"])
def test_cluster_fits_equal_local_fits(scheduler, data, tmp_path, extra, task):
    local = _fit(data, tmp_path / "local.h5", *extra)
    remote = _fit(data, tmp_path / "remote.h5", *extra, "--scheduler", scheduler)
    _same(local, remote)
    with distributed.Client(scheduler) as client:  # the fits did run there
        prefixes = client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.task_prefixes))
    assert task in prefixes, prefixes
    for name in ("tuning", "restarts", "members", "member_seeds"):
        assert local.config.get(name) == remote.config.get(name)


def test_scheduler_without_tune_restarts_or_members_is_a_usage_error(data, tmp_path):
    done = CliRunner().invoke(main, ["fit", str(data), "-o", str(tmp_path / "r.h5"), "--scheduler", "tcp://x:1"])
    assert done.exit_code == 2, done.output
    assert ("Error: --scheduler runs the fits of --tune, --restarts and --members on a cluster; this fit has none of "
            "them") in done.stderr


def test_members_on_a_cluster_with_checkpoints_every_n_steps_are_refused(data, tmp_path):
    """Members trained on the cluster are not checkpointed (as restarts are not): --checkpoint-every is refused in
    one line before anything runs (the time-based checkpoints are simply not taken)."""
    out = tmp_path / "r.h5"
    done = CliRunner().invoke(main, ["fit", str(data), "-o", str(out), "--members", "2", "--checkpoint-every", "5",
                                     "--scheduler", "tcp://127.0.0.1:1"])
    assert done.exit_code == 2 and message_lines(done.stderr) == [
        "slang: error: --members with --scheduler trains the members on the cluster, without checkpoints: give "
        "--checkpoint-every without --scheduler"], done.output
    assert not out.exists()


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

