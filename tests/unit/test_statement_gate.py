"""The leak gate (tasks_lib/curation/statement_gate.py, data/statement_rules.toml): the agent gets the task, not the answer.
Every rule is computed from the instance itself; `packaging.apply_leak_gate` drops a PR description's testing and
implementation sections when that is enough, and rejects the instance with the reason when it is not."""

from __future__ import annotations

import pytest

from tasks_lib.curation import interface, packaging, statement_gate

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
        ("file", GOOD + " See the test_items module."),
        ("file", GOOD + " Run python -m pytest tests.test_items to see it."),
        ("file", GOOD + " See tests/test_items for them."),
        ("diff", GOOD + "\n```diff\n-a\n+b\n```\n"),
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


def test_a_test_file_whose_path_has_spaces_is_named_whole():
    """Rule: a test file is read from the diff as git writes it: `Youtube Analysis.spec.ts` whole (a statement
    naming it leaks; the first word alone, "Youtube", is no file and does not), a quoted path unquoted."""
    spec = (
        "diff --git a/tests/Youtube Analysis.spec.ts b/tests/Youtube Analysis.spec.ts\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/tests/Youtube Analysis.spec.ts\n@@ -0,0 +1 @@\n+test('x', async () => {});\n"
        'diff --git "a/tests/caf\\303\\251 menu.spec.ts" "b/tests/caf\\303\\251 menu.spec.ts"\n'
        '--- "a/tests/caf\\303\\251 menu.spec.ts"\n+++ "b/tests/caf\\303\\251 menu.spec.ts"\n'
        "@@ -1 +1 @@\n-a\n+b\n"
    )
    instance = _instance(GOOD) | {"test_patch": spec}
    for named in (
        "Youtube Analysis.spec.ts",
        "tests/Youtube Analysis.spec.ts",
        "the café menu.spec.ts suite",
    ):
        verdict = statement_gate.check(GOOD + f" See {named}.", instance)
        assert "file" in {k for k, _ in verdict.findings}, (named, verdict.findings)
    verdict = statement_gate.check(GOOD + " The Youtube component is unrelated.", instance)
    assert "file" not in {k for k, _ in verdict.findings}, verdict.findings


def test_a_hidden_test_class_is_a_hidden_test_name():
    """Rule: the pytest class that holds a hidden test (`path::TestX::test_y`, pytest collects `Test*` classes)
    names the hidden tests as much as the function does; a class-less id and other path parts name nothing."""
    inst = {
        **_instance(GOOD),
        "fail_to_pass": {"backend": ["tests/test_items.py::TestItemLookup::test_missing[1]"], "frontend": []},
    }
    assert statement_gate.check(GOOD + " As in TestItemLookup.", inst).findings == [
        ("test", "TestItemLookup")
    ]
    assert not statement_gate.check(GOOD + " The item lookup must say so.", inst).leaks


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


def test_a_pr_description_loses_its_implementation_sections_even_when_nothing_leaks():
    """Rule (`sections.drop = "always"`): what the PR did is the answer, named or not; the note says which
    sections went. A statement from an issue keeps its sections when nothing leaks."""
    body = f"## Problem\n{GOOD}\n\n## Changes\n- The lookup now goes through a helper that raises early.\n"
    inst = _instance(body)
    assert packaging.apply_leak_gate(inst) == []
    assert "helper" not in inst["problem_statement"] and "sections dropped (Changes)" in inst["notes"]
    issue = {**_instance(body), "notes": f"{packaging.ISSUE_NOTE} (#3)."}
    assert packaging.apply_leak_gate(issue) == [] and "helper" in issue["problem_statement"]


def test_a_dropped_section_takes_its_subsections_and_code_blocks_hold_no_headings():
    """Rule: deeper headings and bold labels under a dropped heading go with it; a `#` line in a fenced block
    (a shell comment) neither starts a section nor ends one; a level-1 heading is a title, kept unless it is
    one of the rules' headings with at most two more words."""
    body = (
        f"# Fix items answering 500 when the item does not exist\n{GOOD}\n\n## Testing\n### Unit\n**Added:**\n"
        "- one test per route\n```bash\n# run them all\npytest -q tests\n```\n12 passed\n\n## Impact\nClients can tell.\n"
    )
    kept, dropped = statement_gate.clean(body)
    assert dropped == ["Testing"]
    lead_in = f"## Summary\n{GOOD}\n\nChanges made:\n\n### app/items.py\n- a helper\n"
    assert statement_gate.clean(lead_in, instance=_instance(GOOD)) == (
        f"## Summary\n{GOOD}",
        ["app/items.py"],
    )
    assert kept.startswith("# Fix items answering 500") and kept.endswith("Clients can tell.")
    assert "pytest" not in kept and "12 passed" not in kept and "one test" not in kept


def test_what_a_template_leaves_is_removed():
    """Rule: HTML comments (hidden when rendered), metadata lines (sign-offs, a bare `Closes #12`, in a list or
    bold too) and sections with no line of prose (task-list items, rules, emphasised placeholders) are not the
    author's words on the task; a statement left with too few words is underspecified."""
    body = (
        "<!-- Describe the change and link the issue -->\n## Related issue\n- **Closes:** #12\n\n"
        f"## Summary\n{GOOD}\n<!-- unclosed reminder\nstill hidden\n"
    )
    assert statement_gate.tidy(body).endswith(GOOD) and "Describe" not in statement_gate.tidy(body)
    template = (
        f"## Summary\n{GOOD}\n\n## Type of change\n- [x] Bug fix\n- [ ] Feature\n\n---\n\n"
        "## Notes (optional)\n_Screenshots, design decisions or more context._\n\nSigned-off-by: A <a@b.c>\n"
    )
    inst = _instance(template)
    assert packaging.apply_leak_gate(inst) == []
    assert inst["problem_statement"] == f"## Summary\n{GOOD}"
    assert "Type of change (template)" in inst["notes"]
    empty = _instance(
        "## Summary\n\n## Type of change\n- [x] Bug fix\n\nSigned-off-by: A <a@b.c>\nCloses #4\n"
    )
    assert packaging.apply_leak_gate(empty) == ["statement_underspecified: 0 words (fewer than 10)"]


def test_a_pr_title_alone_is_underspecified_however_long(tmp_path):
    """Rule (`title_alone`): a PR without a description, or whose description only repeats its title, gives
    the agent a title: a title names a change, it does not specify one."""
    from tests.unit.test_repackage import _pr, _record

    record = _record()
    title = "♻️ Redirect the user to the login page when the API answers 401 or 403 to any request"
    echo = _pr(record, title=title, body=f"{title.replace('♻️ ', '')}\n", closing_issues=())
    text, note = packaging.problem_statement(echo)
    assert (text, note) == (title, packaging.TITLE_NOTE)
    inst = {**_instance(text), "notes": note}
    assert packaging.apply_leak_gate(inst) == ["statement_underspecified: the PR title alone (17 words)"]


NEW_HELPER = (
    "diff --git a/app/items.py b/app/items.py\n--- a/app/items.py\n+++ b/app/items.py\n@@ -1,2 +1,9 @@\n"
    "+def find_item_or_404(db, item_id):\n+    def _inner():\n+        return 1\n+    return db.get(item_id)\n"
    "-def moved_helper(x):\n+def moved_helper(x, y=None):\n+class ItemMissing(Exception):\n+    def __init__(self):\n"
)
NEW_TESTS = (
    "diff --git a/tests/test_items.py b/tests/test_items.py\n--- a/tests/test_items.py\n+++ b/tests/test_items.py\n"
    "@@ -1 +1,6 @@\n+from app.items import ItemMissing, find_item_or_404\n+def test_x(db):\n"
    "+    assert find_item_or_404(db, 1)\n+    moved_helper(1)\n+    _inner()\n+    ItemMissing.__init__\n"
)


def test_a_statement_must_name_what_the_hidden_tests_use_that_the_patch_adds():
    """Rule (`interface.unstated = "reject"`): a name the reference patch adds at module or class level and the
    hidden tests import, call or reach is the task's interface: a statement that never gives it is
    underspecified. A name the patch also removes (a changed signature), a nested function and a dunder are not
    counted."""
    inst = {**_instance(GOOD), "patch": NEW_HELPER, "test_patch": NEW_TESTS}
    assert interface.new_names(inst) == ["ItemMissing", "find_item_or_404"]
    (reason,) = packaging.apply_leak_gate(dict(inst))
    assert reason == (
        "statement_underspecified: the hidden tests use names the reference patch adds and the statement"
        " never gives (ItemMissing, find_item_or_404)"
    )
    told = GOOD + " Add app.items.find_item_or_404(db, item_id), raising ItemMissing when there is none."
    assert packaging.apply_leak_gate({**inst, "problem_statement": told}) == []


def test_constants_and_import_aliases_the_patch_adds_are_interface_too():
    """Rule: in a Python module the reference patch also adds names by an UPPER_CASE assignment at indent 0
    and by an import's `as` (`from m import f as _f`: tests patch the module's `_f`); a test that imports one
    in a parenthesized block over several lines uses it. An indented assignment or a plain import adds none."""
    patch = (
        "diff --git a/app/limits.py b/app/limits.py\n--- a/app/limits.py\n+++ b/app/limits.py\n@@ -1 +1,6 @@\n"
        "+MAX_ITEMS_PER_PAGE: int = 50\n+from app.checks import check_items as _check_items\n+import httpx\n"
        "+def page(n):\n+    LOCAL_LIMIT = 3\n+    return n\n"
        "diff --git a/web/src/limits.ts b/web/src/limits.ts\n--- a/web/src/limits.ts\n+++ b/web/src/limits.ts\n"
        "@@ -1 +1,2 @@\n+PAGE_SIZE_JS = 5\n"
    )
    tests = (
        "diff --git a/tests/test_limits.py b/tests/test_limits.py\n--- a/tests/test_limits.py\n"
        "+++ b/tests/test_limits.py\n@@ -1 +1,9 @@\n+from app.limits import (\n+    page,\n"
        "+    MAX_ITEMS_PER_PAGE,\n+)\n+def test_x(monkeypatch):\n"
        '+    monkeypatch.setattr("app.limits._check_items", None)\n+    assert page(1) == 1\n'
        "+    assert LOCAL_LIMIT and PAGE_SIZE_JS and httpx.get\n"
    )
    inst = {**_instance(GOOD), "patch": patch, "test_patch": tests}
    assert interface.new_names(inst) == ["MAX_ITEMS_PER_PAGE", "_check_items", "page"]


def test_a_heading_written_as_plain_text_is_a_heading():
    """Rule: a description pasted from its rendered form has plain-text headings (`Test Coverage` above its
    list); a short, capitalised line between a blank line and a list or a blank line is one, and a testing
    or implementation one is dropped like a markdown heading. A short sentence, a line of code, an issue
    reference or a label with a colon is not."""
    body = (
        f"{GOOD}\n\nUser Impact\n\nClients can tell a missing item from a crash.\n\n"
        "Test Coverage\n- one test per route, all green\n\nFixes the lookup bug\n\nNothing else changes.\n\n"
        'mcp = FastMCP("Items")\n\nCloses #12, #13\n\nRelated Issue\n'
    )
    lines = body.splitlines(keepends=True)
    heads = [lines[i].strip() for i in range(len(lines)) if statement_gate.plain_heading(lines, i)]
    assert heads == ["User Impact", "Test Coverage"]
    kept, dropped = statement_gate.clean(body)
    assert dropped == ["Test Coverage"]
    assert "one test per route" not in kept and "Clients can tell" in kept and "Nothing else" not in kept


def test_a_bad_rules_file_is_an_input_error_naming_the_key(tmp_path, monkeypatch):
    from tasks_lib.core import paths
    from tasks_lib.core.errors import InputError

    text = (
        (paths.data_dir() / "statement_rules.toml")
        .read_text()
        .replace('drop = "always"', 'drop = "sometimes"')
    )
    (tmp_path / "statement_rules.toml").write_text(text)
    monkeypatch.setenv("PBENCH_DATA_DIR", str(tmp_path))
    statement_gate.rules.cache_clear()
    try:
        with pytest.raises(
            InputError, match=r"statement_rules.toml: sections.drop = 'sometimes': one of always, on_leak"
        ):
            statement_gate.rules()
    finally:
        monkeypatch.undo()
        statement_gate.rules.cache_clear()


def test_hints_that_leak_are_dropped_and_the_note_says_what_leaked():
    """Rule: `pbench show --with-hints` hands the issues' comments to the agent, so they pass the same leak
    rules; hints that leak are dropped (the statement stays), the notes name what leaked."""
    inst = {**_instance(GOOD), "hints_text": "Maybe test_read_item_not_found covers it?"}
    assert packaging.apply_leak_gate(inst) == []
    assert inst["hints_text"] == "" and "hints_text dropped (test: test_read_item_not_found)" in inst["notes"]
    clean = {**_instance(GOOD), "hints_text": "Old orders still point at such items."}
    assert (
        packaging.apply_leak_gate(clean) == []
        and clean["hints_text"] == "Old orders still point at such items."
    )


def test_the_committed_v03_corpus_hands_no_agent_the_answer():
    """Rule (issue 36's bar, held on the committed data): every statement of `data/corpus/v0.3` passes today's
    gate as it stands: no hidden test or test file named, no line of either patch quoted, no diff, at least the
    rules' minimum of words, every name the hidden tests use that the reference patch adds given; a curated
    statement says so in its note and comes from `data/statements/`."""
    import json

    from tasks_lib.core import paths
    from tasks_lib.curation import statements

    path = paths.data_dir() / "corpus" / "v0.3" / "instances.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    curated = {
        k for f in sorted((paths.data_dir() / "statements").glob("*.jsonl")) for k in statements.load(f)
    }
    assert len(records) >= 100
    for record in records:
        text = record["problem_statement"]
        assert not statement_gate.check(text, record).leaks, record["instance_id"]
        assert not statement_gate.underspecified(text), record["instance_id"]
        assert interface.unstated_names(text, record) == [], record["instance_id"]
        if record["notes"].startswith(packaging.CURATED_PREFIX):
            assert record["instance_id"] in curated, record["instance_id"]
