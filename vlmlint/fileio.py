"""The files vlmlint reads whole and the files it writes: one bounded read, one atomic writer.

A leaf: it imports nothing of vlmlint, so readers, the config, baselines, checkpoints and reports share
it without importing each other.

Reading: `read_regular` opens without blocking (a FIFO swapped in after a check does not hang) and
reads a regular file of at most a limit (NotRegularFile, FileTooLarge); `read_checked` says the same as
one OutputError naming the file.

Writing: a regular file (or a new one) gets a temporary file beside it, renamed into place when
complete, so a reader never sees half a report. A rename would replace a special file with a regular
one (CI runs as root: `-o /dev/null` would become a file), so a character device, a FIFO or /dev/fd/N
is written directly; a FIFO that nobody reads is refused instead of blocking forever; a folder is
refused. Nothing here prints or exits: errors are OutputError, whose message names the path.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import tempfile
from collections.abc import Iterable
from typing import BinaryIO

# /dev/fd/N, /proc/self/fd/N, /dev/stdout, /dev/stderr: one of this process's own descriptors.
_OWN_FD = re.compile(r"^/(?:dev/fd|proc/self/fd)/(\d+)$")
_STD_NAMES = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}


# -- reading ----------------------------------------------------------------------------------------


class NotRegularFile(Exception):
    """read_regular: the path is a FIFO, a device, a socket or a folder, which it never reads."""

    def __init__(self, path: str | os.PathLike, mode: int) -> None:
        super().__init__(path)
        self.mode = mode  # st_mode of the open descriptor


class FileTooLarge(Exception):
    """read_regular: the file holds more than the limit; `size` is what fstat said (None: it grew)."""

    def __init__(self, size: int | None) -> None:
        super().__init__(size)
        self.size = size


def read_regular(path: str | os.PathLike, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (NotRegularFile, FileTooLarge, OSError).

    O_NONBLOCK: opening a FIFO does not wait for a writer; fstat of the open descriptor (not of the
    path, which may change in between) tells a regular file from a device, a FIFO or a folder.
    """
    handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    info = os.fstat(handle)
    if not stat.S_ISREG(info.st_mode):  # before fdopen, which refuses a folder with its own error
        os.close(handle)
        raise NotRegularFile(path, info.st_mode)
    with os.fdopen(handle, "rb") as stream:
        if info.st_size > limit:
            raise FileTooLarge(info.st_size)
        data = stream.read(limit + 1)  # the file may grow after fstat: never more than the limit
    if len(data) > limit:
        raise FileTooLarge(None)
    return data


def read_checked(path: str, limit: int, what: str) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; anything else is an OutputError."""
    try:
        return read_regular(path, limit)
    except OSError as exc:
        raise OutputError(f"{what} {path}: {exc.strerror or exc}") from None
    except NotRegularFile:
        raise OutputError(f"{what} {path}: not a regular file") from None
    except FileTooLarge as exc:
        if exc.size is None:
            raise OutputError(f"{what} {path}: more than the {limit:,} bytes vlmlint reads") from None
        raise OutputError(
            f"{what} {path}: {exc.size:,} bytes, more than the {limit:,} bytes vlmlint reads"
        ) from None


# -- writing ----------------------------------------------------------------------------------------


class OutputError(OSError):
    """A path vlmlint will not write or read as asked; the message names it and says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.strerror = message  # callers print `exc.strerror or exc`, as for any OSError


def readable_as_umask_allows(handle: int) -> None:
    """mkstemp makes 0600 files; a report is shared like any file the user writes (0666 & ~umask)."""
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(handle, 0o666 & ~umask)


def open_special(path: str) -> BinaryIO | None:
    """A stream written directly when `path` is a special file; None for a regular or new file.

    A folder is an OutputError, and so is a FIFO without a reader (O_NONBLOCK: ENXIO, not a hang).
    """
    own = _OWN_FD.match(path)
    number = int(own.group(1)) if own else _STD_NAMES.get(path)
    if number is not None:  # the shell's descriptor as it is: its offset, its pipe, its terminal
        try:
            return os.fdopen(os.dup(number), "wb", closefd=True)
        except OSError as exc:
            raise OutputError(f"{path}: descriptor {number} is not open ({exc.strerror})") from None
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise OutputError(f"{path}: {exc.strerror or exc}") from None
    if stat.S_ISREG(info.st_mode):
        return None
    if stat.S_ISDIR(info.st_mode):
        raise OutputError(f"{path} is a folder; name a file inside it")
    if not (stat.S_ISCHR(info.st_mode) or stat.S_ISFIFO(info.st_mode)):
        raise OutputError(f"{path}: not a regular file, a character device or a FIFO; name a file")
    try:
        handle = os.open(path, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise OutputError(f"{path}: a FIFO that nobody reads; start its reader first") from None
        raise OutputError(f"{path}: {exc.strerror or exc}") from None
    # Non-blocking was only for the open: a slow reader of a FIFO must slow vlmlint, not fail it.
    flags = fcntl.fcntl(handle, fcntl.F_GETFL)
    fcntl.fcntl(handle, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
    return os.fdopen(handle, "wb")


def open_temporary(path: str) -> tuple[int, str]:
    """A temporary file beside `path` (same file system: the rename is atomic), as umask allows."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise OutputError(f"{path}: folder {folder} does not exist")
    handle, temporary = tempfile.mkstemp(prefix=".vlmlint-", suffix=".tmp", dir=folder)
    try:
        readable_as_umask_allows(handle)
    except BaseException:
        os.close(handle)
        os.unlink(temporary)
        raise
    return handle, temporary


def write_atomic(path: str, content: bytes | Iterable[bytes], end: bytes = b"") -> None:
    """A reader never sees half a report: a temporary file beside the target, then a rename.

    A special file (character device, FIFO, /dev/fd/N) is written directly; a folder is refused.
    """
    special = open_special(path)
    if special is not None:
        with special:
            _write(special, content, end)
        return
    handle, temporary = open_temporary(path)
    try:
        with os.fdopen(handle, "wb") as stream:
            _write(stream, content, end)
        os.replace(temporary, path)
    except BaseException:  # an error or a signal: no temporary file is left behind
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def _write(stream: BinaryIO, content: bytes | Iterable[bytes], end: bytes) -> None:
    if isinstance(content, bytes):
        stream.write(content)
    else:
        stream.writelines(content)
    stream.write(end)


def check_target(path: str) -> None:
    """Refuse early a path that can never be written: a folder, or a file in a folder that is missing."""
    if os.path.isdir(path):
        raise OutputError(f"{path} is a folder; name a file inside it")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise OutputError(f"{path}: folder {folder} does not exist")
