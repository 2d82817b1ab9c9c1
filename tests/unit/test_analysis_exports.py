"""Analysts' exports round-trip through Hugging Face `datasets` and the plotting script runs on real tables."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd

from tasks_lib.judge import reporting
from tasks_lib.judge.evaluation import TestRow, Verdict

ROOT = Path(__file__).resolve().parents[2]


def _instance(n: int, domain: str, tier: str) -> dict:
    return {
        "instance_id": f"acme__shop-{n}",
        "repo": "acme/shop",
        "stack_domain": domain,
        "contamination_tier": tier,
        "created_at": f"2025-0{n}-10T12:00:00Z",
    }


def _run(tmp_path: Path, model: str, resolved: list[bool]) -> Path:
    rows, tests = [], []
    from datetime import date

    for n, ok in enumerate(resolved, start=1):
        inst = _instance(n, "backend_only" if n % 2 else "fullstack", "public" if n < 3 else "held_out")
        v = Verdict(
            inst["instance_id"],
            ok,
            "resolved" if ok else "tests_failed",
            f2p_passed=int(ok),
            f2p_total=1,
            tests=[
                TestRow("backend", "tests/t.py::test_a", "fail_to_pass", "passed" if ok else "failed", ok)
            ],
        )
        rows.append(reporting.result_row(f"{model}-run", model, date(2025, 3, 1), inst, v))
        tests += reporting.test_rows(f"{model}-run", model, v)
    out = tmp_path / f"{model}-run"
    reporting.write_run_outputs(
        out, rows, tests, {"run_id": f"{model}-run", "model": model, "model_cutoff": "2025-03-01"}
    )
    return out


def test_results_round_trip_through_datasets(tmp_path):
    """results.parquet -> datasets.Dataset -> pandas gives the same columns and values as pandas directly,
    `created_at` a UTC timestamp both ways."""
    import datasets

    out = _run(tmp_path, "m1", [True, False, True, False])
    direct = pd.read_parquet(out / "results.parquet")
    via = datasets.Dataset.from_parquet(
        str(out / "results.parquet"), cache_dir=str(tmp_path / "hf")
    ).to_pandas()
    assert list(via.columns) == list(direct.columns)
    for col in ("instance_id", "resolved", "f2p_total", "status", "after_model_cutoff", "created_at"):
        assert via[col].tolist() == direct[col].tolist()
    assert str(via["created_at"].dtype) == str(direct["created_at"].dtype) == "datetime64[us, UTC]"


FIXTURE = ROOT / "tests" / "fixtures" / "instance-1396.jsonl"


def _records() -> list[dict]:
    record = json.loads(FIXTURE.read_text().splitlines()[0])
    other = {**record, "instance_id": record["instance_id"][:-4] + "1400", "pr_number": 1400}
    return [record, {**other, "created_at": "2026-02-01T23:59:59Z"}]


def test_created_at_is_a_utc_timestamp_in_parquet_and_through_datasets(tmp_path):
    """Rule (issue 39, item 8): a season's `created_at` is one type, a UTC timestamp, in instances.parquet
    (it was a string there), through `load_dataset("parquet")`, `Dataset.from_parquet` and its `hf/` export
    (`load_from_disk`), as in results.parquet; the harness reads each back as the record it was, and the flat
    SWE-bench export keeps the string SWE-bench's tools expect."""
    import datasets

    from tasks_lib.corpus import load, swebench
    from tasks_lib.curation import season
    from tasks_lib.curation import stages as curation

    records = _records()
    out = tmp_path / "season"
    out.mkdir()
    curation.write_instances(records, out)
    direct = pd.read_parquet(out / "instances.parquet")
    assert str(direct["created_at"].dtype) == "datetime64[us, UTC]"
    assert direct["created_at"].tolist() == [pd.Timestamp(r["created_at"]) for r in records]
    cache = str(tmp_path / "hf-cache")
    hf = curation.export_dataset(season.load_season("demo"), out)
    for ds in (
        datasets.load_dataset(
            "parquet", data_files=str(out / "instances.parquet"), split="train", cache_dir=cache
        ),
        datasets.Dataset.from_parquet(str(out / "instances.parquet"), cache_dir=cache),
        datasets.load_from_disk(str(hf))["test"],
    ):
        assert ds.features["created_at"] == datasets.Value("timestamp[us, tz=UTC]")
        assert [d.utcoffset().total_seconds() for d in ds["created_at"]] == [0, 0]
        via = ds.to_pandas()
        assert list(via.columns) == list(direct.columns)
        assert via["created_at"].tolist() == direct["created_at"].tolist()
    for spec in (out / "instances.parquet", hf, out / "instances.jsonl"):
        assert [i.to_record() for i in load.load_corpus(str(spec))] == records, spec
    flat = pd.read_parquet(swebench.write(records, tmp_path / "flat.parquet"))
    assert flat["created_at"].tolist() == [r["created_at"] for r in records]


def test_plot_script_draws_model_domain_tier(tmp_path):
    """scripts/plot_resolve_rate.py tabulates resolve rate by model x domain x tier and writes a PNG."""
    spec = importlib.util.spec_from_file_location(
        "plot_resolve_rate", ROOT / "scripts" / "plot_resolve_rate.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    runs = [
        _run(tmp_path, "m1", [True, False, True, True]),
        _run(tmp_path, "m2", [False, False, True, False]),
    ]
    table = mod.resolve_rate(mod.load_runs(runs))
    row = table[
        (table["model"] == "m1")
        & (table["stack_domain"] == "backend_only")
        & (table["contamination_tier"] == "public")
    ]
    assert row[["resolved", "total"]].values.tolist() == [[1, 1]]
    png = mod.plot(table, tmp_path / "rate.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
