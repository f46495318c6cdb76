"""Inference methods by their command-line names: the registry.

Step methods (driven by ``slangcli.training.loop.run``) and solvers (called once by ``slangcli.training.fitting``); each
says what it is in its own declarations (``description``: ``slang fit --help`` lists them).

A method is a module (or ``base.Method`` record) that follows the protocol of ``slangcli.methods.base``
(:class:`~slangcli.methods.base.Method` lists every part and its default): its ``Hyper`` dataclass declares each
hyperparameter once with ``base.hyperparameter`` (default, help, validation in ``__post_init__``), and
``init``/``step``/``posterior`` (or ``solve``) with the optional parts. Adding one is its module and one line here
(or :func:`register`): ``slang fit --method``, its options and ``--help``, checkpoints and resume, ``slangcli.fit``
and the estimators then take it.
"""

from dataclasses import replace

from slangcli.methods import base, bbb, exact, full, ivon, ktied, meanfield, slang, slang_stacked

METHODS = {
    # SLANG, with its batched form: several fits of one network at once (--tune's candidates), which builds on
    # slang's own Hyper, State, init and step (so it is named here, not in slang.py, which it imports)
    "slang": replace(base.describe(slang), stacked=lambda: slang_stacked),
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
    """Add ``method`` under ``name`` (e.g. from a plugin package); refuses a name already taken, and a method that
    lacks a required part of the protocol."""
    if name in METHODS:
        raise ValueError(f"a method named {name!r} is already registered")
    base.check(name, method)
    METHODS[name] = method
