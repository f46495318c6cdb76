"""What every inference method shares: the problem it is given, the learning-rate schedule, and the protocol a
method follows (:class:`Method`).

A method is either trained by steps or solved. A *step method* has ``Hyper`` (its validated hyperparameters),
``init(rng, problem, hyper) -> state``, ``step(rng, state, problem, X, y, hyper) -> (state, info)`` and
``posterior(state) -> posterior``; states are NamedTuples of arrays plus the step counter ``t``, and the training
loop (``slangcli.training.loop``) drives any of them. A *solver* has ``Hyper`` and ``solve(problem, X, y, hyper) ->
(posterior, info)`` and is called once on the whole training set (``slangcli.training.fitting`` dispatches on
:func:`is_solver`). Every other part is optional, with a default: :class:`Method` lists them all.

The registry (``slangcli.methods.METHODS``) holds modules that define these parts by name, or :class:`Method`
records (where one module serves two variants that differ only in a function argument: ``full-ef`` and
``full-hessian``). slang reads a method only through :func:`describe`, which gives the record either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Callable

import numpy as np

from slangcli._startup import memory_limit
from slangcli.errors import ConfigError
from slangcli.models import MLP


@dataclass(frozen=True)
class Problem:
    """The model, its per-parameter prior precision ``lambda : (D,)`` and the training-set size ``N``."""

    model: MLP
    prior_precision: np.ndarray
    n_data: int


@dataclass(frozen=True)
class Method:
    """Every part of a method, the protocol in one place: a module defines the ones it has under these names (the
    rest take the defaults below), or the registry holds such a record itself.

    Required: ``Hyper``, and either the step trio ``init``, ``step``, ``posterior`` or ``solve`` (see the module
    docstring). Optional:

    ``description``
        One line for ``slang fit --help``'s list of methods (``--method``).
    ``display_name``
        Its name in figures (``"SLANG"``, ``"k-tied"``); None: its registry name.
    ``rank_symbol``
        The symbol of its ``rank`` hyperparameter in labels, after its paper (``"L"``, the rank of SLANG's
        precision; ``"k"``, k-tied's).
    ``finite_fields``
        The state arrays checked for finiteness after every step (O(D) each; the ones a diverging step reaches
        first).
    ``cache_fields``
        State fields that only cache what the next step can recompute (``None`` allowed): not required in a
        checkpoint and not restored from one.
    ``adapt(model, hyper) -> (hyper, note)``
        Its hyperparameters fitted to ``model`` (e.g. a rank capped by the parameter count) and what to tell the
        user about it (None: nothing); called once before a fit (:func:`adapt`).
    ``std_gradients(rng, state, problem, X, y, hyper, kl=None) -> [array per weight matrix]``
        One draw of the gradient of its standard-deviation parameters; a method that has it takes ``--snr``
        (``slangcli.training.loop.gradient_snr``).
    ``stacked() -> module``
        The module that trains several of its fits of one network at once, for ``--tune``'s candidates:
        ``stackable(model, hyper, batch_size)``, ``Runs``, ``run(runs, model, hyper, X, y, *, seed, batch_size,
        n_steps, stop)`` (``slangcli.methods.slang_stacked``).
    """

    Hyper: type
    init: Callable | None = None
    step: Callable | None = None
    posterior: Callable | None = None
    solve: Callable | None = None
    description: str = ""
    display_name: str | None = None
    rank_symbol: str = "rank"
    finite_fields: tuple = ("mu",)
    cache_fields: tuple = ()
    adapt: Callable | None = None
    std_gradients: Callable | None = None
    stacked: Callable | None = None

    def __post_init__(self):
        for name in ("finite_fields", "cache_fields"):
            object.__setattr__(self, name, tuple(getattr(self, name)))


PARTS = tuple(f.name for f in fields(Method))


def describe(method) -> Method:
    """The :class:`Method` record of a registry entry: the record itself, or a module's parts by name with the
    defaults for the ones it does not define. The one place where slang looks a method's parts up."""
    if isinstance(method, Method):
        return method
    return Method(**{name: getattr(method, name) for name in PARTS if hasattr(method, name)})


def check(name: str, method) -> None:
    """Refuse (TypeError) a method that lacks ``Hyper`` or both the step trio and ``solve``."""
    if not hasattr(method, "Hyper"):
        raise TypeError(f"method {name!r} lacks a Hyper dataclass (see slangcli.methods.base)")
    parts = describe(method)
    if parts.solve is None and None in (parts.init, parts.step, parts.posterior):
        raise TypeError(f"method {name!r} has neither init, step and posterior nor solve (see slangcli.methods.base)")


def is_solver(method) -> bool:
    return describe(method).solve is not None


def adapt(method, model: MLP, hyper):
    """``(hyper, note)``: the method's hyperparameters fitted to ``model`` and what to tell the user about it, from
    its ``adapt`` (unchanged, and nothing to say, without one)."""
    hook = describe(method).adapt
    return hook(model, hyper) if hook is not None else (hyper, None)


def display_name(method, name: str) -> str:
    """The method's name in figures: its ``display_name``, else ``name`` (its registry name; also for a method
    this slang does not know, ``method`` None)."""
    return (describe(method).display_name if method is not None else None) or name


def rank_symbol(method) -> str:
    """The symbol of the method's ``rank`` in labels (``"rank"`` for a method this slang does not know, None)."""
    return describe(method).rank_symbol if method is not None else Method.rank_symbol


def takers(methods: dict, part: str) -> list[str]:
    """The names among ``methods`` (name -> method) of those that have the optional ``part`` (e.g.
    ``std_gradients``: the methods that take ``--snr``)."""
    return [name for name, method in methods.items() if getattr(describe(method), part) is not None]


def listing(names) -> str:
    """``"a"``, ``"a and b"``, ``"a, b and c"``: names in a message."""
    names = list(names)
    return " and ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} and {names[-1]}"


def methods_help(methods: dict) -> str:
    """The list of ``methods`` (name -> method) for ``--method``'s help: each name with its description."""
    return "; ".join(f"{name}: {d}" if (d := describe(method).description) else name
                     for name, method in methods.items()) + "."


def samples_per_step(hyper) -> int:
    """Weight samples a step draws (for the thread policy): the ``samples`` hyperparameter, else 1."""
    return int(getattr(hyper, "samples", 1))


def hyperparameter(default, help: str, *, short: str | None = None, choices: tuple | None = None):
    """A field of a method's ``Hyper`` dataclass, declared once: its default, the help text of its command-line
    option ``--name`` (``_`` written ``-``), an optional short flag and choices. Validation stays in the
    dataclass's ``__post_init__`` (one message per bad value); the command line and ``--help`` are generated from
    these declarations (:func:`option_specs`)."""
    return field(default=default, metadata={"help": help, "short": short, "choices": choices})


@dataclass(frozen=True)
class OptionSpec:
    """One command-line option generated from the ``Hyper`` fields of the registered methods that share its
    name: its value type, short flag, choices, and per method its help text and default."""

    name: str
    kind: type
    short: str | None
    choices: tuple | None
    helps: dict  # method name -> help text
    defaults: dict  # method name -> default

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def help_text(self) -> str:
        """The help texts (one per distinct text, prefixed with its methods when they differ), then the
        defaults by method: ``... [slang, full-ef: 0.05; bbb: 0.01]``."""
        by_text: dict = {}
        for method, text in self.helps.items():
            by_text.setdefault(text, []).append(method)
        if len(by_text) == 1:
            text = next(iter(by_text))
        else:
            text = " ".join(f"{', '.join(methods)}: {text}" for text, methods in by_text.items())
        by_default: dict = {}
        for method, default in self.defaults.items():
            by_default.setdefault(repr(default) if isinstance(default, str) else default, []).append(method)
        return f"{text} [" + "; ".join(f"{', '.join(m)}: {d}" for d, m in by_default.items()) + "]"


_KINDS = {"int": int, "float": float, "str": str, "float | None": float, "int | None": int}


def option_specs(methods: dict) -> list[OptionSpec]:
    """The options of every hyperparameter of ``methods`` (name -> method), merged by field name, in the order
    first declared."""
    specs: dict = {}
    for method_name, method in methods.items():
        for f in fields(method.Hyper):
            kind = _KINDS.get(f.type if isinstance(f.type, str) else getattr(f.type, "__name__", ""), str)
            meta = f.metadata
            spec = specs.get(f.name)
            if spec is None:
                spec = specs[f.name] = OptionSpec(f.name, kind, meta.get("short"), meta.get("choices"), {}, {})
            spec.helps[method_name] = meta.get("help") or f.name.replace("_", " ")
            spec.defaults[method_name] = f.default
    return list(specs.values())


def hyper_names(method) -> tuple[str, ...]:
    """The hyperparameter names ``method.Hyper`` takes (each is the command-line option ``--name``)."""
    return tuple(f.name for f in fields(method.Hyper))


def decayed(rate0: float, t: int, decay: float) -> float:
    """``r_t = r_0 / (1 + t^decay)`` for step ``t >= 1`` (so ``r_0 / 2`` throughout when ``decay = 0``)."""
    return rate0 / (1.0 + t**decay)


def require(condition: bool, message: str) -> None:
    """Raise one ConfigError per invalid hyperparameter."""
    if not condition:
        raise ConfigError(message)


def require_memory(need: int, what: str, advice: str) -> None:
    """Refuse, before the work, what takes ``need`` bytes when this process can have fewer
    (``_startup.memory_limit``): one ConfigError naming ``what``, the size and ``advice``, instead of a generic "out
    of memory" once the arrays are allocated, or a machine swapping."""
    limit = memory_limit()
    if limit is not None and need > limit:
        raise ConfigError(f"{what} take {need / 2**30:,.4g} GiB, more than the {limit / 2**30:,.3g} GiB of memory "
                          f"this process can have; {advice}")
