"""The leak gate (tasks_lib/curation/statement_gate.py, data/statement_rules.toml): the agent gets the task, not the answer.
Every rule is computed from the instance itself; `packaging.apply_leak_gate` drops a PR description's testing and
implementation sections when that is enough, and rejects the instance with the reason when it is not."""

from __future__ import annotations

import pytest

from tasks_lib.curation import packaging, statement_gate

PATCH = (
    "diff --git a/app/items.py b/app/items.py\n--- a/app/items.py\n+++ b/app/items.py\n@@ -1,2 +1,3 @@\n"
    " def read(item_id):\n-    return db.get(item_id)\n"
    '+    raise HTTPException(status_code=404, detail="Item not found")\n'
)
TEST_PATCH = (
    "diff --git a/tests/test_items.py b/tests/test_items.py\n--- a/tests/test_items.py\n+++ b/tests/test_items.py\n"
    "@@ -1 +1,4 @@\n+def test_read_item_not_found(client):\n"
    '+    assert client.get("/items/999").json() == {"detail": "Item not found"}\n'
)


def _instance(statement: str) -> dict:
    return {
        "problem_statement": statement,
        "patch": PATCH,
        "test_patch": TEST_PATCH,
        "fail_to_pass": {"backend": ["tests/test_items.py::test_read_item_not_found"], "frontend": []},
        "pass_to_pass": {
            "backend": [],
            "frontend": ["tests/items.spec.ts:3:1 › Items › deleting an item removes it"],
        },
        "notes": "problem_statement sourced from PR description.",
    }


GOOD = "Reading an item that does not exist answers 500. A client expects 404 with a message saying the item is missing."


@pytest.mark.parametrize(
    ("kind", "statement"),
    [
        ("test", GOOD + " See test_read_item_not_found."),
        ("test", GOOD + " Also: Deleting an item removes it."),
        ("file", GOOD + " Tests are in tests/test_items.py."),
        ("file", GOOD + " Tests are in test_items.py."),
        ("quote", GOOD + ' Do: raise   HTTPException(status_code=404,\n detail="Item not found")'),
        ("quote", GOOD + ' assert client.get("/items/999").json() == {"detail": "Item not found"}'),
        ("diff", GOOD + "\n@@ -1,2 +1,3 @@\n"),
    ],
)
def test_each_kind_of_leak_is_named(kind, statement):
    """Rule: a hidden test's function or title, a test-patch file (path or name), a line of either patch
    (whitespace collapsed), or a diff in the statement: a finding of that kind."""
    verdict = statement_gate.check(statement, _instance(statement))
    assert kind in {k for k, _ in verdict.findings}, verdict.findings


def test_a_statement_of_the_task_alone_passes():
    """Rule: what a user sees and expects, in other words than the fix's, is no leak."""
    assert not statement_gate.check(GOOD, _instance(GOOD)).leaks


def test_sections_that_describe_the_fix_or_the_tests_are_dropped_then_checked_again():
    """Rule: a leaking PR description loses its testing / implementation sections; kept when the rest is
    clean and specific enough, with a note; rejected with `statement_leaks` naming what leaked otherwise."""
    body = f'## Problem\n{GOOD}\n\n## Solution\nraise HTTPException(status_code=404, detail="Item not found")\n\n## Testing\nAdded test_read_item_not_found.\n'
    inst = _instance(body)
    assert packaging.apply_leak_gate(inst) == []
    assert (
        inst["problem_statement"].startswith("## Problem")
        and "HTTPException" not in inst["problem_statement"]
    )
    assert "sections dropped (Solution, Testing)" in inst["notes"]
    leaky = _instance(f"{GOOD} The fix is in test_items.py.\n\n## Testing\nsee above\n")
    (reason,) = packaging.apply_leak_gate(leaky)
    assert reason.startswith("statement_leaks: file: tests/test_items.py")


def test_a_statement_of_a_few_words_is_underspecified():
    """Rule: fewer than the rules' minimum of words (10) specifies too little: rejected with the reason."""
    inst = _instance("✨ Add Login e2e tests")
    assert packaging.apply_leak_gate(inst) == ["statement_underspecified: 4 words (fewer than 10)"]
    assert statement_gate.words(GOOD) >= statement_gate.rules().min_words
