"""What the benchmark scripts share: a scratch workspace, the demo season in it, timed `pbench` calls, medians
and a printed table. Not part of the package; imported by the scripts beside it.

Every script works under a scratch folder (default /tmp/pbench-bench, or PBENCH_BENCH_DIR, or --scratch) so it
never touches the repository's data/: outputs, caches and Prefect's database go there, and containers carry the
owner label `bench-<name>`. Docker images are shared with everything else on the machine (keyed by content).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
# The project's own virtualenv, else the one running this script (a git worktree shares its checkout's): either
# way the CLI imports this project first (`pbench` below puts it on PYTHONPATH).
PBENCH = next(
    (
        p
        for p in (PROJECT / ".venv" / "bin" / "pbench", Path(sys.executable).with_name("pbench"))
        if p.exists()
    ),
    PROJECT / ".venv" / "bin" / "pbench",
)
DEFAULT_SCRATCH = Path(os.environ.get("PBENCH_BENCH_DIR", "/tmp/pbench-bench"))

if str(PROJECT) not in sys.path:  # `python benchmarks/x.py` puts benchmarks/ first, not the project
    sys.path.insert(0, str(PROJECT))


def use_scratch(root: Path, owner: str, *, fresh: bool = False) -> Path:
    """Point outputs, caches and Prefect's home at `root` (created; emptied first with `fresh`)."""
    root = Path(root)
    if fresh and root.exists():
        shutil.rmtree(root)
    for sub in ("out", "cache", "prefect"):
        (root / sub).mkdir(parents=True, exist_ok=True)  # Prefect does not create a missing parent
    os.environ["PBENCH_OUTPUT_DIR"] = str(root / "out")
    os.environ["PBENCH_CACHE_DIR"] = str(root / "cache")
    os.environ["PREFECT_HOME"] = str(root / "prefect")
    os.environ["PBENCH_OWNER"] = f"bench-{owner}"
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.pop("PREFECT_LOCAL_STORAGE_PATH", None)  # follows PBENCH_CACHE_DIR (prefect_env.configure)
    return root


def ensure_demo_season(root: Path) -> Path:
    """The demo season curated once under `root` (reused by later scripts); returns its folder."""
    season = Path(os.environ["PBENCH_OUTPUT_DIR"]) / "seasons" / "demo"
    if not (season / "instances.jsonl").exists():
        print(f"curating the demo season under {root} (once; reused afterwards) ...", flush=True)
        rc, secs, out = pbench("curate", "--season", "demo")
        if rc != 0:
            raise SystemExit(f"pbench curate --season demo failed (exit {rc}):\n{out[-3000:]}")
        print(f"  curated in {secs:.0f}s", flush=True)
    return season


def demo_evaluation_ready(scratch: Path, owner: str) -> Path:
    """The scratch folder `owner` uses, the demo season curated there, and Prefect's ephemeral server started by a
    no-op flow, so that no measurement pays for it. Returns the folder."""
    root = use_scratch(scratch, owner)
    ensure_demo_season(root)
    from prefect import flow

    from tasks_lib.core import prefect_env

    prefect_env.configure()
    flow(name="bench-warm-up")(lambda: None)()
    return root


def evaluate_demo_gold(workers: int, run_id: str, **kwargs) -> dict:
    """The demo's gold evaluation with `workers` thread workers (or `dask_workers=N` in kwargs instead), from an
    empty verdict cache: every instance really runs. Returns the flow's report."""
    from flows.evaluation import run_evaluation

    shutil.rmtree(Path(os.environ["PBENCH_CACHE_DIR"]) / "verdicts", ignore_errors=True)
    return run_evaluation(
        **(kwargs or {"max_workers": workers}),
        dataset="demo",
        predictions="gold",
        model=f"bench-{workers}w",
        model_cutoff="2025-06-01",
        run_id=run_id,
    )


def demo_corpus() -> list[dict]:
    from tasks_lib.corpus import load as corpus

    return corpus.load_corpus("demo")


def pbench(*args: str, env: dict[str, str] | None = None, check: bool = False) -> tuple[int, float, str]:
    """Run the CLI in a fresh process; (exit code, wall seconds, combined output). The code is this project's
    (PYTHONPATH), whichever checkout the virtualenv was installed from, unless `env` names another."""
    start = time.monotonic()
    proc = subprocess.run(
        [str(PBENCH), *args],
        env={**os.environ, "PYTHONPATH": str(PROJECT), **(env or {})},
        cwd=PROJECT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    secs = time.monotonic() - start
    if check and proc.returncode != 0:
        raise SystemExit(f"pbench {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-3000:]}")
    return proc.returncode, secs, proc.stdout


def load() -> float:
    """1-minute load average: the machine is shared, every figure carries it."""
    return os.getloadavg()[0]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def runs_text(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    return ", ".join(fmt.format(v) for v in values)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A fixed-width table (first column left-aligned, the rest right-aligned)."""
    cells = [[str(h) for h in headers]] + [[_cell(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        parts = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(parts))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def save_json(path: Path | None, data: dict) -> None:
    """Raw figures for docs/performance.md (every run, not only medians)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str))
    print(f"raw figures: {path}")
