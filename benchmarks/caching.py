"""What the caches save: a second curation of the same season, and a second evaluation of the same predictions,
each as a fraction of the first run's wall time. Run:

    python benchmarks/caching.py [--runs 5] [--only curation|evaluation] [--server ephemeral|running]
                                 [--prs 1|2] [--instances K] [--compare-tree DIR] [--json out.json]

--prs 1 curates a one-PR export (PR #3), --instances K evaluates the first K demo instances only (`--id`): the
small cases where the fixed cost of a command shows most. --compare-tree DIR runs every pair a second time with
another copy of the project (its `pbench` on PYTHONPATH), in alternating order, so before and after share the
rounds.

Curation: the demo season over a two-PR export (`--prs-file` with PRs #3 and #5, both backend-only, so that a
cold run takes minutes, not the 20 of the whole season). Each of --runs pairs starts cold: a fresh output folder,
a fresh Prefect home (database) and a fresh Prefect result storage; the generated demo repository and its clone
are kept (they are inputs, not results). Then `pbench curate` runs twice with the same arguments.

Evaluation: `pbench evaluate --predictions gold` over the curated demo season (six instances, two workers), first
with an empty verdict cache, then again with the same predictions under another run id.

Both are measured as an operator sees them, `pbench` in a fresh process (start-up, Prefect's ephemeral server,
the flow), and as the flow alone (from Prefect's "Beginning flow run" to the flow's "Finished in state" lines of
the same log), so the fixed cost of a command is told apart from what the cache saves.

--server running starts one `prefect server start` for the whole benchmark and points every command at it
(PREFECT_API_URL), as docs/operations.md sets a machine up; the default is Prefect's ephemeral server, started by
each command. The Prefect cache lives in the result storage, not in the server's database, so a fresh storage
folder is a cold cache either way.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import _bench

CURATION_PRS = (3, 5)


def flow_seconds(log: str) -> float | None:
    """Flow wall time from the CLI's log lines (format of cli.pbench.main's logging)."""
    begin = end = None
    for line in log.splitlines():
        if "prefect.flow_runs:" not in line:
            continue
        try:
            stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
        except ValueError:
            continue
        if "Beginning flow run" in line and begin is None:
            begin = stamp
        elif "Finished in state" in line:
            end = stamp
    return (end - begin).total_seconds() if begin and end else None


def _verbose_env() -> dict[str, str]:
    # INFO for the flow-run lines that time the flow; WARNING elsewhere keeps the log small.
    return {"PBENCH_LOG_LEVEL": "INFO", "PREFECT_LOGGING_LEVEL": "INFO"}


@contextlib.contextmanager
def running_server(root: Path):
    """A `prefect server start` of its own (scratch home, free port) for the block; PREFECT_API_URL set."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    home = root / "caching" / "server-home"
    home.mkdir(parents=True, exist_ok=True)
    log = open(root / "caching" / "server.log", "w")  # noqa: SIM115  (closed below)
    proc = subprocess.Popen(
        [
            str(_bench.PROJECT / ".venv" / "bin" / "prefect"),
            "server",
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env={**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"prefect server did not start; see {log.name}") from None
                time.sleep(1)
        os.environ["PREFECT_API_URL"] = url
        yield url
    finally:
        os.environ.pop("PREFECT_API_URL", None)
        proc.terminate()
        proc.wait(timeout=60)
        log.close()


def _trees(compare_tree: Path | None) -> dict[str, dict[str, str]]:
    """The variants timed in each round: this tree, and another copy of the project on PYTHONPATH."""
    trees = {"this tree": {}}
    if compare_tree:
        trees["compare tree"] = {"PYTHONPATH": str(compare_tree)}
    return trees


def _rounds(runs: int, trees: dict):
    """(round, tree name, tree env) in alternating order, so that a drift of the load weighs on both."""
    for i in range(runs):
        names = list(trees) if i % 2 == 0 else list(reversed(trees))
        for name in names:
            yield i, name, trees[name]


def curation_pairs(root: Path, runs: int, n_prs: int = 2, trees: dict | None = None) -> dict[str, list[dict]]:
    from tasks_lib.sources.demo_repo import demo_prs_path, ensure_demo_repo

    trees = trees or _trees(None)
    rows = [json.loads(x) for x in demo_prs_path(ensure_demo_repo()).read_text().splitlines()]
    export = root / "caching" / f"{n_prs}-prs.jsonl"
    export.parent.mkdir(parents=True, exist_ok=True)
    wanted = CURATION_PRS[:n_prs]
    export.write_text("".join(json.dumps(r) + "\n" for r in rows if r["number"] in wanted))
    pairs: dict[str, list[dict]] = {name: [] for name in trees}
    for i, name, tree_env in _rounds(runs, trees):
        work = root / "caching" / f"curation-{i}-{name.replace(' ', '-')}"
        shutil.rmtree(work, ignore_errors=True)
        for sub in ("out", "prefect", "storage"):
            (work / sub).mkdir(parents=True)
        env = {
            **_verbose_env(),
            **tree_env,
            "PBENCH_OUTPUT_DIR": str(work / "out"),
            "PREFECT_HOME": str(work / "prefect"),
            "PREFECT_LOCAL_STORAGE_PATH": str(work / "storage"),
        }
        pair = {}
        for which in ("first", "second"):
            rc, secs, log = _bench.pbench("curate", "--season", "demo", "--prs-file", str(export), env=env)
            if rc != 0:
                raise SystemExit(f"curation {which} run ({name}) exited {rc}:\n{log[-3000:]}")
            pair[which] = {"cli_s": secs, "flow_s": flow_seconds(log), "load": _bench.load()}
            (work / f"{which}.log").write_text(log)
        print(f"curation pair {i + 1} ({name}): {_pair_text(pair)}", flush=True)
        pairs[name].append(pair)
    return pairs


def evaluation_pairs(
    root: Path, runs: int, n_instances: int | None = None, trees: dict | None = None
) -> dict[str, list[dict]]:
    _bench.ensure_demo_season(root)
    trees = trees or _trees(None)
    ids = [i["instance_id"] for i in _bench.demo_corpus()][:n_instances] if n_instances else []
    selection = [a for iid in ids for a in ("--id", iid)]
    pairs: dict[str, list[dict]] = {name: [] for name in trees}
    for i, name, tree_env in _rounds(runs, trees):
        shutil.rmtree(Path(os.environ["PBENCH_CACHE_DIR"]) / "verdicts", ignore_errors=True)
        pair = {}
        stamp = datetime.now().strftime("%H%M%S")
        for which in ("first", "second"):
            rc, secs, log = _bench.pbench(
                "evaluate",
                "--predictions",
                "gold",
                "--model",
                "bench-caching",
                "--model-cutoff",
                "2025-06-01",
                "--run-id",
                f"bench-caching-{stamp}-{i}-{name.replace(' ', '-')}-{which}",
                *selection,
                env={**_verbose_env(), **tree_env},
            )
            if rc != 0:
                raise SystemExit(f"evaluation {which} run ({name}) exited {rc}:\n{log[-3000:]}")
            pair[which] = {"cli_s": secs, "flow_s": flow_seconds(log), "load": _bench.load()}
        print(f"evaluation pair {i + 1} ({name}): {_pair_text(pair)}", flush=True)
        pairs[name].append(pair)
    return pairs


def _pair_text(pair: dict) -> str:
    f, s = pair["first"], pair["second"]
    return (
        f"first {f['cli_s']:.1f}s (flow {f['flow_s'] or 0:.1f}s), second {s['cli_s']:.1f}s "
        f"(flow {s['flow_s'] or 0:.1f}s), load {s['load']:.1f}"
    )


def summary_rows(name: str, pairs: list[dict]) -> list[list]:
    rows = []
    for key, label in (("cli_s", "pbench command"), ("flow_s", "flow only")):
        first = [p["first"][key] for p in pairs if p["first"][key] is not None]
        second = [p["second"][key] for p in pairs if p["second"][key] is not None]
        ratios = [
            p["second"][key] / p["first"][key]
            for p in pairs
            if p["first"][key] and p["second"][key] is not None
        ]
        rows.append(
            [
                f"{name}, {label}",
                _bench.median(first),
                _bench.median(second),
                f"{100 * _bench.median(ratios):.1f} %",
                f"{len(first)}/{len(second)}",
            ]
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="first/second pairs of each kind (default 5)")
    parser.add_argument("--only", choices=("curation", "evaluation"), default=None)
    parser.add_argument("--server", choices=("ephemeral", "running"), default="ephemeral")
    parser.add_argument("--scratch", type=Path, default=_bench.DEFAULT_SCRATCH)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--prs", type=int, choices=(1, 2), default=2, help="PRs in the curation export")
    parser.add_argument("--instances", type=int, default=None, help="evaluate the first K demo instances")
    parser.add_argument("--compare-tree", type=Path, default=None, help="another copy of the project")
    args = parser.parse_args()
    root = _bench.use_scratch(args.scratch, "caching")
    trees = _trees(args.compare_tree)

    raw = {"server": args.server, "prs": args.prs, "instances": args.instances, "trees": list(trees)}
    with running_server(root) if args.server == "running" else contextlib.nullcontext():
        if args.only in (None, "curation"):
            raw["curation"] = curation_pairs(root, args.runs, args.prs, trees)
        if args.only in (None, "evaluation"):
            raw["evaluation"] = evaluation_pairs(root, args.runs, args.instances, trees)
    rows = []
    for name in ("curation", "evaluation"):
        for tree, pairs in raw.get(name, {}).items():
            rows += summary_rows(f"{name} ({args.server} server, {tree})", pairs)
    print()
    print(_bench.table(["", "first s", "second s", "second/first", "runs"], rows))
    print("(medians; second/first is the median of the per-pair ratios; target <= 5 %)")
    _bench.save_json(args.json, {"runs": args.runs, **raw})


if __name__ == "__main__":
    main()
