"""Two Docker engines as two hosts (issue 41): the demo corpus and a sample of v0.2 evaluated, gold then empty, by a
Dask cluster with one worker per engine, through one registry of images. Run as root (it starts engines 1 and 2
beside the default one, `./dev engine`, and a registry, `./dev registry`):

    PBENCH_MIRRORS=/work/.mirror python benchmarks/two_engines.py [--v02 ID ...] [--json out.json]

Both engines start empty: the default engine pushes its root filesystem, base and Postgres images to the registry
(those every content key starts from), each engine pulls them (`pbench images bootstrap`), and from there every
environment image is built by whichever engine first needs it, pushed, and pulled by the other when it needs it.
The demo season is curated once on the default engine (the corpus, not a measurement). Printed: per run its wall
time and score, per engine what it built and pulled, per image the build time against the pull time, and the
engines' and registry's disk. The engines, their data roots and the registry's storage are removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import _bench

sys.path.insert(0, str(_bench.PROJECT / "tests" / "integration"))
import engines_kit  # noqa: E402

V02_SAMPLE = (  # two locks of mcp-context-forge and of the template, two instances each (#2104's gold: a third)
    "IBM__mcp-context-forge-3452",
    "IBM__mcp-context-forge-3463",
    "fastapi__full-stack-fastapi-template-1543",
    "fastapi__full-stack-fastapi-template-2104",
)


def bootstrap(docker_host: str) -> float:
    """`pbench images bootstrap` on one engine (its set-up, as on a new machine): pulls from the registry."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "cli.pbench", "images", "bootstrap"],
        env={**os.environ, "DOCKER_HOST": docker_host},
        cwd=_bench.PROJECT,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"pbench images bootstrap on {docker_host} failed:\n{proc.stdout}{proc.stderr}")
    return time.monotonic() - start


def evaluate(address: str, label: str, dataset: str, ids: list[str], prediction: str) -> dict:
    from flows.evaluation import run_evaluation

    start = time.monotonic()
    report = run_evaluation(
        dask_address=address,
        dataset=dataset,
        predictions=prediction,
        model=f"two-engines-{prediction}",
        model_cutoff="1970-01-01",
        run_id=f"two-engines-{label}-{prediction}",
        ids=ids or None,
    )
    import pandas as pd

    df = pd.read_parquet(Path(report["out_dir"]) / "results.parquet")
    return {
        "run": f"{label} {prediction}",
        "wall_s": round(time.monotonic() - start, 1),
        "resolved": int(report["resolved"]),
        "total": int(report["total"]),
        "statuses": {str(k): int(v) for k, v in df["status"].value_counts().items()},
        "by_engine": {
            name: int((df["executed_by"].str.partition("@")[2] == host).sum())
            for name, host in ENGINES.items()
        },
        "load": round(_bench.load(), 2),
    }


ENGINES: dict[str, str] = {}


def du_mb(path: Path) -> float:
    out = subprocess.run(["du", "-sm", str(path)], capture_output=True, text=True).stdout.split()
    return float(out[0]) if out else 0.0


def images_summary(rows: list[dict]) -> list[dict]:
    """Per image of the runs: who built it and how long, who pulled it and how long."""
    name_of = {host: name for name, host in ENGINES.items()}
    per: dict[str, dict] = {}
    for r in rows:
        item = per.setdefault(r["tag"], {"tag": r["tag"], "built_by": [], "build_s": 0.0, "pulls": []})
        who = name_of.get(r["engine"], r["engine"] or "default")
        if r["kind"] == "build":
            item["built_by"].append(who)
            item["build_s"] += r["seconds"]
        elif r["kind"] == "pull":
            item["pulls"].append((who, r["seconds"]))
        elif r["kind"] == "push":
            item.setdefault("push_s", r["seconds"])
    return sorted(per.values(), key=lambda i: i["tag"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scratch", type=Path, default=_bench.DEFAULT_SCRATCH / "two-engines")
    parser.add_argument("--v02", nargs="*", default=list(V02_SAMPLE), help="v0.2 instances (none: skip v0.2)")
    parser.add_argument("--no-demo", action="store_true", help="only the v0.2 sample")
    parser.add_argument("--port", type=int, default=5741)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.v02 and not os.environ.get("PBENCH_MIRRORS"):
        raise SystemExit("the v0.2 sample needs PBENCH_MIRRORS (the folder of the sources' mirrors)")

    root = _bench.use_scratch(args.scratch, "two-engines")
    if (
        not args.no_demo
        and not (Path(os.environ["PBENCH_OUTPUT_DIR"]) / "seasons/demo/instances.jsonl").exists()
    ):
        from flows.curation import run_curation

        print("curating the demo season on the default engine (the corpus; once) ...", flush=True)
        run_curation("demo")
    from tasks_lib.core import docker_client
    from tasks_lib.core.config import Settings
    from tasks_lib.images import build as images
    from tasks_lib.images import lineage, registry

    figures: dict = {
        "host": socket.gethostname(),
        "cores": os.cpu_count(),
        "load_start": round(_bench.load(), 2),
    }
    with engines_kit.registry(root / "registry", args.port) as address:
        os.environ["PBENCH_REGISTRY"] = address
        remote = registry.Registry.parse(address)
        refs = images.bootstrap()
        seed = [
            f"{images.ROOTFS_REPO}:{Settings.from_env().debian_suite}",
            refs["base"].tag,
            refs["postgres"].tag,
        ]
        t0 = time.monotonic()
        registry.publish(docker_client.get(), remote, seed)
        figures["seed_push_s"] = round(time.monotonic() - t0, 1)
        with engines_kit.engine(1, root / "engines") as e1, engines_kit.engine(2, root / "engines") as e2:
            ENGINES.update(e1=e1, e2=e2)
            figures["bootstrap_s"] = {name: round(bootstrap(host), 1) for name, host in ENGINES.items()}
            start = time.monotonic()
            runs = []
            with engines_kit.dask_cluster(root / "dask", ENGINES) as scheduler:
                corpora = ([] if args.no_demo else [("demo", "demo", [])]) + (
                    [("v0.2-sample", "v0.2", args.v02)] if args.v02 else []
                )
                for label, dataset, ids in corpora:
                    for prediction in ("gold", "empty"):
                        runs.append(evaluate(scheduler, label, dataset, ids, prediction))
                        print(json.dumps(runs[-1], default=str), flush=True)
            figures["wall_s"] = round(time.monotonic() - start, 1)
            figures["runs"] = runs
            harness = set(seed)
            rows = [r for r in lineage.ledger_rows() if r["tag"] not in harness]
            figures["images"] = images_summary(rows)
            figures["disk_mb"] = {name: du_mb(root / "engines" / "data" / f"e{name[1:]}") for name in ENGINES}
            figures["disk_mb"]["registry"] = du_mb(root / "registry" / "storage")
    shutil.rmtree(root / "registry", ignore_errors=True)  # its storage: GBs of layers
    figures["load_end"] = round(_bench.load(), 2)
    report(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1, default=str))


def report(figures: dict) -> None:
    print(
        f"\nwall {figures['wall_s']} s for every run; seed push {figures['seed_push_s']} s; bootstrap (pulls) per engine "
        f"{figures['bootstrap_s']}; load {figures['load_start']} -> {figures['load_end']}"
    )
    print(
        _bench.table(
            ["run", "wall s", "resolved", "e1", "e2", "statuses"],
            [
                [
                    r["run"],
                    r["wall_s"],
                    f"{r['resolved']}/{r['total']}",
                    r["by_engine"]["e1"],
                    r["by_engine"]["e2"],
                    r["statuses"],
                ]
                for r in figures["runs"]
            ],
        )
    )
    items = figures["images"]
    print()
    print(
        _bench.table(
            ["image", "built by", "build s", "push s", "pulled by (s)"],
            [
                [
                    i["tag"],
                    ",".join(i["built_by"]) or "-",
                    i["build_s"],
                    i.get("push_s", 0.0),
                    ", ".join(f"{w} {s:.1f}" for w, s in i["pulls"]) or "-",
                ]
                for i in items
            ],
        )
    )
    built = sum(len(i["built_by"]) for i in items)
    per_engine = ", ".join(f"{n} {sum(i['built_by'].count(n) for i in items)}" for n in ENGINES)
    pulls = sum(len(i["pulls"]) for i in items)
    print(
        f"\nimages: {len(items)} distinct, {built} builds in the cluster ({per_engine}), {pulls} pulls; "
        f"disk MB {figures['disk_mb']}"
    )


if __name__ == "__main__":
    main()
