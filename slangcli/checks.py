"""Checks between a stored run and what a later command is given: data columns, recorded paths, stored values.

- **Columns by name.** A run stores the names of its feature columns. When it was fitted on a file with a header
  and the data to score have one too, columns are matched by name, not position: the same names in another order
  are reordered (and said so), and names that differ are refused, naming them. Without a header on either side
  the columns are taken in order, as before.
- **Recorded paths.** ``slang fit --resume`` re-reads the training and test data at the absolute paths recorded
  in the run, so it works from any working directory.

(The sizes a user asks for, ``--samples`` and ``--bins``, are bounded where the options are declared,
``slangcli.cli.options``; a run file's declared sizes are checked by ``slangcli.io`` as it reads them.)
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable

import numpy as np

from slangcli.errors import ConfigError, DataError


def _names(names, limit: int = 8) -> str:
    shown = ", ".join(repr(n) for n in list(names)[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def match_columns(run, table, path, notify: Callable[[str], None] = lambda msg: None):
    """``table`` with its feature columns in the order of the run's features, matched by header name.

    Applies when the run was fitted on a file with a header row and ``table`` was read with one; refuses
    (``DataError`` naming both sides) names that are missing or not the run's. Returns ``table`` unchanged
    otherwise."""
    trained = list(run.data.get("feature_names") or [])
    if not trained or not run.data.get("train", {}).get("header") or not table.provenance.get("header"):
        return table
    given = list(table.feature_names)
    if given == trained:
        return table
    if len(set(trained)) != len(trained) or len(set(given)) != len(given):
        return table  # duplicate names cannot be matched by name; positions (and the width check) decide
    missing = [n for n in trained if n not in given]
    extra = [n for n in given if n not in trained]
    target = run.data["train"].get("target")
    read_as_target = table.provenance.get("target")
    if table.y is not None and isinstance(read_as_target, str) and read_as_target in missing:
        raise DataError(f"{path}: the target column {target!r} is missing (the column {read_as_target!r} taken as "
                        "the target is one of the run's features); scoring needs the target")
    if missing or extra:
        if isinstance(target, str) and target in extra and len(given) == len(trained):
            raise DataError(f"{path}: its target column is not where the fit's was: the column {target!r} is read "
                            f"as a feature and {_names(missing)} is missing")
        parts = ([f"lacks the run's feature column(s) {_names(missing)}"] if missing else []) + \
                ([f"has column(s) {_names(extra)} the run was not fitted on"] if extra else [])
        raise DataError(f"{path}: header names differ from the run's features: it {' and '.join(parts)}")
    order = [given.index(n) for n in trained]
    notify(f"{path}: feature columns matched by name (their order differs from the training data's)")
    return dataclasses.replace(table, X=np.ascontiguousarray(table.X[:, order]), feature_names=tuple(trained))


def recorded_options(run, opts):
    """``opts`` (the run's stored data options) with the data paths replaced by the absolute ones recorded at
    fit time, so that a resumed fit reads the same files from any working directory."""
    train = run.data.get("train") or {}
    test = run.data.get("test") or {}
    path = train.get("folder") if train.get("format") == "uci" else train.get("path")
    changes = {}
    if isinstance(path, str) and os.path.isabs(path):
        changes["path"] = path
    if opts.test is not None and test.get("source") == "file" and isinstance(test.get("path"), str):
        changes["test"] = test["path"]
    return dataclasses.replace(opts, **changes)


def stored_hyper(module, config: dict, run_name: str):
    """The method's hyperparameters from a run file's stored config; an invalid stored value is the file's fault
    (exit 1, naming the file and the field), not a command-line option's."""
    from slangcli.errors import FormatError

    hyper = config.get("hyper")
    if not isinstance(hyper, dict):
        raise FormatError(f"{run_name}: / attribute 'config' lacks the method's hyperparameters ('hyper')")
    try:
        return module.Hyper(**hyper)
    except (ConfigError, TypeError, ValueError) as exc:
        bad = [name for name in hyper if f"--{name.replace('_', '-')}" in str(exc)]
        field = f"'hyper' field {bad[0]!r}" if bad else "'hyper'"
        raise FormatError(f"{run_name}: / attribute 'config' {field} is invalid (stored value "
                          f"{hyper.get(bad[0]) if bad else hyper!r}): {exc}") from None
