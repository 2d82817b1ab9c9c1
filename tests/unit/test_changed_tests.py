"""Which tests a change adds or rewrites: pytest ids found by syntax (a moved test is not changed, a rewritten
one is), Playwright tests by their text, and pytest ids without their parametrization."""

from __future__ import annotations

import pytest

from tasks_lib.formats.changed_tests import (
    added_test_functions,
    changed_spec_tests,
    changed_test_functions,
    strip_params,
)

BEFORE = """
def test_kept(): pass
def test_old_name(): pass
def helper(): pass
class TestA:
    def test_one(self): pass
"""

AFTER = """
import unittest
def test_kept(): pass
def test_new_name(): pass
async def test_async(): pass
def helper(): pass
def not_a_test(): pass
class TestA:
    def test_one(self): pass
    def test_two(self): pass
    class TestInner:
        def test_deep(self): pass
class TestWithInit:
    def __init__(self): pass
    def test_never_collected(self): pass
class Helper:
    def test_not_collected(self): pass
class Legacy(unittest.TestCase):
    def test_legacy(self): pass
def outer():
    def test_nested_function(): pass
"""


def test_added_test_functions_are_the_ids_present_after_but_not_before():
    """Rule: the fallback F2P candidates are exactly the pytest ids the test patch adds (a rename adds)."""
    p = "tests/test_x.py"
    assert added_test_functions(BEFORE, AFTER, p) == {
        f"{p}::test_new_name",
        f"{p}::test_async",
        f"{p}::TestA::test_two",
        f"{p}::TestA::TestInner::test_deep",
        f"{p}::Legacy::test_legacy",
    }


def test_added_test_functions_of_a_new_file_are_all_its_tests():
    """Rule: before=None means the file is new; every collected test in it is added."""
    assert added_test_functions(
        None, "def test_a(): pass\nclass TestB:\n    def test_c(self): pass\n", "t.py"
    ) == {
        "t.py::test_a",
        "t.py::TestB::test_c",
    }


def test_a_file_that_does_not_parse_adds_no_tests():
    """Rule: pytest cannot collect a file with a syntax error, so it contributes no test ids."""
    assert added_test_functions(None, "def test_a(:\n", "t.py") == set()
    assert added_test_functions("def test_a(:\n", "def test_a(): pass\n", "t.py") == {"t.py::test_a"}


def test_changed_test_functions_are_the_added_and_the_rewritten_tests():
    """Rule: a test whose code the change rewrites counts with the added ones; one only moved, or whose file
    changed elsewhere (imports, a fixture), does not."""
    before = "import a\n\ndef test_same():\n    assert a.x\n\ndef test_body():\n    assert a.x == 1\n"
    after = (
        "import a\nimport b\n\n\n# moved below\ndef test_body():\n    assert b.y == 1\n\n"
        "def test_same():\n    assert a.x  # a comment\n\ndef test_new():\n    pass\n"
    )
    assert changed_test_functions(before, after, "t.py") == {"t.py::test_body", "t.py::test_new"}
    assert changed_test_functions(None, after, "t.py") == {
        "t.py::test_body",
        "t.py::test_same",
        "t.py::test_new",
    }


SPEC_BEFORE = """import { test } from "@playwright/test"
import { signUp } from "./utils/user"

test("unchanged", async ({ page }) => {
  await page.goto("/")
})

test.describe("Edit", () => {
  test("rewritten", async ({ page }) => {
    await signUp(page)
  })

  test("long signature, rewritten", async ({
    page,
  }) => {
    await signUp(page)
  })

  test("moved only", async ({ page }) => {
    await page.goto("/x")
  })
})
"""

SPEC_AFTER = """import { test } from "@playwright/test"
import { createUser } from "./utils/privateApi.ts"

test("unchanged", async ({ page }) => {
  await page.goto("/")
})

test.describe("Edit", () => {
  test.use({ storageState: { cookies: [], origins: [] } })

  test("moved only", async ({ page }) => {
    await page.goto("/x")
  })

  test("rewritten", async ({ page }) => {
    await createUser({ page })
  })

  test("long signature, rewritten", async ({
    page,
  }) => {
    await createUser({ page })
  })

  test("added", async ({ page }) => {
    await createUser({ page })
  })
})
"""


def test_changed_spec_tests_are_the_tests_whose_text_is_new():
    """Rule: a Playwright test is changed when its text (its line down to the line closing it at its own
    indentation) is not in the file before, line for line; imports, a new `test.use` and moving a test
    elsewhere in the file change no test; a signature over several lines is part of the test. A new file: every
    test is added."""
    lines = {t: i + 1 for i, line in enumerate(SPEC_AFTER.splitlines()) for t in [line] if "test(" in line}
    tests = [(f"t.spec.ts:{n}:3 › {line.split(chr(34))[1]}", n) for line, n in lines.items()]
    ids = {t.split(" › ")[1]: t for t, _ in tests}
    assert changed_spec_tests(SPEC_BEFORE, SPEC_AFTER, tests) == {
        ids["rewritten"],
        ids["long signature, rewritten"],  # `}) => {` opens its body, it closes nothing (#1429)
        ids["added"],
    }
    assert changed_spec_tests(None, SPEC_AFTER, tests) == set(ids.values())


def test_a_spec_test_whose_line_is_not_in_the_file_counts_as_changed():
    """Rule: an id whose line lies outside the file cannot be shown unchanged."""
    assert changed_spec_tests("a\n", "a\n", [("t.spec.ts:9:1 › x", 9)]) == {"t.spec.ts:9:1 › x"}


@pytest.mark.parametrize(
    ("test_id", "expected"),
    [
        ("tests/test_x.py::test_a[1-2]", "tests/test_x.py::test_a"),
        ("tests/test_x.py::TestC::test_a[x]", "tests/test_x.py::TestC::test_a"),
        ("tests/test_x.py::test_a[a[b]-c]", "tests/test_x.py::test_a"),
        ("tests/test_x.py::test_a[x::y[z]]", "tests/test_x.py::test_a"),
        ("tests/[slug]/test_x.py::test_a[1]", "tests/[slug]/test_x.py::test_a"),
        ("tests/[slug]/test_x.py::test_a", "tests/[slug]/test_x.py::test_a"),
        ("tests/test_x.py::test_a", "tests/test_x.py::test_a"),
        ("tests/items.spec.ts:42:3 › Items › archive [x]", "tests/items.spec.ts:42:3 › Items › archive [x]"),
    ],
)
def test_strip_params_drops_only_the_parametrization(test_id, expected):
    """Rule: the parameter part starts at the first '[' right after `::name`; brackets elsewhere stay."""
    assert strip_params(test_id) == expected
