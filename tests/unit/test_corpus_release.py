"""`pbench corpus NAME --season S`: a committed corpus from curated seasons, read back by `--dataset NAME`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tasks_lib.core.errors import InputError
from tasks_lib.corpus import load as corpus
from tasks_lib.curation import release as corpus_release

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "instance-1396.jsonl"


DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PBENCH_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "data").mkdir()
    shutil.copy(DATA / "statement_rules.toml", tmp_path / "data")
    return tmp_path / "data"


def test_a_corpus_holds_the_seasons_valid_instances_and_a_card(data_dir, monkeypatch):
    record = json.loads(FIXTURE.read_text().splitlines()[0])
    other = {**record, "instance_id": record["instance_id"][:-4] + "9999", "pr_number": 9999}
    seasons = {"a": [record], "b": [other, record]}
    monkeypatch.setattr(corpus_release, "_season_instances", lambda name: seasons[name])
    monkeypatch.setattr(corpus_release, "_season_rejected", lambda name: [])
    out = corpus_release.build("v9", ["a", "b"])
    assert out == data_dir / "corpus" / "v9"
    lines = (out / "instances.jsonl").read_text().splitlines()
    assert [json.loads(x)["instance_id"] for x in lines] == sorted(
        {record["instance_id"], other["instance_id"]}
    )
    card = (out / "README.md").read_text()
    f2p = len(record["fail_to_pass"]["backend"]) + len(record["fail_to_pass"]["frontend"])
    assert "| instances | 2 |" in card and f"| FAIL_TO_PASS tests | {2 * f2p} |" in card
    assert f"| source = {record['repo']} | 2 |" in card and "Seasons: `a`, `b`." in card
    # --dataset NAME reads it
    assert sorted(i.instance_id for i in corpus.load_corpus("v9")) == sorted(
        [record["instance_id"], other["instance_id"]]
    )


def test_an_invalid_record_or_name_stops_the_build(data_dir, monkeypatch):
    record = json.loads(FIXTURE.read_text().splitlines()[0])
    monkeypatch.setattr(corpus_release, "_season_instances", lambda name: [{**record, "fail_to_pass": {}}])
    with pytest.raises(InputError, match=record["instance_id"]):
        corpus_release.build("v9", ["a"])
    assert not (data_dir / "corpus" / "v9" / "instances.jsonl").exists()
    with pytest.raises(InputError, match="plain folder name"):
        corpus_release.build("../x", ["a"])


def test_a_season_under_a_reproduction_rule_feeds_no_corpus(data_dir):
    """A season labelled by the published harness's rule (extraction.labels) is refused by name, exit 2."""
    (data_dir / "season_defs").mkdir()
    shutil.copy(DATA / "model_cutoffs.toml", data_dir)
    (data_dir / "season_defs" / "repro.toml").write_text(
        'name = "repro"\nsources = ["demo"]\ntarget_models = ["claude-opus-4-7"]\n'
        '[extraction]\nlabels = "published-v0.1"\n'
    )
    with pytest.raises(
        InputError, match="--season repro: labelled under extraction.labels = 'published-v0.1'"
    ):
        corpus_release.build("v9", ["repro"])
    assert not (data_dir / "corpus" / "v9").exists()


def test_a_corpus_loads_through_datasets_with_utc_timestamps_and_the_parquet_types(data_dir, monkeypatch):
    """Rule (issue 39, item 8): `datasets.load_dataset` of a committed corpus's folder gives the columns of
    instances.parquet, `created_at` a UTC timestamp (the card declares them: inferred from the JSON Lines, it
    was a naive timestamp), and the harness reads the rows back as the records they were."""
    import datasets

    from tasks_lib.curation.stages import INSTANCES_SCHEMA

    record = json.loads(FIXTURE.read_text().splitlines()[0])
    monkeypatch.setattr(corpus_release, "_season_instances", lambda name: [record])
    monkeypatch.setattr(corpus_release, "_season_rejected", lambda name: [])
    out = corpus_release.build("v9", ["a"])
    ds = datasets.load_dataset(str(out), split="test", cache_dir=str(data_dir / "hf-cache"))
    assert ds.features == datasets.Features.from_arrow_schema(INSTANCES_SCHEMA)
    assert ds[0]["created_at"].utcoffset().total_seconds() == 0
    assert str(ds.to_pandas()["created_at"].dtype) == "datetime64[us, UTC]"
    written = json.loads((out / "instances.jsonl").read_text())
    assert ds[0]["created_at"].isoformat().replace("+00:00", "Z") == written["created_at"]
    ds.save_to_disk(str(data_dir / "saved"))  # a saved copy is a corpus for --dataset
    assert corpus.load_corpus(str(data_dir / "saved"))[0].to_record() == written
