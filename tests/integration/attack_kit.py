"""Building blocks of hostile patches against the demo tasks (test_hostile_patches.py, test_judge.py).

Every attack is the *wrong* solution of a demo task (the fix is missing, so its FAIL_TO_PASS tests genuinely
fail) plus a trick that would make it look solved.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from tasks_lib.corpus import load as corpus
from tasks_lib.judge import evaluation
from tasks_lib.judge.predictions import Prediction, PredictionFormat
from tasks_lib.sources import gitops
from tasks_lib.sources.demo_repo import DEMO_PRS
from tasks_lib.sources.record import load_source

BUGFIX = f"prototypebench__demo-fullstack-{DEMO_PRS['bugfix']}"
FRONTEND = f"prototypebench__demo-fullstack-{DEMO_PRS['frontend_only']}"
FULLSTACK = f"prototypebench__demo-fullstack-{DEMO_PRS['fullstack']}"
F2P = "tests/test_items.py::test_read_item_not_found"

# A pytest plugin that reports every test as passed (JUnit and terminal agree: only keeping it out works).
FORCE_PASS_PLUGIN = """
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
"""


class Task:
    """One demo instance with its source and repository."""

    def __init__(self, instance_id: str):
        self.source = load_source("demo")
        self.repo = evaluation.repo_for(self.source)
        self.instance = {i["instance_id"]: i for i in corpus.load_corpus("demo")}[instance_id]

    def base_file(self, path: str) -> str:
        return gitops.read_file(self.repo, self.instance["base_commit"], path).decode()

    def prediction(self, patch: str) -> Prediction:
        return Prediction(self.instance["instance_id"], "attacker", patch, PredictionFormat.DIFF)

    def score(self, patch: str, out: Path, **kw) -> evaluation.Verdict:
        return evaluation.score_instance(
            self.instance,
            self.prediction(patch),
            self.source,
            self.repo,
            out,
            cache=evaluation.VerdictCache(out / "cache"),
            **kw,
        )

    def hanging_route(self) -> str:
        """A patch whose read-one-item route sleeps for an hour: the tests that call it hang."""
        main = self.base_file("backend/app/main.py")
        anchor = '    """Read one item by id."""\n'
        assert anchor in main, "the demo's read route moved"
        return edit(
            "backend/app/main.py",
            main,
            main.replace(anchor, anchor + "    import time\n\n    time.sleep(3600)\n"),
        )

    def at_import(self, module: str, code: str, name: str = "hostile") -> str:
        """A patch that runs `code` whenever `module` (e.g. backend/app/__init__.py) is imported."""
        path = module.rsplit("/", 1)[0] + f"/{name}.py"
        dotted = path[len("backend/") : -len(".py")].replace("/", ".")
        return new(path, code) + edit(
            module, self.base_file(module), f"import {dotted}  # noqa: F401\n" + self.base_file(module)
        )


def edit(path: str, old: str, new_text: str) -> str:
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new_text.splitlines(keepends=True), f"a/{path}", f"b/{path}"
    )
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


def new(path: str, text: str) -> str:
    lines = text.strip("\n").splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n{body}"
    )


def symlink(path: str, target: str) -> str:
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 120000\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n"
    )


def logs(verdict) -> str:
    return "\n".join(
        p.read_text(errors="replace") for p in Path(verdict.trace_dir).rglob("*.log") if p.is_file()
    )


def said(verdict) -> str:
    """Everything the verdict says about why: status, note, tampering, static flags."""
    return " | ".join([verdict.status, verdict.note, *verdict.tampering, *verdict.static_flags])
