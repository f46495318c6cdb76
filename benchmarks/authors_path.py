"""``slang`` with SLANG's network evaluated at ``2 mu + eps``, as the authors' public PyTorch code evaluates it: a
diagnostic for comparing with the SLANG paper's BNN numbers, never a method to use.

    python benchmarks/authors_path.py fit DATA -o RUN.h5 --method slang [slang fit's options]

The published UCI and MNIST figures came from code that adds the weight sample ``mu + eps`` to network weights that
already equal ``mu`` (``../shared/reference/README.md``), in training and in prediction. Its fixed point has the
mean ``w = 2 mu`` under a prior of precision ``lambda / 2`` while the precision of the weights' noise keeps the full
``lambda``: less noise in every direction the data leave to the prior than any Gaussian posterior of one prior
gives. This script runs the ``slang`` command with exactly that change, so that the two paths can be compared on
the same engine, data and budget:

- each training step draws ``theta = 2 mu + eps`` instead of ``mu + eps`` (the update itself is unchanged: the
  per-example gradients at ``theta`` are used as the gradient in ``mu``, as that code uses them);
- the posterior written to the run file is ``N(2 mu, (U U^T + diag d)^{-1})``, which is what that code predicts
  with, so ``slang evaluate`` and ``slang predict`` score it as the authors' code would.

The run file records ``authors-path`` as its program. Resume it with this script, not with ``slang``.
``benchmarks/mnist.py --authors-path`` runs its fit through here.
"""

from __future__ import annotations

import dataclasses

from slangcli.cli import fit as fit_command, main
from slangcli.gaussian import lowrank
from slangcli.gaussian import noise
from slangcli.methods import slang


def step(rng, state, problem, X, y, hyper):
    """``slang.step`` with the samples drawn around ``2 mu``."""
    Z = noise.sample_columns(rng, state.mu.size, hyper.samples)
    theta = lowrank.sample_noise(state.U, state.d, Z, state.WtW)
    theta += (2.0 * state.mu).astype(theta.dtype, copy=False)[:, None]
    return slang.update(state, theta.T.astype(hyper.dtype, copy=False), problem, X.astype(hyper.dtype, copy=False),
                        y, hyper)


def posterior(state, faithful=slang.posterior):
    """``slang.posterior`` with the mean the network is evaluated at, ``2 mu``."""
    return dataclasses.replace(faithful(state), mean=2.0 * state.mu)


def invocation(recorded=fit_command.invocation):
    """The command line for the run file, under this script's name, so the run says how it was made."""
    return ["authors-path", *recorded()[1:]]


if __name__ == "__main__":
    slang.step, slang.posterior = step, posterior
    fit_command.invocation = invocation
    main(prog_name="authors-path")
