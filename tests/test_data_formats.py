"""Tests of the IDX (MNIST) and Gal-UCI folder readers and of ``read_table``'s dispatch to them.

Every file is generated in ``tmp_path`` from a few bytes; the tests of the real mirror skip when it is absent,
and the one that reads the 60 000-image MNIST training file is marked slow.
"""

import gzip
import hashlib
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from slangcli.data.readers import read_idx, read_table, read_uci_folder
from slangcli.errors import DataError

REPO = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("SLANG_DATA_DIR", REPO.parent / "shared" / "datasets"))


def where(path, line=None):
    """The regex prefix of a message about ``path`` (at ``line``)."""
    return re.escape(str(path) + (f":{line}:" if line is not None else ":"))


def assert_json_provenance(table, fmt):
    provenance = json.loads(json.dumps(table.provenance))
    assert provenance == table.provenance
    assert provenance["format"] == fmt
    assert os.path.isabs(provenance["path"])
    assert provenance["rows"] == table.X.shape[0] and provenance["features"] == table.X.shape[1]
    assert table.X.dtype == np.float64 and table.X.flags.c_contiguous and np.isfinite(table.X).all()
    assert table.y.dtype == np.float64 and table.y.shape == (table.X.shape[0],)
    assert len(table.feature_names) == table.X.shape[1]


# ------------------------------------------------------------------------------------------------ IDX


def idx_bytes(array, dtype_code=0x08, dims=None):
    """An IDX file holding ``array`` (as uint8), with the header's dimensions ``dims`` (default its shape)."""
    dims = array.shape if dims is None else dims
    header = bytes([0, 0, dtype_code, len(dims)]) + b"".join(int(d).to_bytes(4, "big") for d in dims)
    return header + np.asarray(array, dtype=np.uint8).tobytes()


def write(path, content, gz=False):
    path.write_bytes(gzip.compress(content) if gz else content)
    return path


def make_idx(tmp_path, shape=(5, 3, 4), gz=False, labels_gz=None, stem="toy", seed=0):
    """Images ``shape`` (uint8) and labels 0..9 written as ``{stem}-images-idx3-ubyte`` and its labels file."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=shape, dtype=np.uint8)
    images.flat[0], images.flat[1] = 0, 255  # both ends of the scale
    labels = rng.integers(0, 10, size=shape[0], dtype=np.uint8)
    gz_labels = gz if labels_gz is None else labels_gz
    image_path = write(tmp_path / f"{stem}-images-idx3-ubyte{'.gz' * gz}", idx_bytes(images), gz)
    write(tmp_path / f"{stem}-labels-idx1-ubyte{'.gz' * gz_labels}", idx_bytes(labels), gz_labels)
    return image_path, images, labels


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("shape", [(5, 3, 4), (5, 12)], ids=["3-dim", "2-dim"])
def test_idx_round_trip(tmp_path, gz, shape):
    path, images, labels = make_idx(tmp_path, shape=shape, gz=gz)
    table = read_idx(path)
    np.testing.assert_array_equal(table.X, images.reshape(5, 12) / 255.0)
    assert table.X.min() == 0.0 and table.X.max() == 1.0
    np.testing.assert_array_equal(table.y, labels.astype(np.float64))
    assert table.feature_names == tuple(f"px{j}" for j in range(12))
    assert_json_provenance(table, "idx")
    provenance = table.provenance
    assert provenance["path"] == str(path.resolve())
    assert provenance["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert provenance["compressed"] is gz
    labels_path = tmp_path / f"toy-labels-idx1-ubyte{'.gz' * gz}"
    assert provenance["labels_path"] == str(labels_path.resolve())
    assert provenance["labels_sha256"] == hashlib.sha256(labels_path.read_bytes()).hexdigest()
    assert provenance["image_shape"] == list(shape[1:])


@pytest.mark.parametrize("gz, labels_gz", [(True, False), (False, True)])
def test_idx_labels_beside_with_the_other_compression(tmp_path, gz, labels_gz):
    path, _, labels = make_idx(tmp_path, gz=gz, labels_gz=labels_gz)
    table = read_idx(path)
    np.testing.assert_array_equal(table.y, labels)
    assert table.provenance["labels_path"].endswith("toy-labels-idx1-ubyte" + ".gz" * labels_gz)


def test_idx_labels_beside_prefers_the_same_compression(tmp_path):
    path, _, labels = make_idx(tmp_path, gz=True)
    write(tmp_path / "toy-labels-idx1-ubyte", idx_bytes(np.zeros(5)))  # a decoy, differently compressed
    np.testing.assert_array_equal(read_idx(path).y, labels)


def test_idx_explicit_labels_path(tmp_path):
    images = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    path = write(tmp_path / "pictures.idx", idx_bytes(images))
    labels = write(tmp_path / "classes.idx.gz", idx_bytes(np.array([7, 3])), gz=True)
    table = read_idx(path, labels)
    np.testing.assert_array_equal(table.y, [7.0, 3.0])
    # Without the labels file, a name that holds no "images-idx3" gives no rule to find it.
    with pytest.raises(DataError, match=where(path) + " cannot find its labels file: .*'images-idx3'"):
        read_idx(path)


def test_idx_missing_labels_file(tmp_path):
    path, _, _ = make_idx(tmp_path, gz=True)
    (tmp_path / "toy-labels-idx1-ubyte.gz").unlink()
    expected = re.escape(str(tmp_path / "toy-labels-idx1-ubyte.gz"))
    with pytest.raises(DataError, match=where(path) + f" labels file not found: expected {expected} "):
        read_idx(path)


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("cut", [1, 13], ids=["last byte", "last image and a bit"])
def test_idx_truncated(tmp_path, gz, cut):
    images = np.ones((5, 3, 4), dtype=np.uint8)
    path = write(tmp_path / "t-images-idx3-ubyte", idx_bytes(images)[:-cut], gz)
    message = rf" truncated: the header declares 5 x 3 x 4 unsigned bytes \(76 bytes with the header\), .* {76 - cut}$"
    with pytest.raises(DataError, match=where(path) + message):
        read_idx(path)


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_idx_trailing_data(tmp_path, gz):
    path = write(tmp_path / "t-images-idx3-ubyte", idx_bytes(np.ones((5, 3, 4))) + b"\x00", gz)
    with pytest.raises(DataError, match=where(path) + " the header declares 5 x 3 x 4 .*trailing data$"):
        read_idx(path)


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_idx_oversized_declared_dims_fail_before_allocating(tmp_path, gz):
    # 2**32 - 1 images of 65535 x 65535 pixels: 2.8e19 bytes, which no allocation could survive.
    dims = (2**32 - 1, 65535, 65535)
    path = write(tmp_path / "t-images-idx3-ubyte", idx_bytes(np.ones((2, 3, 4)), dims=dims), gz)
    with pytest.raises(DataError, match=where(path) + r" truncated: the header declares 4294967295 x 65535 x 65535"):
        read_idx(path)


def test_idx_wrong_magic(tmp_path):
    path = write(tmp_path / "t-images-idx3-ubyte", b"\x12\x34\x08\x03" + bytes(100))
    message = r" not an IDX file: magic number 0x12340803, expected IDX images"
    with pytest.raises(DataError, match=where(path) + message):
        read_idx(path)


def test_idx_labels_file_given_as_images_and_images_as_labels(tmp_path):
    path, _, _ = make_idx(tmp_path)
    labels = tmp_path / "toy-labels-idx1-ubyte"
    message = r" magic number 0x00000801 declares 1 dimension, expected IDX images"
    with pytest.raises(DataError, match=where(labels) + message):
        read_idx(labels, labels)
    message = r" magic number 0x00000803 declares 3 dimensions, expected IDX labels"
    with pytest.raises(DataError, match=where(path) + message):
        read_idx(path, path)


@pytest.mark.parametrize("code, name", [(0x09, "signed byte"), (0x0D, "float32"), (0x0E, "float64")])
def test_idx_unsupported_data_type(tmp_path, code, name):
    path = write(tmp_path / "t-images-idx3-ubyte", idx_bytes(np.ones((2, 2, 2)), dtype_code=code))
    message = rf" idx files other than unsigned-byte are not supported \(data type 0x{code:02x}, {name}\)$"
    with pytest.raises(DataError, match=where(path) + message):
        read_idx(path)


def test_idx_label_count_mismatch(tmp_path):
    path, _, _ = make_idx(tmp_path)
    labels = write(tmp_path / "toy-labels-idx1-ubyte", idx_bytes(np.zeros(4)))
    with pytest.raises(DataError, match=where(labels) + f" 4 labels, but {re.escape(str(path))} holds 5 images$"):
        read_idx(path)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\x00\x00", r" 2 bytes: too short for an IDX header$"),
        (b"\x00\x00\x08\x03\x00\x00\x00\x05\x00\x00", r" truncated IDX header \(10 of 16 bytes\)$"),
        (idx_bytes(np.ones((0, 3, 4))), r" the header declares 0 x 3 x 4 values: the file holds no data$"),
        (b"\x00\x00\x08\x04" + bytes(16), r" magic number 0x00000804 declares 4 dimensions"),
    ],
    ids=["short", "short header", "no images", "four dims"],
)
def test_idx_malformed_headers(tmp_path, content, message):
    path = write(tmp_path / "t-images-idx3-ubyte", content)
    with pytest.raises(DataError, match=where(path) + message):
        read_idx(path)


def test_idx_corrupt_gzip(tmp_path):
    path = tmp_path / "t-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(idx_bytes(np.ones((5, 3, 4))))[:-6])
    with pytest.raises(DataError, match=where(path) + " corrupt gzip data"):
        read_idx(path)


@pytest.mark.parametrize("declared", [4 << 20, 2**32 - 1], ids=["as declared", "declaring more"])
def test_idx_gzip_bomb_is_refused_at_the_limit(tmp_path, monkeypatch, declared):
    # 4 MiB of zero pixels compress to a few KiB: beyond 100 times that and the 1 MiB floor, whatever the header
    # declares (a header declaring more used to be read up to the actual size)
    import slangcli.data.readers._common as common

    monkeypatch.setattr(common, "GZIP_RATIO", 100)
    monkeypatch.setattr(common, "GZIP_FLOOR", 1 << 20)
    header = bytes([0, 0, 8, 2]) + declared.to_bytes(4, "big") + (1).to_bytes(4, "big")
    path = write(tmp_path / "b-images-idx3-ubyte.gz", header + bytes(4 << 20), gz=True)
    write(tmp_path / "b-labels-idx1-ubyte", idx_bytes(np.zeros(4 << 20)))
    with pytest.raises(DataError, match=where(path) + " gzip data expand to more than 1 MiB"):
        read_idx(path)


def test_idx_missing_images_file(tmp_path):
    with pytest.raises(DataError, match=where(tmp_path / "absent") + " no such file$"):
        read_idx(tmp_path / "absent")


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("fmt", ["auto", "idx", "IDX"])
def test_read_table_dispatches_to_idx(tmp_path, gz, fmt):
    path, images, labels = make_idx(tmp_path, gz=gz)
    table = read_table(path, format=fmt)
    direct = read_idx(path)
    np.testing.assert_array_equal(table.X, direct.X)
    np.testing.assert_array_equal(table.y, labels)
    assert table.provenance == direct.provenance
    assert read_table(path, n_features=12).X.shape == (5, 12)


def test_read_table_idx_options(tmp_path):
    path, _, _ = make_idx(tmp_path)
    with pytest.raises(DataError, match=where(path) + " 12 feature columns, but n_features is 10$"):
        read_table(path, n_features=10)
    with pytest.raises(DataError, match=where(path) + " the target option applies to CSV input, and this file is IDX$"):
        read_table(path, target=0)
    with pytest.raises(DataError, match=where(path) + " IDX files have no header row$"):
        read_table(path, header=True)
    labels = tmp_path / "toy-labels-idx1-ubyte"
    with pytest.raises(DataError, match=where(labels) + " magic number 0x00000801 declares 1 dimension"):
        read_table(labels)
    text = tmp_path / "data.csv"
    text.write_text("1,2,3\n")
    with pytest.raises(DataError, match=where(text) + " not an IDX file: magic number 0x312c322c"):
        read_table(text, format="idx")
    assert read_table(text).provenance["format"] == "csv"


# ------------------------------------------------------------------------------------------------ Gal-UCI

# Five columns: features 0, 1, 3 (in that order), target 2, column 4 unused (as in energy, which carries a
# second target). Whitespace is irregular on purpose: spaces, tabs, trailing blanks, a blank last line.
UCI_DATA = np.array(
    [
        [0.5, 1.0, 10.0, -2.0, 9.0],
        [1.5, 2.0, 20.0, -1.0, 9.0],
        [2.5, 3.0, 30.0, 0.0, 9.0],
        [3.5, 4.0, 40.0, 1.0, 9.0],
        [4.5, 5.0, 50.0, 2.0, 9.0],
        [5.5, 6.0, 60.0, 3.0, 9.0],
    ]
)
UCI_DATA_TEXT = (
    " 0.5  1.0 10  -2.0 9\n1.5\t2.0\t20\t-1.0\t9 \n  2.5 3.0 30.0 0 9\n"
    "3.5 4 40 1 9\n4.5 5 50 2 9\n5.5 6 60 3 9\n\n"
)
UCI_FEATURES, UCI_TARGET = [0, 1, 3], 2
UCI_SPLITS = {0: ([0, 2, 4, 5], [1, 3]), 1: ([5, 1, 0, 3], [2, 4])}


def number_lines(values, floats):
    """One number a line, as np.savetxt writes them: ``%.18e`` floats or integers."""
    return "".join((f"{v:.18e}\n" if floats else f"{v}\n") for v in values)


def make_uci(tmp_path, sub=False, floats=False):
    """A Gal-layout folder ``tmp_path/toy`` (files in ``toy/data`` when ``sub``); returns the folder."""
    folder = tmp_path / "toy"
    root = folder / "data" if sub else folder
    root.mkdir(parents=True)
    (root / "data.txt").write_text(UCI_DATA_TEXT)
    (root / "index_features.txt").write_text(number_lines(UCI_FEATURES, floats))
    (root / "index_target.txt").write_text(number_lines([UCI_TARGET], floats))
    (root / "n_splits.txt").write_text("2.0\n" if floats else "2\n")
    for k, (train, test) in UCI_SPLITS.items():
        (root / f"index_train_{k}.txt").write_text(number_lines(train, floats))
        (root / f"index_test_{k}.txt").write_text(number_lines(test, floats))
    (root / "n_epochs.txt").write_text("40\n")  # protocol files the reader ignores
    return folder


def uci_root(folder):
    return folder / "data" if (folder / "data").is_dir() else folder


@pytest.mark.parametrize("sub", [False, True], ids=["flat", "data-subfolder"])
@pytest.mark.parametrize("floats", [False, True], ids=["int-indices", "float-indices"])
@pytest.mark.parametrize("split", [0, 1])
def test_uci_round_trip(tmp_path, sub, floats, split):
    folder = make_uci(tmp_path, sub=sub, floats=floats)
    table, train, test = read_uci_folder(folder, split)
    np.testing.assert_array_equal(table.X, UCI_DATA[:, UCI_FEATURES])
    np.testing.assert_array_equal(table.y, UCI_DATA[:, UCI_TARGET])
    assert table.feature_names == ("x0", "x1", "x3")
    expected_train, expected_test = UCI_SPLITS[split]
    assert train.dtype == np.int64 and test.dtype == np.int64
    np.testing.assert_array_equal(train, expected_train)  # the files' order, not sorted
    np.testing.assert_array_equal(test, expected_test)
    assert_json_provenance(table, "uci")
    root = uci_root(folder)
    provenance = table.provenance
    assert provenance["path"] == str((root / "data.txt").resolve())
    assert provenance["folder"] == str(folder.resolve())
    assert provenance["sha256"] == hashlib.sha256((root / "data.txt").read_bytes()).hexdigest()
    assert (provenance["split"], provenance["n_splits"], provenance["target"]) == (split, 2, 2)
    assert (provenance["rows"], provenance["features"], provenance["compressed"]) == (6, 3, False)
    for name, file in (("train", f"index_train_{split}.txt"), ("test", f"index_test_{split}.txt"),
                       ("features", "index_features.txt"), ("target", "index_target.txt")):
        index_file = root / file
        assert provenance[f"{name}_index_path"] == str(index_file.resolve())
        assert provenance[f"{name}_index_sha256"] == hashlib.sha256(index_file.read_bytes()).hexdigest()


def test_uci_split_given_as_numpy_integer(tmp_path):
    _, train, _ = read_uci_folder(make_uci(tmp_path), np.int64(1))
    np.testing.assert_array_equal(train, UCI_SPLITS[1][0])


@pytest.mark.parametrize(
    "missing", ["n_splits.txt", "index_features.txt", "index_target.txt", "index_train_1.txt", "index_test_1.txt"]
)
@pytest.mark.parametrize("sub", [False, True], ids=["flat", "data-subfolder"])
def test_uci_missing_file(tmp_path, missing, sub):
    folder = make_uci(tmp_path, sub=sub)
    path = uci_root(folder) / missing
    path.unlink()
    with pytest.raises(DataError, match=where(path) + r" no such file \(a Gal-layout UCI folder needs it\)$"):
        read_uci_folder(folder, 1)


def test_uci_missing_data_txt(tmp_path):
    folder = make_uci(tmp_path)
    (folder / "data.txt").unlink()
    with pytest.raises(DataError, match=where(folder) + " not a Gal-layout UCI folder: no data.txt in it or in "):
        read_uci_folder(folder, 0)


def test_uci_not_a_folder(tmp_path):
    with pytest.raises(DataError, match=where(tmp_path / "absent") + " no such folder$"):
        read_uci_folder(tmp_path / "absent", 0)
    data = make_uci(tmp_path) / "data.txt"
    with pytest.raises(DataError, match=where(data) + " not a folder$"):
        read_uci_folder(data, 0)


@pytest.mark.parametrize("split", [2, 20, -1])
def test_uci_split_out_of_range(tmp_path, split):
    folder = make_uci(tmp_path)
    message = rf" split {split} out of range: n_splits.txt says 2 splits \(0-1\)$"
    with pytest.raises(DataError, match=where(folder) + message):
        read_uci_folder(folder, split)


@pytest.mark.parametrize("split", ["1", 1.0, True, None])
def test_uci_split_must_be_an_integer(tmp_path, split):
    folder = make_uci(tmp_path)
    with pytest.raises(DataError, match=where(folder) + " the split must be an integer"):
        read_uci_folder(folder, split)


# (file, its new content, line of the message, message after "file:line:")
UCI_INDEX_ERRORS = [
    ("index_train_0.txt", "0\n2\n6\n5\n", 3, r" row 6 out of range: data.txt has 6 rows \(0-5\)$"),
    ("index_train_0.txt", "0\n2\n6.0\n5\n", 3, r" row 6 out of range: data.txt has 6 rows \(0-5\)$"),
    ("index_test_0.txt", "1\n3\n\n4\n", 4, r" row 4 is also a training row \(index_train_0.txt line 3\)$"),
    ("index_train_0.txt", "0\n2\n4\n2\n", 4, r" row 2 repeated \(first on line 2\)$"),
    ("index_train_0.txt", "0\n2.5\n4\n", 2, r" '2.5' is not a row number \(a non-negative integer\)$"),
    ("index_train_0.txt", "0\n-1\n4\n", 2, r" '-1' is not a row number \(a non-negative integer\)$"),
    ("index_train_0.txt", "0\nnan\n4\n", 2, r" 'nan' is not a row number \(a non-negative integer\)$"),
    ("index_test_0.txt", "1\nthree\n", 2, r" cannot parse 'three' as a row number$"),
    ("index_features.txt", "0\n1\n5\n", 3, r" column 5 out of range: data.txt has 5 columns \(0-4\)$"),
    ("index_features.txt", "0\n1\n0\n", 3, r" column 0 repeated \(first on line 1\)$"),
    ("index_target.txt", "1\n", 1, r" target column 1 is also a feature \(index_features.txt line 2\)$"),
]


@pytest.mark.parametrize("name, content, line, message", UCI_INDEX_ERRORS)
def test_uci_index_errors(tmp_path, name, content, line, message):
    folder = make_uci(tmp_path)
    (folder / name).write_text(content)
    with pytest.raises(DataError, match=where(folder / name, line) + message):
        read_uci_folder(folder, 0)


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("index_target.txt", "2\n4\n", r" expected 1 number, found 2$"),
        ("n_splits.txt", "2 3\n", r" expected 1 number, found 2$"),
        ("n_splits.txt", "0\n", r" the split count must be at least 1, got 0$"),
        ("index_test_0.txt", "\n\n", r" file is empty$"),
    ],
)
def test_uci_count_errors(tmp_path, name, content, message):
    folder = make_uci(tmp_path)
    (folder / name).write_text(content)
    with pytest.raises(DataError, match=where(folder / name) + message):
        read_uci_folder(folder, 0)


@pytest.mark.parametrize(
    "line3, message",
    [
        ("2.5 3.0 abc 0 9", r"3: column 2: cannot parse 'abc' as a number$"),
        ("2.5 3.0 30 nan 9", r"3: column 3: value is NaN$"),
        ("2.5 -inf 30 0 9", r"3: column 1: value is -inf$"),
        ("2.5 3.0 30 0", r"3: expected 5 numbers, found 4$"),
        ("2.5 3.0 30 0 9 9", r"3: expected 5 numbers, found 6$"),
    ],
)
def test_uci_bad_data(tmp_path, line3, message):
    folder = make_uci(tmp_path)
    lines = UCI_DATA_TEXT.split("\n")
    lines[2] = line3
    (folder / "data.txt").write_text("\n".join(lines))
    with pytest.raises(DataError, match=re.escape(str(folder / "data.txt")) + ":" + message):
        read_uci_folder(folder, 0)


def test_uci_empty_data(tmp_path):
    folder = make_uci(tmp_path)
    (folder / "data.txt").write_text("\n")
    with pytest.raises(DataError, match=where(folder / "data.txt") + " file is empty$"):
        read_uci_folder(folder, 0)


@pytest.mark.parametrize("sub", [False, True], ids=["flat", "data-subfolder"])
def test_read_table_refuses_a_uci_folder(tmp_path, sub):
    folder = make_uci(tmp_path, sub=sub)
    hint = " is a Gal-layout UCI folder: choose a split with --uci-split K$"
    for fmt in ("auto", "csv"):
        with pytest.raises(DataError, match=where(folder) + hint):
            read_table(folder, format=fmt)
    # Its data.txt alone is still an ordinary whitespace-separated table.
    assert read_table(uci_root(folder) / "data.txt").X.shape == (6, 4)


def test_read_table_format_uci_points_to_the_split_option(tmp_path):
    folder = make_uci(tmp_path)
    for path in (folder, folder / "data.txt"):
        with pytest.raises(DataError, match=where(path) + " the uci format is read with a split: .*--uci-split K$"):
            read_table(path, format="uci")


def test_read_table_on_another_directory_is_unchanged(tmp_path):
    with pytest.raises(DataError, match=where(tmp_path) + " is a directory, not a file$"):
        read_table(tmp_path)


# ------------------------------------------------------------------------------------------------ fuzzing


def corrupt(data, rng, alphabet):
    """``data`` with 1 to 3 random byte substitutions, deletions or insertions."""
    data = bytearray(data)
    for _ in range(rng.integers(1, 4)):
        position = int(rng.integers(0, max(len(data), 1)))
        action = rng.integers(0, 3) if data else 2
        if action == 0:
            data[position] = int(rng.choice(alphabet))
        elif action == 1:
            del data[position]
        else:
            data.insert(position, int(rng.choice(alphabet)))
    return bytes(data)


def test_idx_corruptions_raise_only_data_error(tmp_path):
    """Random corruptions of valid IDX files either read or raise a one-line DataError, never anything else."""
    rng = np.random.default_rng(20240602)
    images = idx_bytes(np.arange(60, dtype=np.uint8).reshape(5, 3, 4))
    labels = idx_bytes(np.arange(5, dtype=np.uint8))
    alphabet = np.frombuffer(b"\x00\x01\x03\x05\x08\x0d\xff\x1f\x8b", dtype=np.uint8)
    for trial in range(200):
        gz = bool(trial % 2)
        image_bytes, label_bytes = images, labels
        if trial % 3:
            image_bytes = corrupt(images, rng, alphabet)
        else:
            label_bytes = corrupt(labels, rng, alphabet)
        image_path = write(tmp_path / f"f{trial}-images-idx3-ubyte", image_bytes, gz)
        label_path = write(tmp_path / f"f{trial}-labels-idx1-ubyte", label_bytes, gz)
        if gz and trial % 4 == 1:  # corrupt the compressed stream itself
            image_path.write_bytes(corrupt(image_path.read_bytes(), rng, alphabet))
        for reader in (read_idx, read_table):
            try:
                table = reader(image_path)
            except DataError as exc:
                message = str(exc)
                assert "\n" not in message, message
                assert message.startswith((str(image_path), str(label_path))), message
            else:
                assert table.X.shape == (table.y.shape[0], len(table.feature_names))
                assert np.isfinite(table.X).all()


def test_uci_corruptions_raise_only_data_error(tmp_path):
    """Random corruptions of a Gal-layout folder's files either read or raise a one-line DataError."""
    rng = np.random.default_rng(20240603)
    folder = make_uci(tmp_path)
    originals = {path.name: path.read_bytes() for path in folder.iterdir()}
    names = ["data.txt", "index_features.txt", "index_target.txt", "n_splits.txt", "index_train_0.txt",
             "index_test_0.txt"]
    alphabet = np.frombuffer(b"0123456789 \t\n.-+eEnaif#\xff\x00", dtype=np.uint8)
    for trial in range(200):
        name = names[trial % len(names)]
        path = folder / name
        path.write_bytes(corrupt(originals[name], rng, alphabet))
        try:
            table, train, test = read_uci_folder(folder, 0)
        except DataError as exc:
            message = str(exc)
            assert "\n" not in message and message.startswith(str(folder)), message
        else:
            assert np.isfinite(table.X).all() and np.isfinite(table.y).all()
            assert train.dtype == test.dtype == np.int64
            assert not np.isin(train, test).any()
            assert 0 <= min(train.min(), test.min()) and max(train.max(), test.max()) < table.X.shape[0]
        path.write_bytes(originals[name])


# ------------------------------------------------------------------------------------------------ real data


def mirror_path(relative):
    path = MIRROR / relative
    if not path.exists():
        pytest.skip(f"data mirror not found at {MIRROR} (set SLANG_DATA_DIR)")
    return path


def test_mirror_boston_housing_split_0():
    table, train, test = read_uci_folder(mirror_path("uci/bostonHousing"), 0)
    assert table.X.shape == (506, 13)
    assert (len(train), len(test)) == (455, 51)
    assert table.feature_names == tuple(f"x{j}" for j in range(13)) and table.provenance["target"] == 13
    assert table.X[0, 0] == 0.00632 and table.y[0] == 24.0  # the first row of data.txt


# folder -> (rows, features, train, test), from the mirror's README
UCI_SIZES = {
    "bostonHousing": (506, 13, 455, 51),
    "concrete": (1030, 8, 927, 103),
    "energy": (768, 8, 691, 77),
    "yacht": (308, 6, 277, 31),
}


@pytest.mark.parametrize("split", [0, 19])
@pytest.mark.parametrize("name", sorted(UCI_SIZES))
def test_mirror_uci_folders(name, split):
    table, train, test = read_uci_folder(mirror_path(f"uci/{name}"), split)
    assert_json_provenance(table, "uci")
    assert (*table.X.shape, len(train), len(test)) == UCI_SIZES[name]
    assert table.provenance["n_splits"] == 20
    np.testing.assert_array_equal(np.union1d(train, test), np.arange(table.X.shape[0]))


# The published per-digit counts of the MNIST test and training sets.
MNIST_T10K_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
MNIST_TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]


def test_mirror_mnist_t10k():
    path = mirror_path("mnist/t10k-images-idx3-ubyte.gz")
    table = read_idx(path)
    assert table.X.shape == (10000, 784)
    assert_json_provenance(table, "idx")
    assert table.X.min() == 0.0 and table.X.max() == 1.0
    np.testing.assert_array_equal(np.bincount(table.y.astype(np.int64)), MNIST_T10K_COUNTS)
    assert table.provenance["image_shape"] == [28, 28] and table.provenance["compressed"] is True
    assert read_table(path).provenance == table.provenance


@pytest.mark.slow
def test_mirror_mnist_train():
    table = read_idx(mirror_path("mnist/train-images-idx3-ubyte.gz"))
    assert table.X.shape == (60000, 784)
    np.testing.assert_array_equal(np.bincount(table.y.astype(np.int64)), MNIST_TRAIN_COUNTS)


def test_a_uci_folder_with_an_integer_target_is_a_regression(tmp_path):
    """A Gal-layout folder is the regression benchmark: the wine folder's integer quality (3-8) was fitted as a
    6-class classification unless --likelihood gaussian was given."""
    from click.testing import CliRunner

    from slangcli.cli import main
    from slangcli.runfile.io import read_run

    folder = tmp_path / "wine"
    folder.mkdir()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    quality = np.clip(np.round(5.6 + X @ [0.6, -0.4, 0.3] + 0.5 * rng.normal(size=60)), 3, 8).astype(int)
    (folder / "data.txt").write_text("".join(f"{a:.4f} {b:.4f} {c:.4f} {q}\n" for (a, b, c), q in zip(X, quality)))
    (folder / "index_features.txt").write_text("0\n1\n2\n")
    (folder / "index_target.txt").write_text("3\n")
    (folder / "n_splits.txt").write_text("1\n")
    (folder / "index_train_0.txt").write_text("".join(f"{i}\n" for i in range(45)))
    (folder / "index_test_0.txt").write_text("".join(f"{i}\n" for i in range(45, 60)))
    assert len(np.unique(quality)) > 2
    result = CliRunner().invoke(main, ["fit", str(folder), "--uci-split", "0", "--epochs", "2", "--no-progress",
                                       "-o", str(tmp_path / "run.h5")])
    assert result.exit_code == 0, result.stderr
    run = read_run(tmp_path / "run.h5")
    assert run.model.likelihood == "gaussian" and "rmse" in run.metrics["test"]
    result = CliRunner().invoke(main, ["fit", str(folder), "--uci-split", "0", "--epochs", "2", "--no-progress",
                                       "--likelihood", "categorical", "-o", str(tmp_path / "classes.h5")])
    assert result.exit_code == 0 and read_run(tmp_path / "classes.h5").model.likelihood == "categorical"


def test_predict_of_a_uci_folder_numbers_the_rows_of_data_txt(tmp_path):
    """The row column of predictions of a UCI folder's test split counted 0, 1, ... within the split, so a join
    back to data.txt on it matched other rows; it is now the split's rows of data.txt, as a file's are its data
    rows."""
    from test_cli import FAST, assert_ok, invoke

    folder = make_uci(tmp_path)
    run = tmp_path / "r.h5"
    assert_ok(invoke("fit", folder, "--uci-split", "1", "-o", run, *FAST))
    result = invoke("predict", run, folder, "-o", "-")
    assert_ok(result)
    lines = [line.split(",") for line in result.stdout.splitlines()]
    columns = {name: [row[j] for row in lines[1:]] for j, name in enumerate(lines[0])}
    test_rows = UCI_SPLITS[1][1]
    assert [int(r) for r in columns["row"]] == test_rows
    np.testing.assert_array_equal(np.array(columns["target"], dtype=float), UCI_DATA[test_rows, UCI_TARGET])


def test_predict_reads_idx_images_without_labels(tmp_path):
    """slang predict refused images without a labels file beside them ("labels file not found"), and one whose name
    holds no 'images-idx3' with advice to "give the labels file", which no option takes: new images to predict have
    no labels. They are now read alone; evaluate, which scores, still needs the labels."""
    from test_cli import assert_error, assert_ok, invoke

    train, _, _ = make_idx(tmp_path, shape=(40, 3, 4))
    run = tmp_path / "r.h5"
    assert_ok(invoke("fit", train, "-o", run, "--epochs", "2"))
    new = tmp_path / "new"
    new.mkdir()
    images = np.random.default_rng(3).integers(0, 256, size=(6, 3, 4), dtype=np.uint8)
    for name in ("toy-images-idx3-ubyte", "pictures.idx"):
        write(new / name, idx_bytes(images))
        result = invoke("predict", run, new / name, "-o", "-")
        assert_ok(result)
        lines = result.stdout.splitlines()
        assert len(lines) == 7 and "target" not in lines[0].split(",")
        assert_error(invoke("evaluate", run, new / name), 1, str(new / name), "labels file")


# ----------------------------------------------------------------------------------------- reading progress


@pytest.mark.parametrize("gz", [False, True])
def test_a_large_file_reports_its_reading_in_bytes(tmp_path, monkeypatch, gz):
    # the bytes counted are those stored (compressed or not), rising to the file's size, then None when closed;
    # a file below the threshold, and any file outside the context, reports nothing
    from slangcli.data.readers import _common, reading_progress

    rows = "\n".join(f"{i},{i % 7},{i % 2}" for i in range(40000)) + "\n"
    path = tmp_path / ("t.csv.gz" if gz else "t.csv")
    path.write_bytes(gzip.compress(rows.encode()) if gz else rows.encode())
    size = path.stat().st_size
    calls = []

    def start(name, total):
        calls.append(("start", name, total))
        return lambda done: calls.append(done)

    monkeypatch.setattr(_common, "_BLOCK", 4096)
    monkeypatch.setattr(_common, "PROGRESS_MIN_BYTES", size)
    with reading_progress(start):
        table = read_table(path)
    assert table.X.shape == (40000, 2)
    assert calls[0] == ("start", str(path), size)
    done = calls[1:-1]
    assert len(done) > 3 and done == sorted(done) and done[-1] == size and calls[-1] is None

    calls.clear()
    read_table(path)  # outside the context
    monkeypatch.setattr(_common, "PROGRESS_MIN_BYTES", size + 1)
    with reading_progress(start):
        read_table(path)  # below the threshold
    assert calls == []


def test_the_fit_bar_shows_a_file_being_read_then_removes_it():
    from slangcli.cli.output import progress_bar

    with progress_bar(True, "slang") as bar:
        report = bar.reading("data.csv", 1000)
        (task,) = bar._progress.tasks
        assert task.description == "reading data.csv" and task.total == 1000 and task.fields["bytes"]
        report(400)
        assert bar._progress.tasks[0].completed == 400
        report(None)
        assert bar._progress.tasks == []
        bar(3, 10)  # the training bar, added on its first step
        assert [t.description for t in bar._progress.tasks] == ["slang"]
    with progress_bar(False, "slang") as off:
        off.reading("data.csv", 1000)(5)  # no display: a report that does nothing


@pytest.mark.parametrize("what,tool", [("bzip2", "bunzip2"), ("xz", "unxz"), ("zip", "unzip")])
def test_a_file_compressed_otherwise_than_with_gzip_is_named_so(tmp_path, what, tool):
    """A bzip2, xz or zip file was read as text: "t.csv.bz2:1: not UTF-8 text (byte 0x8e)"."""
    import bz2
    import io
    import lzma
    import zipfile

    text = b"a,b,y\n1,2,0\n3,4,1\n"
    if what == "zip":
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("t.csv", text)
        packed = buffer.getvalue()
    else:
        packed = bz2.compress(text) if what == "bzip2" else lzma.compress(text)
    path = tmp_path / "t.csv.packed"
    path.write_bytes(packed)
    with pytest.raises(DataError, match=rf"^{path}: compressed with {what}, which slang does not read \(it reads plain "
                                        rf"text and gzip\): decompress it first \({tool}\)$"):
        read_table(path)


def test_evaluate_refuses_an_idx_test_file_whose_labels_file_changed(tmp_path):
    """A run's --test IDX file was checked by its images' sha256 alone: labels changed since the fit were scored
    by evaluate with no word, where the training files' labels were checked."""
    from click.testing import CliRunner

    from slangcli.cli import main

    train, _, _ = make_idx(tmp_path, shape=(40, 3, 3), stem="train", seed=1)
    test, _, labels = make_idx(tmp_path, shape=(20, 3, 3), stem="test", seed=2)
    run = tmp_path / "run.h5"
    done = CliRunner().invoke(main, ["fit", str(train), "--test", str(test), "--epochs", "1", "-o", str(run)])
    assert done.exit_code == 0, done.output
    labels_file = tmp_path / "test-labels-idx1-ubyte"
    write(labels_file, idx_bytes((labels + 1) % 10))
    done = CliRunner().invoke(main, ["evaluate", str(run)])
    assert done.exit_code == 1
    assert done.stderr.splitlines()[-1] == (f"slang: error: {run}: its test data {labels_file} changed since the fit "
                                            "(sha256 differs); pass the data explicitly")
