"""Inference methods by their command-line names.

Step methods (driven by ``slangcli.train.run``): ``slang``; the natural-gradient baselines of the SLANG paper's
Table 1, ``full-ef``, ``full-hessian`` (dense precision) and ``mf-ef``, ``mf-hessian`` (diagonal precision); and
Bayes by Backprop, ``bbb``, and its k-tied Normal variant, ``ktied``; IVON, ``ivon``. Solvers (called once by
``slangcli.workflow.fit``): ``exact-full`` and ``exact-mf``,
the ELBO-optimal Gaussians of Bayesian logistic regression.
"""

from slangcli.methods import bbb, exact, full, ivon, ktied, meanfield, slang

METHODS = {
    "slang": slang,
    "full-ef": full.EF,
    "full-hessian": full.HESSIAN,
    "mf-ef": meanfield.EF,
    "mf-hessian": meanfield.HESSIAN,
    "bbb": bbb,
    "ktied": ktied,
    "ivon": ivon,
    "exact-full": exact.FULL,
    "exact-mf": exact.MEAN_FIELD,
}
