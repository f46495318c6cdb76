"""Run files: one HDF5 file per fit, format version 1 (described in ``docs/FORMAT.md``).

Every group carries ``encoding-type`` and ``encoding-version`` attributes; the reader dispatches on them and
refuses, with a :class:`FormatError`, files that are not slang runs, that a newer major format wrote, or whose
contents are missing, mis-shaped or non-finite. Nested configuration is stored as JSON string attributes, arrays
always as datasets. Files are written to a temporary name in the target directory and renamed into place, so a
run file is either complete or absent.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from slangcli import __version__
from slangcli.data import LabelMap
from slangcli.errors import DataError, FormatError
from slangcli.models import MLP
from slangcli.posteriors import LowRankGaussian

FORMAT_VERSION = "1.0"
RUN_TYPE = "slang-run"

# posterior encoding -> (class, datasets in order of the constructor)
POSTERIOR_ENCODINGS = {"lowrank-gaussian": (LowRankGaussian, ("mean", "U", "d"))}
POSTERIOR_NAMES = {cls: name for name, (cls, _) in POSTERIOR_ENCODINGS.items()}


@dataclass
class Run:
    """Everything a run file holds."""

    model: MLP
    prior_precision: np.ndarray  # (D,)
    posterior: object
    config: dict  # method, hyperparameters, schedule, data and model options, seed
    data: dict  # provenance of the training and test data, label classes, split
    arrays: dict = field(default_factory=dict)  # preprocessing arrays: train_index, test_index, feature_mean, feature_scale
    history: dict = field(default_factory=dict)  # per-epoch arrays
    metrics: dict = field(default_factory=dict)
    command: list = field(default_factory=list)
    meta: dict = field(default_factory=dict)  # slang_version, created, versions (set on write)


def _typed(group, kind: str) -> None:
    group.attrs["encoding-type"] = kind
    group.attrs["encoding-version"] = FORMAT_VERSION


def _json_attr(obj, name: str, value) -> None:
    obj.attrs[name] = json.dumps(value, sort_keys=True)


def write_run(path, run: Run) -> None:
    """Write ``run`` to ``path`` atomically (temporary file in the same directory, then rename)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    # mkstemp creates the file 0600; give the run file the permissions of any new file (0666 less the umask)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    try:
        with h5py.File(tmp, "w") as f:
            _typed(f, RUN_TYPE)
            f.attrs["slang_version"] = run.meta.get("slang_version", __version__)
            f.attrs["created"] = run.meta.get("created", "")
            _json_attr(f, "command", list(run.command))
            _json_attr(f, "config", run.config)
            _json_attr(f, "versions", run.meta.get("versions", {}))
            f.attrs["seed"] = int(run.config.get("seed", 0))

            g = f.create_group("data")
            _typed(g, "data")
            _json_attr(g, "provenance", run.data)
            for name, arr in run.arrays.items():
                g.create_dataset(name, data=np.asarray(arr))

            g = f.create_group("model")
            _typed(g, "mlp")
            g.attrs["sizes"] = np.asarray(run.model.sizes, dtype=np.int64)
            g.attrs["activation"] = run.model.activation
            g.attrs["likelihood"] = run.model.likelihood
            g.attrs["noise_precision"] = float(run.model.noise_precision)
            g.create_dataset("prior_precision", data=run.prior_precision)

            g = f.create_group("posterior")
            kind = POSTERIOR_NAMES[type(run.posterior)]
            _typed(g, kind)
            for name in POSTERIOR_ENCODINGS[kind][1]:
                g.create_dataset(name, data=getattr(run.posterior, name))

            g = f.create_group("history")
            _typed(g, "history")
            for name, arr in run.history.items():
                g.create_dataset(name, data=np.asarray(arr))

            g = f.create_group("metrics")
            _typed(g, "metrics")
            _json_attr(g, "metrics", run.metrics)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class _Reader:
    """Reads and validates one run file; every problem becomes a one-line FormatError naming the file."""

    def __init__(self, path):
        self.path = Path(path)
        self.name = str(path)

    def fail(self, message: str):
        raise FormatError(f"{self.name}: {message}")

    def check_type(self, obj, kind: str, where: str) -> None:
        found = obj.attrs.get("encoding-type")
        if isinstance(found, bytes):
            found = found.decode("utf-8", "replace")
        if found != kind:
            if where == "/":
                self.fail("not a slang run file (no slang-run encoding-type attribute)")
            self.fail(f"{where} has encoding-type {found!r}, expected {kind!r}")
        self.check_version(obj, where)

    def check_version(self, obj, where: str) -> None:
        version = obj.attrs.get("encoding-version", "")
        version = version.decode("utf-8", "replace") if isinstance(version, bytes) else str(version)
        try:
            major = int(version.split(".")[0])
        except ValueError:
            self.fail(f"{where} has an unreadable encoding-version {version!r}")
        ours = int(FORMAT_VERSION.split(".")[0])
        if major > ours:
            part = "" if where == "/" else f" ({where})"
            self.fail(
                f"written by slang file format {version}{part}; this slang ({__version__}) reads format "
                f"{ours}.x: upgrade slang to read it"
            )
        if major < 1:
            self.fail(f"{where} has an unknown encoding-version {version!r}")

    def json(self, obj, name: str, where: str, kind=dict):
        """The JSON attribute ``name``: an object (``kind=dict``) or an array of strings (``kind=list``)."""
        if name not in obj.attrs:
            self.fail(f"{where} lacks the {name!r} attribute")
        try:
            value = json.loads(obj.attrs[name])
        except (TypeError, ValueError):
            self.fail(f"{where} attribute {name!r} is not valid JSON")
        if kind is dict and not isinstance(value, dict):
            self.fail(f"{where} attribute {name!r} is not a JSON object")
        if kind is list and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            self.fail(f"{where} attribute {name!r} is not a JSON array of strings")
        return value

    def group(self, f, name: str):
        if name not in f or not isinstance(f[name], h5py.Group):
            self.fail(f"missing group /{name}")
        return f[name]

    def array(self, group, name: str, shape: tuple | None = None, *, finite=True, where=None) -> np.ndarray:
        where = where or f"{group.name}/{name}"
        if name not in group or not isinstance(group[name], h5py.Dataset):
            self.fail(f"missing dataset {where}")
        ds = group[name]
        if shape is not None and tuple(ds.shape) != tuple(shape):
            self.fail(f"{where} has shape {tuple(ds.shape)}, expected {tuple(shape)}")
        if ds.dtype.kind not in "fiu":
            self.fail(f"{where} is not numeric (dtype {ds.dtype})")
        arr = ds[()]
        if finite and ds.dtype.kind == "f" and not np.isfinite(arr).all():
            self.fail(f"{where} holds non-finite values")
        return arr

    def read(self) -> Run:
        if not self.path.exists():
            self.fail("no such file")
        try:
            f = h5py.File(self.path, "r")
        except OSError:
            self.fail("not an HDF5 file, or truncated or corrupted")
        try:
            with f:
                return self._read(f)
        except FormatError:
            raise
        except (OSError, KeyError, ValueError, TypeError, RuntimeError) as exc:
            self.fail(f"unreadable ({type(exc).__name__}: {exc})")

    def _read(self, f) -> Run:
        self.check_type(f, RUN_TYPE, "/")
        config = self.json(f, "config", "/")
        command = self.json(f, "command", "/", kind=list)
        versions = self.json(f, "versions", "/")
        meta = {"slang_version": str(f.attrs.get("slang_version", "")), "created": str(f.attrs.get("created", "")),
                "versions": versions}

        g = self.group(f, "data")
        self.check_type(g, "data", "/data")
        data = self.json(g, "provenance", "/data")
        arrays = {name: self.array(g, name) for name in g if isinstance(g[name], h5py.Dataset)}

        g = self.group(f, "model")
        self.check_type(g, "mlp", "/model")
        try:
            sizes = tuple(int(s) for s in np.asarray(g.attrs["sizes"]).ravel())
            model = MLP(sizes, activation=str(g.attrs["activation"]), likelihood=str(g.attrs["likelihood"]),
                        noise_precision=float(g.attrs["noise_precision"]))
        except KeyError as exc:
            self.fail(f"/model lacks the attribute {exc}")
        except Exception as exc:  # noqa: BLE001 - any invalid model description is a format error
            self.fail(f"/model is invalid: {exc}")
        D = model.n_params
        prior = self.array(g, "prior_precision", (D,))
        if not (prior > 0).all():
            self.fail("/model/prior_precision must be positive")

        g = self.group(f, "posterior")
        kind = g.attrs.get("encoding-type")
        if kind not in POSTERIOR_ENCODINGS:
            self.fail(f"/posterior has unknown encoding-type {kind!r}")
        self.check_version(g, "/posterior")
        cls, names = POSTERIOR_ENCODINGS[kind]
        posterior = cls(**self._posterior_arrays(g, kind, names, D))

        self._check_consistency(data, arrays, model)
        g = self.group(f, "history")
        history = {name: self.array(g, name, finite=False) for name in g if isinstance(g[name], h5py.Dataset)}
        for name, values in history.items():
            if values.ndim != 1:
                self.fail(f"/history/{name} has shape {values.shape}, expected one value per epoch")
        g = self.group(f, "metrics")
        metrics = self.json(g, "metrics", "/metrics")
        self._check_metrics(metrics)
        return Run(model=model, prior_precision=prior, posterior=posterior, config=config, data=data,
                   arrays=arrays, history=history, metrics=metrics, command=command, meta=meta)

    def require(self, obj, key: str, test, what: str, where: str):
        """``obj[key]``, which must exist and pass ``test``; ``what`` describes it in the message."""
        if not (isinstance(obj, dict) and key in obj and test(obj[key])):
            self.fail(f"{where} lacks {key!r} ({what})")
        return obj[key]

    def _check_consistency(self, data, arrays, model) -> None:
        """What the provenance promises must be there, with the model's shapes and the types the commands use."""
        if not isinstance(data.get("options"), dict) or not isinstance(data.get("train"), dict):
            self.fail("/data provenance lacks 'train' or 'options'")
        self.require(data["options"], "path", _is_str, "the data path", "/data provenance 'options'")
        train = data["train"]
        for key in ("path", "sha256", "format"):
            self.require(train, key, _is_str, "a string", "/data provenance 'train'")
        rows = self.require(train, "rows", _is_count, "a row count", "/data provenance 'train'")
        self.require(train, "features", _is_count, "a feature count", "/data provenance 'train'")
        if train["format"] == "uci":
            self.require(train, "folder", _is_str, "the UCI folder", "/data provenance 'train'")
        if not isinstance(data.get("feature_names", []), list):
            self.fail("/data provenance 'feature_names' is not a list")
        P = model.sizes[0]
        if data.get("standardize"):
            for name in ("feature_mean", "feature_scale"):
                if name not in arrays or arrays[name].shape != (P,):
                    self.fail(f"/data/{name} must be present with shape ({P},) (the run standardises features)")
        if model.likelihood == "gaussian":
            for name in ("target_mean", "target_scale"):
                if name not in arrays or arrays[name].shape != (1,):
                    self.fail(f"/data/{name} must be present with shape (1,) (regression run)")
        # evaluate applies these whenever they are present
        for name, shape in (("feature_mean", (P,)), ("feature_scale", (P,)), ("target_mean", (1,)),
                            ("target_scale", (1,))):
            if name in arrays and arrays[name].shape != shape:
                self.fail(f"/data/{name} has shape {arrays[name].shape}, expected {shape}")
            if name.endswith("scale") and name in arrays and not (arrays[name] > 0).all():
                self.fail(f"/data/{name} must be positive")
        if model.likelihood != "gaussian":
            if not (isinstance(data.get("labels"), dict) and isinstance(data["labels"].get("classes"), list)):
                self.fail("/data provenance lacks the label classes of a classification run")
            classes = data["labels"]["classes"]
            try:
                LabelMap(tuple(classes))
            except DataError as exc:
                self.fail(f"/data provenance: {exc}")
            n_classes = 2 if model.likelihood == "bernoulli" else model.sizes[-1]
            if len(classes) != n_classes:
                self.fail(f"/data provenance lists {len(classes)} label classes, the {model.likelihood} model has "
                          f"{n_classes}")
        for name in ("train_index", "test_index"):
            index = arrays.get(name)
            if index is not None and (index.ndim != 1 or index.dtype.kind not in "iu" or index.size == 0
                                      or index.min() < 0 or index.max() >= rows):
                self.fail(f"/data/{name} must list rows of the training data (integers from 0 to {rows - 1})")
        test = data.get("test")
        if test is None:
            return
        source = self.require(test, "source", lambda s: s in ("file", "split"), "'file' or 'split'",
                              "/data provenance 'test'")
        self.require(test, "rows", _is_count, "a row count", "/data provenance 'test'")
        if source == "file":
            for key in ("path", "sha256"):
                self.require(test, key, _is_str, "a string", "/data provenance 'test'")
            self.require(test, "features", _is_count, "a feature count", "/data provenance 'test'")
            return
        if "test_index" not in arrays:
            self.fail("/data/test_index is missing (the run's test set is a split of its training data)")
        if "uci_split" not in test and not ("test_fraction" in test and "split_seed" in test):
            self.fail("/data provenance 'test' lacks 'uci_split', or 'test_fraction' and 'split_seed'")

    def _check_metrics(self, metrics) -> None:
        where = "/metrics attribute 'metrics'"
        self.require(metrics, "train", lambda t: isinstance(t, dict) and _is_number(t.get("neg_elbo_per_example")),
                     "the training -ELBO per example", where)
        if "test" in metrics:
            test = metrics["test"]
            keys = ("rmse", "loglik") if isinstance(test, dict) and "rmse" in test else ("nll", "accuracy")
            if not (isinstance(test, dict) and all(_is_number(test.get(key)) for key in keys)):
                self.fail(f"{where} 'test' lacks {keys[0]!r} or {keys[1]!r} (numbers)")

    def _posterior_arrays(self, g, kind, names, D) -> dict:
        if kind == "lowrank-gaussian":
            mean = self.array(g, "mean", (D,))
            if "U" not in g or not isinstance(g["U"], h5py.Dataset) or len(g["U"].shape) != 2 or g["U"].shape[0] != D:
                self.fail(f"/posterior/U must have shape ({D}, L)")
            U = self.array(g, "U")
            d = self.array(g, "d", (D,))
            if not (d > 0).all():
                self.fail("/posterior/d must be positive")
            return {"mean": mean, "U": U, "d": d}
        raise AssertionError(kind)


def _is_str(value) -> bool:
    return isinstance(value, str)


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_run(path) -> Run:
    """Read and validate a run file; raises FormatError naming the file on any problem."""
    return _Reader(path).read()
