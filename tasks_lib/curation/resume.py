"""Runs an interrupted extraction finished, taken over when the season resumes.

A season stopped in the middle of a PR (a session's end, Ctrl-C, a crash) used to run that PR's finished runs
again: up to forty minutes of a full-stack PR. The season flow writes the PR's key in its log folder before the
extraction (`set_pr_key`): what the PR's cached result is keyed on (harness key, dependency key, commits, era)
and a digest of the engine code this process loaded. Each run that counted is marked with its own key (the PR's,
the run's name, side, patch chain and test selection). A run folder is taken over only when its mark equals the
key the same run would get now, and its `run.json` reads back; anything else (no PR key, another key, a run
that never finished) runs again. `--refresh` writes no PR key: a refreshed PR runs everything again.

A PR whose extraction timed out after its retries is settled under its key (`settle`): the next season gives it
the same `timeout` outcome without running it (`settled`) - a test scope that outlasts the source's wall clock
twice does so again, and cost an hour of a full-stack PR at every resumption. Infrastructure errors are never
settled (a dockerd hiccup or a full disk is not the PR's); a new key (another timeout in the source, another
harness, engine code) or `--refresh N` runs it again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from pathlib import Path

from tasks_lib import engine

log = logging.getLogger(__name__)

PR_KEY_FILE = "resume.key"  # in a PR's log folder
RUN_MARK_FILE = "resume.json"  # in a run folder
SETTLED_FILE = "settled.json"  # in a PR's log folder
RECORD_FILE = (
    "extraction.json"  # in a PR's log folder: written when its extraction ended, whatever the status
)
SETTLED_STATUSES = frozenset({"timeout"})
# The code that makes and reads a run: a change to any of it means no run made before is taken over.
ENGINE_PACKAGES = ("engine", "formats", "images", "protocol", "sources")


@functools.cache
def engine_digest() -> str:
    """sha256 of the engine's source files as this process found them at its first use."""
    root = Path(__file__).resolve().parents[1]  # tasks_lib/
    h = hashlib.sha256()
    for package in ENGINE_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def pr_key(parts: tuple[str, ...]) -> str:
    return hashlib.sha256(json.dumps([*parts, engine_digest()]).encode()).hexdigest()


def set_pr_key(log_dir: str | Path, parts: tuple[str, ...] | None) -> None:
    """Write the PR's key (sha256 of `parts` and `engine_digest`) in its log folder; None removes it and any
    settled outcome (nothing of an earlier attempt is then taken over)."""
    path = Path(log_dir) / PR_KEY_FILE
    if parts is None:
        path.unlink(missing_ok=True)
        (Path(log_dir) / SETTLED_FILE).unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(pr_key(parts) + "\n")


def settle(log_dir: str | Path) -> dict | None:
    """After an extraction failed for good (its retries spent): the record its last attempt wrote when its status
    is one a rerun repeats (`SETTLED_STATUSES`), settled under the PR's key if it has one (a refreshed PR has
    none: it is reported, not settled); None when there is no such record (no record, another status)."""
    folder = Path(log_dir)
    try:
        record = json.loads((folder / RECORD_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("status") not in SETTLED_STATUSES:
        return None
    key_file = folder / PR_KEY_FILE
    key = key_file.read_text().strip() if key_file.is_file() else ""
    if key:
        (folder / SETTLED_FILE).write_text(json.dumps({"key": key, "record": record}, indent=1) + "\n")
    return record


def settled(log_dir: str | Path, parts: tuple[str, ...]) -> dict | None:
    """The record a PR was settled with under the key `parts` give now, else None (it runs)."""
    path = Path(log_dir) / SETTLED_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if data.get("key") != pr_key(parts) or data.get("record", {}).get("status") not in SETTLED_STATUSES:
        return None
    return data["record"]


def run_key(pr_log_dir: Path, request: engine.RunRequest) -> str:
    """The key of one run of an extraction: "" when its PR has no key (never taken over)."""
    path = Path(pr_log_dir) / PR_KEY_FILE
    if not path.is_file():
        return ""
    what = {
        "pr": path.read_text().strip(),
        "run": Path(request.log_dir).name,
        "side": str(request.side),
        "commit": request.commit,
        "chain": [
            [p.name, hashlib.sha256(p.diff.encode("utf-8", "surrogateescape")).hexdigest(), p.untrusted]
            for p in request.patches
        ],
        "selection": list(request.selection),
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def taken_over(key: str, request: engine.RunRequest) -> engine.RunResult | None:
    """The finished run in `request.log_dir` when it was marked with `key`; else None, its mark removed (a run
    about to start again must not keep an earlier one's)."""
    folder = Path(request.log_dir)
    mark, run_json = folder / RUN_MARK_FILE, folder / "run.json"
    if key and mark.is_file() and run_json.is_file():
        try:
            if json.loads(mark.read_text()).get("key") == key:
                result = engine.RunResult.from_dict(json.loads(run_json.read_text()))
                log.info("%s: taken over from the interrupted attempt (%s)", request.label, folder)
                return result
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("%s: %s unreadable (%s): runs again", request.label, folder, exc)
    mark.unlink(missing_ok=True)
    return None


def mark(key: str, request: engine.RunRequest) -> None:
    """Mark the run of `request`, which counted, as one a resumed extraction may take over."""
    if key:
        (Path(request.log_dir) / RUN_MARK_FILE).write_text(json.dumps({"key": key}) + "\n")
