"""Options declared once: a dataclass field with what every door needs to know of it (:func:`option`), and the
check of a value against it (:func:`check_value`).

``slangcli.training.options.FitOptions`` (how to fit) and ``slangcli.data.sources.DataOptions`` (how to read the data)
are declared with these fields; ``slang fit``'s and ``slang sweep``'s command-line options, ``slangcli.fit``'s signature
and the estimators' parameters are generated from them. This module imports nothing from slang but its errors, so that
every layer can declare its options here.
"""

from __future__ import annotations

from dataclasses import field

import numpy as np

from slangcli.errors import ConfigError

# the value of --noise-precision and --prior-precision that learns them (slangcli.training.learned)
AUTO = "auto"
# the largest seed every consumer takes (NumPy's generators take any, an HDF5 attribute an int64)
MAX_SEED = 2**63 - 1


def option(default, help, *, kind: str, least=None, most=None, choices=None, flag: str | None = None,
           short: str | None = None, metavar: str | None = None, estimator: str | None = "",
           applied: str | None = None, bound: float | None = None):
    """A dataclass field with its declaration in the metadata.

    ``help`` is its help text, or a function returning it (text that names the registered methods is made from the
    registry when asked for, :func:`help_of`). ``kind`` says which values it takes (:func:`check_value`):
    ``choice`` (one of ``choices``, a tuple or a function returning one), ``widths`` (hidden-layer widths),
    ``switch`` (True or False; None too where that is the default: "not given"), ``count`` (a whole number from
    ``least`` to ``most``), ``positive`` (a positive finite number, within ``[1 / bound, bound]`` when ``bound`` is
    given), ``precision`` (``positive`` or ``auto``), ``fraction`` (a number strictly between 0 and 1), ``text``,
    ``path`` (a file's path), ``delimiter`` (a CSV delimiter, spelled as :data:`DELIMITERS` has it) or
    ``tokens`` (comma-separated texts). ``flag`` and ``short`` are its command-line spellings (default
    ``--name``), ``metavar`` the name of its value there, ``estimator`` its estimator parameter's name ("": the
    field's own, None: the estimators do not take it), and ``applied`` the default as applied where the declared
    default (None) leaves it to the task, the method or the data.
    """
    return field(default=default, metadata={
        "help": help, "kind": kind, "least": least, "most": most, "choices": choices, "flag": flag, "short": short,
        "metavar": metavar, "estimator": estimator, "applied": applied, "bound": bound})


# the spellings of a CSV delimiter on the command line, and the reader's for each
DELIMITERS = {",": ",", ";": ";", "tab": "\t", "\\t": "\t", "\t": "\t", "whitespace": "whitespace", " ": "whitespace"}


def flag_of(f) -> str:
    """The command-line option of a declared field: its ``flag``, or ``--name`` (``_`` written ``-``)."""
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def help_of(f) -> str:
    """A field's help text (made now, where it names the registered methods)."""
    text = f.metadata["help"]
    return text() if callable(text) else text


def choices_of(f) -> tuple:
    choices = f.metadata["choices"]
    return tuple(choices() if callable(choices) else choices or ())


def check_value(f, value, name: str | None = None) -> None:
    """Refuse a value that is not of ``f``'s kind (one ConfigError naming the option ``name``, by default its
    command-line flag)."""
    meta, name = f.metadata, name or flag_of(f)
    kind = meta["kind"]
    if value is None and f.default is None:
        return
    if kind == "choice":
        if not isinstance(value, str) or value not in choices_of(f):
            raise ConfigError(f"unknown {f.name.replace('_', ' ')} {value!r} (choose from "
                              f"{', '.join(choices_of(f))})")
    elif kind == "switch":
        if not isinstance(value, (bool, np.bool_)):
            raise ConfigError(f"{name} must be True or False, got {value!r}")
    elif kind == "count":
        least, most = meta["least"], meta["most"]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least or (
                most is not None and value > most):
            bound = f">= {least}" if most is None else f"from {least} to {most}"
            raise ConfigError(f"{name} must be a whole number {bound}, got {value!r}")
    elif kind in ("positive", "precision"):
        if kind == "precision" and isinstance(value, str) and value == AUTO:
            return
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)) \
                or not 0 < value < np.inf:
            shown = repr(value) if isinstance(value, str) else value  # (a text '10' shown as text, not as 10)
            raise ConfigError(f"{name} must be positive and finite" + (" or auto" if kind == "precision" else "")
                              + f", got {shown}")
        bound = meta["bound"]
        if bound is not None and not 1 / bound <= value <= bound:
            raise ConfigError(f"{name} must lie between {1 / bound:g} and {bound:g}, got {value}")
    elif kind == "fraction":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ConfigError(f"{name} must be a number strictly between 0 and 1, got {value!r}")
        if not 0 < value < 1:
            raise ConfigError(f"{name} must lie strictly between 0 and 1, got {value!r}")
    elif kind == "delimiter":
        if value not in DELIMITERS.values():
            raise ConfigError(f"{name}: {value!r} is not one of ',', ';', 'tab', 'whitespace'")
    elif kind in ("text", "path"):
        if not isinstance(value, str):
            raise ConfigError(f"{name} takes a text, got {value!r}")
    elif kind == "tokens":
        if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{name} takes texts, got {value!r}")
    elif kind == "hyper":
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ConfigError(f"the method's hyperparameters must be a dict by name, got {value!r}")
