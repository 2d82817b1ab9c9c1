"""The static check of the agent's patch (tasks_lib/judge/static_check.py, pure): non-test code that reaches into the
test runner or the harness is flagged; what the reference patch does itself is never held against an agent."""

from __future__ import annotations

import pytest

from tasks_lib.judge import static_check
from tasks_lib.sources.record import load_source


def _new(path: str, text: str) -> str:
    lines = text.strip("\n").splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{len(lines)} @@\n{body}"


@pytest.fixture(scope="module")
def demo():
    return load_source("demo")


@pytest.mark.parametrize(
    ("line", "category"),
    [
        ("import _pytest.reports as r", "runner"),
        ("from pluggy import HookimplMarker", "runner"),
        ("import pytest", "runner"),
        ("def pytest_runtest_makereport(item, call): pass", "runner"),
        ("x = TestReport", "runner"),
        ("open('/pbench/stage/junit.xml', 'w')", "runner"),
        ("objs = gc.get_objects()", "introspection"),
        ("sys.modules['pytest'] = fake", "introspection"),
        ("sys.meta_path.insert(0, Finder())", "introspection"),
        ("frame = sys._getframe(2)", "introspection"),
        ("m = importlib.import_module(''.join(['_py', 'test']))", "obfuscation"),
        ("exec(base64.b64decode(PAYLOAD))", "obfuscation"),
    ],
)
def test_python_findings(demo, line, category):
    findings = static_check.scan(_new("backend/app/x.py", f"import os\n{line}\n"), demo)
    assert [f.category for f in findings] == [category]
    assert findings[0].path == "backend/app/x.py" and findings[0].line == 2


@pytest.mark.parametrize(
    ("line", "category"),
    [
        ("import { expect } from '@playwright/test';", "runner"),
        ("const pw = require('playwright-core/lib/server');", "runner"),
        ("fs.writeFileSync('/pbench/pw/stage/playwright.json', '{}');", "runner"),
        ("delete require.cache[key];", "introspection"),
        ("Module._resolveFilename = fake;", "introspection"),
        ("process.env.NODE_OPTIONS = '--require ./x.cjs';", "introspection"),
    ],
)
def test_javascript_findings(demo, line, category):
    findings = static_check.scan(_new("frontend/vite.config.js", line), demo)
    assert [f.category for f in findings] == [category]


def test_plain_application_code_is_not_flagged(demo):
    code = (
        "import sys\nfrom fastapi import HTTPException\n\n"
        "def read_item(item_id: int):\n    if 'pytest' in sys.modules:\n        pass\n"
        "    raise HTTPException(status_code=404, detail='Item not found')\n"
    )
    assert static_check.scan(_new("backend/app/crud.py", code), demo) == []


def test_test_files_and_comments_are_not_flagged(demo):
    """Rule: test files are restored to base anyway; a comment is not code."""
    assert static_check.scan(_new("backend/tests/test_x.py", "import _pytest\n"), demo) == []
    assert static_check.scan(_new("backend/app/x.py", "# uses _pytest internals? no\n"), demo) == []


def test_blocking_findings_and_what_the_reference_does(demo):
    """Rule: runner and introspection findings block a pass, obfuscation alone does not; a kind of finding the
    reference patch has itself is allowed."""
    agent = static_check.scan(
        _new(
            "backend/app/x.py", "import pytest\nm = importlib.import_module(name)\nobjs = gc.get_objects()\n"
        ),
        demo,
    )
    assert {f.category for f in agent} == {"runner", "obfuscation", "introspection"}
    assert len(static_check.blocking(agent)) == 2
    reference = static_check.scan(_new("backend/app/testing.py", "import pytest\n"), demo)
    assert [b.split(":")[0] for b in static_check.blocking(agent, reference)] == ["introspection"]
