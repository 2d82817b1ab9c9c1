"""The command's own temporary Prefect API server (`tasks_lib.core.api_server`): started before Prefect is
imported, named to every client of the process, stopped with the command, and never where Prefect is
configured already."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tasks_lib.core import api_server

# A fresh interpreter: Prefect not imported, as in a command's own process.
SCRIPT = textwrap.dedent(
    """
    import json, os, sys, urllib.request
    from tasks_lib.core import api_server
    api_server.ENABLED = True
    assert api_server.start() and api_server.start()  # once: the second call finds it
    assert "prefect" not in sys.modules
    api_server.wait_ready()
    url = os.environ["PREFECT_API_URL"]
    from prefect import flow, task
    from prefect.client.orchestration import get_client

    @task
    def add(x):
        return x + 1

    @flow
    def f():
        return add.submit(1).result()

    out = {"url": url, "value": f(), "server_module": "prefect.server.api.server" in sys.modules}
    with get_client(sync_client=True) as client:
        out["flow_runs"] = len(client.read_flow_runs())
    pid = api_server._SERVER.process.pid
    api_server.stop()
    out["env_after"] = os.environ.get("PREFECT_API_URL")
    try:
        os.kill(pid, 0)
        out["alive_after"] = True
    except ProcessLookupError:
        out["alive_after"] = False
    print(json.dumps(out))
    """
)


def _python(code: str, tmp_path, **env) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_UI_URL")}
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=180,
        env={**clean, "PREFECT_HOME": str(tmp_path / "prefect"), "PBENCH_CACHE_DIR": str(tmp_path), **env},
    )


def test_a_commands_server_serves_its_flows_without_prefect_importing_the_server_and_stops_with_it(tmp_path):
    import json

    res = _python(SCRIPT, tmp_path, PREFECT_LOGGING_LEVEL="INFO")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["value"] == 2 and out["flow_runs"] == 1 and out["url"].startswith("http://127.0.0.1:")
    assert out["server_module"] is False  # the command's process never loads Prefect's server package
    assert out["env_after"] is None and out["alive_after"] is False
    assert "Starting temporary server" in res.stderr and "View at" not in res.stderr + res.stdout


def test_the_server_goes_when_its_command_is_killed(tmp_path):
    """SIGKILL of the command alone (not its group): the kernel ends the server with it (no orphan on a port)."""
    code = textwrap.dedent(
        """
        import sys, time
        from tasks_lib.core import api_server
        api_server.ENABLED = True
        api_server.start()
        print(api_server._SERVER.process.pid, flush=True)
        time.sleep(60)
        """
    )
    clean = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
        env={**clean, "PREFECT_HOME": str(tmp_path / "prefect"), "PBENCH_CACHE_DIR": str(tmp_path)},
    )  # fmt: skip
    server_pid = int(proc.stdout.readline())
    proc.kill()
    proc.wait()
    import time

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(server_pid, 0)
        except ProcessLookupError:
            return
        # a zombie until its parent (init here) reaps it: gone from /proc/PID/stat's running states
        with open(f"/proc/{server_pid}/stat") as stat:
            if stat.read().split()[2] == "Z":
                return
        time.sleep(0.2)
    pytest.fail(f"the server {server_pid} outlived its command")


def test_nothing_is_started_where_prefect_decides_already(monkeypatch):
    """Not a command's own process, Prefect already imported (tests calling the CLI in-process), or an API
    named (PREFECT_API_URL: a real server, a deployment's worker): Prefect's own rules, nothing started."""
    monkeypatch.setattr(api_server, "ENABLED", False)
    assert api_server.start() is False
    monkeypatch.setattr(api_server, "ENABLED", True)
    import prefect  # noqa: F401  (imported: too late to name an API to it)

    assert api_server.start() is False
    assert api_server._SERVER.process is None
    api_server.wait_ready()  # nothing to wait for


def test_a_server_that_dies_while_starting_is_an_error_naming_its_log(tmp_path, monkeypatch):
    code = textwrap.dedent(
        """
        import sys
        from tasks_lib.core import api_server
        from tasks_lib.core.errors import PbenchError
        api_server.ENABLED = True
        api_server.start()
        api_server._SERVER.process.kill()
        try:
            api_server.wait_ready(timeout_s=30)
        except PbenchError as exc:
            print(exc)
        """
    )
    res = _python(code, tmp_path)
    assert "Prefect's API server exited with code" in res.stdout and "prefect-server.log" in res.stdout, (
        res.stdout + res.stderr
    )
