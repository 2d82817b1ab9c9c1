"""The demo curation season end to end through Prefect and the real engine (issue 3 must-shows)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from cli_kit import pbench_without_prefect

from tasks_lib.curation.extraction import changed_between_runs
from tasks_lib.sources.demo_repo import DEMO_PRS, FLAKY_MISS_BOUND, FLAKY_TEST_IDS

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _instances(out):
    return {i["pr_number"]: i for i in map(json.loads, (out / "instances.jsonl").read_text().splitlines())}


def test_feature_and_bugfix_prs_become_valid_instances(curated_demo):
    """Every label comes from executed tests: the feature and bugfix PRs yield instances that validate."""
    from tasks_lib.corpus import schema
    from tasks_lib.sources.record import load_source

    instances = _instances(curated_demo["out"])
    source = load_source("demo")
    for kind in ("feature", "bugfix"):
        inst = instances[DEMO_PRS[kind]]
        assert schema.validate_instance(inst, source) == []
        assert inst["fail_to_pass"]["backend"] and inst["pass_to_pass"]["backend"]
    bugfix = instances[DEMO_PRS["bugfix"]]
    assert bugfix["fail_to_pass"]["backend"] == ["tests/test_items.py::test_read_item_not_found"]
    assert not (set(bugfix["fail_to_pass"]["backend"]) & set(bugfix["pass_to_pass"]["backend"]))
    # Loadable by analysts, and by `datasets` from the export folder.
    assert len(pd.read_parquet(curated_demo["out"] / "instances.parquet")) == len(instances)
    import datasets

    assert datasets.load_from_disk(str(curated_demo["out"] / "hf"))["test"].num_rows == len(instances)
    assert "FAIL_TO_PASS tests" in (curated_demo["out"] / "hf" / "README.md").read_text()


def test_docs_and_bot_prs_are_rejected_with_reasons(curated_demo):
    """Non-task PRs never reach extraction, and the filter says why."""
    verdicts = pd.read_parquet(curated_demo["out"] / "filter.parquet").set_index("number")
    docs, bot = verdicts.loc[DEMO_PRS["docs"]], verdicts.loc[DEMO_PRS["bot_bump"]]
    assert not docs["kept"] and "docs_only" in list(docs["reasons"])
    assert not bot["kept"] and "bot_author" in list(bot["reasons"])
    extracted = set(pd.read_parquet(curated_demo["out"] / "extraction.parquet")["number"])
    assert DEMO_PRS["docs"] not in extracted and DEMO_PRS["bot_bump"] not in extracted


def test_collection_error_pr_is_rescued_by_the_fallback(curated_demo):
    """When the base run dies at collection, F2P falls back to the tests the test patch adds that pass at head."""
    ext = pd.read_parquet(curated_demo["out"] / "extraction.parquet").set_index("number")
    row = ext.loc[DEMO_PRS["collection_error"]]
    assert row["status"] == "ok" and row["fallback_used"]
    inst = _instances(curated_demo["out"])[DEMO_PRS["collection_error"]]
    assert inst["fail_to_pass"]["backend"] and all(
        t.startswith("tests/test_slugs.py::") for t in inst["fail_to_pass"]["backend"]
    )
    assert "fallback" in inst["notes"]


def test_flaky_test_is_in_neither_list_and_reported(curated_demo):
    """A test whose outcome changes across repeated runs is excluded from both lists and recorded as flaky.

    Exact whatever the draws: the flaky list holds exactly the planted copies whose outcomes changed between
    the runs of one side (read from each run's run.json), no planted copy is in either list (none ever
    passes), and each one reported is named in the instance's notes. Chance: the test fails only when no copy
    changed at all, with probability FLAKY_MISS_BOUND = (1/64)**4 = 2**-24 (about 6.0e-8 per run; the
    derivation is in the planted test's docstring, checked by tests/unit/test_demo_repo.py)."""
    ext = pd.read_parquet(curated_demo["out"] / "extraction.parquet").set_index("number")
    row = ext.loc[DEMO_PRS["flaky"]]
    assert row["head_runs"] >= 3 and row["base_runs"] >= 2
    changed = changed_between_runs(curated_demo["out"] / "logs" / f"pr-{DEMO_PRS['flaky']}", FLAKY_TEST_IDS)
    flagged = set(row["flaky_tests"])
    assert flagged == changed, (flagged, changed)
    assert flagged, f"no planted copy changed outcome (probability {FLAKY_MISS_BOUND:.1e})"
    inst = _instances(curated_demo["out"])[DEMO_PRS["flaky"]]
    listed = set(inst["fail_to_pass"]["backend"] + inst["pass_to_pass"]["backend"])
    assert not listed & set(FLAKY_TEST_IDS)
    assert all(t in inst["notes"] for t in flagged)


def test_outputs_and_tiers(curated_demo):
    """The season folder holds every stage's output; tiers follow the target model's cutoff (2025-06-01)."""
    out = curated_demo["out"]
    for name in (
        "prs.parquet",
        "filter.parquet",
        "distribution.parquet",
        "distribution.png",
        "extraction.parquet",
        "instances.parquet",
        "instances.jsonl",
        "rejected.parquet",
        "season.json",
    ):
        assert (out / name).exists(), name
    for inst in _instances(out).values():
        assert inst["contamination_tier"] == ("held_out" if inst["created_at"] > "2025-06-01" else "public")


def test_rerun_of_the_season_starts_no_container(curated_demo, container_counter):
    """A second run of the same season is answered from the cache: the Docker daemon sees no container."""
    from flows.curation import run_curation

    before = (curated_demo["out"] / "instances.jsonl").read_text()
    with container_counter() as counted:
        run_curation("demo")
    assert counted.created == []
    assert (curated_demo["out"] / "instances.jsonl").read_text() == before


def test_a_season_already_up_to_date_is_answered_before_prefect_starts(curated_demo, container_counter):
    """`pbench curate` with the inputs of the last completed run finds its fingerprint and untouched outputs:
    with the Prefect API pointed at a closed port (any use of it would fail) it prints the same summary, starts
    no container and leaves every output as it was."""
    from tasks_lib.curation import state as season_state

    out = curated_demo["out"]
    before = season_state._outputs(out)
    with container_counter() as counted:
        res = pbench_without_prefect("curate", "--season", "demo")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "up to date" in res.stderr and "Prefect not started" in res.stderr
    assert f"{curated_demo['summary']['instances']} instance(s)" in res.stderr
    assert counted.created == [] and season_state._outputs(out) == before


def test_an_offline_look_keeps_a_finished_season_up_to_date(curated_demo, container_counter):
    """Rule (issue 39, item 3): `pbench curate --until crawl` on a finished season rewrites nothing the season
    holds and never discards its state: the next `pbench curate` is still answered before Prefect starts."""
    from flows.curation import run_curation

    run_curation("demo", until="crawl")
    with container_counter() as counted:
        res = pbench_without_prefect("curate", "--season", "demo")
    assert res.returncode == 0 and "up to date" in res.stderr, res.stderr[-3000:]
    assert counted.created == []


def test_frontend_only_and_fullstack_prs_yield_playwright_fail_to_pass(curated_demo):
    """Full-stack shipping: the frontend-only PR and the fullstack PR become instances whose FAIL_TO_PASS holds
    Playwright tests (ids `tests/<spec>:line:col › … › title`, frontend-relative), from live-stack runs."""
    instances = _instances(curated_demo["out"])
    frontend = instances[DEMO_PRS["frontend_only"]]
    fullstack = instances[DEMO_PRS["fullstack"]]
    assert frontend["stack_domain"] == "frontend_only" and fullstack["stack_domain"] == "fullstack"
    assert frontend["fail_to_pass"]["frontend"] and fullstack["fail_to_pass"]["frontend"]
    assert fullstack["fail_to_pass"]["backend"]
    for test_id in frontend["fail_to_pass"]["frontend"] + fullstack["fail_to_pass"]["frontend"]:
        assert test_id.startswith("tests/") and " › " in test_id, test_id
    # The frontend tests that existed before each PR pass on both sides: they are the PASS_TO_PASS guard.
    assert frontend["pass_to_pass"]["frontend"]
    assert frontend["test_patch_frontend"] and not frontend["test_patch_backend"]


def test_a_refreshed_pr_is_extracted_again_and_only_it(curated_demo, container_counter):
    """`--refresh N` (a rule change that touches only some PRs: CHANGELOG.md): that PR's extraction runs again
    whatever its cached result, the others are answered from the cache, and the instances are the same."""
    import time

    from flows.curation import run_curation

    out, number = curated_demo["out"], DEMO_PRS["bugfix"]
    before = (out / "instances.jsonl").read_text()
    started = time.time()
    with container_counter() as counted:
        run_curation("demo", refresh=[number])
    assert counted.created, "the refreshed PR ran no container"
    runs = sorted((out / "logs").glob("pr-*/*/run.json"))
    fresh = {p.parent.parent.name for p in runs if p.stat().st_mtime >= started}
    assert fresh == {f"pr-{number}"}
    # None of its runs is taken over from its earlier extraction (tasks_lib/curation/resume.py).
    assert all(p.stat().st_mtime >= started for p in runs if p.parent.parent.name == f"pr-{number}")
    assert (out / "instances.jsonl").read_text() == before
