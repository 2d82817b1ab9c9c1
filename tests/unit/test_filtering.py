"""Filter (curation stage 2): rules as data, every reason reported, stable codes, a documented priority."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tasks_lib.core.errors import InputError, SourceError
from tasks_lib.curation import filtering
from tasks_lib.curation.filtering import FILTER_SCHEMA, filter_prs, kept_prs, load_filter_rules, reasons_for
from tasks_lib.sources.crawl.base import ChangedFile, ClosingIssue, PullRequest
from tasks_lib.sources.crawl.export import ExportPRSource
from tasks_lib.sources.record import parse_source

SHA = "a" * 40
REAL_EXPORT = Path(__file__).resolve().parents[3] / "shared/reference/fastapi-template/prs.jsonl"
SOURCE_TABLE = {
    "name": "shop",
    "repo": "acme/shop",
    "default_branch": "main",
    "clone": {"url": "https://example.org/shop.git"},
    "backend": {
        "dir": "backend",
        "python_version": "3.11",
        "installer": "uv",
        "lock_files": ["backend/uv.lock"],
    },
    "frontend": {
        "dir": "frontend",
        "node_version": "20",
        "package_manager": "bun",
        "lock_files": ["frontend/bun.lock"],
        "serve_command": "bun run dev",
    },
    "test_files": {
        "patterns": ["backend/tests/**", "frontend/tests/**", "**/conftest.py", "**/*.spec.ts"],
        "infra_patterns": ["**/playwright.config.*"],
    },
    "filter": {"bot_authors": ["shopbot"]},
}


def make_source(**over):
    table = copy.deepcopy(SOURCE_TABLE)
    for key, value in over.items():
        table[key] = value
    return parse_source(table, Path("/virtual/shop.toml"))


def make_pr(number=1, title="✨ Add items", files=None, **over) -> PullRequest:
    files = (
        files
        if files is not None
        else [("backend/app/items.py", 30, 5), ("backend/tests/test_items.py", 20, 0)]
    )
    values = dict(
        source="shop",
        repo="acme/shop",
        number=number,
        title=title,
        body="",
        author="alice",
        author_login_raw="alice",
        author_is_bot=False,
        labels=(),
        files=tuple(ChangedFile(*f) for f in files),
        additions=0,
        deletions=0,
        changed_files=len(files),
        merge_commit=SHA,
        base_commit=None,
        head_commit=SHA,
        base_ref="main",
        head_ref="feature",
        default_branch="main",
        created_at=datetime(2025, 3, 1, tzinfo=UTC),
        merged_at=datetime(2025, 3, 2, tzinfo=UTC),
        url="u",
    )
    return PullRequest(**(values | over))


@pytest.fixture(scope="module")
def source():
    return make_source()


@pytest.fixture(scope="module")
def rules(source):
    return load_filter_rules(source)


def test_a_good_pr_is_kept(source, rules):
    """A feature with code and tests, by a human, into the default branch, passes every rule."""
    (verdict,) = filter_prs([make_pr()], source, rules)
    assert verdict.kept and verdict.reasons == ()
    assert verdict.stack_domain == "backend_only" and verdict.era == "default" and verdict.changed_lines == 35


def test_every_reason_is_reported_not_just_the_first(source, rules):
    """A PR breaking several rules carries all of them, in the fixed rule order."""
    pr = make_pr(
        title="⬆️ Bump vite",
        author="dependabot[bot]",
        author_login_raw="app/dependabot",
        author_is_bot=True,
        labels=("dependencies", "javascript"),
        base_ref="release",
        files=[("frontend/package.json", 1, 1)],
    )
    assert reasons_for(pr, source, rules) == (
        "bot_author",
        "non_task_title:⬆",
        "non_task_label:dependencies",
        "not_default_branch",
        "no_test_changes",
    )


def test_bots_by_flag_or_by_login(source, rules):
    """Bot authors are caught by the crawl's flag or by a login on the list, in either spelling; the
    source's list extends the global one."""
    assert "bot_author" in reasons_for(make_pr(author="renovate[bot]"), source, rules)
    assert "bot_author" in reasons_for(make_pr(author="app/renovate"), source, rules)
    assert "bot_author" in reasons_for(make_pr(author="someone", author_is_bot=True), source, rules)
    assert "bot_author" in reasons_for(make_pr(author="ShopBot"), source, rules)  # from the source's table
    assert "bot_author" not in reasons_for(make_pr(author="robot-fan"), source, rules)


@pytest.mark.parametrize(
    ("title", "code"),
    [
        ("📝 Update docs", "non_task_title:📝"),
        ("✏️ Fix typo", "non_task_title:✏"),  # with the variation selector
        ("✏ Fix typo", "non_task_title:✏"),  # without
        ("⬆ Bump x", "non_task_title:⬆"),
        ("⬆️ Bump x", "non_task_title:⬆"),
        ("  👷 Update CI", "non_task_title:👷"),  # leading spaces, as in the real export
        ("👷🏻‍♀️  Update CI", "non_task_title:👷"),  # skin-tone variant
        ("bump requests from 1 to 2", "non_task_title:Bump"),
        ('Revert "✨ Add x"', "non_task_title:Revert"),
        ("✨ Add x", None),
        ("🐛 Fix x", None),
        ("Bumpy road fix", None),
    ],
)
def test_title_prefix_codes_are_stable(source, rules, title, code):
    """Prefix matching ignores U+FE0F, leading spaces and case; the code names the configured prefix."""
    reasons = [r for r in reasons_for(make_pr(title=title), source, rules) if r.startswith("non_task_title")]
    assert reasons == ([code] if code else [])


def test_label_globs_are_case_insensitive(source, rules):
    """Non-task labels are globs (lang-*) and ignore case."""
    pr = make_pr(labels=("lang-fr", "Docs", "feature"))
    assert [r for r in reasons_for(pr, source, rules) if r.startswith("non_task_label")] == [
        "non_task_label:lang-fr",
        "non_task_label:Docs",
    ]


def test_test_changes_follow_the_source_patterns(source, rules):
    """Test files are whatever the source record says (patterns and test infrastructure)."""
    code_only = make_pr(files=[("backend/app/a.py", 3, 0)])
    infra = make_pr(files=[("frontend/src/a.tsx", 3, 0), ("frontend/playwright.config.ts", 1, 0)])
    conftest = make_pr(files=[("backend/app/a.py", 3, 0), ("backend/conftest.py", 1, 0)])
    assert "no_test_changes" in reasons_for(code_only, source, rules)
    assert "no_test_changes" not in reasons_for(infra, source, rules)
    assert "no_test_changes" not in reasons_for(conftest, source, rules)


def test_docs_only(source, rules):
    """Docs-only means every path is docs, markdown or an image; one code file makes it not docs-only."""
    docs = make_pr(files=[("docs/deploy.md", 10, 2), ("README.md", 1, 1), ("img/shot.png", 0, 0)])
    mixed = make_pr(files=[("docs/deploy.md", 10, 2), ("backend/app/a.py", 1, 0)])
    assert "docs_only" in reasons_for(docs, source, rules)
    assert "docs_only" not in reasons_for(mixed, source, rules)
    assert "docs_only" not in reasons_for(make_pr(files=[]), source, rules)


def test_size_band_counts_non_test_lines_without_lock_files(source, rules):
    """Size = non-test changed lines, lock files excluded: a test-only PR is too small, an epic too large."""
    test_only = make_pr(files=[("backend/tests/test_a.py", 50, 0)])
    lock_only = make_pr(files=[("backend/uv.lock", 900, 800), ("backend/tests/test_a.py", 5, 0)])
    huge = make_pr(files=[("backend/app/a.py", 1200, 400), ("backend/tests/test_a.py", 5, 0)])
    one_line = make_pr(files=[("backend/app/a.py", 1, 0), ("backend/tests/test_a.py", 5, 0)])
    assert "too_small" in reasons_for(test_only, source, rules)
    assert "too_small" in reasons_for(lock_only, source, rules)
    assert "too_large" in reasons_for(huge, source, rules)
    assert reasons_for(one_line, source, rules) == ()  # the published instance 1396 is a 2-line fix


def test_a_pr_the_curators_left_out_is_refused_as_unspecifiable_and_only_it(
    source, rules, tmp_path, monkeypatch
):
    """Rule: a PR whose record in data/statements/<source>.jsonl says `unspecifiable` (with the curators' reason)
    is refused by the filter, before any extraction, under its own reason code; the stage reads the file of the
    PR's source, and every other PR is judged as before."""
    from tasks_lib.curation import stages, statements

    left, kept = make_pr(number=7), make_pr(number=8)
    assert reasons_for(left, source, rules, {left.instance_id}) == ("unspecifiable",)
    assert reasons_for(kept, source, rules, {left.instance_id}) == ()

    prov = {"written_by": "c", "written_on": "2026-12-07", "from": "its tests", "reviewed_by": "r"}
    path = tmp_path / "shop.jsonl"
    path.write_text(
        json.dumps(
            {"instance_id": left.instance_id, "unspecifiable": "tests check privates", "provenance": prov}
        )
        + "\n"
    )
    monkeypatch.setattr(statements, "statements_file", lambda name: tmp_path / f"{name}.jsonl")
    monkeypatch.setattr(stages, "read_prs_parquet", lambda _: [left, kept])
    monkeypatch.setattr(filtering, "load_filter_rules", lambda _: rules)
    written = filtering.read_filter_parquet(stages.stage_filter(source, tmp_path))
    assert [(v.number, v.kept, v.reasons) for v in written] == [(7, False, ("unspecifiable",)), (8, True, ())]
    assert statements.load(path) == {}  # not a statement: packaging never sees it


def test_not_default_branch(source, rules):
    """Only PRs merged into the default branch recorded by the crawl are tasks."""
    assert "not_default_branch" in reasons_for(make_pr(base_ref="release-1.x"), source, rules)


def test_outside_supported_era(rules):
    """A merge date no era of the source covers is rejected; covered dates get the era's name."""
    source = make_source(eras=[{"name": "uv", "since": "2025-01-01"}])
    old = make_pr(merged_at=datetime(2024, 6, 1, tzinfo=UTC))
    new = make_pr(merged_at=datetime(2025, 6, 1, tzinfo=UTC))
    verdicts = filter_prs([old, new], source, rules)
    assert verdicts[0].reasons == ("outside_era",) and verdicts[0].era is None
    assert verdicts[1].kept and verdicts[1].era == "uv"


def test_priority_formula(source, rules):
    """priority = (3·tests + 2·closing issue + 2·fullstack + 1·size_score) / 8 with the committed weights;
    moderate size scores 1, in-band but not moderate 0.5, out of band 0."""
    best = make_pr(
        files=[("backend/app/a.py", 30, 0), ("frontend/src/a.tsx", 20, 0), ("backend/tests/test_a.py", 9, 0)],
        closing_issues=(ClosingIssue(7, "t", "b"),),
    )
    small_backend = make_pr(files=[("backend/app/a.py", 2, 0), ("backend/tests/test_a.py", 9, 0)])
    no_tests = make_pr(files=[("backend/app/a.py", 2000, 0)])
    assert filtering.priority_of(best, source, rules) == 1.0
    assert filtering.priority_of(small_backend, source, rules) == pytest.approx((3 + 0.5) / 8)
    assert filtering.priority_of(no_tests, source, rules) == 0.0


def test_both_runners_weight_puts_prs_with_tests_on_both_sides_first(source, rules):
    """`[priority] both_runners` (0 globally): a PR whose test files are on both sides (a pytest test and a
    Playwright spec) outranks one of the same domain whose tests are on one side; the committed weights
    leave every priority as it was."""
    code = [("backend/app/a.py", 30, 0), ("frontend/src/a.tsx", 20, 0)]
    both = make_pr(1, files=[*code, ("backend/tests/test_a.py", 9, 0), ("frontend/tests/a.spec.ts", 9, 0)])
    one = make_pr(2, files=[*code, ("backend/tests/test_a.py", 9, 0)])
    assert filtering.priority_of(both, source, rules) == filtering.priority_of(one, source, rules) == 0.75
    raised = dataclasses.replace(rules, priority=dataclasses.replace(rules.priority, both_runners=4.0))
    assert filtering.priority_of(both, source, raised) == pytest.approx(10 / 12)
    assert filtering.priority_of(one, source, raised) == pytest.approx(6 / 12)


def test_kept_prs_are_ordered_by_priority(source, rules):
    """Extraction order: highest priority first, ties by PR number; rejected PRs are not returned."""
    prs = [
        make_pr(1, files=[("backend/app/a.py", 2, 0), ("backend/tests/t.py", 1, 0)]),
        make_pr(
            2, files=[("backend/app/a.py", 30, 0), ("frontend/src/a.tsx", 5, 0), ("backend/tests/t.py", 1, 0)]
        ),
        make_pr(3, files=[("backend/app/a.py", 30, 0), ("backend/tests/t.py", 1, 0)]),
        make_pr(4, title="📝 Docs"),
    ]
    verdicts = filter_prs(prs, source, rules)
    assert [p.number for p in kept_prs(prs, verdicts)] == [2, 3, 1]


def test_source_rules_merge_on_top_of_global(tmp_path):
    """Source lists extend the global ones, `replace` swaps them, tables merge key by key."""
    source = make_source(
        filter={
            "non_task_labels": ["chore"],
            "replace": ["non_task_titles"],
            "non_task_titles": [{"prefix": "[skip]", "meaning": "house style"}],
            "size": {"max_changed_lines": 99},
        }
    )
    rules = load_filter_rules(source)
    assert "chore" in rules.non_task_labels and "internal" in rules.non_task_labels
    assert [t.prefix for t in rules.non_task_titles] == ["[skip]"]
    assert (rules.min_changed_lines, rules.max_changed_lines) == (1, 99)


def test_unknown_or_bad_rules_name_file_and_key(tmp_path):
    """A typo in a rule name or a wrong type fails loudly, naming the file and the key."""
    with pytest.raises(SourceError, match=r"shop\.toml: field 'filter\.bot_author'"):
        load_filter_rules(make_source(filter={"bot_author": ["x"]}))
    with pytest.raises(SourceError, match=r"field 'filter\.size\.max_lines'"):
        load_filter_rules(make_source(filter={"size": {"max_lines": 3}}))
    with pytest.raises(SourceError, match=r"field 'filter\.require_test_changes': must be true or false"):
        load_filter_rules(make_source(filter={"require_test_changes": "yes"}))
    bad_global = tmp_path / "rules.toml"
    bad_global.write_text("[size]\nmin_changed_lines = 10\nmax_changed_lines = 5\n")
    with pytest.raises(InputError, match=r"rules\.toml: field 'size\.max_changed_lines'"):
        load_filter_rules(make_source(filter={}), bad_global)


def test_committed_rules_document_every_prefix():
    """Each non-task title prefix in data/filter_rules.toml says what it means (rules are documented data)."""
    table = tomllib.loads(filtering.default_rules_path().read_text())
    assert table["non_task_titles"], "the template's gitmoji prefixes must be listed"
    assert all(item.get("meaning", "").strip() for item in table["non_task_titles"])
    assert len({filtering._title_key(i["prefix"]) for i in table["non_task_titles"]}) == len(
        table["non_task_titles"]
    )


def test_filter_parquet_roundtrip(source, rules, tmp_path):
    """filter.parquet has FILTER_SCHEMA, one row per PR sorted by number, reasons as a list."""
    verdicts = filter_prs([make_pr(2, title="📝 Docs"), make_pr(1)], source, rules)
    path = filtering.write_filter_parquet(verdicts, tmp_path / "filter.parquet")
    assert pq.read_schema(path).remove_metadata() == FILTER_SCHEMA
    back = filtering.read_filter_parquet(path)
    assert [v.number for v in back] == [1, 2]
    assert back == sorted(verdicts, key=lambda v: v.number)


@pytest.mark.skipif(not REAL_EXPORT.exists(), reason="real export not available outside the workspace")
def test_real_export_keeps_the_published_instance_and_no_bot():
    """On the real template export: the published instance's PR (#1396) survives, no dependabot PR does."""
    source = make_source(
        repo="fastapi/full-stack-fastapi-template",
        default_branch="master",
        test_files={
            "patterns": [
                "backend/app/tests/**",
                "backend/tests/**",
                "frontend/tests/**",
                "**/conftest.py",
                "**/*.spec.ts",
            ]
        },
        filter={},
    )
    prs = list(ExportPRSource(REAL_EXPORT, "fastapi-template", "master").iter_merged_prs(None, None))
    verdicts = {v.number: v for v in filter_prs(prs, source, load_filter_rules(source))}
    assert verdicts[1396].kept and verdicts[1396].stack_domain == "backend_only"
    assert not any(verdicts[p.number].kept for p in prs if p.author_is_bot)
    assert all(v.reasons for v in verdicts.values() if not v.kept)


@pytest.mark.skipif(
    importlib.util.find_spec("tasks_lib.sources.demo_repo") is None,
    reason="tasks_lib.sources.demo_repo not written yet",
)
def test_demo_source_verdicts():
    """On the demo source: the feature, bugfix, collection-error and flaky PRs are kept; the docs PR and
    the bot bump are rejected, each with its reasons."""
    from tasks_lib.sources.demo_repo import DEMO_PRS, demo_prs_path, ensure_demo_repo
    from tasks_lib.sources.record import load_source

    demo = load_source("demo")
    prs = list(
        ExportPRSource(demo_prs_path(ensure_demo_repo()), demo.name, demo.default_branch).iter_merged_prs(
            None, None
        )
    )
    verdicts = {v.number: v for v in filter_prs(prs, demo, load_filter_rules(demo))}
    for kind in ("feature", "bugfix", "collection_error", "flaky"):
        assert verdicts[DEMO_PRS[kind]].kept, (kind, verdicts[DEMO_PRS[kind]].reasons)
    docs, bot = verdicts[DEMO_PRS["docs"]], verdicts[DEMO_PRS["bot_bump"]]
    assert not docs.kept and {"docs_only", "no_test_changes"} <= set(docs.reasons)
    assert not bot.kept and "bot_author" in bot.reasons
