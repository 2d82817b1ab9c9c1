"""Distribution check (curation stage 3): domains from the source's dirs, tabulations, the target mix."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tasks_lib.core.errors import InputError, PbenchError
from tasks_lib.curation import distribution
from tasks_lib.curation.distribution import (
    DISTRIBUTION_SCHEMA,
    DistributionError,
    build_distribution,
    check_distribution,
    size_bucket,
)
from tasks_lib.curation.filtering import FilterVerdict, filter_prs, load_filter_rules
from tasks_lib.sources.crawl.base import ChangedFile, PullRequest
from tasks_lib.sources.record import parse_source

SHA = "b" * 40
SOURCE_TABLE = {
    "name": "shop",
    "repo": "acme/shop",
    "clone": {"url": "https://example.org/shop.git"},
    "backend": {"dir": "api", "python_version": "3.11", "installer": "uv", "lock_files": ["api/uv.lock"]},
    "frontend": {
        "dir": "web",
        "node_version": "20",
        "package_manager": "bun",
        "lock_files": ["web/bun.lock"],
        "serve_command": "bun run dev",
    },
    "test_files": {"patterns": ["api/tests/**", "web/tests/**"]},
}
BACKEND = [("api/app/a.py", 20, 0), ("api/tests/test_a.py", 5, 0)]
FRONTEND = [("web/src/a.tsx", 20, 0), ("web/tests/a.spec.ts", 5, 0)]
FULLSTACK = [("api/app/a.py", 10, 0), ("web/src/a.tsx", 10, 0), ("api/tests/test_a.py", 5, 0)]
# Changes only outside both dirs (plus tests): kept by the filter, but "other" for the mix.
ROOT_ONLY = [("scripts/build.py", 20, 0), ("api/tests/test_a.py", 5, 0)]


@pytest.fixture(scope="module")
def source():
    return parse_source(copy.deepcopy(SOURCE_TABLE), Path("/virtual/shop.toml"))


def make_pr(number, files, merged="2025-03-02", labels=("feature",)) -> PullRequest:
    return PullRequest(
        source="shop",
        repo="acme/shop",
        number=number,
        title=f"✨ PR {number}",
        body="",
        author="alice",
        author_login_raw="alice",
        author_is_bot=False,
        labels=labels,
        files=tuple(ChangedFile(*f) for f in files),
        additions=0,
        deletions=0,
        changed_files=len(files),
        merge_commit=SHA,
        base_commit=None,
        head_commit=SHA,
        base_ref="main",
        head_ref="x",
        default_branch="main",
        created_at=datetime(2025, 1, 1, tzinfo=UTC),
        merged_at=datetime.fromisoformat(merged).replace(tzinfo=UTC),
        url="u",
    )


def report_for(source, prs, target=None, tolerance=0.1):
    verdicts = filter_prs(prs, source, load_filter_rules(source))
    return build_distribution(prs, verdicts, source, target, tolerance)


def mix(source, backend=0, frontend=0, fullstack=0, other=0):
    layouts = [BACKEND] * backend + [FRONTEND] * frontend + [FULLSTACK] * fullstack + [ROOT_ONLY] * other
    return [make_pr(i + 1, files) for i, files in enumerate(layouts)]


def test_domains_come_from_the_source_dirs(source):
    """Classification uses the source record's backend/frontend dirs on the patch (non-test) paths;
    a PR touching neither is 'other', left out of the mix with its reason."""
    report = report_for(source, mix(source, backend=2, frontend=1, fullstack=1, other=1))
    assert report.counts["domain"] == {"backend_only": 2, "frontend_only": 1, "fullstack": 1}
    assert report.total_kept == 5 and report.in_mix == 4
    assert report.dropped == {5: "other: no non-test change under the source's backend or frontend dir"}
    assert report.counts["excluded"] == {"other": 1}
    # Tests under web/ do not make a backend change fullstack: the agent only changes the backend.
    backend_with_e2e = make_pr(9, [("api/app/a.py", 5, 0), ("web/tests/a.spec.ts", 10, 0)])
    assert report_for(source, [backend_with_e2e]).counts["domain"]["backend_only"] == 1


def test_only_kept_prs_are_counted(source):
    """Rejected PRs (here: no test changes) never enter the distribution."""
    prs = mix(source, backend=1) + [make_pr(7, [("api/app/b.py", 5, 0)])]
    report = report_for(source, prs)
    assert report.total_kept == 1 and report.in_mix == 1


@pytest.mark.parametrize(
    ("lines", "bucket"),
    [(0, "XS"), (9, "XS"), (10, "S"), (49, "S"), (50, "M"), (199, "M"), (200, "L"), (999, "L"), (1000, "XL")],
)
def test_size_buckets(lines, bucket):
    """Bucket edges on non-test changed lines: upper bounds are exclusive."""
    assert size_bucket(lines) == bucket


def test_tabulation_by_month_size_and_label(source):
    """Months are YYYY-MM in order, sizes in bucket order, labels by count (unlabelled as '(none)')."""
    prs = [
        make_pr(1, BACKEND, merged="2025-04-30", labels=("feature", "backend")),
        make_pr(2, FRONTEND, merged="2025-03-01", labels=()),
        make_pr(
            3, [("api/app/a.py", 300, 0), ("api/tests/t.py", 1, 0)], merged="2025-04-01", labels=("bug",)
        ),
    ]
    report = report_for(source, prs)
    assert report.counts["month"] == {"2025-03": 1, "2025-04": 2}
    assert report.counts["size"] == {"XS": 0, "S": 2, "M": 0, "L": 1, "XL": 0}
    assert report.counts["label"] == {"(none)": 1, "backend": 1, "bug": 1, "feature": 1}


def test_within_tolerance_is_ok(source):
    """Deviations are actual share minus target share; inside ±tolerance the check passes silently."""
    report = report_for(
        source,
        mix(source, backend=5, frontend=3, fullstack=2),
        {"backend_only": 0.5, "frontend_only": 0.25, "fullstack": 0.25},
        tolerance=0.1,
    )
    assert report.ok and report.messages == ()
    assert report.deviations == {"backend_only": 0.0, "frontend_only": 0.05, "fullstack": -0.05}
    assert check_distribution(report, fail=True) == []


def test_off_target_warns_or_fails(source):
    """Off the mix: a warning per domain that is off, or a DistributionError (a PbenchError) if the season
    says being off fails."""
    report = report_for(
        source,
        mix(source, backend=9, fullstack=1),
        {"backend_only": 0.4, "frontend_only": 0.3, "fullstack": 0.3},
        tolerance=0.1,
    )
    assert not report.ok
    warnings = check_distribution(report, fail=False)
    assert [w.split(":")[0] for w in warnings] == ["backend_only", "frontend_only", "fullstack"]
    assert "90% of the mix (9/10), target 40% ± 10%" in warnings[0]
    with pytest.raises(DistributionError, match="backend_only") as info:
        check_distribution(report, fail=True)
    assert isinstance(info.value, PbenchError)


def test_empty_mix_with_a_target_is_off(source):
    """No PR in the mix cannot satisfy a target: it is reported, never silently 'ok'."""
    report = report_for(source, [], {"backend_only": 1.0})
    assert not report.ok and "nothing to compare" in report.messages[0]


def test_no_target_means_no_comparison(source):
    """A season without a target mix tabulates only; the report says it was not compared."""
    report = report_for(source, mix(source, backend=1))
    assert report.ok and report.target == {} and report.deviations == {}
    assert any("not compared" in n for n in report.notes)


@pytest.mark.parametrize(
    ("target", "tolerance", "message"),
    [
        ({"backend": 1.0}, 0.1, "unknown domain"),
        ({"backend_only": 0.5, "fullstack": 0.2}, 0.1, "must sum to 1"),
        ({"backend_only": 1.5, "fullstack": -0.5}, 0.1, "between 0 and 1"),
        ({"backend_only": 1.0}, 2, "tolerance"),
    ],
)
def test_bad_target_mix_is_an_input_error(source, target, tolerance, message):
    """A malformed season target is the operator's input error, named precisely."""
    with pytest.raises(InputError, match=message):
        report_for(source, [], target, tolerance)


def test_parquet_is_long_format(source, tmp_path):
    """distribution.parquet: (dimension, value, count, fraction[, target, deviation]); domain shares of the
    mix sum to 1 and carry their target; other dimensions leave target null."""
    report = report_for(
        source,
        mix(source, backend=2, frontend=1, fullstack=1, other=1),
        {"backend_only": 0.5, "frontend_only": 0.25, "fullstack": 0.25},
    )
    path = distribution.write_distribution_parquet(report, tmp_path / "distribution.parquet")
    assert pq.read_schema(path).remove_metadata() == DISTRIBUTION_SCHEMA
    df = pq.read_table(path).to_pandas()
    assert set(df.dimension) == {"domain", "month", "size", "label", "excluded"}
    domain = df[df.dimension == "domain"]
    assert domain.fraction.sum() == pytest.approx(1.0) and domain.target.notna().all()
    assert df[df.dimension != "domain"].target.isna().all()
    excluded = df[df.dimension == "excluded"].iloc[0]
    assert (excluded.value, excluded["count"], excluded.fraction) == ("other", 1, pytest.approx(0.2))


def test_markdown_and_chart(source, tmp_path):
    """The markdown summary shows the domain table and what is off; the chart is a real PNG file."""
    report = report_for(source, mix(source, backend=3, other=1), {"backend_only": 0.5, "fullstack": 0.5})
    text = distribution.to_markdown(report)
    assert "**off target**" in text and "| backend_only | 3 | 100.0% | 50.0% | +50.0 pt |" in text
    assert "#4: other" in text
    png = distribution.write_chart(report, tmp_path / "charts" / "distribution.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_verdict_sizes_are_reused(source):
    """Size buckets use the filter's changed_lines (same size measure in both stages)."""
    pr = make_pr(1, BACKEND)
    verdict = FilterVerdict(1, True, (), 0.5, "backend_only", "default", pr.title, pr.merged_at, 5000)
    report = build_distribution([pr], [verdict], source)
    assert report.counts["size"]["XL"] == 1


def test_the_month_axis_has_every_calendar_month():
    from tasks_lib.curation.distribution import calendar_months

    assert calendar_months({"2025-11": 2, "2026-02": 1}) == {
        "2025-11": 2,
        "2025-12": 0,
        "2026-01": 0,
        "2026-02": 1,
    }
    assert calendar_months({}) == {}
