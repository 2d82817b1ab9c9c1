"""Writing and reading the evaluation outputs at scale: `results.parquet` and `tests.parquet` with --rows synthetic
rows each (default 100 000), through the code the runs use (`reporting.write_parquet` with the analysts' schemas,
`reporting.write_run_outputs` for the whole run folder) and read back as analysts do (pandas, pyarrow). Run:

    python benchmarks/outputs_io.py [--runs 5] [--rows 100000] [--json out.json]

Rows are built once, outside the timings, from a fixed seed: 1 000 instances x 100 models for the results, 2 000
instances x 50 tests for the tests, with realistic strings (ids, statuses, trace paths, notes).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import _bench


def result_rows(n: int) -> list[dict]:
    from tasks_lib.core.constants import INFRA_STATUSES, Status

    rng = random.Random(0)
    statuses = [s.value for s in Status]
    rows = []
    for i in range(n):
        status = rng.choice(statuses)
        iid = f"owner{i % 7}__repo{i % 13}-{i // 100}"
        created = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(hours=i % 9000)
        rows.append(
            {
                "run_id": f"model-{i % 100:03d}-{i % 100:012x}",
                "model": f"model-{i % 100:03d}",
                "model_cutoff": date(2025, 6, 1),
                "instance_id": iid,
                "repo": iid.split("-")[0].replace("__", "/"),
                "stack_domain": rng.choice(["backend_only", "frontend_only", "fullstack"]),
                "contamination_tier": rng.choice(["public", "held_out", "internal_only"]),
                "created_at": created,
                "after_model_cutoff": created.date() > date(2025, 6, 1),
                "resolved": status == "resolved",
                "status": status,
                "infra_failure": Status(status) in INFRA_STATUSES,
                "backend_status": status,
                "frontend_status": None if i % 3 else status,
                "f2p_passed": rng.randint(0, 5),
                "f2p_total": 5,
                "p2p_passed": rng.randint(0, 40),
                "p2p_total": 40,
                "exit_code_mismatch": False,
                "patch_sha256": f"{rng.getrandbits(256):064x}",
                "image_id": f"sha256:{rng.getrandbits(256):064x}",
                "harness_version": "0.2.0",
                "duration_s": rng.uniform(5, 120),
                "attempts": 1,
                "cached": bool(i % 2),
                "executed_by": f"host-{i % 4}:{1000 + i % 50}",
                "trace_dir": f"/data/runs/model-{i % 100:03d}/logs/{iid}",
                "note": "" if status == "resolved" else f"F2P {rng.randint(0, 5)}/5 passed",
            }
        )
    return rows


def test_rows(n: int) -> list[dict]:
    rng = random.Random(1)
    outcomes = ["passed", "failed", "error", "skipped", "missing"]
    rows = []
    for i in range(n):
        iid = f"owner{i % 7}__repo{i % 13}-{i // 50}"
        side = "backend" if i % 5 else "frontend"
        test_id = (
            f"tests/api/routes/test_items_{i % 50}.py::test_case_{i % 50}[param-{i % 3}]"
            if side == "backend"
            else f"tests/items.spec.ts:{10 + i % 90}:3 › Items › case {i % 50}"
        )
        outcome = rng.choice(outcomes)
        rows.append(
            {
                "run_id": "model-001-run",
                "model": "model-001",
                "instance_id": iid,
                "side": side,
                "test_id": test_id,
                "expected": "fail_to_pass" if i % 10 == 0 else "pass_to_pass",
                "outcome": outcome,
                "passed": outcome == "passed",
            }
        )
    return rows


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    import pandas as pd
    import pyarrow.parquet as pq

    from tasks_lib.judge import reporting

    results, tests = result_rows(args.rows), test_rows(args.rows)
    meta = {"run_id": "bench", "model": "bench", "model_cutoff": "2025-06-01", "harness_version": "0.2.0"}
    steps = {
        "write results.parquet": [],
        "write tests.parquet": [],
        "read results (pandas)": [],
        "read tests (pandas)": [],
        "read results (pyarrow)": [],
        "read tests (pyarrow)": [],
        "whole run folder (write_run_outputs)": [],
    }
    sizes = {}
    loads = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="pbench-bench-io-") as tmp:
            out = Path(tmp)
            rp, tp = out / "results.parquet", out / "tests.parquet"
            steps["write results.parquet"].append(
                _timed(lambda: reporting.write_parquet(results, reporting.RESULTS_SCHEMA, rp))  # noqa: B023
            )
            steps["write tests.parquet"].append(
                _timed(lambda: reporting.write_parquet(tests, reporting.TESTS_SCHEMA, tp))  # noqa: B023
            )
            steps["read results (pandas)"].append(_timed(lambda: pd.read_parquet(rp)))  # noqa: B023
            steps["read tests (pandas)"].append(_timed(lambda: pd.read_parquet(tp)))  # noqa: B023
            steps["read results (pyarrow)"].append(_timed(lambda: pq.read_table(rp)))  # noqa: B023
            steps["read tests (pyarrow)"].append(_timed(lambda: pq.read_table(tp)))  # noqa: B023
            sizes = {"results.parquet": rp.stat().st_size, "tests.parquet": tp.stat().st_size}
            steps["whole run folder (write_run_outputs)"].append(
                _timed(lambda: reporting.write_run_outputs(out / "run", results, tests, meta))  # noqa: B023
            )
            back = pd.read_parquet(rp)
            assert len(back) == args.rows and str(back["created_at"].dtype).startswith("datetime64")
            loads.append(_bench.load())
    rows = [[name, f"{_bench.median(v):.3f}", _bench.runs_text(v, "{:.3f}")] for name, v in steps.items()]
    print(_bench.table([f"step ({args.rows:,} rows)", "median s", "runs s"], rows))
    print(
        "\nfile sizes: "
        + ", ".join(f"{k} {v / 2**20:.1f} MB" for k, v in sizes.items())
        + f"; load {min(loads):.1f}-{max(loads):.1f}"
    )
    _bench.save_json(
        args.json, {"runs": args.runs, "rows": args.rows, "steps": steps, "sizes": sizes, "loads": loads}
    )


if __name__ == "__main__":
    main()
