"""Which columns of data given to a stored run are its features and its target: by name, or by position with
exactly one reading.

A run records how its training data were laid out (its data schema, ``slangcli.data.schema``): the feature columns'
names, the target's name (or 0-based column) and the columns the fit left out (``--drop-columns``, ``--columns``).
Data given later, to ``slang predict``, ``slang evaluate`` or :meth:`slangcli.FitResult.predict`, are read against
that record, never by guessing (a feature column here is one of the data, before a category becomes its indicator
columns):

- **By name** when the run knows its features by name (a header row at fit time, or a DataFrame's string
  column names) and the data have names too (a header row, a DataFrame's columns). Every feature must be there
  (a missing one is named), in any order; the target is read when present; every other column is ignored, with
  a note naming those the fit did not leave out itself.
- **By position** otherwise. A file without a header row may hold the training file's columns or the model's
  features alone, each with or without the target: four layouts (two when the fit left no column out, since
  they then coincide). Its width is accepted only when exactly one layout has it; a fit that left out exactly
  one column gives the training file's columns without the target and the features with the target the same
  width, and such a file is refused, naming both readings, unless ``--layout`` says which it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from slangcli.data.readers._common import _is_number
from slangcli.data.schema import schema_of
from slangcli.errors import DataError

# --layout: the training file's columns (those the fit left out included), or the model's features alone; the
# target may follow in either
LAYOUTS = ("full", "features")
_X_NAME = re.compile(r"x(\d+)")


def _quoted(names, limit: int = 8) -> str:
    names = list(names)
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def input_names(run) -> list | None:
    """The names of the run's feature columns, in the model's order (a category's one column, not its indicators),
    or None when it records none for each (a run without a stored schema whose feature names are not one per
    input)."""
    schema = schema_of(run)
    if schema.stored:
        return list(schema.names)
    names = list(run.data.get("feature_names") or [])
    return names if len(names) == run.model.sizes[0] else None


def input_width(run) -> int:
    """The number of the run's feature columns (a category counts once)."""
    return len(schema_of(run).columns)


def named(run) -> bool:
    """Whether ``run`` knows its features by name: fitted on a file with a header row, or on a DataFrame with
    string column names, and no two features share a name."""
    names = input_names(run)
    return (bool((run.data.get("train") or {}).get("header")) and names is not None
            and len(set(names)) == len(names))


def _left_out(run) -> set:
    """The columns the fit itself left out (``--drop-columns``, ``--columns``): names, or indices without a
    header."""
    return set((run.data.get("train") or {}).get("columns_dropped") or [])


def target_name(run) -> str | None:
    """The training target's name, if the run knows it (a header row, a pandas Series' name)."""
    train = run.data.get("train") or {}
    target = train.get("target")
    return target if isinstance(target, str) and train.get("header") else None


@dataclass(frozen=True)
class Match:
    """Data columns matched by name to a run's features: ``features[k]`` is the column of the run's ``k``-th
    feature, ``target`` the target's column (None: absent), ``ignored`` the names of the other columns."""

    features: list
    target: int | None
    ignored: list


def match_names(run, names, where: str) -> Match:
    """Match the column ``names`` (a header row, a DataFrame's columns) to the run's feature names; a missing
    feature, or a feature or target name given twice, is a ``DataError`` naming it (``where``: the file and line,
    or the argument)."""
    trained = input_names(run)
    target = target_name(run)
    columns: dict = {}
    for j, name in enumerate(names):
        columns.setdefault(name, []).append(j)
    ignored = [name for name in columns if name not in trained and name != target]
    missing = [name for name in trained if name not in columns]
    if missing:
        what = f"column {missing[0]!r} is missing" if len(missing) == 1 else f"columns {_quoted(missing)} are missing"
        # the columns that may have been renamed (not those the fit left out itself)
        others = [name for name in ignored if name not in _left_out(run)]
        others = f"; its other columns: {_quoted(others)}" if others else ""
        raise DataError(f"{where}: {what} (the model's {len(trained)} features are {_quoted(trained)}{others})")
    for name in [*trained, target]:
        if name in columns and len(columns[name]) > 1:
            raise DataError(f"{where}: the column name {name!r} is given {len(columns[name])} times (columns "
                            f"{', '.join(map(str, columns[name]))}), so it does not say which column is meant")
    return Match(features=[columns[name][0] for name in trained],
                 target=columns[target][0] if target in columns else None, ignored=ignored)


def unexpected(run, match: Match) -> list:
    """The columns matching by name ignored that the fit did not itself leave out (``--drop-columns``)."""
    return [name for name in match.ignored if name not in _left_out(run)]


# said when data with column names reach a run that knows its features by position only
UNNAMED = ("the column names are not used: the run knows its features by position only (it was fitted without "
           "names), so the columns are taken in the training data's order")


def ignored_message(names) -> str:
    return f"{'column' if len(names) == 1 else 'columns'} {_quoted(names)} ignored: not among the model's features"


# ------------------------------------------------------------------------------------------------ by position


@dataclass(frozen=True)
class Reading:
    """One layout of a file without a header: ``width`` columns, the target at column ``target`` (None: absent)
    and the run's ``k``-th feature at column ``features[k]``."""

    layout: str
    width: int
    target: int | None
    features: tuple
    description: str
    detail: str = ""  # which columns are what, where the description does not say

    def explained(self, prefix: str = "") -> str:
        """The description with its detail in parentheses, after ``prefix`` (e.g. the option that chooses it)."""
        inside = "; ".join(part for part in (prefix, self.detail) if part)
        return f"{self.description} ({inside})" if inside else self.description


def training_columns(run) -> tuple[int, int, list] | None:
    """The training file's layout ``(columns, target column, feature columns)``, or None when the run knows it
    only by names (a header row, and columns left out or a target chosen by name, in a run whose schema does not
    record the columns' positions)."""
    train = run.data.get("train") or {}
    P = input_width(run)
    if train.get("format") != "csv":
        # arrays, LIBSVM, IDX and UCI folders: a CSV file of their data holds the features, then the target
        return P + 1, P, list(range(P))
    left_out = train.get("columns_dropped") or []
    ncols = P + 1 + len(left_out)
    names = input_names(run) or []
    target = train.get("target")
    if not train.get("header"):
        # without a header each feature is named x<its 0-based column>, and the target is recorded as its column
        found = [_X_NAME.fullmatch(name) for name in names]
        if len(names) != P or not all(found) or isinstance(target, bool) or not isinstance(target, int):
            return None
        features = [int(m.group(1)) for m in found]
        if len({*features, target}) != P + 1 or max(features + [target]) >= ncols or target < 0:
            return None
        return ncols, target, features
    options = run.data.get("options") or {}
    if not left_out and options.get("target") is None:
        return P + 1, P, list(range(P))  # the default target, the last column
    schema = schema_of(run)
    features = [column.position for column in schema.columns]
    target = schema.target.position if schema.target is not None else None
    if not schema.stored or None in features or target is None or len(features) != P:
        return None
    if len({*features, target}) != P + 1 or max([*features, target]) >= ncols or min([*features, target]) < 0:
        return None
    return ncols, target, features


def readings(run) -> list[Reading]:
    """The distinct layouts a headerless file given to ``run`` may have, each with its width."""
    P = input_width(run)
    known = training_columns(run)
    if known is None:
        return [Reading("features", P, None, tuple(range(P)), "the model's features only")]
    ncols, t, features = known
    if ncols == P + 1:
        # nothing left out: the training file's columns are the features and the target
        return [Reading("full", P + 1, t, tuple(features), "features and the target"),
                Reading("features", P, None, tuple(c - (c > t) for c in features), "features only")]
    kept = sorted([*features, t])
    rank = {c: k for k, c in enumerate(kept)}
    left_out = [c for c in range(ncols) if c not in rank]
    ignored = f"column{'s' if len(left_out) > 1 else ''} {', '.join(map(str, left_out))} ignored as in the fit"
    shifted = [c - (c > t) for c in left_out]
    ignored_then = f"column{'s' if len(left_out) > 1 else ''} {', '.join(map(str, shifted))} ignored as in the fit"
    return [
        Reading("full", ncols, t, tuple(features), "the training file's columns",
                f"{ignored}, the target in column {t}"),
        Reading("full", ncols - 1, None, tuple(c - (c > t) for c in features),
                "the training file's columns without the target", ignored_then),
        Reading("features", P + 1, rank[t], tuple(rank[c] for c in features), f"the model's {P} features and the "
                "target", f"the target in column {rank[t]}"),
        Reading("features", P, None, tuple(range(P)), f"the model's {P} features only"),
    ]


def choose_reading(run, ncols: int, where: str, layout: str | None = None) -> Reading:
    """The one layout of ``run``'s data that a headerless file of ``ncols`` columns has; refuses a width that no
    layout has, or that two have (naming both, and ``--layout``, which decides)."""
    if layout is not None and layout not in LAYOUTS:
        raise DataError(f"{where}: layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    candidates = [r for r in readings(run) if layout is None or r.layout == layout]
    matching = [r for r in candidates if r.width == ncols]
    if len(matching) == 1:
        return matching[0]
    if matching:
        a, b = matching
        raise DataError(f"{where}: {ncols} columns could be {a.explained(f'--layout {a.layout}')} or "
                        f"{b.explained(f'--layout {b.layout}')}; give --layout to say which")
    hint = ""
    if training_columns(run) is None:
        hint = ("the run knows the training file's other columns by name only: give the file its header row "
                "to match them by name")
    if not candidates:
        raise DataError(f"{where}: --layout {layout}: {hint}")
    expected = " or ".join(f"{r.width} ({r.description})" for r in sorted(candidates, key=lambda r: r.width))
    chosen = f" for --layout {layout}" if layout is not None else ""
    raise DataError(f"{where}: {ncols} columns, expected {expected}{chosen}{'; ' + hint if hint else ''}")


# ------------------------------------------------------------------------------------------------ files


def file_layout(run, path, *, need_target: bool, layout: str | None = None,
                notify: Callable[[str], None] = lambda msg: None):
    """The ``layout`` function of ``readers.read_table`` for a CSV file given to ``run``: ``(names, ncols,
    line) -> (target column or None, feature columns in the model's order, positions among them of the columns
    read as text)``. ``need_target``: the data are to be scored, so a file without the target column is
    refused."""
    text = list(schema_of(run).text_columns)
    known = input_names(run)

    def choose(names, ncols, line):
        if names is not None and known and all(_is_number(n) for n in known) and set(known) <= set(names):
            notify(f"{path}: the first row holds the run's feature names ({_quoted(known)}), so it is read as a "
                   "header row (--no-header reads it as data)")
        target, features = columns(names, ncols, line)
        return target, features, text

    def columns(names, ncols, line):
        where = f"{path}:{line}"
        if names is not None and named(run):
            if layout is not None:
                notify(f"{path}: --layout {layout} is not needed: the header row's names say which column is what")
            match = match_names(run, names, where)
            target = match.target
            if target is None and need_target and target_name(run) is None and ncols - 1 not in match.features:
                # a run fitted to a DataFrame and targets without a name: the last column, as the fit's options read
                target = ncols - 1
                match = Match(match.features, target, [n for n in match.ignored if n != names[target]])
            if target is None and need_target:
                wanted = target_name(run)
                raise DataError(f"{where}: the target column {wanted!r} is missing; scoring needs it" if wanted else
                                f"{where}: no column is left for the target; scoring needs it")
            ignored = unexpected(run, match)
            if ignored:
                notify(f"{path}: {ignored_message(ignored)}")
            if match.features != sorted(match.features):
                notify(f"{path}: feature columns matched by name (their order differs from the training data's)")
            return target, match.features
        if names is not None:
            notify(f"{path}: {UNNAMED}")
        reading = choose_reading(run, ncols, where, layout)
        if need_target and reading.target is None:
            raise DataError(f"{where}: {ncols} columns, read as {reading.explained()}: the target column is "
                            "missing; scoring needs it")
        possible = readings(run)
        if len(possible) > 2 and reading != possible[0]:
            # not the training file's layout: the columns the fit left out, or the target too, are absent
            notify(f"{path}: {ncols} columns read as {reading.explained()}")
        return reading.target, list(reading.features)

    choose.header_names = known  # (the reader takes a first row holding them all for a header)
    return choose
