"""The benchmark scripts run end to end on small data of their own layout (not the shared mirror): ``uci.py`` on
any Gal-layout folder, with clean JSON on stdout."""

import importlib.util
import json
from pathlib import Path

import numpy as np
from test_data_formats import make_idx

REPO = Path(__file__).resolve().parents[1]


def _load(name: str, monkeypatch):
    # the scripts import their shared helpers from beside them, as running them as scripts allows
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _gal_folder(root: Path, name: str, n: int, n_features: int, splits: int, seed: int) -> Path:
    """A Gal-layout folder: ``data.txt`` (features then target, whitespace separated), the column index files,
    ``n_splits.txt`` and ``splits`` random 80/20 train/test index pairs."""
    rng = np.random.default_rng(seed)
    folder = root / name
    folder.mkdir(parents=True)
    X = rng.standard_normal((n, n_features))
    y = X @ rng.standard_normal(n_features) + 0.3 * rng.standard_normal(n)
    np.savetxt(folder / "data.txt", np.column_stack([X, y]))
    np.savetxt(folder / "index_features.txt", np.arange(n_features), fmt="%d")
    np.savetxt(folder / "index_target.txt", [n_features], fmt="%d")
    (folder / "n_splits.txt").write_text(f"{splits}\n")
    for k in range(splits):
        perm = rng.permutation(n)
        np.savetxt(folder / f"index_train_{k}.txt", perm[: int(0.8 * n)], fmt="%d")
        np.savetxt(folder / f"index_test_{k}.txt", perm[int(0.8 * n):], fmt="%d")
    return folder


def test_uci_script_runs_any_gal_folders(tmp_path, capsys, monkeypatch):
    """Every Gal-layout folder under --data-dir, all of its splits, both methods; data sets the paper does not list
    get no paper columns; ``--json -`` leaves stdout pure JSON."""
    root = tmp_path / "collection"
    _gal_folder(root, "toy-a", 60, 3, 2, seed=1)
    _gal_folder(root, "toy-b", 50, 2, 3, seed=2)
    (root / "not-a-data-set").mkdir()
    uci = _load("uci", monkeypatch)
    uci.main(["--data-dir", str(root), "--epochs", "2", "--slang-tune-folds", "2", "--slang-tune-epochs", "1",
              "--bbb-tune-folds", "2", "--bbb-tune-epochs", "1", "--slang-restarts", "2",
              "--eval-samples", "5", "--json", "-"])
    out = json.loads(capsys.readouterr().out)
    runs = {(r["folder"], r["split"], r["method"]) for r in out["runs"]}
    assert runs == {(f, k, m) for f, n in (("toy-a", 2), ("toy-b", 3)) for k in range(n) for m in ("slang", "bbb")}
    assert all(np.isfinite(r["rmse"]) and np.isfinite(r["loglik"]) for r in out["runs"])
    table = {(e["folder"], e["method"]): e for e in out["table"]}
    assert set(table) == {(f, m) for f in ("toy-a", "toy-b") for m in ("slang", "bbb")}
    assert table["toy-b", "slang"]["splits"] == 3 and "paper_loglik" not in table["toy-b", "slang"]


def test_uci_defaults_script_runs_its_fits_as_a_sweep(tmp_path, capsys, monkeypatch):
    """``uci_defaults.py`` fits every split of every Gal-layout folder with slang fit's defaults and the protocol's
    budget, through the sweep machinery: one row per fit with its metrics, one summary line per set and method,
    ``--json -`` leaves stdout pure JSON; the run files in ``--runs`` hold the protocol's options, and a rerun with
    the same ``--runs`` fits nothing and gives the same rows."""
    from slangcli.runfile.io import read_run

    root = tmp_path / "collection"
    _gal_folder(root, "toy-a", 60, 3, 2, seed=1)
    _gal_folder(root, "toy-b", 50, 2, 2, seed=2)
    script = _load("uci_defaults", monkeypatch)
    args = ["--data-dir", str(root), "--epochs", "2", "--runs", str(tmp_path / "runs"), "--json", "-"]
    script.main(args)
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert set(out) == {"rows", "summary", "tuned_cpu_per_split"}
    fits = {(f, k, m) for f in ("toy-a", "toy-b") for k in range(2) for m in ("slang", "bbb")}
    assert {(r["folder"], r["split"], r["method"]) for r in out["rows"]} == fits and len(out["rows"]) == 8
    for r in out["rows"]:
        assert set(r) == {"folder", "split", "method", "rmse", "loglik", "coverage_95", "noise_precision", "seconds",
                          "fit_seconds", "warnings"}
        assert np.isfinite(r["rmse"]) and np.isfinite(r["loglik"]) and 0 <= r["coverage_95"] <= 1
        assert r["noise_precision"] > 0 and r["seconds"] >= r["fit_seconds"] > 0 and isinstance(r["warnings"], list)
    summary = {(e["folder"], e["method"]): e for e in out["summary"]}
    assert set(summary) == {(f, m) for f in ("toy-a", "toy-b") for m in ("slang", "bbb")}
    assert summary["toy-b", "bbb"]["splits"] == 2 and summary["toy-a", "slang"]["tuned_loglik"] is None
    assert summary["toy-a", "slang"]["loglik"] == np.mean([r["loglik"] for r in out["rows"]
                                                          if r["folder"] == "toy-a" and r["method"] == "slang"])
    assert "data set" in captured.err and captured.err.count("complete") == 8  # the table and the fits' progress
    # the run files: slang fit's defaults but for the protocol's budget (and SLANG's rank)
    run_files = sorted((tmp_path / "runs").glob("*.h5"))
    assert len(run_files) == 8
    for path in run_files:
        run = read_run(path)
        hyper, method = run.config["hyper"], run.config["method"]
        assert (run.model.sizes[1], run.config["batch_size"], run.config["epochs"], hyper["samples"]) == (50, 10, 2, 4)
        assert run.config["learned"]["noise_precision"] and hyper.get("rank") == (1 if method == "slang" else None)
    # again: nothing to fit, the same rows
    script.main(args)
    again = capsys.readouterr()
    assert json.loads(again.out)["rows"] == out["rows"] and "complete" not in again.err


def test_uci_defaults_validation_scores_held_out_training_rows(tmp_path, capsys, monkeypatch):
    """``uci_defaults.py --validation`` never shows a fit the split's test rows: each split trains on a seeded 80 % of
    its training rows and is scored on the other 20 % (the same rows on every run); ``--extra-options`` reach every
    fit's command."""
    from slangcli.runfile.io import read_run

    root = tmp_path / "collection"
    folder = _gal_folder(root, "toy-a", 60, 3, 2, seed=1)
    script = _load("uci_defaults", monkeypatch)
    runs = tmp_path / "runs"
    script.main(["--data-dir", str(root), "--epochs", "2", "--methods", "slang", "--runs", str(runs), "--validation",
                 "--extra-options", "--init-precision 3 --lr=0.02", "--json", "-"])
    out = json.loads(capsys.readouterr().out)
    assert len(out["rows"]) == 2
    copy = runs / "validation-data" / "toy-a"
    for k in range(2):
        train, test = (np.loadtxt(folder / f"index_{part}_{k}.txt", dtype=int) for part in ("train", "test"))
        fit_rows, held = (np.loadtxt(copy / f"index_{part}_{k}.txt", dtype=int) for part in ("train", "test"))
        assert sorted([*fit_rows, *held]) == sorted(train) and len(held) == round(0.2 * len(train))
        assert not set(test) & ({*fit_rows} | {*held})
        again = script.validation_folder(folder, tmp_path / "again", [k], 0.2, 0)
        np.testing.assert_array_equal(np.loadtxt(again / f"index_test_{k}.txt", dtype=int), held)
    for path in sorted(runs.glob("*.h5")):
        run = read_run(path)
        assert run.config["hyper"]["init_precision"] == 3 and run.config["hyper"]["lr"] == 0.02
        assert run.metrics["test"]["n"] == round(0.2 * 48)  # 60 rows: 48 for training, 12 of them held out


def test_uci_defaults_cpu_times_each_fit_and_the_tuned_fit_in_processes_of_their_own(tmp_path, capsys, monkeypatch):
    """``uci_defaults.py --cpu --tuned-splits 1`` runs every default fit and the README's tuned SLANG fit of each
    set's first split as separate ``slang fit`` processes: each row carries that process's CPU seconds, the tuned
    fit's run file holds uci.py's tuning options, and each set's summary gives the default fit as a fraction of the
    tuned one's CPU time. ``--tuned-splits`` without ``--cpu`` is refused."""
    import pytest
    from slangcli.runfile.io import read_run

    root = tmp_path / "collection"
    _gal_folder(root, "toy-a", 60, 3, 2, seed=1)
    script = _load("uci_defaults", monkeypatch)
    runs = tmp_path / "runs"
    script.main(["--data-dir", str(root), "--epochs", "2", "--methods", "slang", "--runs", str(runs), "--cpu",
                 "--tuned-splits", "1", "--json", "-"])
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert [r["split"] for r in out["rows"]] == [0, 1] and all(r["cpu_seconds"] > 0 for r in out["rows"])
    assert [(r["folder"], r["split"]) for r in out["tuned_rows"]] == [("toy-a", 0)]
    (tuned_file,) = (runs / "tuned").glob("*.h5")
    config = read_run(tuned_file).config
    assert set(config["tuning"]["best"]) == {"prior-precision", "noise-precision", "lr", "beta"}
    assert len(config["restarts"]["seeds"]) == 3
    (summary,) = out["summary"]
    assert summary["tuned_splits"] == 1 and summary["tuned_cpu_seconds"] == out["tuned_rows"][0]["cpu_seconds"]
    assert summary["cpu_seconds_per_fit"] == np.mean([r["cpu_seconds"] for r in out["rows"]])
    assert summary["seconds_per_fit"] == np.mean([r["seconds"] for r in out["rows"]])
    assert summary["cpu_fraction_of_tuned"] == summary["cpu_seconds_per_fit"] / summary["tuned_cpu_seconds"]
    assert "CPU s/fit" in captured.err and "tuned CPU s" in captured.err
    for refused in (["--tuned-splits", "1"], ["--cpu", "--tuned-splits", "1", "--validation"]):
        with pytest.raises(SystemExit):
            script.main(["--data-dir", str(root), *refused])
    # an option slang fit does not have stops the script before any fit, as a sweep would
    with pytest.raises(SystemExit, match="not a slang fit option"):
        script.main(["--data-dir", str(root), "--cpu", "--extra-options", "--init-precison 10"])


def test_ktied_snr_window_replays_the_training_steps(monkeypatch):
    """``ktied_snr.measure`` records each window by replaying training steps by hand: the state it ends in is the
    one ``train.run`` reaches in as many steps, bit for bit, so the window's gradients are the training's own; and
    its window statistic is the SNR of exactly those gradients."""
    import argparse

    from slangcli import streams
    from slangcli.methods import METHODS
    from slangcli.methods.base import Problem
    from slangcli.methods.reparam import snr
    from slangcli.models import MLP
    from slangcli.training import loop as train

    script = _load("ktied_snr", monkeypatch)
    rng = np.random.default_rng(0)
    X = rng.random((60, 6))
    y = rng.integers(0, 3, 60)
    model = MLP((6, 5, 4, 3), activation="relu", likelihood="categorical")
    problem = Problem(model, model.prior_precision(4.0, 4.0), len(X))
    a = argparse.Namespace(layer=2, batch_size=8, window=4, draws=3, part="elbo")
    for name in ("bbb", "ktied"):
        module = METHODS[name]
        hyper = module.Hyper(samples=2, lr=1e-2, **({"rank": 2} if name == "ktied" else {}))
        records, state = script.measure(name, module, hyper, problem, X, y, [5, 12], a, seed=3)
        expected, _ = train.run(module, hyper, problem, X, y, seed=3, batch_size=8, n_steps=12)
        for field, value in zip(state._fields, state):
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(value, getattr(expected, field), err_msg=f"{name} {field}")
        # the last window by hand: the gradients of steps 8..11 at their own states
        before, _ = train.run(module, hyper, problem, X, y, seed=3, batch_size=8, n_steps=8)
        grads = []
        for t in range(8, 12):
            idx = streams.batch_indices(3, t, len(X), 8)
            grads.append(module.std_gradients(streams.derive_rng(3, streams.STEP, t), before, problem, X[idx], y[idx],
                                              hyper)[1])
            before, _ = module.step(streams.derive_rng(3, streams.STEP, t), before, problem, X[idx], y[idx], hyper)
        assert [r["step"] for r in records] == [5, 12] and records[1]["window"] == 4
        assert records[1]["window_snr"] == snr(np.stack(grads))[0]
        assert records[1]["window_paper"] == snr(np.stack(grads))[1]
        # the independent draws are train.gradient_snr's (the statistic slang fit --snr records)
        assert records[1]["draws_snr"] == train.gradient_snr(module, hyper, problem, X, y, state, seed=3,
                                                             batch_size=8, draws=3)[0][1]


def test_mnist_validation_mode_never_reads_the_test_images(tmp_path, capfd, monkeypatch):
    """``--validation`` scores on a held-out sixth of the training images; the test images file need not exist."""
    data = tmp_path / "mnist"
    data.mkdir()
    make_idx(data, shape=(60, 4, 4), gz=True, stem="train")
    mnist = _load("mnist", monkeypatch)
    mnist.main(["--data-dir", str(data), "--validation", "--epochs", "1", "--rank", "1", "--eval-samples", "2",
                "--prior-precision", "10", "--lr", "0.05", "--output", str(tmp_path / "run.h5"),
                "--json", str(tmp_path / "result.json")])
    assert "validation error" in capfd.readouterr().out
    out = json.loads((tmp_path / "result.json").read_text())
    assert out["scored_on"] == "validation" and "test_error_percent" not in out
    assert 0 <= out["validation_error_percent"] <= 100
    assert out["prior_precision"] == 10 and out["hyper"]["lr"] == 0.05


def test_authors_path_samples_around_twice_the_mean(monkeypatch):
    """``authors_path.step`` is ``slang.update`` on samples ``2 mu + eps`` (the same ``eps`` ``slang.step`` draws),
    and its posterior has mean ``2 mu`` with SLANG's own precision."""
    from slangcli.gaussian import lowrank
    from slangcli.gaussian import noise
    from slangcli.methods import slang
    from slangcli.methods.base import Problem
    from slangcli.models import MLP

    module = _load("authors_path", monkeypatch)
    rng = np.random.default_rng(0)
    model = MLP((3, 5, 2), "relu", "categorical")
    problem = Problem(model, model.prior_precision(2.0, 1e-6), 50)
    X, y = rng.standard_normal((8, 3)), rng.integers(0, 2, 8)
    hyper = slang.Hyper(rank=2, samples=3)
    state = slang.init(rng, problem, hyper)._replace(mu=rng.standard_normal(model.n_params),
                                                     d=np.full(model.n_params, 4.0))
    got, _ = module.step(np.random.default_rng(1), state, problem, X, y, hyper)
    Z = noise.sample_columns(np.random.default_rng(1), model.n_params, 3)
    theta = (2.0 * state.mu[:, None] + lowrank.sample_noise(state.U, state.d, Z, state.WtW)).T
    expected, _ = slang.update(state, theta, problem, X, y, hyper)
    for name in ("mu", "U", "d", "m"):
        np.testing.assert_array_equal(getattr(got, name), getattr(expected, name), err_msg=name)
    faithful, _ = slang.step(np.random.default_rng(1), state, problem, X, y, hyper)
    assert np.abs(faithful.mu - got.mu).max() > 1e-6  # negative control: mu + eps gives another step
    post = module.posterior(got)
    np.testing.assert_array_equal(post.mean, 2.0 * got.mu)
    np.testing.assert_array_equal(post.d, got.d)


def test_logreg_quick_names_its_sets_for_an_unknown_one(monkeypatch, capsys):
    """An unknown --sets name was a KeyError traceback (probe 10); it is now a usage error listing the sets."""
    import pytest

    module = _load("logreg_quick", monkeypatch)
    with pytest.raises(SystemExit) as stopped:
        module.main(["--sets", "breast-cancer"])
    assert stopped.value.code == 2
    assert "--sets: unknown 'breast-cancer'; the sets are australian_scale, breast-cancer_scale" in \
        capsys.readouterr().err
