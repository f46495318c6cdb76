"""Tests of the data-input layer: CSV/LIBSVM reading, label coding, splitting, standardisation."""

import gzip
import hashlib
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

import slangcli.data.readers.text
from slangcli.data.prepare import LabelMap, Standardizer, check_width, fit_labels, prepare, train_test_split
from slangcli.data.readers import Table, read_table, sha256_file, widen
from slangcli.errors import DataError

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "datasets" / "breast_cancer_wisconsin.csv"
MIRROR = Path(os.environ.get("SLANG_DATA_DIR", REPO.parent / "shared" / "datasets"))


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


def where(path, line=None):
    """The regex prefix of a message about ``path`` (at ``line``)."""
    return re.escape(str(path) + (f":{line}:" if line is not None else ":"))


EXPECTED_X = np.array([[1.0, 2.5, -3.0], [4.0, 5.0, 6e-3]])
EXPECTED_Y = np.array([0.0, 1.0])


# ------------------------------------------------------------------------------------------------ CSV


@pytest.mark.parametrize(
    "sep, expected",
    [(",", ","), ("\t", "\t"), (";", ";"), (" ", "whitespace"), ("   ", "whitespace"), (" \t ", "\t")],
)
def test_delimiter_is_detected(tmp_path, sep, expected):
    path = write(tmp_path, "d.txt", f"1{sep}2.5{sep}-3{sep}0\n4{sep}5{sep}6e-3{sep}1\n")
    table = read_table(path)
    np.testing.assert_array_equal(table.X, EXPECTED_X)
    np.testing.assert_array_equal(table.y, EXPECTED_Y)
    assert table.provenance["delimiter"] == expected
    assert table.provenance["format"] == "csv"
    assert table.feature_names == ("x0", "x1", "x2")


@pytest.mark.parametrize("lines", [["1 2.5\t-3\t0", "4 5\t6e-3\t1"], ["1\t2.5\t-3  0", "4\t5\t6e-3  1"],
                                   ["a b\tc\ty", "1 2.5\t-3\t0", "4 5\t6e-3\t1"]])
def test_spaces_and_tabs_together_separate_cells(tmp_path, lines):
    # numbers separated by spaces inside tab-separated cells were one cell (a category of one level a row)
    path = write(tmp_path, "d.txt", "\n".join(lines) + "\n")
    table = read_table(path)
    np.testing.assert_array_equal(table.X, EXPECTED_X)
    assert table.provenance["delimiter"] == "whitespace"


@pytest.mark.parametrize("cells", [("New York", "San Jose"), ("10 cm", "12 cm")])
def test_tab_separated_text_with_spaces_keeps_its_tabs(tmp_path, cells):
    path = write(tmp_path, "d.tsv", f"place\tpop\tbig\n{cells[0]}\t8.3\tyes\n{cells[1]}\t1.0\tno\n")
    table = read_table(path, detect_categories=True)
    assert table.provenance["delimiter"] == "\t"
    assert table.feature_names == ("place", "pop")


@pytest.mark.parametrize("first, header", [
    ("0,1,2,y", True),  # DataFrame.to_csv of integer column names and a target named y
    ("0,1,2,3", True),  # ... and a target of integer name 3
    ("0,1,2,a", False),  # a row of data: its label a recurs below
    ("0,1,3,y", False),  # not the names 0..k-1
    ("1,2,3,y", False),  # 1-based names of three features: as likely a row of data
    ("2,3,4,y", False),
    ("0,1,2", False),  # two features and a target of 2: as likely a row of counts
])
def test_a_header_of_integer_column_names_is_detected(tmp_path, first, header):
    body = "".join(f"{i},{i + 1},{i + 2},{'ab'[i % 2]}\n" for i in range(5, 11))
    if first.count(",") == 2:
        body = "".join(f"{i},{i + 1},{i + 2}\n" for i in range(5, 11))
    table = read_table(write(tmp_path, "d.csv", first + "\n" + body))
    assert table.provenance["header"] is header
    assert len(table.X) == 6 + (not header)


@pytest.mark.parametrize("first, header", [
    (",0,1,2,3", True),  # pd.DataFrame(array).to_csv(): the index's empty header cell, then the columns' numbers
    (",0,1,2,y", True),
    (",0,1,3,y", False),
    ("1,2,3,4,y", True),  # 1-based names of four features (a row of names read as data made a class "y")
    ("1,2,3,4,5", False),  # ... with a target of a number: as likely a row of counts
])
def test_a_header_of_integer_column_names_after_a_pandas_index_is_detected(tmp_path, first, header):
    """The header ``DataFrame.to_csv`` writes with its index was read as a row of data, a missing index value and
    a training row of column numbers (a class "13" of one row, or a regression target of 10 among 25 to 346)."""
    body = "".join(f"{i},{0.5 * i},{i + 1.5},{i + 2.5},{'ab'[i % 2]}\n" for i in range(6))
    table = read_table(write(tmp_path, "d.csv", first + "\n" + body), missing="impute")
    assert table.provenance["header"] is header
    assert len(table.X) == 6 + (not header)


@pytest.mark.parametrize("target, says", [
    (None, "the last column, the target by default, empty; remove the trailing delimiters (sed 's/,$//') or "
           "choose the target with --target"),
    ("y", "the last column, a feature, empty; remove the trailing delimiters (sed 's/,$//') or leave it out with "
          "--drop-columns 3"),
])
def test_a_delimiter_ending_every_line_is_named(tmp_path, target, says):
    """A trailing delimiter made an empty last column, and the message was about a missing value, advising
    --missing drop, which left no row."""
    path = write(tmp_path, "d.csv", "a,b,y,\n1,2,0,\n2,3,1,\n")
    with pytest.raises(DataError, match="^" + where(path, 1) + re.escape(" every line ends with the delimiter ',', "
                                                                      "which makes " + says) + "$"):
        read_table(path, target=target)
    table = read_table(path, target="y", drop_columns=[3])  # left out, it reads
    assert table.feature_names == ("a", "b")


@pytest.mark.parametrize("cell", ["1_0", "\uff11\uff12", "\u0661\u0662"])  # 1_0, full-width 12, Arabic-Indic 12
def test_a_number_is_ascii_without_separators(tmp_path, cell):
    """Python's float reads 1_0 as 10 and full-width or Arabic-Indic digits as numbers, so a slip such as 1_5 was
    read as 15 where pandas and every other reader see text."""
    path = write(tmp_path, "d.csv", "a,b,y\n1.5,1,0\n" + f"{cell},2,1\n")
    says = re.escape(f" column 0 ('a'): cannot parse {cell!r} as a number")
    with pytest.raises(DataError, match="^" + where(path, 3) + says):
        read_table(path)
    svm = write(tmp_path, "d.svm", f"1 1:{cell} 2:1\n0 1:2\n")
    with pytest.raises(DataError, match="^" + where(svm, 1) + re.escape(f" cannot parse '1:{cell}' as index:value")):
        read_table(svm)
    svm = write(tmp_path, "i.svm", f"1 {cell}:1\n0 1:2\n")
    with pytest.raises(DataError, match="^" + where(svm, 1)):
        read_table(svm)


def test_whitespace_with_leading_and_ragged_spacing(tmp_path):
    path = write(tmp_path, "data.txt", "  1   2.5  -3   0\n 4 5      6e-3 1   \n")
    table = read_table(path)
    np.testing.assert_array_equal(table.X, EXPECTED_X)


@pytest.mark.parametrize("given, used", [(" ", "whitespace"), ("whitespace", "whitespace"), (";", ";")])
def test_delimiter_can_be_given(tmp_path, given, used):
    sep = ";" if used == ";" else "  "
    path = write(tmp_path, "d.txt", f"1{sep}2.5{sep}-3{sep}0\n4{sep}5{sep}6e-3{sep}1\n")
    table = read_table(path, delimiter=given)
    np.testing.assert_array_equal(table.X, EXPECTED_X)
    assert table.provenance["delimiter"] == used


def test_unsupported_delimiter(tmp_path):
    path = write(tmp_path, "d.csv", "1|2\n")
    with pytest.raises(DataError, match=where(path) + " unsupported delimiter '\\|'"):
        read_table(path, delimiter="|")


def test_header_is_detected(tmp_path):
    path = write(tmp_path, "h.csv", "age,height,weight,sick\n1,2.5,-3,0\n4,5,6e-3,1\n")
    table = read_table(path)
    assert table.feature_names == ("age", "height", "weight")
    assert table.provenance["header"] is True
    assert table.provenance["target"] == "sick"
    np.testing.assert_array_equal(table.X, EXPECTED_X)


def test_no_header_with_string_labels_is_not_taken_for_a_header(tmp_path):
    # The first row's only non-number sits in the target column.
    path = write(tmp_path, "s.csv", "1,2,yes\n3,4,no\n")
    table = read_table(path)
    assert table.provenance["header"] is False
    assert table.X.shape == (2, 2)
    assert table.y.tolist() == ["yes", "no"]


def test_a_first_row_of_categories_seen_again_below_is_data(tmp_path):
    """A file of categories without a header: its first row, all text, was taken for column names, and the row was
    lost to every command (the features named 'blue' and 'large', the target 'no')."""
    rows = "blue,large,no\nred,small,yes\nblue,small,no\nred,large,yes\ngreen,large,no\n"
    table = read_table(write(tmp_path, "c.csv", rows), detect_categories=True)
    assert table.provenance["header"] is False and table.provenance["rows"] == 5
    assert table.y.tolist() == ["no", "yes", "no", "yes", "no"]
    assert table.text[0].tolist() == ["blue", "red", "blue", "red", "green"]
    # names that are no value of their column are a header, as before; so is one name not seen below
    named = read_table(write(tmp_path, "n.csv", "colour,size,label\n" + rows), detect_categories=True)
    assert named.provenance["header"] is True and named.feature_names == ("colour", "size")
    partly = read_table(write(tmp_path, "p.csv", "blue,size,no\n" + rows), detect_categories=True)
    assert partly.provenance["header"] is True and partly.feature_names == ("blue", "size")
    # a target of numbers below features of categories: its value need not be seen again
    regression = "blue,large,3.2\nred,small,1.5\nblue,large,2.7\nred,small,0.4\n"
    table = read_table(write(tmp_path, "r.csv", regression), detect_categories=True)
    assert table.provenance["header"] is False and table.y.tolist() == [3.2, 1.5, 2.7, 0.4]


@pytest.mark.parametrize("line", ["#N/A,4,1", "#1,4,1", "  #x;y,4,1"])
def test_a_row_that_starts_with_a_hash_is_not_lost_as_a_comment(tmp_path, line):
    """A line whose first non-blank character is # is a comment; Excel's #N/A, or a category #1, in a row's first cell
    made the row one, and it was lost without a word (the fit, and predict's row numbers, one row short)."""
    text = f"a,b,y\n1,2,0\n{line}\n5,6,0\n"
    with pytest.raises(DataError, match=rf"^{where(tmp_path / 'h.csv', 3)} '{re.escape(line)}' starts with '#', which "
                                        r"marks a comment line, but reads as a row \(3 cells, as the rows hold\): "
                                        "quote its first cell to read it as a row, or delete the line$"):
        read_table(write(tmp_path, "h.csv", text))
    # quoted, it is a row; comments stay comments: above the rows whatever their width (numpy's savetxt header),
    # and among them when their # starts no word, or their width is not the rows'
    quoted = read_table(write(tmp_path, "q.csv", text.replace(line, '"#N/A",4,1')), missing="drop",
                        na_values=["#N/A"])
    assert quoted.provenance["rows_dropped"] == 1 and quoted.provenance["dropped_lines"] == [3]
    commented = ("# a,b,y\n1,2,0\n# x,4,1\n#note\n#x,y,label\n#m,kg,class\n#old\rmac,x\n#" + "x" * 200_000
                 + ",1,2\n5,6,0\n")
    assert read_table(write(tmp_path, "c.csv", commented)).X.tolist() == [[1.0, 2.0], [5.0, 6.0]]
    # in a file separated by whitespace, whose cells cannot be quoted, a # line is a comment whatever it holds
    spaced = read_table(write(tmp_path, "w.txt", "1 2 0\n3 4 1\n#trial 2 begins\n5 6 0\n"))
    assert spaced.X.tolist() == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]


@pytest.mark.parametrize("marker", ["?", "NA", "", "missing"])
def test_a_missing_cell_in_the_first_row_does_not_make_it_a_header(tmp_path, marker):
    # the layout of UCI's breast-cancer-wisconsin.data: no header, "?" for a missing value, possibly on line 1
    path = write(tmp_path, "q.csv", f"0.1,{marker},0.3,1\n0.5,0.2,0.1,0\n-0.3,0.4,0.9,1\n")
    na = ["missing"] if marker == "missing" else None
    table = read_table(path, missing="drop", na_values=na)
    assert table.provenance["header"] is False
    assert table.provenance["rows_dropped"] == 1 and table.provenance["dropped_lines"] == [1]
    np.testing.assert_array_equal(table.X, [[0.5, 0.2, 0.1], [-0.3, 0.4, 0.9]])
    # a header may still leave a name empty (a pandas index column's)
    named = read_table(write(tmp_path, "h.csv", ",a,b,y\n0,1,2,3\n1,4,5,6\n"), missing="drop")
    assert named.provenance["header"] is True and named.feature_names == ("", "a", "b")


def test_a_feature_name_given_twice_is_refused(tmp_path):
    # every later use matches the features by name: two columns named "a" would be told apart by nothing
    path = write(tmp_path, "dup.csv", "a,a,b,label\n1,2,3,0\n4,5,6,1\n")
    with pytest.raises(DataError, match=where(path, 1) + r" the feature name 'a' is given 2 times \(columns 0, 1\)"):
        read_table(path)
    # a name left out of the features is no feature's
    assert read_table(path, drop_columns=[1]).feature_names == ("a", "b")


def test_header_can_be_forced(tmp_path):
    path = write(tmp_path, "n.csv", "1,2,3\n4,5,6\n7,8,9\n")
    detected = read_table(path)
    assert detected.X.shape == (3, 2)
    forced = read_table(path, header=True)
    assert forced.X.shape == (2, 2)
    assert forced.feature_names == ("1", "2")
    assert forced.provenance["target"] == "3"


def test_header_can_be_refused(tmp_path):
    path = write(tmp_path, "n.csv", "a,b,c\n4,5,6\n")
    with pytest.raises(DataError, match=where(path, 1) + r" column 0: cannot parse 'a' as a number"):
        read_table(path, header=False)


@pytest.mark.parametrize(
    "target, feature_names, y",
    [
        (None, ("a", "b", "c"), [4.0, 8.0]),
        ("d", ("a", "b", "c"), [4.0, 8.0]),
        ("b", ("a", "c", "d"), [2.0, 6.0]),
        (0, ("b", "c", "d"), [1.0, 5.0]),
        (-2, ("a", "b", "d"), [3.0, 7.0]),
        ("1", ("a", "c", "d"), [2.0, 6.0]),  # a digit string that names no column is an index
    ],
)
def test_target_column(tmp_path, target, feature_names, y):
    path = write(tmp_path, "t.csv", "a,b,c,d\n1,2,3,4\n5,6,7,8\n")
    table = read_table(path, target=target)
    assert table.feature_names == feature_names
    np.testing.assert_array_equal(table.y, y)
    assert table.X.shape == (2, 3)
    assert table.X.flags.c_contiguous


def test_digit_string_target_that_is_a_header_name(tmp_path):
    path = write(tmp_path, "t.csv", "0,1,2\n1,2,3\n5,6,7\n")
    table = read_table(path, target="1", header=True)
    np.testing.assert_array_equal(table.y, [2.0, 6.0])
    assert table.feature_names == ("0", "2")


def test_target_index_without_header(tmp_path):
    path = write(tmp_path, "t.csv", "1,2,3\n4,5,6\n")
    table = read_table(path, target=0)
    np.testing.assert_array_equal(table.y, [1.0, 4.0])
    assert table.feature_names == ("x1", "x2")  # named by their file columns, as every message numbers them
    assert table.provenance["target"] == 0


def test_string_labels_in_a_middle_column(tmp_path):
    path = write(tmp_path, "s.csv", "x,diagnosis,z\n1,malignant,2\n3, benign ,4\n")
    table = read_table(path, target="diagnosis")
    assert table.y.dtype.kind == "U"
    assert table.y.tolist() == ["malignant", "benign"]
    np.testing.assert_array_equal(table.X, [[1.0, 2.0], [3.0, 4.0]])


def test_quoted_cells(tmp_path):
    path = write(tmp_path, "q.csv", '"a","b","label"\n"1","2","yes, really"\n3,4,no\n')
    table = read_table(path)
    assert table.feature_names == ("a", "b")
    assert table.y.tolist() == ["yes, really", "no"]


def test_quoted_cell_spanning_lines_keeps_later_line_numbers(tmp_path):
    path = write(tmp_path, "q.csv", 'a,b,note\n1,2,"two\nlines"\n3,x,ok\n')
    with pytest.raises(DataError, match=where(path, 4) + r" column 1 \('b'\): cannot parse 'x' as a number$"):
        read_table(path)
    table = read_table(write(tmp_path, "ok.csv", 'a,b,note\n1,2,"two\nlines"\n3,4,ok\n'))
    assert table.y.tolist() == ["two\nlines", "ok"]


@pytest.mark.parametrize(
    "text, line, message",
    [
        ('a,b,y\n1,2,"unterminated\n3,4,5\n', 2, r"unterminated quoted cell$"),
        ('a,b,y\n1,2,3\n4,"5"6,7\n', 3, r"',' expected after '\"'$"),
        ("a,b,y\n1,2\r3,4\n", 2, r"stray carriage return"),
        # (Python's csv module said "field larger than field limit (131072)")
        ('a,b,y\n1,2,3\n4,5,"' + "x" * 200_000 + '"\n', 3, r"a cell of more than 131,072 characters"),
    ],
)
def test_csv_syntax_errors(tmp_path, text, line, message):
    path = write(tmp_path, "data.csv", text)
    with pytest.raises(DataError, match=where(path, line) + " " + message):
        read_table(path)


def test_comments_blank_lines_crlf_and_bom(tmp_path):
    text = "\ufeff# a comment\r\n\r\na,b,y\r\n1,2,0\r\n   \r\n# another\r\n3,4,1\r\n"
    table = read_table(write(tmp_path, "c.csv", text))
    assert table.feature_names == ("a", "b")
    np.testing.assert_array_equal(table.X, [[1.0, 2.0], [3.0, 4.0]])


def test_gzip_is_detected_by_magic_bytes(tmp_path):
    plain = "a,b,y\n1,2,0\n3,4,1\n"
    packed = gzip.compress(plain.encode())
    for name in ("d.csv.gz", "d.csv"):
        path = write(tmp_path, name, packed)
        table = read_table(path)
        np.testing.assert_array_equal(table.X, [[1.0, 2.0], [3.0, 4.0]])
        assert table.provenance["compressed"] is True
        assert table.provenance["sha256"] == hashlib.sha256(packed).hexdigest()


def test_provenance_is_json_serialisable(tmp_path):
    path = write(tmp_path, "p.csv", "a,b,y\n1,2,0\n3,4,1\n")
    table = read_table(path)
    assert json.loads(json.dumps(table.provenance)) == {
        "path": str(path.resolve()),
        "sha256": sha256_file(path),
        "format": "csv",
        "rows": 2,
        "features": 2,
        "header": True,
        "delimiter": ",",
        "target": "y",
        "compressed": False,
    }


# ------------------------------------------------------------------------------------------------ CSV errors


def test_unparsable_cell_names_line_column_and_header_name(tmp_path):
    path = write(tmp_path, "data.csv", "id,x1,age,y\n# note\n1,2,3,0\n\n4,5,abc,1\n")
    with pytest.raises(DataError, match=where(path, 5) + r" column 2 \('age'\): cannot parse 'abc' as a number$"):
        read_table(path)


def test_unparsable_cell_without_header(tmp_path):
    path = write(tmp_path, "data.csv", "1,2,3,0\n4,5,abc,1\n")
    with pytest.raises(DataError, match=where(path, 2) + r" column 2: cannot parse 'abc' as a number$"):
        read_table(path)


def test_empty_cell(tmp_path):
    path = write(tmp_path, "data.csv", "a,b,y\n1,2,0\n3,,1\n")
    with pytest.raises(DataError, match=where(path, 3) + r" column 1 \('b'\): empty cell, a missing value \(the only row with a missing value; --missing drop leaves such rows out, --missing impute fills such cells in\)$"):
        read_table(path)


def test_columns_of_text_and_missing_values_kept(tmp_path):
    """Columns of text read as such (``categorical``, ``detect_categories``): their cells stripped, "" where
    missing, the line of each row kept; with ``missing="impute"`` a missing number is NaN and a row without its
    target kept, counted in the provenance."""
    path = write(tmp_path, "data.csv", "a,colour,smoker,y\n1, red ,yes,0\n2,NA,no,NA\n3,blue,NA,1\n\n4,red,no,0\n")
    table = read_table(path, missing="impute", detect_categories=True, na_values=["NA"])
    np.testing.assert_array_equal(table.X[:, 0], [1, 2, 3, 4])
    assert np.isnan(table.X[:, 1:]).all()
    assert list(table.text[1]) == ["red", "", "blue", "red"] and list(table.text[2]) == ["yes", "no", "", "no"]
    assert list(table.lines) == [2, 3, 4, 6] and table.columns == [0, 1, 2] and table.target_column == 3
    assert np.isnan(table.y[1]) and table.provenance["targets_missing"] == 1
    assert table.provenance["target_missing_lines"] == [3]
    # without detection every feature is a number, as always; named, a column of numbers is text too
    with pytest.raises(DataError, match=where(path, 2) + r" column 1 \('colour'\): cannot parse 'red' as a number$"):
        read_table(path, missing="impute", na_values=["NA"])
    table = read_table(path, missing="drop", categorical="a,colour,smoker", na_values=["NA"])
    assert list(table.text[0]) == ["1", "4"] and table.provenance["rows_dropped"] == 2


def test_empty_target_cell(tmp_path):
    path = write(tmp_path, "data.csv", "a,b,y\n1,2,yes\n3,4,\n")
    with pytest.raises(DataError, match=where(path, 3) + r" column 2 \('y'\): empty cell, a missing value"):
        read_table(path)


def test_wrong_cell_count(tmp_path):
    path = write(tmp_path, "data.csv", "a,b,c,d,e\n" + "1,2,3,4,5\n" * 5 + "1,2,3,4\n")
    with pytest.raises(DataError, match=where(path, 7) + r" expected 5 cells, found 4$"):
        read_table(path)


@pytest.mark.parametrize("word, shown", [("nan", r"NaN \(not a missing-value token: --na-values names those\)"),
                                         ("inf", "inf"), ("-Infinity", "-inf")])
def test_non_finite_feature(tmp_path, word, shown):
    path = write(tmp_path, "data.csv", "x0,x1,y\n" + "1,2,0\n" * 7 + f"1,{word},0\n")
    with pytest.raises(DataError, match=where(path, 9) + rf" column 1 \('x1'\): value is {shown}$"):
        read_table(path)


def test_a_number_with_a_decimal_comma_is_named_as_such(tmp_path):
    path = write(tmp_path, "data.csv", "a;b;y\n1,5;2;0\n5;6;0\n")
    with pytest.raises(DataError, match=where(path, 2) + r" column 0 \('a'\): cannot parse '1,5' as a number: a "
                                        r"decimal comma or a thousands separator, which slang does not read \(write "
                                        r"'1\.5' or '15'\)$"):
        read_table(path)


def test_non_finite_target(tmp_path):
    path = write(tmp_path, "data.csv", "1,2,0\n1,2,nan\n")
    with pytest.raises(DataError, match=where(path, 2) + r" column 2: value is NaN \(not a missing-value token: "
                                        r"--na-values names those\)$"):
        read_table(path)


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n  \n"])
def test_empty_file(tmp_path, text):
    path = write(tmp_path, "data.csv", text)
    with pytest.raises(DataError, match=where(path) + " file is empty$"):
        read_table(path)


def test_only_a_header(tmp_path):
    path = write(tmp_path, "data.csv", "a,b,c\n")
    with pytest.raises(DataError, match=where(path) + " no data rows"):
        read_table(path)


def test_single_column(tmp_path):
    path = write(tmp_path, "data.csv", "a\nb\n")
    with pytest.raises(DataError, match=where(path, 1) + " one column found"):
        read_table(path, format="csv")


def test_target_name_not_found(tmp_path):
    path = write(tmp_path, "data.csv", "a,b,c\n1,2,3\n")
    with pytest.raises(DataError, match=where(path) + r" target column 'foo' not found \(columns: a, b, c\)$"):
        read_table(path, target="foo")


def test_target_name_without_header(tmp_path):
    path = write(tmp_path, "data.csv", "1,2,3\n4,5,6\n")
    with pytest.raises(DataError, match=where(path) + r" target column 'foo' not found: the file has no header"):
        read_table(path, target="foo")


@pytest.mark.parametrize("target", [9, -6, "9"])
def test_target_index_out_of_range(tmp_path, target):
    path = write(tmp_path, "data.csv", "1,2,3,4,5\n")
    with pytest.raises(DataError, match=where(path) + rf" target column index {target} out of range \(5 columns\)$"):
        read_table(path, target=target)


def test_binary_garbage(tmp_path):
    path = write(tmp_path, "data.csv", b"1,2,3\n4,5,6\n\xff\xfe\x00\x81garbage\n")
    with pytest.raises(DataError, match=where(path, 3) + " not UTF-8 text"):
        read_table(path)


def test_nul_bytes(tmp_path):
    path = write(tmp_path, "data.csv", b"1,2,3\n4\x005,6\n")
    with pytest.raises(DataError, match=where(path, 2) + " NUL byte"):
        read_table(path)


def test_missing_file(tmp_path):
    path = tmp_path / "absent.csv"
    with pytest.raises(DataError, match=where(path) + " no such file$"):
        read_table(path)


def test_directory(tmp_path):
    with pytest.raises(DataError, match=where(tmp_path) + " is a directory"):
        read_table(tmp_path)


@pytest.mark.parametrize("cut", [10, -4])
def test_corrupt_gzip(tmp_path, cut):
    packed = gzip.compress(b"1,2,3\n" * 100)
    broken = packed[:cut] if cut > 0 else packed[:cut] + b"\x00\x00\x00\x00"
    path = write(tmp_path, "data.csv.gz", broken)
    with pytest.raises(DataError, match=where(path) + " corrupt gzip data"):
        read_table(path)


@pytest.fixture
def small_gzip_limit(monkeypatch):
    """gzip data may expand to 100 times their size, and at least 1 MiB (instead of 1000 times and 1 GiB)."""
    import slangcli.data.readers._common as common

    monkeypatch.setattr(common, "GZIP_RATIO", 100)
    monkeypatch.setattr(common, "GZIP_FLOOR", 1 << 20)


@pytest.mark.parametrize("content", [b"\n", b"1,2,0\n"], ids=["blank lines", "data lines"])
def test_gzip_bomb_is_refused_naming_the_file_and_the_limit(tmp_path, small_gzip_limit, content):
    # 4 MiB of repeated lines compress to a few KiB: far beyond 100 times, and beyond the 1 MiB floor
    path = write(tmp_path, "bomb.csv.gz", gzip.compress(content * ((4 << 20) // len(content)), mtime=0))
    with pytest.raises(DataError, match=where(path) + r" gzip data expand to more than 1 MiB, the most slang "
                       r"decompresses from [\d.]+ KiB \(the larger of 100 times the compressed size and 1 MiB\)$"):
        read_table(path)


def test_gzip_within_the_limit_is_read(tmp_path, small_gzip_limit):
    text = "a,b,y\n" + "1,2,0\n3,4,1\n" * 40000  # 480 KB below the 1 MiB floor
    table = read_table(write(tmp_path, "ok.csv.gz", gzip.compress(text.encode(), mtime=0)))
    assert table.X.shape == (80000, 2)


def _lines_at_once(raw):
    """The content lines of ``raw`` decoded and split in one piece (the reader before it read in blocks)."""
    text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8-sig")
    kept = [(k, line.rstrip("\r")) for k, line in enumerate(text.split("\n"), 1)
            if line.strip() and not line.strip().startswith("#")]
    return [k for k, _ in kept], [t for _, t in kept]


@pytest.mark.parametrize("block", [1, 2, 3, 7, 64, 1 << 20])
def test_lines_read_in_blocks_are_the_lines_of_the_whole_file(monkeypatch, block):
    import slangcli.data.readers._common as common

    monkeypatch.setattr(common, "_BLOCK", block)
    rng = np.random.default_rng(block)
    pieces = ["", " ", "\t", "\r", "#c", " # c", "1,2", "a b", "\u00e9\u00e8", "\u20ac", "\u00a0", "x\ry", "\n\n\n"]
    for _ in range(20):
        lines = rng.choice(pieces, size=rng.integers(1, 40))
        raw = ("\ufeff" * int(rng.integers(2)) + "\n".join(lines)).encode("utf-8")
        for data in (raw, gzip.compress(raw, mtime=0)):
            assert common._text_lines(data, "f") == _lines_at_once(data), raw
    # a multi-byte character, a bad byte and a NUL are found on their line whatever the block boundaries
    with pytest.raises(DataError, match="^f:4: not UTF-8 text \\(byte 0xff\\)$"):
        common._text_lines("a\n\u20ac\n\n".encode() + b"b\xff\n", "f")
    with pytest.raises(DataError, match="^f:3: NUL byte"):
        common._text_lines(gzip.compress(b"a\n\n\x00"), "f")


def test_unknown_format(tmp_path):
    path = write(tmp_path, "data.csv", "1,2\n")
    with pytest.raises(DataError, match=where(path) + " unknown format 'arff'"):
        read_table(path, format="arff")


# ------------------------------------------------------------------------------------------------ LIBSVM

LIBSVM_TEXT = """\
# written by hand
+1 1:0.5 3:-2 # trailing comment

-1 2:1e-3 4:7
1
-1 1:1 4:0
"""


def test_libsvm_is_parsed_densely(tmp_path):
    path = write(tmp_path, "train.svm", LIBSVM_TEXT)
    table = read_table(path)
    expected = np.array([[0.5, 0.0, -2.0, 0.0], [0.0, 1e-3, 0.0, 7.0], [0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(table.X, expected)
    np.testing.assert_array_equal(table.y, [1.0, -1.0, 1.0, -1.0])
    assert table.feature_names == ("f1", "f2", "f3", "f4")
    assert table.X.flags.c_contiguous and table.X.dtype == np.float64
    prov = table.provenance
    assert (prov["format"], prov["rows"], prov["features"]) == ("libsvm", 4, 4)
    assert (prov["header"], prov["delimiter"], prov["target"]) == (None, None, None)


def test_libsvm_n_features_sets_the_width(tmp_path):
    path = write(tmp_path, "train.svm", LIBSVM_TEXT)
    table = read_table(path, n_features=6, format="libsvm")
    assert table.X.shape == (4, 6)
    assert table.feature_names[-1] == "f6"
    np.testing.assert_array_equal(table.X[:, 4:], 0.0)


def test_libsvm_gzip(tmp_path):
    path = write(tmp_path, "train.svm.gz", gzip.compress(LIBSVM_TEXT.encode()))
    assert read_table(path).X.shape == (4, 4)


def test_libsvm_rejects_csv_options(tmp_path):
    path = write(tmp_path, "train.svm", LIBSVM_TEXT)
    with pytest.raises(DataError, match=where(path) + " the target option applies to CSV input"):
        read_table(path, target=0)


def test_widen_pads_zero_columns(tmp_path):
    table = read_table(write(tmp_path, "train.svm", LIBSVM_TEXT))
    wide = widen(table, 7)
    assert wide.X.shape == (4, 7)
    np.testing.assert_array_equal(wide.X[:, :4], table.X)
    np.testing.assert_array_equal(wide.X[:, 4:], 0.0)
    assert wide.feature_names == ("f1", "f2", "f3", "f4", "f5", "f6", "f7")
    assert wide.provenance["features"] == 7 and wide.provenance["widened_from"] == 4
    assert table.X.shape == (4, 4)  # the original is untouched
    assert widen(table, 4) is table


def test_widen_refuses_to_narrow(tmp_path):
    table = read_table(write(tmp_path, "train.svm", LIBSVM_TEXT))
    with pytest.raises(DataError, match="4 feature columns, but the model was trained on 3"):
        widen(table, 3)


def test_widen_refuses_csv(tmp_path):
    table = read_table(write(tmp_path, "d.csv", "1,2,0\n3,4,1\n"))
    with pytest.raises(DataError, match="only LIBSVM data can be padded"):
        widen(table, 5)


# ------------------------------------------------------------------------------------------------ LIBSVM errors


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ("1 5:1 3:2", r"feature index 3 after 5: indices must be strictly increasing$"),
        ("1 2:1 2:2", r"feature index 2 after 2: indices must be strictly increasing$"),
        ("1 0:1 3:2", r"feature index 0: indices are 1-based$"),
        ("1 -3:1", r"feature index -3: indices are 1-based$"),
        ("1 x:1", r"cannot parse 'x:1' as index:value$"),
        ("1 3:abc", r"cannot parse '3:abc' as index:value$"),
        ("1 3", r"cannot parse '3' as index:value$"),
        ("1 3:", r"cannot parse '3:' as index:value$"),
        ("1 1:2:3 4", r"cannot parse '1:2:3' as index:value$"),
        ("1 2.5:1", r"cannot parse '2.5:1' as index:value$"),
        ("1 qid:3 1:2", r"'qid:3': query ids \(qid:\) mark ranking data"),
        ("1 1:nan", r"feature index 1: value is NaN$"),
        ("1 1:2 3:inf", r"feature index 3: value is inf$"),
        ("1 1:-inf", r"feature index 1: value is -inf$"),
        ("3:1 4:1", r"missing label \(the line starts with '3:1'\)$"),
        ("abc 4:1", r"cannot parse label 'abc' as a number$"),
        ("nan 4:1", r"label is NaN$"),
    ],
)
def test_libsvm_errors_name_the_line(tmp_path, bad_line, message):
    path = write(tmp_path, "train.svm", f"# header comment\n-1 1:1 2:1\n\n{bad_line}\n+1 1:1\n")
    with pytest.raises(DataError, match=where(path, 4) + " " + message):
        read_table(path, format="libsvm")


@pytest.mark.parametrize("first", ["1:0.5 2:0.3", "3:1", "  2:-1e-3 7:4 # no label"])
def test_a_libsvm_file_whose_first_line_lacks_its_label_is_recognised_as_libsvm(tmp_path, first):
    # it was read as CSV, split at runs of whitespace: "expected 2 cells, found 3" on the next line
    path = write(tmp_path, "train.svm", f"\n{first}\n-1 1:1 2:1\n+1 2:1\n")
    token = first.split()[0]
    with pytest.raises(DataError, match=where(path, 2) + rf" missing label \(the line starts with '{token}'\)$"):
        read_table(path)


@pytest.mark.parametrize("text", ["12:30 13:45 1\n09:15 10:00 0\n", "t1 t2 y\n12:30 13:45 1\n",
                                  "1:2,3:4,0\n5:6,7:8,1\n"])
def test_colons_in_csv_cells_do_not_make_a_libsvm_file(tmp_path, text):
    path = write(tmp_path, "times.txt", text)
    with pytest.raises(DataError, match=where(path) + r"\d+: column 0 .*cannot parse '\d+:\d+' as a number$"):
        read_table(path)


def test_libsvm_index_above_n_features(tmp_path):
    path = write(tmp_path, "train.svm", "-1 1:1\n+1 2:1\n-1 7:1\n+1 3:1 130:1\n")
    with pytest.raises(DataError, match=where(path, 4) + r" feature index 130 exceeds --n-features 123$"):
        read_table(path, n_features=123)


def test_libsvm_width_far_beyond_the_file_is_refused_before_allocating(tmp_path, monkeypatch):
    # found by test_fuzz.py: from 25 bytes, a 2 x 20 000 000 table (305 MiB) and 20 million column names
    # (about 1.4 GB) were built; at index 10^9 the process exhausted the machine's memory
    path = write(tmp_path, "train.svm", "-1 1:1\n+1 2:1 20000000:1\n")
    message = (r" feature index 20000000 would make a 2 x 20000000 table \(about 1,526 MiB: slang holds LIBSVM data "
               r"dense\) from 25 bytes of text")
    with pytest.raises(DataError, match=where(path, 2) + message + ": give --n-features if that width is intended$"):
        read_table(path)
    wide = read_table(write(tmp_path, "wide.svm", "-1 1:1\n+1 2:1 200000:1\n"))  # 16 MB: an ordinary width
    assert wide.X.shape == (2, 200000)
    # a width the caller declares is taken as intended (shown at a small scale)
    monkeypatch.setattr(slangcli.data.readers.text, "_DENSE_FLOOR", 0)
    monkeypatch.setattr(slangcli.data.readers.text, "_DENSE_RATIO", 1)
    small = write(tmp_path, "small.svm", "-1 1:1\n+1 2:1 300:1\n")
    with pytest.raises(DataError, match="feature index 300 would make a 2 x 300 table"):
        read_table(small)
    assert read_table(small, n_features=300).X.shape == (2, 300)
    # a declared width beyond memory says so, with the size and that the table is dense (it gave no size)
    monkeypatch.setattr(np, "zeros", lambda *a, **k: (_ for _ in ()).throw(MemoryError()))
    with pytest.raises(DataError, match=r"a dense 2 x 300 table \(about 4\.47e-06 GiB; slang holds LIBSVM data "
                                        r"dense\) does not fit in memory \(highest feature index 300\): fewer rows"):
        read_table(small, n_features=300)


def test_libsvm_reports_the_earliest_line_among_checks(tmp_path):
    path = write(tmp_path, "train.svm", "-1 1:1\n+1 1:nan\n-1 3:1 2:1\n")
    with pytest.raises(DataError, match=where(path, 2) + " feature index 1: value is NaN"):
        read_table(path)


def test_libsvm_only_labels(tmp_path):
    path = write(tmp_path, "train.svm", "1\n-1\n")
    with pytest.raises(DataError, match=where(path) + " no features"):
        read_table(path)


def test_auto_detection_prefers_csv_for_plain_rows(tmp_path):
    assert read_table(write(tmp_path, "a.txt", "1 2 3\n4 5 6\n")).provenance["format"] == "csv"
    assert read_table(write(tmp_path, "b.txt", "1 2:3\n4 5:6\n")).provenance["format"] == "libsvm"


def test_no_other_exception_type_escapes(tmp_path):
    """Random corruptions of valid files either read or raise DataError, never anything else."""
    rng = np.random.default_rng(20240601)
    sources = [
        b"a,b,y\n1,2.5,yes\n3,4,no\n5,6,yes\n",
        b"1\t2\t0\n3\t4\t1\n",
        LIBSVM_TEXT.encode(),
        gzip.compress(b"a;b;y\n1;2;0\n3;4;1\n"),
    ]
    alphabet = np.frombuffer(b'0123456789,;:\t\n #"-+.eExnaif\xff\x00\x1f\x8b', dtype=np.uint8)
    for trial in range(400):
        data = bytearray(sources[trial % len(sources)])
        for _ in range(rng.integers(1, 4)):
            position = int(rng.integers(0, len(data)))
            action = rng.integers(0, 3)
            if action == 0:
                data[position] = int(rng.choice(alphabet))
            elif action == 1:
                del data[position]
            else:
                data.insert(position, int(rng.choice(alphabet)))
        path = write(tmp_path, f"fuzz{trial}", bytes(data))
        try:
            table = read_table(path)
        except DataError as exc:
            message = str(exc)
            assert "\n" not in message and message.startswith(str(path)), message
        else:
            assert isinstance(table, Table)
            assert np.isfinite(table.X).all()
            assert table.X.shape == (table.y.shape[0], len(table.feature_names))


# ------------------------------------------------------------------------------------------------ labels


@pytest.mark.parametrize(
    "values, classes, codes",
    [
        ([1.0, -1.0, -1.0, 1.0], (-1.0, 1.0), [1, 0, 0, 1]),
        ([0.0, 1.0, 1.0], (0.0, 1.0), [0, 1, 1]),
        ([4.0, 2.0, 4.0], (2.0, 4.0), [1, 0, 1]),
        (["malignant", "benign", "benign"], ("benign", "malignant"), [1, 0, 0]),
    ],
)
def test_fit_labels_sorts_classes(values, classes, codes):
    label_map = fit_labels(np.array(values), path="d.csv", n_classes=2)
    assert label_map.classes == classes
    encoded = label_map.encode(np.array(values), path="d.csv")
    assert encoded.dtype == np.int64
    np.testing.assert_array_equal(encoded, codes)
    np.testing.assert_array_equal(label_map.decode(encoded), values)
    assert json.loads(json.dumps(list(label_map.classes))) == list(classes)


def test_fit_labels_multiclass_and_non_integer_values():
    label_map = fit_labels(np.array([0.5, 0.25, 3.0, 0.5]), path="d.csv")
    assert label_map.classes == (0.25, 0.5, 3.0)
    with pytest.raises(DataError, match=r"label '0.3' not seen"):
        label_map.encode(np.array([0.5, 0.3]), path="t.csv")


def test_fit_labels_binary_needs_two_values():
    with pytest.raises(DataError, match=r"^d\.csv: a binary model needs exactly 2 label values, found 3: 1, 2, 3$"):
        fit_labels(np.array([1.0, 2.0, 3.0, 2.0]), path="d.csv", n_classes=2)
    with pytest.raises(DataError, match=r"^d\.csv: a binary model needs exactly 2 label values, found 1: yes$"):
        fit_labels(np.array(["yes", "yes"]), path="d.csv", n_classes=2)
    with pytest.raises(DataError, match=r"^d\.csv: need at least 2 label values, found 1: 7$"):
        fit_labels(np.array([7.0]), path="d.csv")


def test_encode_unknown_label_names_the_row():
    label_map = fit_labels(np.array([-1.0, 1.0]), path="train.svm", n_classes=2)
    expected = r"^test\.svm: row 2: label '7' not seen in training data \(known: -1, 1\)$"  # (0-based)
    with pytest.raises(DataError, match=expected):
        label_map.encode(np.array([1.0, -1.0, 7.0, 9.0]), path="test.svm")
    strings = fit_labels(np.array(["benign", "malignant"]), path="d.csv")
    with pytest.raises(DataError, match=r"^t\.csv:6: label 'maybe' not seen .*\(known: benign, malignant\)"):
        strings.encode(np.array(["benign", "maybe"]), path="t.csv", where=lambda i: f"t.csv:{5 + i}")


def test_encode_matches_numbers_written_as_strings():
    label_map = fit_labels(np.array([0.0, 1.0]), path="d.csv")
    np.testing.assert_array_equal(label_map.encode(np.array(["1", "0"]), path="t.csv"), [1, 0])
    with pytest.raises(DataError, match="row 0: label 'one' not seen"):
        label_map.encode(np.array(["one", "0"]), path="t.csv")


def test_label_map_from_json_list():
    label_map = LabelMap([-1, 1])
    assert label_map.classes == (-1.0, 1.0)
    np.testing.assert_array_equal(label_map.encode(np.array([1.0, -1.0]), path="x"), [1, 0])


# ------------------------------------------------------------------------------------------------ split, scaling


def test_split_is_deterministic_disjoint_and_complete():
    train, test = train_test_split(101, 0.2, seed=3)
    again_train, again_test = train_test_split(101, 0.2, seed=3)
    np.testing.assert_array_equal(train, again_train)
    np.testing.assert_array_equal(test, again_test)
    assert train.dtype == np.int64 and test.dtype == np.int64
    assert len(test) == round(0.2 * 101) and len(train) == 101 - len(test)
    assert np.all(np.diff(train) > 0) and np.all(np.diff(test) > 0)
    assert np.intersect1d(train, test).size == 0
    np.testing.assert_array_equal(np.union1d(train, test), np.arange(101))
    other_train, _ = train_test_split(101, 0.2, seed=4)
    assert not np.array_equal(train, other_train)


@pytest.mark.parametrize("n, fraction", [(3, 0.1), (3, 0.9), (1, 0.5), (10, 0.0), (10, 1.0)])
def test_split_keeps_a_row_on_each_side(n, fraction):
    with pytest.raises(DataError):
        train_test_split(n, fraction, seed=0)


def test_standardizer():
    X = np.array([[1.0, 0.1, -2.0], [3.0, 0.1, 2.0], [5.0, 0.1, 0.0]])
    scaler = Standardizer.fit(X)
    np.testing.assert_allclose(scaler.mean, [3.0, 0.1, 0.0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(scaler.scale, [np.sqrt(8 / 3), 1.0, np.sqrt(8 / 3)], rtol=1e-15, atol=0)
    Z = scaler.apply(X)
    np.testing.assert_allclose(Z.mean(axis=0), 0.0, rtol=0, atol=1e-15)
    np.testing.assert_allclose(Z[:, [0, 2]].std(axis=0), 1.0, rtol=1e-14, atol=0)
    np.testing.assert_array_equal(Z[:, 1], 0.0)  # the constant column maps to exactly 0
    np.testing.assert_allclose(scaler.apply([[3.0, 1.1, 0.0]]), [[0.0, 1.0, 0.0]], rtol=0, atol=1e-15)
    with pytest.raises(DataError, match="fitted on 3 features"):
        scaler.apply(np.zeros((2, 4)))


@pytest.mark.parametrize("power", [300, -300, 0])
def test_standardizer_of_features_of_any_magnitude(power):
    """Features near 1e300 (whose squares overflow) and near 1e-300 (whose squares underflow to 0) get finite,
    positive scales and standardise to the values of the same features near 1; features of ordinary magnitude get
    bit for bit the plain mean and standard deviation."""
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((50, 3)) * [1.0, 3.0, 0.5] + [0.0, 2.0, -1.0]
    X = Z * 10.0**power
    scaler, plain = Standardizer.fit(X), Standardizer.fit(Z)
    assert np.isfinite(scaler.scale).all() and (scaler.scale > 0).all()
    np.testing.assert_allclose(scaler.scale, plain.scale * 10.0**power, rtol=1e-12)
    np.testing.assert_allclose(scaler.mean, plain.mean * 10.0**power, rtol=1e-12)
    np.testing.assert_allclose(scaler.apply(X), plain.apply(Z), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(plain.mean, Z.mean(axis=0))
    np.testing.assert_array_equal(plain.scale, Z.std(axis=0))


def test_standardizer_near_the_float64_limit():
    """Columns whose range, sum or difference from the mean would overflow: a constant one and one of +-1.7e308."""
    edge = Standardizer.fit(np.array([[1.7e308, -1.7e308], [1.7e308, 1.7e308]]))
    np.testing.assert_array_equal(edge.mean, [1.7e308, 0.0])
    np.testing.assert_array_equal(edge.scale, [1.0, 1.7e308])
    np.testing.assert_array_equal(edge.apply([[1.7e308, -1.7e308]]), [[0.0, -1.0]])


def test_standardised_values_beyond_float64_are_refused_naming_the_row():
    scaler = Standardizer.fit(np.array([[1e-300, 1.0], [3e-300, 2.0]]))
    with pytest.raises(DataError, match=r"^new\.csv: data row 2, feature 0 \(0-based\): 1e\+300 overflows float64 "
                                        r"once standardised with the fit's mean 2e-300 and scale 1e-300$"):
        scaler.apply(np.array([[2e-300, 1.0], [1e300, 1.0]]), path="new.csv")


@pytest.mark.parametrize("power", [300, -300])
def test_a_regression_target_of_any_magnitude_is_standardised(power):
    """A varying target near 1e-300 is not constant (its variance underflowed to 0), and one near 1e300 does not
    get an infinite scale: either is standardised to the values of the same target near 1."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((30, 2))
    y = X @ [1.0, -2.0] + 0.5 + 0.1 * rng.standard_normal(30)
    scaled, plain = (prepare(X, t, X[:5], t[:5], likelihood="gaussian") for t in (y * 10.0**power, y))
    np.testing.assert_allclose(scaled.arrays["target_scale"], plain.arrays["target_scale"] * 10.0**power, rtol=1e-12)
    np.testing.assert_allclose(scaled.arrays["target_mean"], plain.arrays["target_mean"] * 10.0**power, rtol=1e-12)
    np.testing.assert_allclose(scaled.y_train, plain.y_train, rtol=0, atol=1e-12)
    np.testing.assert_allclose(scaled.y_test, plain.y_test, rtol=0, atol=1e-12)
    with pytest.raises(DataError, match="constant"):
        prepare(X, np.full(30, 0.1), likelihood="gaussian")


def test_check_width_and_sha256(tmp_path):
    check_width(np.zeros((3, 14)), 14, path="t.csv")
    with pytest.raises(DataError, match=r"^t\.csv: 12 feature columns, but the model was trained on 14$"):
        check_width(np.zeros((3, 12)), 14, path="t.csv")
    path = write(tmp_path, "h.bin", b"abc" * 1000)
    assert sha256_file(path) == hashlib.sha256(b"abc" * 1000).hexdigest()
    with pytest.raises(DataError, match="no such file"):
        sha256_file(tmp_path / "nope")


# ------------------------------------------------------------------------------------------------ real data


def test_shipped_breast_cancer_wisconsin():
    table = read_table(SHIPPED)
    assert table.X.shape == (569, 30)
    assert table.feature_names[0] == "mean_radius" and table.feature_names[-1] == "worst_fractal_dimension"
    assert table.provenance["target"] == "diagnosis" and table.provenance["header"] is True
    assert table.y.dtype.kind == "U"
    label_map = fit_labels(table.y, path=str(SHIPPED), n_classes=2)
    assert label_map.classes == ("benign", "malignant")
    np.testing.assert_array_equal(np.bincount(label_map.encode(table.y, path=str(SHIPPED))), [357, 212])
    assert table.X[0, 0] == 17.99 and table.X[-1, -1] == 0.07039


def test_shipped_dataset_readme_records_its_sha256():
    readme = (REPO / "datasets" / "README.md").read_text()
    assert sha256_file(SHIPPED) in readme


def mirror_file(relative):
    path = MIRROR / relative
    if not path.is_file():
        pytest.skip(f"data mirror not found at {MIRROR} (set SLANG_DATA_DIR)")
    return path


def test_mirror_a1a_widths_differ_and_widen_reconciles_them():
    train = read_table(mirror_file("libsvm/a1a"))
    test = read_table(mirror_file("libsvm/a1a.t"))
    assert train.X.shape == (1605, 119)
    assert test.X.shape == (30956, 123)
    assert set(np.unique(train.y)) == {-1.0, 1.0}
    wide = widen(train, test.X.shape[1])
    check_width(test.X, wide.X.shape[1], path=str(test.provenance["path"]))
    assert read_table(mirror_file("libsvm/a1a"), n_features=123).X.shape == (1605, 123)


def test_mirror_australian_scale():
    table = read_table(mirror_file("libsvm/australian_scale"))
    assert table.X.shape == (690, 14)
    assert fit_labels(table.y, path="australian_scale", n_classes=2).classes == (-1.0, 1.0)
    assert np.abs(table.X).max() <= 1.0


def test_mirror_uci_whitespace_text():
    table = read_table(mirror_file("uci/bostonHousing/data.txt"))
    assert table.X.shape == (506, 13)
    assert table.provenance["delimiter"] == "whitespace" and table.provenance["header"] is False


def test_text_found_in_a_later_block(tmp_path, monkeypatch):
    """The reader converts a block of rows at a time: a column missing in the first blocks becomes text when text
    comes (its earlier cells missing), and a column that held a number before a text cell is refused, whichever
    block either is in."""
    monkeypatch.setattr(slangcli.data.readers.text, "_CELLS", 6)  # blocks of two rows of three cells
    data = tmp_path / "late.csv"
    data.write_text("a,colour,y\n1,NA,0\n2,NA,1\n3,NA,0\n4,red,1\n5,blue,0\n6,NA,1\n")
    table = read_table(data, missing="impute", detect_categories=True)
    assert list(table.text[1]) == ["", "", "", "red", "blue", ""] and list(table.lines[3:]) == [5, 6, 7]
    data.write_text("a,colour,y\n1,2,0\n2,NA,1\n3,NA,0\n4,red,1\n")
    with pytest.raises(DataError, match=re.escape(f"{data}:5: column 1 ('colour'): cannot parse 'red' as a number "
                                                  "(the column's other cells are numbers: '2' on line 2;")):
        read_table(data, missing="impute", detect_categories=True)
    data.write_text("a,colour,y\n1,red,0\n2,blue,1\n3,NA,0\n4,7,1\n")
    with pytest.raises(DataError, match=re.escape(f"{data}:2: column 1 ('colour'): cannot parse 'red' as a number "
                                                  "(the column's other cells are numbers: '7' on line 5;")):
        read_table(data, missing="impute", detect_categories=True)


def test_a_file_of_few_very_wide_rows_is_read_in_segments_of_bounded_size(tmp_path):
    """The reader's first segment was 4 096 rows at the file's width: for 20 rows of a million columns, 31 GB,
    and the fit failed as "out of memory" where numpy.loadtxt reads the file. Segments are now bounded in bytes."""
    from slangcli.data.readers.text import Rows

    rows = Rows()
    rows.add(np.ones((3, 2_000_000)))
    assert rows.segments[0].nbytes <= Rows.SEGMENT
    rows.add(np.full((20, 2_000_000), 2.0))
    table = rows.result()
    assert table.shape == (23, 2_000_000) and table[2, -1] == 1.0 and table[3, 0] == 2.0 and table[-1, -1] == 2.0
    path = tmp_path / "wide.csv"
    X = np.arange(3 * 300_000, dtype=float).reshape(3, 300_000) % 7
    np.savetxt(path, np.column_stack([X, [0, 1, 0]]), delimiter=",", fmt="%g")
    np.testing.assert_array_equal(read_table(path, header=False).X, X)
