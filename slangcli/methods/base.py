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

from dataclasses import dataclass, fields
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
    """A registry entry with the attributes of a method module: the step trio, or ``solve``."""

    Hyper: type
    init: Callable | None = None
    step: Callable | None = None
    posterior: Callable | None = None
    solve: Callable | None = None


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
