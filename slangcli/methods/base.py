"""What every inference method shares: the problem it is given and the learning-rate schedule.

A method module exports ``Hyper`` (its validated hyperparameters), ``init(rng, problem, hyper) -> state``,
``step(rng, state, problem, X, y, hyper) -> (state, info)`` and ``posterior(state) -> posterior``; states are
NamedTuples of arrays plus the step counter ``t``. The training loop (``slangcli.train``) drives any of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slangcli.errors import ConfigError
from slangcli.models import MLP


@dataclass(frozen=True)
class Problem:
    """The model, its per-parameter prior precision ``lambda : (D,)`` and the training-set size ``N``."""

    model: MLP
    prior_precision: np.ndarray
    n_data: int


def decayed(rate0: float, t: int, decay: float) -> float:
    """``r_t = r_0 / (1 + t^decay)`` for step ``t >= 1`` (so ``r_0 / 2`` throughout when ``decay = 0``)."""
    return rate0 / (1.0 + t**decay)


def require(condition: bool, message: str) -> None:
    """Raise one ConfigError per invalid hyperparameter."""
    if not condition:
        raise ConfigError(message)
