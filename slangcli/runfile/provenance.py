"""What a run file records of the software that wrote it: versions and creation time."""

from __future__ import annotations

import datetime
import platform

import h5py
import numpy as np
import scipy

from slangcli import __version__


def versions() -> dict:
    return {"slang": __version__, "python": platform.python_version(), "numpy": np.__version__,
            "scipy": scipy.__version__, "h5py": h5py.__version__}


def meta() -> dict:
    return {"slang_version": __version__, "versions": versions(),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
