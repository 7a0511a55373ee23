"""What the readers may open: regular files inside the dataset folder. And their one exception.

The bounded read of a whole file (read_regular) is vlmlint.fileio's, shared with the config,
baselines and checkpoints."""

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
