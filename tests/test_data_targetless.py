"""``read_table(..., targetless_width=P)``: a CSV file to predict on may lack its target column."""

from __future__ import annotations

import numpy as np
import pytest

from slangcli.data.readers import read_table
from slangcli.errors import DataError


def test_read_table_with_an_optional_target_column(write_file):
    with_target = write_file("a.csv", "a,b,c,label\n1,2,3,no\n4,5,6,yes\n")
    features = write_file("b.csv", "a,b,c\n1,2,3\n4,5,6\n")
    bare = write_file("c.csv", "1 2 3\n4 5 6\n")
    one = write_file("d.csv", "x\n1.5\n2.5\n")
    t = read_table(with_target, targetless_width=3)
    assert t.y.tolist() == ["no", "yes"] and t.X.shape == (2, 3)
    t = read_table(features, targetless_width=3, target="label")  # the target option does not apply
    assert t.y is None and t.feature_names == ("a", "b", "c") and t.provenance["header"] is True
    np.testing.assert_array_equal(t.X, [[1, 2, 3], [4, 5, 6]])
    t = read_table(bare, targetless_width=3)
    assert t.y is None and t.feature_names == ("x0", "x1", "x2") and t.provenance["header"] is False
    t = read_table(one, targetless_width=1)
    assert t.y is None and t.X[:, 0].tolist() == [1.5, 2.5]
    with pytest.raises(DataError, match=r"b\.csv:1: 3 columns, expected 5 \(features only\) or 6 \(features and"):
        read_table(features, targetless_width=5)
    # 3 columns for a 2-feature model: features and the target
    assert read_table(features, targetless_width=2).y.tolist() == [3.0, 6.0]
