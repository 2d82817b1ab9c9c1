"""Test runners, an extension point: what the host knows of each runner a source record may name (`runner` of
a side). Each is one `TestRunner` here: how its graded tests shape the witnesses, how its run's outputs are read
into a `RunResult`, which packages are the runner itself (an image's test tooling, `judge.tooling`).

Adding a runner (vitest, a Python Playwright suite) is one host module with its reader and witness rule, one
entry below, one runner function in the container's dispatch table (containers/runner/pbench_runner.py,
`TEST_RUNNERS`) and its name in `protocol.wire.TEST_RUNNERS`, the value a source record may hold; a unit test
holds the three to the same names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tasks_lib.engine import results, witnesses


@dataclass(frozen=True)
class TestRunner:
    name: str
    # What the run left in /pbench/out, read into the RunResult: read(result, out, runner_exit, frontend_dir=).
    read: Callable[..., None]
    # A graded test id -> (its file, what a witness of that file is shaped like), or None (not this runner's).
    witness_model: Callable[[str], tuple[str, object] | None]
    # At most this many files of one run get witnesses (each Playwright witness opens a page).
    witness_files: int
    # The packages that are the runner (their versions an agent's lock change may not move).
    tooling: tuple[str, ...]


PYTEST = TestRunner("pytest", results.read_pytest, witnesses.pytest_model, 8, ("pytest", "pluggy"))
PLAYWRIGHT = TestRunner(
    "playwright",
    results.read_playwright,
    witnesses.playwright_model,
    3,
    ("@playwright/test", "playwright", "playwright-core"),
)
REGISTRY: dict[str, TestRunner] = {r.name: r for r in (PYTEST, PLAYWRIGHT)}


def get(name: str) -> TestRunner:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"no test runner {name!r} (known: {', '.join(REGISTRY)})") from None
