"""A statement change never re-runs an extraction: a curated statement added after a season re-packages it
from the cached extractions, and a committed corpus is re-packaged from its records, with no container
(counted from the Docker daemon's events)."""

from __future__ import annotations

import json

import pytest

from tasks_lib.curation import release as corpus_release
from tasks_lib.curation import statements

pytestmark = pytest.mark.docker

CURATED = (
    "Listing the shop's items through the API should give API clients every stored item with its name and "
    "price, in the order they were created, and creating an item should make it appear in that list."
)


def _instances(out) -> dict[str, dict]:
    rows = [json.loads(x) for x in (out / "instances.jsonl").read_text().splitlines() if x.strip()]
    return {r["instance_id"]: r for r in rows}


def test_a_new_curated_statement_repackages_the_season_without_a_container(
    curated_demo, container_counter, tmp_path, monkeypatch
):
    from flows.curation import run_curation

    before = _instances(curated_demo["out"])
    iid = sorted(before)[0]
    path = tmp_path / "demo.jsonl"
    prov = {"written_by": "t", "written_on": "2026-12-03", "from": "the PR's behaviour", "reviewed_by": "t"}
    path.write_text(json.dumps({"instance_id": iid, "statement": CURATED, "provenance": prov}) + "\n")
    monkeypatch.setattr(statements, "statements_file", lambda name: path)
    try:
        with container_counter() as counter:
            run_curation("demo")
        assert counter.created == []
        after = _instances(curated_demo["out"])
        assert after[iid]["problem_statement"] == CURATED
        assert after[iid]["notes"].startswith("problem_statement curated (data/statements/demo.jsonl")
        for key in ("fail_to_pass", "pass_to_pass", "patch", "test_patch", "base_commit"):
            assert after[iid][key] == before[iid][key]
        assert {k: v for k, v in after.items() if k != iid} == {k: v for k, v in before.items() if k != iid}
    finally:
        monkeypatch.undo()
        run_curation("demo")  # the season as the other tests know it
    assert _instances(curated_demo["out"]) == before


def test_a_committed_corpus_is_repackaged_without_a_container(curated_demo, container_counter, monkeypatch):
    made = []
    monkeypatch.setattr(
        corpus_release, "corpus_dir", lambda name: curated_demo["out"].parent / f"corpus-{name}"
    )
    corpus_release.build("first", ["demo"])
    with container_counter() as counter:
        made.append(corpus_release.build("again", [], ["first"]))
    assert counter.created == []
    assert _instances(made[0]) == _instances(curated_demo["out"].parent / "corpus-first")
