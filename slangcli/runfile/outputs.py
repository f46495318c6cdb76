"""Writing an output file: checked before any work, written under a temporary name, renamed into place.

Every command that writes (``fit``, ``predict``, ``compress``, ``plot``, ``sweep``) goes through
:func:`check_output_path` before it reads or computes anything and through :func:`atomic_output` when it writes,
so each refuses the same outputs with the same words, and none leaves a partial or temporary file behind:

- the output must be a regular file or not exist: a device, a FIFO, a socket, a directory, a dangling symlink or a
  symlink to any of these is refused (replacing ``/dev/null`` with an HDF5 file is never what was meant); a
  symlink to a regular file is written through (its target is replaced);
- its directory must exist and be writable, and its name must leave room for the temporary name's affixes;
- a full disk or a file-size limit (``ENOSPC``, ``EDQUOT``, ``EFBIG``) while writing becomes
  :class:`OutputError` "no space left on device writing OUT"; ``SIGXFSZ`` is ignored so that the write fails
  with ``EFBIG`` instead of killing the process (inside libhdf5 that killed it with a core dump);
- the temporary file is removed when anything fails, including the exceptions :func:`signals_raise` turns
  ``SIGTERM`` and ``SIGHUP`` into.

No click here: the command line maps :class:`OutputError` to exit 1 and :class:`UnusableOutput` to a usage error.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import secrets
import stat
from pathlib import Path

from slangcli.errors import ConfigError, SlangError

# ".NAME." + 8 random hex digits + ".tmp" (_temporary_name), with a little room to spare
TEMPORARY_AFFIXES = len("..") + 8 + len(".tmp") + 6
NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class OutputError(SlangError, OSError):
    """An output file could not be written (disk full, file-size limit, permissions): exit 1 (an OSError, as
    Python callers of ``write_run`` expect)."""


class UnusableOutput(ConfigError):
    """An output path that cannot be used at all (a device, a directory, a name too long): a usage error."""


class Terminated(BaseException):
    """Raised in the main thread by :func:`signals_raise`'s handlers: the process received ``signum``.

    A BaseException, like KeyboardInterrupt, so that ``except Exception`` never swallows it while every
    ``except BaseException`` / ``finally`` cleanup still runs."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def one_line(text: str) -> str:
    """``text`` with each character that is not printable (a newline, a tab, an escape) written as its Python
    escape (``\\n``, ``\\t``, ``\\x1b``), so that a message naming a file called ``a<newline>b`` stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _show(path) -> str:
    """``path`` as it appears in a one-line message (a newline in a name would break the line)."""
    return one_line(os.fspath(path))


def check_output_path(output) -> None:
    """Refuse, before any work, an output that is not (or would not be) a regular file in a writable directory.

    Raises :class:`UnusableOutput` naming the path and the reason."""
    text = os.fspath(output)
    shown = _show(text)
    if not text:
        # (an empty path resolves to the working directory, which is found only when the finished fit is written)
        raise UnusableOutput("the output path is empty; give a file name")
    _check_path_length(text)
    # (imported here: the command line imports this module for every command, --version too, which loads no NumPy)
    from slangcli.data.readers._common import names_a_descriptor

    if names_a_descriptor(text):
        # /dev/stdout leads to the file the shell opened (for appending, say): renaming the finished output onto
        # that file's name would replace the file, and what was written to it before
        raise UnusableOutput(f"{shown} is a descriptor this process has open (a standard stream), not a file name; "
                             "give the file's own name (predict writes to standard output with -o -)")
    if text.endswith(os.sep) or os.path.isdir(text):
        raise UnusableOutput(f"{shown} is a directory; give a file name")
    if os.path.islink(text) and not os.path.exists(text):
        raise UnusableOutput(f"{shown} is a symbolic link to nothing ({_show(os.readlink(text))}); refusing to "
                             "replace it")
    if os.path.exists(text):
        mode = os.stat(text).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
            via = " (through a symbolic link)" if os.path.islink(text) else ""
            raise UnusableOutput(f"{shown} is {kind}{via}; slang writes only regular files")
        if not os.access(text, os.W_OK):
            # renaming the finished file onto it would replace it all the same: a file its owner made read-only is
            # refused by every command alike
            raise UnusableOutput(f"{shown} is read-only; refusing to replace it")
    # a symlink to a regular file is written through: its target is replaced (otherwise the path as given, which
    # may be short where the absolute one is beyond PATH_MAX)
    target = os.path.realpath(text) if os.path.islink(text) else text
    parent = os.path.dirname(target) or "."
    if not os.path.isdir(parent):
        if os.path.exists(parent):  # (-o file.h5/x.h5: its "directory" is a file)
            raise UnusableOutput(f"{_show(os.path.dirname(text))} is not a directory")
        raise UnusableOutput(f"directory {_show(os.path.dirname(text) or '.')} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UnusableOutput(f"directory {_show(os.path.dirname(text) or '.')} is not writable")
    try:
        name_max = os.pathconf(parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    name = os.path.basename(target)
    if len(os.fsencode(name)) + TEMPORARY_AFFIXES > name_max:
        raise UnusableOutput(f"{_show(name)[:40]}...: the file name is {len(os.fsencode(name))} bytes long; at most "
                             f"{name_max - TEMPORARY_AFFIXES} fit in this directory beside the temporary name")


def _check_path_length(text: str) -> None:
    """Refuse a path the system cannot open whole (longer than PATH_MAX), or one whose directory the system
    cannot reach (a component longer than NAME_MAX): ``os.path.isdir`` says False to both, which would read as a
    directory that does not exist."""
    directory = os.path.dirname(text) or "."
    try:
        os.stat(directory)
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise UnusableOutput(f"{_show(text)[:60]}...: the path of its directory is too long for this system "
                                 f"({len(os.fsencode(directory))} bytes)") from None
        return  # other problems (no such directory, no permission) are named by the checks that follow
    try:
        path_max = os.pathconf(directory, "PC_PATH_MAX")
    except (OSError, ValueError):
        path_max = 4096
    if len(os.fsencode(text)) + TEMPORARY_AFFIXES >= path_max:
        raise UnusableOutput(f"{_show(text)[:60]}...: the path is {len(os.fsencode(text))} bytes long; at most "
                             f"{path_max - TEMPORARY_AFFIXES - 1} fit on this system beside the temporary name")


def _temporary_name(path: Path) -> str:
    """A name for a temporary file beside ``path``: ``.NAME.<8 random hex digits>.tmp``."""
    return os.path.join(path.parent, f".{path.name}.{secrets.token_hex(4)}.tmp")


def _create(tmp: str) -> None:
    """Make ``tmp``, a new empty file (never an existing one), with the permissions of any new file (0666 less
    the umask)."""
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))


def _keep_permissions(target, tmp) -> None:
    """Give ``tmp`` the permission bits of the file ``target`` it is about to replace, and its owner and group
    where this process may: a private file (0600) stays private when a command rewrites it."""
    try:
        st = os.stat(target)
    except (FileNotFoundError, NotADirectoryError):
        return
    os.chmod(tmp, stat.S_IMODE(st.st_mode))
    if (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
        with contextlib.suppress(PermissionError):  # (only the superuser may give a file away)
            os.chown(tmp, st.st_uid, st.st_gid)


def temporary_beside(path) -> str:
    """A new empty file in ``path``'s directory (so renaming it onto ``path`` is atomic), named ``.NAME.*.tmp``,
    with the permissions of any new file."""
    path = Path(path)
    while True:
        tmp = _temporary_name(path)
        try:
            _create(tmp)
            return tmp
        except FileExistsError:
            continue


def is_no_space(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is a full disk or a file-size limit.

    libhdf5 reports a failed write as its own error, whose message carries the system's error text."""
    return _no_space_code(exc) is not None


@contextlib.contextmanager
def atomic_output(path):
    """Yield a temporary path beside ``path``; rename it onto ``path`` when the block completes, remove it when
    the block fails (a full disk then raises :class:`OutputError`)."""
    target = Path(os.path.realpath(path))  # write through a symlink to a regular file, keeping the link
    # Python runs a signal handler between any two bytecodes of the main thread, whichever thread took the signal
    # (blocking signals in the main thread did not keep them from a BLAS thread), so its exception may come at any
    # point, also while the temporary file is made: the name is chosen first and the file made inside the block
    # that removes it, and the rename is recorded once it has happened, whenever the exception comes.
    tmp, renaming = None, False
    try:
        while tmp is None:
            tmp = _temporary_name(target)
            try:
                _create(tmp)
            except FileExistsError:
                tmp = None  # another's file, never removed here
        raise_swallowed_signal()  # a signal whose exception was lost before the output was begun
        yield tmp
        raise_swallowed_signal()  # a signal whose exception was lost during the block still stops the rename
        _keep_permissions(target, tmp)
        renaming = True
        os.replace(tmp, target)
        if os.fspath(path) not in written:  # (a file rewritten, as a sweep's table is, is named once)
            written.append(os.fspath(path))
    except BaseException as exc:
        if renaming and tmp is not None and not os.path.lexists(tmp):
            if os.fspath(path) not in written:
                written.append(os.fspath(path))  # renamed: a signal's message names it
            raise
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):  # (never made: its directory is a file)
                Path(tmp).unlink()
        if isinstance(exc, OSError) or is_no_space(exc):
            raise output_error(path, exc) from None
        raise


# what stopped a write, by its error code (a full disk, a quota, this process's file-size limit)
NO_SPACE_TEXT = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
                 errno.EFBIG: "the file-size limit (ulimit -f, or the file system's own) reached"}


def _no_space_code(exc: BaseException | None) -> int | None:
    """Which of ``NO_SPACE`` stopped a write that raised ``exc`` (or an exception it was raised from), if any."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in NO_SPACE:
            return exc.errno
        text = str(exc)
        for code in NO_SPACE:
            if os.strerror(code) in text:
                return code
        exc = exc.__cause__ or exc.__context__
    return None


def output_error(path, exc: BaseException) -> OutputError:
    code = _no_space_code(exc)
    if code is not None:
        return OutputError(f"{NO_SPACE_TEXT[code]} writing {_show(path)}")
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return OutputError(f"cannot write {_show(path)}: {reason}")


@contextlib.contextmanager
def hdf5_image(tmp):
    """An HDF5 file built in memory and written to ``tmp`` in one plain write when the block completes.

    libhdf5 does not survive a failed write of its own (a full disk or ``ulimit -f`` crashed the process with a
    segmentation fault, after pages of HDF5 error stacks); a Python write fails with an OSError that
    :func:`atomic_output` reports. The cost is one copy of the file in memory while it is written."""
    import io

    import h5py

    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as f:
        yield f
    with open(tmp, "wb") as stream:
        stream.write(buffer.getbuffer())


@contextlib.contextmanager
def writing_stdout():
    """Turn a full stdout (``> /dev/full``) or a closed one (``>&-``) into a one-line OutputError; a closed pipe
    (BrokenPipeError) is left to the command group, which exits quietly."""
    check_stdout()
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        discard_stdout()
        raise output_error("stdout", exc) from None


def write_all(buffer, data: bytes) -> None:
    """Write ``data`` to the binary stream ``buffer`` (stdout's), all of it or an OSError. Python's buffered writer
    returns a short count, without an error, when a pipe's reader goes away in the middle of a large write (``|
    head -c 50`` of 475 kB of JSON exited 0 with 64 kB written); the next write raises BrokenPipeError."""
    view = memoryview(data)
    while view:
        written = buffer.write(view)
        if not written:
            raise BrokenPipeError(errno.EPIPE, "nothing written to stdout")
        view = view[written:]


class _Utf8:
    """Text written to a binary stream as UTF-8, each write whole (:func:`write_all`); not a TextIOWrapper, which
    would own stdout's buffer and close it if a failed write left it undetached."""

    def __init__(self, buffer):
        self.buffer = buffer

    def write(self, text: str) -> None:
        write_all(self.buffer, text.encode("utf-8"))


@contextlib.contextmanager
def utf8_stdout():
    """stdout as a writer of text in UTF-8, as files are written, whatever the locale's encoding (under ``LC_ALL=C``
    without Python's UTF-8 coercion, or a Latin-1 locale, a label such as '東京' ended in a UnicodeEncodeError), each
    write whole or an OSError; flushed at the end. A text-only stream that a caller put in place of stdout (it has
    no buffer) is written as it is."""
    import sys

    sys.stdout.flush()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:
        yield sys.stdout
        sys.stdout.flush()
        return
    yield _Utf8(buffer)
    buffer.flush()


def check_stdout(what: str = "the output") -> None:
    """Refuse to write to a closed stdout: Python sets ``sys.stdout`` to None when file descriptor 1 was closed at
    start-up (``>&-``)."""
    import sys

    if sys.stdout is None:
        raise OutputError(f"cannot write {what} to stdout: it is closed")


def discard_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of what is still buffered cannot fail
    again (and print "Exception ignored ...") once a full or closed stdout has been reported."""
    import sys

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


# the exceptions of signals received while signals_raise is in force, kept until the command ends: raised again
# by raise_swallowed_signal, in case they were lost where they were raised (see _keep_swallowed_signals)
_swallowed: list[BaseException] = []
# the outputs this process has renamed into place, for the message of a signal that arrives after them
written: list[str] = []


def _keep_swallowed_signals(default_hook):
    """An ``sys.unraisablehook`` that keeps, silently, the exceptions of signal handlers.

    Python runs a signal handler between two bytecodes of the main thread, which may be inside a finaliser or a
    weakref callback (h5py and NumPy run many). An exception raised there cannot propagate: the interpreter
    prints "Exception ignored ... Traceback" and carries on, so a SIGTERM in the middle of a write was lost and
    the command completed with exit 0. Kept here, it is raised again at the next check
    (:func:`raise_swallowed_signal`: before an output is renamed into place, and when a command returns).

    Others are lost without a trace: NumPy's ``np.char.mod``, which formats predict's CSV cells, clears an
    exception raised while it calls ``str.__mod__``; so the handlers of :func:`signals_raise` keep every
    exception they raise as well."""

    def hook(unraisable):
        if isinstance(unraisable.exc_value, (Terminated, KeyboardInterrupt)):
            _keep(unraisable.exc_value)
        else:
            default_hook(unraisable)

    return hook


def _keep(exc: BaseException) -> None:
    if not any(kept is exc for kept in _swallowed):
        _swallowed.append(exc)


def signal_arrived(exc: BaseException) -> None:
    """Stop keeping ``exc``, a signal's exception that did arrive where it was raised and is being handled, and the
    exceptions it was raised while handling (a second Ctrl-C during the cleanup of the first), so that the outputs
    written on its way out (what a sweep has done so far) are not stopped by them a second time."""
    arrived = []
    while exc is not None:
        arrived.append(exc)
        exc = exc.__context__
    _swallowed[:] = [kept for kept in _swallowed if not any(kept is a for a in arrived)]


def raise_swallowed_signal() -> None:
    """Raise the first signal exception kept since the last call (perhaps lost where it was raised), if any."""
    if _swallowed:
        exc = _swallowed[0]
        _swallowed.clear()
        raise exc


_converters_made = False


def _h5py_converters() -> None:
    """Make h5py's converters of string data now, before :func:`signals_raise` turns signals into exceptions.

    h5py makes each converter on its first use in the process, from inside a callback of libhdf5 that prints the
    traceback of an exception raised there: a SIGTERM whose handler ran at that point printed one (in the middle
    of writing the first string attribute of a prediction or run file) before the command's own one-line message.
    Writing and reading string attributes and a dataset of strings in a file in memory makes them all."""
    global _converters_made
    if _converters_made:
        return
    import io

    import h5py
    import numpy as np

    with h5py.File(io.BytesIO(), "w") as f:
        f.attrs["text"] = "text"
        f.attrs["texts"] = np.array(["a", "bc"], dtype=h5py.string_dtype())
        f.create_dataset("texts", data=np.array(["a", "bc"], dtype=h5py.string_dtype()))
        f.create_dataset("fixed", data=np.array(["a", "bc"], dtype="S"))
        _ = (f.attrs["text"], f.attrs["texts"], f["texts"][()], f["fixed"][()], f["texts"].asstr()[()])
    _converters_made = True


def catch_signals(signums, handler) -> dict:
    """Set ``handler`` for each of ``signums`` (main thread) that is not ignored, and return the handlers it
    replaced. A signal the process started with ignored stays ignored: that is how ``nohup`` keeps a command
    running when its terminal closes, and how a shell's background job ignores the terminal's Ctrl-C."""
    previous = {}
    for sig in signums:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, handler)
    return previous


@contextlib.contextmanager
def signals_raise(signums=(signal.SIGTERM, signal.SIGHUP)):
    """While the block runs (main thread only), turn each of ``signums`` into :class:`Terminated` and ``SIGINT``
    into KeyboardInterrupt (as Python's own handler does), and ignore ``SIGXFSZ`` (a write over the file-size limit
    then fails with ``EFBIG``); restores the handlers after.

    Every signal exception of the block is kept, and raised again by :func:`raise_swallowed_signal` if it was lost
    (swallowed by a finaliser, or cleared by C code); :func:`atomic_output` calls that before renaming and the
    command line when a command returns."""
    import sys
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        exc = KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)
        _keep(exc)
        raise exc

    _h5py_converters()
    previous = {}
    previous_hook = sys.unraisablehook
    _swallowed.clear()
    written.clear()  # a command called in-process after another names only its own outputs
    try:
        sys.unraisablehook = _keep_swallowed_signals(previous_hook)
        previous.update(catch_signals((signal.SIGINT, *signums), handler))
        if hasattr(signal, "SIGXFSZ"):
            previous[signal.SIGXFSZ] = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        sys.unraisablehook = previous_hook
        _swallowed.clear()
