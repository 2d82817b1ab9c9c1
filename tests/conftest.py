"""Suite-wide rules: Docker tests never skip, and nothing the engine creates outlives the suite."""

from __future__ import annotations

import os
import tempfile

import pytest

_docker_ran = {"passed": 0, "failed": 0}


def pytest_configure(config):
    """Outputs, caches and Prefect's database go to a fresh folder per session, so a test that says "the first
    run extracts, the rerun starts nothing" means it. Docker images are shared: they are keyed by content."""
    root = tempfile.mkdtemp(prefix="pbench-tests-")
    os.environ["PBENCH_OUTPUT_DIR"] = os.path.join(root, "out")
    os.environ["PBENCH_CACHE_DIR"] = os.path.join(root, "cache")
    os.environ["PREFECT_HOME"] = os.path.join(root, "prefect")
    os.environ["PBENCH_OWNER"] = "tests-" + os.path.basename(root)
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    from tasks_lib.core import prefect_env

    prefect_env.configure()


@pytest.fixture(scope="session")
def docker_engine():
    """The real Docker engine. Its absence fails Docker-marked tests: CI must never skip them silently."""
    from tasks_lib.core import docker_client

    return docker_client.get()


@pytest.fixture(scope="session")
def base_images(docker_engine):
    from tasks_lib.images import build as images

    return images.bootstrap()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("docker") and "docker_engine" not in getattr(item, "fixturenames", ()):
            item.fixturenames.insert(0, "docker_engine")


def pytest_runtest_logreport(report):
    if report.when == "call" and "docker" in report.keywords:
        _docker_ran["passed" if report.passed else "failed"] += not report.skipped


def pytest_sessionfinish(session, exitstatus):
    """Leak check: containers, networks and volumes carrying the project's label must all be gone."""
    if not (_docker_ran["passed"] or _docker_ran["failed"]):
        return
    from tasks_lib.core import docker_client
    from tasks_lib.core.constants import LABEL_OWNER

    client = docker_client.get()
    flt = {"label": f"{LABEL_OWNER}={os.environ['PBENCH_OWNER']}"}
    left = {
        "containers": [c.name for c in client.containers.list(all=True, filters=flt)],
        "networks": [n.name for n in client.networks.list(filters=flt)],
        "volumes": [v.name for v in client.volumes.list(filters=flt)],
    }
    session.config._pbench_leftovers = left
    if any(left.values()):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def room_sizes(root, most: int = 8) -> tuple[list, list]:
    """The largest files (lines) and functions (lines) outside tests/, of the project's own Python: files over
    400 lines and functions over 60 (docs/ARCHITECTURE.md, "Room sizes")."""
    import ast
    from pathlib import Path

    files, funcs = [], []
    for path in sorted(Path(root).rglob("*.py")):
        rel = str(path.relative_to(root))
        if rel.startswith((".venv/", "data/", ".git/", "tests/")) or "/tests/" in rel:
            continue
        text = path.read_text(errors="replace")
        files.append((text.count("\n") + 1, rel))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                funcs.append((node.end_lineno - node.lineno + 1, f"{rel}:{node.name}"))
    big = sorted((f for f in files if f[0] > 400), reverse=True)[:most]
    long = sorted((f for f in funcs if f[0] > 60), reverse=True)[:most]
    return big, long


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    tr = terminalreporter
    # Informational, never a gate: where the house is getting cramped.
    big, long = room_sizes(config.rootpath)
    tr.write_line(
        "room sizes (outside tests/): "
        + (", ".join(f"{p} {n} lines" for n, p in big) or "no file over 400 lines")
        + "; "
        + (", ".join(f"{p}() {n} lines" for n, p in long) or "no function over 60 lines")
    )
    tr.write_line(
        f"docker-marked tests executed: {_docker_ran['passed'] + _docker_ran['failed']} "
        f"({_docker_ran['passed']} passed, {_docker_ran['failed']} failed)"
    )
    left = getattr(config, "_pbench_leftovers", None)
    if left is not None:
        if any(left.values()):
            tr.write_line(f"LEAK: Docker objects left after the suite: {left}", red=True)
        else:
            tr.write_line("leak check: no pbench containers, networks or volumes left")
