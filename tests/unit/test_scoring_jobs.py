"""The run's plan, made once: `plan_run` resolves each instance's source, clone and trace folder into a
`ScoringJob`, writes the plan beside run.json, and the flow loads it from there (never planning again)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tasks_lib.corpus import load as corpus
from tasks_lib.judge import runs

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "instance-1396.jsonl"


@pytest.fixture
def planned(tmp_path, monkeypatch):
    monkeypatch.setenv("PBENCH_OUTPUT_DIR", str(tmp_path / "out"))
    monkeypatch.setenv("PBENCH_CACHE_DIR", str(tmp_path / "cache"))
    origin = tmp_path / "mirror"
    subprocess.run(["git", "init", "-q", str(origin)], check=True)
    subprocess.run(
        ["git", "-C", str(origin), "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q",
         "--allow-empty", "-m", "base"],
        check=True,
    )  # fmt: skip
    record = json.loads(FIXTURE.read_text().splitlines()[0])
    other = {**record, "instance_id": record["instance_id"] + "-unpredicted"}
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps(record) + "\n" + json.dumps(other) + "\n")
    preds = tmp_path / "preds.jsonl"
    preds.write_text(
        json.dumps(
            {"instance_id": record["instance_id"], "model_name_or_path": "m", "model_patch": record["patch"]}
        )
        + "\n"
    )
    plan = runs.plan_run(str(corpus), str(preds), "m", "2025-06-01", "r1", mirror=str(origin))
    return plan, record, other, origin


def test_the_plan_resolves_one_job_per_predicted_instance_and_none_for_the_others(planned):
    plan, record, other, _ = planned
    assert [i.instance_id for i in plan.instances] == [record["instance_id"], other["instance_id"]]
    assert list(plan.jobs) == [record["instance_id"]]
    job = plan.jobs[record["instance_id"]]
    assert job.instance == record
    assert job.prediction.model_patch == record["patch"]
    assert job.source.repo == record["repo"]
    assert job.source == corpus.source_for(record)  # the record of the instance's era
    assert job.trace == plan.out_dir / "logs" / record["instance_id"]
    assert job.repo.is_dir() and job.repo != planned[3]  # the source's clone in the cache, not the mirror


def test_the_flow_loads_the_plan_written_beside_run_json_as_it_was_made(planned):
    """Rule: what the flow scores is what `pbench evaluate` planned, field by field: instances in the plan's
    order, predictions, each job's source record (its era's), clone, trace folder and cache choice."""
    plan, *_ = planned
    assert (plan.out_dir / runs.JOBS_FILE).is_file()
    loaded = runs.load_plan(plan.out_dir)
    assert (loaded.run_id, loaded.model, loaded.model_cutoff, loaded.out_dir) == (
        plan.run_id, plan.model, plan.model_cutoff, plan.out_dir,
    )  # fmt: skip
    assert [i.instance_id for i in loaded.instances] == [i.instance_id for i in plan.instances]
    assert [dict(i) for i in loaded.instances] == [dict(i) for i in plan.instances]
    assert loaded.predictions == plan.predictions
    assert loaded.jobs.keys() == plan.jobs.keys()
    for iid, job in plan.jobs.items():
        again = loaded.jobs[iid]
        assert (again.prediction, again.source, again.repo, again.trace, again.no_cache) == (
            job.prediction, job.source, job.repo, job.trace, job.no_cache,
        )  # fmt: skip
        assert dict(again.instance) == dict(job.instance)
    assert runs.schedule(loaded) == runs.schedule(plan)


def test_a_scorings_environment_specs_are_worked_out_once_per_chain_and_live_with_the_scoring(monkeypatch):
    """Rule: the image key, the tooling check and each side's engine run of one scoring ask for the same
    chains; the scoring's book answers each chain once, and nothing outlives it in a module."""
    from tasks_lib.images import envspecs

    worked: list[tuple] = []

    def fake(source, repo, commit, chain, side, settings):
        worked.append((commit, tuple(chain), side))
        return (f"backend:{len(worked)}", None)

    monkeypatch.setattr(envspecs, "_run_env_specs", fake)
    book = envspecs.EnvSpecBook(None, Path("/nonexistent"), "c0", settings=None)
    agent = [("diff --git a/x b/x", True), ("test", False)]
    first = book.of(agent, "backend")
    assert book.of(list(agent), "backend") is first  # the same chain: asked again, not worked out again
    assert book.of(agent[1:], "backend") != first
    assert book.of(agent, "frontend") != first  # a frontend run's specs are another question
    assert len(worked) == 3
    other = envspecs.EnvSpecBook(None, Path("/nonexistent"), "c0", settings=None)
    other.of(agent, "backend")
    assert len(worked) == 4  # another scoring's book: its own answers


@pytest.mark.parametrize("name", ["v0.2", "v0.3"])
def test_the_plan_resolves_every_instances_source_as_source_for_does_reading_each_record_once(name):
    """Rule: `sources_for` answers what `source_for` answers for each instance (its era's record), with one
    record object per (repository, era) instead of every source file read per instance."""
    instances = corpus.load_corpus(name)
    resolved = corpus.sources_for(instances)
    assert resolved == {i.instance_id: corpus.source_for(i) for i in instances}
    assert len({id(s) for s in resolved.values()}) == len({(s.repo, s.era) for s in resolved.values()})
