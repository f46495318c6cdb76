"""``docs/BAD_INPUTS.md`` is what ``benchmarks/bad_inputs.py`` generates from this checkout (slow: it runs slang
about 160 times, one case waits for a libhdf5 hang to time out, and two for a --tune search's first round)."""

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_bad_inputs_page_is_current():
    spec = importlib.util.spec_from_file_location("bad_inputs", REPO / "benchmarks" / "bad_inputs.py")
    bad_inputs = importlib.util.module_from_spec(spec)
    sys.modules["bad_inputs"] = bad_inputs  # dataclasses look their module up there
    spec.loader.exec_module(bad_inputs)
    assert bad_inputs.generate() == bad_inputs.PAGE.read_text(), "run python benchmarks/bad_inputs.py"
