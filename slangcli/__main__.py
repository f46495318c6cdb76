"""The ``slang`` command's entry point: the console script's, and ``python -m slangcli``."""

from slangcli._startup import short_idle_spin


def main(**kwargs) -> None:
    """The start-up settings (``slangcli._startup``), then the command line: click's ``main``, to which ``kwargs``
    such as ``prog_name`` go. The command line is imported only here, after the settings, since it loads NumPy."""
    short_idle_spin()
    from slangcli import cli

    cli.WHOLE_PROCESS = True  # a signal after the command has finished does not make it look stopped
    cli.main(**kwargs)


if __name__ == "__main__":
    main()
