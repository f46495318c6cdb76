"""Prediction files of ``slang predict``: a CSV table or an HDF5 file (format in ``docs/FORMAT.md``).

CSV: one row per example, in the order of the data, the first column ``row`` its 0-based data row; a header row;
class probabilities as one column per class (``p_<label>``), the interval as ``lower_<level %>``,
``upper_<level %>``, a calibrated run's (``slang fit --calibrate``) split-conformal interval as
``calibrated_lower_<level %>``, ``calibrated_upper_<level %>`` and its prediction set as one 0/1 column per class
(``calibrated_set_<level %>_<label>``) and ``calibrated_set_size_<level %>``; a row without a prediction (a missing
value) has empty cells. Numbers carry 12 significant digits
(the quadrature predictive is accurate to about 1e-12, Monte-Carlo estimates far less); the HDF5 file keeps
float64.

Both are written under a temporary name in the target directory and renamed into place when complete, so an
error leaves no partial file; ``-`` writes the CSV to stdout once everything is computed.
"""

from __future__ import annotations

import csv
import datetime
import gzip
import io
import json

import h5py
import numpy as np

from slangcli import __version__
from slangcli.data.prepare import LabelMap
from slangcli.runfile.outputs import atomic_output, hdf5_image, utf8_stdout, writing_stdout
from slangcli.runfile.provenance import versions

PREDICTIONS_TYPE = "slang-predictions"
PREDICTIONS_VERSION = "1.2"  # 1.1: the calibrated intervals and sets of a --calibrate run; 1.2: versions
HDF5_SUFFIXES = (".h5", ".hdf5")
GZIP_SUFFIX = ".gz"
# 12 significant digits: see the module docstring
_FLOAT_FORMAT = "%.12g"


# a temporary path beside the output, renamed onto it when the block completes and removed when it fails
atomic_path = atomic_output


def percent(level: float) -> str:
    """A level as a column's percent: ``95``, ``99.9``; to 12 digits where 6 would round it to 100 (a level of
    0.999999999999 named its columns ``lower_100``)."""
    text = f"{100 * level:g}"
    return f"{100 * level:.12g}" if text == "100" and level < 1 else text


def csv_header(predictions) -> list[str]:
    """The CSV column names of a :class:`slangcli.predictive.evaluation.Predictions`."""
    header = []
    calibrated = predictions.info.get("calibration")
    for name in predictions.arrays:
        if name == "probabilities":
            header += [f"p_{label}" for label in LabelMap(tuple(predictions.classes)).names]
        elif name in ("lower", "upper"):
            header.append(f"{name}_{percent(predictions.info['interval'])}")
        elif name in ("calibrated_lower", "calibrated_upper", "calibrated_set_size"):
            header.append(f"{name}_{percent(calibrated['level'])}")
        elif name == "calibrated_set":  # one 0/1 column per class: in the prediction set or not
            header += [f"calibrated_set_{percent(calibrated['level'])}_{label}"
                       for label in LabelMap(tuple(predictions.classes)).names]
        else:
            header.append(name)
    return header


def _numbers(values) -> list[str]:
    """Numbers with 12 significant digits; NaN, a row without a prediction, is an empty cell."""
    text = np.char.mod(_FLOAT_FORMAT, values)
    return np.where(np.isnan(values), "", text).tolist()


# rows of a CSV written at once: their cells as Python strings take about 60 bytes each
_CSV_ROWS = 1 << 14


def _csv_cells(predictions, rows=slice(None)) -> list[list[str]]:
    """The CSV columns of the examples ``rows`` as text, in the order of :func:`csv_header`."""
    labels = LabelMap(tuple(predictions.classes)) if predictions.classes is not None else None
    cells = []
    for name, values in predictions.arrays.items():
        values = values[rows]
        if name == "row":
            cells.append([str(v) for v in values.tolist()])
        elif name in ("probabilities", "calibrated_set"):
            cells += [_numbers(column) for column in values.T]
        elif labels is not None and name in ("predicted", "target"):
            # label values as the label map writes them (4, -1, benign), not as floats (4.0); a row without a
            # prediction (NaN, or "" for string labels) is an empty cell
            # (integral labels come as int64, which has no empty cell; comparing them with "" is not elementwise
            # in every NumPy this supports)
            empty = np.isnan(values) if values.dtype.kind == "f" else \
                values == "" if values.dtype.kind == "U" else np.zeros(len(values), dtype=bool)
            written = np.full(len(values), "", dtype=object)
            written[~empty] = np.array(labels.names)[labels.encode(values[~empty], path=name)]
            cells.append(written.tolist())
        else:
            cells.append(_numbers(values))
    return cells


def _write_csv(stream, predictions) -> None:
    """The CSV, a block of ``_CSV_ROWS`` examples at a time (every cell of ten million rows at once, as Python
    strings, took gigabytes)."""
    writer = csv.writer(stream, lineterminator="\n")
    writer.writerow(csv_header(predictions))
    n = len(next(iter(predictions.arrays.values()))) if predictions.arrays else 0
    for lo in range(0, n, _CSV_ROWS):
        writer.writerows(zip(*_csv_cells(predictions, slice(lo, lo + _CSV_ROWS))))


def _h5_data(values, labels: bool = False):
    """``values`` as a dataset stores them: text as UTF-8 strings; ``labels`` (the classes, the predicted and
    target labels) that are numbers as float64, whatever NumPy type they came as (integral ones come as int64 from
    Python), as the format has them."""
    values = np.asarray(values)
    if values.dtype.kind in "US":
        return np.array(values.tolist(), dtype=h5py.string_dtype("utf-8"))
    if labels and values.dtype.kind in "iu":
        return values.astype(np.float64)
    return values


def _write_h5(path, predictions) -> None:
    with hdf5_image(path) as f:
        f.attrs["encoding-type"] = PREDICTIONS_TYPE
        f.attrs["encoding-version"] = PREDICTIONS_VERSION
        f.attrs["slang_version"] = __version__
        f.attrs["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        f.attrs["versions"] = json.dumps(versions(), sort_keys=True)
        f.attrs["info"] = json.dumps(predictions.info, sort_keys=True)
        f.attrs["columns"] = json.dumps(list(predictions.arrays))
        if predictions.classes is not None:
            f.create_dataset("classes", data=_h5_data(predictions.classes, labels=True))
        for name, values in predictions.arrays.items():
            ds = f.create_dataset(name, data=_h5_data(values, labels=name in ("predicted", "target")))
            if name in ("lower", "upper"):
                ds.attrs["level"] = predictions.info["interval"]
            elif name.startswith("calibrated_"):
                ds.attrs["level"] = predictions.info["calibration"]["level"]


def write_predictions(output: str, predictions) -> None:
    """Write ``predictions`` to ``output``: HDF5 for ``.h5``/``.hdf5``, CSV on stdout for ``-``, gzip-compressed CSV
    for ``.gz`` (as pandas writes and reads such a name; no time stamp inside, so a seed gives the same bytes), else
    CSV."""
    if output == "-":  # (UTF-8, the bytes -o file.csv holds, whatever the locale)
        with writing_stdout(), utf8_stdout() as out:
            _write_csv(out, predictions)
        return
    with atomic_path(output) as tmp:
        if output.lower().endswith(HDF5_SUFFIXES):
            _write_h5(tmp, predictions)
        elif output.lower().endswith(GZIP_SUFFIX):
            # (level 6, gzip's own default: GzipFile's 9 doubled the time of a million rows for a few per cent)
            with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0,
                                                       compresslevel=6) as packed, \
                    io.TextIOWrapper(packed, encoding="utf-8", newline="") as stream:
                _write_csv(stream, predictions)
        else:
            with open(tmp, "w", newline="", encoding="utf-8") as stream:
                _write_csv(stream, predictions)
