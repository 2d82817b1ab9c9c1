"""The decisions of a curation season (tasks_lib/curation/plan.py) and the typed task instance
(tasks_lib/corpus/instance.py): plain functions the flows only wire."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tasks_lib.core.constants import ExtractionStatus
from tasks_lib.core.errors import InputError
from tasks_lib.corpus.instance import TaskInstance
from tasks_lib.curation import plan as season_plan
from tasks_lib.curation import stages as curation
from tasks_lib.curation.extraction import ExtractionResult
from tasks_lib.curation.season import load_season
from tasks_lib.sources.record import load_source

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "instance-1396.jsonl"


def _pr(number: int, base: str | None = "a" * 40, head: str = "b" * 40):
    """What planning reads of a crawled PR (tasks_lib.sources.crawl.base.PullRequest)."""
    return SimpleNamespace(
        number=number,
        base_commit=base,
        head_commit=head,
        merge_commit="c" * 40,
        merged_at="2025-03-24T12:00:00Z",
    )


def test_one_source_writes_into_the_season_folder_several_into_one_folder_each():
    demo = load_season("demo")
    assert season_plan.source_out_dir(demo, "demo") == demo.out_dir
    two = demo.__class__(**{**demo.__dict__, "sources": ("demo", "other")})
    assert season_plan.source_out_dir(two, "other") == demo.out_dir / "other"


def test_plan_keeps_the_priority_order_the_limit_and_stands_in_for_missing_commits(monkeypatch, tmp_path):
    """Rule: the extractions come in the candidates' order, at most `limit`; a PR whose commits are not in the
    repository is not extracted, an infra_error result stands for it; every job carries its cache-key inputs
    (lock hashes, era) and its own log folder."""
    prs = [_pr(5), _pr(3, base=None), _pr(8)]
    monkeypatch.setattr(
        curation, "extraction_candidates", lambda source, out, order="oldest", only=(), waive=(): prs
    )
    monkeypatch.setattr(curation, "deps_key", lambda source, repo, pr: f"locks-{pr.number}")
    season, source = load_season("demo"), load_source("demo")
    jobs, missing = season_plan.plan_extractions(season, source, tmp_path / "repo", tmp_path, limit=2)
    assert [j.number for j in jobs] == [5]
    assert jobs[0].deps_key == "locks-5" and jobs[0].era == "pip"
    assert jobs[0].log_dir == str(tmp_path / "logs" / "pr-5")
    assert [(m.number, m.status) for m in missing] == [(3, ExtractionStatus.INFRA_ERROR)]
    assert "not found" in missing[0].error
    jobs, _ = season_plan.plan_extractions(season, source, tmp_path / "repo", tmp_path)
    assert [j.number for j in jobs] == [5, 8]


def test_counts_table_and_progress_of_results():
    results = [
        ExtractionResult(
            5, ExtractionStatus.OK, "a", "b", backend_fail_to_pass=["t1"], backend_pass_to_pass=["t2", "t3"]
        ),
        ExtractionResult(3, ExtractionStatus.NO_FAIL_TO_PASS, "a", "b"),
        ExtractionResult(4, ExtractionStatus.OK, "a", "b", frontend_fail_to_pass=["f1"]),
    ]
    assert season_plan.status_counts(results) == {"ok": 2, "no_fail_to_pass": 1}
    assert [r["pr"] for r in season_plan.extraction_table(results)] == [3, 4, 5]
    assert season_plan.progress(1, 3, results[0]).startswith("[1/3] #5 ok: F2P 1, P2P 2, flaky 0")
    assert results[2].tests("fail_to_pass") == ["f1"] and results[0].tests("pass_to_pass") == ["t2", "t3"]
    # A frontend-only PR counts its Playwright tests, not "F2P 0".
    assert season_plan.progress(3, 3, results[2]).startswith("[3/3] #4 ok: F2P 1, P2P 0")


def test_finish_source_keeps_counts_and_folder_in_the_season_metadata(tmp_path):
    season = load_season("demo")
    results = [ExtractionResult(5, ExtractionStatus.OK, "a", "b")]
    summary = season_plan.finish_source(season, tmp_path, results, {"valid": 1})
    assert summary == {"valid": 1, "extraction": {"ok": 1}, "out": str(tmp_path)}
    assert json.loads((tmp_path / "season.json").read_text())["latest"]["extraction"] == {"ok": 1}


def test_a_task_instance_is_typed_and_reads_like_its_record():
    """Rule: a corpus record is checked once and read by attribute; it stays a read-only mapping of the
    record (exports, the schema check and analysts see the same fields)."""
    record = json.loads(FIXTURE.read_text())
    inst = TaskInstance.from_record(record, where="fixture")
    assert inst.instance_id == record["instance_id"] and inst["pr_number"] == record["pr_number"]
    assert inst.tests("backend") == (record["fail_to_pass"]["backend"], record["pass_to_pass"]["backend"])
    assert inst.sides() == ["backend"] and dict(inst) == record and inst == record
    with pytest.raises(TypeError):
        inst["repo"] = "x"  # type: ignore[index]


@pytest.mark.parametrize(
    ("drop", "field"), [("base_commit", "base_commit"), ("fail_to_pass", "fail_to_pass")]
)
def test_a_record_missing_what_the_harness_reads_is_refused_naming_it(drop, field):
    record = json.loads(FIXTURE.read_text())
    del record[drop]
    with pytest.raises(InputError, match=f"field '{field}' is missing") as info:
        TaskInstance.from_record(record, where="corpus.jsonl")
    assert "corpus.jsonl" in str(info.value) and record["instance_id"] in str(info.value)


def test_a_flat_record_without_a_domain_gets_the_one_its_tests_say():
    record = json.loads(FIXTURE.read_text())
    del record["stack_domain"]
    assert TaskInstance.from_record(record).stack_domain == "backend_only"
    record["fail_to_pass"] = {"backend": ["a"], "frontend": ["b"]}
    assert TaskInstance.from_record(record).stack_domain == "fullstack"


def test_the_harness_key_changes_with_the_harness_version_the_record_and_the_runner(monkeypatch, tmp_path):
    """Rule: a cached extraction is reused only by the same harness: version, source record (of the era) and
    container recipes are part of its key; where the record file or the mirror lies is not."""
    import dataclasses
    import shutil

    from tasks_lib.core import constants, paths

    source = load_source("demo")
    key = season_plan.harness_key(source)
    assert season_plan.harness_key(dataclasses.replace(source, path=tmp_path / "demo.toml")) == key
    elsewhere = dataclasses.replace(source.clone, mirror="/srv/mirrors/demo")
    assert season_plan.harness_key(dataclasses.replace(source, clone=elsewhere)) == key
    changed = dataclasses.replace(source, backend=dataclasses.replace(source.backend, timeout_s=7))
    assert season_plan.harness_key(changed) != key
    monkeypatch.setattr(constants, "HARNESS_VERSION", "9.9.9")
    assert season_plan.harness_key(source) != key
    monkeypatch.undo()
    copy = tmp_path / "containers"
    shutil.copytree(paths.containers_dir(), copy)
    monkeypatch.setattr(paths, "containers_dir", lambda: copy)
    assert season_plan.harness_key(source) == key
    (copy / "runner" / "pbench_runner.py").write_text("# another runner\n")
    assert season_plan.harness_key(source) != key


def test_a_cached_verdict_is_keyed_by_the_prestart_and_the_runner_too(monkeypatch, tmp_path):
    """Rule: a verdict made before a change of the source's prestart or test command, or of the runner, is
    never the answer after it (the image id alone does not see them)."""
    import dataclasses
    import shutil

    from tasks_lib.core import paths
    from tasks_lib.engine.harness_id import recipe_key
    from tasks_lib.judge.verdicts import cache_key

    source = load_source("demo")

    def key(src):
        return cache_key("demo-1", "sha-of-patch", "sha256:image", recipe_key(src))

    before = key(source)
    prestart = dataclasses.replace(source.backend, prestart=("python app/other_prestart.py",))
    assert key(dataclasses.replace(source, backend=prestart)) != before
    command = dataclasses.replace(source.backend, test_command="python -m pytest -x")
    assert key(dataclasses.replace(source, backend=command)) != before
    copy = tmp_path / "containers"
    shutil.copytree(paths.containers_dir(), copy)
    monkeypatch.setattr(paths, "containers_dir", lambda: copy)
    assert key(source) == before
    (copy / "runner" / "pbench_runner.py").write_text("# another runner\n")
    assert key(source) != before


def test_a_cached_verdict_is_keyed_by_what_of_the_instance_decides_its_grade():
    """Rule: an instance extracted again under the same id (langflow #7148: its Playwright FAIL_TO_PASS test
    changed) is never answered by the verdict of the one before; its statement, hints and reference patch do not
    decide a verdict and leave the key alone."""
    from tasks_lib.corpus.instance import TaskInstance
    from tasks_lib.judge.verdicts import cache_key, graded_digest

    record = json.loads(
        (Path(__file__).parents[1] / "fixtures" / "instance-1396.jsonl").read_text().splitlines()[0]
    )

    def key(**changes):
        instance = TaskInstance.from_record({**record, **changes})
        return cache_key(
            instance.instance_id, "sha-of-patch", "sha256:image", "recipe", graded_digest(instance)
        )

    before = key()
    assert key(problem_statement="Another statement.", hints_text="a hint", patch="") == before
    other = {"backend": record["fail_to_pass"]["backend"], "frontend": ["tests/a.spec.ts:3:5 › a"]}
    assert key(fail_to_pass=other) != before
    assert key(pass_to_pass={"backend": [], "frontend": []}) != before
    assert key(test_patch=record["test_patch"] + "\n") != before
    assert key(base_commit="0" * 40) != before


def test_the_harness_key_changes_with_the_base_images_and_the_harness_version(monkeypatch):
    """Rule: a rebuilt base image (a new id) or a harness version bump re-extracts; the same inputs give the
    same key."""
    from tasks_lib.core import constants

    source = load_source("demo")
    key = season_plan.harness_key(source, "base=sha256:1;postgres=sha256:2")
    assert key == season_plan.harness_key(source, "base=sha256:1;postgres=sha256:2")
    assert key != season_plan.harness_key(source, "base=sha256:9;postgres=sha256:2")
    monkeypatch.setattr(constants, "EXTRACTION_VERSION", constants.EXTRACTION_VERSION + ".dev")
    assert key != season_plan.harness_key(source, "base=sha256:1;postgres=sha256:2")
    monkeypatch.setattr(constants, "HARNESS_VERSION", constants.HARNESS_VERSION + ".dev")
    assert key != season_plan.harness_key(source, "base=sha256:1;postgres=sha256:2")


@pytest.mark.parametrize("name", ["v0.2", "v0.3"])
def test_every_committed_instance_reads_back_as_it_was_written_with_every_contract_field_typed(name):
    """Rule: `from_record` is the one way in and `to_record` gives the record back unchanged, for every
    instance of the committed corpora; each field of the contract is an attribute equal to the record's."""
    from tasks_lib.core import paths
    from tasks_lib.corpus.schema import load_schema

    contract = list(load_schema()["properties"])
    path = paths.data_dir() / "corpus" / name / "instances.jsonl"
    for line in path.read_text().splitlines():
        record = json.loads(line)
        inst = TaskInstance.from_record(record, where=str(path))
        assert inst.to_record() == record
        for key in contract:
            value = getattr(inst, key)
            if key in ("fail_to_pass", "pass_to_pass"):
                value = {"backend": list(value.backend), "frontend": list(value.frontend)}
            elif key == "pr_labels":
                value = list(value)
            assert value == record.get(key, value if value in ("", None) else object()), (
                inst.instance_id,
                key,
            )
