"""Durable file writes shared by the stack's modules (host_lock, layer_state, stack_tree)."""

from __future__ import annotations

import os
import tempfile


def atomic_write(path: str, text: str, mode: int = 0o644, exclusive: bool = False) -> bool:
    """Write `text` to `path` through a fsynced temporary file in the same directory, then
    fsync the directory. With `exclusive`, the file is linked into place only when none
    exists (False then, and nothing is written); otherwise it replaces what is there."""
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".%s-" % os.path.basename(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if exclusive:
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
        else:
            os.replace(tmp, path)
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        return True
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
