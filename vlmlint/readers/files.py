"""What the readers may open: regular files inside the dataset folder. And their one exception."""

from __future__ import annotations

import os
import stat


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
