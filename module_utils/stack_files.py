"""Root's file primitives, shared by the stack's modules (host_lock, layer_state, stack_tree,
stack_take, verl_patch): durable writes, and every touch of a path another user could swap.

Durable: a reader sees the old file or the new one, never half of one, and once a call returns the
new file and its directory entry are on disk (both fsynced): a layer recorded complete after it
does not point at data a crash could still take back.

Safe as root (docs/security.md): a path is opened one component at a time from ``/`` with
``O_NOFOLLOW`` (a link anywhere on it fails instead of being followed), and everything after that
goes through the descriptor: the mode and owner are set with ``fchmod``/``fchown`` on the file root
created, a rename or a delete names an entry of a directory root holds open. Root writes its own
files only in directories nobody else can write (``root_only``), and it reads or takes a file out of
another user's tree only with that user's rights (``open_as``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import stat
from typing import Iterable, Iterator, Optional, Tuple, Union

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(Exception):
    """A path root may not act through: a link on it, or a directory another user can write."""


def components(path: str) -> list[str]:
    if not path.startswith("/"):
        raise UnsafePath("%s is not an absolute path" % path)
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise UnsafePath("%s has a '..' in it" % path)
    return parts


def writable_by_others(st: os.stat_result, final: bool) -> Optional[str]:
    """Why another user could change the entries of the directory `st`, or None. An ancestor may be
    a sticky, world-writable directory (/tmp): there nobody but root renames or removes root's
    entries. The directory root writes in (`final`) may not."""
    if st.st_uid != 0:
        return "owned by uid %d" % st.st_uid
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and (final or not st.st_mode & stat.S_ISVTX):
        return "writable by %s" % ("its group" if not st.st_mode & stat.S_IWOTH else "everyone")
    return None


def open_dir(path: str, create_mode: Optional[int] = None, root_only: bool = False) -> int:
    """A descriptor of the directory `path` (absolute, as given: resolve it first where links are
    allowed), opened component by component without following a link. `create_mode`: missing
    components are made with it. `root_only`: every component must be root's, and none writable by
    another user (UnsafePath otherwise), so nobody else can swap anything on the path."""
    parts = components(path)
    fd = os.open("/", DIR_FLAGS)
    try:
        walked = ""
        for index, part in enumerate(parts):
            walked += "/" + part
            if root_only:
                why = writable_by_others(os.fstat(fd), final=False)
                if why:
                    raise UnsafePath("%s is %s" % (walked.rsplit("/", 1)[0] or "/", why))
            try:
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if create_mode is None:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, create_mode, dir_fd=fd)
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if os.path.islink(walked):
                    raise UnsafePath("%s is a link" % walked) from exc
                raise
            os.close(fd)
            fd = child
            if root_only and index == len(parts) - 1:
                why = writable_by_others(os.fstat(fd), final=True)
                if why:
                    raise UnsafePath("%s is %s" % (walked, why))
        return fd
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def opened_dir(path: str, create_mode: Optional[int] = None, root_only: bool = False) -> Iterator[int]:
    fd = open_dir(path, create_mode, root_only)
    try:
        yield fd
    finally:
        os.close(fd)


def write_at(
    dfd: int,
    name: str,
    data: Union[bytes, Iterable[bytes]],
    mode: int,
    exclusive: bool = False,
    owner: Optional[Tuple[int, int]] = None,
) -> bool:
    """Write `data` (bytes, or chunks of them) as the entry `name` of the directory open at `dfd`: a new temporary file
    (O_EXCL, no link followed) written and fsynced, its mode and owner set through its descriptor,
    then renamed (or, with `exclusive`, linked: False then when the entry exists, and nothing is
    written) into place, and the directory fsynced."""
    tmp = ".%s-%s.tmp" % (name, secrets.token_hex(6))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
    try:
        try:
            for chunk in [data] if isinstance(data, bytes) else data:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)
            if owner is not None:
                os.fchown(fd, *owner)
            os.fsync(fd)
        finally:
            os.close(fd)
        if exclusive:
            try:
                os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
            except FileExistsError:
                return False
        else:
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        os.fsync(dfd)
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dfd)


def write_durably(
    path: str, data: bytes, mode: int, exclusive: bool = False, owner: Optional[Tuple[int, int]] = None
) -> bool:
    """`data` at `path` (see write_at). As root, the directory must be one only root can write."""
    with opened_dir(os.path.dirname(path), root_only=os.geteuid() == 0) as dfd:
        return write_at(dfd, os.path.basename(path), data, mode, exclusive, owner)


def atomic_write(path: str, text: str, mode: int = 0o644, exclusive: bool = False) -> bool:
    """A state or lock file: `text` at `path` (its directory made when missing, 0755), mode `mode`.
    As root, every directory on the path must be root's alone (UnsafePath otherwise): root's records
    are never in a tree another user can write."""
    directory = os.path.dirname(path)
    with opened_dir(directory, create_mode=0o755, root_only=os.geteuid() == 0) as dfd:
        return write_at(dfd, os.path.basename(path), text.encode("utf-8"), mode, exclusive)


def replace_keeping(path: str, data: bytes) -> None:
    """Replace an existing file's content (or create one, 0644) keeping what it was: a symlink
    stays a link (its target is replaced) and the mode stays. For a user's own tree, run as that
    user (verl_patch runs so): as root it is refused, like every root write outside root's trees."""
    path = os.path.realpath(path)
    old = os.stat(path) if os.path.exists(path) else None
    mode = stat.S_IMODE(old.st_mode) if old else 0o644
    write_durably(path, data, mode)


@contextlib.contextmanager
def rights_of(uid: int, gid: int) -> Iterator[None]:
    """Root acting with another user's rights for the body (effective ids and groups), and root
    again after it. A no-op when not root or when `uid` is root."""
    if os.geteuid() != 0 or uid == 0:
        yield
        return
    groups = os.getgroups()
    os.setgroups([gid])
    os.setegid(gid)
    os.seteuid(uid)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)
        os.setgroups(groups)


def open_as(path: str, uid: int, gid: int) -> int:
    """A descriptor of the regular file `path`, opened with the rights of `uid`/`gid` only, never
    through a link at its last component, and without blocking (a FIFO cannot hang the caller).
    UnsafePath when it is not a regular file; its type is read from the descriptor, not the path."""
    with rights_of(uid, gid):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if os.path.islink(path):
                raise UnsafePath("%s is a link" % path) from exc
            raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnsafePath("%s is not a plain file" % path)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def read_as(path: str, uid: int, gid: int, limit: int = 1 << 20) -> bytes:
    """At most `limit` bytes of the regular file `path`, read with the rights of `uid`/`gid`."""
    fd = open_as(path, uid, gid)
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def take_as(src: str, uid: int, gid: int, dest_dir: str, name: str, mode: int = 0o644) -> Tuple[str, int]:
    """Copy the regular file `src` of another user's tree into root's directory `dest_dir` as
    `name` (durably, mode `mode`): opened as that user (open_as), and hashed while it is copied from
    that same descriptor, so the sha256 returned is that of the bytes written. Returns (sha256, size)."""
    digest = hashlib.sha256()
    size = 0

    def chunks(fd: int) -> Iterator[bytes]:
        nonlocal size
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return
            digest.update(chunk)
            size += len(chunk)
            yield chunk

    with opened_dir(dest_dir, create_mode=0o755, root_only=os.geteuid() == 0) as dfd:
        fd = open_as(src, uid, gid)
        try:
            write_at(dfd, name, chunks(fd), mode)
        finally:
            os.close(fd)
    return digest.hexdigest(), size
