"""module_utils/stack_lock.py: the host's run lock as the stack's modules read it.

The lock module and the layer module refuse or allow a run on what read_lock says, so each way a
lock file can be wrong must come back as "no lock" or "unreadable, with why", never as a run id."""

from __future__ import annotations

import json

from ansible.module_utils.stack_lock import read_lock


def test_a_lock_that_names_a_run_is_read_as_written(tmp_path):
    lock = tmp_path / "run.lock"
    lock.write_text(json.dumps({"id": "ctl-4242-123456", "pid": 4242, "host": "node1"}))
    assert read_lock(str(lock)) == {"id": "ctl-4242-123456", "pid": 4242, "host": "node1"}


def test_no_lock_file_is_no_lock(tmp_path):
    assert read_lock(str(tmp_path / "run.lock")) is None


def test_a_lock_that_cannot_be_read_says_why(tmp_path):
    # A directory in the lock's place (OSError), and bytes that are not UTF-8 (ValueError).
    held = read_lock(str(tmp_path))
    assert held["unreadable"] is True and held["id"] == ""
    assert held["error"].startswith("cannot be read: [Errno 21] Is a directory")
    binary = tmp_path / "run.lock"
    binary.write_bytes(b'{"id": "\xff\xfe"}')
    held = read_lock(str(binary))
    assert held["unreadable"] is True and held["id"] == ""
    assert held["error"].startswith("cannot be read: 'utf-8' codec can't decode")


def test_a_lock_that_is_not_json_says_so(tmp_path):
    lock = tmp_path / "run.lock"
    lock.write_text('{"id": "run-a"')  # cut short
    held = read_lock(str(lock))
    assert held["unreadable"] is True and held["id"] == "" and held["error"].startswith("not JSON: ")


def test_json_without_a_run_id_is_no_lock_of_a_run(tmp_path):
    lock = tmp_path / "run.lock"
    for content in ("[1, 2]", '"run-a"', '{"pid": 1}', '{"id": 42}', '{"id": ""}', '{"id": "  "}'):
        lock.write_text(content)
        assert read_lock(str(lock)) == {"id": "", "unreadable": True, "error": "JSON, but no run id in it"}, content


def test_a_lock_is_read_up_to_64_kib(tmp_path):
    """A lock is a line of JSON; a file of more than 64 KiB in its place is not read whole (not JSON),
    so a stray large file costs no memory. A lock with a long note up to that size reads."""
    lock = tmp_path / "run.lock"
    lock.write_text(json.dumps({"id": "run-a", "note": "x" * 60000}))
    assert read_lock(str(lock))["id"] == "run-a"
    lock.write_text(json.dumps({"id": "run-a", "note": "x" * 70000}))
    held = read_lock(str(lock))
    assert held["unreadable"] is True and held["error"].startswith("not JSON: ")
