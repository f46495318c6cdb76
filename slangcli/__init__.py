"""slang: Gaussian posteriors for logistic regression and neural networks by scalable variational inference.

The Python API (the ``slang`` command line is one client of it)::

    import slangcli
    result = slangcli.fit(X, y, hidden=50, standardize=True, epochs=100)   # any array-like X, y
    pred = result.predict(X_new)           # .probabilities, or .mean / .std / .std_aleatoric / .std_epistemic
    result.score(X_test, y_test)           # the metrics of `slang evaluate`
    result.sample(10)                      # parameter vectors theta ~ q, rows (10, D)
    result.compress(rank=2)                # a k-tied posterior (`slang compress`)
    result.save("run.h5")                  # a run file every `slang` command reads
    slangcli.load("run.h5")                # a run file written by `slang fit` or by save()

    from slangcli import SLANGClassifier, SLANGRegressor     # scikit-learn estimators

fit(X, y, **options)
    Fit a posterior with any method of ``slang fit`` (``method="slang"``, ``"bbb"``, ``"ktied"``, ...); the
    method's own hyperparameters are keywords (``rank=10``). Returns a :class:`FitResult`.
load(path)
    A :class:`FitResult` from a run file.
FitResult
    A fitted posterior: ``predict``, ``predict_proba``, ``score``, ``sample``, ``compress``, ``save``; and
    ``posterior``, ``model``, ``metrics``, ``history``, ``config``, ``classes``.
SLANGClassifier, SLANGRegressor
    scikit-learn estimators (``fit``/``predict``/``predict_proba``/``predict(X, return_std=True)``/``score``),
    usable in ``Pipeline``, ``cross_val_score`` and ``GridSearchCV``; scikit-learn itself is not required.
METHODS
    The inference methods by name.

The numerical engine (``data``, ``gaussian``, ``models``, ``methods``, ``training``, ``predictive``, ``runfile``; the
parts in ``docs/ARCHITECTURE.md``) never imports the command-line layer (``slangcli.cli``).
"""

__version__ = "0.1.0"

# before NumPy and SciPy load (see slangcli._startup): under a small memory limit, one BLAS thread
from slangcli._startup import limit_threads_under_small_memory, too_small_address_space  # noqa: E402

limit_threads_under_small_memory()

__all__ = ["fit", "load", "FitResult", "SLANGClassifier", "SLANGRegressor", "METHODS", "__version__"]

# the API's names load on first use (PEP 562), so that importing the package, or the command line, costs nothing
# before it is needed: the command line sets its BLAS policy (slangcli._startup) before NumPy loads
_HOMES = {"fit": "slangcli.api", "load": "slangcli.api", "FitResult": "slangcli.api",
          "SLANGClassifier": "slangcli.estimators", "SLANGRegressor": "slangcli.estimators",
          "METHODS": "slangcli.methods"}


def __getattr__(name):
    if name not in _HOMES:
        raise AttributeError(f"module 'slangcli' has no attribute {name!r}")
    if too_small_address_space() is not None:  # NumPy and SciPy cannot load
        raise ImportError(f"slangcli.{name}: {too_small_address_space()}")
    import importlib

    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted({*globals(), *_HOMES})
