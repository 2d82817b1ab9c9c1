"""SWE-bench interchange both ways (tasks_lib/corpus/swebench.py, `pbench export --format swebench`): flat records with
FAIL_TO_PASS / PASS_TO_PASS as JSON strings, the frontend's tests apart, read back with sides kept apart."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tasks_lib.core.errors import InputError
from tasks_lib.corpus import load as corpus
from tasks_lib.corpus import swebench

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "instance-1396.jsonl"
PW = "tests/items.spec.ts:12:3 › Items › archive hides the item"


def _instances() -> list[dict]:
    backend = json.loads(FIXTURE.read_text().splitlines()[0])
    fullstack = dict(
        backend,
        instance_id="fastapi__full-stack-fastapi-template-9999",
        stack_domain="fullstack",
        fail_to_pass={"backend": ["tests/test_a.py::test_new"], "frontend": [PW]},
        pass_to_pass={
            "backend": ["tests/test_a.py::test_old"],
            "frontend": ["tests/home.spec.ts:3:1 › Home › loads"],
        },
        hints_text="Seen on 3.12 only.",
    )
    return [backend, fullstack]


def test_a_flat_record_has_swebench_fields_as_swebench_defines_them():
    row = swebench.to_swebench(_instances()[1])
    assert set(swebench.SWEBENCH_FIELDS) <= set(row)
    assert all(isinstance(v, str) for v in row.values())
    assert json.loads(row["FAIL_TO_PASS"]) == ["tests/test_a.py::test_new"]  # pytest ids only
    assert json.loads(row["PASS_TO_PASS"]) == ["tests/test_a.py::test_old"]
    assert json.loads(row["FAIL_TO_PASS_FRONTEND"]) == [PW]
    assert row["environment_setup_commit"] == row["base_commit"] and row["hints_text"] == "Seen on 3.12 only."


@pytest.mark.parametrize("name", ["corpus.jsonl", "corpus.parquet", "hf"])
def test_round_trip_keeps_every_test_on_its_side(tmp_path, name):
    out = swebench.write(_instances(), tmp_path / name)
    back = {i.instance_id: i for i in corpus.load_corpus(str(out))}
    for original in _instances():
        got = back[original["instance_id"]]
        for key in ("fail_to_pass", "pass_to_pass"):
            assert dict(got[key]) == {s: list(original[key][s]) for s in ("backend", "frontend")}
        for key in ("repo", "base_commit", "patch", "test_patch", "problem_statement", "created_at"):
            assert got[key] == original[key]
        assert got.stack_domain == original["stack_domain"]


def test_pandas_and_datasets_read_the_export(tmp_path):
    import datasets

    df = pd.read_json(swebench.write(_instances(), tmp_path / "c.jsonl"), lines=True, dtype=False)
    assert set(swebench.SWEBENCH_FIELDS) <= set(df.columns)
    assert df["FAIL_TO_PASS"].map(json.loads).map(len).tolist() == [1, 1]
    ds = datasets.load_from_disk(str(swebench.write(_instances(), tmp_path / "hf")))["test"]
    assert ds.num_rows == 2 and all(ds.features[f].dtype == "string" for f in swebench.SWEBENCH_FIELDS)


def test_a_flat_file_of_another_tool_moves_playwright_ids_to_the_frontend(tmp_path):
    row = {
        k: v for k, v in swebench.to_swebench(_instances()[1]).items() if k not in swebench.FRONTEND_FIELDS
    }
    row["FAIL_TO_PASS"] = json.dumps(["tests/test_a.py::test_new", PW])
    for key in ("stack_domain", "contamination_tier", "environment"):
        row.pop(key)
    path = tmp_path / "other.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (inst,) = corpus.load_corpus(str(path))
    assert inst.tests("backend")[0] == ["tests/test_a.py::test_new"] and inst.tests("frontend")[0] == [PW]
    assert inst.stack_domain == "fullstack"


def test_a_malformed_flat_list_names_the_instance_and_field(tmp_path):
    row = swebench.to_swebench(_instances()[0]) | {"FAIL_TO_PASS": "[not json"}
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(InputError) as err:
        corpus.load_corpus(str(path))
    assert "FAIL_TO_PASS" in str(err.value) and row["instance_id"] in str(err.value)


def test_a_season_without_a_valid_instance_exports_loadable_empty_datasets(tmp_path):
    """Rule: packaging a season in which no PR made an instance (every one no_fail_to_pass, say) writes its
    exports, empty but with their columns, and `datasets` loads them: before, the SWE-bench copy raised
    "Keys mismatch" (the curation ended exit 2 after its extractions) and the `hf` copy was saved in no shard,
    which `load_from_disk` cannot read."""
    import datasets

    from tasks_lib.curation import season
    from tasks_lib.curation import stages as curation

    flat = datasets.load_from_disk(str(swebench.write([], tmp_path / "hf-flat")))["test"]
    assert flat.num_rows == 0 and set(swebench.SWEBENCH_FIELDS) <= set(flat.column_names)
    out = tmp_path / "season"
    out.mkdir()
    curation.write_instances([], out)
    hf = curation.export_dataset(season.load_season("demo"), out)
    ds = datasets.load_from_disk(str(hf))["test"]
    assert ds.num_rows == 0 and {"instance_id", "fail_to_pass", "pass_to_pass"} <= set(ds.column_names)
    assert datasets.load_from_disk(str(hf / "swebench"))["test"].num_rows == 0


def _graded_by_swebench(row: dict, log_statuses: dict) -> str:
    """SWE-bench's own grading (`swebench.harness.grading`) of one flat record against a parsed test log."""
    from swebench.harness.grading import get_eval_tests_report, get_resolution_status

    gold = {"FAIL_TO_PASS": json.loads(row["FAIL_TO_PASS"]), "PASS_TO_PASS": json.loads(row["PASS_TO_PASS"])}
    return get_resolution_status(get_eval_tests_report(log_statuses, gold))


COMMITTED = sorted(
    p.parent.name for p in (Path(__file__).resolve().parents[2] / "data" / "corpus").glob("*/instances.jsonl")
)


@pytest.mark.parametrize("name", COMMITTED)
def test_the_flat_export_of_the_committed_corpus_gives_swebench_no_free_win(tmp_path, name):
    """Rule: fed to the swebench package's own grading functions with an empty test log per instance, the
    default flat export of every committed corpus resolves nothing; the instances it leaves out (no pytest
    FAIL_TO_PASS) are exactly those SWE-bench would have resolved for any patch."""
    assert {"v0.2"} <= set(COMMITTED)
    instances = corpus.load_corpus(name)
    kept, left = swebench.gradable(instances)
    out = swebench.write(kept, tmp_path / "flat.jsonl")
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == len(kept) > 0
    statuses = [_graded_by_swebench(row, {}) for row in rows]
    assert statuses.count("RESOLVED_FULL") == 0, statuses
    assert all(_graded_by_swebench(swebench.to_swebench(i), {}) == "RESOLVED_FULL" for i in left)
    assert left or name != "v0.2"  # v0.2 has 4 frontend-only instances
