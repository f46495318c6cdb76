"""Derived random streams and the minibatch order: every generator of slang comes from ``(seed, stream, index)``.

Randomness is derived, never carried: the generator of step ``t`` is ``default_rng([seed, STEP, t])`` and the
order of epoch ``e`` is a permutation drawn from ``default_rng([seed, ORDER, e])``. A run can therefore stop
after any step and continue from its state alone, bit for bit.

Minibatches: each epoch visits the training set once in a fresh random order, in ``ceil(N / M)`` minibatches
(the last one smaller when M does not divide N).

This module imports nothing from slang, so that every layer (the methods, the training loop, prediction,
tuning) can draw from its own stream without importing the layer that runs it.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "INIT",
    "ORDER",
    "STEP",
    "EVAL",
    "SNR",
    "PREDICT",
    "TUNE",
    "RESTART",
    "CALIBRATE",
    "MEMBER",
    "NOISE_MODEL",
    "NOISE",
    "derive_rng",
    "member_seed",
    "steps_per_epoch",
    "epoch_order",
    "batch_indices",
    "Minibatches",
]

# Stream identifiers of the derived generators.
# stream 4: gradient-SNR draws; 5: weight samples of `slang predict`; 6: folds and fits of `--tune`; 7: the seeds
# of `--restarts`; 8: the training rows `--calibrate` holds out; 9: the seeds of the members of `--members` (fits,
# and a mixture's predictive draws); 10: the rows and weight draws the noise model of `--noise-model` is
# fitted to; 11: the rows and weight draws of a learned noise precision's last update, once training ends
INIT, ORDER, STEP, EVAL, SNR, PREDICT, TUNE, RESTART, CALIBRATE, MEMBER, NOISE_MODEL, NOISE = (
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)


def derive_rng(seed: int, stream: int, *index: int) -> np.random.Generator:
    return np.random.default_rng([seed, stream, *index])


def member_seed(seed: int, k: int) -> int:
    """The seed of member ``k`` of an ensemble of posteriors (``slang fit --members K``): member 0 has ``seed``
    itself (so one member is the single fit), member ``k >= 1`` a number below 2**31 drawn from the generator
    ``(seed, MEMBER, k)``. A fit's member k trains from ``member_seed(--seed, k)``, and a mixture's predictive
    draws member k's weight samples from ``member_seed(its seed, k)``."""
    return seed if k == 0 else int(derive_rng(seed, MEMBER, k).integers(2**31))


def steps_per_epoch(n_data: int, batch_size: int) -> int:
    return -(-n_data // batch_size)


def epoch_order(seed: int, epoch: int, n_data: int) -> np.ndarray:
    """The order in which epoch ``epoch`` (0-based) visits the training examples."""
    return derive_rng(seed, ORDER, epoch).permutation(n_data)


def batch_indices(seed: int, t: int, n_data: int, batch_size: int) -> np.ndarray:
    """Example indices of global step ``t`` (0-based)."""
    return Minibatches(seed, n_data, batch_size)(t)[2]


class Minibatches:
    """The minibatches of a run's steps, as :func:`batch_indices` gives them, each epoch's order drawn once: the
    schedule of the training loops (``slangcli.training.loop.run``, and the stacked runs of ``--tune``)."""

    def __init__(self, seed: int, n_data: int, batch_size: int):
        self.seed, self.n_data, self.batch_size = seed, n_data, batch_size
        self.per_epoch = steps_per_epoch(n_data, batch_size)
        self._epoch, self._order = -1, None

    def __call__(self, t: int) -> tuple[int, int, np.ndarray]:
        """``(epoch, j, indices)`` of global step ``t`` (0-based): its epoch, its place in the epoch and the
        indices of its examples."""
        epoch, j = divmod(t, self.per_epoch)
        if epoch != self._epoch:
            self._epoch, self._order = epoch, epoch_order(self.seed, epoch, self.n_data)
        return epoch, j, self._order[j * self.batch_size : (j + 1) * self.batch_size]
