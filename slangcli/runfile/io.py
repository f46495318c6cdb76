"""Run files: one HDF5 file per fit or compression, format version 1.8 (described in ``docs/FORMAT.md``).

Every group carries ``encoding-type`` and ``encoding-version`` attributes; the reader dispatches on them and
refuses, with a :class:`FormatError`, files that are not slang runs, that a newer major format wrote, or whose
contents are missing, mis-shaped, non-finite or beyond ``MAX_ABS_VALUE`` in magnitude. Nested configuration is stored
as JSON string attributes, arrays always as datasets. A run file is one self-contained regular file: the reader
refuses anything else given as one (a FIFO, a directory, a device) and any soft or external link inside it. Files
are written to a temporary name in the target directory and renamed into place, so a run file is either complete
or absent.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import pickle
import select
import signal
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX (run files are then read in this process)
    fcntl = None

import h5py
import numpy as np

from slangcli import __version__
from slangcli.errors import FormatError
from slangcli.models import MLP
from slangcli.runfile.checked import RunChecks
from slangcli.runfile.outputs import atomic_output, hdf5_image, temporary_beside  # noqa: F401  (temporary_beside: re-exported)
from slangcli.gaussian.posteriors import COMPOSITES, MAX_ABS_VALUE, POSTERIORS

FORMAT_VERSION = "1.8"
RUN_TYPE = "slang-run"
# the datasets of /calibration (its other fields are the JSON attribute "summary")
CALIBRATION_ARRAYS = ("scores", "index")

# a dataset may declare up to this many bytes more than MAX_EXPANSION times what the file stores for it
MAX_UNSTORED_BYTES = 1 << 20
MAX_EXPANSION = 64


class _Registered(Mapping):
    """The posterior kinds registered in ``slangcli.gaussian.posteriors.POSTERIORS`` (and the composite kinds of
    ``COMPOSITES``, the mixture) as ``{key(cls): value(cls)}``, looked up anew on every use: a kind registered after
    this module was imported is written, read and named like the built-in ones."""

    def __init__(self, key, value):
        self._key, self._value = key, value

    def _table(self) -> dict:
        return {self._key(cls): self._value(cls) for cls in (*POSTERIORS.values(), *COMPOSITES.values())}

    def __getitem__(self, name):
        return self._table()[name]

    def __contains__(self, name) -> bool:
        return name in self._table()

    def __iter__(self):
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


# every posterior kind carries its encoding (``encoding``, ``stored_arrays`` and the classmethod ``from_group``,
# which reads the datasets back and checks them against the model): the class of a posterior -> its encoding-type,
# and the encoding-type -> the reader of that kind
POSTERIOR_NAMES = _Registered(lambda cls: cls, lambda cls: cls.encoding)
POSTERIOR_READERS = _Registered(lambda cls: cls.encoding, lambda cls: cls.from_group)


@dataclass
class Run:
    """Everything a run file holds."""

    model: MLP
    prior_precision: np.ndarray  # (D,)
    posterior: object
    config: dict  # method, hyperparameters, schedule, data and model options, seed
    # provenance of the training and test data, label classes, split; "schema": the data schema (1.4)
    data: dict
    arrays: dict = field(default_factory=dict)  # preprocessing arrays: train_index, test_index, feature_mean, feature_scale
    history: dict = field(default_factory=dict)  # per-epoch arrays
    metrics: dict = field(default_factory=dict)
    command: list = field(default_factory=list)
    meta: dict = field(default_factory=dict)  # slang_version, created, versions (set on write)
    # "complete", or "checkpoint": a fit stopped part-way whose `state` lets `slang fit --resume` continue it
    status: str = "complete"
    # training state of a checkpoint: {"arrays": {name: array}, "scalars": {name: number}}
    state: dict | None = None
    compression: dict = field(default_factory=dict)  # slang compress: source, ranks, errors, parameter counts
    compression_arrays: dict = field(default_factory=dict)  # slang compress: singular values per layer
    # slang fit --calibrate (1.5): the held-out rows' sorted split-conformal scores ("scores"), their rows ("index"),
    # "n", "fraction", "seed", "score" (its definition), "predictive", "samples" (slangcli.predictive.conformal);
    # empty for a run without
    calibration: dict = field(default_factory=dict)


def _array(group, name: str, values) -> None:
    """The dataset ``name`` of ``values``, with HDF5's Fletcher-32 checksum of every chunk when it holds numbers:
    a flipped bit in a posterior's mean or a feature's scale then fails the read, where it changed predictions
    silently (4 of 60 random bit flips of a run file did). Files without it read as before."""
    values = np.asarray(values)
    checked = values.ndim >= 1 and values.size > 0 and values.dtype.kind in "biuf"
    group.create_dataset(name, data=values, fletcher32=bool(checked))


def _typed(group, kind: str) -> None:
    group.attrs["encoding-type"] = kind
    group.attrs["encoding-version"] = FORMAT_VERSION


def _json_attr(obj, name: str, value) -> None:
    obj.attrs[name] = json.dumps(value, sort_keys=True)


def write_run(path, run: Run) -> None:
    """Write ``run`` to ``path`` atomically (temporary file in the same directory, then rename)."""
    write_runs([(path, run)])


def write_runs(items) -> None:
    """Write each ``(path, run)`` of ``items``: all to temporary files first, then all renamed into place, so
    that an error while writing any of them leaves none of them (and no temporary file) behind; a full disk
    raises :class:`slangcli.runfile.outputs.OutputError` naming the file."""
    with contextlib.ExitStack() as stack:
        for path, run in items:
            _write_file(stack.enter_context(atomic_output(path)), run)


def _write_file(tmp, run: Run) -> None:
    """``run`` written completely to the (temporary) file ``tmp``."""
    with hdf5_image(tmp) as f:
        _typed(f, RUN_TYPE)
        f.attrs["slang_version"] = run.meta.get("slang_version", __version__)
        f.attrs["created"] = run.meta.get("created", "")
        _json_attr(f, "command", list(run.command))
        _json_attr(f, "config", run.config)
        _json_attr(f, "versions", run.meta.get("versions", {}))
        for name in ("environment", "resumed"):  # (1.7; a run made in Python before has neither)
            if run.meta.get(name):
                _json_attr(f, name, run.meta[name])
        f.attrs["seed"] = int(run.config.get("seed", 0))
        f.attrs["status"] = run.status

        g = f.create_group("data")
        _typed(g, "data")
        provenance = dict(run.data)
        schema = provenance.pop("schema", None)
        _json_attr(g, "provenance", provenance)
        for name, arr in run.arrays.items():
            _array(g, name, arr)
        if schema is not None:
            # the data schema (slangcli.data.schema), 1.4: JSON in a string dataset, which holds any number of columns
            # and levels (an attribute is limited in size)
            s = g.create_group("schema")
            _typed(s, "data-schema")
            s.create_dataset("json", data=json.dumps(schema, sort_keys=True))

        g = f.create_group("model")
        _typed(g, "mlp")
        g.attrs["sizes"] = np.asarray(run.model.sizes, dtype=np.int64)
        g.attrs["activation"] = run.model.activation
        g.attrs["likelihood"] = run.model.likelihood
        g.attrs["noise_precision"] = float(run.model.noise_precision)
        _array(g, "prior_precision", run.prior_precision)
        if run.model.noise_weights is not None:  # slang fit --noise-model linear (1.6) or hidden (1.8)
            _array(g, "noise_weights", np.asarray(run.model.noise_weights, dtype=float))

        _write_posterior(f.create_group("posterior"), run.posterior)

        g = f.create_group("history")
        _typed(g, "history")
        for name, arr in run.history.items():
            _array(g, name, arr)

        g = f.create_group("metrics")
        _typed(g, "metrics")
        _json_attr(g, "metrics", run.metrics)

        if run.state is not None:
            g = f.create_group("state")
            _typed(g, "train-state")
            for name, arr in run.state["arrays"].items():
                _array(g, name, arr)
            for name, value in run.state["scalars"].items():
                g.attrs[name] = value
        if run.calibration:
            # split-conformal scores (1.5): the summary as JSON, the scores and their rows as datasets
            g = f.create_group("calibration")
            _typed(g, "calibration")
            _json_attr(g, "summary", {k: v for k, v in run.calibration.items() if k not in CALIBRATION_ARRAYS})
            for name in CALIBRATION_ARRAYS:
                _array(g, name, run.calibration[name])
        if run.compression:
            g = f.create_group("compression")
            _typed(g, "compression")
            _json_attr(g, "summary", run.compression)
            for name, arr in run.compression_arrays.items():
                _array(g, name, arr)


def _write_posterior(g, posterior) -> None:
    """``posterior`` in its kind's encoding in the group ``g``: its datasets, and a composite kind's attributes and
    member groups (each in its own kind's encoding)."""
    _typed(g, posterior.encoding)
    for name, value in getattr(posterior, "stored_attributes", dict)().items():
        g.attrs[name] = value
    for name, values in posterior.stored_arrays().items():
        _array(g, name, values)
    for name, member in getattr(posterior, "stored_groups", dict)().items():
        _write_posterior(g.create_group(name), member)


# libhdf5 loops forever on some corrupted files (a variable-length string attribute whose global-heap object is
# corrupted: about 1 in 100 random byte corruptions of a run file), and the HDF5 1.12 of h5py 3.8 crashes on others,
# not always the same way twice (a read past a corrupted length lands in whatever memory follows it). Neither can be
# stopped or survived in-process, so a run file is read and checked in a forked child that sends the run back; a
# child that crashes or has not finished after this many seconds (plus one per READ_BYTES_PER_SECOND of file) makes
# the file a FormatError, and this process never opens the file with libhdf5 at all.
READ_SECONDS = 5.0
READ_BYTES_PER_SECOND = 50e6


def _read_isolated(reader: "_Reader", size: int) -> Run:
    """``reader.read_here()`` run in a forked child: its run, or its FormatError raised here."""
    read_fd, write_fd = os.pipe()
    with contextlib.suppress(AttributeError, OSError):  # Linux: a pipe of 1 MiB carries a large run faster
        fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, 1 << 20)
    pid = os.fork()
    if pid == 0:  # the child never returns into the caller
        try:
            faulthandler.disable()  # its crash is reported here in one line, not dumped on stderr as well
            os.close(read_fd)
            with os.fdopen(write_fd, "wb") as out:
                _send_outcome(out, reader.read_here)
        finally:
            os._exit(0)
    os.close(write_fd)
    seconds = READ_SECONDS + size / READ_BYTES_PER_SECOND
    outcome, status = None, 0
    try:
        with os.fdopen(read_fd, "rb") as pipe:
            # the child writes only once it has read the whole file, so a child inside libhdf5 writes nothing
            if select.select([pipe], [], [], seconds)[0]:
                with contextlib.suppress(EOFError, pickle.UnpicklingError):
                    outcome = pickle.load(pipe)
            else:
                os.kill(pid, signal.SIGKILL)
    except BaseException:  # interrupted (a Ctrl-C): the read ends with it
        os.kill(pid, signal.SIGKILL)
        raise
    finally:
        with contextlib.suppress(ChildProcessError):  # (reaped already where the program ignores SIGCHLD)
            _, status = os.waitpid(pid, 0)
    if outcome is None:
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
            reader.fail(f"corrupted: libhdf5 did not finish reading it within {seconds:.3g} s")
        if os.WIFSIGNALED(status):
            reader.fail(f"corrupted: libhdf5 crashed reading it (signal {os.WTERMSIG(status)})")
        reader.fail("corrupted: the process reading it ended without a result")
    kind, payload = outcome
    if kind == "error":
        raise FormatError(payload)
    if kind == "exception":  # not a problem of the file: a defect here, raised as it was
        raise payload
    return payload


def _send_outcome(out, read) -> None:
    """Pickle ``("run", read())``, ``("error", message)`` for a FormatError, or ``("exception", exc)`` to ``out``."""
    try:
        outcome = ("run", read())
    except FormatError as exc:
        outcome = ("error", str(exc))
    except BaseException as exc:  # noqa: BLE001 - re-raised in the parent
        try:
            pickle.dumps(exc)
        except Exception:  # noqa: BLE001 - an exception that does not pickle travels as its description
            exc = RuntimeError(f"reading a run file failed: {exc!r}")
        outcome = ("exception", exc)
    pickle.dump(outcome, out, protocol=pickle.HIGHEST_PROTOCOL)


def _file_kind(mode: int) -> str:
    """What a file of ``mode`` (``os.stat``) that is not a regular file is, for a message."""
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "not a regular file")


def _text(value):
    """An attribute's value with bytes decoded: h5py returns a fixed-length string attribute as ``np.bytes_``
    (a variable-length one as ``str``), and the file's names must compare and print as text either way."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


_ABSENT = object()


def _first_link(group, prefix: str = "", seen=None):
    """``(name, link)`` of the first soft or external link under ``group``, or None. Each link is looked at
    without following it (``getlink=True``, in every h5py since 2.x: ``visititems_links`` needs h5py 3.11), and
    only hard-linked groups are entered, each once (hard links can make a cycle)."""
    seen = set() if seen is None else seen
    for name in group:
        link = group.get(name, getlink=True)
        path = f"{prefix}{name}"
        if not isinstance(link, h5py.HardLink):
            return path, link
        child = group.get(name)
        if isinstance(child, h5py.Group) and child.id not in seen:
            seen.add(child.id)
            found = _first_link(child, f"{path}/", seen)
            if found is not None:
                return found
    return None


class _Reader:
    """Reads and validates one run file; every problem becomes a one-line FormatError naming the file. The reader
    checks each part's form as it reads it; :class:`RunChecks` then checks the parts against each other."""

    def __init__(self, path):
        self.path = Path(path)
        self.name = str(path)
        self.checks = RunChecks(self.fail)

    def fail(self, message: str):
        raise FormatError(f"{self.name}: {message}")

    def attr(self, obj, name: str, default=_ABSENT):
        """The attribute ``name`` of ``obj``, strings as text whether stored fixed-length or variable-length
        (every attribute is read here); ``default`` when absent, a FormatError when absent without one."""
        if name not in obj.attrs:
            if default is _ABSENT:
                self.fail(f"{obj.name} lacks the {name!r} attribute")
            return default
        return _text(obj.attrs[name])

    def check_type(self, obj, kind: str, where: str) -> None:
        found = self.attr(obj, "encoding-type", None)
        if not isinstance(found, str) or found != kind:  # (a damaged file's may be an array: no elementwise test)
            if where == "/":
                self.fail("not a slang run file (no slang-run encoding-type attribute)")
            self.fail(f"{where} has encoding-type {found!r}, expected {kind!r}")
        self.check_version(obj, where)

    def check_version(self, obj, where: str) -> None:
        version = str(self.attr(obj, "encoding-version", ""))
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
            value = json.loads(self.attr(obj, name))
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

    def subgroup(self, group, name: str):
        """The group ``name`` inside ``group`` (a mixture's member), which must be one."""
        if name not in group or not isinstance(group[name], h5py.Group):
            self.fail(f"{group.name}/{name} is missing or not a group")
        return group[name]

    def array(self, group, name: str, shape: tuple | None = None, *, finite=True, bounded=True,
              where=None) -> np.ndarray:
        """The numeric dataset ``name`` of ``group`` (of ``shape`` when given), read whole. With ``finite`` its
        floating-point values must be finite and, with ``bounded``, within ``MAX_ABS_VALUE`` in magnitude: the
        default, for what a posterior is computed with (the posterior, the prior); the data's statistics, the
        training state and the compression's spectra are not squared and keep any finite value."""
        where = where or f"{group.name}/{name}"
        if name not in group or not isinstance(group[name], h5py.Dataset):
            self.fail(f"missing dataset {where}")
        ds = group[name]
        if shape is not None and tuple(ds.shape) != tuple(shape):
            self.fail(f"{where} has shape {tuple(ds.shape)}, expected {tuple(shape)}")
        if ds.dtype.kind not in "fiu":
            self.fail(f"{where} is not numeric (dtype {ds.dtype})")
        self.check_size(ds, where)
        arr = ds[()]
        if not finite or ds.dtype.kind != "f":
            return arr
        # (one pass when bounded: NaN fails the comparison, and so does an infinity; in float64, where the bound
        # exists)
        ok = (np.abs(arr.astype(float, copy=False)) <= MAX_ABS_VALUE).all() if bounded else np.isfinite(arr).all()
        if not ok:
            if not np.isfinite(arr).all():
                self.fail(f"{where} holds non-finite values")
            self.fail(f"{where} holds values beyond {MAX_ABS_VALUE:g} in magnitude (too large to compute with)")
        return arr

    def dataset_shape(self, group, name: str) -> tuple | None:
        """The shape of the dataset ``name`` in ``group``, None when it has none (for a reader that names the
        shape it expected)."""
        if name not in group or not isinstance(group[name], h5py.Dataset):
            return None
        return tuple(group[name].shape)

    def check_size(self, ds, where: str) -> None:
        """Refuse a dataset that declares far more data than the file stores (a chunked dataset of 8 TB in a
        20 KB file would be read as fill values until memory runs out). slang writes its datasets uncompressed;
        others' compression is allowed up to ``MAX_EXPANSION`` times."""
        declared = int(ds.size) * ds.dtype.itemsize
        if declared <= MAX_UNSTORED_BYTES:
            return
        stored = ds.id.get_storage_size()
        if declared > MAX_EXPANSION * stored + MAX_UNSTORED_BYTES:
            self.fail(f"{where} declares {declared / 1e9:.3g} GB of data but the file stores {stored} bytes of it")

    def read(self, isolated: bool = True) -> Run:
        try:  # before any open: opening a FIFO waits for a writer
            found = os.stat(self.path)
        except FileNotFoundError:
            self.fail("no such file")
        except OSError as exc:
            self.fail(f"cannot read it: {exc.strerror}")
        if not stat.S_ISREG(found.st_mode):
            self.fail(f"is {_file_kind(found.st_mode)}, not a run file")
        try:  # (libhdf5 reports a file it may not open as one it cannot read: "truncated or corrupted")
            with open(self.path, "rb"):
                pass
        except OSError as exc:
            self.fail(f"cannot read it: {exc.strerror}")
        if isolated and hasattr(os, "fork"):
            return _read_isolated(self, found.st_size)
        return self.read_here()

    def read_here(self) -> Run:
        """The run, read in this process."""
        try:
            f = h5py.File(self.path, "r")
        except OSError:
            self.fail("not an HDF5 file, or truncated or corrupted")
        try:
            with f:
                self.check_links(f)
                return self._read(f)
        except FormatError:
            raise
        except OSError as exc:
            # (the Fletcher-32 checksum of a chunk, see _array; HDF5 1.12 names it, 1.14 says "filter returned failure")
            if "fletcher32" in str(exc).lower() or "filter returned failure" in str(exc):
                self.fail(f"corrupted: an array fails its checksum (libhdf5: {exc})")
            self.fail(f"unreadable (OSError: {exc})")
        except (KeyError, ValueError, TypeError, RuntimeError) as exc:
            self.fail(f"unreadable ({type(exc).__name__}: {exc})")

    def check_links(self, f) -> None:
        """Refuse a soft or external link anywhere in the file (before anything follows one): a run file is
        self-contained, and an external link would read another file's data in its name. One pass over the link
        names of every group; no dataset is read."""
        found = _first_link(f)
        if found is None:
            return
        name, link = found
        if isinstance(link, h5py.ExternalLink):
            self.fail(f"/{name} is an external link to {link.filename}:{link.path}; a run file must be "
                      "self-contained")
        if isinstance(link, h5py.SoftLink):
            self.fail(f"/{name} is a soft link to {link.path}; a run file must hold its objects themselves")
        self.fail(f"/{name} is a link of an unknown kind; a run file must hold its objects themselves")

    def _read(self, f) -> Run:
        self.check_type(f, RUN_TYPE, "/")
        config = self.json(f, "config", "/")
        command = self.json(f, "command", "/", kind=list)
        versions = self.json(f, "versions", "/")
        meta = {"slang_version": str(self.attr(f, "slang_version", "")), "created": str(self.attr(f, "created", "")),
                "versions": versions}
        if "environment" in f.attrs:
            meta["environment"] = self.json(f, "environment", "/")
        if "resumed" in f.attrs:
            resumed = self.json(f, "resumed", "/", kind=None)
            if not (isinstance(resumed, list) and all(isinstance(entry, dict) for entry in resumed)):
                self.fail("/ attribute 'resumed' is not a JSON array of objects")
            meta["resumed"] = resumed
        data, arrays = self._data(f)
        model, prior = self._model(f)
        posterior = self._posterior(f, model)
        self.checks.data(data, arrays, model)
        history = self._history(f)
        g = self.group(f, "metrics")
        metrics = self.json(g, "metrics", "/metrics")
        status = str(self.attr(f, "status", "complete"))
        if status not in ("complete", "checkpoint"):
            self.fail(f"/ has an unknown status {status!r}")
        # a checkpoint holds no scores yet, and a compressed run only when `slang compress --evaluate` made them
        if status == "complete" and ("compression" not in f or metrics):
            self.checks.metrics(metrics)
        state = self._state(f) if status == "checkpoint" else None
        self.checks.members(config, posterior, state)
        self.checks.draws(config)
        compression, compression_arrays = self._compression(f) if "compression" in f else ({}, {})
        calibration = self._calibration(f) if "calibration" in f else {}
        if calibration:
            self.checks.calibration(calibration, data, arrays, model)
        return Run(model=model, prior_precision=prior, posterior=posterior, config=config, data=data,
                   arrays=arrays, history=history, metrics=metrics, command=command, meta=meta, status=status,
                   state=state, compression=compression, compression_arrays=compression_arrays,
                   calibration=calibration)

    def _data(self, f):
        """``(provenance, arrays)`` of ``/data``: the provenance with the stored schema (if any) under "schema", and
        the preprocessing arrays (split indices, standardisation)."""
        g = self.group(f, "data")
        self.check_type(g, "data", "/data")
        data = self.json(g, "provenance", "/data")
        arrays = {name: self.array(g, name, bounded=False) for name in g if isinstance(g[name], h5py.Dataset)}
        data.pop("schema", None)  # (only the group holds the schema)
        if "schema" in g:
            data["schema"] = self.schema(g)
        return data, arrays

    def _model(self, f):
        """``(model, prior precision)`` of ``/model``: the network it describes, and a positive prior precision per
        parameter."""
        g = self.group(f, "model")
        self.check_type(g, "mlp", "/model")
        sizes, activation, likelihood, noise = (self.attr(g, name) for name in ("sizes", "activation", "likelihood",
                                                                               "noise_precision"))
        try:
            model = MLP(tuple(int(s) for s in np.asarray(sizes).ravel()), activation=str(activation),
                        likelihood=str(likelihood), noise_precision=float(noise))
        except Exception as exc:  # noqa: BLE001 - any invalid model description is a format error
            self.fail(f"/model is invalid: {exc}")
        if "noise_weights" in g:  # the noise model (1.6)
            if model.likelihood != "gaussian":
                self.fail(f"/model/noise_weights belongs to a gaussian likelihood, not {model.likelihood}")
            weights = self.array(g, "noise_weights")
            lengths = [model.sizes[0] + 2] + ([model.sizes[0] + model.sizes[-2] + 2] if len(model.sizes) > 2 else [])
            if weights.ndim != 1 or len(weights) not in lengths:  # linear (1.6), or over the hidden layer too (1.8)
                self.fail(f"/model/noise_weights has shape {weights.shape}, expected "
                          + " or ".join(f"({n},)" for n in lengths))
            model = replace(model, noise_weights=tuple(float(v) for v in weights))
        prior = self.array(g, "prior_precision", (model.n_params,))
        if not (prior > 0).all():
            self.fail("/model/prior_precision must be positive")
        return model, prior

    def _posterior(self, f, model):
        """``/posterior``, read by the reader of its kind (``POSTERIOR_READERS``), which checks it against the
        model."""
        g = self.group(f, "posterior")
        kind = self.attr(g, "encoding-type", None)
        if kind not in POSTERIOR_READERS:
            self.fail(f"/posterior has unknown encoding-type {kind!r}")
        self.check_version(g, "/posterior")
        return POSTERIOR_READERS[kind](self, g, model)

    def _history(self, f) -> dict:
        """``/history``: one value per epoch, or one row per record (``snr``, ``snr_paper``, ``prior_precision``);
        not checked for finite values (a signal-to-noise ratio is NaN where no parameter varies)."""
        g = self.group(f, "history")
        history = {name: self.array(g, name, finite=False) for name in g if isinstance(g[name], h5py.Dataset)}
        for name, values in history.items():
            # one value per record; the SNR arrays hold one value per weight matrix in each record
            # (and the learned prior precisions one per weight matrix); a mixture's member k >= 1 has its own
            # under the prefix "member<k>_" (1.5)
            if values.ndim != (2 if member_name(name)[1] in ("snr", "snr_paper", "prior_precision") else 1):
                self.fail(f"/history/{name} has shape {values.shape}, expected one "
                          + ("row per record" if name.startswith("snr") else "value per epoch"))
        return history

    def _compression(self, f):
        """``(summary, arrays)`` of ``/compression``, written by slang compress (1.2)."""
        g = self.group(f, "compression")
        self.check_type(g, "compression", "/compression")
        compression = self.json(g, "summary", "/compression")
        compression_arrays = {name: self.array(g, name, bounded=False) for name in g
                              if isinstance(g[name], h5py.Dataset)}
        return compression, compression_arrays

    def _calibration(self, f) -> dict:
        """``/calibration`` (1.5), written by ``slang fit --calibrate``: its summary and datasets, each of its form
        (the values are checked against the run in :meth:`slangcli.runfile.checked.RunChecks.calibration`)."""
        g = f["calibration"]
        if not isinstance(g, h5py.Group):
            self.fail("/calibration is not a group")
        self.check_type(g, "calibration", "/calibration")
        summary = self.json(g, "summary", "/calibration")
        n = summary.get("n")
        if not (isinstance(n, int) and not isinstance(n, bool) and n >= 1):
            self.fail("/calibration attribute 'summary' lacks 'n' (the number of calibration rows, >= 1)")
        scores = self.array(g, "scores", (n,), bounded=False)
        index = self.array(g, "index", (n,))
        return {**summary, "scores": scores, "index": index}

    def schema(self, g) -> dict:
        """The stored data schema's JSON object (``/data/schema``, 1.4); checked against the model in
        :meth:`slangcli.runfile.checked.RunChecks.data`."""
        s = g["schema"]
        if not isinstance(s, h5py.Group):
            self.fail("/data/schema is not a group")
        self.check_type(s, "data-schema", "/data/schema")
        ds = s.get("json")
        if not isinstance(ds, h5py.Dataset) or ds.shape != () or ds.dtype.kind not in "OSU":
            self.fail("/data/schema lacks its json dataset (one string)")
        self.check_size(ds, "/data/schema/json")
        value = ds[()]
        try:
            return json.loads(value.decode("utf-8") if isinstance(value, bytes) else value)
        except (TypeError, ValueError):
            self.fail("/data/schema/json is not valid JSON")

    def _state(self, f) -> dict:
        """The training state of a checkpoint: finite numeric arrays and numeric scalars (shapes are checked
        against the method when the run is resumed)."""
        g = self.group(f, "state")
        self.check_type(g, "train-state", "/state")
        self.check_version(g, "/state")
        arrays = {name: self.array(g, name, bounded=False) for name in g if isinstance(g[name], h5py.Dataset)}
        scalars = {}
        for name in g.attrs:
            if name in ("encoding-type", "encoding-version"):
                continue
            value = np.asarray(self.attr(g, name))
            if value.shape != () or value.dtype.kind not in "fiu" or not np.isfinite(value):
                self.fail(f"/state attribute {name!r} is not a finite number")
            scalars[name] = value.item()
        if "t" not in scalars:
            self.fail("/state lacks the step counter 't'")
        return {"arrays": arrays, "scalars": scalars}


def member_name(name: str) -> tuple[int, str]:
    """``(k, name)`` of a history array's name: ``"member2_nll" -> (2, "nll")``; a name without the prefix is
    member 0's (or a single fit's)."""
    head, _, rest = name.partition("_")
    if head.startswith("member") and head[6:].isdigit() and rest:
        return int(head[6:]), rest
    return 0, name


def read_run(path, *, isolated: bool = True) -> Run:
    """Read and validate a run file; raises FormatError naming the file on any problem.

    ``isolated=False`` reads it in this process, without the forked child that survives libhdf5 looping forever or
    crashing on a corrupted file (on a system without ``fork`` it always is read in this process).
    """
    return _Reader(path).read(isolated)
