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

The numerical engine (``readers``, ``prepare``, ``models``, ``lowrank``, ``posteriors``, ``methods``, ``train``,
``metrics``, ``io``) never imports the command-line layer (``slangcli.cli``).
"""

__version__ = "0.1.0"

# before NumPy and SciPy load (see slangcli._startup): under a small memory limit, one BLAS thread
from slangcli._startup import limit_threads_under_small_memory, too_small_address_space  # noqa: E402

limit_threads_under_small_memory()

__all__ = ["fit", "load", "FitResult", "SLANGClassifier", "SLANGRegressor", "METHODS", "__version__"]

if too_small_address_space() is None:
    from slangcli.api import FitResult, fit, load  # noqa: E402
    from slangcli.estimators import SLANGClassifier, SLANGRegressor  # noqa: E402
    from slangcli.methods import METHODS  # noqa: E402
else:  # NumPy and SciPy cannot load: `import slangcli.cli` says so in one line, the API's names on first use

    def __getattr__(name):
        if name in __all__:
            raise ImportError(f"slangcli.{name}: {too_small_address_space()}")
        raise AttributeError(f"module 'slangcli' has no attribute {name!r}")
