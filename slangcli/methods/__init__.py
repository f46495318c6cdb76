"""Inference methods by their command-line names: the registry.

Step methods (driven by ``slangcli.train.run``): ``slang``; the natural-gradient baselines of the SLANG paper's
Table 1, ``full-ef``, ``full-hessian`` (dense precision) and ``mf-ef``, ``mf-hessian`` (diagonal precision); and
Bayes by Backprop, ``bbb``, and its k-tied Normal variant, ``ktied``; IVON, ``ivon``. Solvers (called once by
``slangcli.workflow.fit``): ``exact-full`` and ``exact-mf``,
the ELBO-optimal Gaussians of Bayesian logistic regression.

A method is a module (or ``base.Method`` record) that follows ``slangcli.methods.base``: its ``Hyper`` dataclass
declares each hyperparameter once with ``base.hyperparameter`` (default, help, validation in ``__post_init__``),
and ``init``/``step``/``posterior`` (or ``solve``) with the optional ``finite_fields``, ``cache_fields``,
``adapt`` and ``stacked``. Adding one is its module and one line here (or :func:`register`): ``slang fit
--method``, its options and ``--help``, checkpoints and resume, ``slangcli.fit`` and the estimators then take it.
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


def register(name: str, method) -> None:
    """Add ``method`` under ``name`` (e.g. from a plugin package); refuses a name already taken."""
    if name in METHODS:
        raise ValueError(f"a method named {name!r} is already registered")
    if not hasattr(method, "Hyper"):
        raise TypeError(f"method {name!r} lacks a Hyper dataclass (see slangcli.methods.base)")
    METHODS[name] = method
