"""docs/analysis.md stays true: every Python snippet runs as written against a run and a season written by the
harness's own writers, every Parquet table it describes lists exactly the schema's columns with the dtypes
pandas gives them, and every timestamp column of every table is one type (issue 39, item 8)."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

from tasks_lib.core.constants import ExtractionStatus
from tasks_lib.corpus import swebench
from tasks_lib.curation.distribution import DISTRIBUTION_SCHEMA
from tasks_lib.curation.extraction import EXTRACTION_SCHEMA, ExtractionResult
from tasks_lib.curation.filtering import FILTER_SCHEMA, FilterVerdict
from tasks_lib.curation.stages import INSTANCES_SCHEMA, REJECTED_SCHEMA
from tasks_lib.judge.evaluation import TestRow, Verdict
from tasks_lib.judge.reporting import RESULTS_SCHEMA, TESTS_SCHEMA
from tasks_lib.sources.crawl.base import PRS_SCHEMA, TIMESTAMP

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "analysis.md"

# The paragraph that opens each table's description in docs/analysis.md, and the table's schema.
TABLES = {
    "`results.parquet`": RESULTS_SCHEMA,
    "`tests.parquet`": TESTS_SCHEMA,
    "`instances.parquet`": INSTANCES_SCHEMA,
    "`rejected.parquet`": REJECTED_SCHEMA,
    "`extraction.parquet`": EXTRACTION_SCHEMA,
    "`filter.parquet`": FILTER_SCHEMA,
    "`distribution.parquet`": DISTRIBUTION_SCHEMA,
    "`prs.parquet`": PRS_SCHEMA,
    "Every column is a string (`tasks_lib.corpus.swebench.schema()`)": swebench.schema(),
}


def documented_columns(text: str, marker: str) -> dict[str, str]:
    """{column: documented pandas dtype} of the first Markdown table after the paragraph opening with `marker`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(marker))
    table = []
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            table.append(line)
        elif table:
            break
    assert table[0].startswith("| column | dtype |"), f"{marker}: no column table after it"
    out: dict[str, str] = {}
    for row in table[2:]:
        names, dtype = (cell.strip() for cell in row.strip("|").split("|")[:2])
        for name in re.findall(r"`([^`]+)`", names):
            assert name not in out, f"{marker}: {name} documented twice"
            out[name] = dtype.split(" (", 1)[0]
    return out


@pytest.mark.parametrize("marker", list(TABLES))
def test_every_column_is_documented_with_the_dtype_pandas_gives_it(marker):
    """Rule: the doc's table of each Parquet output names exactly the schema constant's columns (results'
    `blame`, `tampering`, `static_flags` were missing), each with the dtype pandas reads it as."""
    schema = TABLES[marker]
    documented = documented_columns(DOC.read_text(), marker)
    assert sorted(documented) == sorted(schema.names)
    read = {c: str(t) for c, t in schema.empty_table().to_pandas().dtypes.items()}
    assert documented == read


def _timestamps(t: pa.DataType):
    if pa.types.is_timestamp(t):
        yield t
    for i in range(t.num_fields):
        yield from _timestamps(t.field(i).type)


@pytest.mark.parametrize("marker", list(TABLES))
def test_every_timestamp_is_utc_microseconds(marker):
    """Rule: one timestamp type in every table, `timestamp[us, tz=UTC]` (instances.parquet's `created_at` was
    a string beside the others' UTC timestamps), but for the flat SWE-bench export's string."""
    schema = TABLES[marker]
    assert all(t == TIMESTAMP for f in schema for t in _timestamps(f.type))
    if "created_at" in schema.names:  # SWE-bench's flat records keep the string its tools expect
        flat = schema.equals(swebench.schema())
        assert schema.field("created_at").type == (pa.string() if flat else TIMESTAMP)


# --------------------------------------------------------------------------- the snippets, run


def _record(n: int, created_at: str) -> dict:
    record = json.loads((ROOT / "tests" / "fixtures" / "instance-1396.jsonl").read_text().splitlines()[0])
    iid = record["instance_id"].rsplit("-", 1)[0]
    return {**record, "instance_id": f"{iid}-{n}", "pr_number": n, "created_at": created_at}


def _write_run(root: Path, model: str, records: list[dict], outcomes: list[str]) -> None:
    from tasks_lib.judge import reporting

    rows, tests = [], []
    for record, status in zip(records, outcomes, strict=True):
        ok = status == "resolved"
        verdict = Verdict(
            record["instance_id"],
            ok,
            status,
            int(ok),
            1,
            tampering=["witness test not run as written"] if status == "tests_failed" else [],
            tests=[
                TestRow(
                    "backend", "tests/test_a.py::test_new", "fail_to_pass", "passed" if ok else "failed", ok
                )
            ],
        )
        rows.append(reporting.result_row(f"{model}-run", model, dt.date(2026, 1, 1), record, verdict))
        tests += reporting.test_rows(f"{model}-run", model, verdict)
    meta = {"run_id": f"{model}-run", "model": model, "model_cutoff": "2026-01-01"}
    reporting.write_run_outputs(root / "data" / "runs" / f"{model}-run", rows, tests, meta)


def _write_season(root: Path, records: list[dict]) -> None:
    from tasks_lib.curation import filtering, season
    from tasks_lib.curation import stages as curation

    out = root / "data" / "seasons" / "demo"
    out.mkdir(parents=True)
    curation.write_instances(records, out)
    curation.export_dataset(season.load_season("demo"), out)
    results = [
        ExtractionResult(
            r["pr_number"],
            ExtractionStatus.OK,
            r["base_commit"],
            r["head_commit"],
            flaky_tests=["tests/t.py::t"],
        )
        for r in records
    ]
    curation.write_extraction(results, out)
    merged = dt.datetime(2026, 1, 22, tzinfo=dt.UTC)
    verdicts = [
        FilterVerdict(1, True, (), 0.8, "fullstack", "current", "Add items", merged, 120),
        FilterVerdict(2, False, ("docs_only", "too_small"), 0.0, None, "current", "Docs", merged, 3),
    ]
    filtering.write_filter_parquet(verdicts, out / "filter.parquet")


def _write_attempts(root: Path, model: str, records: list[dict]) -> None:
    """What `pbench agent run --out preds.jsonl` leaves beside its predictions, by its own ledger."""
    from tasks_lib.core.constants import AgentOutcome
    from tasks_lib.judge.agent_ledger import Ledger
    from tasks_lib.judge.agents import Attempt

    ledger = Ledger(root / "preds.jsonl", root / "preds-agent", model)
    for record, outcome in zip(records, [AgentOutcome.COMPLETED, AgentOutcome.TIMEOUT], strict=True):
        ledger.add(Attempt(record["instance_id"], model, outcome, "", exit_code=0, duration_s=1.0))


def _snippets(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)


def test_the_python_snippets_run_as_written(tmp_path, monkeypatch, capsys):
    """Rule (issue 39, item 8): each Python block of docs/analysis.md runs on its own, as written, from a
    checkout's root holding a run and a season (two of them did not: `json` never imported, a literal
    `<run_id>`). The run and the season are written by the harness's writers; `demo.jsonl` is what the
    documented `pbench export` writes (`swebench.write`)."""
    import datasets

    records = [_record(1396, "2026-01-22T12:37:57Z"), _record(1400, "2026-02-01T23:59:59Z")]
    _write_run(tmp_path, "model-a", records, ["resolved", "tests_failed"])
    _write_run(tmp_path, "model-b", records, ["resolved", "resolved"])
    _write_season(tmp_path, records)
    swebench.write(records, tmp_path / "demo.jsonl")
    _write_attempts(tmp_path, "model-b", records)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    snippets = _snippets("python")
    assert len(snippets) >= 4
    for n, code in enumerate(snippets, start=1):
        try:
            exec(compile(code, f"docs/analysis.md python block {n}", "exec"), {"__name__": "__snippet__"})
        except Exception as exc:
            pytest.fail(f"python block {n} of docs/analysis.md fails as written: {type(exc).__name__}: {exc}")
    printed = capsys.readouterr().out
    assert printed.count("timestamp[us, tz=UTC]") >= 3 and "witness test not run as written" in printed
