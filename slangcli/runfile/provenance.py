"""What a run file records of the software and machine that wrote it: versions, the environment, the creation
time, and the checkpoints a resumed fit continued."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform

import h5py
import numpy as np
import scipy

from slangcli import __version__

# the packages whose versions a run records besides slang, Python, NumPy, SciPy and h5py: the other requirements,
# and the extras that are installed (read from the installed metadata: the engine never imports the command line's,
# and a fit's record must not depend on what its process happened to import)
OTHER_PACKAGES = ("click", "rich", "threadpoolctl", "pandas", "dask", "distributed")


def _installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions() -> dict:
    out = {"slang": __version__, "python": platform.python_version(), "numpy": np.__version__,
           "scipy": scipy.__version__, "h5py": h5py.__version__}
    out.update((name, _installed(name)) for name in OTHER_PACKAGES)
    return {name: value for name, value in out.items() if value is not None}


def environment() -> dict:
    """The machine and process a run was written in: the platform, the working directory (the recorded command's
    relative paths are relative to it), and the BLAS libraries with their thread counts, on which the last bits of
    a fit depend (the README's bit-for-bit promise is for the same BLAS threads)."""
    from threadpoolctl import threadpool_info

    try:
        cwd = os.getcwd()
    except OSError:  # (a working directory removed under the process: a record must never cost the fit)
        cwd = None
    try:
        blas = [{key: info.get(key) for key in ("internal_api", "version", "num_threads", "threading_layer",
                                                "architecture")}
                for info in threadpool_info() if info.get("user_api") == "blas"]
        # (threadpoolctl lists the loaded libraries in an order that varies from one process to the next)
        blas.sort(key=lambda lib: json.dumps(lib, sort_keys=True, default=str))
    except Exception:  # noqa: BLE001 - threadpoolctl inspects the loaded libraries; a failure there is no error of ours
        blas = None
    return {"platform": platform.platform(), "machine": platform.machine(), "cpu_count": os.cpu_count(),
            "cwd": cwd, "blas": blas}


def meta(resumed: tuple = ()) -> dict:
    """A run's ``meta``: its slang version, versions, environment and creation time; ``resumed``, the checkpoints a
    resumed fit continued (``resume_record``), oldest first."""
    out = {"slang_version": __version__, "versions": versions(), "environment": environment(),
           "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if resumed:
        out["resumed"] = [dict(entry) for entry in resumed]
    return out


def resume_record(checkpoint_meta: dict, step: int, member: int | None = None) -> dict:
    """What a fit resumed at ``step`` (of ``member``, counted from 0, in a fit of several) records of the
    checkpoint it continued: who wrote it, and when."""
    out = {"step": int(step), "slang_version": checkpoint_meta.get("slang_version", ""),
           "versions": checkpoint_meta.get("versions", {}), "created": checkpoint_meta.get("created", "")}
    if member is not None:
        out["member"] = int(member)
    return out


# the software a fit's arithmetic depends on (click, rich or pandas do not change a number of it)
ARITHMETIC = ("slang", "python", "numpy", "scipy")


def version_change(checkpoint_meta: dict) -> str | None:
    """What differs, of the software and BLAS libraries a fit's arithmetic depends on, between the process that
    wrote a checkpoint and this one (``numpy 2.1.0 -> 2.2.0``, ``BLAS openblas 0.3.27 -> openblas 0.3.28``), or
    None."""
    before, now = checkpoint_meta.get("versions") or {}, versions()
    changed = [f"{name} {before[name]} -> {now.get(name, '(none)')}" for name in ARITHMETIC
               if name in before and before[name] != now.get(name)]
    # (the libraries and versions; not their threads, which a checkpoint written inside a training step records as
    # the step's limit)
    old_blas, new_blas = _blas_text((checkpoint_meta.get("environment") or {}).get("blas")), _blas_text(
        environment()["blas"])
    if old_blas is not None and new_blas is not None and old_blas != new_blas:
        changed.append(f"BLAS {old_blas} -> {new_blas}")
    return ", ".join(changed) or None


def _blas_text(libraries) -> str | None:
    if not isinstance(libraries, list):
        return None
    return "; ".join(sorted(f"{lib.get('internal_api')} {lib.get('version')}" for lib in libraries
                            if isinstance(lib, dict))) or "none"  # (in any order: a set of libraries)
