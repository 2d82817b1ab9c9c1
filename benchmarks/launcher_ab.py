"""The launcher against the repository's own pytest, in one container: is the test step's gap above the bare
command the launcher's (its audit hook, its checks, its evidence), or what runs beside it? Run:

    python benchmarks/launcher_ab.py --dataset v0.3 --mirror DIR --id ID [--runs 3] [--profile] [--json out.json]

One instance's backend side is set up as `harness_overhead.py` sets up its bare side (the engine's images,
services and job; the runner applies the gold and test patches and runs the tests once), then three commands
are timed with `docker exec` as the test user, alternated in every round:

- `bare`: `python -m pytest` with the runner's arguments and selection (harness_overhead's bare command);
- `launcher+refs`: `pbench_pytest.py` with the same arguments, the protected files of the run and the audit's
  references compiled ahead (by `pbench_refs.py`, once, before the rounds; its time is printed);
- `launcher-norefs`: the same without references (the launcher compiles every reference it needs itself).

No witnesses are written (the bare side's job has none) and the launcher has no evidence channel (its messages go
nowhere, as in a run by hand). `--profile` instead runs `bare` and `launcher+refs` once each under cProfile and
prints the audit's functions (pbench_audit.py) by cumulative time (docs/performance.md, section 20).
"""

from __future__ import annotations

import argparse
import json
import pstats
import subprocess
import tempfile
import time
from pathlib import Path

import _bench
from harness_overhead import TEST_USER, BareSide

REFS = "/tmp/pbench-home/refs"
LAUNCHER = ["/opt/venv/bin/python", "-P", "-s", "/pbench/tools/pbench_pytest.py"]
RUN_FILES = {
    "PBENCH_PROTECTED_JSON": "/pbench/tools/protected.json",
    "PBENCH_AGENT_FILES_JSON": "/pbench/tools/agent-files.json",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--mirror", type=Path, required=True)
    parser.add_argument("--id", required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--scratch", type=Path, default=_bench.DEFAULT_SCRATCH)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    _bench.use_scratch(args.scratch, "launcher")
    from tasks_lib.core.config import Settings
    from tasks_lib.core.constants import Side
    from tasks_lib.corpus import load as corpus
    from tasks_lib.judge import evaluation

    found = [i for i in corpus.load_corpus(args.dataset) if i["instance_id"] == args.id]
    if not found:
        raise SystemExit(f"--id {args.id}: not in {args.dataset}")
    source = corpus.source_for(found[0])
    side = BareSide(
        found[0], Side.BACKEND, source, evaluation.repo_for(source, args.mirror), Settings.from_env()
    )
    side.start()
    try:
        name, rest = side.container.name, side.command[3:]  # after `python -m pytest`

        def run(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
            line = ["docker", "exec", "-u", TEST_USER, "-w", side.workdir, "-e", "HOME=/tmp/pbench-home"]
            for k, v in env.items():
                line += ["-e", f"{k}={v}"]
            t0 = time.monotonic()
            proc = subprocess.run([*line, name, *cmd], capture_output=True, text=True)
            return time.monotonic() - t0, proc

        protected = json.loads(
            subprocess.run(
                ["docker", "exec", name, "cat", RUN_FILES["PBENCH_PROTECTED_JSON"]],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        modules = [f if f.startswith("/") else f"/work/repo/{f}" for f in protected if f.endswith(".py")]
        run(["mkdir", "-p", REFS], {})
        secs, _ = run(["/opt/venv/bin/python", "-I", "/pbench/tools/pbench_refs.py", REFS, *modules], {})
        print(f"references of {len(modules)} protected modules compiled ahead in {secs:.2f} s", flush=True)
        variants = {
            "bare": (side.command, {}),
            "launcher+refs": (LAUNCHER + rest, {**RUN_FILES, "PBENCH_REFS_DIR": REFS}),
            "launcher-norefs": (LAUNCHER + rest, dict(RUN_FILES)),
        }
        if args.profile:
            _profile(run, name, rest, variants["launcher+refs"][1])
            return
        times: dict[str, list[float]] = {k: [] for k in variants}
        for i in range(args.runs):
            for k in list(variants) if i % 2 == 0 else list(reversed(variants)):
                secs, proc = run(*variants[k])
                times[k].append(secs)
                last = (proc.stdout.strip().splitlines() or [proc.stderr[-300:]])[-1]
                print(f"round {i + 1} {k}: {secs:.2f} s (exit {proc.returncode}: {last})", flush=True)
        for k, v in times.items():
            print(f"{k}: median {_bench.median(v):.2f} s of {[round(x, 2) for x in v]}")
        _bench.save_json(
            args.json, {"instance": args.id, "runs": args.runs, "times": times, "load": _bench.load()}
        )
    finally:
        side.close()


def _profile(run, name: str, rest: list[str], env: dict[str, str]) -> None:
    out = {"bare": "/tmp/pbench-home/bare.prof", "launcher+refs": "/tmp/pbench-home/launcher.prof"}
    cmds = {
        "bare": ["/opt/venv/bin/python", "-m", "cProfile", "-o", out["bare"], "-m", "pytest", *rest],
        "launcher+refs": [*LAUNCHER[:3], "-m", "cProfile", "-o", out["launcher+refs"], LAUNCHER[3], *rest],
    }
    with tempfile.TemporaryDirectory() as tmp:
        for k, cmd in cmds.items():
            secs, proc = run(cmd, env if k != "bare" else {})
            local = Path(tmp) / Path(out[k]).name
            subprocess.run(["docker", "cp", f"{name}:{out[k]}", str(local)], check=True)
            stats = pstats.Stats(str(local))
            print(f"{k}: {secs:.2f} s wall, {stats.total_tt:.2f} s profiled (exit {proc.returncode})")
            own = [
                (ct, f"{Path(fn).name}:{ln} {fname}", nc)
                for (fn, ln, fname), (_cc, nc, _tt, ct, _callers) in stats.stats.items()
                if fn.endswith("/pbench_audit.py")
            ]
            for ct, where, nc in sorted(own, reverse=True)[:12]:
                print(f"  {ct:7.3f} s cumulative  {nc:7d} calls  {where}")


if __name__ == "__main__":
    main()
