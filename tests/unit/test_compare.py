"""`pbench compare`: two runs of one selection, the flips each way and honest statistics, each checked against a
reference computation (scipy's exact binomial test and Wilson interval, a drawn bootstrap)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from tasks_lib.core.errors import InputError
from tasks_lib.judge import compare

IDS = [f"acme__shop-{i}" for i in range(1, 21)]


@pytest.mark.parametrize("k, n", [(0, 10), (1, 4), (37, 100), (100, 100), (61, 102)])
def test_the_score_interval_is_wilsons(k, n):
    ref = stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
    assert compare.wilson(k, n) == pytest.approx((ref.low, ref.high), abs=1e-9)


@pytest.mark.parametrize("a_only, b_only", [(0, 0), (0, 5), (3, 9), (7, 7), (1, 12), (20, 4)])
def test_mcnemar_is_the_exact_binomial_test_over_the_flips(a_only, b_only):
    expected = 1.0 if a_only + b_only == 0 else stats.binomtest(a_only, a_only + b_only, 0.5).pvalue
    assert compare.mcnemar_exact(a_only, b_only) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("a_only, b_only, total", [(3, 9, 100), (0, 4, 20), (5, 0, 30), (10, 10, 40)])
def test_the_bootstrap_interval_is_exact_and_agrees_with_drawing(a_only, b_only, total):
    """The exact percentile interval equals a drawn bootstrap's (200,000 paired resamples) to one instance."""
    diffs = np.array([-1] * a_only + [1] * b_only + [0] * (total - a_only - b_only))
    rng = np.random.default_rng(7)
    means = diffs[rng.integers(0, total, size=(200_000, total))].mean(axis=1)
    low, high = compare.bootstrap_interval(a_only, b_only, total)
    assert low == pytest.approx(np.quantile(means, 0.025, method="inverted_cdf"), abs=1 / total + 1e-9)
    assert high == pytest.approx(np.quantile(means, 0.975, method="inverted_cdf"), abs=1 / total + 1e-9)
    assert low <= (b_only - a_only) / total <= high


def test_the_flips_are_exact_and_a_different_selection_is_refused():
    """Rule: gold (all resolved), empty (none) and half-gold runs: the lists of flips are exactly the instances
    resolved by one only; runs over different selections are refused, naming the difference."""
    gold = dict.fromkeys(IDS, True)
    empty = dict.fromkeys(IDS, False)
    half = {i: n % 2 == 0 for n, i in enumerate(IDS)}
    r = compare.compare(empty, gold, ("empty", "gold"))
    assert r["resolved_by_b_only"] == sorted(IDS) and r["resolved_by_a_only"] == []
    assert r["difference"] == 1.0 and r["mcnemar_p"] == pytest.approx(2 / 2**20)
    r = compare.compare(half, gold, ("half", "gold"))
    assert r["resolved_by_b_only"] == sorted(i for i in IDS if not half[i]) and r["both"] == 10
    r = compare.compare(half, half)
    assert r["mcnemar_p"] == 1.0 and r["difference_interval"] == [0.0, 0.0]
    with pytest.raises(InputError, match=r"1 instance\(s\) only in A \(acme__shop-20\), 0 only in B"):
        compare.compare(gold, {i: True for i in IDS[:-1]})


def _run(folder, run_id, resolved: dict):
    folder.mkdir()
    rows = [{"run_id": run_id, "instance_id": i, "resolved": v} for i, v in resolved.items()]
    pq.write_table(pa.Table.from_pylist(rows), folder / "results.parquet")
    return folder


def test_pbench_compare_reads_two_run_folders(tmp_path):
    a = _run(tmp_path / "a", "run-a", {i: n % 2 == 0 for n, i in enumerate(IDS)})
    b = _run(tmp_path / "b", "run-b", dict.fromkeys(IDS, True))
    res = subprocess.run([sys.executable, "-m", "cli.pbench", "compare", str(a), str(b), "--json"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["runs"] == ["run-a", "run-b"] and len(out["resolved_by_b_only"]) == 10
    res = subprocess.run([sys.executable, "-m", "cli.pbench", "compare", str(a), str(tmp_path)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 2 and "no results.parquet" in res.stderr and "Traceback" not in res.stderr
