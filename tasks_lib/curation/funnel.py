"""A season's funnel and its table of extracted PRs, as Markdown, from the season's own outputs (what
docs/validation.md shows per source): PRs -> filter reasons -> extracted (by status) -> valid instances, the
time the extraction took per valid instance, and one row per extracted PR.

Reads `prs.parquet`, `filter.parquet`, `extraction.parquet` (written as verdicts come in, so an interrupted or
running season reads as far as it got), `instances.parquet` and `rejected.parquet` (after packaging).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tasks_lib.core.errors import InputError


def _read(path: Path):
    import pandas as pd

    return pd.read_parquet(path) if path.is_file() else None


def _short(text: str, width: int = 90) -> str:
    text = " ".join(str(text or "").split()).replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


def _counts(counter: Counter) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))


def markdown(out: Path) -> str:
    """The funnel and the per-PR table of one source's season folder."""
    out = Path(out)
    prs, verdicts = _read(out / "prs.parquet"), _read(out / "filter.parquet")
    if prs is None or verdicts is None:
        raise InputError(f"{out}: no prs.parquet / filter.parquet (not a season folder, or not crawled yet)")
    extraction = _read(out / "extraction.parquet")
    instances, rejected = _read(out / "instances.parquet"), _read(out / "rejected.parquet")
    kept = verdicts[verdicts["kept"]]
    # PRs per reason: a PR with two non-task labels counts once under non_task_label.
    reasons = Counter(kind for rs in verdicts["reasons"] for kind in {r.split(":", 1)[0] for r in rs})
    lines = ["| stage | in | out | kept | detail |", "|---|---|---|---|---|"]
    lines.append(f"| crawl | {len(prs)} | 0 | {len(prs)} | |")
    detail = _counts(reasons)
    lines.append(f"| filter | {len(prs)} | {len(prs) - len(kept)} | **{len(kept)}** | {detail} |")
    valid_ids = set(instances["pr_number"]) if instances is not None else set()
    rejected_by = (
        {int(r.pr_number): list(r.reasons) for r in rejected.itertuples()} if rejected is not None else {}
    )
    if extraction is not None and len(extraction):
        status = Counter(extraction["status"])
        ok = status.get("ok", 0)
        detail = _counts(status)
        lines.append(
            f"| extraction | {len(extraction)} of {len(kept)} | {len(extraction) - ok} | **{ok}** | {detail} |"
        )
        numbers = set(extraction["number"])
        packaged = len(numbers & valid_ids) + len(numbers & set(rejected_by))
        if packaged:
            detail = f"rejected {len(numbers & set(rejected_by))}" if rejected_by else ""
            valid = len(numbers & valid_ids)
            lines.append(f"| packaging, schema, tiering | {ok} | {ok - valid} | **{valid}** | {detail} |")
        lines += _cannot_run(extraction)
        seconds = float(extraction["duration_s"].sum())
        valid = len(numbers & valid_ids)
        per = f"{seconds / valid / 60:.1f} min per valid instance" if valid else "no valid instance yet"
        lines += ["", f"Extraction time: {seconds / 3600:.2f} h over {len(extraction)} PRs ({per})."]
        wall, runs = _wall(out)
        if runs:
            per = f"{wall / valid / 60:.1f} min per valid instance" if valid else "no valid instance yet"
            lines.append(
                f"Curation wall time, every run of the season counted ({runs}, interrupted and killed ones "
                f"included; image builds, rejected PRs and the offline stages in it): {wall / 3600:.2f} h ({per})."
            )
        domains = dict(zip(verdicts["number"], verdicts["stack_domain"], strict=False))
        lines += ["", _table(extraction, prs, domains, valid_ids, rejected_by)]
    else:
        lines += ["", "No PR extracted yet."]
    return "\n".join(lines) + "\n"


def _cannot_run(extraction) -> list[str]:
    """A line counting the tests the test patches add or change that cannot pass here, by reason (skipped
    without a key, wanting the outside network, failing with the reference solution): in neither list, and no
    test or instance lost silently."""
    if "cannot_run" not in extraction:
        return []
    rows = [(r.number, list(r.cannot_run)) for r in extraction.itertuples() if r.cannot_run is not None]
    rows = [(n, c) for n, c in rows if len(c)]
    if not rows:
        return []
    kinds = Counter(c["reason"].split(":", 1)[0] for _, cs in rows for c in cs)
    lost = sum(1 for n, _ in rows if extraction.loc[extraction["number"] == n, "status"].iloc[0] != "ok")
    return [
        f"| (cannot run here) | {sum(kinds.values())} tests in {len(rows)} PRs | | | {_counts(kinds)}; "
        f"{lost} PR(s) left with no FAIL_TO_PASS by them |"
    ]


def _wall(out: Path) -> tuple[float, int]:
    """Seconds of every extracting run of the season (`season-runs.jsonl`, and the live file of a run still
    going or killed since: `plan.run_ledger`), and how many."""
    import json

    from tasks_lib.curation.plan import LIVE_DIR

    ledger = out / "season-runs.jsonl"
    lines = ledger.read_text().splitlines() if ledger.is_file() else []
    live = sorted((out / LIVE_DIR).glob("*.json")) if (out / LIVE_DIR).is_dir() else []
    rows = [json.loads(line) for line in lines if line.strip()]
    for path in live:
        try:
            rows.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # a beat being written: counted at the next look
    rows = [r for r in rows if not r.get("until")]
    return sum(float(r["wall_s"]) for r in rows), len(rows)


def images(out: Path, engine_rows: list[dict] | None = None) -> str:
    """The environment images of a season's runs, from its run folders (`logs/pr-*/<run>/run.json`: the
    image, its lock content, whether the run built it and in how long): per side the runs, the distinct lock
    contents, the images they used and those these runs built, then one row per image. Images are keyed by
    lock content, so images = lock contents on each side unless the last column says otherwise.

    `engine_rows` (`lineage.image_rows()` when the engine answers, else the build ledger's rows) add each
    image's parent (a delta build), the build time of an image an earlier run of the season built (its run
    folders were run again: "found") and the disk it adds beyond the images counted before it ("-" without
    the engine)."""
    import json

    runs = []
    for path in sorted((Path(out) / "logs").glob("pr-*/*/run.json")):
        try:
            r = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a run being written
        if not r.get("image") or not r.get("lock_sha"):
            continue  # a run that never reached its image (a refused lock, a missing commit)
        pr = path.parent.parent.name.removeprefix("pr-")
        seconds = float((r.get("timings") or {}).get("image_s") or 0.0) if r.get("image_built") else 0.0
        side = r["image"].split(":")[0].rpartition("-")[2]
        runs.append(_ImageRun(int(pr) if pr.isdigit() else 0, r["image"], side, r["lock_sha"], seconds))
    if not runs:
        return "No run folder names an image yet.\n"
    engine = {row["tag"]: row for row in engine_rows or []}
    order = {tag: i for i, tag in enumerate(engine)}
    summary = [
        "| side | runs | lock contents | images used | built by these runs | build s | images = lock contents |",
        "|---|---|---|---|---|---|---|",
    ]
    table = [
        "| image | side | lock content | PRs | runs | built | build s | parent (delta) | disk MB added |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for side in sorted({r.side for r in runs}):
        mine = [r for r in runs if r.side == side]
        locks_of: dict[str, set] = {}
        images_of: dict[str, set] = {}
        for r in mine:
            locks_of.setdefault(r.image, set()).add(r.lock)
            images_of.setdefault(r.lock, set()).add(r.image)
        odd = [t for t, locks in locks_of.items() if len(locks) > 1]
        odd += [lock for lock, tags in images_of.items() if len(tags) > 1]
        built = {r.image: r for r in mine if r.built_s}
        summary.append(
            f"| {side} | {len(mine)} | {len(images_of)} | {len(locks_of)} | {len(built)} "
            f"| {sum(r.built_s for r in built.values()):.0f} "
            f"| {'yes' if not odd else 'no: ' + ', '.join(_key(x) for x in odd)} |"
        )
        for tag in sorted(locks_of, key=lambda t: (order.get(t, len(order)), t)):
            used = [r for r in mine if r.image == tag]
            row = engine.get(tag, {})
            if tag in built:
                how, seconds = f"built (#{built[tag].pr})", built[tag].built_s
            else:
                how, seconds = "found", float(row.get("build_s") or 0.0)
            parent = _key(row["parent"]) if row.get("parent") else ("none" if row else "-")
            adds = f"{row['adds_mb']:.0f}" if row.get("adds_mb") is not None else "-"
            table.append(
                f"| `{_key(tag)}` | {side} | {', '.join(sorted(_key(x) for x in locks_of[tag]))} "
                f"| {', '.join(f'#{n}' for n in sorted({r.pr for r in used}))} | {len(used)} | {how} "
                f"| {seconds:.0f} | {parent} | {adds} |"
            )
    return "\n".join([*summary, "", *table]) + "\n"


@dataclass(frozen=True)
class _ImageRun:
    pr: int
    image: str
    side: str
    lock: str
    built_s: float  # 0 when the run found its image


def _key(name: str) -> str:
    """The short form of an image tag or a content hash: the first 16 characters after its last colon."""
    return name.split(":")[-1][:16]


def _count(row, kind: str) -> str:
    """Tests per runner, `pytest + Playwright`, for a PR whose runs had a Playwright side (its `sides`) or
    whose lists hold Playwright tests; one number for a pytest-only PR (an extraction.parquet of before 0.3
    names the backend's `fail_to_pass`)."""
    backend = getattr(row, f"backend_{kind}", getattr(row, kind, None))
    frontend = getattr(row, f"frontend_{kind}", None)
    b, f = (len(x) if x is not None else 0 for x in (backend, frontend))
    sides = getattr(row, "sides", None)
    both = f or (sides is not None and "frontend" in list(sides))
    return f"{b} + {f}" if both else str(b)


def _table(extraction, prs, domains: dict, valid_ids: set, rejected_by: dict) -> str:
    titles = dict(zip(prs["number"], prs["title"], strict=False))
    rows = [
        "F2P and P2P count pytest tests, `+` Playwright tests for a PR whose runs had a Playwright side.",
        "",
        "| PR | title | domain | extraction | F2P | P2P | scope files | s | instance / reason |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in extraction.sort_values("number", ascending=False).itertuples():
        f2p, p2p = _count(r, "fail_to_pass"), _count(r, "pass_to_pass")
        if r.number in valid_ids:
            verdict = "valid"
        elif r.number in rejected_by:
            verdict = "rejected: " + _short("; ".join(rejected_by[r.number]), 60)
        else:
            verdict = _short(r.error, 70) if r.status != "ok" else "(not packaged yet)"
        files = getattr(r, "test_scope", None)
        scope = len(files) if files is not None and len(files) else "suite"
        rows.append(
            f"| #{r.number} | {_short(titles.get(r.number, ''), 50)} | {domains.get(r.number) or ''} | {r.status} "
            f"| {f2p} | {p2p} | {scope} "
            f"| {r.duration_s:.0f} | {verdict} |"
        )
    return "\n".join(rows)
