"""The decisions of a curation season, as plain functions (the flow only wires them to Prefect tasks): where a
source's outputs go, which PRs are extracted and with what cache-key inputs, what stands for a PR whose commits
are missing, how results are counted and shown, and the names of the output files."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tasks_lib.core import stopping
from tasks_lib.core.constants import ExtractionStatus
from tasks_lib.curation import stages as curation
from tasks_lib.curation.extraction import ExtractionResult
from tasks_lib.curation.season import Season
from tasks_lib.engine.harness_id import harness_key
from tasks_lib.sources.record import SourceRecord

# Stages after which `--until` may stop (no container runs before the extraction).
OFFLINE_STAGES = ("crawl", "filter", "distribution")
# The Parquet outputs of one source of a season, in the order of the stages that write them.
SEASON_TABLES = (
    "prs.parquet",
    "filter.parquet",
    "distribution.parquet",
    "extraction.parquet",
    "instances.parquet",
    "rejected.parquet",
)


def source_out_dir(season: Season, source_name: str) -> Path:
    """A one-source season writes into its folder; a multi-source season one folder per source."""
    return season.out_dir if len(season.sources) == 1 else season.out_dir / source_name


@contextlib.contextmanager
def season_lock(season: Season, on_wait: Callable[[str], None] = lambda msg: None) -> Iterator[None]:
    """One run of a season at a time on its output folder, whoever started it (the CLI, a deployment, a
    schedule): a second run waits (a queue, not a cancel) until the first is done, then finds its work cached.
    The lock is the kernel's (flock): a run that dies releases it."""
    season.out_dir.mkdir(parents=True, exist_ok=True)
    path = season.out_dir / ".season.lock"
    with open(path, "a+") as fh:
        told = False
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not told:
                    fh.seek(0)
                    holder = fh.read().strip() or "another process"
                    on_wait(f"season {season.name} is being curated by {holder}; waiting for it to finish")
                    told = True
                stopping.check()
                time.sleep(2)
        try:
            fh.seek(0)
            fh.truncate()
            fh.write(f"pid {os.getpid()} on {os.uname().nodename}\n")
            fh.flush()
            yield
        finally:
            fh.seek(0)
            fh.truncate()
            fcntl.flock(fh, fcntl.LOCK_UN)


# A run of the season rewrites its live file this often: a run killed without a word (SIGKILL, the machine
# stopped) is counted up to its last beat, within this many seconds.
LEDGER_BEAT_S = 30.0
LIVE_DIR = "season-runs.live"


@contextlib.contextmanager
def run_ledger(out: Path, until: str | None = None, beat_s: float = LEDGER_BEAT_S) -> Iterator[None]:
    """One line per run of the season on this source in `season-runs.jsonl` (start, end, wall seconds, how it
    ended), interrupted runs included: what the season cost in all, counted across resumptions.

    A run that cannot write its line (killed by SIGKILL, the machine stopped) is not lost: while it runs it
    rewrites `season-runs.live/<pid>-<start>.json` every `beat_s` seconds, and the next run of the season (the
    season lock makes it the only one) turns a live file it finds into that run's line, `ended` "killed", its
    wall time up to its last beat. `funnel` counts a live file of a run still going as well."""
    import json
    import threading
    from datetime import UTC, datetime

    started, t0 = datetime.now(UTC), time.monotonic()
    ledger, live_dir = out / "season-runs.jsonl", out / LIVE_DIR
    _close_dead_runs(ledger, live_dir)
    live = live_dir / f"{os.getpid()}-{started.strftime('%Y%m%dT%H%M%S')}.json"
    row = {"started_at": started.isoformat(timespec="seconds"), "until": until, "pid": os.getpid()}

    def beat(ended: str) -> dict:
        return row | {
            "ended_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "wall_s": round(time.monotonic() - t0, 1),
            "ended": ended,
        }

    def write_live() -> None:
        with contextlib.suppress(OSError):
            live_dir.mkdir(exist_ok=True)
            tmp = live.with_suffix(".tmp")
            tmp.write_text(json.dumps(beat("running")))
            tmp.replace(live)

    done = threading.Event()

    def beating() -> None:
        while not done.wait(beat_s):
            write_live()

    write_live()
    thread = threading.Thread(target=beating, name="season-ledger", daemon=True)
    thread.start()
    ended = "interrupted"
    try:
        yield
        ended = "completed"
    except Exception as exc:
        ended = f"failed: {type(exc).__name__}"
        raise
    finally:
        done.set()
        thread.join(timeout=5)
        with open(ledger, "a") as fh:
            fh.write(json.dumps(beat(ended)) + "\n")
        live.unlink(missing_ok=True)


def _close_dead_runs(ledger: Path, live_dir: Path) -> None:
    """Live files left by runs that were killed: each becomes its run's ledger line (`ended` "killed", its
    wall time up to its last beat). Called under the season lock, so no run of this season is alive."""
    import json

    if not live_dir.is_dir():
        return
    for path in sorted(live_dir.glob("*.json")):
        try:
            row = json.loads(path.read_text())
        except (OSError, ValueError):
            path.unlink(missing_ok=True)  # a beat cut short: nothing to count
            continue
        row["ended"] = "killed"
        with open(ledger, "a") as fh:
            fh.write(json.dumps(row) + "\n")
        path.unlink(missing_ok=True)


def stopped(out: Path, stage: str) -> dict:
    """The summary of a source whose season stopped after an offline stage (`--until`)."""
    return {"out": str(out), "stopped_after": stage}


@dataclass(frozen=True)
class ExtractionJob:
    """One PR to extract, with every input that decides its result (its cache key) and where it logs."""

    number: int
    base: str
    head: str
    deps_key: str
    era: str | None
    log_dir: str
    # The harness version, the source record of the PR's era and the container recipes (runner included):
    # a harness fix or a record change re-extracts instead of reusing a cached result.
    harness_key: str = ""


def plan_extractions(
    season: Season,
    source: SourceRecord,
    repo: Path,
    out: Path,
    limit: int | None = None,
    images_key: str = "",
) -> tuple[list[ExtractionJob], list[ExtractionResult]]:
    """The season's extractions of one source, highest priority first (at most `limit`), and the results
    that stand for PRs whose commits are not in the repository. `images_key` (the base images' ids,
    `images.identity()`) is part of every job's harness key: a rebuilt base re-extracts."""
    candidates = curation.extraction_candidates(source, out, season.order, season.prs, season.waive)
    if limit:
        candidates = candidates[:limit]
    jobs, missing = [], []
    for pr in candidates:
        if not (pr.base_commit and pr.head_commit):
            missing.append(
                ExtractionResult(
                    pr.number,
                    ExtractionStatus.INFRA_ERROR,
                    "",
                    pr.merge_commit,
                    error="merge commit not found in the repository",
                )
            )
            continue
        era = source.era_for(pr.merged_at)
        era_source = source.for_era(era)
        jobs.append(
            ExtractionJob(
                pr.number,
                pr.base_commit,
                pr.head_commit,
                curation.deps_key(era_source, repo, pr),
                era,
                str(out / "logs" / f"pr-{pr.number}"),
                harness_key(era_source, images_key),
            )
        )
    return jobs, missing


def failed_job(job: ExtractionJob, error: str) -> ExtractionResult:
    """What stands for an extraction that ended in infrastructure trouble after its retries."""
    return ExtractionResult(job.number, ExtractionStatus.INFRA_ERROR, job.base, job.head, error=error)


def progress(i: int, total: int, result: ExtractionResult) -> str:
    return (
        f"[{i}/{total}] #{result.number} {result.status}: F2P {len(result.tests('fail_to_pass'))}, "
        f"P2P {len(result.tests('pass_to_pass'))}, flaky {len(result.flaky_tests)} ({result.duration_s:.0f}s)"
    )


def status_counts(results: list[ExtractionResult]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in results:
        counts[str(r.status)] = counts.get(str(r.status), 0) + 1
    return counts


def extraction_table(results: list[ExtractionResult]) -> list[dict]:
    """One row per PR, by number: what the extraction artifact shows."""
    return [
        {
            "pr": r.number,
            "status": str(r.status),
            "f2p": len(r.backend_fail_to_pass),
            "p2p": len(r.backend_pass_to_pass),
            "flaky": len(r.flaky_tests),
            "seconds": r.duration_s,
        }
        for r in sorted(results, key=lambda r: r.number)
    ]


def finish_source(
    season: Season,
    out: Path,
    results: list[ExtractionResult],
    package_summary: dict,
    not_extracted: dict[int, str] | None = None,
) -> dict:
    """The source's summary (packaging, extraction counts, folder; the PRs of `extraction.prs` not extracted,
    with why), kept as the season's run metadata."""
    summary = {**package_summary, "extraction": status_counts(results), "out": str(out)}
    if not_extracted:
        summary["listed_not_extracted"] = {str(n): why for n, why in not_extracted.items()}
    curation.write_season_meta(season, out, summary)
    return summary
