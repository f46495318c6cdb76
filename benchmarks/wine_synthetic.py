"""A synthetic file of the shape of the UCI Wine Quality (red) file, and the first fit a new user would try on it.

    python benchmarks/wine_synthetic.py --json wine.json           # writes winequality-red-synthetic.csv, fits

The file: 1 599 rows, ``;``-separated, a quoted header, the eleven physico-chemical columns of the red-wine file
at their published scales, and an integer ``quality`` of 3 to 8. How it is made (:func:`make_wine`, seeded):

- Three latent standard normals ``a, b, c`` give the features correlated structure (acidity, sweetness/density,
  sulphur): each feature is ``mean + sd * (loading . (a, b, c) + e sqrt(1 - |loading|^2))`` on its own scale,
  with a log-normal shape (exponentiated) for the skewed ones (residual sugar, chlorides, the two sulphur
  dioxides, sulphates); means and standard deviations are those of the red-wine file (alcohol 10.4 +- 1.07,
  volatile acidity 0.53 +- 0.18, ...), rounded to the file's decimals.
- The quality signal, on standardised features ``z``: a linear part ``0.30 z_alcohol - 0.22 z_volatile
  + 0.12 z_sulphates - 0.08 z_total_so2 + 0.05 z_citric`` plus a nonlinear part
  ``0.15 tanh(1.5 z_alcohol) z_sulphates - 0.10 (z_volatile^2 - 1) + 0.12 relu(z_alcohol - 1)``; quality is
  ``clip(round(5.64 + 1.1 * signal + 0.55 * noise), 3, 8)`` with standard normal noise. The rounding adds a
  uniform error of standard deviation 0.29, so the irreducible error of the rounded quality is about 0.62, and
  quality's own standard deviation about 0.80 (the real file's: 0.81).

Then ``slang fit FILE --target quality --likelihood gaussian --hidden 50 --test-fraction 0.2`` with every other
option at its default; reports test RMSE, log-likelihood and 95 % interval coverage, and the best constant
predictor's RMSE on the same split for scale.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# name, mean, sd, decimals, log-normal, loadings on the latent (acidity, sweetness/density, sulphur)
COLUMNS = [
    ("fixed acidity", 8.32, 1.74, 1, False, (0.8, 0.3, 0.0)),
    ("volatile acidity", 0.528, 0.179, 3, False, (-0.3, 0.0, 0.0)),
    ("citric acid", 0.271, 0.195, 2, False, (0.7, 0.1, 0.0)),
    ("residual sugar", 2.54, 1.41, 1, True, (0.0, 0.4, 0.1)),
    ("chlorides", 0.0875, 0.047, 3, True, (0.1, 0.2, 0.0)),
    ("free sulfur dioxide", 15.9, 10.5, 0, True, (0.0, 0.0, 0.8)),
    ("total sulfur dioxide", 46.5, 32.9, 0, True, (0.0, 0.1, 0.8)),
    ("density", 0.99675, 0.00189, 5, False, (0.6, 0.5, 0.0)),
    ("pH", 3.311, 0.154, 2, False, (-0.7, 0.0, 0.0)),
    ("sulphates", 0.658, 0.170, 2, True, (0.2, 0.0, 0.0)),
    ("alcohol", 10.42, 1.07, 1, False, (0.0, -0.5, 0.0)),
]
ROWS = 1599
NOISE = 0.55


def make_wine(path, seed: int = 0, rows: int = ROWS) -> dict:
    """Write the synthetic file to ``path``; returns its summary (quality's mean and standard deviation, counts)."""
    rng = np.random.default_rng(seed)
    latent = rng.standard_normal((rows, 3))
    cols, z = [], {}
    for name, mean, sd, decimals, lognormal, loading in COLUMNS:
        w = np.asarray(loading)
        raw = latent @ w + rng.standard_normal(rows) * np.sqrt(max(1.0 - w @ w, 0.05))
        if lognormal:  # a log-normal of the given mean and sd
            s2 = np.log1p((sd / mean) ** 2)
            values = np.exp(np.log(mean) - s2 / 2 + np.sqrt(s2) * raw)
        else:
            values = mean + sd * raw
        values = np.maximum(np.round(values, decimals), 10.0 ** -decimals if decimals else 1.0)
        cols.append(values)
        z[name] = (values - values.mean()) / values.std()
    relu = lambda v: np.maximum(v, 0.0)  # noqa: E731
    signal = (0.30 * z["alcohol"] - 0.22 * z["volatile acidity"] + 0.12 * z["sulphates"]
              - 0.08 * z["total sulfur dioxide"] + 0.05 * z["citric acid"]
              + 0.15 * np.tanh(1.5 * z["alcohol"]) * z["sulphates"] - 0.10 * (z["volatile acidity"] ** 2 - 1)
              + 0.12 * relu(z["alcohol"] - 1))
    quality = np.clip(np.round(5.64 + 1.1 * signal + NOISE * rng.standard_normal(rows)), 3, 8).astype(int)
    with open(path, "w") as fh:
        fh.write(";".join(f'"{c[0]}"' for c in COLUMNS) + ';"quality"\n')
        for i in range(rows):
            fh.write(";".join(f"{c[i]:.{d}f}" for c, (_, _, _, d, _, _) in zip(cols, COLUMNS)) + f";{quality[i]}\n")
    return {"rows": rows, "quality_mean": float(quality.mean()), "quality_std": float(quality.std()),
            "quality_counts": {int(k): int(v) for k, v in zip(*np.unique(quality, return_counts=True))}}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic file")
    p.add_argument("--out", default=None, help="where to write the file (default: a temporary directory)")
    p.add_argument("--json", default=None, metavar="FILE", help="write the results as JSON ('-' for stdout)")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(a.out or Path(tmp) / "winequality-red-synthetic.csv")
        summary = make_wine(path, a.seed)
        run = Path(tmp) / "wine.h5"
        command = ["slang", "fit", str(path), "--target", "quality", "--likelihood", "gaussian", "--hidden", "50",
                   "--test-fraction", "0.2"]
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "slangcli", *command[1:], "-o", str(run), "--json"],
                              capture_output=True, text=True)
        wall = time.perf_counter() - started
        if done.returncode:
            sys.exit(done.stderr)
        out = json.loads(done.stdout)
    test = out["metrics"]["test"]
    result = {"command": " ".join(command), "file": summary, "rmse": test["rmse"], "loglik": test["loglik"],
              "coverage_95": test["coverage"]["0.95"], "noise_precision": out["config"]["model"]["noise_precision"],
              "wall_seconds": wall, "stderr": done.stderr}
    print(f"{result['command']}: test RMSE {result['rmse']:.3f}, log-likelihood {result['loglik']:.3f}, "
          f"95 % coverage {result['coverage_95']:.3f} ({wall:.0f} s)")
    if a.json:
        text = json.dumps(result, indent=2)
        print(text) if a.json == "-" else Path(a.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
