"""The grid of a sweep: which options of ``slang fit`` it may vary, the fits it stands for, their run files' names,
and the options of each fit.

A sweep's grid speaks ``slang fit``'s command line: ``{"data": [...], "rank": ["1,2,4"], "seed": ["0-9"]}``.
:func:`parameters` lists the options it may vary, in the command's order of options, read from their
declarations (``slangcli.training.options.command_line``): the data options of ``slang fit`` (``DataOptions``), the
fit's own (``slangcli.training.options.FitOptions``, each registered method's hyperparameters after ``--method``) and
``--checkpoint-every``. :func:`expand` reads one given value as the command line reads it (lists, integer ranges, each
item checked by the option's kind and written canonically), :func:`product` makes every combination, and
:func:`make_point` the :class:`Point` of one: the fit's ``slang fit`` arguments (options at their default left out,
paths made absolute) and its run file's name (the readable parameters and a hash of the arguments).

Run-file names are how a sweep recognises its finished fits in a directory: they depend on the options' long
names, their order, their defaults and the canonical text of each value, and must not change (``tests/test_sweep.py``
holds names computed by earlier versions).

:func:`options_of` turns a point's parameters into the ``DataOptions`` and ``FitOptions`` of its fit, as
``slang fit`` turns the same command line into them; the sweep builds them once, in its own process
(``slangcli.sweep.tasks``). Nothing here imports click: ``tests/test_sweep.py`` checks that :func:`parameters`
agree with ``slang fit``'s click options (names, order, kinds, defaults).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from slangcli.data.sources import DataOptions
from slangcli.declare import AUTO, DELIMITERS, choices_of, flag_of
from slangcli.errors import ConfigError
from slangcli.methods import METHODS
from slangcli.methods.base import OptionSpec, hyper_names
from slangcli.training.options import FitOptions, command_line, is_data_option



@dataclass(frozen=True)
class Parameter:
    """One option of ``slang fit`` a grid may vary, as the command line writes and reads it.

    ``name`` is where its value goes (``part``): a field of ``DataOptions`` ("data"), of ``FitOptions`` or a
    method's hyperparameter ("fit"), or the fit's checkpoints ("checkpoint"). ``kind`` says how its text is read
    (:func:`convert`): ``int`` (within ``least``..``most``), ``float`` (within ``least``..``most``, ends excluded
    when ``open_range``), ``precision`` (a float or ``auto``), ``choice`` (one of ``choices``: a tuple, or a
    function returning one, read when it is used, so that a method registered later counts), ``switch`` (a flag,
    ``flag`` or ``off``), ``text``, ``path`` (made absolute) or ``delimiter`` (:data:`DELIMITERS`). ``default`` is
    slang fit's, as text (None: not given)."""

    name: str
    flag: str
    kind: str
    part: str = "fit"
    default: Any = None
    least: Any = None
    most: Any = None
    open_range: bool = False
    choices: Any = None
    off: str | None = None
    hyper: bool = False  # a method's own hyperparameter (applies only to the methods that declare it)

    @property
    def key(self) -> str:
        """The name a grid, a spec file and the results table use: the long option without dashes."""
        return self.flag[2:]

    @property
    def listable(self) -> bool:
        """Numbers and choices split on commas; free text (``--hidden 50,50``, ``--tune lr,beta``) does not."""
        return self.kind in ("int", "float", "precision", "choice")


CHECKPOINT_EVERY = Parameter("checkpoint_every", "--checkpoint-every", "int", "checkpoint", least=1)

# the declared kinds of value (slangcli.declare.check_value) -> how the command line reads them; the ranges of
# "positive" and "precision" values are checked by FitOptions itself
_FIELD_KINDS = {"switch": "switch", "precision": "precision", "positive": "float", "count": "int",
                "choice": "choice", "widths": "text", "text": "text", "tokens": "text", "path": "path",
                "delimiter": "delimiter", "fraction": "float"}


def _field_parameter(f, part: str) -> Parameter:
    """The grid's parameter of a declared field (``slangcli.declare.option``) of ``DataOptions`` (``part``
    "data") or of ``FitOptions`` ("fit"), as ``slang fit``'s command line reads it."""
    meta = f.metadata
    kind = _FIELD_KINDS[meta["kind"]]
    option = flag_of(f)
    if kind == "switch":
        return Parameter(f.name, option, kind, part, off=f"--no-{option[2:]}")
    default = None if meta["kind"] == "tokens" else f.default  # (a list of texts: not given)
    if meta["kind"] == "widths":  # as the command line writes a network: "400,400" ("": a linear model)
        default = ",".join(str(w) for w in default)
    if meta["kind"] == "fraction":
        return Parameter(f.name, option, kind, part, least=0, most=1, open_range=True)
    return Parameter(f.name, option, kind, part, default=default,
                     least=meta["least"] if kind == "int" else None, most=meta["most"] if kind == "int" else None,
                     choices=(lambda f=f: choices_of(f)) if kind == "choice" else None)




def _hyper_parameter(spec) -> Parameter:
    """A method's hyperparameter: "not given" by default (the method's own default applies); its range is the
    method's to check."""
    if spec.choices:
        return Parameter(spec.name, spec.flag, "choice", choices=tuple(spec.choices), hyper=True)
    return Parameter(spec.name, spec.flag, {int: "int", float: "float"}.get(spec.kind, "text"), hyper=True)


_PARAMETERS: dict = {}


def parameters() -> dict[str, Parameter]:
    """``{key: Parameter}`` of the ``slang fit`` options a grid may vary, in the command's order: the data options,
    the fit's own with the registered methods' hyperparameters after ``--method``, then ``--checkpoint-every``;
    made again when the registry of methods changes."""
    key = tuple((name, id(method)) for name, method in METHODS.items())
    if _PARAMETERS.get("key") != key:
        declared = [_hyper_parameter(item) if isinstance(item, OptionSpec)
                    else _field_parameter(item, "data" if is_data_option(item) else "fit") for item in command_line()]
        _PARAMETERS.update(key=key, parameters={p.key: p for p in (*declared, CHECKPOINT_EVERY)})
    return _PARAMETERS["parameters"]


# --------------------------------------------------------------------------------------------------- values


def convert(param: Parameter, text):
    """The value of ``param`` given as ``text`` (``True``/``False`` for a switch), as ``slang fit``'s command line
    reads it; a ConfigError naming the option when it is not one."""
    kind = param.kind
    if kind == "switch":
        return bool(text)
    if kind == "path":
        return os.path.abspath(text)
    if kind == "delimiter":
        if text not in DELIMITERS:
            raise ConfigError(f"{param.flag}: {text!r} is not one of ',', ';', 'tab', 'whitespace'")
        return DELIMITERS[text]
    if kind == "choice":
        choices = param.choices() if callable(param.choices) else param.choices
        if text not in choices:
            raise ConfigError(f"{param.flag}: {text!r} is not one of {', '.join(map(repr, choices))}")
        return text
    if kind == "int":
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(f"{param.flag}: {text!r} is not a whole number") from None
        if (param.least is not None and value < param.least) or (param.most is not None and value > param.most):
            bound = f">= {param.least}" if param.most is None else f"from {param.least} to {param.most}"
            raise ConfigError(f"{param.flag} must be a whole number {bound}, got {value}")
        return value
    if kind in ("float", "precision"):
        if kind == "precision" and text == AUTO:
            return text
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"{param.flag}: {text!r} is not a number" + (" or auto" if kind == "precision"
                                                                           else "")) from None
        if param.least is not None and not (param.least < value < param.most if param.open_range
                                            else param.least <= value <= param.most):
            between = "strictly between" if param.open_range else "between"
            raise ConfigError(f"{param.flag} must lie {between} {param.least} and {param.most}, got {text}")
        return value
    return text


def expand(param: Parameter, raw) -> list:
    """The values one given value of ``param`` stands for: ``"1,2,4"``, the integer range ``"0-19"`` (both ends
    included) or one value; each checked (:func:`convert`) and written canonically: a whole number as digits, a
    number as Python writes the float (``1e-05``), anything else as given."""
    if param.kind == "switch":
        if not isinstance(raw, bool):
            raise ConfigError(f"{param.key}: expected true or false, got {raw!r}")
        return [raw]
    items = str(raw).split(",") if param.listable else [str(raw)]
    out = []
    for item in (i.strip() for i in items):
        span = re.fullmatch(r"(\d+)-(\d+)", item) if param.kind == "int" else None
        values = [str(v) for v in range(int(span[1]), int(span[2]) + 1)] if span else [item]
        if span and not values:
            raise ConfigError(f"{param.flag}: empty range {item!r}")
        for value in values:
            converted = convert(param, value)
            # (a precision may also take a word: --noise-precision auto)
            out.append(repr(converted) if isinstance(converted, float) else
                       str(converted) if param.kind == "int" else value)
    return out


def is_default(param: Parameter, value) -> bool:
    """Whether ``value`` (canonical, from :func:`expand`) is what the fit uses when the option is not given. A
    switch is never left out: its default may depend on the data (``--header``)."""
    if param.default is None or param.kind == "switch":
        return False
    return expand(param, param.default) == [value]


# --------------------------------------------------------------------------------------------------- the fits


@dataclass
class Point:
    """One fit of a sweep: its parameters (``{"data": path, option key: value}``, values as on the command
    line, ``True``/``False`` for switches), the ``slang fit`` arguments they make, and its run file's name."""

    params: dict
    args: list = field(default_factory=list)
    name: str = ""


def _slug(text) -> str:
    return re.sub(r"[^A-Za-z0-9.+=-]+", "-", str(text)).strip("-.") or "x"


def make_point(params: dict, given: dict | None = None) -> Point:
    """The :class:`Point` of ``params`` (data and option keys to single canonical values; ``given``: the
    :func:`parameters`): the fit's arguments in the command's option order, without options given their default
    value, data and other paths made absolute (workers may run elsewhere); and its run file's name: the data's and
    those options' values (readable) and a hash of the arguments (unique)."""
    given = given or parameters()
    data = os.path.abspath(params["data"])
    args, ordered, named = [data], {"data": params["data"]}, {}
    for key, param in given.items():
        if key not in params:
            continue
        value = params[key]
        ordered[key] = value
        if is_default(param, value):  # the same fit as without the option: the same arguments and name
            continue
        named[key] = value
        if param.kind == "switch":
            args.append(param.flag if value else param.off)
        else:
            args += [param.flag, os.path.abspath(value) if param.kind == "path" else str(value)]
    stem = Path(params["data"].rstrip("/")).name
    stem = Path(stem).stem if "." in stem else stem
    readable = "_".join([_slug(stem), *(f"{_slug(k)}-{_slug(v)}" for k, v in named.items())])
    return Point(params=ordered, args=args, name=f"{readable[:120]}{name_end(args)}")


def name_end(args: list) -> str:
    """How the run file of the fit with ``args`` is named at the end: a hash of the arguments."""
    return f"_{hashlib.sha256(json.dumps(args).encode()).hexdigest()[:8]}.h5"


def params_of(args: list, given: dict | None = None) -> dict | None:
    """The parameters of a fit from its arguments (as :func:`make_point` makes them, so options at their default
    are not there), or None when an argument is not a ``slang fit`` option a grid varies (any more)."""
    given = given or parameters()
    options = {}
    for key, param in given.items():
        if param.kind == "switch":
            options[param.flag], options[param.off] = (key, True), (key, False)
        else:
            options[param.flag] = (key, None)
    if not args:
        return None
    params, rest = {"data": args[0]}, list(args[1:])
    while rest:
        key, value = options.get(rest.pop(0), (None, None))
        if key is None or (value is None and not rest):
            return None
        params[key] = rest.pop(0) if value is None else value
    return params


def product(grid: dict, given: dict | None = None) -> list[dict]:
    """Every combination of a grid ``{"data": [...], option key: [values]}`` (each value expanded by
    :func:`expand`), the last option varying fastest. A method's own hyperparameter goes only to the combinations
    whose method takes it (``--method slang,bbb --rank 1,2``: two SLANG fits and one BBB fit, once
    :func:`points_of` has merged the equal ones); one that no method of the grid takes is refused."""
    given = given or parameters()
    keys = ["data", *(k for k in given if k in grid)]
    unknown = [k for k in grid if k != "data" and k not in given]
    if unknown:
        raise ConfigError(f"{unknown[0]!r} is not a slang fit option a sweep can vary")
    if not grid.get("data"):
        raise ConfigError("no data: give DATA files or folders (or 'data' in the spec file)")
    values = []
    for key in keys:
        raw = grid[key] if isinstance(grid[key], (list, tuple)) else [grid[key]]
        if key == "data":
            values.append([str(v) for v in raw])
        else:
            values.append([v for item in raw for v in expand(given[key], item)])
    methods = values[keys.index("method")] if "method" in keys else []
    for key in keys:
        if given.get(key) and given[key].hyper and methods and not any(_takes(m, given[key]) for m in methods):
            raise ConfigError(f"{given[key].flag} applies to none of the grid's methods ({', '.join(methods)})")
    return [_applicable(dict(zip(keys, combo)), given) for combo in itertools.product(*values)]


def _takes(method: str, param: Parameter) -> bool:
    """Whether ``method`` takes the hyperparameter ``param`` (a name that is no registered method's takes every
    one: its fit refuses the name)."""
    return method not in METHODS or param.name in hyper_names(METHODS[method])


def _applicable(params: dict, given: dict) -> dict:
    """``params`` without the hyperparameters its method, when the grid gives it, does not take."""
    if "method" not in params:
        return params
    return {k: v for k, v in params.items() if k not in given or not given[k].hyper or _takes(params["method"],
                                                                                                given[k])}


def not_applied(grids: Iterable[dict]) -> list[str]:
    """What a sweep of ``grids`` says of the hyperparameters some of its methods do not take: one line each."""
    given, lines = parameters(), []
    for grid in grids:
        raw = grid.get("method")
        methods = [m for item in (raw if isinstance(raw, (list, tuple)) else [raw]) if item is not None
                   for m in expand(given["method"], item)]
        for key in grid:
            if key in given and given[key].hyper:
                without = [m for m in methods if not _takes(m, given[key])]
                if without and len(without) < len(methods):
                    line = (f"{given[key].flag} applies to {', '.join(m for m in methods if m not in without)} "
                            f"only: the {', '.join(without)} fits are made without it")
                    if line not in lines:
                        lines.append(line)
    return lines


def read_spec(path) -> list[dict]:
    """The grids of a spec file: JSON (a list of grids, or ``{"grid": [...]}``) or TOML (``[[grid]]``
    tables). Keys are fit option names (``uci-split`` or ``uci_split``) and ``data``; values one or a list."""
    text = Path(path).read_bytes()
    try:
        if str(path).endswith(".toml"):
            try:
                import tomllib
            except ModuleNotFoundError:  # (Python 3.10: the same parser, as tomli)
                import tomli as tomllib

            spec = tomllib.loads(text.decode("utf-8"))
        else:
            spec = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:  # tomllib.TOMLDecodeError and JSONDecodeError are ValueErrors
        raise ConfigError(f"{path}: not a valid spec file: {exc}") from None
    grids = spec.get("grid") if isinstance(spec, dict) else spec
    if isinstance(grids, dict):
        grids = [grids]
    if not isinstance(grids, list) or not grids or not all(isinstance(g, dict) for g in grids):
        raise ConfigError(f"{path}: expected a list of grids (tables of option: values), as 'grid' or at the top")
    return [{k.replace("_", "-"): v for k, v in g.items()} for g in grids]


def points_of(grids: Iterable[dict]) -> list[Point]:
    """The distinct fits of the union of ``grids``, in order."""
    given = parameters()
    seen, out = set(), []
    for grid in grids:
        for params in product(grid, given):
            point = make_point(params, given)
            if point.name not in seen:
                seen.add(point.name)
                out.append(point)
    return out


# --------------------------------------------------------------------------------------------- a fit's options


def options_of(params: dict, given: dict | None = None) -> tuple[DataOptions, FitOptions, int | None]:
    """The options of the fit of ``params`` (a :class:`Point`'s): its ``DataOptions``, its ``FitOptions`` and its
    ``--checkpoint-every``, made from the values as ``slang fit`` makes them from the same command line. An
    invalid combination is a ConfigError (one message naming the options, as slang fit's)."""
    given = given or parameters()
    parts: dict[str, dict] = {"data": {}, "fit": {}, "checkpoint": {}}
    for key, text in params.items():
        if key != "data":
            param = given[key]
            parts[param.part][param.name] = convert(param, text)
    options = FitOptions.of(**parts["fit"])
    data = DataOptions.of(os.path.abspath(params["data"]), **parts["data"], standardize=options.standardize)
    return data, options, parts["checkpoint"].get("checkpoint_every")
