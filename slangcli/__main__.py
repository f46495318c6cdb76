"""The ``slang`` command's entry point: the console script's, and ``python -m slangcli``."""

import signal

from slangcli._startup import short_idle_spin


def main(**kwargs) -> None:
    """The start-up settings (``slangcli._startup``), then the command line: click's ``main``, to which ``kwargs``
    such as ``prog_name`` go. The command line is imported only here, after the settings, since it loads NumPy.

    Called without ``kwargs`` (the console script, ``python -m slangcli``), the process ends with the command: once
    its exit status is decided, the stop signals are ignored while the interpreter shuts down
    (:func:`_ignore_stops`)."""
    short_idle_spin()
    from slangcli.cli import main as cli_main

    if kwargs:  # (a caller's process, which may go on after the command: its signals are left as they are)
        cli_main(**kwargs)
        return
    try:
        cli_main()
    except SystemExit:
        _ignore_stops()
        raise


def _ignore_stops() -> None:
    """Ignore SIGINT, SIGTERM and SIGHUP from here on: the command has finished (click raised ``SystemExit`` with its
    status) and the process only exits. A Ctrl-C during the interpreter's shutdown killed it with SIGINT (exit 130,
    without a word) after a fit had written its run file and printed its table, and a script then resumed a
    complete run. (Ignored, not handled: the interpreter resets a Python handler to the default as it shuts down.)"""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


if __name__ == "__main__":
    main()
