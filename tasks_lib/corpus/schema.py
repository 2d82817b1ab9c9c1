"""Validation of task instances: the JSON Schema in `data/schema/` plus the rules it cannot say.

`validate_instance` returns every reason an instance is unfit (an empty list: valid), so curation
can write them all to `rejected.parquet` instead of stopping at the first. Semantic rules skip
fields the schema already found malformed, rather than crash on them.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from tasks_lib.core import paths
from tasks_lib.core.constants import Side
from tasks_lib.formats.patches import FileDiff, PatchFormatError, changed_paths, file_diffs, validate_patch
from tasks_lib.protocol import globs
from tasks_lib.sources.record import SourceRecord

SCHEMA_PATH = paths.PROJECT_ROOT / "data" / "schema" / "instance.schema.json"
SIDES = (Side.BACKEND.value, Side.FRONTEND.value)

# Used when an instance is checked without its source record (e.g. a published instance from a
# repository the project has no source entry for): the usual homes of pytest and Playwright tests.
DEFAULT_TEST_FILE_PATTERNS = (
    "**/tests/**",
    "**/test/**",
    "**/test_*.py",
    "**/*_test.py",
    "**/conftest.py",
    "**/*.spec.ts",
    "**/*.spec.tsx",
    "**/*.test.ts",
    "**/*.test.tsx",
    "**/*.spec.js",
    "**/*.test.js",
)
DEFAULT_TEST_INFRA_PATTERNS = ("**/pytest.ini", "**/playwright.config.*")


class DefaultTestFiles:
    """A stand-in for a source record's test-file rules, for instances checked without one."""

    def is_test_infra(self, path: str) -> bool:
        return globs.match_any(path, DEFAULT_TEST_INFRA_PATTERNS)

    def is_test_file(self, path: str) -> bool:
        return globs.match_any(path, DEFAULT_TEST_FILE_PATTERNS) or self.is_test_infra(path)

    def side_of(self, path: str) -> Side | None:
        return None


@functools.cache
def load_schema() -> dict[str, Any]:
    """The instance JSON Schema (read once per process)."""
    return json.loads(Path(SCHEMA_PATH).read_text(encoding="utf-8"))


@functools.cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(load_schema(), format_checker=Draft202012Validator.FORMAT_CHECKER)


def _schema_errors(instance: dict[str, Any]) -> list[str]:
    errors = sorted(
        _validator().iter_errors(instance), key=lambda e: (list(map(str, e.absolute_path)), e.message)
    )
    return [f"{e.json_path}: {e.message}" for e in errors]


def _str(instance: dict[str, Any], key: str) -> str | None:
    value = instance.get(key)
    return value if isinstance(value, str) else None


def _tests(instance: dict[str, Any], key: str) -> dict[str, list[str]] | None:
    value = instance.get(key)
    if not isinstance(value, dict):
        return None
    out = {}
    for side in SIDES:
        ids = value.get(side, [])
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            return None
        out[side] = ids
    return out


def _blocks(instance: dict[str, Any], key: str, errors: list[str]) -> list[FileDiff] | None:
    text = _str(instance, key)
    if text is None:
        return None
    try:
        return file_diffs(text)
    except PatchFormatError as exc:
        errors.append(f"$.{key}: malformed diff: {exc}")
        return None


def _check_identity(instance: dict[str, Any], source, errors: list[str]) -> None:
    repo, number, iid = _str(instance, "repo"), instance.get("pr_number"), _str(instance, "instance_id")
    if repo and isinstance(number, int) and iid:
        expected = f"{repo.replace('/', '__')}-{number}"
        if iid != expected:
            errors.append(f"$.instance_id: {iid!r} does not match repo and pr_number (expected {expected!r})")
    if source is not None and repo and repo != source.repo:
        errors.append(f"$.repo: {repo!r} is not the source's repository {source.repo!r}")
    base, head = _str(instance, "base_commit"), _str(instance, "head_commit")
    if base and base == head:
        errors.append("$.head_commit: equals base_commit; the PR changes nothing")
    created = _str(instance, "created_at")
    if created:
        try:
            datetime.fromisoformat(created.replace("Z", "+00:00"))
        except ValueError:
            errors.append(f"$.created_at: {created!r} is not an ISO 8601 date-time")


def _check_tests(instance: dict[str, Any], errors: list[str]) -> None:
    f2p, p2p = _tests(instance, "fail_to_pass"), _tests(instance, "pass_to_pass")
    if f2p is not None and not any(f2p[side] for side in SIDES):
        errors.append("$.fail_to_pass: empty on both sides; no test shows that the patch matters")
    if f2p is None or p2p is None:
        return
    for side in SIDES:
        shared = sorted(set(f2p[side]) & set(p2p[side]))
        if shared:
            errors.append(
                f"$.fail_to_pass.{side}: {len(shared)} test(s) also in pass_to_pass: {', '.join(shared[:5])}"
            )


def _check_patches(instance: dict[str, Any], source, errors: list[str]) -> list[FileDiff] | None:
    rules = source if source is not None else DefaultTestFiles()
    patch = _str(instance, "patch")
    code_blocks = _blocks(instance, "patch", errors)
    if patch and code_blocks is not None:
        # The reference patch is what `gold` submits: it must pass the checks an agent's patch passes.
        errors.extend(f"$.patch: {p.status}: {p.message}" for p in validate_patch(patch, rules))
    test_blocks = _blocks(instance, "test_patch", errors)
    if test_blocks is None:
        return code_blocks
    if _str(instance, "test_patch") and not test_blocks:
        errors.append("$.test_patch: holds no file diff")
    for fd in test_blocks:
        for path in fd.paths:
            if not rules.is_test_file(path):
                errors.append(f"$.test_patch: {path} is not a test file; it belongs in patch")
    if "test_patch_backend" in instance or "test_patch_frontend" in instance:
        _check_test_split(instance, test_blocks, source, errors)
    return code_blocks


def _norm(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def _check_test_split(
    instance: dict[str, Any], test_blocks: list[FileDiff], source, errors: list[str]
) -> None:
    sides = {}
    for side in SIDES:
        sides[side] = (
            _blocks(instance, f"test_patch_{side}", errors) if f"test_patch_{side}" in instance else []
        )
    if any(blocks is None for blocks in sides.values()):
        return
    combined = sorted(_norm(fd.text) for side in SIDES for fd in sides[side])  # type: ignore[union-attr]
    if combined != sorted(_norm(fd.text) for fd in test_blocks):
        errors.append("$.test_patch_backend: test_patch_backend + test_patch_frontend differ from test_patch")
    if source is None:
        return
    for side in SIDES:
        for fd in sides[side]:  # type: ignore[union-attr]
            actual = Side.FRONTEND.value if source.side_of(fd.path) == Side.FRONTEND else Side.BACKEND.value
            if actual != side:
                errors.append(f"$.test_patch_{side}: {fd.path} belongs to the {actual} side")


def _check_domain(
    instance: dict[str, Any], source, code_blocks: list[FileDiff] | None, errors: list[str]
) -> None:
    domain = _str(instance, "stack_domain")
    if source is None or code_blocks is None or not domain:
        return
    paths_ = [p for fd in code_blocks for p in fd.paths]
    expected = source.stack_domain(paths_)
    if expected is None:
        # A patch only at the repository root (compose file, CI): the tests decide the side.
        test_patch = _str(instance, "test_patch") or ""
        try:
            expected = source.stack_domain(paths_ + changed_paths(test_patch))
        except PatchFormatError:
            expected = None
    if expected is None:
        errors.append("$.stack_domain: the patch touches neither the backend nor the frontend dir")
    elif expected != domain:
        errors.append(f"$.stack_domain: {domain!r} but the patch's paths say {expected.value!r}")


def _check_commits(instance: dict[str, Any], commit_exists: Callable[[str], bool], errors: list[str]) -> None:
    env = instance.get("environment")
    candidates = [
        ("$.base_commit", instance.get("base_commit")),
        ("$.head_commit", instance.get("head_commit")),
        ("$.environment.setup_commit", env.get("setup_commit") if isinstance(env, dict) else None),
    ]
    for where, sha in candidates:
        if isinstance(sha, str) and sha and not commit_exists(sha):
            errors.append(f"{where}: commit {sha} does not exist in the repository")


def validate_instance(
    instance: dict[str, Any],
    source: SourceRecord | None = None,
    *,
    commit_exists: Callable[[str], bool] | None = None,
) -> list[str]:
    """Every reason `instance` is not a valid task (empty list: valid), each naming its JSON path.

    Schema errors, then: instance_id matches repo + pr_number; base != head; F2P not empty over
    both sides together; F2P and P2P disjoint per side; `patch` passes `validate_patch` (so it
    touches no test file and `gold` can be submitted); `test_patch` holds only test files;
    the backend/frontend split, when present, is exactly `test_patch` cut by side; with `source`,
    the repo is the source's and `stack_domain` matches the patch's paths; with `commit_exists`,
    the commits exist. Without `source`, test files are recognised by DEFAULT_TEST_FILE_PATTERNS.
    """
    if not isinstance(instance, dict):
        return [f"$: must be an object, got {type(instance).__name__}"]
    errors = _schema_errors(instance)
    _check_identity(instance, source, errors)
    _check_tests(instance, errors)
    code_blocks = _check_patches(instance, source, errors)
    _check_domain(instance, source, code_blocks, errors)
    if commit_exists is not None:
        _check_commits(instance, commit_exists, errors)
    return errors
