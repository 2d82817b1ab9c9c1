"""Invariants of instance validation: the published v0.1 instance validates unchanged, every
semantic rule rejects its counter-example with the JSON path named, and the SWE-bench export is
what SWE-bench tools read."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from tasks_lib.core.constants import SCHEMA_VERSION
from tasks_lib.corpus.instance import TaskInstance
from tasks_lib.corpus.schema import load_schema, validate_instance
from tasks_lib.sources.record import parse_source

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "instance-1396.jsonl"
SHARED = (
    Path(__file__).resolve().parents[3] / "shared" / "reference" / "fastapi-template" / "instance-1396.jsonl"
)
BASE, HEAD, SETUP = "a" * 40, "b" * 40, "c" * 40


def source(repo: str = "acme/shop", frontend: bool = True):
    raw = {
        "name": "t",
        "repo": repo,
        "clone": {"url": f"https://github.com/{repo}.git"},
        "backend": {
            "dir": "backend",
            "python_version": "3.11",
            "installer": "uv",
            "lock_files": ["backend/uv.lock"],
        },
        "test_files": {
            "patterns": ["backend/tests/**", "**/conftest.py", "frontend/tests/**", "**/*.spec.ts"],
            "infra_patterns": ["backend/pytest.ini", "**/playwright.config.*"],
        },
    }
    if frontend:
        raw["frontend"] = {
            "dir": "frontend",
            "node_version": "20",
            "package_manager": "bun",
            "lock_files": ["frontend/bun.lock"],
            "serve_command": "bun run dev",
        }
    return parse_source(raw, Path("t.toml"))


def diff(path: str) -> str:
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-a\n+b\n"


BACKEND_TEST = diff("backend/tests/test_items.py")
FRONTEND_TEST = diff("frontend/tests/items.spec.ts")


def instance(**changes) -> dict:
    """A valid fullstack instance; keyword arguments replace fields (None deletes one)."""
    inst = {
        "schema_version": "0.1",
        "instance_id": "acme__shop-12",
        "repo": "acme/shop",
        "pr_number": 12,
        "pr_url": "https://github.com/acme/shop/pull/12",
        "pr_title": "Archive items",
        "pr_author": "dev",
        "pr_labels": ["feature"],
        "base_commit": BASE,
        "head_commit": HEAD,
        "problem_statement": "Items should be archivable.",
        "hints_text": "",
        "patch": diff("backend/app/items.py") + diff("frontend/src/Items.tsx"),
        "test_patch": BACKEND_TEST + FRONTEND_TEST,
        "test_patch_backend": BACKEND_TEST,
        "test_patch_frontend": FRONTEND_TEST,
        "fail_to_pass": {
            "backend": ["tests/test_items.py::test_archive"],
            "frontend": ["tests/items.spec.ts:42:3 › Items › archive"],
        },
        "pass_to_pass": {"backend": ["tests/test_items.py::test_list"], "frontend": []},
        "stack_domain": "fullstack",
        "environment": {
            "python_version": "3.11",
            "node_version": "20",
            "uv_lock_sha": "sha256:" + "1" * 64,
            "bun_lock_sha": "sha256:" + "2" * 64,
            "docker_compose_sha": "",
            "setup_commit": SETUP,
        },
        "created_at": "2025-03-01T10:00:00Z",
        "contamination_tier": "held_out",
        "difficulty": None,
        "notes": "",
    }
    for key, value in changes.items():
        if value is None:
            inst.pop(key, None)
        else:
            inst[key] = value
    return inst


def fails(errors: list[str], path: str, needle: str) -> bool:
    return any(e.startswith(path) and needle in e for e in errors)


def published() -> dict:
    return json.loads(FIXTURE.read_text())


# --- the schema file -------------------------------------------------------------------------


def test_schema_is_valid_draft_2020_12_and_pins_the_schema_version():
    """Rule: the schema file is itself valid JSON Schema 2020-12 and names constants.SCHEMA_VERSION."""
    schema = load_schema()
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["properties"]["schema_version"] == {"const": SCHEMA_VERSION}
    assert load_schema() is schema  # cached


def test_published_instance_validates_unchanged():
    """Rule: the published v0.1 instance (fastapi template PR 1396) loads and validates as is."""
    if SHARED.exists():
        assert FIXTURE.read_bytes() == SHARED.read_bytes()
    inst = published()
    before = copy.deepcopy(inst)
    assert validate_instance(inst) == []
    assert (
        validate_instance(inst, source("fastapi/full-stack-fastapi-template"), commit_exists=lambda s: True)
        == []
    )
    assert inst == before


def test_the_synthetic_instance_is_valid():
    """Rule: the counter-examples below each break exactly one rule of an otherwise valid instance."""
    assert validate_instance(instance(), source(), commit_exists=lambda s: True) == []


# --- schema rules ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "path", "needle"),
    [
        ({"base_commit": "abc123"}, "$.base_commit", "does not match"),
        ({"head_commit": "B" * 40}, "$.head_commit", "does not match"),
        ({"instance_id": "acme/shop#12"}, "$.instance_id", "does not match"),
        ({"problem_statement": None}, "$", "'problem_statement' is a required property"),
        ({"schema_version": "0.2"}, "$.schema_version", "'0.1' was expected"),
        ({"stack_domain": "mobile"}, "$.stack_domain", "is not one of"),
        ({"contamination_tier": "secret"}, "$.contamination_tier", "is not one of"),
        ({"pr_number": "12"}, "$.pr_number", "is not of type 'integer'"),
        ({"created_at": "yesterday"}, "$.created_at", "does not match"),
        ({"fail_to_pass": {"backend": ["t::a"]}}, "$.fail_to_pass", "'frontend' is a required property"),
        ({"pass_to_pass": {"backend": [1], "frontend": []}}, "$.pass_to_pass.backend[0]", "is not of type"),
        ({"pass_to_pass": {"backend": ["x", "x"], "frontend": []}}, "$.pass_to_pass.backend", "non-unique"),
        ({"FAIL_TO_PASS": "[]"}, "$", "Additional properties are not allowed"),
        ({"environment": {"python_version": "3.11"}}, "$.environment", "is a required property"),
        ({"patch": ""}, "$.patch", "should be non-empty"),
    ],
)
def test_schema_violations_are_reported_with_their_json_path(changes, path, needle):
    """Rule: each schema error names the JSON path of the offending value."""
    errors = validate_instance(instance(**changes))
    assert fails(errors, path, needle), errors


def test_a_non_object_is_refused():
    """Rule: an instance is a JSON object."""
    assert validate_instance([]) == ["$: must be an object, got list"]  # type: ignore[arg-type]


# --- semantic rules --------------------------------------------------------------------------


def test_f2p_must_not_be_empty_over_both_sides():
    """Rule: at least one FAIL_TO_PASS test, on either side; one side alone is enough."""
    errors = validate_instance(instance(fail_to_pass={"backend": [], "frontend": []}))
    assert fails(errors, "$.fail_to_pass", "empty on both sides")
    assert (
        validate_instance(instance(fail_to_pass={"backend": [], "frontend": ["tests/items.spec.ts:1:1 › a"]}))
        == []
    )


def test_f2p_and_p2p_are_disjoint_per_side():
    """Rule: a test cannot both fail before and pass before."""
    f2p = {"backend": ["tests/test_items.py::test_list"], "frontend": []}
    errors = validate_instance(instance(fail_to_pass=f2p))
    assert fails(errors, "$.fail_to_pass.backend", "also in pass_to_pass: tests/test_items.py::test_list")


def test_patch_must_not_touch_test_files():
    """Rule: the reference patch holds no test file or test infrastructure (with or without a source)."""
    bad = instance(patch=diff("backend/app/items.py") + diff("backend/tests/test_items.py"))
    for src in (None, source()):
        assert fails(validate_instance(bad, src), "$.patch", "backend/tests/test_items.py"), src
    infra = instance(patch=diff("backend/app/items.py") + diff("backend/pytest.ini"))
    assert fails(validate_instance(infra, source()), "$.patch", "patch_touches_tests")


def test_patch_must_be_submittable_as_gold():
    """Rule: the reference patch passes the checks an agent's patch passes, so `gold` can resolve."""
    binary = "diff --git a/frontend/logo.png b/frontend/logo.png\nBinary files a/frontend/logo.png and "
    binary += "b/frontend/logo.png differ\n"
    errors = validate_instance(instance(patch=diff("backend/app/items.py") + binary))
    assert fails(errors, "$.patch", "binary")
    assert fails(validate_instance(instance(patch="not a diff")), "$.patch", "patch_invalid")


def test_test_patch_holds_only_test_files():
    """Rule: everything in test_patch is a test file; code belongs in patch."""
    errors = validate_instance(
        instance(
            test_patch=BACKEND_TEST + FRONTEND_TEST + diff("backend/app/x.py"),
            test_patch_backend=None,
            test_patch_frontend=None,
        )
    )
    assert fails(errors, "$.test_patch", "backend/app/x.py is not a test file")


def test_test_patch_split_must_equal_test_patch():
    """Rule: test_patch_backend + test_patch_frontend are exactly test_patch's file blocks."""
    errors = validate_instance(instance(test_patch_frontend=""))
    assert fails(errors, "$.test_patch_backend", "differ from test_patch")
    assert validate_instance(instance(test_patch_backend=None, test_patch_frontend=None)) == []


def test_test_patch_split_must_follow_the_sides():
    """Rule: with a source, each block of the split sits on the side its path belongs to."""
    swapped = instance(test_patch_backend=FRONTEND_TEST, test_patch_frontend=BACKEND_TEST)
    errors = validate_instance(swapped, source())
    assert fails(errors, "$.test_patch_backend", "frontend/tests/items.spec.ts belongs to the frontend side")
    assert fails(errors, "$.test_patch_frontend", "backend/tests/test_items.py belongs to the backend side")


def test_base_and_head_differ():
    """Rule: a PR whose head is its base changes nothing."""
    assert fails(validate_instance(instance(head_commit=BASE)), "$.head_commit", "equals base_commit")


def test_commits_must_exist_when_a_checker_is_given():
    """Rule: every named commit (base, head, setup) exists in the repository."""
    errors = validate_instance(instance(), commit_exists=lambda sha: sha == BASE)
    assert fails(errors, "$.head_commit", f"commit {HEAD} does not exist")
    assert fails(errors, "$.environment.setup_commit", f"commit {SETUP} does not exist")
    assert not fails(errors, "$.base_commit", "")


def test_stack_domain_follows_the_patch_paths():
    """Rule: with a source, stack_domain is what the patch's paths say (tests decide root-only patches)."""
    errors = validate_instance(instance(stack_domain="backend_only"), source())
    assert fails(errors, "$.stack_domain", "'backend_only' but the patch's paths say 'fullstack'")
    root_only = instance(patch=diff("docker-compose.yml"), stack_domain="fullstack")
    assert validate_instance(root_only, source()) == []
    nowhere = instance(
        patch=diff("docker-compose.yml"),
        test_patch=diff("conftest.py"),
        test_patch_backend=diff("conftest.py"),
        test_patch_frontend="",
    )
    assert fails(
        validate_instance(nowhere, source()), "$.stack_domain", "neither the backend nor the frontend"
    )


def test_instance_id_repo_and_source_agree():
    """Rule: instance_id is `<owner>__<repo>-<pr_number>` of its own repo, and the source is that repo."""
    errors = validate_instance(instance(pr_number=13))
    assert fails(errors, "$.instance_id", "expected 'acme__shop-13'")
    assert fails(validate_instance(instance(), source("other/repo")), "$.repo", "not the source's repository")


def test_semantic_rules_survive_malformed_fields():
    """Rule: a malformed field gives schema errors, never an exception from a semantic check."""
    garbage = instance(fail_to_pass="all", pass_to_pass=[1], patch=5, test_patch=None, environment="x")
    errors = validate_instance(garbage, source(), commit_exists=lambda s: False)
    assert errors and all(e.startswith("$") for e in errors)


# --- SWE-bench export ------------------------------------------------------------------------

SWEBENCH_FIELDS = {
    "repo",
    "instance_id",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "hints_text",
    "created_at",
    "version",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "environment_setup_commit",
}


def test_swebench_export_is_flat_with_json_string_test_lists():
    """Rule: the export (one: `TaskInstance.to_swebench`) has SWE-bench's fields, strings only; FAIL_TO_PASS /
    PASS_TO_PASS are the pytest ids as JSON strings, the Playwright ids apart in the `*_FRONTEND` fields."""
    out = TaskInstance.of(instance()).to_swebench()
    assert set(out) >= SWEBENCH_FIELDS
    assert json.loads(out["FAIL_TO_PASS"]) == ["tests/test_items.py::test_archive"]
    assert json.loads(out["FAIL_TO_PASS_FRONTEND"]) == ["tests/items.spec.ts:42:3 › Items › archive"]
    assert json.loads(out["PASS_TO_PASS"]) == ["tests/test_items.py::test_list"]
    assert out["environment_setup_commit"] == SETUP
    assert all(isinstance(v, str) for v in out.values())


def test_swebench_export_of_the_published_instance():
    """Rule: without a setup commit the environment is set up at base; the version names the lock."""
    inst = published()
    out = TaskInstance.of(inst).to_swebench()
    assert out["environment_setup_commit"] == inst["base_commit"]
    assert out["hints_text"] == ""
    assert json.loads(out["FAIL_TO_PASS"]) == inst["fail_to_pass"]["backend"]
    assert out["version"] == inst["environment"]["uv_lock_sha"]
    assert TaskInstance.of(published()).to_swebench() == out
