"""Packaging (curation stage 5): the pure parts of turning a merged PR into a task instance.

The problem statement is the closing issue's body, else the PR body, and the notes say which (a PR body can
leak the solution); difficulty is a coarse, documented proxy on the reference patch's changed lines.
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tasks_lib.core.constants import ExtractionStatus, Tier
from tasks_lib.corpus import schema
from tasks_lib.curation import packaging
from tasks_lib.curation.extraction import ExtractionResult
from tasks_lib.sources.crawl.base import ChangedFile, ClosingIssue, PullRequest
from tasks_lib.sources.record import load_source

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "instance-1396.jsonl"
SHA = "b" * 40


def make_pr(body: str = "PR body", issues=(), **over) -> PullRequest:
    values = dict(
        source="demo",
        repo="prototypebench/demo-fullstack",
        number=12,
        title="✨ Archive items",
        body=body,
        author="alice",
        author_login_raw="alice",
        author_is_bot=False,
        labels=("feature",),
        files=(ChangedFile("backend/app/items.py", 3, 1),),
        additions=3,
        deletions=1,
        changed_files=1,
        merge_commit=SHA,
        base_commit=None,
        head_commit=None,
        base_ref="main",
        head_ref="feature/archive",
        default_branch="main",
        created_at=datetime(2025, 3, 1, 9, 0, tzinfo=UTC),
        merged_at=datetime(2025, 3, 2, 10, 30, 5, tzinfo=UTC),
        url="https://example.org/prototypebench/demo-fullstack/pull/12",
        closing_issues=tuple(issues),
        hints_text="reviewer: use a soft delete",
    )
    values.update(over)
    return PullRequest(**values)


def diff_with(changed: int, context: int = 3) -> str:
    """A one-file diff with `changed` +/- lines (half removed, half added) and some context lines."""
    removed = changed // 2
    added = changed - removed
    body = [f" ctx {i}" for i in range(context)]
    body += [f"-old line {i}" for i in range(removed)]
    body += [f"+new line {i}" for i in range(added)]
    return (
        "diff --git a/backend/app/items.py b/backend/app/items.py\n"
        "--- a/backend/app/items.py\n"
        "+++ b/backend/app/items.py\n"
        f"@@ -1,{context + removed} +1,{context + added} @@\n" + "\n".join(body) + "\n"
    )


# --------------------------------------------------------------------------- difficulty


@pytest.mark.parametrize(
    ("changed", "level"),
    [(0, "easy"), (1, "easy"), (10, "easy"), (11, "medium"), (80, "medium"), (81, "hard"), (500, "hard")],
)
def test_difficulty_bands_on_changed_lines(changed, level):
    """Rule: difficulty is a documented proxy: <=10 changed lines easy, <=80 medium, more hard."""
    assert packaging.difficulty(diff_with(changed)) == level


def test_difficulty_ignores_headers_and_context():
    """Rule: only +/- lines count: `---`/`+++` file headers, hunk headers and context never do."""
    many_files = "".join(diff_with(2, context=40).replace("items.py", f"m{i}.py") for i in range(5))
    assert packaging.difficulty(many_files) == "easy"  # 10 changed lines, 10 header lines, 200 context lines
    assert packaging.difficulty("") == "easy"


def test_difficulty_does_not_count_blank_lines():
    """Rule: only +/- lines are changed lines; empty lines are not."""
    patch = diff_with(1) + "\n" * 20
    assert packaging.difficulty(patch) == "easy"


def test_difficulty_counts_removed_lines_that_start_with_dashes():
    """Rule: every removed or added content line counts, whatever its text; only file headers are skipped."""
    lines = [f"--- removed SQL comment {i}" for i in range(11)]  # '-' + '-- removed SQL comment'
    patch = (
        "diff --git a/backend/app/schema.sql b/backend/app/schema.sql\n"
        "--- a/backend/app/schema.sql\n"
        "+++ b/backend/app/schema.sql\n"
        "@@ -1,11 +0,0 @@\n" + "\n".join(lines) + "\n"
    )
    assert packaging.difficulty(patch) == "medium"


# --------------------------------------------------------------------------- problem statement and notes


def test_problem_statement_prefers_the_closing_issue_body():
    """Rule: the problem statement is the closing issue's title and body (SWE-bench's form, stripped), and the
    note names the issue."""
    pr = make_pr(
        body="Fixes #3 by adding archived_at",
        issues=[ClosingIssue(3, "Archive", "  Users want to archive.\n")],
    )
    text, note = packaging.problem_statement(pr)
    assert text == "Archive\nUsers want to archive."
    assert note == f"{packaging.ISSUE_NOTE} (#3)."
    assert "archived_at" not in text  # the PR body (which can describe the fix) is not shown


def test_problem_statement_joins_several_closing_issues_in_order():
    """Rule: a PR closing several issues gets each one's title and body, in order, separated by a blank line;
    one without a body is left out of the text and of the note."""
    pr = make_pr(
        issues=[
            ClosingIssue(3, "a", "First."),
            ClosingIssue(5, "no text", ""),
            ClosingIssue(4, "b", "Second."),
        ]
    )
    assert packaging.problem_statement(pr) == ("a\nFirst.\n\nb\nSecond.", f"{packaging.ISSUE_NOTE} (#3, #4).")


@pytest.mark.parametrize(
    "issues", [(), (ClosingIssue(3, "Only a title", ""),), (ClosingIssue(3, "t", " \n\t"),)]
)
def test_problem_statement_falls_back_to_the_pr_body(issues):
    """Rule: without a closing issue body the PR body is used, with a note warning of solution leakage; the
    note is true: "no linked issue" only when there is none, else it names the issues whose text is missing
    (an export carries their numbers only)."""
    text, note = packaging.problem_statement(make_pr(body="Add an archive endpoint.", issues=issues))
    assert text == "Add an archive endpoint."
    if issues:
        assert note == packaging.PR_BODY_ISSUES_NOTE.format(issues="#3") and "no linked issue" not in note
    else:
        assert note == packaging.PR_BODY_NOTE


def test_problem_statement_without_any_body_is_the_titles_with_a_note():
    """Rule: no issue body and no PR body: the PR title, then the closing issues' titles, and a note saying so;
    an empty statement (rejected by schema validation) only when there is no title either, never None."""
    pr = make_pr(body="", issues=[ClosingIssue(3, "Items cannot be archived", "")])
    text, note = packaging.problem_statement(pr)
    assert text == f"{pr.title}\nItems cannot be archived" and note == packaging.TITLE_NOTE
    bare = make_pr(body="  ")
    assert packaging.problem_statement(bare) == (bare.title, packaging.TITLE_NOTE)


def test_pr_body_note_is_the_published_wording():
    """Rule: the published v0.1 instance (no linked issue) carries exactly this note."""
    published = json.loads(FIXTURE.read_text().splitlines()[0])
    assert published["notes"] == packaging.PR_BODY_NOTE
    assert packaging.ISSUE_NOTE != packaging.PR_BODY_NOTE


# --------------------------------------------------------------------------- build_instance (real git, no Docker)


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_CONFIG_NOSYSTEM": "1", "HOME": str(repo), "LC_ALL": "C"}
    out = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env)
    return out.stdout.strip()


@pytest.fixture
def tiny_repo(tmp_path) -> tuple[Path, str, str]:
    """A two-commit repository shaped like the demo source: a code change plus a new test."""
    repo = tmp_path / "repo"
    (repo / "backend" / "app").mkdir(parents=True)
    (repo / "backend" / "tests").mkdir()
    _git(tmp_path, "init", "-q", "-b", "main", str(repo))
    for key, value in (("user.name", "t"), ("user.email", "t@example.org"), ("commit.gpgsign", "false")):
        _git(repo, "config", key, value)
    (repo / "backend" / "requirements.txt").write_text("fastapi==0.115.0\n")
    (repo / "backend" / "app" / "items.py").write_text("def archive(item):\n    return item\n")
    (repo / "backend" / "tests" / "test_items.py").write_text("def test_old():\n    assert True\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "backend" / "app" / "items.py").write_text(
        "def archive(item):\n    item.archived = True\n    return item\n"
    )
    (repo / "backend" / "tests" / "test_items.py").write_text(
        "def test_old():\n    assert True\n\n\ndef test_archive():\n    assert True\n"
    )
    _git(repo, "commit", "-q", "-am", "archive (#12)")
    head = _git(repo, "rev-parse", "HEAD")
    return repo / ".git", base, head


def _built(pr, source, repo, extraction, tier) -> dict:
    """`packaging.build_instance` of the PR's candidate (its facts worked out once, `packaging.Candidate`)."""
    return packaging.build_instance(packaging.Candidate.of(pr, source, repo, extraction), extraction, tier)


def _extraction(base: str, head: str, **over) -> ExtractionResult:
    values = dict(
        number=12,
        status=ExtractionStatus.OK,
        base_commit=base,
        head_commit=head,
        backend_fail_to_pass=["tests/test_items.py::test_archive"],
        backend_pass_to_pass=["tests/test_items.py::test_old"],
    )
    values.update(over)
    return ExtractionResult(**values)


def test_build_instance_notes_say_where_the_statement_came_from_and_what_was_excluded(tiny_repo):
    """Rule: notes record the statement's origin, every flaky test excluded, and use of the fallback."""
    repo, base, head = tiny_repo
    source = load_source("demo")
    extraction = _extraction(base, head, flaky_tests=["tests/test_items.py::test_flaky"], fallback_used=True)
    inst = _built(
        make_pr(issues=[ClosingIssue(3, "t", "Archive please.")]), source, repo, extraction, Tier.PUBLIC
    )
    assert inst["notes"].startswith(f"{packaging.ISSUE_NOTE} (#3).")
    assert "1 flaky test(s) excluded: tests/test_items.py::test_flaky" in inst["notes"]
    assert "fallback" in inst["notes"]
    assert inst["problem_statement"] == "t\nArchive please."

    plain = _built(make_pr(), source, repo, _extraction(base, head), Tier.PUBLIC)
    assert plain["notes"] == packaging.PR_BODY_NOTE


def test_build_instance_shape(tiny_repo):
    """Rule: one merged PR + its extraction gives a valid schema-0.1 instance: id, split patches, labels,
    merge time, environment."""
    repo, base, head = tiny_repo
    source = load_source("demo")
    inst = _built(make_pr(), source, repo, _extraction(base, head), Tier.HELD_OUT)
    assert inst["instance_id"] == "prototypebench__demo-fullstack-12"
    assert inst["schema_version"] == "0.1"
    assert (inst["base_commit"], inst["head_commit"]) == (base, head)
    assert "backend/app/items.py" in inst["patch"] and "backend/tests" not in inst["patch"]
    assert "backend/tests/test_items.py" in inst["test_patch"] and "backend/app" not in inst["test_patch"]
    assert inst["fail_to_pass"] == {"backend": ["tests/test_items.py::test_archive"], "frontend": []}
    assert inst["pass_to_pass"] == {"backend": ["tests/test_items.py::test_old"], "frontend": []}
    assert inst["stack_domain"] == "backend_only"
    assert inst["created_at"] == "2025-03-02T10:30:05Z"
    assert inst["contamination_tier"] == "held_out"
    assert inst["difficulty"] == "easy"
    assert inst["hints_text"] == "reviewer: use a soft delete"
    assert inst["environment"]["python_version"] == source.backend.python_version
    assert inst["environment"]["backend_lock_sha"].startswith("sha256:")
    assert schema.validate_instance(inst, source) == []


# --------------------------------------------------------------------------- curated statements


def test_a_curated_statement_is_preferred_and_says_where_it_came_from(tiny_repo, tmp_path, monkeypatch):
    """Rule: a statement in data/statements/<source>.jsonl replaces the upstream text; the notes say
    "curated", with its provenance and what the upstream source was; it passes the same leak gate."""
    from tasks_lib.curation import statements

    repo, base, head = tiny_repo
    source = load_source("demo")
    folder = tmp_path / "data" / "statements"
    folder.mkdir(parents=True)
    text = "Archiving an item should keep it readable but take it out of the default item list, for every client."
    prov = {
        "written_by": "curators",
        "written_on": "2026-12-03",
        "from": "the PR's behaviour",
        "reviewed_by": "x",
    }
    (folder / "demo.jsonl").write_text(
        json.dumps(
            {"instance_id": "prototypebench__demo-fullstack-12", "statement": text, "provenance": prov}
        )
        + "\n"
    )
    monkeypatch.setattr(statements, "statements_file", lambda name: folder / f"{name}.jsonl")
    inst = _built(make_pr(body="Fixes it by X."), source, repo, _extraction(base, head), Tier.PUBLIC)
    assert inst["problem_statement"] == text
    assert inst["notes"].startswith(
        "problem_statement curated (data/statements/demo.jsonl: written by curators"
    )
    assert "Upstream: " + packaging.PR_BODY_NOTE in inst["notes"]
    assert packaging.apply_leak_gate(inst) == []


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("not json", "not a JSON object"),
        ('{"instance_id": "a", "statement": "x"}', "needs written_by"),
        ('{"instance_id": "", "statement": "x", "provenance": {}}', "'instance_id'"),
        ('{"instance_id": "a", "statement": " ", "provenance": {}}', "'statement'"),
        ('{"instance_id": "a", "statement": "x", "unspecifiable": "y", "provenance": {}}', "not both"),
        ('{"instance_id": "a", "provenance": {}}', "either 'statement' or 'unspecifiable'"),
        ('{"instance_id": "a", "unspecifiable": "", "provenance": {}}', "'unspecifiable' of a"),
    ],
)
def test_a_malformed_curated_statement_names_the_file_and_line(tmp_path, line, needle):
    """Rule: a bad record of data/statements/ is an InputError naming the file, the line and what is wrong."""
    from tasks_lib.core.errors import InputError
    from tasks_lib.curation import statements

    path = tmp_path / "s.jsonl"
    path.write_text("\n" + line + "\n")
    with pytest.raises(InputError, match=needle) as err:
        statements.load(path)
    assert f"{path}:2" in str(err.value)


def test_a_candidate_is_packaged_into_a_task_instance_or_refused_with_its_reasons(tiny_repo):
    """Rule: packaging turns a candidate (the PR's facts, worked out once) + its extraction + its tier into a
    TaskInstance, the leak gate and the schema check applied; a statement that names a hidden test is refused
    with the gate's reason, and nothing is returned for it."""
    from tasks_lib.corpus.instance import TaskInstance

    repo, base, head = tiny_repo
    source = load_source("demo")
    ext = _extraction(base, head)
    body = "Items can be archived: an archived item keeps its data but leaves the default listing of items."
    candidate = packaging.Candidate.of(make_pr(body=body), source, repo, ext)
    assert candidate.instance_id == "prototypebench__demo-fullstack-12"
    assert candidate.source == source.for_era(source.era_for(candidate.pr.merged_at))
    assert "backend/app/items.py" in candidate.split.patch
    instance, problems = packaging.package(candidate, ext, Tier.PUBLIC, commit_exists=lambda sha: True)
    assert problems == [] and isinstance(instance, TaskInstance)
    assert (instance.instance_id, instance.stack_domain) == (candidate.instance_id, candidate.stack_domain)
    assert instance.patch == candidate.split.patch and instance.problem_statement == body
    leaky = packaging.Candidate.of(make_pr(body=body + " See test_archive."), source, repo, ext)
    refused, why = packaging.package(leaky, ext, Tier.PUBLIC, commit_exists=lambda sha: True)
    assert refused is None and why and why[0].startswith("statement_leaks:")
