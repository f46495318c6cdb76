"""What ``slang fit`` is about to do, said before it trains: the task inferred from the data and the options that
change it, and warnings about data that would otherwise mislead without a sound.

- :func:`describe`: the likelihood, the classes or the target's scale, the feature and parameter counts, the
  columns of text encoded as categories or booleans, whether the features were standardised, the rows left out for
  a missing value, and the options that change each.
- :func:`integer_target_hint`: an integer target with more than a handful of values, which ``auto`` fits as
  classes, may be a quantity (a quality score, a count); ``--likelihood gaussian`` fits it as regression.
- :func:`decimal_commas`: a column of text (or a target of classes) whose every value is a number written with a
  decimal comma (``0,126``), which slang reads as a category (or a class) per value, not as a number;
- :func:`identifier_columns`: a feature that holds distinct integers on (nearly) every row over a huge range,
  or a row count 0..N-1, is a row identifier; used as a feature it lets a network memorise rows.
- :func:`tiny_features`: a feature used as read that stays below ``1 / MAX_ABS_VALUE`` in magnitude cannot move the
  model (its weight would have to exceed what a run file holds); :func:`magnitude_note`: features used as read of
  a large magnitude, the likely cause of a fit that diverged or did not converge.

Messages only: nothing here changes the data or the fit.
"""

from __future__ import annotations

import re
import shlex

import numpy as np

from slangcli.blocks import row_blocks
from slangcli.data.readers._common import DECIMAL_COMMA, _fmt_label, _listing
from slangcli.gaussian.posteriors import MAX_ABS_VALUE

# an integer target with more distinct values than this gets the regression hint
HANDFUL = 4
# An identifier column: integers, distinct on at least this fraction of the rows (a sample id repeated for a
# re-measured sample is still an id), and a range of at least ID_RANGE per row (ids are drawn from a large space)
# or exactly the rows' count (a row number). Files shorter than ID_MIN_ROWS are too small to tell.
ID_DISTINCT = 0.9
ID_RANGE = 100
ID_MIN_ROWS = 20
# a column of distinct whole numbers from near 0, in no order, that fill at least this fraction of their range holds
# row numbers of a larger table: the shuffled part of a split (pandas' index, written by to_csv after
# train_test_split); days with gaps, as dense, come in order
ID_SUBSET_DENSITY = 0.5
# names a pandas index column gets: to_csv writes its header cell empty, and read_csv reads it back as "Unnamed: 0"
INDEX_NAME = re.compile(r"|Unnamed: \d+|index")
# Features used as read that reach this magnitude are named as the likely cause of a fit that diverged or did not
# converge: the prior (precision 1 by default) and the step sizes are made for features of order 1, and a raw
# feature of 1e3 already saturates a network's units and dwarfs the prior.
LARGE_FEATURE = 1e3

_LIKELIHOOD_TASKS = {"bernoulli": "binary classification", "categorical": "classification",
                     "gaussian": "regression"}


def target_text(target) -> str:
    """The target as messages name it: ``'quality'``, ``column 10``, or ``the target``."""
    if isinstance(target, str):
        return repr(target)
    if isinstance(target, (int, np.integer)) and not isinstance(target, bool):
        return f"column {int(target)}"
    return "the target"


def describe(data: dict, arrays: dict, likelihood: str, n_features: int, n_params: int) -> list[str]:
    """The lines that state the inferred task of a fit to prepared data (``data.prepare.Prepared``'s ``data`` and
    ``arrays``) and how to change it."""
    target = target_text((data.get("train") or {}).get("target"))
    classes = (data.get("targets") or {}).get("classes")
    if likelihood == "gaussian":
        mean, scale = float(arrays["target_mean"][0]), float(arrays["target_scale"][0])
        what = (f"regression (gaussian likelihood) of {target}, mean {mean:.4g} and std {scale:.4g} "
                "(fitted on the standardised scale)")
    else:
        kind = "binary classification" if likelihood == "bernoulli" else f"{len(classes)}-class classification"
        what = f"{kind} ({likelihood} likelihood) of {target}, classes {_listing(classes)}"
    parts = [f"task: {what}; {_count(n_features, 'feature')}, {_count(n_params, 'parameter')}"]
    encoded = _encoded_columns((data.get("schema") or {}).get("columns") or [])
    if encoded:
        parts.append(encoded)
    if data.get("standardize"):
        parts.append("features standardised (--no-standardize keeps them as read)")
    else:
        parts.append("features as read (--standardize scales them)")
    impute = (data.get("options") or {}).get("missing") == "impute"
    for part in ("train", "test"):
        source = data.get(part) or {}
        if source.get("rows_dropped"):
            where = "" if part == "train" or source.get("source") != "file" else " of the test file"
            k = source["rows_dropped"]
            why = "a missing target left out (a target is never imputed)" if impute else \
                "a missing value dropped (--missing drop)"
            parts.append(f"{k} row{'s' if k != 1 else ''}{where} with {why}")
    # (a CSV file's columns can be chosen; a LIBSVM file's, an IDX file's or a UCI folder's are what they hold)
    csv = (data.get("train") or {}).get("format") in ("csv", None)
    return ["; ".join(parts), "change the task with --likelihood, --target, --drop-columns or --columns" if csv else
            "change the task with --likelihood"]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _encoded_columns(columns: list) -> str | None:
    """``island, sex one-hot (3, 2 levels); 'smoker' boolean (0/1)`` for a schema's columns of text, or None."""
    categorical = [c for c in columns if c.get("kind") == "categorical"]
    boolean = [c for c in columns if c.get("kind") == "boolean"]
    parts = []
    if categorical:
        names = ", ".join(repr(c["name"]) for c in categorical[:8]) + (
            f" and {len(categorical) - 8} more" if len(categorical) > 8 else "")
        counts = ", ".join(str(len(c.get("levels") or ())) for c in categorical[:8])
        parts.append(f"{names} one-hot ({counts} level{'' if counts == '1' else 's'})")
    if boolean:
        parts.append(", ".join(repr(c["name"]) for c in boolean[:8]) + (
            f" and {len(boolean) - 8} more" if len(boolean) > 8 else "") + " boolean (0/1)")
    return "; ".join(parts) or None


def integer_target_hint(classes, target) -> str | None:
    """The hint for a target that ``auto`` made classes although it may be a quantity, or None."""
    if classes is None or len(classes) <= HANDFUL or not all(isinstance(c, (int, float)) for c in classes):
        return None
    if not all(float(c).is_integer() for c in classes):
        return None
    return (f"hint: {target_text(target)} has {len(classes)} integer values ({_fmt_label(min(classes))} to "
            f"{_fmt_label(max(classes))}), fitted as {len(classes)} unordered classes; if it measures a quantity, "
            "--likelihood gaussian fits it as regression")


# the highest whole number read as a possible class code: labels are coded 0..K-1 or 1..K, and a target of
# prices or counts in the thousands is a quantity, whose hint would only mislead
LABEL_CODE_MAX = 1000


def whole_number_regression_hint(whole, target) -> str | None:
    """The hint for a target of whole numbers, too many to be taken for classes, that ``auto`` fitted as a
    regression (``whole``: its lowest and highest value, or None); none when they cannot be class codes (below 0
    or above :data:`LABEL_CODE_MAX`)."""
    if whole is None or whole[0] < 0 or whole[1] > LABEL_CODE_MAX:
        return None
    return (f"hint: {target_text(target)} holds whole numbers only ({_fmt_label(whole[0])} to "
            f"{_fmt_label(whole[1])}), more distinct values than auto takes for classes, fitted as a regression; if "
            "they are class labels, --likelihood categorical fits them as classes")


def decimal_commas(columns, classes=None, frame: bool = False) -> list[str]:
    """Warnings naming each column of text among the schema's ``columns`` (``slangcli.data.schema.Column``), and the
    target's ``classes``, whose every value (two at least) is a number with a decimal comma: read as a category
    of that many levels (or as that many classes), which no fit of the numbers would be. ``frame``: the fix for a
    DataFrame passed from Python."""
    fix = "slang reads numbers with a decimal point: write them so (sed 's/\\([0-9]\\),\\([0-9]\\)/\\1.\\2/g')"
    out = []
    for column in columns:
        levels = [str(level) for level in getattr(column, "levels", ())]
        if len(levels) >= 2 and all(DECIMAL_COMMA.fullmatch(level) for level in levels):
            how = (f"slang reads numbers with a decimal point: convert them "
                   f"(X[{column.name!r}].str.replace(',', '.').astype(float))" if frame else fix)
            out.append(f"warning: column {column.name!r} is read as a category of {len(levels)} levels, but its "
                       f"cells look like numbers with a decimal comma ({levels[0]!r}, ...); {how}")
    if classes is not None and len(classes) >= 2 and all(isinstance(c, str) and DECIMAL_COMMA.fullmatch(c)
                                                         for c in classes):
        out.append(f"warning: the target is fitted as {len(classes)} classes, but its values look like numbers with "
                   f"a decimal comma ({classes[0]!r}, ...); {fix}")
    return out


def decimal_comma_indicators(names) -> str | None:
    """The columns, as a phrase ("'bp' and 's2'"), of which most of the one-hot indicators ``names``
    (``column=level``) are levels that are numbers with a decimal comma; None when fewer than half of them are."""
    columns = [name.split("=", 1)[0] for name in names
               if "=" in name and DECIMAL_COMMA.fullmatch(name.split("=", 1)[1])]
    if not columns or 2 * len(columns) < len(names):
        return None
    distinct = [repr(c) for c in dict.fromkeys(columns)]
    listed = (", ".join(distinct[:3]) + f" and {len(distinct) - 3} more" if len(distinct) > 3 else
              " and ".join([", ".join(distinct[:-1]), distinct[-1]]) if len(distinct) > 1 else distinct[0])
    return f"the one-hot levels of {'column' if len(distinct) == 1 else 'columns'} {listed}"


def one_level_per_row(columns, n: int, classes=None, frame: bool = False) -> list[str]:
    """Warnings naming each column of text among the schema's ``columns``, and the target's ``classes``, that has
    nearly as many distinct values as the ``n`` training rows (at least ``ID_DISTINCT`` of them): each value is
    then seen about once, and a fit cannot learn from it. An identifier or free text does that, and so do numbers
    that the delimiter did not separate (``0.3 1.2`` read as one cell). ``frame``: the advice for a DataFrame
    passed from Python (no delimiter; ``X.drop``)."""
    if n < ID_MIN_ROWS:
        return []
    why = "is it an identifier, free text, or cells holding several values? --delimiter sets how a line is split"
    out = []
    for column in columns:
        levels = getattr(column, "levels", ())
        if len(levels) >= ID_DISTINCT * n:
            advice = (f"is it an identifier or free text? X.drop(columns={column.name!r}) leaves it out" if frame
                      else f"{why}, --drop-columns leaves a column out")
            out.append(f"warning: column {column.name!r} is read as a category of {len(levels)} levels in {n} "
                       f"training rows, about one a row, which a fit cannot learn from ({advice})")
    if classes is not None and len(classes) >= ID_DISTINCT * n:
        out.append(f"warning: the target is fitted as {len(classes)} classes in {n} training rows, about one a row, "
                   f"which a fit cannot learn from ({why}, --likelihood gaussian fits a quantity)")
    return out


def identifier_columns(X: np.ndarray, feature_names, positions=None, frame: bool = False, rows=None) -> list[str]:
    """Warnings naming each feature column of ``X : (N, P)`` (raw values) that looks like a row identifier;
    ``positions``: each feature's 0-based column in the file, which the advice gives where a name cannot be
    (empty, as the header cell of a pandas index column is, or holding a comma); ``rows``: each row's 0-based data
    row in the file (rows left out for a missing value leave gaps), which an index column counts."""
    n = len(X)
    if n < ID_MIN_ROWS or X.size == 0:
        return []
    lo, hi = X.min(axis=0), X.max(axis=0)
    with np.errstate(over="ignore"):  # the range of features near +-1e308 is infinite: no identifier then
        spread = hi - lo
    # beyond 2**53 every float64 is a whole number: such magnitudes are measurements, not ids (tested a block of rows
    # at a time: the tests of all rows at once took two temporary copies of the data)
    exact = np.ones(X.shape[1], dtype=bool)
    for block_rows in row_blocks(*X.shape):
        block = X[block_rows]
        exact &= np.all((block == np.round(block)) & (np.abs(block) < 2.0**53), axis=0)
    candidates = np.flatnonzero((spread >= n - 1) & exact)
    warnings = []
    for j in candidates:
        distinct = len(np.unique(X[:, j]))
        # row numbers: consecutive, or the file's data rows counted (from 0 or 1), or the values of a column named as
        # a pandas index is, or distinct from near 0, filling half their range, in no order (a shuffled split's part
        # of a headerless file written with its index; days with gaps come in order, ascending or descending)
        column = X[:, j]
        # (the shuffled part's rule only for a column without a name of its own, as a headerless file's x<k>: a
        # named day or rank column of a shuffled split fills its range as densely)
        unnamed = j >= len(feature_names) or re.fullmatch(r"x\d+", str(feature_names[j])) is not None
        row_number = distinct == n and (
            spread[j] == n - 1
            or (rows is not None and len(rows) == n and column[0] - rows[0] in (0, 1)
                and np.array_equal(column - rows, np.full(n, column[0] - rows[0])))
            or (j < len(feature_names) and INDEX_NAME.fullmatch(str(feature_names[j]).strip()) is not None
                and lo[j] >= 0)
            or (unnamed and 0 <= lo[j] <= max(10.0, 0.05 * spread[j]) and n >= ID_SUBSET_DENSITY * (spread[j] + 1)
                and not (np.all(np.diff(column) > 0) or np.all(np.diff(column) < 0))))
        if distinct >= ID_DISTINCT * n and (spread[j] >= ID_RANGE * n or row_number):
            name = feature_names[j]
            # a file without a header names column k "x<k>": the option takes the index
            option = name[1:] if name[:1] == "x" and name[1:].isdigit() else name
            if (not name.strip() or "," in name) and positions is not None:
                option = str(positions[j])
            kind = "row numbers" if row_number else "distinct integers"
            leave_out = f"X.drop(columns={name!r})" if frame else f"--drop-columns {shlex.quote(option)}"
            warnings.append(f"warning: feature {name!r} looks like a row identifier ({kind} from "
                            f"{_fmt_label(lo[j])} to {_fmt_label(hi[j])}) and is used as a feature; "
                            f"{leave_out} leaves it out")
    return warnings


def feature_name(feature_names, j: int) -> str:
    """Feature ``j`` as messages name it: its name, or ``x<j>`` (as a file without a header names it)."""
    return str(feature_names[j]) if len(feature_names) > j else f"x{j}"


def tiny_features(X: np.ndarray, feature_names) -> list[str]:
    """Warnings naming the feature columns of ``X : (N, P)``, used as read, that are nonzero but below
    ``1 / MAX_ABS_VALUE`` in magnitude on every row: to move a logit or a regression output by 1 such a feature
    needs a weight beyond ``MAX_ABS_VALUE``, which no fit may reach (``slangcli.training.loop``), so the model cannot
    use it."""
    if X.size == 0:
        return []
    peak = np.abs(X).max(axis=0)
    tiny = np.flatnonzero((peak > 0) & (peak < 1 / MAX_ABS_VALUE))
    if not tiny.size:
        return []
    names = [repr(feature_name(feature_names, int(j))) for j in tiny]
    listed = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    what = f"feature {listed} is" if len(names) == 1 else f"features {listed} are"
    return [f"warning: {what} at most {peak[tiny].max():.3g} in magnitude: used as read, no weight within "
            f"{MAX_ABS_VALUE:g} lets {'it' if len(names) == 1 else 'them'} move the model; --standardize scales "
            "the features"]


def magnitude_note(X: np.ndarray, feature_names) -> str | None:
    """The likely cause of a fit to features used as read, ``X : (N, P)``, that diverged or did not converge:
    their largest magnitude when it reaches ``LARGE_FEATURE``; else None."""
    if X.size == 0:
        return None
    peak = np.abs(X).max(axis=0)
    j = int(np.argmax(peak))
    if peak[j] < LARGE_FEATURE:
        return None
    return (f"the features are used as read and reach {peak[j]:.3g} in magnitude (feature "
            f"{feature_name(feature_names, j)!r}), the likely cause: --standardize scales them")
