"""Faults of the Python layers on a built host: clear messages, nothing half-installed, the next run recovers.

Each class gets a container of the default scenario's verified image (conftest.built: every layer
built), so these start from what a user's host has after a first run instead of building conda,
torch and Apex again. make faults-built (--dist loadscope) sends each class to a worker as a whole:
a class's tests run in order on its host, the classes side by side.

What these catch: a refused torch pin left in constraints.txt (later pip calls would be
pinned to a torch that does not exist); a bad verl_version that deletes a working checkout
before finding out the tag does not exist; an Apex "reinstall" that installed nothing
(the dist's RECORD must be rewritten, from the cached wheel, with no compile).
"""

from __future__ import annotations

import hashlib
import re
import socket
import urllib.parse
import uuid
from pathlib import Path

import pytest
from conftest import built

import mirror

ENV = "/opt/miniforge3/envs/verl-env"
CONSTRAINTS = ENV + "/constraints.txt"
VERL_DIR = "/home/verl/verl-p40/verl"

# The installed apex distribution: its RECORD file (identity and lines) and where pip took it from.
APEX_DIST = r"""
import glob, json, os, sysconfig
(info,) = glob.glob(os.path.join(sysconfig.get_paths()["purelib"], "apex-*.dist-info"))
record = os.path.join(info, "RECORD")
url = os.path.join(info, "direct_url.json")
stat = os.stat(record)
print(json.dumps({"record_id": [stat.st_ino, stat.st_mtime_ns], "record": open(record).read().splitlines(),
                  "url": json.load(open(url))["url"] if os.path.exists(url) else None}))
"""
# The RECORD inside a wheel: what its files hash to.
WHEEL_RECORD = r"""
import json, sys, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
(name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/RECORD")]
print(json.dumps(wheel.read(name).decode().splitlines()))
"""
CACHED_WHEEL = "ls /var/cache/verl-p40/apex-wheels/*/apex-*.whl"
PY_STANDINS = Path(__file__).resolve().parents[2] / ".cache" / "standins-python"
# A git on the host's PATH that logs every command line it gets (what ps would show), then runs git.
GIT_ARGV_LOG = "/tmp/git-argv.log"
LOGGING_GIT = '#!/bin/sh\necho "$*" >> %s\nexec /usr/bin/git "$@"\n' % GIT_ARGV_LOG


@pytest.fixture(scope="class")
def host(tmp_path_factory):
    """Each class of faults gets a built host of its own (conftest.built); its tests run in order on it."""
    with built(tmp_path_factory) as host:
        yield host


def assert_installed_from_the_cached_wheel(host, before: dict) -> None:
    """pip rewrote apex's RECORD (an install happened), from the wheel in the host's cache
    (direct_url.json names it), and every file the wheel holds is installed with its hash."""
    after = host.python(APEX_DIST)
    assert after["record_id"] != before["record_id"], "apex's RECORD is untouched: nothing was installed"
    (wheel,) = host.sh(CACHED_WHEEL).stdout.split()
    # pip writes the path URL-quoted (the "+" of a local version is %2B).
    assert urllib.parse.unquote(after["url"]) == "file://" + wheel
    wheel_lines = [line for line in host.python(WHEEL_RECORD, wheel) if "/RECORD," not in line]
    assert set(wheel_lines) <= set(after["record"])


VERL_PROBE = "import json, verl; print(json.dumps([verl.__file__, verl.__version__]))"


def working_verl(host) -> dict:
    """The checkout's commit and what `import verl` finds."""
    head = host.as_user("git -C %s rev-parse HEAD" % VERL_DIR).stdout.strip()
    return {"head": head, "import": host.python(VERL_PROBE)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# A .pth file runs its import line in every Python started from that env, whatever it imports.


PLANT_DIR = "/tmp/verl-p40-plant"


PLANT_PTH = "import os; open('%s/%%d-%%d' %% (os.getuid(), os.getpid()), 'w').close()\n" % PLANT_DIR


PLANT_SH = "touch %s/$(id -u)-sh-$$\n" % PLANT_DIR


def plants(host) -> list[str]:
    return host.sh("ls %s" % PLANT_DIR).stdout.split()


class TestTorchPins:
    """torch's pins, its wheel's sha256 and its index's credentials, in order on one built host: the first
    leaves the layer building, the next rebuilds it."""

    def test_a_torch_pin_that_does_not_exist(self, host):
        run = host.play("--tags", "conda,torch", torch_packages=["torch==2.6.99"], torch_expected_version="2.6.99")
        assert run.returncode != 0
        assert "pip could not install torch==2.6.99" in run.output
        assert host.state("conda")["status"] == "complete"
        assert host.state("torch")["status"] == "building"
        # The refused pin did not become the env's: every later pip call would be held to it.
        assert "2.6.99" not in host.sh("cat " + CONSTRAINTS).stdout
        assert not host.exists(ENV + "/constraints.next.txt")

    def test_a_refused_pin_keeps_the_installed_torch_pinned(self, host):
        # The layer the last test left building is rebuilt: nothing to ask the env before, torch asked after.
        run = host.play("--tags", "torch")
        assert run.returncode == 0, run.output[-3000:]
        assert "Ask the env for torch" not in run.output and "Ask torch what it is" in run.output
        pins = host.sh("cat " + CONSTRAINTS).stdout.split()
        assert "torch==2.6.0" in pins

        run = host.play("--tags", "torch", torch_packages=["torch==2.6.99"], torch_expected_version="2.6.99")
        assert run.returncode != 0
        assert "were left as they were" in " ".join(run.output.split())
        assert host.sh("cat " + CONSTRAINTS).stdout.split() == pins
        assert host.python("import json, torch; print(json.dumps(torch.__version__))") == "2.6.0+cu124"
        # The pin still holds torch in place for any later pip call.
        refused = host.as_user(ENV + "/bin/python -m pip install --dry-run --no-deps torch==2.5.1", check=False)
        assert refused.returncode != 0 and "torch" in refused.stderr

        run = host.play("--tags", "torch")
        assert run.returncode == 0, run.output[-3000:]
        assert host.state("torch")["status"] == "complete"

    def test_a_torch_wheel_under_another_sha256_is_refused(self, host):
        """The index serves torch's wheel, but not under the pinned sha256: pip refuses it before the
        layer is marked building, and the installed torch, its record and the env stay as they were."""
        run = host.play("--tags", "torch")
        assert run.returncode == 0, run.output[-3000:]
        before = host.state("torch")
        wrong = "0" * 64
        run = host.play("--tags", "torch", rebuild="torch", torch_wheel_sha256={"torch==2.6.0": {"3.11": wrong}})
        assert run.returncode != 0
        assert "whose sha256 is not %s (torch_wheel_sha256): pip refused it" % wrong in " ".join(run.output.split())
        assert host.state("torch") == before
        for left in ("/torch-wheel", "/torch-wheel.txt", "/pip-torch-index.conf", "/constraints.next.txt"):
            assert not host.exists(ENV + left), left
        assert host.python("import json, torch; print(json.dumps(torch.__version__))") == "2.6.0+cu124"

    def test_an_index_credential_stays_out_of_the_host_and_the_output(self, host):
        """A private torch index's URL may carry a token: pip reads it from a 0600 file that the
        install removes, the record and the messages show the URL without it, nothing the run
        wrote on the host keeps it, and pip's command line (which ps shows, and which the failed
        task's output prints) does not hold it."""
        secret = "s3cret-" + uuid.uuid4().hex[:12]
        # A version that is not installed, so pip has to ask the index (nothing serves it).
        run = host.play(
            "--tags",
            "torch",
            torch_index_url="http://ci:%s@127.0.0.1:9/simple" % secret,
            torch_packages=["torch==2.6.99"],
            torch_expected_version="2.6.99",
        )
        assert run.returncode != 0
        assert "from http://***@127.0.0.1:9/simple" in run.output
        assert secret not in run.output
        kept = host.sh("grep -rlI %s /var/lib/verl-p40 /etc /home/verl %s /tmp /var/tmp || true" % (secret, ENV))
        assert kept.stdout.split() == []
        assert not host.exists(ENV + "/pip-torch-index.conf")
        run = host.play("--tags", "torch")
        assert run.returncode == 0, run.output[-3000:]


class TestApexWheels:
    """Apex's build and its wheel cache, in order on one built host."""

    def test_a_failing_apex_build(self, host):
        """A compile that fails (the stand-in source fails on purpose) leaves the layer building, caches no
        wheel and installs nothing; the next run compiles again. The cache is emptied first, so that the
        rebuild has to compile rather than take the wheel the image's first build cached; the Apex the
        image installed stays installed as it was."""
        host.sh("rm -rf /var/cache/verl-p40/apex-wheels")
        before = host.python(APEX_DIST)
        run = host.play("--tags", "apex", rebuild="apex", apex_build_environment={"APEX_STANDIN_FAIL": "1"})
        assert run.returncode != 0
        assert "Apex did not build" in run.output and "its last lines:" in run.output
        assert "APEX_STANDIN_FAIL=1: this source fails to compile on purpose" in run.output
        assert host.state("apex")["status"] == "building"
        assert host.sh("ls /var/cache/verl-p40/apex-wheels 2>/dev/null | wc -l").stdout.strip() == "0"
        assert host.python(APEX_DIST)["record_id"] == before["record_id"], "the failed build installed something"

        run = host.play("--tags", "apex")
        assert run.returncode == 0, run.output[-3000:]
        assert "Compile (log in" in run.output
        assert host.state("apex")["status"] == "complete"
        assert (
            host.sh("/opt/miniforge3/envs/verl-env/bin/python -c 'import torch, apex_C'", check=False).returncode == 0
        )

    def test_apex_reinstalls_from_the_cached_wheel(self, host):
        before = host.python(APEX_DIST)
        run = host.play("--tags", "apex", rebuild="apex")
        assert run.returncode == 0, run.output[-3000:]
        # A rebuild asks the env nothing before it installs, and imports the extensions after.
        assert "Ask the env for apex_C" not in run.output and "Import the extensions" in run.output
        assert "Compile (log in" not in run.output
        assert host.state("apex")["details"]["built_from_source"] is False
        assert_installed_from_the_cached_wheel(host, before)

    def test_a_second_host_takes_the_wheel_from_the_controller(self, host, tmp_path):
        # The first build sends its wheel to the controller's cache...
        host.sh("rm -rf /var/cache/verl-p40/apex-wheels")
        run = host.play("--tags", "apex", rebuild="apex", stack_controller_cache_dir=str(tmp_path))
        assert run.returncode == 0, run.output[-3000:]
        assert list(tmp_path.glob("apex-wheels/*/apex-*.whl"))
        # ...and a host without it (here: the same host, its cache emptied) installs that wheel.
        host.sh("rm -rf /var/cache/verl-p40/apex-wheels")
        before = host.python(APEX_DIST)
        run = host.play("--tags", "apex", rebuild="apex", stack_controller_cache_dir=str(tmp_path))
        assert run.returncode == 0, run.output[-3000:]
        assert "Compile (log in" not in run.output
        assert host.state("apex")["details"]["built_from_source"] is False
        assert_installed_from_the_cached_wheel(host, before)
        # The wheel installed is the controller's, byte for byte.
        (controller_wheel,) = tmp_path.glob("apex-wheels/*/apex-*.whl")
        (wheel,) = host.sh(CACHED_WHEEL).stdout.split()
        digest = host.sh("sha256sum " + wheel).stdout.split()[0]
        assert digest == hashlib.sha256(controller_wheel.read_bytes()).hexdigest()

    def test_a_cached_wheel_that_changed_is_refused(self, host):
        """A wheel in the cache (the host's, or the controller's copied in) installs only when its
        sha256 is the one recorded beside it when it was built."""
        (wheel,) = host.sh(CACHED_WHEEL).stdout.split()
        size = host.sh("stat -c %s " + wheel).stdout.strip()
        before = host.python(APEX_DIST)
        host.sh("printf x >> " + wheel)
        try:
            run = host.play("--tags", "apex", rebuild="apex")
        finally:
            host.sh("truncate -s %s %s" % (size, wheel))
        assert run.returncode != 0
        out = " ".join(run.output.split())
        assert "is not the wheel that was built for build key" in out and "Nothing was installed" in out
        assert host.python(APEX_DIST)["record_id"] == before["record_id"]
        run = host.play("--tags", "apex", rebuild="apex")
        assert run.returncode == 0, run.output[-3000:]
        assert "Compile (log in" not in run.output


class TestTheUsersTrees:
    """The env's configuration, vLLM on a Pascal GPU, and root against what the training user can write."""

    def test_a_new_pip_index_reaches_the_env_on_a_rerun(self, host):
        """The env's pip.conf follows stack_pip_index_url on a run that has nothing else to do, without
        reinstalling Miniforge or the env (the mirrors are not build inputs); the old value comes back the
        same way, and a rerun after that changes nothing. The URLs (pip's index, conda-forge's mirror) may
        carry a token: only pip.conf and .condarc (0600, the training user's) hold it, not the output of a
        --diff run, nor the record."""
        before = host.state("conda")
        secret = "s3cret-" + uuid.uuid4().hex[:12]
        index = "http://ci:%s@127.0.0.1:9/simple" % secret
        channel_mirror = "https://ci:%s@127.0.0.1:9/conda" % secret
        run = host.play("--tags", "conda", "--diff", stack_pip_index_url=index, stack_conda_forge_mirror=channel_mirror)
        assert run.returncode == 0, run.output[-3000:]
        assert secret not in run.output
        assert index in host.sh("cat %s/pip.conf" % ENV).stdout
        assert channel_mirror in host.sh("cat /opt/miniforge3/.condarc").stdout
        for written in (ENV + "/pip.conf", "/opt/miniforge3/.condarc"):
            assert host.sh("stat -c %%a:%%U %s" % written).stdout.strip() == "600:verl", written
        kept = host.sh("grep -rlI %s /var/lib/verl-p40 /etc /home/verl /tmp /var/tmp || true" % secret)
        assert kept.stdout.split() == []
        changed = host.state("conda")
        assert (
            changed["fingerprint"] == before["fingerprint"]
            and changed["details"]["config"] != before["details"]["config"]
        )
        run = host.play("--tags", "conda")
        assert run.returncode == 0, run.output[-3000:]
        assert index not in host.sh("cat %s/pip.conf" % ENV).stdout
        assert secret not in host.sh("cat /opt/miniforge3/.condarc").stdout
        assert host.state("conda")["details"]["config"] == before["details"]["config"]
        run = host.play("--tags", "conda")
        assert run.returncode == 0 and "changed=0" in run.output, run.output[-3000:]
        assert "Write .condarc" not in run.output

    def test_vllm_is_refused_on_a_pascal_gpu(self, host):
        host.fake_nvidia_smi("0, Tesla P40, 6.1, 24576, 535.183.01, 00000000:3B:00.0")
        try:
            run = host.play("--tags", "vllm", preflight_require_gpu=True, vllm_enabled=True)
        finally:
            host.fake_nvidia_smi(None)
        assert run.returncode != 0
        out = " ".join(run.output.split())
        assert "compute capability 6.1" in out and "no kernel image is available" in out
        assert "HF rollout" in out
        assert host.state("vllm") == {}

    def test_a_link_the_training_user_planted_in_its_home(self, host):
        """Root used to create and chown the directories in the training user's home, following a
        link that user planted: pointed at /etc/profile.d (which every login shell sources), the
        next run made it the user's. Now those tasks run as that user, who cannot write there."""
        run = host.play("--tags", "model")
        assert run.returncode == 0, run.output[-3000:]
        host.as_user("rm -rf /home/verl/verl-p40/tools && ln -s /etc/profile.d /home/verl/verl-p40/tools")
        try:
            run = host.play("--tags", "model", rebuild="model")
            owner = host.sh("stat -c %U /etc/profile.d").stdout.strip()
            planted = host.sh("ls /etc/profile.d").stdout.split()
        finally:
            host.as_user("rm -f /home/verl/verl-p40/tools")
        assert run.returncode != 0
        assert owner == "root"
        assert "model_fetch.py" not in planted
        # With the link gone the layer builds again.
        run = host.play("--tags", "model", rebuild="model")
        assert run.returncode == 0, run.output[-3000:]
        assert host.sh("stat -c %U /home/verl/verl-p40/tools").stdout.strip() == "verl"

    def test_root_never_runs_what_the_training_user_can_write(self, host):
        """The env and Miniforge are the training user's. Planted there as that user: a .pth file in
        the env (run by any Python of the env) and a line in Miniforge's conda.sh (sourced by the login
        hook). A whole run that looks at every layer (-e verify=all) and one that rebuilds every layer
        that runs the env's Python must leave markers of that user only, none of uid 0; so must a root
        login shell. (A rebuild of the conda layer replaces the env, and the plant with it; torch's
        install, pip as the training user like verl's, is left out to keep the suite's time.)"""
        site = host.python("import json, sysconfig; print(json.dumps(sysconfig.get_paths()['purelib']))")
        host.sh("rm -rf %s && mkdir -m 1777 %s" % (PLANT_DIR, PLANT_DIR))
        host.as_user("cat > %s/verl_p40_plant.pth <<'EOF'\n%sEOF" % (site, PLANT_PTH))
        host.as_user("cat >> /opt/miniforge3/etc/profile.d/conda.sh <<'EOF'\n%sEOF" % PLANT_SH)
        try:
            host.python("print(1)")  # the plant works: the env's Python as root would leave 0-<pid>
            assert [m for m in plants(host) if m.startswith("0-")], "the .pth plant did not fire"
            host.sh("rm -f %s/*" % PLANT_DIR)
            # Every layer looked at (probes and full checks), then the install paths that run the env's
            # Python rebuilt: Apex (from its cached wheel), verl (pip, editable), the patch, the launcher.
            for extra in ({"verify": "all"}, {"rebuild": "apex,verl,patch,train"}):
                run = host.play(**extra)
                assert run.returncode == 0, run.output[-3000:]
            host.sh("bash -lc true")
            host.as_user("bash -lc true")
            found = plants(host)
        finally:
            host.as_user("rm -f %s/verl_p40_plant.pth" % site)
            host.as_user("sed -i '/verl-p40-plant/d' /opt/miniforge3/etc/profile.d/conda.sh")
        assert [m for m in found if m.startswith("0-")] == [], found
        # The training user's own runs did start the env's Python and its login shell.
        uid = host.sh("id -u verl").stdout.strip()
        assert [m for m in found if m.startswith(uid + "-sh-")] and [m for m in found if re.match(uid + r"-\d+$", m)]


class TestVerlCheckout:
    """The verl checkout's faults: a tag that does not exist or moved, local work, a git credential.

    They run in order on a built host of their own, beside the other classes.
    """

    def test_a_verl_tag_that_does_not_exist(self, host):
        run = host.play("--tags", "verl")
        assert run.returncode == 0, run.output[-3000:]
        state, working = host.state("verl"), working_verl(host)
        assert state["status"] == "complete"
        assert working["import"][0].startswith(VERL_DIR + "/")

        run = host.play("--tags", "verl", verl_version="v9.9.9")
        assert run.returncode != 0
        out = " ".join(run.output.split())
        assert "Could not check out v9.9.9" in out and "was left as it was" in out
        # The old role deleted the checkout before trying the clone: no verl at all.
        assert working_verl(host) == working
        assert host.state("verl") == state
        assert not host.exists(VERL_DIR + ".staging")

    def test_a_verl_tag_at_another_commit(self, host):
        state, working = host.state("verl"), working_verl(host)
        run = host.play("--tags", "verl", verl_commit="0" * 40)
        assert run.returncode != 0
        out = " ".join(run.output.split())
        assert "not the pinned " + "0" * 40 in out and "was left as it was" in out
        assert working_verl(host) == working
        assert host.state("verl") == state
        assert not host.exists(VERL_DIR + ".staging")

    def test_a_verl_rebuild_keeps_local_work(self, host):
        """A forced rebuild of the verl layer replaced the checkout with rm -rf, the user's edits
        and new files included; now an old checkout holding local work is moved aside, with a
        timestamp, and the run says where."""
        host.as_user(
            "echo '# my change' >> %s/verl/__init__.py && echo 'x = 1' > %s/my_reward.py" % (VERL_DIR, VERL_DIR)
        )
        run = host.play("--tags", "verl", rebuild="verl")
        assert run.returncode == 0, run.output[-3000:]
        out = " ".join(run.output.split())
        assert "The old checkout had local work" in out and "edited: verl/__init__.py" in out
        assert "new files: my_reward.py" in out
        (kept,) = host.sh("ls -d %s.kept-*" % VERL_DIR).stdout.split()
        assert kept in out
        assert host.sh("tail -n 1 %s/verl/__init__.py" % kept).stdout == "# my change\n"
        assert host.sh("cat %s/my_reward.py" % kept).stdout == "x = 1\n"
        # The new checkout is the pinned commit, clean.
        assert host.as_user("git -C %s status --porcelain --untracked-files=no" % VERL_DIR).stdout == ""
        assert not host.exists(VERL_DIR + "/my_reward.py")
        # A rebuild of a checkout without local work replaces it, keeping nothing.
        run = host.play("--tags", "verl", rebuild="verl")
        assert run.returncode == 0, run.output[-3000:]
        assert "The old checkout had local work" not in run.output
        assert host.sh("ls -d %s.kept-*" % VERL_DIR).stdout.split() == [kept]
        host.sh("rm -rf " + kept)

    def test_a_git_credential_stays_off_the_command_line(self, host):
        """A private git mirror's URL may carry a token (https://user:token@host/verl.git). git used to
        get it on its command line (ps shows it) and wrote it into the checkout's .git/config and the
        layer's record. Now git gets the bare URL and the token from a 0600 store that the checkout
        removes again; the mirror here answers 401 without the token, so the clone works only if the
        token still reaches git."""
        secret = "s3cret-" + uuid.uuid4().hex[:12]
        port = free_port()
        server = mirror.serve([str(PY_STANDINS)], port, auth="ci:" + secret)
        bare = "http://127.0.0.1:%d/verl.git" % port
        try:
            # The mirror refuses a client without the token: the broken case this test tells apart.
            refused = host.as_user("GIT_TERMINAL_PROMPT=0 git ls-remote %s" % bare, check=False)
            assert refused.returncode != 0 and "could not read Username" in refused.stderr
            host.sh(
                "printf '%s' > /usr/local/bin/git && chmod 755 /usr/local/bin/git && rm -f %s"
                % (LOGGING_GIT, GIT_ARGV_LOG)
            )
            run = host.play(
                "--tags", "verl", rebuild="verl", verl_repo_url="http://ci:%s@127.0.0.1:%d/verl.git" % (secret, port)
            )
            argv = host.sh("cat %s" % GIT_ARGV_LOG).stdout
        finally:
            server.shutdown()
            host.sh("rm -f /usr/local/bin/git %s" % GIT_ARGV_LOG)
        assert run.returncode == 0, run.output[-3000:]
        assert "clone" in argv and bare in argv
        assert secret not in argv
        assert secret not in run.output
        kept = host.sh("grep -rlI %s /var/lib/verl-p40 /etc /home/verl %s /tmp /var/tmp || true" % (secret, ENV))
        assert kept.stdout.split() == []
        assert host.state("verl")["inputs"]["repo"] == "http://***@127.0.0.1:%d/verl.git" % port
        assert not host.exists("/home/verl/verl-p40/.git-credentials.d")
        # Back to the CI mirror, for the tests after this one.
        run = host.play("--tags", "verl")
        assert run.returncode == 0, run.output[-3000:]


class TestVerlRecovery:
    """A pip run killed half way, a directory that is not a checkout, the Hugging Face token, and a
    rerun with nothing to do: on a built host of their own, beside the other classes."""

    def test_a_run_killed_in_the_middle_of_pip(self, host):
        """A run killed while pip installs verl's set leaves a package half installed, which the next
        pip call calls "already satisfied". The layer was marked building at step pip, so the next run
        reinstalls the set with --force-reinstall: the file the killed run did not write is back."""
        package = host.python("import codetiming, os, json; print(json.dumps(os.path.dirname(codetiming.__file__)))")
        host.sh("rm %s/__init__.py" % package)
        host.sh(
            "python3 -c \"import json; p = '/var/lib/verl-p40/layers/verl.json'; r = json.load(open(p));"
            " r.update(status='building', step='pip'); json.dump(r, open(p, 'w'))\""
        )
        run = host.play("--tags", "verl")
        assert run.returncode == 0, run.output[-3000:]
        assert host.exists(package + "/__init__.py")
        state = host.state("verl")
        assert state["status"] == "complete" and "step" not in state

    def test_a_hugging_face_token_stays_in_its_file(self, host):
        """stack_hf_token (gated models and datasets) reaches the hub client only as a 0600 file of the
        training user's: the fetch tool says it was given one, and nothing else the run wrote or printed
        (verbose output included) holds it. Without a token the file goes."""
        secret = "hf_" + uuid.uuid4().hex
        token_file = "/home/verl/verl-p40/.hf-token"
        run = host.play("--tags", "model", "-v", rebuild="model", stack_hf_token=secret)
        assert run.returncode == 0, run.output[-3000:]
        assert re.search(r'hf_token\\?": true', run.output), "the fetch tool was not given the token"
        assert secret not in run.output
        assert host.sh("stat -c '%a %U' " + token_file).stdout.split() == ["600", "verl"]
        kept = host.sh("grep -rlI %s /var/lib/verl-p40 /etc /home/verl /tmp /var/tmp || true" % secret).stdout.split()
        assert kept == [token_file]
        run = host.play("--tags", "model", rebuild="model")
        assert run.returncode == 0, run.output[-3000:]
        assert not host.exists(token_file)

    def test_a_clean_rerun_looks_at_nothing(self, host):
        """A rerun with nothing to do decides from the records and a stat of their files: no probe of the
        env runs. A recorded file that changed, or -e verify, makes that one layer look again.

        This host is a container of the committed image, which keeps whole seconds of a file's mtime
        only: the default scenario's side_effect.yml rounds the recorded files' times and converges
        once more before the commit, so that the records match what the image holds. Without it,
        this first run on a new container looks at every layer with recorded files."""
        run = host.play("--tags", "torch,apex,verl")
        assert run.returncode == 0, run.output[-3000:]
        assert "changed=0" in run.output
        for probe in ("Ask the env for torch", "Ask the env for apex_C", "Read the checkout's commit"):
            assert probe not in run.output, probe

        torch = host.state("torch")
        (version_py,) = [path for path in torch["files"] if path.endswith("/torch/version.py")]
        host.sh("touch %s" % version_py)
        run = host.play("--tags", "torch,apex")
        assert run.returncode == 0, run.output[-3000:]
        assert "Ask the env for torch" in run.output and "Ask the env for apex_C" not in run.output
        # Found as recorded, so nothing installed: the check takes the look's answer, not a second import.
        assert "Ask torch what it is" not in run.output
        # looked at and found sound: the file's stat is refreshed, the build is the same one
        after = host.state("torch")
        assert after["fingerprint"] == torch["fingerprint"] and after["files"][version_py] != torch["files"][version_py]

        # -e verify: the look imports torch and every extension the host needs, as the check after an
        # install does; found sound, nothing is installed and nothing imported twice.
        run = host.play("--tags", "apex", verify="apex")
        assert run.returncode == 0, run.output[-3000:]
        assert "Ask the env for apex_C" in run.output and "Import the extensions" not in run.output

    def test_a_directory_at_the_checkout_path_that_is_not_a_checkout(self, host):
        """The rebuild's swap moved whatever was at stack_verl_dir to <dir>.old and deleted it; a
        directory there that is not a git checkout (the user's own files) now stops the layer."""
        state = host.state("verl")
        host.as_user(
            "mv %s %s.aside && mkdir %s && echo mine > %s/notes.txt" % (VERL_DIR, VERL_DIR, VERL_DIR, VERL_DIR)
        )
        try:
            run = host.play("--tags", "verl", rebuild="verl")
            notes = host.sh("cat %s/notes.txt" % VERL_DIR, check=False).stdout
        finally:
            host.as_user("rm -rf %s && mv %s.aside %s" % (VERL_DIR, VERL_DIR, VERL_DIR))
        assert run.returncode != 0
        assert "holds something that is not a git checkout" in " ".join(run.output.split())
        assert notes == "mine\n"
        assert not host.exists(VERL_DIR + ".old")
        # Refused before the layer was marked building: its record is as it was.
        assert host.state("verl") == state
        run = host.play("--tags", "verl")
        assert run.returncode == 0, run.output[-3000:]
