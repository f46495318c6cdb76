"""slang: scalable Gaussian variational inference for logistic regression and MLPs.

The numerical engine (``readers``, ``prepare``, ``models``, ``lowrank``, ``posteriors``, ``methods``, ``train``,
``metrics``, ``io``) never imports the command-line layer (``slangcli.cli``).
"""

__version__ = "0.1.0"
