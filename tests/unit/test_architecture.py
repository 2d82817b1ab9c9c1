"""The import contract of docs/ARCHITECTURE.md, read from the code's own imports (every `import` and `from`,
function-level ones included): the CLI is the composition root above flows; flows wire the library; the library
never imports flows or the CLI; the engine never imports a stage; the in-container runner is stdlib only."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The stages of curation and evaluation (and what sits above the engine): the engine may import none of them.
STAGES = {
    "crawl", "filtering", "distribution", "extraction", "packaging", "tiering", "schema", "curation", "season",
    "season_plan", "evaluation", "runs", "reporting", "corpus", "predictions", "verdicts", "static_check",
    "tooling", "demo_repo", "repos", "instance", "progress", "prefect_env", "test_scope", "funnel",
    "corpus_release",
}  # fmt: skip


def _imports(path: Path) -> set[str]:
    """Every module a file imports, absolute (relative imports resolved against its package)."""
    tree = ast.parse(path.read_text())
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(filter(None, [*parts, base]))
            out.add(base)
            out |= {f"{base}.{alias.name}" for alias in node.names}
    return out


def _files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def _offences(folder: str, forbidden) -> list[str]:
    return [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in _files(folder)
        for name in sorted(_imports(path))
        if forbidden(name, path)
    ]


def _is(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_the_library_never_imports_flows_or_the_cli():
    assert _offences("tasks_lib", lambda name, _: _is(name, "flows", "cli")) == []


def test_flows_never_import_the_cli():
    assert _offences("flows", lambda name, _: _is(name, "cli")) == []


def test_the_engine_never_imports_a_stage():
    stages = tuple(f"tasks_lib.{s}" for s in STAGES)
    assert _offences("tasks_lib/engine", lambda name, _: _is(name, *stages)) == []


def test_plain_git_never_imports_what_sits_above_it():
    """gitops is plain git: it calls no generator and no source logic above it (tasks_lib/repos.py does)."""
    above = ("tasks_lib.demo_repo", "tasks_lib.repos", "tasks_lib.curation", "tasks_lib.engine")
    assert [
        o
        for o in _offences("tasks_lib", lambda name, _: _is(name, *above))
        if o.startswith("tasks_lib/gitops")
    ] == []


@pytest.mark.parametrize("folder", ["containers/runner", "containers/egress"])
def test_code_that_runs_in_containers_is_stdlib_only(folder):
    """It runs with the image's /usr/bin/python3: the standard library and its siblings (pbench_*), nothing of
    the project and no third-party package; the pytest launcher, which runs in the test environment's
    interpreter, also the runner it launches."""

    def foreign(name: str, path) -> bool:
        top = name.split(".", 1)[0]
        if path.name == "pbench_pytest.py" and top in ("pytest", "_pytest", "pluggy"):
            return False
        return not (top in sys.stdlib_module_names or top.startswith("pbench_") or top == "__future__")

    assert _offences(folder, foreign) == []


def test_the_contract_sees_imports():
    """The checks above would pass on a parser that found nothing: it finds the imports it must."""
    assert "tasks_lib.engine.jobs" in _imports(ROOT / "tasks_lib" / "engine" / "run.py")
    assert "flows.curation" in _imports(ROOT / "cli" / "corpus.py")
