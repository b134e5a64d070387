"""module_utils/stack_files: every state file, lock and patched file is written durably.

The broken cases: a rename without a fsync of the file (a crash leaves an empty file under the
new name) or of its directory (a crash takes the rename back), and a rewrite that turns a
link into a file, drops the mode or hands a user's file to root.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from ansible.module_utils import stack_files

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fsynced(monkeypatch):
    """The paths of what os.fsync was called on, in order."""
    seen: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        seen.append(os.readlink("/proc/self/fd/%d" % fd))
        real(fd)

    monkeypatch.setattr(stack_files.os, "fsync", spy)
    return seen


def test_a_state_file_and_its_directory_are_fsynced(tmp_path, fsynced):
    path = tmp_path / "layers" / "cuda.json"
    assert stack_files.atomic_write(str(path), '{"status": "complete"}\n')
    assert path.read_text() == '{"status": "complete"}\n'
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    # The data first (through the temporary file renamed into place), then the directory entry.
    assert len(fsynced) == 2
    assert fsynced[0].startswith(str(path.parent) + "/.cuda.json-")
    assert fsynced[1] == str(path.parent)
    assert sorted(os.listdir(path.parent)) == ["cuda.json"]


def test_exclusive_writes_only_once(tmp_path):
    path = tmp_path / "lock.json"
    assert stack_files.atomic_write(str(path), "first\n", 0o600, exclusive=True)
    assert not stack_files.atomic_write(str(path), "second\n", 0o600, exclusive=True)
    assert path.read_text() == "first\n" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["lock.json"]


def test_a_patched_file_keeps_its_link_and_mode(tmp_path, fsynced):
    target = tmp_path / "real" / "fsdp_workers.py"
    target.parent.mkdir()
    target.write_text("old\n")
    target.chmod(0o755)
    link = tmp_path / "link.py"
    link.symlink_to(target)
    stack_files.replace_keeping(str(link), b"new\n")
    assert link.is_symlink() and target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert fsynced[-1] == str(target.parent)
    # A file that was not there is created 0644.
    fresh = tmp_path / "real" / "record.json"
    stack_files.replace_keeping(str(fresh), b"{}\n")
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o644


def test_a_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "record.json"
    path.write_text("old\n")

    def broken(fd: int) -> None:
        raise OSError(5, "I/O error")

    monkeypatch.setattr(stack_files.os, "fsync", broken)
    with pytest.raises(OSError):
        stack_files.replace_keeping(str(path), b"new\n")
    assert path.read_text() == "old\n"
    assert sorted(os.listdir(tmp_path)) == ["record.json"]


NOBODY = pwd.getpwnam("nobody")


def test_a_link_swapped_in_for_the_temporary_file_is_not_followed(tmp_path, monkeypatch):
    """The attack on root's write: between the temporary file's creation and its chmod, its name
    is swapped for a link to a file of root's. Broken case: os.chmod(tmp) followed the link and
    made that file 0644 (/etc/shadow, in the review). The mode is now set through the descriptor."""
    victim = tmp_path / "shadow"
    victim.write_text("secret\n")
    victim.chmod(0o600)
    state = tmp_path / "layers"
    state.mkdir()
    real = os.fsync

    def swap(fd: int) -> None:
        for name in os.listdir(state):
            if name.endswith(".tmp"):
                os.unlink(state / name)
                os.symlink(victim, state / name)
        real(fd)

    monkeypatch.setattr(stack_files.os, "fsync", swap)
    stack_files.atomic_write(str(state / "cuda.json"), "{}\n")
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600 and victim.read_text() == "secret\n"


def test_root_writes_its_records_only_where_no_one_else_can(tmp_path):
    users = tmp_path / "miniforge3"
    users.mkdir()
    os.chown(users, NOBODY.pw_uid, NOBODY.pw_gid)
    with pytest.raises(stack_files.UnsafePath, match="owned by uid %d" % NOBODY.pw_uid):
        stack_files.atomic_write(str(users / ".verl-p40-tree"), "{}\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(stack_files.UnsafePath, match="writable by everyone"):
        stack_files.atomic_write(str(shared / "lock"), "{}\n")
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    with pytest.raises(stack_files.UnsafePath, match="is a link"):
        stack_files.atomic_write(str(link / "cuda.json"), "{}\n")
    assert os.listdir(users) == [] and os.listdir(shared) == []


@pytest.fixture
def users_tree():
    """A directory of the user's that the user can reach (pytest's tmp_path is root's, 0700)."""
    base = Path(tempfile.mkdtemp(prefix="verl-p40-test-"))
    base.chmod(0o755)
    tree = base / "build"
    tree.mkdir()
    os.chown(tree, NOBODY.pw_uid, NOBODY.pw_gid)
    yield tree
    shutil.rmtree(base)


def test_a_file_is_taken_from_a_users_tree_with_that_users_rights(tmp_path, users_tree):
    tree = users_tree
    wheel = tree / "apex-0.1-cp310-cp310-linux_x86_64.whl"
    wheel.write_bytes(b"PK wheel bytes")
    os.chown(wheel, NOBODY.pw_uid, NOBODY.pw_gid)
    cache = tmp_path / "cache"
    digest, size = stack_files.take_as(str(wheel), NOBODY.pw_uid, NOBODY.pw_gid, str(cache), wheel.name)
    assert (digest, size) == (hashlib.sha256(b"PK wheel bytes").hexdigest(), 14)
    taken = cache / wheel.name
    assert taken.read_bytes() == b"PK wheel bytes" and taken.stat().st_uid == 0
    assert stat.S_IMODE(taken.stat().st_mode) == 0o644


@pytest.mark.parametrize("plant", ["link", "fifo", "root-only", "hardlink"])
def test_what_the_user_plants_in_place_of_the_file_is_refused(tmp_path, users_tree, plant):
    """A link to a root-only file, a FIFO (a read would hang the run) or a root-only file in the
    user's tree: nothing is read or copied. Broken cases: a copy by path as root (follows the link,
    reads the root-only file) or an open without O_NONBLOCK (hangs on the FIFO)."""
    tree = users_tree
    secret = tree.parent / "secret"
    secret.write_text("root only\n")
    secret.chmod(0o600)
    planted = tree / "apex.whl"
    if plant == "link":
        planted.symlink_to(secret)
    elif plant == "fifo":
        os.mkfifo(planted)
    elif plant == "hardlink":
        os.link(secret, planted)
    else:
        planted.write_text("root only\n")
        planted.chmod(0o600)
    cache = tmp_path / "cache"
    with pytest.raises((stack_files.UnsafePath, PermissionError)):
        stack_files.take_as(str(planted), NOBODY.pw_uid, NOBODY.pw_gid, str(cache), "apex.whl")
    assert not (cache / "apex.whl").exists()
    assert os.geteuid() == 0 and os.getegid() == 0  # root again after the user's open


# ---------------------------------------------------------------- the survivors of docs/mutation/2026-12-03.json
# Each test below names the broken module it catches; the tests run as root (as CI does), so the
# directories, owners and links an attacker would make are made for real.


def open_fds() -> int:
    """How many descriptors this process holds (listdir's own is in both counts)."""
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def umask022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def raised(call, *args, **kwargs) -> str:
    """The message of the UnsafePath the call raises."""
    with pytest.raises(stack_files.UnsafePath) as info:
        call(*args, **kwargs)
    return str(info.value)


def test_a_relative_path_or_one_with_dotdot_is_refused_by_name():
    """Broken case: the message built with another operator than %, a TypeError instead of the
    UnsafePath that names the path."""
    assert raised(stack_files.components, "var/lib/verl-p40") == "var/lib/verl-p40 is not an absolute path"
    assert raised(stack_files.components, "/var/lib/../../etc") == "/var/lib/../../etc has a '..' in it"
    assert stack_files.components("/var//lib/./verl-p40/") == ["var", "lib", "verl-p40"]


def test_an_ancestor_another_user_can_change_is_refused_by_its_name(tmp_path):
    """Every directory above root's must be root's and writable by nobody else, and the message names
    that directory (the parent of the component being opened). Broken cases: the ancestors not
    checked at all (only the last directory), a group- or world-writable ancestor let through
    because the sticky test was lost, and the message naming another directory."""
    users = tmp_path / "users"
    (users / "state").mkdir(parents=True)
    os.chown(users, NOBODY.pw_uid, NOBODY.pw_gid)
    message = raised(stack_files.atomic_write, str(users / "state" / "lock"), "{}\n")
    assert message == "%s is owned by uid %d" % (users, NOBODY.pw_uid)

    shared = tmp_path / "shared"
    (shared / "state").mkdir(parents=True)
    shared.chmod(0o777)
    message = raised(stack_files.atomic_write, str(shared / "state" / "lock"), "{}\n")
    assert message == "%s is writable by everyone" % shared

    group = tmp_path / "group"
    (group / "state").mkdir(parents=True)
    group.chmod(0o775)
    message = raised(stack_files.atomic_write, str(group / "state" / "lock"), "{}\n")
    assert message == "%s is writable by its group" % group
    assert not (users / "state" / "lock").exists() and not (shared / "state" / "lock").exists()
    assert not (group / "state" / "lock").exists()


def test_a_sticky_ancestor_is_allowed_but_not_as_the_directory_written_in(tmp_path):
    """Above root's directory a sticky, world-writable one (/tmp) is fine: nobody else can rename
    root's entries there. The directory root writes in may not be one: another user could plant
    a name in it. Broken cases: final=False for the last directory, and the sticky test turned
    around (`final and not sticky`)."""
    sticky = tmp_path / "sticky"
    (sticky / "state").mkdir(parents=True)
    sticky.chmod(0o1777)
    assert stack_files.atomic_write(str(sticky / "state" / "lock"), "{}\n")
    message = raised(stack_files.atomic_write, str(sticky / "lock"), "{}\n")
    assert message == "%s is writable by everyone" % sticky
    assert not (sticky / "lock").exists()


def test_without_root_only_a_users_directory_is_opened(tmp_path):
    """open_dir and opened_dir check owners only when asked (root_only defaults to False: the
    callers that walk a user's tree as that user need that). Broken case: root_only on by default,
    which refused every directory of the training user's."""
    users = tmp_path / "users"
    (users / "build").mkdir(parents=True)
    os.chown(users, NOBODY.pw_uid, NOBODY.pw_gid)
    os.chown(users / "build", NOBODY.pw_uid, NOBODY.pw_gid)
    fd = stack_files.open_dir(str(users / "build"))
    try:
        assert os.path.samestat(os.fstat(fd), os.stat(users / "build"))
    finally:
        os.close(fd)
    with stack_files.opened_dir(str(users / "build")) as dfd:
        assert os.path.samestat(os.fstat(dfd), os.stat(users / "build"))
    with pytest.raises(stack_files.UnsafePath, match="owned by uid"):
        stack_files.open_dir(str(users / "build"), root_only=True)


def test_a_file_on_the_path_is_not_opened_as_a_directory(tmp_path):
    """Every component is opened O_DIRECTORY. Broken case: the flag lost, so a plain file (or a
    device) at the place of a directory was handed back as one."""
    plain = tmp_path / "plain"
    plain.write_text("not a directory\n")
    with pytest.raises(NotADirectoryError):
        stack_files.open_dir(str(plain))


def test_root_refuses_a_write_into_a_users_directory_and_sets_the_owner_it_is_given(tmp_path):
    """write_durably as root: the directory must be root's alone (root_only is on for root), and
    `owner` is set on the file through its descriptor. Broken cases: root_only computed from
    another uid than 0 (so off for root), and the fchown left out (the file stayed root's)."""
    users = tmp_path / "users"
    users.mkdir()
    os.chown(users, NOBODY.pw_uid, NOBODY.pw_gid)
    with pytest.raises(stack_files.UnsafePath, match="owned by uid %d" % NOBODY.pw_uid):
        stack_files.write_durably(str(users / "record.json"), b"{}\n", 0o644)
    assert os.listdir(users) == []
    given = tmp_path / "given.json"
    assert stack_files.write_durably(str(given), b"{}\n", 0o640, owner=(NOBODY.pw_uid, NOBODY.pw_gid))
    st = given.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (NOBODY.pw_uid, NOBODY.pw_gid, 0o640)


def test_a_write_replaces_unless_it_is_exclusive(tmp_path):
    """exclusive defaults to False: a state file is rewritten by the next write. Broken case: the
    default turned to True, so a second atomic_write or write_at returned False and kept the
    old record."""
    path = tmp_path / "cuda.json"
    assert stack_files.atomic_write(str(path), "first\n")
    assert stack_files.atomic_write(str(path), "second\n")
    assert path.read_text() == "second\n"
    with stack_files.opened_dir(str(tmp_path)) as dfd:
        assert stack_files.write_at(dfd, "cuda.json", b"third\n", 0o644)
    assert path.read_text() == "third\n"
    assert sorted(os.listdir(tmp_path)) == ["cuda.json"]


def test_the_directories_made_for_a_record_are_0755(tmp_path, umask022):
    """atomic_write and take_as make missing directories 0755. Broken case: another create mode."""
    path = tmp_path / "state" / "layers" / "cuda.json"
    stack_files.atomic_write(str(path), "{}\n")
    for made in (tmp_path / "state", tmp_path / "state" / "layers"):
        assert stat.S_IMODE(made.stat().st_mode) == 0o755, made


def test_the_temporary_file_is_roots_alone_while_it_is_written(tmp_path, monkeypatch, umask022):
    """Until its mode is set, the temporary file is 0600. Broken case: another creation mode
    (0601, 0577), with which another user could open it while root writes."""
    seen = []
    real = os.fchmod

    def spy(fd: int, mode: int) -> None:
        seen.append(stat.S_IMODE(os.fstat(fd).st_mode))
        real(fd, mode)

    monkeypatch.setattr(stack_files.os, "fchmod", spy)
    stack_files.atomic_write(str(tmp_path / "cuda.json"), "{}\n", 0o644)
    assert seen == [0o600]


def test_a_name_planted_where_the_temporary_file_goes_is_not_written_through(tmp_path, monkeypatch):
    """The temporary file is created O_EXCL: a link (or file) already at its name fails the write.
    Broken case: O_EXCL lost (with O_NOFOLLOW), so root opened the link and wrote into its target
    and chmodded it."""
    victim = tmp_path / "shadow"
    victim.write_text("secret\n")
    victim.chmod(0o600)
    state = tmp_path / "layers"
    state.mkdir()
    monkeypatch.setattr(stack_files.secrets, "token_hex", lambda n: "planted")
    (state / ".cuda.json-planted.tmp").symlink_to(victim)
    with pytest.raises(FileExistsError):
        stack_files.atomic_write(str(state / "cuda.json"), "{}\n")
    assert victim.read_text() == "secret\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert not (state / "cuda.json").exists()


def test_an_exclusive_write_links_the_entry_not_what_a_swapped_link_points_to(tmp_path, monkeypatch):
    """The exclusive write links its temporary file into place without following a link: were the
    temporary name swapped for a link, the new entry is that link, never a second name (a hard
    link) of its target. Broken case: follow_symlinks=True, which gave root's lock the inode of
    the link's target."""
    victim = tmp_path / "shadow"
    victim.write_text("secret\n")
    state = tmp_path / "layers"
    state.mkdir()
    real = os.fsync

    def swap(fd: int) -> None:
        for name in os.listdir(state):
            if name.endswith(".tmp"):
                os.unlink(state / name)
                os.symlink(victim, state / name)
        real(fd)

    monkeypatch.setattr(stack_files.os, "fsync", swap)
    stack_files.atomic_write(str(state / "lock"), "{}\n", exclusive=True)
    assert victim.stat().st_nlink == 1 and victim.read_text() == "secret\n"
    assert not os.path.samestat(os.lstat(state / "lock"), victim.stat())


def test_no_descriptor_is_left_open(tmp_path, users_tree):
    """Every descriptor the helpers open is closed, on success and on refusal: root's long runs
    (and a loop over many files) must not run out of them or hand one to a child. Broken cases:
    each os.close left out (the walk's parents, the walk's error path, opened_dir, the temporary
    file, open_as's refusal of a FIFO, read_as, take_as)."""
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    users = tmp_path / "users"
    (users / "state").mkdir(parents=True)
    os.chown(users, NOBODY.pw_uid, NOBODY.pw_gid)
    wheel = users_tree / "apex.whl"
    wheel.write_bytes(b"PK")
    os.chown(wheel, NOBODY.pw_uid, NOBODY.pw_gid)
    fifo = users_tree / "fifo"
    os.mkfifo(fifo)
    os.chown(fifo, NOBODY.pw_uid, NOBODY.pw_gid)

    before = open_fds()
    os.close(stack_files.open_dir(str(deep)))
    assert open_fds() == before, "open_dir"
    with pytest.raises(stack_files.UnsafePath):
        stack_files.open_dir(str(users / "state"), root_only=True)
    assert open_fds() == before, "open_dir refusing"
    with pytest.raises(FileNotFoundError):
        stack_files.open_dir(str(deep / "missing" / "more"))
    assert open_fds() == before, "open_dir of a missing directory"
    with stack_files.opened_dir(str(deep)):
        pass
    assert open_fds() == before, "opened_dir"
    stack_files.atomic_write(str(deep / "cuda.json"), "{}\n")
    assert open_fds() == before, "atomic_write"
    assert stack_files.read_as(str(wheel), NOBODY.pw_uid, NOBODY.pw_gid) == b"PK"
    assert open_fds() == before, "read_as"
    with pytest.raises(stack_files.UnsafePath, match="not a plain file"):
        stack_files.read_as(str(fifo), NOBODY.pw_uid, NOBODY.pw_gid)
    assert open_fds() == before, "open_as refusing a FIFO"
    stack_files.take_as(str(wheel), NOBODY.pw_uid, NOBODY.pw_gid, str(tmp_path / "cache"), "apex.whl")
    assert open_fds() == before, "take_as"


def test_root_takes_on_the_users_ids_and_groups_only_and_gets_its_own_back():
    """rights_of: the user's uid, gid and only that group for the body, root's groups after it, and
    nothing changed when the uid is root's. Broken cases: setgroups or setegid left out (root's
    groups and gid stayed, and with them root's group rights), the groups not restored, and the
    no-op test for uid 0 changed."""
    groups = os.getgroups()
    with stack_files.rights_of(NOBODY.pw_uid, NOBODY.pw_gid):
        inside = (os.geteuid(), os.getegid(), os.getgroups())
    assert inside == (NOBODY.pw_uid, NOBODY.pw_gid, [NOBODY.pw_gid])
    assert (os.geteuid(), os.getegid(), os.getgroups()) == (0, 0, groups)
    with stack_files.rights_of(0, NOBODY.pw_gid):
        inside = (os.geteuid(), os.getegid(), os.getgroups())
    assert inside == (0, 0, groups)


def test_a_file_of_roots_group_is_not_read_with_the_users_rights(users_tree):
    """A file the training user may not read, but root's group may (0640 root:root), is refused:
    the read runs with the user's gid and groups, not root's. Broken cases: root's groups or gid
    kept (setgroups, setegid left out)."""
    secret = users_tree / "config.json"
    secret.write_text("root's group only\n")
    os.chown(secret, 0, 0)
    secret.chmod(0o640)
    with pytest.raises(PermissionError):
        stack_files.read_as(str(secret), NOBODY.pw_uid, NOBODY.pw_gid)
    assert os.geteuid() == 0 and os.getegid() == 0


def test_a_link_in_the_users_tree_is_refused_even_to_a_file_the_user_may_read(users_tree):
    """open_as never follows a link at the last component, even to a file the user could read
    (what the link names is not the file asked for). Broken case: O_NOFOLLOW lost."""
    public = users_tree.parent / "public"
    public.write_text("anyone's\n")
    public.chmod(0o644)
    link = users_tree / "config.json"
    link.symlink_to(public)
    with pytest.raises(stack_files.UnsafePath, match="is a link"):
        stack_files.read_as(str(link), NOBODY.pw_uid, NOBODY.pw_gid)


def test_the_descriptor_open_as_returns_blocks(users_tree):
    """open_as opens O_NONBLOCK (a FIFO cannot hang it) and clears the flag once the descriptor is a
    plain file: the caller gets an ordinary descriptor. Broken case: the flag left set."""
    import fcntl

    plain = users_tree / "config.json"
    plain.write_text("{}\n")
    fd = stack_files.open_as(str(plain), NOBODY.pw_uid, NOBODY.pw_gid)
    try:
        assert not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK
    finally:
        os.close(fd)


def test_read_as_reads_at_most_one_mib_by_default(users_tree):
    """read_as is for small files (a config, a record, a build log's tail): 1 MiB by default, and
    the limit given otherwise. Broken case: another default (0, 512 KiB, 2 MiB)."""
    big = users_tree / "build.log"
    big.write_bytes(b"x" * (3 << 20))
    assert len(stack_files.read_as(str(big), NOBODY.pw_uid, NOBODY.pw_gid)) == 1 << 20
    assert stack_files.read_as(str(big), NOBODY.pw_uid, NOBODY.pw_gid, limit=5) == b"xxxxx"


def test_take_as_puts_the_file_only_in_a_directory_of_roots(tmp_path, users_tree, umask022):
    """take_as as root: the cache must be root's alone (refused in a user's directory), and a
    missing cache is made 0755. Broken cases: root_only computed from another uid than 0, and
    another create mode."""
    wheel = users_tree / "apex.whl"
    wheel.write_bytes(b"PK wheel")
    os.chown(wheel, NOBODY.pw_uid, NOBODY.pw_gid)
    with pytest.raises(stack_files.UnsafePath, match="owned by uid %d" % NOBODY.pw_uid):
        stack_files.take_as(str(wheel), NOBODY.pw_uid, NOBODY.pw_gid, str(users_tree / "cache"), "apex.whl")
    assert not (users_tree / "cache" / "apex.whl").exists()
    cache = tmp_path / "cache"
    stack_files.take_as(str(wheel), NOBODY.pw_uid, NOBODY.pw_gid, str(cache), "apex.whl")
    assert stat.S_IMODE(cache.stat().st_mode) == 0o755
