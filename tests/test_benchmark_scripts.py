"""The benchmark scripts run end to end on small data of their own layout (not the shared mirror): ``uci.py`` on
any Gal-layout folder, with clean JSON on stdout."""

import importlib.util
import json
from pathlib import Path

import numpy as np

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
    uci.main(["--data-dir", str(root), "--epochs", "2", "--tune-folds", "2", "--tune-epochs", "1",
              "--eval-samples", "5", "--json", "-"])
    out = json.loads(capsys.readouterr().out)
    runs = {(r["folder"], r["split"], r["method"]) for r in out["runs"]}
    assert runs == {(f, k, m) for f, n in (("toy-a", 2), ("toy-b", 3)) for k in range(n) for m in ("slang", "bbb")}
    assert all(np.isfinite(r["rmse"]) and np.isfinite(r["loglik"]) for r in out["runs"])
    table = {(e["folder"], e["method"]): e for e in out["table"]}
    assert set(table) == {(f, m) for f in ("toy-a", "toy-b") for m in ("slang", "bbb")}
    assert table["toy-b", "slang"]["splits"] == 3 and "paper_loglik" not in table["toy-b", "slang"]
