"""`pbench funnel`: a season's funnel and per-PR table from its own outputs, as far as the season got."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from tasks_lib.core.constants import ExtractionStatus
from tasks_lib.core.errors import InputError
from tasks_lib.curation import filtering, funnel
from tasks_lib.curation import stages as curation
from tasks_lib.curation.extraction import ExtractionResult
from tasks_lib.sources.crawl.base import ChangedFile, PullRequest, write_prs_parquet


def _pr(n: int) -> PullRequest:
    return PullRequest(
        source="s", repo="a/s", number=n, title=f"feat: thing {n} | pipe", body="", author="a",
        author_login_raw="a", author_is_bot=False, labels=(), files=(ChangedFile("app/x.py", 5, 5),),
        additions=5, deletions=5, changed_files=1, merge_commit="a" * 40, base_commit="b" * 40,
        head_commit="c" * 40, base_ref="main", head_ref="x", default_branch="main",
        created_at=datetime(2025, 1, 1, tzinfo=UTC), merged_at=datetime(2025, 8, 1, tzinfo=UTC), url="u",
    )  # fmt: skip


def test_the_funnel_counts_every_stage_and_lists_every_extracted_pr(tmp_path):
    prs = [_pr(n) for n in (1, 2, 3, 4)]
    write_prs_parquet(prs, tmp_path / "prs.parquet")
    verdicts = [
        filtering.FilterVerdict(
            1,
            False,
            ("too_small", "non_task_label:docs", "non_task_label:internal"),
            0.1,
            merged_at=prs[0].merged_at,
        ),
        filtering.FilterVerdict(2, True, (), 0.75, "backend_only", merged_at=prs[1].merged_at),
        filtering.FilterVerdict(3, True, (), 0.75, "backend_only", merged_at=prs[2].merged_at),
        filtering.FilterVerdict(4, True, (), 0.5, "backend_only", merged_at=prs[3].merged_at),
    ]
    filtering.write_filter_parquet(verdicts, tmp_path / "filter.parquet")
    with pytest.raises(InputError):
        funnel.markdown(tmp_path / "nothing")
    assert "No PR extracted yet." in funnel.markdown(tmp_path)

    results = [
        ExtractionResult(3, ExtractionStatus.OK, "b", "c", backend_fail_to_pass=["t::a"],
                         backend_pass_to_pass=["t::b", "t::c"], duration_s=120.0, test_scope=["tests/t.py"]),
        ExtractionResult(2, ExtractionStatus.NO_FAIL_TO_PASS, "b", "c", duration_s=60.0,
                         error="the PR changes no test file"),
    ]  # fmt: skip
    curation.write_extraction(results, tmp_path)
    text = funnel.markdown(tmp_path)
    # PRs per reason: two non-task labels of one PR count once (the template showed 557 of 558 PRs).
    assert "| filter | 4 | 1 | **3** | non_task_label 1, too_small 1 |" in text
    assert "| extraction | 2 of 3 | 1 | **1** | no_fail_to_pass 1, ok 1 |" in text
    assert (
        "| #3 | feat: thing 3 \\| pipe | backend_only | ok | 1 | 2 | 1 | 120 | (not packaged yet) |" in text
    )
    assert (
        "| #2 | feat: thing 2 \\| pipe | backend_only | no_fail_to_pass | 0 | 0 | suite | 60 "
        "| the PR changes no test file |" in text
    )
    assert "0.05 h over 2 PRs (no valid instance yet)" in text
    assert "cannot run here" not in text
    # Both runners: pytest + Playwright, per list.
    results[0].frontend_fail_to_pass = ["a.spec.ts:3:5 › t", "a.spec.ts:9:5 › u"]
    curation.write_extraction(results, tmp_path)
    assert "| ok | 1 + 2 | 2 | 1 | 120 |" in funnel.markdown(tmp_path)
    # A PR whose runs had a Playwright side shows both runners even where Playwright gave none.
    results[0].frontend_fail_to_pass, results[0].sides = [], ["backend", "frontend"]
    curation.write_extraction(results, tmp_path)
    assert "| ok | 1 + 0 | 2 + 0 | 1 | 120 |" in funnel.markdown(tmp_path)
    results[1].cannot_run = [{"test": "t::k", "reason": "skipped: needs OPENAI_API_KEY"}]
    curation.write_extraction(results, tmp_path)
    assert (
        "| (cannot run here) | 1 tests in 1 PRs | | | skipped 1; 1 PR(s) left with no FAIL_TO_PASS by them |"
        in funnel.markdown(tmp_path)
    )


def test_every_run_of_a_season_is_counted_in_its_wall_time(tmp_path):
    """Rule: each run appends one ledger line however it ends (completed, failed, interrupted), and the funnel
    sums the extracting runs (not the offline `--until` ones) into the curation time."""
    from tasks_lib.curation import plan as season_plan

    with season_plan.run_ledger(tmp_path):
        pass
    with pytest.raises(ValueError), season_plan.run_ledger(tmp_path):
        raise ValueError("boom")
    with pytest.raises(KeyboardInterrupt), season_plan.run_ledger(tmp_path):
        raise KeyboardInterrupt
    with season_plan.run_ledger(tmp_path, "distribution"):
        pass
    rows = [json.loads(x) for x in (tmp_path / "season-runs.jsonl").read_text().splitlines()]
    assert [r["ended"] for r in rows] == ["completed", "failed: ValueError", "interrupted", "completed"]
    assert funnel._wall(tmp_path)[1] == 3


def test_a_run_killed_without_a_word_is_counted_up_to_its_last_beat(tmp_path):
    """Rule: a run rewrites its live file while it runs; SIGKILL leaves it behind, the funnel counts it (a run
    still going is counted too), and the next run turns it into that run's ledger line, `ended` "killed"."""
    import time

    from tasks_lib.curation import plan as season_plan

    with season_plan.run_ledger(tmp_path, beat_s=0.05):
        time.sleep(0.3)
        live = list((tmp_path / season_plan.LIVE_DIR).glob("*.json"))
        assert len(live) == 1 and json.loads(live[0].read_text())["ended"] == "running"
        assert funnel._wall(tmp_path)[1] == 1  # a run still going counts
        left = live[0].read_text()
    assert not list((tmp_path / season_plan.LIVE_DIR).glob("*.json"))
    # What SIGKILL leaves: the live file of a run that never wrote its line.
    (tmp_path / season_plan.LIVE_DIR / "999-20261206T000000.json").write_text(
        json.dumps(json.loads(left) | {"pid": 999, "wall_s": 600.0})
    )
    wall, runs = funnel._wall(tmp_path)
    assert runs == 2 and wall >= 600.0
    with season_plan.run_ledger(tmp_path):
        pass
    rows = [json.loads(x) for x in (tmp_path / "season-runs.jsonl").read_text().splitlines()]
    assert [r["ended"] for r in rows] == ["completed", "killed", "completed"]
    assert rows[1]["wall_s"] == 600.0 and rows[1]["pid"] == 999
    assert not list((tmp_path / season_plan.LIVE_DIR).glob("*.json"))
    assert funnel._wall(tmp_path)[1] == 3


def _run(out, pr: int, run: str, image: str, lock: str, built_s: float = 0.0) -> None:
    folder = out / "logs" / f"pr-{pr}" / run
    folder.mkdir(parents=True)
    record = {
        "image": image,
        "image_built": bool(built_s),
        "lock_sha": lock,
        "timings": {"image_s": built_s or 0.1},
    }
    (folder / "run.json").write_text(json.dumps(record))


def test_the_images_of_a_season_are_its_lock_contents_with_their_build_time_and_disk(tmp_path):
    """Rule: per side, the distinct lock contents of the season's runs against the images they used and those
    they built (image_s of the building run); an image an earlier run built is "found", its time and parent
    from the engine's rows; one image for two lock contents is named."""
    assert funnel.images(tmp_path).startswith("No run folder")
    back_a, back_b, front = (
        "pbench/env-s-backend:aaaa1111",
        "pbench/env-s-backend:bbbb2222",
        "pbench/env-s-frontend:ffff",
    )
    _run(tmp_path, 7, "head-1", back_a, "sha256:1111", built_s=150.0)
    _run(tmp_path, 7, "base-1", back_a, "sha256:1111")
    _run(tmp_path, 7, "frontend-head-1", front, "sha256:f1", built_s=300.0)
    _run(tmp_path, 9, "head-1", back_b, "sha256:2222")
    (tmp_path / "logs" / "pr-9" / "broken").mkdir()
    (tmp_path / "logs" / "pr-9" / "broken" / "run.json").write_text("{")  # being written: skipped
    rows = [
        {"tag": back_a, "parent": "", "build_s": 150.0, "adds_mb": 2500.0},
        {"tag": back_b, "parent": back_a, "build_s": 35.0, "adds_mb": 144.4},
    ]
    text = funnel.images(tmp_path, rows)
    assert "| backend | 3 | 2 | 2 | 1 | 150 | yes |" in text
    assert "| frontend | 1 | 1 | 1 | 1 | 300 | yes |" in text
    assert "| `aaaa1111` | backend | 1111 | #7 | 2 | built (#7) | 150 | none | 2500 |" in text
    assert "| `bbbb2222` | backend | 2222 | #9 | 1 | found | 35 | aaaa1111 | 144 |" in text
    assert "| `ffff` | frontend | f1 | #7 | 1 | built (#7) | 300 | - | - |" in text
    _run(tmp_path, 11, "head-1", back_a, "sha256:3333")  # one image for two lock contents
    assert "| backend | 4 | 3 | 2 | 1 | 150 | no: aaaa1111 |" in funnel.images(tmp_path, rows)
