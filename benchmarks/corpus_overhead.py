"""Whole-corpus overhead: the wall time of one evaluation (`pbench evaluate --predictions gold --max-workers 1`,
warm images, a fresh verdict cache, a fresh process) divided by the sum of the bare test commands of its
instances. Run:

    python benchmarks/corpus_overhead.py --dataset v0.3 --repo IBM/mcp-context-forge [--limit N] [--id ID ...]
        [--mirror DIR] [--runs 1] [--bare-runs 2] [--compare-tree DIR] [--json out.json]

The bare time of an instance is `harness_overhead.BareSide`'s (the same image, environment, limits and file
system, the services and the prestart done beforehand, only the test command timed; a fullstack instance's is
backend + frontend), the median of `--bare-runs` runs taken before the evaluations and as many after them, so
that the evaluations sit between the two passes. Only instances whose environment images exist are measured
("warm images"; the others are listed and left out: a build is no harness overhead). Each evaluation is the
CLI as an evaluator runs it, in a fresh process, with the run's own Prefect server: everything it costs counts.
`--compare-tree DIR` times a second copy of the project in the same rounds, in alternation (as
harness_overhead.py does). The evaluation's own trace split (engine `run.json` timings summed over the
instances: tests, everything else in the engine) says where the difference goes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
import uuid
from pathlib import Path

import _bench
from harness_overhead import BareSide


def warm(instances: list[dict], mirror: Path | None, settings) -> tuple[list[dict], list[str]]:
    """The instances whose environment images exist (looked up, never built), and the ids of the others."""
    from tasks_lib.corpus import load as corpus
    from tasks_lib.corpus.instance import TaskInstance
    from tasks_lib.images import build as images
    from tasks_lib.judge import evaluation

    ready, cold = [], []
    for inst in instances:
        task = TaskInstance.of(inst)
        source = corpus.source_for(inst)
        repo = evaluation.repo_for(source, mirror)
        book = images.EnvSpecBook(source, repo, task.base_commit, settings)
        try:
            with images.lookup_only():
                evaluation._env_image_id(task, task.patch, book)
                evaluation._tooling(source, task, task.patch, book)
            ready.append(inst)
        except images.NotBuilt:
            cold.append(task.instance_id)
    return ready, cold


def bare_pass(instances: list[dict], mirror: Path | None, settings, runs: int) -> dict[str, list[float]]:
    """`runs` timed bare runs per instance (its sides summed), each instance set up and removed in turn."""
    from tasks_lib.core.constants import Side
    from tasks_lib.corpus import load as corpus
    from tasks_lib.judge import evaluation

    out: dict[str, list[float]] = {}
    for inst in instances:
        iid = inst["instance_id"]
        source = corpus.source_for(inst)
        repo = evaluation.repo_for(source, mirror)
        sides = [s for s in (Side.BACKEND, Side.FRONTEND) if any(evaluation._tests_of(inst, s))]
        bare = [BareSide(inst, s, source, repo, settings) for s in sides]
        try:
            for b in bare:
                b.start()
            out[iid] = [sum(b.time_test(i) for b in bare) for i in range(runs)]
        finally:
            for b in bare:
                b.close()
        print(f"  bare {iid}: {_bench.runs_text(out[iid])} s, load {_bench.load():.1f}", flush=True)
    return out


def evaluate_once(ids: list[str], corpus_args: tuple[str, ...], tree: Path | None, root: Path) -> dict:
    """One `pbench evaluate --predictions gold --max-workers 1` over `ids` from an empty verdict cache: its wall
    seconds, what it resolved, and the engine's timings summed over its instances."""
    shutil.rmtree(Path(os.environ["PBENCH_CACHE_DIR"]) / "verdicts", ignore_errors=True)
    run_id = f"corpus-{uuid.uuid4().hex[:8]}"
    env = {"PYTHONPATH": str(tree)} if tree else None
    args = ["evaluate", *corpus_args, "--predictions", "gold", "--model", "bench-corpus"]
    args += ["--model-cutoff", "2024-01-01", "--max-workers", "1", "--run-id", run_id]
    for iid in ids:
        args += ["--id", iid]
    rc, secs, text = _bench.pbench(*args, env=env)
    if rc != 0:
        raise SystemExit(f"pbench evaluate exited {rc}:\n{text[-3000:]}")
    run_dir = Path(os.environ["PBENCH_OUTPUT_DIR"]) / "runs" / run_id
    report = json.loads((run_dir / "report.json").read_text())
    engine = {"test_s": 0.0, "total_s": 0.0, "runs": 0, "per_instance_test_s": {}}
    for run_json in run_dir.glob("logs/*/*/run.json"):
        timings = json.loads(run_json.read_text())["timings"]
        engine["test_s"] += timings.get("test_s", 0.0)
        engine["total_s"] += timings.get("total_s", 0.0)
        engine["runs"] += 1
        iid = run_json.parent.parent.name
        engine["per_instance_test_s"][iid] = engine["per_instance_test_s"].get(iid, 0.0) + timings.get(
            "test_s", 0.0
        )
    shutil.rmtree(run_dir, ignore_errors=True)  # the traces of every instance: hundreds of MB per run
    resolved = sum(1 for v in report["instances"].values() if v == "resolved")
    return {"wall_s": secs, "resolved": resolved, "instances": len(report["instances"]), "engine": engine}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, help="the corpus (as `pbench evaluate --dataset`)")
    parser.add_argument("--repo", default=None, help="only this repository's instances (owner/name)")
    parser.add_argument("--id", action="append", default=[], help="only these instance ids")
    parser.add_argument("--limit", type=int, default=None, help="the first N instances (corpus order)")
    parser.add_argument("--mirror", type=Path, default=None, help="local mirror of the repository")
    parser.add_argument("--runs", type=int, default=1, help="evaluations per tree (default 1)")
    parser.add_argument(
        "--bare-runs", type=int, default=2, help="bare runs per instance, each pass (default 2)"
    )
    parser.add_argument(
        "--compare-tree", type=Path, default=None, help="another copy of the project, timed too"
    )
    parser.add_argument("--scratch", type=Path, default=_bench.DEFAULT_SCRATCH)
    parser.add_argument("--json", type=Path, default=None, help="write every run's figures here")
    args = parser.parse_args()

    _bench.use_scratch(args.scratch, "corpus")
    from tasks_lib.core.config import Settings
    from tasks_lib.corpus import load as corpus

    settings = Settings.from_env()
    instances = corpus.load_corpus(args.dataset)
    if args.repo:
        instances = [i for i in instances if i["repo"] == args.repo]
    if args.id:
        instances = [i for i in instances if i["instance_id"] in args.id]
    instances, cold = warm(instances, args.mirror, settings)
    instances = instances[: args.limit] if args.limit else instances
    ids = [i["instance_id"] for i in instances]
    if not ids:
        raise SystemExit("no instance with warm images in the selection")
    print(
        f"{len(ids)} instance(s) with warm images; left out (images not built): {cold or 'none'}", flush=True
    )
    corpus_args = ("--dataset", args.dataset) + (("--mirror", str(args.mirror)) if args.mirror else ())
    variants = {"this tree": None} | ({"compare tree": args.compare_tree} if args.compare_tree else {})
    raw: dict = {"dataset": args.dataset, "ids": ids, "cold": cold, "bare": {}, "evaluations": []}
    raw["variants"] = {name: str(tree) if tree else "" for name, tree in variants.items()}

    def save() -> None:
        _bench.save_json(args.json, raw)

    start = time.time()
    print("bare pass 1", flush=True)
    for iid, secs in bare_pass(instances, args.mirror, settings, args.bare_runs).items():
        raw["bare"].setdefault(iid, []).extend(secs)
    save()
    for r in range(args.runs):
        for name in list(variants) if r % 2 == 0 else list(reversed(variants)):
            load_before = _bench.load()
            res = evaluate_once(ids, corpus_args, variants[name], args.scratch)
            res |= {"variant": name, "round": r + 1, "load": [load_before, _bench.load()]}
            raw["evaluations"].append(res)
            print(
                f"round {r + 1}, {name}: {res['wall_s']:.1f} s, resolved {res['resolved']}/{res['instances']}, "
                f"load {load_before:.1f}-{_bench.load():.1f}",
                flush=True,
            )
            save()
    print("bare pass 2", flush=True)
    for iid, secs in bare_pass(instances, args.mirror, settings, args.bare_runs).items():
        raw["bare"][iid].extend(secs)
    raw["elapsed_s"] = time.time() - start
    save()

    bare_sum = sum(_bench.median(v) for v in raw["bare"].values())
    rows = []
    for name in variants:
        evals = [e for e in raw["evaluations"] if e["variant"] == name]
        wall = _bench.median([e["wall_s"] for e in evals])
        tests = _bench.median([e["engine"]["test_s"] for e in evals])
        engine = _bench.median([e["engine"]["total_s"] for e in evals])
        resolved = f"{min(e['resolved'] for e in evals)}/{len(ids)}"
        rows.append([name, len(ids), bare_sum, wall, wall / bare_sum, tests, engine, resolved])
    print()
    print(
        _bench.table(
            ["tree", "instances", "sum bare s", "evaluation s", "ratio", "engine test s", "engine s", "gold"],
            rows,
        )
    )
    print("(performance issue 40: the evaluation <= 1.10 x the sum of its instances' bare test times)")


if __name__ == "__main__":
    main()
