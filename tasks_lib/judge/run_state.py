"""Where a run folder stands, and a run's wall-clock budget.

A folder under `data/runs/` is a finished run when it holds `report.json` (and no `unfinished.json`); it may
also be a run cut short by its budget, a run in progress or interrupted, a refused plan's leftover of an
earlier version, or no run at all. `pbench report data/runs/*/` reads the finished ones and names the others.

The budget (`pbench evaluate --run-timeout`) bounds the whole run: once it is spent no further instance
starts, the ones running finish (each within its sides' own `timeout_s`), and the ones never started are
written to `unfinished.json`, never dropped: the run has no report until a rerun of the same command scores
them (what was scored comes back from the verdict cache, without a container).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from tasks_lib.core.errors import InputError

JOBS_FILE = "scoring-jobs.jsonl"  # the plan, beside run.json (`runs.write_plan`)
VERDICT_FILE = "verdict.json"  # one per scored instance, beside its trace (`runs.spill`)
UNFINISHED_FILE = "unfinished.json"


def state(folder: Path) -> str | None:
    """None for a finished run, else why the folder is not one (one line, for `pbench report`)."""
    folder = Path(folder)
    if not folder.is_dir():
        return "not a folder"
    if (folder / UNFINISHED_FILE).is_file():
        left = json.loads((folder / UNFINISHED_FILE).read_text())
        return (
            f"unfinished: {len(left['unfinished_ids'])} of {left['total']} instance(s) never started "
            f"({left['reason']}; see {UNFINISHED_FILE}); rerun its command to finish it"
        )
    if (folder / "report.json").is_file():
        return None
    if (folder / "run.json").is_file() and (folder / JOBS_FILE).is_file():
        planned = sum(1 for line in (folder / JOBS_FILE).read_text().splitlines() if line.strip())
        done = sum(1 for _ in (folder / "logs").glob(f"*/{VERDICT_FILE}"))
        return (
            f"in progress or interrupted: {done} of {planned} verdict(s) so far, no report.json yet "
            "(rerun its command to finish it)"
        )
    if (folder / "run.json").is_file():
        return "a refused run's leftover (run.json without a plan): nothing was scored"
    return "not a run folder (no run.json, no report.json)"


def finished(folders: Iterable[Path]) -> tuple[list[Path], list[tuple[Path, str]]]:
    """The finished runs among `folders`, in order, and every other folder with why it is not one."""
    runs, others = [], []
    for folder in folders:
        why = state(folder)
        if why is None:
            runs.append(Path(folder))
        else:
            others.append((Path(folder), why))
    return runs, others


def claim_folder(out_dir: Path, meta: dict) -> Path:
    """A run's folder, nothing written yet. One that holds a planned run of another model, cutoff or set of
    predictions is refused (runs are never overwritten silently); a run.json without a plan beside it (left
    by a plan refused half-way, before this version wrote nothing until the plan was whole) claims nothing."""
    meta_path = out_dir / "run.json"
    if meta_path.exists() and (out_dir / JOBS_FILE).exists():
        old = json.loads(meta_path.read_text())
        if not all(old.get(k) == meta[k] for k in ("model", "model_cutoff", "predictions_fingerprint")):
            raise InputError(
                f"--run-id {meta['run_id']}: {out_dir} already holds a run of another model, cutoff or set "
                "of predictions; choose another run id (runs are never overwritten silently)"
            )
    return out_dir


def write_meta(out_dir: Path, meta: dict) -> None:
    """run.json, written last: the mark of a run whose plan is whole."""
    tmp = out_dir / f".run.json.{os.getpid()}"
    tmp.write_text(json.dumps(meta, indent=2))
    tmp.replace(out_dir / "run.json")


def _now() -> float:
    return time.time()  # wall-clock: the budget may start in the CLI and be spent in the flow


class Budget:
    """A run's wall-clock budget in seconds (None: unlimited), counted from `started` (a POSIX time; default:
    now). `admit` hands on instance ids while time is left and keeps the rest in `left` (in order): what was
    never started."""

    def __init__(
        self, seconds: float | None, started: float | None = None, clock: Callable[[], float] | None = None
    ):
        if seconds is not None and seconds < 0:
            raise ValueError(f"a run budget is a number of seconds >= 0, got {seconds}")
        self.seconds, self._clock = seconds, clock or _now
        self.started = self._clock() if started is None else started
        self._deadline = None if seconds is None else self.started + seconds
        self.left: list[str] = []

    def spent(self) -> bool:
        return self._deadline is not None and self._clock() >= self._deadline

    def admit(self, ids: Iterable[str]) -> Iterator[str]:
        queue = iter(ids)
        for iid in queue:
            if self.spent():
                self.left = [iid, *queue]
                return
            yield iid

    def reason(self) -> str:
        return f"run budget of {self.seconds:g} s reached"


def write_unfinished(out_dir: Path, run_id: str, total: int, left: list[str], reason: str) -> dict:
    """`unfinished.json`: the instances a run never started, and why. A later finish removes it."""
    record = {
        "run_id": run_id,
        "reason": reason,
        "total": total,
        "scored": total - len(left),
        "unfinished_ids": list(left),
        "stopped_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    path = Path(out_dir) / UNFINISHED_FILE
    tmp = path.with_name(f".{UNFINISHED_FILE}.{os.getpid()}")
    tmp.write_text(json.dumps(record, indent=2))
    tmp.replace(path)
    return record


def clear_unfinished(out_dir: Path) -> None:
    (Path(out_dir) / UNFINISHED_FILE).unlink(missing_ok=True)
