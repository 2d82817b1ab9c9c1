"""A season's extracted PRs as the instance records packaging would build for them, before its gate; read-only.

Curated statements are written while a season extracts, before it packages (a long season packages at its end),
so there is no corpus yet to check them against: `scripts/statement_check.py --season S` checks them on these
records with the gate packaging applies. The records come from the season's own files — its crawl
(`prs.parquet`), its extractions — and the source's repository, exactly as `stages.stage_package` builds them;
nothing is written into the season's folder, which a running season may be writing at the same time.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tasks_lib.core.constants import ExtractionStatus
from tasks_lib.core.errors import InputError
from tasks_lib.corpus import tiering
from tasks_lib.curation import packaging, plan, stages
from tasks_lib.curation.extraction import ExtractionResult
from tasks_lib.curation.season import Season, load_season
from tasks_lib.sources import repos
from tasks_lib.sources.crawl.base import PullRequest, read_prs_parquet
from tasks_lib.sources.record import SourceRecord, load_source


def read_extractions(out: Path) -> dict[int, ExtractionResult]:
    """A source's extractions so far, by PR number: the rows of `extraction.parquet` (written when the stage
    ends), each replaced by the `logs/pr-<N>/extraction.json` written when that PR's extraction ended (a running
    season's newest word on it). A record that cannot be read is an InputError naming its file."""
    found: dict[int, ExtractionResult] = {}
    if (out / "extraction.parquet").exists():
        found = {e.number: e for e in stages.read_extraction(out)}
    for path in sorted(out.glob("logs/pr-*/extraction.json")):
        try:
            ext = ExtractionResult.from_row(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, TypeError, KeyError, ValueError) as exc:
            raise InputError(f"{path}: not an extraction record ({exc})") from None
        found[ext.number] = ext
    return found


def records(season_name: str, instance_ids: Iterable[str], mirrors: repos.Mirrors = None) -> dict[str, dict]:
    """The record packaging would build (`packaging.build_instance`, before its leak gate) for each of
    `instance_ids`, from the season's crawl and extractions. An InputError naming every id the season cannot
    give one for (no source of the season's, not in its crawl, not extracted, an extraction not ok), before
    any record is built; an unknown season is one too (`load_season`)."""
    season = load_season(season_name)
    wanted = sorted(set(instance_ids))
    found: dict[str, tuple[SourceRecord, PullRequest, ExtractionResult]] = {}
    no_source = f"not an instance of season {season.name}'s sources ({', '.join(season.sources)})"
    problems = dict.fromkeys(wanted, no_source)
    for name in season.sources:
        source = load_source(name)
        owner, repo = source.owner_name
        numbers = _numbers(wanted, f"{owner}__{repo}-")
        if not numbers:
            continue
        out = plan.source_out_dir(season, name)
        if not (out / "prs.parquet").exists():
            raise InputError(
                f"season {season.name}: no crawl at {out / 'prs.parquet'} (the season has not run here, or its"
                " folder is elsewhere: PBENCH_OUTPUT_DIR)"
            )
        prs = {p.number: p for p in read_prs_parquet(out / "prs.parquet")}
        extractions = read_extractions(out)
        for iid, number in numbers.items():
            problems[iid] = _why_not(out, number, prs, extractions)
            if not problems[iid]:
                found[iid] = (source, prs[number], extractions[number])
    bad = {iid: why for iid, why in problems.items() if why}
    if bad:
        raise InputError(
            f"season {season.name}: no extracted PR for " + "; ".join(f"{i}: {w}" for i, w in bad.items())
        )
    return {iid: _record(season, *found[iid], mirrors) for iid in wanted}


def _numbers(instance_ids: list[str], prefix: str) -> dict[str, int]:
    tails = {iid: iid[len(prefix) :] for iid in instance_ids if iid.startswith(prefix)}
    return {iid: int(tail) for iid, tail in tails.items() if tail.isdigit()}


def _why_not(
    out: Path, number: int, prs: dict[int, PullRequest], extractions: dict[int, ExtractionResult]
) -> str:
    """Why the season holds no packageable extraction of PR `number` ("" when it does)."""
    if number not in prs:
        return f"PR #{number} is not in the season's crawl ({out / 'prs.parquet'})"
    ext = extractions.get(number)
    if ext is None:
        return (
            f"PR #{number} is not extracted yet (no row in {out / 'extraction.parquet'}, no logs/pr-{number})"
        )
    if ext.status != ExtractionStatus.OK:
        return f"PR #{number}'s extraction is {ext.status}, not ok: it has no instance to state"
    return ""


def _record(
    season: Season, source: SourceRecord, pr: PullRequest, ext: ExtractionResult, mirrors: repos.Mirrors
) -> dict:
    repo = repos.repo_dir(source, repos.mirror_for(source, mirrors), needs=(ext.base_commit, ext.head_commit))
    candidate = packaging.Candidate.of(pr, source, repo, ext)
    tier = tiering.assign_tier(
        candidate.instance_id, pr.merged_at, season.target_cutoffs(), season.internal_only
    )
    return packaging.build_instance(candidate, ext, tier)
