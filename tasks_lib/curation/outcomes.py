"""A season's extraction outcomes kept in the repository: the season resumes on another machine.

A season's outputs (`data/seasons/`) belong to the machine that ran it, and an extraction is expensive (a
full-stack langflow PR: 12-57 minutes of this machine). When the machine changed between two sessions, every
extraction of the langflow season was lost with it and had to run again. A season whose definition says
`extraction.keep_outcomes = true` therefore also writes, when a PR's extraction ends for good, its outcome in
`data/outcomes/<season>/<source>/pr-<N>.json` (a committed folder): the PR's key (what its cached result is keyed
on, the same on every machine: `flows/curation.py`, `_outcome_key`), the record the extraction wrote
(`extraction.json`) and the `run.json` of each of its runs (what `pbench funnel`'s image table reads).

On any checkout, the season answers a PR from its kept outcome when the key is the one the PR gets now: the
record and the runs' summaries are written back into the PR's log folder (files already there are left alone),
the record is reported, nothing runs. Another key (a changed harness, lock, engine code or run count) or
`--refresh N` runs the PR again, and its new outcome replaces the kept one. Infrastructure errors are never kept:
a dockerd hiccup or a full disk is not the PR's. A timeout is kept only once its retries are spent (the season
flow calls `keep` with the outcome it reports).

The season's wall-time lines (`season-runs.jsonl`) are kept beside the outcomes, merged both ways at each run's
start and end, with the live file of a run in progress as it was at its last kept outcome: a run lost with its
machine still counts, up to that outcome ("killed", as `plan.run_ledger` counts a run killed on one machine).
Only a live file kept by another boot is taken for a lost run: on this boot its run is alive, or left its own.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from tasks_lib.core import paths
from tasks_lib.core.constants import ExtractionStatus
from tasks_lib.curation import resume

log = logging.getLogger(__name__)

RUNS_FILE = "season-runs.jsonl"
LIVE_DIR = "season-runs.live"
NOT_KEPT = frozenset({str(ExtractionStatus.INFRA_ERROR)})


def folder(season_name: str, source_name: str) -> Path:
    return paths.data_dir() / "outcomes" / season_name / source_name


def _write(path: Path, data) -> None:
    """Deterministic JSON (a kept outcome is committed: an unchanged outcome is an unchanged file)."""
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if path.is_file() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def keep(kept: Path, number: int, key: str, row: dict, log_dir: str | Path) -> bool:
    """Keep PR `number`'s outcome `row` under `key` with its runs' summaries from `log_dir`; False (nothing
    written) for an outcome that is never kept."""
    if str(row.get("status")) in NOT_KEPT:
        return False
    runs = {}
    for path in sorted(Path(log_dir).glob("*/run.json")):
        try:
            runs[path.parent.name] = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            log.warning("#%d: %s unreadable (%s): kept without it", number, path, exc)
    outcome = {"pr": number, "key": key, "record": dict(row, log_dir=str(log_dir)), "runs": runs}
    # The machine's paths are not the outcome's (committed data names none): its log folder is `logs/pr-<N>`.
    _write(kept / f"pr-{number}.json", _placeless(outcome, str(log_dir), f"logs/pr-{number}"))
    return True


def _placeless(value, prefix: str, rel: str):
    """`value` with the machine's folder `prefix` written `rel` in every string it holds."""
    if isinstance(value, str):
        return value.replace(prefix, rel)
    if isinstance(value, dict):
        return {k: _placeless(v, prefix, rel) for k, v in value.items()}
    if isinstance(value, list):
        return [_placeless(v, prefix, rel) for v in value]
    return value


def answer(kept: Path, number: int, key: str, log_dir: str | Path) -> dict | None:
    """The record kept for PR `number` under `key`, its files written back into `log_dir` where missing; None
    when there is none (no file, another key, an unreadable file: the PR runs)."""
    path = kept / f"pr-{number}.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("#%d: kept outcome %s unreadable (%s): extracted again", number, path, exc)
        return None
    record = data.get("record") if isinstance(data, dict) else None
    if data.get("key") != key or not isinstance(record, dict) or str(record.get("status")) in NOT_KEPT:
        return None
    folder = Path(log_dir)
    record = dict(record, log_dir=str(folder))
    files = {resume.RECORD_FILE: json.dumps(record, indent=2)}
    for run, summary in (data.get("runs") or {}).items():
        files[f"{run}/run.json"] = json.dumps(dict(summary, log_dir=str(folder / run)))
    for name, text in files.items():
        target = folder / name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
    return record


def _lines(path: Path) -> dict[tuple, str]:
    rows = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            rows[(row.get("started_at"), row.get("pid"))] = line
    return rows


def _boot() -> str:
    """This boot of this machine: a live file kept by another boot is a run its machine lost."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def merge_runs(kept: Path | None, out: Path) -> None:
    """The season's wall-time lines of this machine (`out`) and the kept ones made one, in both places. The
    live files of this machine's runs are kept as they are now (tagged with this boot); a kept live file of
    another boot (a run lost with its machine) is written back where it has no line yet, and the next run turns
    it into a "killed" line; a kept live file whose run has its line is dropped. A kept live file of this boot
    is never written back: its run is alive here, or was killed here and left its own live file."""
    if kept is None:
        return
    lines = _lines(kept / RUNS_FILE) | _lines(out / RUNS_FILE)
    if lines:
        text = "".join(line + "\n" for _, line in sorted(lines.items(), key=lambda kv: str(kv[0])))
        for place in (kept, out):
            place.mkdir(parents=True, exist_ok=True)
            if not (place / RUNS_FILE).is_file() or (place / RUNS_FILE).read_text() != text:
                (place / RUNS_FILE).write_text(text)
    boot = _boot()
    for path in sorted((out / LIVE_DIR).glob("*.json")) if (out / LIVE_DIR).is_dir() else ():
        row = _live(path)
        if row is not None and (row.get("started_at"), row.get("pid")) not in lines:
            (kept / LIVE_DIR).mkdir(parents=True, exist_ok=True)
            (kept / LIVE_DIR / path.name).write_text(json.dumps(row | {"boot": boot}))
    for path in sorted((kept / LIVE_DIR).glob("*.json")) if (kept / LIVE_DIR).is_dir() else ():
        row = _live(path)
        if row is None or (row.get("started_at"), row.get("pid")) in lines:
            path.unlink(missing_ok=True)
        elif row.get("boot") != boot and not (out / LIVE_DIR / path.name).exists():
            (out / LIVE_DIR).mkdir(parents=True, exist_ok=True)
            (out / LIVE_DIR / path.name).write_text(json.dumps({k: v for k, v in row.items() if k != "boot"}))


def _live(path: Path) -> dict | None:
    try:
        row = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return row if isinstance(row, dict) else None
