"""Peak memory of ``slang fit`` on large generated data, against the size of the data itself.

    nice python benchmarks/memory.py --rows 1000000,10000000 --features 1 --json memory.json
    nice python benchmarks/memory.py --rows 1000000 --features 100 --checkout /path/to/other/checkout

For each number of rows and of features, a gzip-compressed CSV of a noisy logistic rule (features with six
decimals, a 0/1 label in the last column) is written to ``--data-dir`` (kept there and reused when it exists;
default: a temporary directory), and ``python -m slangcli fit FILE --iterations 5 -o run.h5 --no-progress`` runs on
it in a subprocess with each ``--checkout`` first on its PYTHONPATH: its peak resident memory (``ru_maxrss`` of the
child, as ``/usr/bin/time -v`` reports it), its wall time and exit code, beside the size of the table it holds
(rows x (features + 1) x 8 bytes) and of the file (compressed and as text). Each checkout's baseline, the peak of
the same fit of 100 rows (Python, NumPy, SciPy and h5py loaded), is measured first; ``above`` is the peak beyond it.
The fits run one after the other; run the script under ``nice`` on a shared machine (ten million rows took 16 GB and
85 s before the passes over the data were made blockwise).
"""

from __future__ import annotations

import argparse
import gzip
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from results import table_stream, write_json

REPO = Path(__file__).resolve().parents[1]
# rows generated and formatted at once
_BLOCK = 100_000


def data_file(folder: Path, rows: int, features: int) -> Path:
    """The gzip CSV of ``rows`` x ``features`` in ``folder``, written unless it is there already (from seed 0: the
    same file for the same shape)."""
    path = folder / f"logistic-{rows}x{features}.csv.gz"
    if path.exists():
        return path
    rng = np.random.default_rng(0)
    weights = rng.standard_normal(features)
    partial = path.with_name(path.name + ".part")
    with gzip.open(partial, "wt", compresslevel=6) as f:
        f.write(",".join([f"x{j}" for j in range(features)] + ["label"]) + "\n")
        for lo in range(0, rows, _BLOCK):
            X = rng.standard_normal((min(_BLOCK, rows - lo), features))
            labels = (X @ weights + 0.5 * rng.standard_normal(len(X)) > 0).astype(int)
            columns = [np.char.mod("%.6f", X[:, j]) for j in range(features)] + [labels.astype(str)]
            f.write("\n".join(",".join(cells) for cells in zip(*columns)) + "\n")
    partial.rename(path)
    return path


def text_size(path: Path) -> int:
    with gzip.open(path, "rb") as f:
        return sum(len(block) for block in iter(lambda: f.read(1 << 20), b""))


def measure(checkout: Path, path: Path, iterations: int, folder: Path) -> dict:
    """Exit code, peak resident bytes and wall seconds of one ``slang fit`` with ``checkout`` on the path."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(checkout), os.environ.get("PYTHONPATH", "")]))
    out = folder / "run.h5"
    started = time.perf_counter()
    with open(folder / "stderr.txt", "w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "slangcli", "fit", str(path), "--iterations", str(iterations),
                                 "-o", str(out), "--no-progress"], env=env, stdout=subprocess.DEVNULL, stderr=err,
                                cwd=folder)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        err.seek(0)
        message = err.read().strip().splitlines()
    out.unlink(missing_ok=True)
    code = os.waitstatus_to_exitcode(status)
    return {"exit": code, "peak_bytes": usage.ru_maxrss * 1024, "seconds": round(seconds, 1),  # KiB on Linux
            "error": message[-1] if code != 0 and message else None}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1000000", help="comma-separated numbers of rows")
    parser.add_argument("--features", default="1", help="comma-separated numbers of features")
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--checkout", action="append", default=None,
                        help="a slang checkout to measure (repeatable; default: this one)")
    parser.add_argument("--data-dir", default=None, help="keep (and reuse) the generated files here")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the record as JSON (- for stdout)")
    args = parser.parse_args(argv)
    checkouts = [Path(c).resolve() for c in (args.checkout or [REPO])]
    shapes = [(int(r), int(p)) for r in args.rows.split(",") for p in args.features.split(",")]
    stream = table_stream(args.json)
    records = []
    with tempfile.TemporaryDirectory(prefix="slang-memory-") as tmp:
        folder = Path(args.data_dir) if args.data_dir else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        baseline = {checkout: measure(checkout, data_file(folder, 100, 1), args.iterations, Path(tmp))["peak_bytes"]
                    for checkout in checkouts}
        print(f"{'rows':>10} {'features':>8} {'table MB':>9} {'gzip MB':>8} {'text MB':>8} {'peak MB':>8} "
              f"{'above':>8} {'seconds':>8}  checkout", file=stream)
        for rows, features in shapes:
            path = data_file(folder, rows, features)
            sizes = {"table_bytes": rows * (features + 1) * 8, "file_bytes": path.stat().st_size,
                     "text_bytes": text_size(path)}
            for checkout in checkouts:
                result = measure(checkout, path, args.iterations, Path(tmp))
                record = {"rows": rows, "features": features, "checkout": str(checkout), **sizes, **result,
                          "baseline_bytes": baseline[checkout]}
                records.append(record)
                above = result["peak_bytes"] - baseline[checkout]
                print(f"{rows:>10} {features:>8} {sizes['table_bytes'] / 1e6:>9.0f} {sizes['file_bytes'] / 1e6:>8.0f} "
                      f"{sizes['text_bytes'] / 1e6:>8.0f} {result['peak_bytes'] / 1e6:>8.0f} {above / 1e6:>8.0f} "
                      f"{result['seconds']:>8.1f}"
                      f"  {checkout}" + (f"  exit {result['exit']}: {result['error']}" if result["exit"] else ""),
                      file=stream, flush=True)
    if args.json:
        write_json({"command": "slang fit FILE --iterations N -o run.h5 --no-progress",
                    "iterations": args.iterations, "results": records}, args.json)


if __name__ == "__main__":
    main()
