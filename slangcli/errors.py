"""The project's exception types.

The engine raises these; the command-line layer maps each to an exit code and a one-line message
(``DataError``, ``FormatError``, ``DivergenceError`` and ``ConvergenceError`` exit 1; ``ConfigError`` and click's
usage errors exit 2; ``MissingExtra`` 3; ``Interrupted`` 128 + the signal number).
"""


class SlangError(Exception):
    """Base class of every error ``slang`` reports to its user without a traceback."""


class DataError(SlangError, ValueError):
    """Input data that cannot be used: malformed file, non-finite value, bad labels, shape mismatch (a ValueError,
    as Python callers of the API expect)."""


class DataTypeError(DataError, TypeError):
    """Input of the wrong type: non-numbers where numbers are needed, sparse or complex arrays (also a
    TypeError)."""


class FormatError(SlangError):
    """A run file that is not a valid slang HDF5 file of a format version this slang reads."""


class DivergenceError(SlangError):
    """Training produced non-finite values."""


class ConfigError(SlangError, ValueError):
    """An invalid combination of hyperparameters or options (a ValueError)."""


class MissingExtra(SlangError, ImportError):
    """A command or option needs an optional extra that is not installed; the message says which ``pip install``
    brings it (an ImportError, as Python callers expect of a missing package)."""


class ConvergenceError(SlangError):
    """An optimiser (the exact-VI solvers) stopped before reaching its tolerance."""


class Interrupted(SlangError):
    """A fit stopped on request (SIGINT, SIGTERM) before its last step; ``checkpointed`` says whether its state
    was written for ``slang fit --resume``, ``hint`` (optional) what the user should know about the work lost."""

    def __init__(self, step: int, n_steps: int, checkpointed: bool, message: str | None = None,
                 hint: str | None = None):
        super().__init__(message or f"interrupted at step {step} of {n_steps}")
        self.step, self.n_steps, self.checkpointed, self.hint = step, n_steps, checkpointed, hint


# what the command line says when memory ran out (a MemoryError: exit 1)
OUT_OF_MEMORY = "out of memory (the data, the model or a requested size is too large for this machine)"


def exit_code(exc: BaseException) -> int:
    """The exit status of a command that stopped with ``exc``, one of these errors or a MemoryError: 2 for a
    ConfigError (a usage error), 3 for a MissingExtra (an optional extra to install), 1 for the others."""
    if isinstance(exc, MissingExtra):
        return 3
    return 2 if isinstance(exc, ConfigError) else 1
