"""The data schema (``slangcli.schema``): what a model expects of its input, fitted on raw columns (numbers, and
text made categories and booleans) and applied to them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from slangcli.errors import DataError
from slangcli.schema import Schema, check_record


# ------------------------------------------------------------------------------------------------ the schema itself


def test_a_schema_fitted_on_raw_columns_encodes_them():
    """Kinds from the text, levels from every row, the values a missing cell gets from the training rows; the
    encoding one indicator per level, a boolean one column, a number itself."""
    X = np.array([[1.0, np.nan, np.nan], [3.0, np.nan, np.nan], [np.nan, np.nan, np.nan], [8.0, np.nan, np.nan]])
    text = {1: np.array(["b", "a", "b", "c"]), 2: np.array(["Yes", "no", "", "YES"])}
    schema = Schema.fit(X, text, names=("x", "letter", "flag"), path="data", train=np.array([0, 1, 2]))
    assert [(c.kind, c.levels, c.fill) for c in schema.columns] == [
        ("numeric", (), 2.0), ("categorical", ("a", "b", "c"), "b"), ("boolean", (), 0.0)]
    assert schema.encoded_names == ("x", "letter=a", "letter=b", "letter=c", "flag")
    np.testing.assert_array_equal(schema.encode(X, text, impute=True), [[1, 0, 1, 0, 1], [3, 1, 0, 0, 0],
                                                                        [2, 0, 1, 0, 0], [8, 0, 0, 1, 1]])
    with pytest.raises(DataError, match=r"^row 2, column 'x': missing value"):
        schema.encode(X, text)
    unseen = {1: np.array(["b", "z", "b", "c"]), 2: text[2]}
    with pytest.raises(DataError, match=r"^row 1, column 'letter': level 'z' was not seen in training \(known "
                                        r"levels: a, b, c\)$"):
        schema.encode(X, unseen, impute=True)
    # stored and read back, the schema is the same; a record that is not one is refused
    again = Schema.from_record(json.loads(json.dumps(schema.record())), {})
    np.testing.assert_array_equal(again.encode(X, text, impute=True), schema.encode(X, text, impute=True))
    check_record(schema.record(), 5)
    with pytest.raises(DataError, match="encodes 5 model inputs, but the model takes 4"):
        check_record(schema.record(), 4)


def test_levels_of_numbers_sort_and_match_by_value():
    X = np.full((4, 1), np.nan)
    schema = Schema.fit(X, {0: np.array(["10", "4", "6.0", "4"])}, names=("cyl",), path="data")
    assert schema.columns[0].levels == ("4", "6.0", "10")
    np.testing.assert_array_equal(schema.encode(X[:3], {0: np.array(["4.0", "6", "1e1"])}),
                                  [[1, 0, 0], [0, 1, 0], [0, 0, 1]])
