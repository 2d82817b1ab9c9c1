"""`pbench compare`: two runs of one selection, the flips each way and honest statistics, each checked against a
reference computation (scipy's exact binomial test and Wilson interval; the bootstrap against every resample
enumerated, the paired differences' distribution convolved, and a drawn bootstrap)."""

from __future__ import annotations

import itertools
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


def bootstrap_by_enumeration(diffs: list[int]) -> tuple[float, float]:
    """The percentile bootstrap of the mean paired difference by brute force: every one of the n**n ordered
    resamples of n pairs, each equally likely, and the 2.5 % / 97.5 % quantiles (inverted CDF) of their means."""
    means = np.array(list(itertools.product(diffs, repeat=len(diffs))), dtype=float).mean(axis=1)
    return tuple(float(np.quantile(means, q, method="inverted_cdf")) for q in (0.025, 0.975))


def bootstrap_by_convolution(a_only: int, b_only: int, total: int) -> tuple[float, float]:
    """The same interval for n too large to enumerate: the sum of n independent draws of one pair's difference
    (-1, 0, +1 with the sample's frequencies) has the n-fold convolution of that law as its distribution."""
    step = np.array([a_only, total - a_only - b_only, b_only], dtype=float) / total
    law = np.array([1.0])
    for _ in range(total):
        law = np.convolve(law, step)
    cdf, sums = np.cumsum(law), np.arange(-total, total + 1)
    return tuple(float(sums[np.argmax(cdf >= q - 1e-12)]) / total for q in (0.025, 0.975))


@pytest.mark.parametrize(
    "diffs",
    [[1, 1, 1, 1, 1, 1], [0, 1, 0, 1, 0, 1], [1, 0, 0, 0, 0, 0], [-1, 1, 0, 0, 1, 1], [-1, -1, 0, 1, 0]],
)
def test_the_bootstrap_interval_is_every_resample_enumerated(diffs):
    """Rule: the interval is the percentile bootstrap's, exactly: on six pairs, the 6**6 = 46,656 resamples
    enumerated give the same bounds."""
    low, high = compare.bootstrap_interval(diffs.count(-1), diffs.count(1), len(diffs))
    assert (low, high) == pytest.approx(bootstrap_by_enumeration(diffs), abs=1e-12)


@pytest.mark.parametrize(
    "a_only, b_only, total", [(3, 9, 100), (0, 4, 20), (5, 0, 30), (10, 10, 40), (0, 50, 102)]
)
def test_the_bootstrap_interval_is_the_convolved_distributions(a_only, b_only, total):
    expected = bootstrap_by_convolution(a_only, b_only, total)
    assert compare.bootstrap_interval(a_only, b_only, total) == pytest.approx(expected, abs=1e-12)


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


def _task(iid: str) -> dict:
    return {
        "instance_id": iid,
        "base_commit": "a" * 40,
        "test_patch": f"diff --git a/tests/test_{iid}.py b/tests/test_{iid}.py\n",
        "fail_to_pass": {"backend": [f"tests/test_{iid}.py::test_new"], "frontend": []},
        "pass_to_pass": {"backend": [], "frontend": []},
    }


def _run(folder, run_id, resolved: dict, tasks: dict | None = None):
    """A run folder as the judge writes it: results.parquet and the plan as scored (scoring-jobs.jsonl)."""
    folder.mkdir()
    rows = [{"run_id": run_id, "instance_id": i, "resolved": v} for i, v in resolved.items()]
    pq.write_table(pa.Table.from_pylist(rows), folder / "results.parquet")
    jobs = [{"instance": (tasks or {}).get(i) or _task(i), "prediction": None} for i in resolved]
    (folder / "scoring-jobs.jsonl").write_text("".join(json.dumps(j) + "\n" for j in jobs))
    return folder


def _pbench_compare(*args):
    return subprocess.run([sys.executable, "-m", "cli.pbench", "compare", *map(str, args)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip


DEMO = [f"prototypebench__demo-fullstack-{n}" for n in range(1, 7)]


def test_gold_empty_and_half_gold_runs_compared_from_their_folders_equal_the_reference(tmp_path):
    """Must show (issue 39, item 7): runs with known flips, as the demo's six instances give them (gold
    resolves all, empty none, half-gold the even ones), compared by `pbench compare --json` from their
    folders: the flipped lists exact, McNemar's p-value scipy's exact binomial test over the flips, the
    difference's interval every resample enumerated, each score's interval scipy's Wilson interval."""
    half_ids = DEMO[1::2]
    resolved = {"gold": set(DEMO), "empty": set(), "half": set(half_ids)}
    runs = {name: _run(tmp_path / name, name, {i: i in ok for i in DEMO}) for name, ok in resolved.items()}
    for a, b, a_only, b_only in (
        ("empty", "gold", [], DEMO),
        ("half", "gold", [], [i for i in DEMO if i not in half_ids]),
        ("gold", "half", [i for i in DEMO if i not in half_ids], []),
        ("empty", "half", [], half_ids),
    ):
        res = _pbench_compare(runs[a], runs[b], "--json")
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        assert out["runs"] == [a, b]
        assert out["resolved_by_a_only"] == a_only and out["resolved_by_b_only"] == b_only
        flips = len(a_only) + len(b_only)
        assert out["mcnemar_p"] == pytest.approx(stats.binomtest(len(a_only), flips, 0.5).pvalue, abs=1e-12)
        diffs = [(i in resolved[b]) - (i in resolved[a]) for i in DEMO]
        assert out["difference"] == pytest.approx(sum(diffs) / len(DEMO), abs=1e-12)
        assert out["difference_interval"] == pytest.approx(list(bootstrap_by_enumeration(diffs)), abs=1e-12)
        for k, (low, high) in zip(out["resolved"], out["score_interval"], strict=True):
            ref = stats.binomtest(k, len(DEMO)).proportion_ci(0.95, method="wilson")
            assert (low, high) == pytest.approx((ref.low, ref.high), abs=1e-9)
    text = _pbench_compare(runs["half"], runs["gold"]).stdout
    assert f"resolved by gold only (3): {', '.join(i for i in DEMO if i not in half_ids)}" in text


def test_runs_over_different_selections_or_tasks_are_refused_naming_the_difference(tmp_path):
    """Rule: two runs compare only over one selection. Other instance ids are named (exit 2); so are the same
    ids carrying different tasks (a re-curated FAIL_TO_PASS, another test patch), with the fields that differ."""
    a = _run(tmp_path / "a", "run-a", dict.fromkeys(DEMO, True))
    b = _run(tmp_path / "b", "run-b", dict.fromkeys(DEMO[:4], True))
    res = _pbench_compare(a, b)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    message = " ".join(res.stderr.split())
    assert "2 instance(s) only in run-a" in message and DEMO[4] in message and "0 only in run-b" in message
    changed = {
        DEMO[2]: {**_task(DEMO[2]), "fail_to_pass": {"backend": ["tests/x.py::test_other"], "frontend": []}}
    }
    changed[DEMO[5]] = {**_task(DEMO[5]), "test_patch": "another", "base_commit": "b" * 40}
    c = _run(tmp_path / "c", "run-c", dict.fromkeys(DEMO, False), changed)
    res = _pbench_compare(a, c)
    message = " ".join(res.stderr.split())
    assert res.returncode == 2 and "different tasks under the same instance ids: 2 instance(s)" in message
    assert f"{DEMO[2]}: fail_to_pass" in message and f"{DEMO[5]}: base_commit, test_patch" in message
    (c / "scoring-jobs.jsonl").unlink()  # a run written before the plan was kept: compared by ids
    assert _pbench_compare(a, c).returncode == 0


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
