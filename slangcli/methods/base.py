"""What every inference method shares: the problem it is given, the learning-rate schedule, and the shape of a
method.

A method is either trained by steps or solved. A *step method* exports ``Hyper`` (its validated
hyperparameters), ``init(rng, problem, hyper) -> state``, ``step(rng, state, problem, X, y, hyper) -> (state,
info)`` and ``posterior(state) -> posterior``; states are NamedTuples of arrays plus the step counter ``t``, and
the training loop (``slangcli.train``) drives any of them. A *solver* exports ``Hyper`` and
``solve(problem, X, y, hyper) -> (posterior, info)`` and is called once on the whole training set
(``slangcli.workflow.fit`` dispatches on :func:`is_solver`).

The registry (``slangcli.methods.METHODS``) holds modules, or :class:`Method` records where one module serves two
variants that differ only in a function argument (``full-ef`` and ``full-hessian``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Callable, NamedTuple

import numpy as np

from slangcli.errors import ConfigError
from slangcli.models import MLP


@dataclass(frozen=True)
class Problem:
    """The model, its per-parameter prior precision ``lambda : (D,)`` and the training-set size ``N``."""

    model: MLP
    prior_precision: np.ndarray
    n_data: int


class Method(NamedTuple):
    """A registry entry with the attributes of a method module: the step trio, or ``solve``, and the optional
    parts of the protocol (see :func:`finite_fields`, :func:`cache_fields`, :func:`adapt`, :func:`display_name`,
    :func:`rank_symbol`)."""

    Hyper: type
    init: Callable | None = None
    step: Callable | None = None
    posterior: Callable | None = None
    solve: Callable | None = None
    finite_fields: tuple = ("mu",)
    cache_fields: tuple = ()
    adapt: Callable | None = None


def finite_fields(method) -> tuple[str, ...]:
    """The state arrays checked for finiteness after every step (O(D) each; a method lists the ones a diverging
    step reaches first), declared as ``finite_fields`` (default: the mean ``mu``)."""
    return tuple(getattr(method, "finite_fields", ("mu",)))


def cache_fields(method) -> tuple[str, ...]:
    """State fields that only cache what the next step can recompute (``None`` allowed): not required in a
    checkpoint and not restored from one (``cache_fields``; default none)."""
    return tuple(getattr(method, "cache_fields", ()))


def adapt(method, model: MLP, hyper):
    """``(hyper, note)``: the method's hyperparameters fitted to ``model`` (e.g. a rank capped by the parameter
    count) and what to tell the user about it (None: nothing), from the method's ``adapt`` hook if it has one."""
    hook = getattr(method, "adapt", None)
    return hook(model, hyper) if hook is not None else (hyper, None)


def display_name(method, name: str) -> str:
    """The method's name in figures (``"SLANG"``, ``"k-tied"``), declared as ``display_name``; default its
    registry name ``name``."""
    return getattr(method, "display_name", name)


def rank_symbol(method) -> str:
    """The symbol of the method's ``rank`` hyperparameter in labels, after its paper (``"L"``, the rank of SLANG's
    precision; ``"k"``, k-tied's), declared as ``rank_symbol``; default ``"rank"``."""
    return getattr(method, "rank_symbol", "rank")


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


def is_solver(method) -> bool:
    return getattr(method, "solve", None) is not None


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
