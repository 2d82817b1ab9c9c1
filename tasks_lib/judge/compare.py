"""Two runs over the same selection, compared instance by instance (`pbench compare RUN_A RUN_B`).

On ~100 instances a few points of difference are noise more often than not, so the comparison says which
instances flipped each way and how sure one can be of the difference:

- the flips: resolved in A only, in B only (the discordant pairs);
- McNemar's exact test: under "the two versions are equally good", each discordant pair is a fair coin, so
  the two-sided p-value is a binomial tail over the n01 + n10 flips (the paired test; the concordant pairs say
  nothing about the difference);
- a bootstrap interval of the score difference B - A, resampling instances (pairs) with replacement: computed
  exactly, not by drawing (a pair's difference is -1, 0 or +1, so the resampled mean is a multinomial over three
  counts whose distribution is enumerated), hence the same interval every time and no seed to report;
- each run's score with its 95 % Wilson interval (`score_interval`, also in every report.json).

Two runs are comparable when they scored the same selection: the same instance ids, and under each id the same
task (what grading reads of it: base commit, test patch, FAIL_TO_PASS, PASS_TO_PASS, as each run's
`scoring-jobs.jsonl` recorded it). Anything else is refused, naming the instances that differ and how: a v0.2
and a v0.3 run of one instance id with a different FAIL_TO_PASS would otherwise count a changed task as a flip.

Pure functions over {instance_id: resolved}; the CLI reads the runs' results.parquet and scoring-jobs.jsonl.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path

from tasks_lib.core.errors import InputError

Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile

# What grading reads of an instance: two runs that read different values under one id scored different tasks.
GRADED_FIELDS = ("base_commit", "test_patch", "fail_to_pass", "pass_to_pass")


def wilson(resolved: int, total: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95 % by default); (0, 0) for no instance."""
    if total <= 0:
        return 0.0, 0.0
    p = resolved / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value: P(a flip count at least as lopsided) with flips a fair coin."""
    n = a_only + b_only
    if n == 0:
        return 1.0
    k = min(a_only, b_only)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def bootstrap_interval(a_only: int, b_only: int, total: int, level: float = 0.95) -> tuple[float, float]:
    """The percentile bootstrap interval of the score difference B - A over `total` paired instances, exact:
    resampling `total` pairs with replacement draws k_minus pairs resolved by A only, k_plus by B only
    (Multinomial(total; a_only/total, rest, b_only/total)); the difference is (k_plus - k_minus) / total."""
    if total <= 0:
        return 0.0, 0.0
    p_minus, p_plus = a_only / total, b_only / total
    p_zero = 1 - p_minus - p_plus
    log_fact = [math.lgamma(i + 1) for i in range(total + 1)]

    def log_p(p: float, k: int) -> float:
        return k * math.log(p) if k else 0.0

    mass: dict[int, float] = {}
    for k_minus in range(total + 1 if p_minus > 0 else 1):
        for k_plus in range(total - k_minus + 1 if p_plus > 0 else 1):
            k_zero = total - k_minus - k_plus
            if k_zero and p_zero <= 0:
                continue
            log = (
                log_fact[total] - log_fact[k_minus] - log_fact[k_plus] - log_fact[k_zero]
                + log_p(p_minus, k_minus) + log_p(p_plus, k_plus) + log_p(p_zero, k_zero)
            )  # fmt: skip
            mass[k_plus - k_minus] = mass.get(k_plus - k_minus, 0.0) + math.exp(log)
    low_q, high_q = (1 - level) / 2, 1 - (1 - level) / 2
    cumulative, low, high = 0.0, None, None
    for diff in sorted(mass):
        cumulative += mass[diff]
        if low is None and cumulative >= low_q - 1e-12:
            low = diff
        if high is None and cumulative >= high_q - 1e-12:
            high = diff
    return (low or 0) / total, (high if high is not None else max(mass)) / total


def _some(items: list[str]) -> str:
    return ", ".join(items[:3]) + (", …" if len(items) > 3 else "")


def same_tasks(
    tasks_a: Mapping[str, Mapping[str, str]], tasks_b: Mapping[str, Mapping[str, str]], names: tuple[str, str]
) -> None:
    """Refuses two runs whose instances of one id are different tasks ({instance_id: {field: digest}}),
    naming the instances and the fields that differ."""
    differ = {
        iid: [f for f in GRADED_FIELDS if tasks_a[iid].get(f) != tasks_b[iid].get(f)]
        for iid in sorted(set(tasks_a) & set(tasks_b))
    }
    named = [f"{iid}: {', '.join(fields)}" for iid, fields in differ.items() if fields]
    if named:
        raise InputError(
            f"{names[0]} and {names[1]} score different tasks under the same instance ids: {len(named)} "
            f"instance(s) differ ({_some(named)}); compare runs of one corpus"
        )


def compare(
    a: Mapping[str, bool],
    b: Mapping[str, bool],
    names: tuple[str, str] = ("A", "B"),
    tasks: tuple[Mapping | None, Mapping | None] = (None, None),
) -> dict:
    """The comparison of two runs' {instance_id: resolved} over the same selection (refused otherwise, naming
    the difference). `tasks`: each run's `read_tasks`, where known; a run without them is compared by ids."""
    if set(a) != set(b):
        only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        raise InputError(
            f"{names[0]} and {names[1]} score different selections: {len(only_a)} instance(s) only in "
            f"{names[0]} ({_some(only_a)}), {len(only_b)} only in {names[1]} ({_some(only_b)})"
        )
    if not a:
        raise InputError(f"{names[0]} and {names[1]} score no instance")
    if tasks[0] is not None and tasks[1] is not None:
        same_tasks(tasks[0], tasks[1], names)
    total = len(a)
    a_only = sorted(i for i in a if a[i] and not b[i])
    b_only = sorted(i for i in a if b[i] and not a[i])
    score_a, score_b = sum(a.values()), sum(b.values())
    return {
        "runs": list(names),
        "total": total,
        "resolved": [score_a, score_b],
        "score": [score_a / total, score_b / total],
        "score_interval": [list(wilson(score_a, total)), list(wilson(score_b, total))],
        "difference": (score_b - score_a) / total,
        "difference_interval": list(bootstrap_interval(len(a_only), len(b_only), total)),
        "mcnemar_p": mcnemar_exact(len(a_only), len(b_only)),
        "resolved_by_a_only": a_only,
        "resolved_by_b_only": b_only,
        "both": sum(1 for i in a if a[i] and b[i]),
        "neither": sum(1 for i in a if not a[i] and not b[i]),
    }


def read_run(run_dir: Path) -> tuple[str, dict[str, bool]]:
    """(run id, {instance_id: resolved}) of a run folder's results.parquet."""
    import pyarrow.parquet as pq

    path = Path(run_dir) / "results.parquet"
    if not path.is_file():
        raise InputError(f"{run_dir}: no results.parquet (not a run folder)")
    rows = pq.read_table(path, columns=["run_id", "instance_id", "resolved"]).to_pylist()
    run_id = rows[0]["run_id"] if rows else Path(run_dir).name
    return run_id, {r["instance_id"]: bool(r["resolved"]) for r in rows}


def read_tasks(run_dir: Path) -> dict[str, dict[str, str]] | None:
    """{instance_id: {field: digest}} of what grading read of each instance, from the run's
    scoring-jobs.jsonl; None for a run folder written before it (its instances compared by id only)."""
    from tasks_lib.judge.runs import JOBS_FILE

    path = Path(run_dir) / JOBS_FILE
    if not path.is_file():
        return None
    out = {}
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line).get("instance")
        except (json.JSONDecodeError, AttributeError):
            record = None
        if not isinstance(record, dict):
            raise InputError(f"{path}: line {n}: not a scoring job (a JSON object with an `instance`)")
        out[record.get("instance_id")] = {
            f: hashlib.sha256(json.dumps(record.get(f), sort_keys=True).encode()).hexdigest()
            for f in GRADED_FIELDS
        }
    return out


def text(result: dict) -> str:
    a, b = result["runs"]
    (la, ha), (lb, hb) = result["score_interval"]
    lo, hi = result["difference_interval"]
    lines = [
        f"{a}: {result['resolved'][0]}/{result['total']} resolved, {result['score'][0]:.1%} "
        f"(95 % interval {la:.1%} – {ha:.1%})",
        f"{b}: {result['resolved'][1]}/{result['total']} resolved, {result['score'][1]:.1%} "
        f"(95 % interval {lb:.1%} – {hb:.1%})",
        f"difference {b} - {a}: {result['difference']:+.1%} (bootstrap 95 % interval {lo:+.1%} – {hi:+.1%}); "
        f"McNemar exact p = {result['mcnemar_p']:.4g} over {len(result['resolved_by_a_only'])} + "
        f"{len(result['resolved_by_b_only'])} flips",
        f"both resolved {result['both']}, neither {result['neither']}",
        f"resolved by {a} only ({len(result['resolved_by_a_only'])}): "
        + (", ".join(result["resolved_by_a_only"]) or "none"),
        f"resolved by {b} only ({len(result['resolved_by_b_only'])}): "
        + (", ".join(result["resolved_by_b_only"]) or "none"),
    ]
    return "\n".join(lines)
