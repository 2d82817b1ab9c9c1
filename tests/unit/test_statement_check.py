"""scripts/statement_check.py --season: curated statements checked against the leak gate on a season's extracted
PRs before any corpus is packaged (tasks_lib/curation/extracted.py), read-only over the season's folder."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tasks_lib.core.constants import ExtractionStatus
from tasks_lib.curation import stages
from tasks_lib.curation.extraction import ExtractionResult
from tasks_lib.sources.crawl.base import ChangedFile, PullRequest, write_prs_parquet

ROOT = Path(__file__).resolve().parents[2]
IID = "prototypebench__demo-fullstack-{}"
PROV = {
    "written_by": "curators",
    "written_on": "2026-12-06",
    "from": "the PR's behaviour",
    "reviewed_by": "x",
}


def _script():
    spec = importlib.util.spec_from_file_location("statement_check", ROOT / "scripts" / "statement_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_CONFIG_NOSYSTEM": "1", "HOME": str(repo), "LC_ALL": "C"}
    out = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env)
    return out.stdout.strip()


def _repo(tmp_path: Path) -> tuple[Path, str, str]:
    """A demo-shaped repository whose second commit adds `archive_all` and a test that imports it."""
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
        "def archive(item):\n    return item\n\n\ndef archive_all(items):\n    return [archive(i) for i in items]\n"
    )
    (repo / "backend" / "tests" / "test_items.py").write_text(
        "from app.items import archive_all\n\n\ndef test_old():\n    assert True\n\n\n"
        "def test_archive_everything():\n    assert archive_all([]) == []\n"
    )
    _git(repo, "commit", "-q", "-am", "archive all (#12)")
    return repo / ".git", base, _git(repo, "rev-parse", "HEAD")


def _pr(number: int) -> PullRequest:
    return PullRequest(
        source="demo",
        repo="prototypebench/demo-fullstack",
        number=number,
        title="Archive all items",
        body="- archive all\n- tests",
        author="alice",
        author_login_raw="alice",
        author_is_bot=False,
        labels=(),
        files=(ChangedFile("backend/app/items.py", 3, 0),),
        additions=3,
        deletions=0,
        changed_files=1,
        merge_commit="b" * 40,
        base_commit=None,
        head_commit=None,
        base_ref="main",
        head_ref=f"feature/{number}",
        default_branch="main",
        created_at=datetime(2025, 3, 1, 9, 0, tzinfo=UTC),
        merged_at=datetime(2025, 3, 2, 10, 30, 5, tzinfo=UTC),
        url=f"https://example.org/prototypebench/demo-fullstack/pull/{number}",
    )


@pytest.fixture
def season(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """The demo season's folder with a crawl of PRs 12, 13, 14: #12 extracted ok (its table row still an
    infra_error, its log's extraction.json the newest word), #13 not extracted, #14 extracted without a
    FAIL_TO_PASS. Outputs and caches in tmp_path."""
    monkeypatch.setenv("PBENCH_OUTPUT_DIR", str(tmp_path / "out"))
    monkeypatch.setenv("PBENCH_CACHE_DIR", str(tmp_path / "cache"))
    repo, base, head = _repo(tmp_path)
    out = tmp_path / "out" / "seasons" / "demo"
    out.mkdir(parents=True)
    write_prs_parquet([_pr(12), _pr(13), _pr(14)], out / "prs.parquet")
    ok = ExtractionResult(
        12,
        ExtractionStatus.OK,
        base,
        head,
        backend_fail_to_pass=["tests/test_items.py::test_archive_everything"],
        backend_pass_to_pass=["tests/test_items.py::test_old"],
    )
    stages.write_extraction(
        [
            ExtractionResult(12, ExtractionStatus.INFRA_ERROR, base, head),
            ExtractionResult(14, ExtractionStatus.NO_FAIL_TO_PASS, base, head),
        ],
        out,
    )
    (out / "logs" / "pr-12").mkdir(parents=True)
    (out / "logs" / "pr-12" / "extraction.json").write_text(json.dumps(ok.to_row()))
    return out, repo


def _statements(tmp_path: Path, texts: dict[int, str]) -> Path:
    path = tmp_path / "statements.jsonl"
    path.write_text(
        "".join(
            json.dumps({"instance_id": IID.format(n), "statement": text, "provenance": PROV}) + "\n"
            for n, text in texts.items()
        )
    )
    return path


def _tree(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.rglob("*")}


GOOD = (
    "Archiving items one at a time is slow for clients that clear a whole list. Add archive_all(items) to"
    " backend/app/items.py: it archives every item of the list it is given and returns the archived items, in"
    " their order; an empty list gives an empty list."
)


def test_a_season_check_runs_the_whole_gate_on_the_extracted_pr_and_writes_nothing(season, tmp_path, capsys):
    """Rule: `--season` builds the record packaging would build from the season's crawl and newest extraction
    (a log's extraction.json over the table's row) and applies the same gate: a statement that states the
    interface passes (exit 0); one naming a hidden test leaks, one leaving the interface unnamed is
    underspecified (exit 1). The season's folder is left as it was."""
    out, repo = season
    before = _tree(out)
    check = _script().main
    assert check(["--season", "demo", "--mirror", str(repo), str(_statements(tmp_path, {12: GOOD}))]) == 0
    assert f"{IID.format(12)}: ok (" in capsys.readouterr().out
    leaky = _statements(tmp_path, {12: GOOD + " See test_archive_everything."})
    assert check(["--season", "demo", "--mirror", str(repo), str(leaky)]) == 1
    assert (
        "REFUSED" in (said := capsys.readouterr().out)
        and "statement_leaks: test: test_archive_everything" in said
    )
    vague = _statements(
        tmp_path, {12: "Clients want to archive a whole list of items in one call, in order."}
    )
    assert check(["--season", "demo", "--mirror", str(repo), str(vague)]) == 1
    assert "never gives (archive_all)" in capsys.readouterr().out
    assert _tree(out) == before


@pytest.mark.parametrize(
    ("args", "number", "needle"),
    [
        (["--season", "no-such-season"], 12, "no season named 'no-such-season'"),
        (["--season", "demo"], 13, "PR #13 is not extracted yet"),
        (["--season", "demo"], 14, "PR #14's extraction is no_fail_to_pass, not ok"),
        (["--season", "demo"], 99, "PR #99 is not in the season's crawl"),
    ],
)
def test_a_season_check_refuses_what_the_season_cannot_give_by_name(
    season, tmp_path, capsys, args, number, needle
):
    """Rule: an unknown season, or a statement whose PR the season has not crawled, not extracted, or extracted
    without an instance, is bad input: exit 2, the error naming the instance and why, nothing checked."""
    _, repo = season
    path = _statements(tmp_path, {12: GOOD, number: GOOD})
    assert _script().main([*args, "--mirror", str(repo), str(path)]) == 2
    said = capsys.readouterr()
    assert needle in said.err and said.out == ""
    if number != 12:
        assert IID.format(number) in said.err
