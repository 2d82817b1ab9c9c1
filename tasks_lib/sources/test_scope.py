"""Which backend test files a PR's runs cover: the source's `[backend.test_scope]` (docs/sources.md).

`suite` runs what the test command collects. `touched` runs the test files the PR's test patch adds or
changes, widened by the test files of the base commit that import a module the PR's code changes (found
statically with `git grep`, at most `related_cap` of them: a file named after the module first, then the files
importing the most changed modules). Extraction and evaluation run the same files: evaluation runs the files
that hold the graded tests, a subset of the scope.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

from tasks_lib.formats import patches
from tasks_lib.sources import gitops
from tasks_lib.sources.record import SourceRecord


class NothingToRun(Exception):
    """A `touched` scope with no test file the suite would run: the PR has no test to extract."""


def _is_test_module(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base.endswith(".py") and (base.startswith("test_") or base.endswith("_test.py"))


def _module_of(rel: str) -> str | None:
    """`pkg/sub/mod.py` -> `pkg.sub.mod` (`__init__.py` names its package; a leading `src/` is no package)."""
    if not rel.endswith(".py"):
        return None
    parts = rel[:-3].split("/")
    if parts[0] == "src" and len(parts) > 1:
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or not all(p.isidentifier() for p in parts):
        return None
    return ".".join(parts)


def _import_pattern(module: str) -> str:
    """An extended regex for a line that imports `module` (`import m`, `from m import`, `from parent import
    leaf`): one line, as `git grep -E` reads it."""
    dotted = re.escape(module).replace("\\.", "[.]")
    pattern = rf"^[[:space:]]*(import|from)[[:space:]]+{dotted}([[:space:].,]|$)"
    if "." in module:
        parent, leaf = module.rsplit(".", 1)
        parent_re = re.escape(parent).replace("\\.", "[.]")
        pattern += rf"|^[[:space:]]*from[[:space:]]+{parent_re}[[:space:]]+import[[:space:]]+(.*[ ,(])?{leaf}([ ,)]|$)"
    return pattern


def ignored(source: SourceRecord, repo: Path, base: str) -> tuple[str, ...]:
    """Paths (relative to the backend dir) the suite never runs: `--ignore` of the test command and of the
    project's pytest `addopts` (pyproject.toml, pytest.ini) at `base`."""
    words = shlex.split(source.backend.test_command)
    prefix = source.backend.prefix
    pyproject = gitops.read_file(repo, base, f"{prefix}pyproject.toml")
    if pyproject:
        try:
            table = tomllib.loads(pyproject.decode("utf-8", "replace"))
            addopts = table.get("tool", {}).get("pytest", {}).get("ini_options", {}).get("addopts", "")
            words += shlex.split(addopts) if isinstance(addopts, str) else [str(a) for a in addopts]
        except (tomllib.TOMLDecodeError, ValueError):
            pass
    out = []
    for i, word in enumerate(words):
        if word.startswith("--ignore="):
            out.append(word.split("=", 1)[1])
        elif word == "--ignore" and i + 1 < len(words):
            out.append(words[i + 1])
    return tuple(p.rstrip("/") for p in out)


def _is_ignored(rel: str, ignores: tuple[str, ...]) -> bool:
    return any(rel == p or rel.startswith(p + "/") for p in ignores)


def related_tests(source: SourceRecord, repo: Path, base: str, code_paths: list[str], cap: int) -> list[str]:
    """Test files of `base` (repository paths) that import a module of `code_paths`, best first, at most `cap`."""
    prefix = source.backend.prefix
    dirs = [f"{prefix}{d.strip('/')}" for d in source.backend.test_dirs] or [prefix or "."]
    hits: dict[str, int] = {}
    named: set[str] = set()
    for path in code_paths:
        module = _module_of(path[len(prefix) :]) if path.startswith(prefix) else None
        if module is None:
            continue
        proc = gitops.git(
            ["--git-dir", str(repo), "grep", "-l", "-E", "-e", _import_pattern(module), base, "--", *dirs],
            check=False,
        )
        leaf = module.rsplit(".", 1)[-1]
        for line in proc.stdout.decode("utf-8", "surrogateescape").splitlines():
            found = line.split(":", 1)[1] if line.startswith(base + ":") else line
            if not _is_test_module(found):
                continue
            hits[found] = hits.get(found, 0) + 1
            if found.rsplit("/", 1)[-1] in (f"test_{leaf}.py", f"{leaf}_test.py"):
                named.add(found)
    ranked = sorted(hits, key=lambda p: (p not in named, -hits[p], p))
    return ranked[:cap]


def scope_files(source: SourceRecord, repo: Path, base: str, split: patches.PatchSplit) -> tuple[str, ...]:
    """The backend selection of a PR's runs (paths relative to the backend dir); () runs the whole suite.
    Raises NothingToRun when a `touched` scope holds nothing the suite runs."""
    scope = source.backend.scope
    if scope.kind == "suite":
        return ()
    prefix = source.backend.prefix
    touched, helpers = [], []
    for fd in patches.file_diffs(split.test_patch_backend):
        if fd.new_path is None or not fd.new_path.startswith(prefix):
            continue  # a deleted test file is not run
        (touched if _is_test_module(fd.new_path) else helpers).append(fd.new_path)
    code = [
        fd.old_path
        for fd in patches.file_diffs(split.patch)
        if fd.old_path is not None and fd.old_path.endswith(".py")
    ]
    skip = ignored(source, repo, base)
    runnable = lambda path: not _is_ignored(path[len(prefix) :], skip)  # noqa: E731
    touched = [p for p in touched if runnable(p)]
    related = [p for p in related_tests(source, repo, base, code, 10 * scope.related_cap) if runnable(p)]
    chosen = list(dict.fromkeys(touched + [p for p in related[: scope.related_cap] if p not in touched]))
    if not chosen:
        # Only fixtures or helpers changed: the folders that hold them, when the suite runs them.
        folders = {h.rsplit("/", 1)[0] for h in helpers if "/" in h[len(prefix) :]}
        chosen = sorted(f + "/" for f in folders if runnable(f))
    if not chosen:
        raise NothingToRun(
            "the test patch changes no test the suite runs (every changed test file is under a path the "
            f"test command or the project's addopts ignore: {', '.join(skip) or 'none'})"
        )
    return tuple(sorted(p[len(prefix) :] for p in chosen))


# ------------------------------------------------------------------------------------------ Playwright specs
_SPEC = re.compile(r"\.(spec|test)\.[cm]?[jt]sx?$")
# A test id the markup gives an element (`data-testid="run-button"`, `dataTestId={"run-button"}`,
# `data-testid={`run-${id}`}` up to its first placeholder): what a Playwright spec selects it by.
_TEST_ID = re.compile(r"""(?:data-?test-?id|testid)\s*[=:]\s*\{?\s*["'`]([\w.:-]{3,})""", re.I)
MAX_TEST_IDS = 200


def is_spec(path: str) -> bool:
    return bool(_SPEC.search(path))


def changed_test_ids(patch: str, prefix: str) -> list[str]:
    """The test ids on the added or removed lines of the PR's code under the frontend dir, sorted."""
    ids: set[str] = set()
    for fd in patches.file_diffs(patch):
        path = fd.new_path or fd.old_path or ""
        if not path.startswith(prefix) or is_spec(path):
            continue
        for line in fd.text.splitlines():
            if line[:1] in "+-" and not line.startswith(("+++", "---")):
                ids.update(_TEST_ID.findall(line))
    return sorted(ids)


def related_specs(repo: Path, base: str, prefix: str, test_ids: list[str], cap: int) -> list[str]:
    """Spec files of `base` (repository paths) that use one of `test_ids` as a string, the most ids first, then
    by path; at most `cap`."""
    if not test_ids or cap <= 0:
        return []
    args = ["--git-dir", str(repo), "grep", "-o", "-F"]
    for test_id in test_ids[:MAX_TEST_IDS]:
        args += ["-e", test_id]
    proc = gitops.git([*args, base, "--", prefix or "."], check=False)
    found: dict[str, set[str]] = {}
    for line in proc.stdout.decode("utf-8", "surrogateescape").splitlines():
        rest = line[len(base) + 1 :] if line.startswith(base + ":") else line
        path, _, match = rest.rpartition(":")
        if path and is_spec(path):
            found.setdefault(path, set()).add(match)
    return sorted(found, key=lambda p: (-len(found[p]), p))[:cap]


def frontend_scope_files(
    source: SourceRecord, repo: Path, base: str, split: patches.PatchSplit
) -> tuple[str, ...]:
    """The Playwright specs a PR's head runs cover (paths relative to the frontend dir); () runs them all
    (`[frontend.test_scope] kind = "suite"`). `touched`: the specs the test patch adds or changes, widened by at
    most `related_cap` specs of the base commit that use a test id the PR's frontend code adds, removes or
    changes. Raises NothingToRun when a `touched` scope holds no spec."""
    fe = source.frontend
    if fe is None or fe.scope.kind == "suite":
        return ()
    prefix = fe.prefix
    touched = [
        fd.new_path
        for fd in patches.file_diffs(split.test_patch_frontend)
        if fd.new_path and fd.new_path.startswith(prefix) and is_spec(fd.new_path)
    ]
    ids = changed_test_ids(split.patch, prefix)
    related = [
        p for p in related_specs(repo, base, prefix, ids, 10 * fe.scope.related_cap) if p not in touched
    ]
    chosen = list(dict.fromkeys(touched + related[: fe.scope.related_cap]))
    if not chosen:
        raise NothingToRun(
            "the test patch changes no Playwright spec and the PR's frontend code changes no test id a spec uses"
        )
    return tuple(sorted(p[len(prefix) :] for p in chosen))
