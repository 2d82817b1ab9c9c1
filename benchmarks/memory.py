"""Memory of the evaluation flow process over many instances: the demo corpus repeated to --instances instance runs
(default 500), with the resident set size sampled every --every verdicts (default 100). Run:

    python benchmarks/memory.py [--runs 5] [--instances 500] [--every 100] [--json out.json]
    python benchmarks/memory.py --runs 1 --instances 300 --types 15     # what the growth is made of
    python benchmarks/memory.py --runs 5 --compare-tree /tmp/before-<commit>   # before/after in the same rounds

The engine is stubbed: `tasks_lib.engine.run_tests` returns at once a completed run in which every FAIL_TO_PASS
and PASS_TO_PASS test of the side passed (and writes its run.json, as the engine does). 500 real runs would take
hours on this machine and would measure the containers, not the flow; what is measured here is the flow process
itself, everything but the containers being real: the Prefect flow and its ephemeral server, the thread-pool
fan-out (2 workers, as `pbench evaluate`), patch validation, the env-image lookup of every instance (Docker API),
the verdict cache (fresh for each run), the trace folders, grading, and the Parquet outputs and report at the end.

The corpus is the curated demo season with each instance copied under new ids (`<id>-rNNNN`), so that no verdict
is a cache hit. Each run is a fresh process; it reports VmRSS (now) and VmHWM (peak so far) of the flow process
from /proc/self/status at every sample, and the RSS of Prefect's server process (a child). The table gives medians
over runs; growth is (RSS at the last sample - RSS at the first) / (instances between them).

--types N counts the objects the garbage collector tracks, by type, at the first sample after start-up and at
the last one, and prints the N types whose count grew most, per instance, with their shallow size
(`sys.getsizeof`; strings and numbers are not tracked by the collector and are not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import _bench


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _children_rss_kb() -> int:
    import psutil

    return sum(c.memory_info().rss for c in psutil.Process().children(recursive=True)) // 1024


def _fake_run_tests(by_label: dict[str, dict]):
    """A completed run where every graded test of the side passed: the engine's result without containers."""
    from tasks_lib import engine
    from tasks_lib.core.constants import Outcome, RunStatus

    def run_tests(request, settings=None):
        iid, side = request.label.rsplit(" ", 1)
        inst = by_label[iid]
        tests = {t: Outcome.PASSED for kind in ("fail_to_pass", "pass_to_pass") for t in inst[kind][side]}
        result = engine.RunResult(
            status=RunStatus.COMPLETED,
            tests=tests,
            suite_ran=True,
            exit_code=0,
            log_dir=str(request.log_dir),
            image="stub",
            image_id="sha256:stub",
            timings={"total_s": 0.0},
        )
        Path(request.log_dir).mkdir(parents=True, exist_ok=True)
        return engine.finish(result, Path(request.log_dir), time.monotonic())

    return run_tests


def _census() -> dict[str, tuple[int, int]]:
    """(count, shallow bytes) of the collector-tracked objects of each type."""
    import gc

    gc.collect()
    out: dict[str, list[int]] = {}
    for obj in gc.get_objects():
        t = type(obj)
        entry = out.setdefault(f"{t.__module__}.{t.__qualname__}", [0, 0])
        entry[0] += 1
        entry[1] += sys.getsizeof(obj, 0)
    return {k: (v[0], v[1]) for k, v in out.items()}


def _use_tree() -> None:
    tree = os.environ.get("PBENCH_BENCH_TREE")
    if tree:  # the compared tree first on the path (_bench put this project there)
        sys.path.insert(0, tree)


def child(args) -> None:
    _use_tree()
    root = _bench.use_scratch(args.scratch, "memory")
    _bench.ensure_demo_season(root)
    shutil.rmtree(Path(os.environ["PBENCH_CACHE_DIR"]) / "verdicts", ignore_errors=True)
    from tasks_lib import engine
    from tasks_lib.core import prefect_env, progress

    prefect_env.configure()
    demo = _bench.demo_corpus()
    rows, by_label = [], {}
    for n in range(args.instances):
        inst = dict(demo[n % len(demo)])
        inst["instance_id"] = f"{inst['instance_id']}-r{n:04d}"
        rows.append(inst)
        by_label[inst["instance_id"]] = inst
    corpus_path = root / "memory" / f"corpus-{args.instances}.jsonl"
    corpus_path.parent.mkdir(parents=True, exist_ok=True)
    corpus_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    engine.run_tests = _fake_run_tests(by_label)  # evaluation calls it as engine.run_tests

    samples = [{"n": 0, "rss_kb": _status_kb("VmRSS"), "hwm_kb": _status_kb("VmHWM"), "server_kb": 0}]
    censuses: list[tuple[int, dict]] = []

    def sample(verdict, counts, total):
        done = sum(counts.values())
        if args.types and (done == args.every or done == total):
            censuses.append((done, _census()))
        if done % args.every == 0 or done == total:
            samples.append(
                {
                    "n": done,
                    "rss_kb": _status_kb("VmRSS"),
                    "hwm_kb": _status_kb("VmHWM"),
                    "server_kb": _children_rss_kb(),
                    "t": time.monotonic(),
                }
            )

    progress.CALLBACKS.append(sample)
    from flows.evaluation import run_evaluation

    start = time.monotonic()
    report = run_evaluation(
        max_workers=2,
        dataset=str(corpus_path),
        predictions="gold",
        model="bench-memory",
        model_cutoff="2025-06-01",
        run_id=f"bench-memory-{int(start)}-{os.getpid()}",
    )
    elapsed = time.monotonic() - start
    if report["resolved"] != args.instances:
        raise SystemExit(f"expected {args.instances} resolved, got {report['resolved']} of {report['total']}")
    final = {"rss_kb": _status_kb("VmRSS"), "hwm_kb": _status_kb("VmHWM"), "seconds": elapsed}
    if len(censuses) >= 2:
        (n0, first), (n1, last) = censuses[0], censuses[-1]
        per = max(1, n1 - n0)
        grown = sorted(last, key=lambda k: last[k][0] - first.get(k, (0, 0))[0], reverse=True)
        lines = [f"objects grown from {n0} to {n1} instances, per instance (type, count, shallow KB):"]
        for k in grown[: args.types]:
            dc = (last[k][0] - first.get(k, (0, 0))[0]) / per
            db = (last[k][1] - first.get(k, (0, 0))[1]) / per
            lines.append(f"  {k:60s} {dc:8.1f} {db / 1024:8.2f}")
        total_b = sum(v[1] for v in last.values()) - sum(v[1] for v in first.values())
        lines.append(f"  all tracked objects: {total_b / per / 1024:.1f} KB per instance (shallow)")
        print("\n".join(lines), file=sys.stderr, flush=True)
    final["tree"] = str(Path(sys.modules["tasks_lib"].__file__).resolve().parent.parent)
    print("RESULT " + json.dumps({"samples": samples, "final": final}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--instances", type=int, default=500)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--scratch", type=Path, default=_bench.DEFAULT_SCRATCH)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--types", type=int, default=0, help="print the N object types that grow most")
    parser.add_argument(
        "--compare-tree", type=Path, default=None, help="another copy of the project, run in the same rounds"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    _bench.use_scratch(args.scratch, "memory")
    _bench.ensure_demo_season(args.scratch)  # once, before the timed children
    variants = {"this tree": None} | ({"compare tree": str(args.compare_tree)} if args.compare_tree else {})
    results: dict[str, list[dict]] = {name: [] for name in variants}
    for i in range(args.runs):
        order = list(variants) if i % 2 == 0 else list(reversed(variants))  # a drift weighs on both
        for name in order:
            results[name].append(_one_run(args, i, name, variants[name]))
    for name, runs_ in results.items():
        _summary(name, runs_)
    _bench.save_json(
        args.json,
        {"runs": args.runs, "instances": args.instances, "compare_tree": str(args.compare_tree or "")}
        | ({"results": results["this tree"]} if len(results) == 1 else {"results_by_tree": results}),
    )


def _one_run(args, i: int, name: str, tree: str | None) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        "--instances",
        str(args.instances),
        "--every",
        str(args.every),
        "--scratch",
        str(args.scratch),
        "--types",
        str(args.types),
    ]
    env = dict(os.environ)
    if tree:  # the other tree's flows and tasks_lib first on the path (this file's child code drives both)
        env["PBENCH_BENCH_TREE"] = tree
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(
            f"run {i + 1} ({name}) failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
        )
    if args.types:
        print(proc.stderr[proc.stderr.find("objects grown") :], flush=True)
    res = json.loads(line[len("RESULT ") :])
    res["load"] = _bench.load()
    print(
        f"run {i + 1} ({name}, {res['final']['tree']}): {args.instances} instances in {res['final']['seconds']:.0f}s, "
        f"peak RSS {res['final']['hwm_kb'] / 1024:.0f} MB, load {res['load']:.1f}",
        flush=True,
    )
    return res


def _summary(name: str, results: list[dict]) -> None:
    checkpoints = [s["n"] for s in results[0]["samples"]]
    rows = []
    for k, n in enumerate(checkpoints):
        at = [r["samples"][k] for r in results if k < len(r["samples"])]
        rows.append(
            [
                str(n),
                _bench.median([s["rss_kb"] / 1024 for s in at]),
                _bench.median([s["hwm_kb"] / 1024 for s in at]),
                _bench.median([s["server_kb"] / 1024 for s in at]),
            ]
        )
    print(f"\n{name}:")
    print(_bench.table(["instances done", "RSS MB", "peak RSS MB", "server RSS MB"], rows))
    first, last = 1, len(checkpoints) - 1  # growth from the first sample after start-up to the end
    growth = [
        (r["samples"][last]["rss_kb"] - r["samples"][first]["rss_kb"])
        / max(1, r["samples"][last]["n"] - r["samples"][first]["n"])
        for r in results
    ]
    print(
        f"\nRSS growth from {checkpoints[first]} to {checkpoints[last]} instances: median "
        f"{_bench.median(growth):.1f} KB per instance (runs: {_bench.runs_text(growth, '{:.1f}')})"
    )
    print(
        f"peak RSS of the flow process: median {_bench.median([r['final']['hwm_kb'] / 1024 for r in results]):.0f} MB"
    )


if __name__ == "__main__":
    main()
