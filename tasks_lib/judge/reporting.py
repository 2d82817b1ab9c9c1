"""Evaluation outputs: typed Parquet tables, report.json and a fixed-width text table (pure builders + writers).

`results.parquet` has one row per model x instance; `tests.parquet` one row per graded test. The column
names and dtypes below are the analysts' contract (docs/analysis.md); a test pins them.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from datetime import date, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tasks_lib.core.constants import Status
from tasks_lib.corpus import tiering
from tasks_lib.corpus.instance import TaskInstance
from tasks_lib.judge.compare import wilson
from tasks_lib.sources.crawl.base import TIMESTAMP

RESULTS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("model", pa.string()),
        ("model_cutoff", pa.date32()),
        ("instance_id", pa.string()),
        ("repo", pa.string()),
        ("stack_domain", pa.string()),
        ("contamination_tier", pa.string()),
        ("created_at", TIMESTAMP),
        ("after_model_cutoff", pa.bool_()),
        ("resolved", pa.bool_()),
        ("status", pa.string()),
        ("infra_failure", pa.bool_()),
        ("blame", pa.string()),
        ("tampering", pa.list_(pa.string())),
        ("static_flags", pa.list_(pa.string())),
        ("backend_status", pa.string()),
        ("frontend_status", pa.string()),
        ("f2p_passed", pa.int64()),
        ("f2p_total", pa.int64()),
        ("p2p_passed", pa.int64()),
        ("p2p_total", pa.int64()),
        ("exit_code_mismatch", pa.bool_()),
        ("patch_sha256", pa.string()),
        ("image_id", pa.string()),
        ("harness_version", pa.string()),
        ("duration_s", pa.float64()),
        ("attempts", pa.int64()),
        ("cached", pa.bool_()),
        ("executed_by", pa.string()),
        ("trace_dir", pa.string()),
        ("note", pa.string()),
    ]
)

TESTS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("model", pa.string()),
        ("instance_id", pa.string()),
        ("side", pa.string()),
        ("test_id", pa.string()),
        ("expected", pa.string()),
        ("outcome", pa.string()),
        ("passed", pa.bool_()),
    ]
)


# report.json's layout (SWE-bench 5.x writes 2 for its own): bumped when a field changes meaning or goes away.
REPORT_SCHEMA_VERSION = 1


def _ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def result_row(run_id: str, model: str, cutoff: date, instance, verdict) -> dict:
    instance = TaskInstance.of(instance)
    return {
        "run_id": run_id,
        "model": model,
        "model_cutoff": cutoff,
        "instance_id": instance.instance_id,
        "repo": instance.repo,
        "stack_domain": instance.stack_domain,
        "contamination_tier": instance.contamination_tier,
        "created_at": _ts(instance.created_at),
        "after_model_cutoff": tiering.held_out_relative_to(instance.created_at, cutoff),
        "resolved": bool(verdict.resolved),
        "status": verdict.status,
        "infra_failure": verdict.infra_failure,
        "blame": str(verdict.blame),
        "tampering": list(verdict.tampering),
        "static_flags": list(verdict.static_flags),
        "backend_status": verdict.backend_status,
        "frontend_status": verdict.frontend_status,
        "f2p_passed": verdict.f2p_passed,
        "f2p_total": verdict.f2p_total,
        "p2p_passed": verdict.p2p_passed,
        "p2p_total": verdict.p2p_total,
        "exit_code_mismatch": bool(verdict.exit_code_mismatch),
        "patch_sha256": verdict.patch_sha256,
        "image_id": verdict.image_id,
        "harness_version": verdict.harness_version,
        "duration_s": float(verdict.duration_s),
        "attempts": int(verdict.attempts),
        "cached": bool(verdict.cached),
        "executed_by": verdict.executed_by,
        "trace_dir": verdict.trace_dir,
        "note": verdict.note,
    }


def test_rows(run_id: str, model: str, verdict) -> list[dict]:
    return [
        {
            "run_id": run_id,
            "model": model,
            "instance_id": verdict.instance_id,
            "side": t.side,
            "test_id": t.test_id,
            "expected": t.expected,
            "outcome": t.outcome,
            "passed": t.passed,
        }
        for t in verdict.tests
    ]


def write_parquet(rows: Sequence[dict], schema: pa.Schema, path: Path) -> Path:
    table = pa.Table.from_pylist(list(rows), schema=schema)
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)
    return path


def _rate(resolved: int, total: int) -> float:
    return round(resolved / total, 4) if total else 0.0


EMPTY_PATCH_SHA256 = hashlib.sha256(b"").hexdigest()


def swebench_lists(rows: Sequence[dict]) -> dict:
    """The id lists and counts a SWE-bench run report carries, over every selected instance: `incomplete`
    (no prediction), `empty_patch`, `error` (the harness could not grade), `completed` = resolved + unresolved."""
    ids = lambda keep: sorted(r["instance_id"] for r in rows if keep(r))  # noqa: E731
    incomplete = ids(lambda r: r["status"] == Status.NO_PREDICTION)
    submitted = ids(lambda r: r["status"] != Status.NO_PREDICTION)
    empty = ids(lambda r: r["status"] != Status.NO_PREDICTION and r["patch_sha256"] == EMPTY_PATCH_SHA256)
    error = ids(lambda r: r["infra_failure"] and r["instance_id"] not in empty)
    resolved = ids(lambda r: r["resolved"])
    skip = set(incomplete) | set(empty) | set(error)
    unresolved = ids(lambda r: not r["resolved"] and r["instance_id"] not in skip)
    completed = sorted(resolved + unresolved)
    lists = {
        "submitted_ids": submitted,
        "completed_ids": completed,
        "incomplete_ids": incomplete,
        "empty_patch_ids": empty,
        "resolved_ids": resolved,
        "unresolved_ids": unresolved,
        "error_ids": error,
    }
    counts = {
        "total_instances": len(rows),
        "submitted_instances": len(submitted),
        "completed_instances": len(completed),
        "resolved_instances": len(resolved),
        "unresolved_instances": len(unresolved),
        "empty_patch_instances": len(empty),
        "error_instances": len(error),
    }
    return {**counts, **lists}


def build_report(rows: Sequence[dict], meta: dict) -> dict:
    """Score and its splits: by stack domain, by status, by contamination relative to the model. The score
    divides by every selected instance (a missing prediction is unresolved), as SWE-bench leaderboards do."""
    scored = [r for r in rows if not r["infra_failure"]]
    resolved = sum(r["resolved"] for r in rows)

    def split(key) -> dict:
        groups: dict = defaultdict(lambda: [0, 0])
        for r in rows:
            g = groups[key(r)]
            g[0] += r["resolved"]
            g[1] += 1
        return {
            str(k): {"resolved": v[0], "total": v[1], "rate": _rate(*v)} for k, v in sorted(groups.items())
        }

    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        **meta,
        "total": len(rows),
        "resolved": resolved,
        "score": _rate(resolved, len(rows)),
        # 95 % Wilson interval of the score: on ~100 instances a few points are within it (pbench compare)
        "score_interval": [round(x, 4) for x in wilson(resolved, len(rows))],
        "infra_failures": len(rows) - len(scored),
        "score_excluding_infra": _rate(sum(r["resolved"] for r in scored), len(scored)),
        "by_stack_domain": split(lambda r: r["stack_domain"]),
        "by_contamination": split(
            lambda r: "after_model_cutoff" if r["after_model_cutoff"] else "before_model_cutoff"
        ),
        "by_tier": split(lambda r: r["contamination_tier"]),
        "by_status": dict(sorted(Counter(r["status"] for r in rows).items())),
        "exit_code_mismatches": [r["instance_id"] for r in rows if r["exit_code_mismatch"]],
        "tampered": {r["instance_id"]: r["tampering"] for r in rows if r.get("tampering")},
        "static_flags": {r["instance_id"]: r["static_flags"] for r in rows if r.get("static_flags")},
        "instances": {r["instance_id"]: r["status"] for r in rows},
        **swebench_lists(rows),
    }


def text_table(report: dict) -> str:
    """The fixed-width table of one run (sister-harness style)."""
    lines = [
        f"PrototypeBench evaluation — {report['model']} (cutoff {report['model_cutoff']}) — run {report['run_id']}",
        "",
        f"instances {report['total']}   resolved {report['resolved']}   "
        f"score {report['score'] * 100:.1f}% (resolved / instances"
        + (
            f"; 95 % interval {report['score_interval'][0] * 100:.1f}–{report['score_interval'][1] * 100:.1f}%"
            if report.get("score_interval")
            else ""
        )
        + f")   infra failures {report['infra_failures']}"
        + (
            f"   without a prediction {len(report['incomplete_ids'])}" if report.get("incomplete_ids") else ""
        ),
        "",
        f"{'split':34} {'resolved':>9}",
        f"{'─' * 34} {'─' * 9}",
    ]
    for title, key in (
        ("stack domain", "by_stack_domain"),
        ("contamination", "by_contamination"),
        ("tier", "by_tier"),
    ):
        for name, v in report[key].items():
            lines.append(f"{title + ': ' + name:34} {v['resolved']:>4}/{v['total']:<4}")
    lines += ["", "verdicts by status"]
    for status, n in report["by_status"].items():
        lines.append(f"{n:>5}  {status}")
    if report.get("incomplete_ids"):
        lines += ["", f"no prediction (unresolved): {', '.join(report['incomplete_ids'])}"]
    if report["exit_code_mismatches"]:
        lines += ["", f"exit code contradicted parsed results: {', '.join(report['exit_code_mismatches'])}"]
    for title, key in (
        ("tampering seen (never a pass)", "tampered"),
        ("static check flagged", "static_flags"),
    ):
        if report.get(key):
            lines += ["", title]
            lines += [f"  {iid}: {'; '.join(seen)}" for iid, seen in report[key].items()]
    return "\n".join(lines) + "\n"


class RunWriter:
    """A run's results.parquet and tests.parquet written as its verdicts arrive (row groups of a part file
    per table), so that a long run keeps no rows in memory; `finish` puts both tables in the run's instance
    order (what `write_run_outputs` writes from rows in memory) and writes the report from results.parquet."""

    def __init__(self, out_dir: Path, order: Sequence[str], batch_rows: int = 500):
        self.out_dir, self.batch_rows = Path(out_dir), batch_rows
        self.rank = {iid: i for i, iid in enumerate(order)}
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._tables = {"results": RESULTS_SCHEMA, "tests": TESTS_SCHEMA}
        self._buffers: dict[str, list[dict]] = {name: [] for name in self._tables}
        self._writers: dict[str, pq.ParquetWriter] = {}

    def _part(self, name: str) -> Path:
        return self.out_dir / f".{name}.parquet.part"

    def add(self, row: dict, tests: list[dict]) -> None:
        self._buffers["results"].append(row)
        self._buffers["tests"] += tests
        for name, rows in self._buffers.items():
            if len(rows) >= (self.batch_rows if name == "tests" else max(1, self.batch_rows // 20)):
                self._flush(name)

    def _flush(self, name: str) -> None:
        rows, schema = self._buffers[name], self._tables[name]
        if not rows:
            return
        if name not in self._writers:
            self._writers[name] = pq.ParquetWriter(self._part(name), schema)
        self._writers[name].write_table(pa.Table.from_pylist(rows, schema=schema))
        self._buffers[name] = []

    def _final(self, name: str) -> pa.Table:
        """The part file in instance order (a stable sort: each instance's rows keep their order)."""
        self._flush(name)
        schema = self._tables[name]
        writer = self._writers.pop(name, None)
        if writer is None:
            return schema.empty_table()
        writer.close()
        table = pq.read_table(self._part(name), schema=schema)
        ranks = pa.array([self.rank.get(i, len(self.rank)) for i in table.column("instance_id").to_pylist()])
        keyed = table.append_column("_rank", ranks).append_column("_seq", pa.array(range(table.num_rows)))
        ordered = keyed.sort_by([("_rank", "ascending"), ("_seq", "ascending")])
        return ordered.drop_columns(["_rank", "_seq"])

    def abandon(self) -> None:
        """The part files closed and removed: a run stopped before its end has no tables (a rerun writes them)."""
        for name in self._tables:
            writer = self._writers.pop(name, None)
            if writer is not None:
                writer.close()
            self._part(name).unlink(missing_ok=True)
            self._buffers[name] = []

    def finish(self, meta: dict) -> dict:
        tables = {name: self._final(name) for name in self._tables}
        for name, table in tables.items():
            tmp = self.out_dir / f"{name}.parquet.tmp"
            pq.write_table(table, tmp)
            tmp.replace(self.out_dir / f"{name}.parquet")
            self._part(name).unlink(missing_ok=True)
        rows = pq.read_table(self.out_dir / "results.parquet").to_pylist()
        report = build_report(rows, meta)
        (self.out_dir / "report.json").write_text(json.dumps(report, indent=2, default=str))
        (self.out_dir / "report.txt").write_text(text_table(report))
        return report


def write_run_outputs(out_dir: Path, rows: list[dict], tests: list[dict], meta: dict) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    write_parquet(rows, RESULTS_SCHEMA, out_dir / "results.parquet")
    write_parquet(tests, TESTS_SCHEMA, out_dir / "tests.parquet")
    report = build_report(rows, meta)
    (out_dir / "report.json").write_text(json.dumps(report, indent=2, default=str))
    (out_dir / "report.txt").write_text(text_table(report))
    return report


def run_reports(run_dirs: Iterable[Path]) -> list[dict]:
    """Each run folder's report.json (refused, naming the folder, when it is not a run)."""
    from tasks_lib.core.errors import InputError, json_problem

    out = []
    for d in run_dirs:
        p = Path(d) / "report.json"
        if not p.is_file():
            raise InputError(f"{d}: no report.json (not a run folder)")
        try:
            report = json.loads(p.read_text())
        except json.JSONDecodeError as exc:
            raise InputError(f"{p}: line {exc.lineno}: not JSON ({json_problem(exc)})") from None
        if "score_interval" not in report and isinstance(report.get("total"), int):
            # A run written before the interval was: the same counts give it.
            report["score_interval"] = [
                round(x, 4) for x in wilson(report.get("resolved", 0), report["total"])
            ]
        out.append(report)
    return out


def load_results(run_dirs: Iterable[Path]):
    """The results.parquet of every run folder as one DataFrame (`run_dir`: where each row came from)."""
    import pandas as pd

    from tasks_lib.core.errors import InputError

    frames = []
    for d in run_dirs:
        p = Path(d) / "results.parquet"
        if not p.is_file():
            raise InputError(f"{d}: no results.parquet (not a run folder)")
        frames.append(pd.read_parquet(p).assign(run_dir=str(Path(d).resolve())))
    if not frames:
        raise InputError("no run folder given")
    return pd.concat(frames, ignore_index=True)


def run_scores(df) -> list[dict]:
    """Each run's score (resolved / selected instances) with its 95 % Wilson interval, in the order the runs
    come: a few points between two runs of ~100 instances are within the intervals (`pbench compare` says
    whether the difference is more than noise)."""
    out = []
    for run_id, g in df.groupby("run_id", sort=False):
        resolved, total = int(g["resolved"].sum()), len(g)
        out.append(
            {
                "run_id": str(run_id),
                "model": str(g["model"].iloc[0]),
                "resolved": resolved,
                "total": total,
                "score": resolved / total,
                "score_interval": list(wilson(resolved, total)),
            }
        )
    return out


def score_text(run: dict) -> str:
    low, high = run["score_interval"]
    return (
        f"{run['resolved']}/{run['total']} {run['score'] * 100:.1f}% "
        f"(95 % interval {low * 100:.1f}–{high * 100:.1f}%)"
    )


def leaderboard(run_dirs: Iterable[Path]) -> str:
    """Aggregate runs into models x (domains, tiers) with failures by kind, and each run's score with its
    95 % interval."""

    df = load_results(run_dirs)
    lines = [f"PrototypeBench leaderboard — {df['run_id'].nunique()} run(s), {len(df)} verdicts", ""]
    domains = sorted(df["stack_domain"].unique())
    tiers = sorted(df["contamination_tier"].unique())
    cols = ["all", *domains, *[f"tier:{t}" for t in tiers], "after-cutoff"]
    lines.append(f"{'model':28} " + " ".join(f"{c:>14}" for c in cols))
    lines.append(f"{'─' * 28} " + " ".join("─" * 14 for _ in cols))
    for model, g in df.groupby("model"):
        cells = [g]
        cells += [g[g["stack_domain"] == d] for d in domains]
        cells += [g[g["contamination_tier"] == t] for t in tiers]
        cells.append(g[g["after_model_cutoff"]])
        text = [f"{int(c['resolved'].sum())}/{len(c)}" if len(c) else "—" for c in cells]
        lines.append(f"{str(model)[:28]:28} " + " ".join(f"{t:>14}" for t in text))
    lines += ["", "score per run (resolved / instances, 95 % Wilson interval)"]
    for run in run_scores(df):
        lines.append(f"{run['run_id'][:28]:28} {str(run['model'])[:28]:28} {score_text(run)}")
    lines += ["", "failures by kind"]
    for (model, status), n in df[~df["resolved"]].groupby(["model", "status"]).size().items():
        lines.append(f"{n:>5}  {status:24} {model}")
    return "\n".join(lines) + "\n"
