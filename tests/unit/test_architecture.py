"""The import contract of docs/ARCHITECTURE.md, read from the code's own imports (every `import` and `from`,
function-level ones included): the CLI is the composition root above flows; flows wire the library; the library
never imports flows or the CLI; each of the library's packages imports only those below it (the engine no
stage, curation and judge never each other); the in-container runner is stdlib only."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The library's packages, each with what it may import of the library besides itself (docs/ARCHITECTURE.md).
# Low to high: a package imports only packages below it; curation and judge, the two stages, never each other.
PACKAGES = {
    # Shipped into the containers as flat files: the standard library only, not even each other.
    "protocol": set(),
    "core": {"protocol"},
    "formats": {"protocol", "core"},
    "sources": {"protocol", "core", "formats"},
    "images": {"protocol", "core", "formats", "sources"},
    "engine": {"protocol", "core", "formats", "sources", "images"},
    "corpus": {"protocol", "core", "formats", "sources"},
    "curation": {"protocol", "core", "formats", "sources", "images", "engine", "corpus"},
    "judge": {"protocol", "core", "formats", "sources", "images", "engine", "corpus"},
}


def _imports(path: Path, root: Path = ROOT) -> set[str]:
    """Every module a file imports, absolute (relative imports resolved against its package under `root`)."""
    tree = ast.parse(path.read_text())
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
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


def _package_offences(root: Path = ROOT / "tasks_lib") -> list[str]:
    """Every import of a library module that its package's rule does not allow, and every module outside
    one."""
    out = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if len(parts) == 1:
            if path.name != "__init__.py":
                out.append(f"tasks_lib/{path.name} stands in no package")
            continue
        package = parts[0]
        if package not in PACKAGES:
            out.append(f"tasks_lib/{package}/ is no package of the rules")
            continue
        allowed = PACKAGES[package] | {package}
        for name in sorted(_imports(path, root.parent)):
            if not _is(name, "tasks_lib") or name == "tasks_lib":
                continue
            target = name.split(".")[1]
            if target in PACKAGES and target not in allowed:
                out.append(f"tasks_lib/{'/'.join(parts)} ({package}) imports {name} ({target})")
    return out


def test_each_package_imports_only_what_its_rule_allows():
    assert _package_offences() == []


def test_a_planted_violation_fails_the_package_rule(tmp_path):
    """The rule is not vacuous: a formats module that imports the judge, a judge module that imports curation
    and a loose module are each named."""
    root = tmp_path / "tasks_lib"
    for package in ("formats", "judge", "curation"):
        (root / package).mkdir(parents=True)
    (root / "formats" / "junit.py").write_text("from tasks_lib.judge import verdicts\n")
    (root / "judge" / "runs.py").write_text("def f():\n    from tasks_lib.curation.stages import x\n")
    (root / "curation" / "stages.py").write_text("from tasks_lib.core import paths\n")
    (root / "loose.py").write_text("")
    assert _package_offences(root) == [
        "tasks_lib/formats/junit.py (formats) imports tasks_lib.judge (judge)",
        "tasks_lib/formats/junit.py (formats) imports tasks_lib.judge.verdicts (judge)",
        "tasks_lib/judge/runs.py (judge) imports tasks_lib.curation.stages (curation)",
        "tasks_lib/judge/runs.py (judge) imports tasks_lib.curation.stages.x (curation)",
        "tasks_lib/loose.py stands in no package",
    ]


def test_plain_git_never_imports_what_sits_above_it():
    """gitops is plain git: it calls no generator and no source logic above it (tasks_lib/sources/repos.py
    does)."""
    above = ("tasks_lib.sources.demo_repo", "tasks_lib.sources.repos", "tasks_lib.sources.record")
    assert [
        o
        for o in _offences("tasks_lib", lambda name, _: _is(name, *above))
        if o.startswith("tasks_lib/sources/gitops")
    ] == []


@pytest.mark.parametrize("folder", ["containers/runner", "containers/egress", "tasks_lib/protocol"])
def test_code_that_runs_in_containers_is_stdlib_only(folder):
    """It runs with the image's /usr/bin/python3: the standard library and its siblings (pbench_*), nothing of
    the project and no third-party package; the pytest launcher and the audit's reference compiler, which run in
    the test environment's interpreter, also the runner they launch or compile for."""

    def foreign(name: str, path) -> bool:
        top = name.split(".", 1)[0]
        if path.name in ("pbench_pytest.py", "pbench_refs.py") and top in ("pytest", "_pytest", "pluggy"):
            return False
        return not (top in sys.stdlib_module_names or top.startswith("pbench_") or top == "__future__")

    assert _offences(folder, foreign) == []


def test_the_contract_sees_imports():
    """The checks above would pass on a parser that found nothing: it finds the imports it must."""
    assert "tasks_lib.engine.jobs" in _imports(ROOT / "tasks_lib" / "engine" / "run.py")
    assert "flows.curation" in _imports(ROOT / "cli" / "corpus.py")


def test_every_version_the_caches_hang_on_has_its_line_in_the_changelog():
    """Rule: a version bump says why in CHANGELOG.md (constants.py holds the values only), so a reader of a
    cache key or of run.json's versions finds what each one changed."""
    import re

    from tasks_lib.core import constants, paths

    text = (paths.PROJECT_ROOT / "CHANGELOG.md").read_text()
    for name in ("HARNESS_VERSION", "EXTRACTION_VERSION", "JUDGE_VERSION"):
        section = text.split(f"## {name}\n", 1)
        assert len(section) == 2, f"CHANGELOG.md has no section {name}"
        body = section[1].split("\n## ", 1)[0]
        newest = re.search(r"^- \*\*([^*]+)\*\*", body, re.M)
        assert newest and newest[1] == getattr(constants, name), (
            f"CHANGELOG.md: the newest {name} entry is {newest and newest[1]!r}, constants.py says "
            f"{getattr(constants, name)!r}"
        )


def test_no_two_test_modules_share_a_name():
    """pytest imports test modules by their basename (no packages under tests/): a second test_x.py in another
    folder fails collection, and with it the whole suite (stop 51: tests/unit and tests/integration both had
    test_registry.py)."""
    import collections

    names = collections.Counter(p.name for p in (ROOT / "tests").rglob("test_*.py"))
    assert [name for name, n in names.items() if n > 1] == []
