"""Curation stage 3 (distribution check): what the kept PRs look like, against the season's target mix.

Each kept PR is classified `backend_only` / `frontend_only` / `fullstack` from the paths its patch changes
(the source record's dirs decide); a PR touching neither side is `other` and left out of the mix, with
its reason. Counts by domain, merge month, size bucket and label go to `distribution.parquet` (long
format), a PNG chart and a markdown summary. The comparison with the target mix is pure; the season
decides whether being off is a warning or a failure (`check_distribution`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tasks_lib.core.constants import StackDomain
from tasks_lib.core.errors import InputError, PbenchError
from tasks_lib.curation.filtering import FilterVerdict, pr_stack_domain
from tasks_lib.sources.crawl.base import PullRequest, write_table_atomic
from tasks_lib.sources.record import SourceRecord

DOMAINS = tuple(str(d) for d in StackDomain)
OTHER = "other"
NO_LABEL = "(none)"
DIMENSIONS = ("domain", "month", "size", "label", "excluded")
# Size buckets on non-test changed lines (lock files excluded, as in the filter): upper bound exclusive.
SIZE_BUCKETS: tuple[tuple[str, int | None], ...] = (
    ("XS", 10),
    ("S", 50),
    ("M", 200),
    ("L", 1000),
    ("XL", None),
)
OTHER_REASON = "no non-test change under the source's backend or frontend dir"

DISTRIBUTION_SCHEMA = pa.schema(
    [
        pa.field("dimension", pa.string(), nullable=False),
        pa.field("value", pa.string(), nullable=False),
        pa.field("count", pa.int64(), nullable=False),
        pa.field("fraction", pa.float64(), nullable=False),
        pa.field("target", pa.float64(), nullable=True),
        pa.field("deviation", pa.float64(), nullable=True),
    ]
)


class DistributionError(PbenchError):
    """The kept PRs' domain mix is further from the season's target than its tolerance allows."""


def size_bucket(lines: int) -> str:
    for name, upper in SIZE_BUCKETS:
        if upper is None or lines < upper:
            return name
    raise AssertionError("unreachable: the last bucket is open")


def validate_target(target: dict[str, float], tolerance: float) -> dict[str, float]:
    """A target mix is fractions per domain summing to 1; refuse anything else, naming the problem."""
    unknown = sorted(set(target) - set(DOMAINS))
    if unknown:
        raise InputError(f"target mix: unknown domain(s) {', '.join(unknown)}; use {', '.join(DOMAINS)}")
    for domain, value in target.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise InputError(f"target mix: {domain} must be a fraction between 0 and 1, got {value!r}")
    if target and not math.isclose(sum(target.values()), 1.0, abs_tol=1e-6):
        raise InputError(f"target mix: fractions must sum to 1, got {sum(target.values()):.4f}")
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or not 0 <= tolerance <= 1:
        raise InputError(f"target mix: tolerance must be a fraction between 0 and 1, got {tolerance!r}")
    return {d: float(target.get(d, 0.0)) for d in DOMAINS} if target else {}


@dataclass(frozen=True)
class DistributionReport:
    total_kept: int
    counts: dict[str, dict[str, int]]  # dimension -> value -> count
    fractions: dict[str, float]  # domain -> share of the mix
    target: dict[str, float]  # domain -> target share ({} when the season sets none)
    tolerance: float
    deviations: dict[str, float]  # domain -> actual - target
    dropped: dict[int, str]  # PR number -> why it is not in the mix
    ok: bool
    messages: tuple[str, ...] = ()  # what is off (empty when ok)
    notes: tuple[str, ...] = field(default=())  # what was left out, and why

    @property
    def in_mix(self) -> int:
        return sum(self.counts.get("domain", {}).values())

    def rows(self) -> list[dict[str, Any]]:
        """Long format: one row per (dimension, value). Fractions are shares of the mix, except for
        `excluded` (share of all kept PRs); label shares can sum above 1 (a PR has several labels)."""
        out = []
        for dimension in DIMENSIONS:
            base = self.total_kept if dimension == "excluded" else self.in_mix
            for value, count in self.counts.get(dimension, {}).items():
                is_domain = dimension == "domain" and bool(self.target)
                out.append(
                    {
                        "dimension": dimension,
                        "value": value,
                        "count": count,
                        "fraction": count / base if base else 0.0,
                        "target": self.target.get(value) if is_domain else None,
                        "deviation": self.deviations.get(value) if is_domain else None,
                    }
                )
        return out


def _ordered(counter: Counter[str], order: Iterable[str] | None = None) -> dict[str, int]:
    if order is not None:
        return {k: counter.get(k, 0) for k in order}
    return dict(sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))


def build_distribution(
    prs: Iterable[PullRequest],
    verdicts: Iterable[FilterVerdict],
    source: SourceRecord,
    target: dict[str, float] | None = None,
    tolerance: float = 0.1,
) -> DistributionReport:
    """Tabulate the kept PRs and compare their domain mix with `target` (±`tolerance`, absolute). Pure."""
    mix_target = validate_target(target or {}, tolerance)
    by_number = {v.number: v for v in verdicts}
    kept = [pr for pr in prs if pr.number in by_number and by_number[pr.number].kept]
    domain, month, size, label = Counter(), Counter(), Counter(), Counter()
    dropped: dict[int, str] = {}
    for pr in sorted(kept, key=lambda p: p.number):
        stack = pr_stack_domain(pr, source)
        if stack is None:
            dropped[pr.number] = f"{OTHER}: {OTHER_REASON}"
            continue
        domain[str(stack)] += 1
        month[pr.merged_at.strftime("%Y-%m")] += 1
        size[size_bucket(by_number[pr.number].changed_lines)] += 1
        label.update(dict.fromkeys(pr.labels or (NO_LABEL,), 1))
    in_mix = sum(domain.values())
    fractions = {d: domain.get(d, 0) / in_mix if in_mix else 0.0 for d in DOMAINS}
    deviations = {d: round(fractions[d] - mix_target[d], 6) for d in DOMAINS} if mix_target else {}

    messages = []
    if mix_target and in_mix == 0:
        messages.append("no kept PR falls in the mix: nothing to compare with the target")
    elif mix_target:
        for d in DOMAINS:
            if abs(deviations[d]) > tolerance + 1e-9:
                messages.append(
                    f"{d}: {fractions[d]:.0%} of the mix ({domain.get(d, 0)}/{in_mix}), target "
                    f"{mix_target[d]:.0%} ± {tolerance:.0%}"
                )
    notes = []
    if dropped:
        notes.append(f"{len(dropped)} kept PR(s) left out of the mix as '{OTHER}' ({OTHER_REASON})")
    if not mix_target:
        notes.append("the season sets no target mix: not compared")
    return DistributionReport(
        total_kept=len(kept),
        counts={
            "domain": _ordered(domain, DOMAINS),
            "month": dict(sorted(month.items())),
            "size": _ordered(size, [name for name, _ in SIZE_BUCKETS]),
            "label": _ordered(label),
            "excluded": {OTHER: len(dropped)} if dropped else {},
        },
        fractions=fractions,
        target=mix_target,
        tolerance=float(tolerance),
        deviations=deviations,
        dropped=dropped,
        ok=not messages,
        messages=tuple(messages),
        notes=tuple(notes),
    )


def check_distribution(report: DistributionReport, fail: bool) -> list[str]:
    """Warnings when the mix is off; a DistributionError instead when the season says being off fails."""
    if report.ok:
        return []
    if fail:
        raise DistributionError("distribution off target: " + "; ".join(report.messages))
    return list(report.messages)


def distribution_table(report: DistributionReport) -> pa.Table:
    return pa.Table.from_pylist(report.rows(), schema=DISTRIBUTION_SCHEMA)


def write_distribution_parquet(report: DistributionReport, path: Path | str) -> Path:
    return write_table_atomic(distribution_table(report), path)


def read_distribution_parquet(path: Path | str) -> pa.Table:
    return pq.read_table(path).select(DISTRIBUTION_SCHEMA.names).cast(DISTRIBUTION_SCHEMA)


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:.1%}"


def _signed(value: float | None) -> str:
    return "" if value is None else f"{value * 100:+.1f} pt"


def to_markdown(report: DistributionReport, title: str = "Distribution check") -> str:
    """A summary for humans (published by the flow as a Prefect markdown artifact)."""
    verdict = ("on target" if report.target else "no target set") if report.ok else "**off target**"
    lines = [
        f"# {title}",
        "",
        f"{report.total_kept} kept PRs, {report.in_mix} in the mix; {verdict}"
        + (f" (tolerance ±{report.tolerance:.0%})." if report.target else "."),
        "",
    ]
    lines += [f"- ⚠️ {m}" for m in report.messages] + [f"- {n}" for n in report.notes]
    if report.messages or report.notes:
        lines.append("")
    rows = [r for r in report.rows() if r["dimension"] == "domain"]
    lines += ["## Domain", "", "| domain | PRs | share | target | deviation |", "|---|---:|---:|---:|---:|"]
    lines += [
        f"| {r['value']} | {r['count']} | {_pct(r['fraction'])} | {_pct(r['target'])} | {_signed(r['deviation'])} |"
        for r in rows
    ]
    for dimension, heading in (
        ("size", "Size (non-test changed lines)"),
        ("month", "Merge month"),
        ("label", "Label"),
    ):
        values = [r for r in report.rows() if r["dimension"] == dimension]
        lines += ["", f"## {heading}", "", f"| {dimension} | PRs | share |", "|---|---:|---:|"]
        lines += [f"| {r['value']} | {r['count']} | {_pct(r['fraction'])} |" for r in values]
    if report.dropped:
        lines += ["", "## Left out of the mix", ""]
        lines += [f"- #{number}: {reason}" for number, reason in sorted(report.dropped.items())]
    return "\n".join(lines) + "\n"


def calendar_months(counts: dict[str, int]) -> dict[str, int]:
    """Every calendar month from the first to the last with a count ("YYYY-MM"), the empty ones as 0."""
    if not counts:
        return {}
    first, last = min(counts), max(counts)
    year, month = int(first[:4]), int(first[5:7])
    out = {}
    while f"{year:04d}-{month:02d}" <= last:
        key = f"{year:04d}-{month:02d}"
        out[key] = counts.get(key, 0)
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return out


def write_chart(report: DistributionReport, path: Path | str) -> Path:
    """A 2×2 PNG: domain share vs target, size buckets, PRs per merge month, top labels."""
    # Imported here: matplotlib is slow to import and only this function needs it. The object API with
    # the Agg canvas never touches pyplot's global backend state.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(12, 8), dpi=100)
    FigureCanvasAgg(fig)
    (ax_domain, ax_size), (ax_month, ax_label) = fig.subplots(2, 2)

    xs = range(len(DOMAINS))
    ax_domain.bar([x - 0.2 for x in xs], [report.fractions[d] for d in DOMAINS], width=0.4, label="kept")
    if report.target:
        ax_domain.bar([x + 0.2 for x in xs], [report.target[d] for d in DOMAINS], width=0.4, label="target")
    ax_domain.set_xticks(list(xs), DOMAINS)
    ax_domain.set_ylim(0, 1)
    ax_domain.set_title("Stack domain (share of the mix)" + ("" if report.ok else " — OFF TARGET"))
    ax_domain.legend()

    from matplotlib.ticker import MaxNLocator

    sizes = report.counts["size"]
    ax_size.bar(list(sizes), list(sizes.values()))
    ax_size.set_title("Size bucket (non-test changed lines)")
    ax_size.yaxis.set_major_locator(MaxNLocator(integer=True))

    months = calendar_months(report.counts["month"])
    ax_month.bar(range(len(months)), list(months.values()))
    ax_month.yaxis.set_major_locator(MaxNLocator(integer=True))
    step = max(1, len(months) // 12)
    ax_month.set_xticks(list(range(0, len(months), step)), list(months)[::step], rotation=45, ha="right")
    ax_month.set_title("PRs per merge month")

    labels = dict(list(report.counts["label"].items())[:10])
    ax_label.barh(list(labels)[::-1], list(labels.values())[::-1])
    ax_label.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_label.set_title("Top labels")

    fig.suptitle(f"{report.total_kept} kept PRs, {report.in_mix} in the mix")
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, format="png")
    tmp.replace(path)
    return path
