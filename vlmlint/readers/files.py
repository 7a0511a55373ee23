"""What the readers may open: regular files inside the dataset folder. And their one exception."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass


class DatasetError(Exception):
    """The dataset as a whole cannot be opened (not a per-row problem)."""


def is_regular_file(path: str) -> bool:
    """A regular file (symlinks followed): never a FIFO, socket or device, whose open() blocks or never ends."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


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


def outside_target(path: str, folder: str) -> str | None:
    """Where a file really is when a symlink takes it out of `folder`; None when it stays inside."""
    real, root = os.path.realpath(path), os.path.realpath(folder)
    return None if real == root or real.startswith(root.rstrip(os.sep) + os.sep) else real


# Bounds of a folder walk: deeper folders are not entered, a folder's names past the count not listed.
MAX_FOLDER_DEPTH = 64
MAX_FOLDER_ENTRIES = 2_000_000  # names of one folder held (and sorted) at once, about 100 bytes each


@dataclass(frozen=True)
class SkippedFolder:
    """A folder a walk did not (fully) read, and why."""

    path: str
    reason: str


def walk(top: str, skipped: list[SkippedFolder] | None = None) -> Iterator[tuple[str, list[str], list[str]]]:
    """os.walk(top), top-down, without recursion (Python 3.11's os.walk recurses: a deep tree raises
    RecursionError) and within MAX_FOLDER_DEPTH and MAX_FOLDER_ENTRIES; what it leaves out goes to
    `skipped`. Like os.walk, symlinked folders are listed in dirnames but not entered (no loops); the
    caller may prune or sort dirnames in place. Folders that cannot be listed are passed over."""
    stack = [(top, 0)]
    while stack:
        directory, depth = stack.pop()
        dirs: list[str] = []
        files: list[str] = []
        links: set[str] = set()
        try:
            with os.scandir(directory) as entries:
                for count, entry in enumerate(entries):
                    if count >= MAX_FOLDER_ENTRIES:
                        if skipped is not None:
                            reason = (
                                f"it holds more than {MAX_FOLDER_ENTRIES:,} entries; the others are not read"
                            )
                            skipped.append(SkippedFolder(directory, reason))
                        break
                    try:
                        is_dir = entry.is_dir()
                        if is_dir and entry.is_symlink():
                            links.add(entry.name)
                    except OSError:
                        is_dir = False
                    (dirs if is_dir else files).append(entry.name)
        except OSError:
            continue  # gone, unreadable, or a path too long: as os.walk's default
        yield directory, dirs, files
        below = [name for name in dirs if name not in links]
        if below and depth >= MAX_FOLDER_DEPTH:
            if skipped is not None:
                reason = f"it is {MAX_FOLDER_DEPTH} folders deep; its subfolders are not read"
                skipped.append(SkippedFolder(directory, reason))
            continue
        stack.extend((os.path.join(directory, name), depth + 1) for name in reversed(below))
