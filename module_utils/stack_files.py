"""Durable file writes shared by the stack's modules (host_lock, layer_state, stack_tree, verl_patch).

A reader sees the old file or the new one, never half of one, and once a call returns the new
file and its directory entry are on disk (both fsynced): a layer recorded complete after it
does not point at data a crash could still take back.
"""

from __future__ import annotations

import os
import stat
import tempfile
from typing import Optional, Tuple


def fsync_directory(directory: str) -> None:
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def write_durably(
    path: str, data: bytes, mode: int, exclusive: bool = False, owner: Optional[Tuple[int, int]] = None
) -> bool:
    """Write `data` to `path` through a fsynced temporary file in the same directory, renamed (or,
    with `exclusive`, linked: False then when a file is there already, and nothing is written) into
    place, then fsync the directory. `owner` (uid, gid) is given to the file when set."""
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".%s-" % os.path.basename(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if owner is not None:
            os.chown(tmp, *owner)
        if exclusive:
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
        else:
            os.replace(tmp, path)
        fsync_directory(directory)
        return True
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write(path: str, text: str, mode: int = 0o644, exclusive: bool = False) -> bool:
    """A state or lock file: `text` at `path` (its directory made when missing), mode `mode`."""
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    return write_durably(path, text.encode("utf-8"), mode, exclusive)


def replace_keeping(path: str, data: bytes) -> None:
    """Replace an existing file's content (or create one, 0644) keeping what it was: a symlink
    stays a link (its target is replaced), the mode stays, and a file root rewrites in a user's
    tree keeps that user as its owner."""
    path = os.path.realpath(path)
    old = os.stat(path) if os.path.exists(path) else None
    mode = stat.S_IMODE(old.st_mode) if old else 0o644
    owner = None
    if old and os.geteuid() == 0 and (old.st_uid, old.st_gid) != (0, 0):
        owner = (old.st_uid, old.st_gid)
    write_durably(path, data, mode, owner=owner)
