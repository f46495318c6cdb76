"""IDX files (LeCun et al., the MNIST distribution format), read into the dense ``Table``.

A big-endian header, magic ``0x000008nn`` where ``0x08`` is the unsigned-byte data type and ``nn`` the number
of dimensions, then one uint32 size per dimension, then the values in C order. An images file
(``N x rows x cols`` or ``N x P``) is paired with a labels file (``N``) whose name replaces ``images-idx3`` by
``labels-idx1``. Pixels are scaled to [0, 1] by ``/ 255``. The declared sizes are checked against the
(decompressed) byte count before any array is allocated from them.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import zlib

import numpy as np

from slangcli.data.readers._common import (_GZIP_MAGIC, STDIN, Table, _read_bytes, gzip_limit, gzip_stream, gzip_too_large,
                                          is_stream_path)
from slangcli.errors import DataError

# Data-type byte (the third byte of the magic number) -> name, from the IDX description on the MNIST page.
_IDX_TYPES = {0x08: "unsigned byte", 0x09: "signed byte", 0x0B: "int16", 0x0C: "int32", 0x0D: "float32",
              0x0E: "float64"}
_IDX_UBYTE = 0x08
_IDX_IMAGES_NAME = re.compile(r"images-idx\d")
# Decompression proceeds in blocks of this many bytes and stops one byte past the declared size, so that
# neither a gzip bomb nor a header declaring 10^12 images can make the reader allocate more than the
# smaller of the declared and the actual size; nor more than gzip_limit of the compressed size (the text
# readers' limit), whatever the header declares.
_IDX_BLOCK = 1 << 24


def read_idx(images_path, labels_path=None) -> Table:
    """Read an IDX images file and its labels file (the MNIST format), optionally gzip-compressed.

    Parameters
    ----------
    images_path : str or os.PathLike
        Magic ``0x00000803`` (unsigned bytes, ``N x rows x cols``) or ``0x00000802`` (``N x P``).
        Compression is recognised by the gzip magic bytes, not the file name.
    labels_path : None, str or os.PathLike
        Magic ``0x00000801`` (``N`` unsigned bytes). None: the file beside the images whose name replaces
        ``images-idx3`` by ``labels-idx1``, with or without ``.gz`` (the images file's own compression
        is tried first).

    Returns
    -------
    Table
        ``X : (N, rows * cols)`` float64, the pixels divided by 255 so they lie in [0, 1]; ``y : (N,)``
        float64 class labels (0..9 for MNIST); ``feature_names`` ``px0 ... px{P-1}`` in C (row-major) order.

    Raises
    ------
    DataError
        Missing labels file, wrong magic number, a data type other than unsigned byte, a file size that does
        not match the header's dimensions exactly, or label and image counts that differ.
    """
    name = os.fspath(images_path)
    return _read_idx(name, _read_bytes(name), labels_path)


class NoLabelsFile(DataError):
    """No labels file beside an IDX images file: images to predict need none."""


def _read_idx(name, raw, labels_path, labels_optional: bool = False):
    """``labels_optional``: images without a labels file beside them are read alone (``y`` None), as data to predict
    need no target."""
    dims, pixels = _idx_payload(name, raw, images=True)
    try:
        labels_name = _labels_beside(name) if labels_path is None else os.fspath(labels_path)
    except NoLabelsFile:
        if not labels_optional:
            raise
        labels_name = None
    n, shape = dims[0], dims[1:]
    y = None
    if labels_name is not None:
        labels_raw = _read_bytes(labels_name)
        (n_labels,), labels = _idx_payload(labels_name, labels_raw, images=False)
        if n_labels != n:
            raise DataError(f"{labels_name}: {n_labels} labels, but {name} holds {n} images")
        y = np.frombuffer(labels, dtype=np.uint8).astype(np.float64)
    p = int(np.prod(shape))
    # One pass: uint8 / float gives the float64 result directly, C-contiguous, without an astype copy.
    X = np.frombuffer(pixels, dtype=np.uint8).reshape(n, p) / 255.0
    provenance = {
        "path": name if name == STDIN else os.path.abspath(name),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "format": "idx",
        "rows": int(n),
        "features": p,
        "header": None,
        "delimiter": None,
        "target": None,
        "compressed": raw[:2] == _GZIP_MAGIC,
        "image_shape": [int(d) for d in shape],
    }
    if labels_name is not None:
        provenance.update(labels_path=os.path.abspath(labels_name),
                          labels_sha256=hashlib.sha256(labels_raw).hexdigest())
        if is_stream_path(labels_name):  # (a labels file that is a pipe cannot be read again either)
            provenance["labels_stream"] = True
    return Table(X=X, y=y, feature_names=tuple(f"px{j}" for j in range(p)), provenance=provenance)


def _looks_like_idx(raw):
    """Whether ``raw`` (decompressing just its first bytes if gzip) starts with an IDX magic number."""
    head = raw[:4]
    if raw[:2] == _GZIP_MAGIC:
        try:
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, 4)
        except zlib.error:
            return False  # the text path reports the corrupt gzip data
    return len(head) == 4 and head[:2] == b"\x00\x00" and head[2] in _IDX_TYPES and head[3] >= 1


def _idx_payload(name, raw, *, images):
    """The dimensions and the data bytes of an IDX file, validated against each other.

    ``images``: the file must hold 2 or 3 dimensions, else exactly 1 (a labels file).
    """
    expected = "images (magic 0x00000803 or 0x00000802)" if images else "labels (magic 0x00000801)"
    compressed = raw[:2] == _GZIP_MAGIC
    stream = gzip_stream(raw) if compressed else io.BytesIO(raw)
    try:
        head = _read_at_most(stream, 4)
        if len(head) < 4:
            raise DataError(f"{name}: {len(head)} bytes: too short for an IDX header")
        magic = int.from_bytes(head, "big")
        if head[:2] != b"\x00\x00" or head[2] not in _IDX_TYPES:
            raise DataError(f"{name}: not an IDX file: magic number 0x{magic:08x}, expected IDX {expected}")
        if head[2] != _IDX_UBYTE:
            raise DataError(
                f"{name}: idx files other than unsigned-byte are not supported "
                f"(data type 0x{head[2]:02x}, {_IDX_TYPES[head[2]]})"
            )
        ndim = head[3]
        if (ndim not in (2, 3)) if images else (ndim != 1):
            raise DataError(
                f"{name}: magic number 0x{magic:08x} declares {ndim} dimension{'s' * (ndim != 1)}, "
                f"expected IDX {expected}"
            )
        sizes = _read_at_most(stream, 4 * ndim)
        if len(sizes) < 4 * ndim:
            raise DataError(f"{name}: truncated IDX header ({4 + len(sizes)} of {4 + 4 * ndim} bytes)")
        dims = tuple(int.from_bytes(sizes[4 * k : 4 * k + 4], "big") for k in range(ndim))
        declared = " x ".join(str(d) for d in dims)
        if 0 in dims:
            raise DataError(f"{name}: the header declares {declared} values: the file holds no data")
        n_bytes = 1
        for d in dims:
            n_bytes *= d  # Python ints: 10^12 images do not overflow
        header = 4 + 4 * ndim
        room = gzip_limit(len(raw)) - header if compressed else n_bytes  # the most data bytes read
        data = _read_at_most(stream, min(n_bytes, room) + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{name}: corrupt gzip data ({exc})") from None
    if compressed and len(data) > room:
        raise gzip_too_large(name, len(raw))
    what = "decompressed file" if compressed else "file"
    if len(data) < n_bytes:
        raise DataError(
            f"{name}: truncated: the header declares {declared} unsigned bytes ({header + n_bytes} bytes with "
            f"the header), the {what} holds {header + len(data)}"
        )
    if len(data) > n_bytes:
        size = f"{len(raw)} bytes" if not compressed else "more"
        raise DataError(
            f"{name}: the header declares {declared} unsigned bytes ({header + n_bytes} bytes with the header), "
            f"the {what} holds {size}: trailing data"
        )
    return dims, data


def _read_at_most(stream, n):
    blocks, got = [], 0
    while got < n:
        block = stream.read(min(n - got, _IDX_BLOCK))
        if not block:
            break
        blocks.append(block)
        got += len(block)
    return b"".join(blocks)


def _labels_beside(name):
    folder, base = os.path.split(name)
    gz = base.endswith(".gz")
    stem = base[:-3] if gz else base
    if not _IDX_IMAGES_NAME.search(stem):
        raise NoLabelsFile(
            f"{name}: cannot find its labels file: the name holds no 'images-idx3' to replace by 'labels-idx1' "
            "(the labels go beside the images, named as MNIST's are: train-images-idx3-ubyte, "
            "train-labels-idx1-ubyte)"
        )
    labels = _IDX_IMAGES_NAME.sub("labels-idx1", stem, count=1)
    candidates = [labels + ".gz", labels] if gz else [labels, labels + ".gz"]
    for candidate in candidates:
        path = os.path.join(folder, candidate)
        if os.path.isfile(path):
            return path
    raise NoLabelsFile(
        f"{name}: labels file not found: expected {os.path.join(folder, candidates[0])} (or {candidates[1]}) "
        "beside the images"
    )
