"""Inference methods by their command-line names.

Step methods (driven by ``slangcli.train.run``): ``slang``; the natural-gradient baselines of the SLANG paper's
Table 1, ``full-ef``, ``full-hessian`` (dense precision) and ``mf-ef``, ``mf-hessian`` (diagonal precision); and
Bayes by Backprop, ``bbb``.
"""

from slangcli.methods import bbb, full, meanfield, slang

METHODS = {
    "slang": slang,
    "full-ef": full.EF,
    "full-hessian": full.HESSIAN,
    "mf-ef": meanfield.EF,
    "mf-hessian": meanfield.HESSIAN,
    "bbb": bbb,
}
