"""The driver layer's nvidia-persistenced (roles/driver/tasks/persistenced.yml), on localhost in check
mode with the look at the host given: the unit and the system user it makes, an account of that name
used as it is or refused, a program root must not run, the stop where an installed driver brought no
daemon, check mode on a systemd host, and the user names tasks/main.yml refuses before the layer.
Starting the daemon under a real systemd: tests/integration/test_faults.py; on a GPU host:
tests/infra/test_driver.py."""

from __future__ import annotations

import json
from pathlib import Path

import driver  # filter_plugins/driver.py (pytest.ini's pythonpath)
import pytest
from ansible.errors import AnsibleFilterError
from conftest import REPO, run_play

PLAY = {"vars_files": [str(path) for path in sorted((REPO / "roles/stack/defaults/main").glob("*.yml"))]}
P40 = {"bus_id": "00000000:03:00.0", "name": "Tesla P40", "memory_mib": 22919, "ecc": "Enabled"}
STATE = "Driver | Say where nvidia-persistenced stands"


def look(program: str | None, systemd: bool = False, unsafe: str = "") -> dict:
    """driver_info's result, as much of it as the tasks read."""
    return {
        "installed": {"version": "580.105.08", "working": True, "flavour": "proprietary"},
        "nvidia_smi": {"gpus": 1, "cards": [dict(P40, persistence_mode="Disabled")]},
        "nvidia_smi_path": "/usr/bin/nvidia-smi",
        "persistenced_path": program,
        "persistenced_unsafe": unsafe,
        "systemd": systemd,
    }


def persistenced(tmp_path: Path, now: dict, action: str = "keep", **extra: object):
    """persistenced.yml in check mode (with diffs): the exit status and each task's name and result."""
    task = {
        "name": "Persistenced",
        "ansible.builtin.include_role": {"name": "driver", "tasks_from": "persistenced.yml"},
    }
    given = {
        "__driver_now": now,
        "__driver_decision": {"action": action},
        "__driver_persistenced_unit": str(tmp_path / "etc" / "nvidia-persistenced.service"),
        **extra,
    }
    done = run_play(tmp_path, [task], "--check", "--diff", "-e", json.dumps(given), **PLAY)
    tasks = json.loads(done.stdout)["plays"][0]["tasks"][1:]
    return done.returncode, {t["task"]["name"].removeprefix("driver : "): t["hosts"]["localhost"] for t in tasks}


def state(found: dict) -> str:
    return found[STATE]["ansible_facts"]["__driver_persistenced_state"]


def test_the_daemon_gets_the_layers_unit_and_a_system_user(tmp_path: Path):
    rc, found = persistenced(tmp_path, look("/usr/bin/nvidia-persistenced"))
    assert rc == 0
    user = found["Driver | Make the daemon's system user"]["invocation"]["module_args"]
    assert (user["name"], user["system"], user["create_home"], user["shell"]) == (
        "nvidia-persistenced",
        True,
        False,
        "/usr/sbin/nologin",
    )
    unit = found["Driver | Write the daemon's unit"]["diff"][0]["after"]
    assert '\nExecStart="/usr/bin/nvidia-persistenced" "--user" "nvidia-persistenced"\n' in unit
    assert "\nType=forking\n" in unit and "\nRuntimeDirectory=nvidia-persistenced\n" in unit
    assert "\nWantedBy=multi-user.target\n" in unit
    # Persistence mode on, and nothing stops it when no device unit wants it (as a package's may).
    assert "no-persistence-mode" not in unit and "StopWhenUnneeded" not in unit and "rm -rf" not in unit
    # No systemd here (a container): the unit is there, the daemon not started, and the record says so.
    assert found["Driver | Start nvidia-persistenced, and at each boot"].get("skipped")
    assert state(found) == "not started: systemd does not run this host"
    assert not (tmp_path / "etc").exists()


def test_a_program_path_and_user_are_one_argument_each(tmp_path: Path):
    """systemd splits ExecStart= at spaces: a path with one stays one argument, % and $ literal."""
    rc, found = persistenced(
        tmp_path, look("/opt/nvidia driver/bin/nvidia-persistenced%h$X"), driver_persistenced_user="nvpd"
    )
    unit = found["Driver | Write the daemon's unit"]["diff"][0]["after"]
    assert rc == 0 and '\nExecStart="/opt/nvidia driver/bin/nvidia-persistenced%%h$$X" "--user" "nvpd"\n' in unit


def test_an_existing_system_account_is_used_as_it_is_a_login_account_refused(tmp_path: Path):
    """daemon (uid 1) is Debian's; nobody (uid 65534) is no system account: the daemon must not run
    as it, and the user module must not turn an existing account's home and shell."""
    rc, found = persistenced(tmp_path, look("/usr/bin/nvidia-persistenced"), driver_persistenced_user="daemon")
    assert rc == 0 and found["Driver | Make the daemon's system user"].get("skipped")
    assert '"--user" "daemon"' in found["Driver | Write the daemon's unit"]["diff"][0]["after"]
    rc, found = persistenced(tmp_path, look("/usr/bin/nvidia-persistenced"), driver_persistenced_user="nobody")
    assert rc != 0
    msg = found["Driver | Stop where that name is a login user's"]["msg"]
    assert "driver_persistenced_user nobody is an existing account with uid 65534, not a system account" in msg
    assert "Driver | Make the daemon's system user" not in found and "Driver | Write the daemon's unit" not in found


def test_a_program_root_did_not_write_alone_is_not_run(tmp_path: Path):
    unsafe = "/home/verl/bin/nvidia-persistenced (/home/verl/bin is owned by uid 1000)"
    rc, found = persistenced(tmp_path, look("/home/verl/bin/nvidia-persistenced", unsafe=unsafe))
    assert rc != 0
    msg = found["Driver | Stop where the daemon's program is not root's alone"]["msg"]
    assert msg.startswith("nvidia-persistenced at " + unsafe + "; root does not run it.")
    assert "Driver | Write the daemon's unit" not in found


def test_an_installed_driver_without_the_daemon_stops_a_kept_one_is_reported(tmp_path: Path):
    rc, found = persistenced(tmp_path, look(None), action="install")
    assert rc != 0
    msg = found["Driver | Stop where the driver installed brought no nvidia-persistenced"]["msg"]
    assert "The driver 580.105.08 was installed, but no nvidia-persistenced came with it" in msg
    assert "driver_persistenced: false" in msg
    rc, found = persistenced(tmp_path, look(None))
    assert rc == 0 and found["Driver | Write the daemon's unit"].get("skipped")
    assert state(found).startswith("absent: no nvidia-persistenced beside nvidia-smi or on PATH")


def test_check_mode_on_a_systemd_host_does_not_ask_for_a_unit_not_written(tmp_path: Path):
    """--check writes no unit, so systemd has none to enable or start: the start waits for the real run."""
    rc, found = persistenced(tmp_path, look("/usr/bin/nvidia-persistenced", systemd=True))
    assert rc == 0, found
    assert found["Driver | Write the daemon's unit"]["changed"] is True
    assert found["Driver | Start nvidia-persistenced, and at each boot"].get("skipped")
    assert state(found) == "not started: check mode, its unit not written yet"


@pytest.mark.parametrize(
    "name, refused",
    [
        ("nvidia-persistenced", False),
        ("nvpd", False),
        ("_nvpd2", False),
        ("x" * 32, False),
        ("x" * 33, True),
        ("nvpd --verbose", True),
        ("root\n", True),
        ("Nvpd", True),
        ("-nvpd", True),
        ("1nvpd", True),
        ("", True),
        (None, True),
        ("root", True),
        ("verl", True),
    ],
)
def test_the_users_name_is_a_system_users_not_root_nor_the_training_users(name: object, refused: bool):
    if not refused:
        assert driver.driver_user_check(name, "verl") == ""
        return
    with pytest.raises(AnsibleFilterError) as refusal:
        driver.driver_user_check(name, "verl")
    assert str(refusal.value).startswith(
        "driver_persistenced_user %s is not a name for the daemon's system user" % (json.dumps(name))
    )
    assert "not root nor the training user verl" in str(refusal.value)


def test_the_role_checks_the_name_before_the_layer(tmp_path: Path):
    task = {"name": "Driver", "ansible.builtin.include_role": {"name": "driver"}}
    done = run_play(tmp_path, [task], "--check", "-e", json.dumps({"driver_persistenced_user": "root"}), **PLAY)
    assert done.returncode != 0
    tasks = json.loads(done.stdout)["plays"][0]["tasks"]
    names = [t["task"]["name"].removeprefix("driver : ") for t in tasks]
    # The role's argument spec, then this check, which fails: nothing of the layer ran.
    assert len(names) == 3 and names[2] == "Driver | Check the persistence daemon's user name"
    assert names[1].startswith("Validating arguments against arg spec")
    result = tasks[2]["hosts"]["localhost"]
    assert result.get("failed") and 'driver_persistenced_user "root" is not a name for the daemon' in result["msg"]
