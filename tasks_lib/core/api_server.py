"""The command's temporary Prefect API server, started before Prefect is imported.

Without PREFECT_API_URL, Prefect starts its own temporary server (`SubprocessASGIServer`) at the first API call:
it imports the whole server package in the calling process (prefect.server.api.server, ~2.6 s of CPU here),
then starts the same package in a subprocess and waits for it, while the command does nothing else: ~3.9 s
of every `pbench evaluate` (docs/performance.md, section 19). `start()` runs the same server, the same
command line and settings, from here: the subprocess boots on the other core while the command imports its
flow, and the command never imports the server package. PREFECT_API_URL then names it, set before Prefect is
imported, so every client of the process (flow and task runs, events, logs, artifacts) talks to it. It is as
temporary as Prefect's: its database is Prefect's default one, and it stops when the command ends (or dies:
the kernel sends it SIGTERM when its parent goes).

Only a command's own process starts one (`cli.pbench.main`): in a process that has already imported Prefect
(tests calling the CLI in-process) or that names an API (PREFECT_API_URL, a deployment's worker), nothing
changes and Prefect decides as before.
"""

from __future__ import annotations

import atexit
import ctypes
import importlib.util
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tasks_lib.core import paths
from tasks_lib.core.errors import PbenchError

ENABLED = False  # set by the command line's entry point (cli.pbench.main): only a command's own process
_PR_SET_PDEATHSIG = 1


class _Server:
    process: subprocess.Popen | None = None
    url: str = ""
    ui_url: str | None = None  # set here (to none) when the command named none
    log: Path | None = None


_SERVER = _Server()


def start() -> bool:
    """Start the server in the background, unless this process is not a command's own (`ENABLED`), Prefect
    is imported already, an API is named, or one was started. True when one is running or starting."""
    if _SERVER.process is not None:
        return True
    if not ENABLED or "prefect" in sys.modules or os.environ.get("PREFECT_API_URL"):
        return False
    spec = importlib.util.find_spec("prefect")
    if spec is None or spec.origin is None:
        return False
    with socket.socket() as sock:  # a free port, as the kernel gives one
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {  # what Prefect's SubprocessASGIServer gives its server (no UI, ephemeral, final)
        **os.environ,
        "PREFECT_UI_ENABLED": "0",
        "PREFECT__SERVER_EPHEMERAL": "1",
        "PREFECT__SERVER_FINAL": "1",
    }
    log = paths.cache_dir() / "prefect-server.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:  # appended: commands at once share it (error lines only)
        _SERVER.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--app-dir",
                str(Path(spec.origin).parent.parent),
                "--factory",
                "prefect.server.api.server:create_app",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "error",
                "--lifespan",
                "on",
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
    _SERVER.url, _SERVER.log = f"http://127.0.0.1:{port}/api", log
    level = os.environ.get("PREFECT_LOGGING_LEVEL", "INFO").upper()
    if logging.getLevelNamesMapping().get(level, logging.INFO) <= logging.INFO:
        # Prefect's own line when it starts one (its logger is not set up yet: Prefect is not imported)
        print(
            f"Starting temporary server on http://127.0.0.1:{port} (log: {log})", file=sys.stderr, flush=True
        )
    os.environ["PREFECT_API_URL"] = _SERVER.url
    # No UI is served (as with Prefect's own temporary server): no "View at" link to one in the flow's log.
    if "PREFECT_UI_URL" not in os.environ:
        os.environ["PREFECT_UI_URL"] = _SERVER.ui_url = ""
    atexit.register(stop)
    return True


def wait_ready(timeout_s: float | None = None) -> None:
    """Block until the started server answers its health check (nothing to wait for when none was started).
    A server that exits or does not answer in time is infrastructure trouble, named with its log."""
    process = _SERVER.process
    if process is None:
        return
    if timeout_s is None:
        timeout_s = float(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180"))
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise PbenchError(
                f"Prefect's API server exited with code {process.returncode} while starting (its log: "
                f"{_SERVER.log})"
            )
        try:
            with urllib.request.urlopen(f"{_SERVER.url}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise PbenchError(
                f"Prefect's API server did not answer {_SERVER.url}/health within {timeout_s:.0f} s "
                f"(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS; its log: {_SERVER.log})"
            )
        time.sleep(0.05)


def stop() -> None:
    """Stop the server (at the command's end): SIGTERM, then SIGKILL after 5 s, as Prefect does."""
    process, _SERVER.process = _SERVER.process, None
    if process is None:
        return
    if os.environ.get("PREFECT_API_URL") == _SERVER.url:
        del os.environ["PREFECT_API_URL"]
    if _SERVER.ui_url is not None and os.environ.get("PREFECT_UI_URL") == _SERVER.ui_url:
        del os.environ["PREFECT_UI_URL"]
    _SERVER.ui_url = None
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _die_with_parent() -> None:  # in the child, before exec: nothing loaded there (prctl resolved before)
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)


try:
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _PRCTL = None
