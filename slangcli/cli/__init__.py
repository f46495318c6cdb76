"""The ``slang`` command line: a click group whose commands are thin wrappers around the library.

Exit codes: 0 success; 1 bad data, a bad or unreadable run file, a diverged fit, an output that cannot be written
(disk full) or memory exhausted; 2 usage errors (unknown option, invalid value or combination, an unusable
output path); 128 + the signal number when stopped by a signal (130 SIGINT, 129 SIGHUP, 143 SIGTERM), with no
partial or temporary output left; 141 when the reader of stdout or of stderr went away (a closed pipe, as ``head``
does: quietly, like a process killed by SIGPIPE). Messages go to stderr as one line (a newline or other unprintable
character in a file name or value is written as its escape); data (``--json``) to stdout.
"""

from __future__ import annotations

import importlib
import sys

import click

from slangcli import __version__
from slangcli._startup import too_small_address_space

if too_small_address_space() is not None:
    # refused before NumPy, SciPy and h5py are imported: under such a limit they fail to load (a MemoryError
    # traceback under ulimit -v 200000), and the first BLAS call would spin forever inside OpenBLAS
    sys.stderr.write(f"slang: error: {too_small_address_space()}\n")
    raise SystemExit(1)

from slangcli.cli.output import HelpWritten, error, one_line, stdout_gone, writing_eagerly  # noqa: E402
from slangcli.errors import OUT_OF_MEMORY, SlangError, exit_code
from slangcli.runfile import outputs
from slangcli.runfile.outputs import Terminated, raise_swallowed_signal, signals_raise
from slangcli.threads import keep_freed_memory


# each command's module, loaded when the command runs (or its help is shown): `slang fit` does not import the
# sweep, the figures or the compression, and `slang --version` none of them; in the order `slang --help` lists them
COMMANDS = {"fit": "slangcli.cli.fit", "evaluate": "slangcli.cli.evaluate", "predict": "slangcli.cli.predict",
            "compress": "slangcli.cli.compress", "inspect": "slangcli.cli.inspect", "plot": "slangcli.cli.plot",
            "sweep": "slangcli.cli.sweep"}


class SlangGroup(HelpWritten, click.Group):
    """Loads each command's module on first use, and maps the engine's exceptions to one-line messages and exit
    codes."""

    def parse_args(self, ctx, args):
        # (click before 8.2 prints a bare `slang`'s help here, on stdout, outside the handlers of invoke)
        def parse(ctx, param, value):
            return super(SlangGroup, self).parse_args(ctx, args)

        return writing_eagerly(parse)(ctx, None, None)

    def list_commands(self, ctx):
        return [*COMMANDS, *sorted(set(self.commands) - set(COMMANDS))]

    def get_command(self, ctx, name):
        if name not in self.commands and name in COMMANDS:
            self.add_command(getattr(importlib.import_module(COMMANDS[name]), name))
        return super().get_command(ctx, name)

    def make_context(self, info_name, args, parent=None, **extra):
        # the command line as given, for the run file (sys.argv is another program's when called in-process)
        argv = [info_name or "slang", *args]
        ctx = super().make_context(info_name, args, parent=parent, **extra)
        ctx.meta["slang.argv"] = argv
        return ctx

    def invoke(self, ctx):
        try:
            with signals_raise():
                try:
                    result = super().invoke(ctx)
                except Exception:
                    # a signal's exception that a library turned into another is still the signal (a SIGINT
                    # inside h5py's type conversion while a run file is written comes out as a TypeError)
                    raise_swallowed_signal()
                    raise
                raise_swallowed_signal()  # a signal lost inside a finaliser still stops with 128 + its number
                return result
        except click.ClickException as exc:
            # a usage error's message names what the user typed: one line, as error() writes every other message
            exc.message = one_line(exc.message)
            raise
        except SlangError as exc:
            error(str(exc))
            ctx.exit(exit_code(exc))
        except KeyboardInterrupt:
            done = ", ".join(outputs.written)
            error(f"interrupted (SIGINT) after writing {done}" if done else "interrupted (SIGINT): nothing written")
            ctx.exit(130)
        except Terminated as exc:
            done = ", ".join(outputs.written)
            error(f"terminated ({exc}) after writing {done}" if done else f"terminated ({exc}): nothing written")
            ctx.exit(128 + exc.signum)
        except MemoryError as exc:
            error(OUT_OF_MEMORY)
            ctx.exit(exit_code(exc))
        except BrokenPipeError:
            stdout_gone()
            ctx.exit(141)


@click.group(cls=SlangGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="slang")
def main():
    """Gaussian posteriors for logistic regression and neural networks by scalable variational inference.

    \b
    slang fit DATA -o RUN.h5      fit a posterior, write it with its metrics
    slang evaluate RUN.h5 [DATA]  score a saved posterior
    slang compress RUN.h5 --rank K -o OUT.h5
                                  rank-K k-tied compression of the posterior standard deviations
    slang predict RUN.h5 DATA -o OUT.csv
                                  per-example predictions with their uncertainty
    slang inspect RUN.h5          show what a run file holds
    slang plot RUN.h5... --kind KIND -o FIG.png
                                  figures: training, calibration, spectrum, posterior, sweep
    slang sweep DATA... --rank 1,2,4 --seed 0-4 -o DIR
                                  a grid of fits on Dask, resumable, with a results table
    """
    keep_freed_memory()


for _option in main.params:  # --version, written as --help is
    if _option.name == "version":
        _option.callback = writing_eagerly(_option.callback)


__all__ = ["main", "COMMANDS"]
