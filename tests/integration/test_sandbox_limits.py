"""Limits that hold against hostile code (reliability issue): a fork bomb, a memory hog, a process that
hides in the background, privileges. Each ends as the patch's failure (`tests_failed` or `timeout`), never
as a pass, and the host stays usable."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time

import pytest

from tasks_lib import engine
from tasks_lib.core.config import Settings
from tasks_lib.core.constants import LABEL_OWNER, Outcome, RunStatus
from tasks_lib.sources import gitops
from tasks_lib.sources.demo_repo import DEMO_PRS

pytestmark = [pytest.mark.docker, pytest.mark.slow]

FORK_BOMB = """
import os


def test_fork_bomb():
    spawned = 0
    while True:
        pid = os.fork()
        if pid == 0:
            while True:
                try:
                    os.fork()
                except OSError:
                    pass
        spawned += 1


def test_after_the_bomb():
    assert True
"""

MEMORY_HOG = """
def test_memory_hog():
    hog = []
    while True:
        hog.append(bytearray(64 * 2**20))
        for i in range(0, len(hog[-1]), 4096):
            hog[-1][i] = 1
"""

PRIVILEGES = """
import os
import socket

import pytest


def test_runs_as_an_unprivileged_user():
    assert os.getuid() == 65534 and os.geteuid() == 65534 and os.getgroups() == []


def test_no_capabilities():
    status = open("/proc/self/status").read()
    for field in ("CapPrm", "CapEff", "CapAmb"):
        assert f"{field}:\\t0000000000000000" in status


def test_cannot_write_the_runner_or_its_outputs():
    for path in ("/pbench/out/result.json", "/pbench/tools/pbench_runner.py", "/pbench/out/x"):
        with pytest.raises(PermissionError):
            open(path, "w")


def test_cannot_read_the_job_or_the_results():
    for path in ("/pbench/in/job.json", "/pbench/out/applied.diff", "/pbench/out/patch.log"):
        with pytest.raises(PermissionError):
            open(path)


def test_cannot_read_the_host_secrets():
    assert not any(k in os.environ for k in ("GITHUB_TOKEN", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"))
    assert not os.path.exists("/var/run/docker.sock") and not os.path.exists("/run/docker.sock")


def test_no_internet():
    with pytest.raises(OSError):
        socket.create_connection(("1.1.1.1", 443), timeout=3)


def test_a_name_outside_the_network_fails_at_once():
    import time

    start = time.monotonic()
    with pytest.raises(socket.gaierror):
        socket.getaddrinfo("smtp.example.com", 587)
    assert time.monotonic() - start < 2  # not the 10 s of an unanswered forward


def test_cannot_take_the_resolvers_port():
    for host in ("127.0.0.1", "0.0.0.0"):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s, pytest.raises(OSError):
            s.bind((host, 53))


def test_leaves_a_daemon_behind():
    if os.fork() == 0:
        os.setsid()
        import time

        time.sleep(3)  # pytest has finished by then: only the runner's kill stops what follows
        while True:
            try:
                open("/pbench/stage/junit.xml", "w").write("<forged/>")
            except OSError:
                pass
            time.sleep(0.01)
"""


def _new_file_diff(path: str, text: str) -> str:
    lines = text.strip("\n").splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{len(lines)} @@\n{body}"


def _run(demo_source, demo_repo, demo_prs, tmp_path, name, code, settings=None, timeout_s=None):
    head = demo_prs[DEMO_PRS["feature"]]["mergeCommit"]["oid"]
    base = gitops.first_parent(demo_repo, head)
    probe = engine.PatchInput("test_patch", _new_file_diff(f"backend/tests/test_{name}.py", code))
    request = engine.RunRequest(
        demo_source,
        demo_repo,
        base,
        tmp_path / name,
        (probe,),
        selection=(f"tests/test_{name}.py",),
        timeout_s=timeout_s,
    )
    return engine.run_tests(request, settings)


def _host_is_fine(docker_engine):
    assert subprocess.run(["true"]).returncode == 0
    assert docker_engine.ping()
    flt = {"label": f"{LABEL_OWNER}={os.environ['PBENCH_OWNER']}"}
    assert not docker_engine.containers.list(all=True, filters=flt)


def test_fork_bomb_is_held_by_the_pids_limit(
    demo_source, demo_repo, demo_prs, tmp_path, docker_engine, base_images
):
    """A fork bomb hits the container's pids limit (its fork fails with EAGAIN, the test fails) and starves
    the container's 1.5 CPUs: the run ends as `tests_failed` or, when the suite is too starved to finish,
    at the wall-clock timeout. Either way nothing passes, the stack is removed, the host is fine."""
    settings = dataclasses.replace(Settings.from_env(), pids_limit=256)
    start = time.monotonic()
    res = _run(demo_source, demo_repo, demo_prs, tmp_path, "bomb", FORK_BOMB, settings, timeout_s=90)
    assert res.status in (RunStatus.COMPLETED, RunStatus.TIMEOUT), res.error
    assert res.tests.get("tests/test_bomb.py::test_fork_bomb") != Outcome.PASSED
    assert time.monotonic() - start < 90 + 60
    _host_is_fine(docker_engine)


def test_memory_hog_is_killed_at_the_memory_limit(
    demo_source, demo_repo, demo_prs, tmp_path, docker_engine, base_images
):
    """A test that allocates without end is stopped at the container's memory limit (no swap): the
    suite's report is missing or says failed, never passed; the host is fine."""
    settings = dataclasses.replace(Settings.from_env(), mem_limit="512m")
    res = _run(demo_source, demo_repo, demo_prs, tmp_path, "hog", MEMORY_HOG, settings, timeout_s=120)
    assert res.status in (RunStatus.COMPLETED, RunStatus.TIMEOUT), res.error
    assert res.tests.get("tests/test_hog.py::test_memory_hog") != Outcome.PASSED
    assert not res.suite_ran or res.tests.get("tests/test_hog.py::test_memory_hog") in (
        Outcome.FAILED,
        Outcome.ERROR,
    )
    _host_is_fine(docker_engine)


def test_repository_code_runs_unprivileged(
    demo_source, demo_repo, demo_prs, tmp_path, monkeypatch, docker_engine, base_images
):
    """The tests (and with them the agent's code) run as uid 65534 without capabilities; they cannot write
    the runner or its outputs, see no host secrets, no Docker socket, no internet (a name outside the network
    fails at once), cannot take the runner's resolver's port; a daemon they leave
    behind (trying to forge the report) is killed before the report is collected."""
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_canary")
    monkeypatch.setenv("HF_TOKEN", "hf_canary")
    res = _run(demo_source, demo_repo, demo_prs, tmp_path, "privileges", PRIVILEGES)
    assert res.status == RunStatus.COMPLETED, res.error
    assert res.tests and all(o == Outcome.PASSED for o in res.tests.values()), res.messages
    assert len(res.tests) == 9 and not res.report_disagreements and not res.tampering
    assert "<forged/>" not in (tmp_path / "privileges" / "junit.xml").read_text()
    _host_is_fine(docker_engine)
