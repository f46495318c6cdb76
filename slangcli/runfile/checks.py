"""Checks between a stored run and what a later command is given: data columns, recorded paths, stored values.

- **Columns.** Which columns of later data are the run's features (by name, or by position with one reading) is
  decided in ``slangcli.data.columns``.
- **Recorded paths.** ``slang fit --resume`` re-reads the training and test data at the absolute paths recorded
  in the run, so it works from any working directory.

(The sizes a user asks for, ``--samples`` and ``--bins``, are bounded where the options are declared,
``slangcli.cli.options``; a run file's declared sizes are checked by ``slangcli.runfile.io`` as it reads them.)
"""

from __future__ import annotations

import dataclasses
import os

from slangcli.errors import ConfigError


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
