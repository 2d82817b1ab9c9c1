"""Analysts' exports round-trip through Hugging Face `datasets` and the plotting script runs on real tables."""

from __future__ import annotations

import importlib.util
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
    """results.parquet -> datasets.Dataset -> pandas gives the same columns and values as pandas directly."""
    import datasets

    out = _run(tmp_path, "m1", [True, False, True, False])
    direct = pd.read_parquet(out / "results.parquet")
    via = datasets.Dataset.from_parquet(
        str(out / "results.parquet"), cache_dir=str(tmp_path / "hf")
    ).to_pandas()
    assert list(via.columns) == list(direct.columns)
    for col in ("instance_id", "resolved", "f2p_total", "status", "after_model_cutoff"):
        assert via[col].tolist() == direct[col].tolist()


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
