"""Harness overhead per demo instance: the wall time of `pbench score <id> --patch gold` (warm images, a fresh
verdict cache each run) divided by the wall time of the bare test command in an already running container of the
same image. Run:

    python benchmarks/harness_overhead.py [--runs 5] [--id ID ...] [--backend-only] [--compare-tree DIR]
                                          [--dataset NAME --mirror DIR] [--json out.json]

The bare side, per instance and side with tests, is set up once and kept running: a private internal network,
the Postgres service (`engine.services.start_services`, as every run starts it), a container of the side's env image with
the same environment and limits as the test container but an idle main process; the in-container runner applies
the gold patch and the test patch and runs the prestart steps once (and the tests once, a warm-up). Then only the
test command is timed with `docker exec` (the runner's own pytest command and selection, as the unprivileged test
user; for the frontend, Playwright with the injected config against the Vite dev server and the backend-serve
container, both started once and left running). A fullstack instance's bare time is backend + frontend.

The `pbench score` side is a fresh CLI process each time; the verdict cache (<cache>/verdicts) is removed before
each run so that every run starts its containers. Bare and score runs are interleaved, so that the load of the
machine (shared) weighs on both alike. The engine's own timings (run.json of each side) split the score time.

--dataset/--mirror time another corpus instead of the demo season (e.g. `--dataset data/seasons/template --mirror
<upstream mirror>`): the demo's tests take 2-10 s, a real repository's much longer, and the harness's cost is
mostly fixed per run, so the ratio depends on the corpus (docs/performance.md).

--compare-tree DIR times a second copy of the project in the same rounds (its `pbench score` runs with
PYTHONPATH=DIR, so its tasks_lib and containers/ are used; images are content-keyed, so it finds its own Postgres
image), e.g. `git archive HEAD | tar -x -C DIR` for the code before an uncommitted change: a before/after under
the same load.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import _bench

RUN_KEYS = (
    "image_s",
    "services_s",
    "backend_serve_s",
    "copy_s",
    "snapshot_s",
    "patch_s",
    "gate_wait_s",
    "prestart_s",
    "test_s",
)
TEST_USER = "65534:65534"  # the runner's unprivileged test user (nobody)
IDLE_INIT = (
    "import os, sys, time\n"
    # The sandbox's resolver, as the runner starts it (outside names fail at once, not after 10 s).
    "sys.path.insert(0, '/pbench/tools')\n"
    "import pbench_dns\n"
    "print(pbench_dns.start(), flush=True)\n"
    "while True:\n"
    "    try:\n"
    "        os.wait()\n"
    "    except ChildProcessError:\n"
    "        time.sleep(0.5)\n"
)


class BareSide:
    """One side of one instance, kept running: network, Postgres, (backend-serve,) an idle test container."""

    def __init__(self, instance: dict, side, source, repo: Path, settings):
        from tasks_lib import engine
        from tasks_lib.core import docker_client
        from tasks_lib.judge import evaluation

        self.instance, self.side, self.source = instance, side, source
        self.repo, self.settings = repo, settings
        self.stack = engine.Stack(docker_client.get(), "bench" + uuid.uuid4().hex[:8])
        f2p, p2p = evaluation._tests_of(instance, side)
        self.selection = evaluation._selection(f2p, p2p)
        self.chain = (
            engine.PatchInput("agent", instance["patch"], untrusted=True),
            engine.PatchInput("test_patch", instance["test_patch"]),
        )
        self.command: list[str] = []
        self.workdir = ""
        self.container = None
        self.frontend: dict = {}

    # -- set-up ------------------------------------------------------------------------------------
    def start(self) -> None:
        """The engine's public steps (images, stack, services, jobs), then the runner once in an idle
        container: patches, protections, prestart and one run of the tests, exactly as the harness does."""
        from tasks_lib import engine
        from tasks_lib.core.constants import Side
        from tasks_lib.formats import playwright_report
        from tasks_lib.sources import snapshots

        stack, source, inst = self.stack, self.source, self.instance
        request = engine.RunRequest(
            source,
            self.repo,
            inst["base_commit"],
            Path("/nonexistent"),
            self.chain,
            self.selection,
            self.side,
        )
        backend_image, image, _ = engine.env_images(request, self.settings)
        deadline = time.monotonic() + 600
        stack.create_network()
        service_env = engine.services.start_services(stack, source, self.settings, deadline)
        backend = source.backend
        snapshot = snapshots.prepare(self.repo, inst["base_commit"])
        if self.side == Side.BACKEND:
            env, self.workdir = engine.jobs.backend_env(source, service_env), f"/work/repo/{backend.dir}"
            job = engine.jobs.backend_job(request)
        else:
            server = stack.sandbox(
                backend_image.tag,
                "backend",
                engine.jobs.backend_env(source, service_env),
                self.settings,
                ["backend"],
            )
            serve = engine.jobs.serve_job(request) | {"await_gate": False}  # the services answer already
            server.put_archive("/pbench", engine.jobs.archive(request, serve, False, snapshot))
            server.start()
            engine.services.wait_for_http(server, backend.serve_port, deadline)
            selection = playwright_report.selection_args(self.selection)
            job = engine.jobs.frontend_job(request, selection, 540_000)
            self.workdir = f"/work/repo/{source.frontend.dir}"
            env = engine.jobs.frontend_env(source)
            self.frontend = job["frontend"]
        job["witnesses"] = None  # the bare command is the repository's tests alone
        job["await_gate"] = False
        # The sandbox's limits and resolver, but an idle main process as PID 1 that reaps orphans (a zombie Vite would hold
        # Vite's per-project lock): kill(-1), the runner's "kill everything the test user left", spares PID 1,
        # so the container stays up for the timed execs.
        self.container = self.stack.client.containers.create(
            image.tag,
            command=["/usr/bin/python3", "-c", IDLE_INIT],
            name=f"pbench-{stack.run_id}-bare",
            environment=env,
            labels=stack.labels,
            network=stack.network.name,
            dns=[engine.stack.SANDBOX_RESOLVER],
            working_dir="/work/repo",
            tmpfs=engine.stack.TREE_TMPFS,  # the tests meet the file system they meet in a run
            mem_limit=self.settings.mem_limit,
            memswap_limit=self.settings.mem_limit,
            pids_limit=self.settings.pids_limit,
            nano_cpus=int(self.settings.cpus * 1e9),
        )
        stack.containers.append(self.container)
        archive = engine.jobs.archive(request, job, self.side == Side.FRONTEND, snapshot)
        self.container.put_archive("/pbench", archive)
        self.container.start()
        code, out = self.container.exec_run(["/usr/bin/python3", "/pbench/tools/pbench_runner.py"])
        result = json.loads(self.container.exec_run(["cat", "/pbench/out/result.json"]).output)
        # Exit 1 is a run whose tests ran (a flaky test that the grading leaves out may fail: PR #12).
        if result.get("status") != "completed" or result["test"]["exit_code"] not in (0, 1):
            raise SystemExit(
                f"bare set-up of {inst['instance_id']} {self.side} failed: {result}\n{out[-2000:]}"
            )
        if self.side == Side.BACKEND:
            # The repository's own command (`python -m pytest`) with the harness's report arguments: the
            # launcher, the guards and the witnesses are harness overhead.
            args = result["test"]["command"]
            rest = args[args.index("/pbench/tools/pbench_pytest.py") + 1 :]
            self.command = [
                "python",
                "-m",
                "pytest",
                *[
                    "--junitxml=/tmp/pbench-home/bare-junit.xml" if a.startswith("--junitxml=") else a
                    for a in rest
                ],
            ]
        else:
            fe = self.frontend
            # The forward to the backend and the dev server, started once as the test user and left running.
            forward = " ".join(fe["forward"])
            self._exec(
                [
                    "sh",
                    "-c",
                    f"setsid node /pbench/tools/pbench-forward.mjs {forward} >/tmp/pbench-home/forward.log 2>&1 & "
                    f'exec setsid sh -c "{fe["serve_command"]}" >/tmp/pbench-home/serve.log 2>&1',
                ],
                detach=True,
            )
            self._exec(["python3", "-c", WAIT_HTTP, fe["serve_url"]])
            self.command = [
                "node",
                f"/deps/{source.frontend.dir}/node_modules/@playwright/test/cli.js",
                "test",
                "-c",
                "/pbench/tools/playwright.pbench.config.mjs",
                *job["test"]["selection"],
            ]
            self.pw_env = {**fe["env"], **fe["playwright_env"], "PBENCH_FRONTEND_DIR": self.workdir}

    def _exec(
        self, cmd: list[str], detach: bool = False, extra_env: dict[str, str] | None = None, ok=(0,)
    ) -> int:
        args = ["docker", "exec", "-u", TEST_USER, "-w", self.workdir, "-e", "HOME=/tmp/pbench-home"]
        for k, v in (extra_env or {}).items():
            args += ["-e", f"{k}={v}"]
        if detach:
            args.append("-d")
        proc = subprocess.run([*args, self.container.name, *cmd], capture_output=True, text=True)
        if proc.returncode not in ok and not detach:
            raise SystemExit(
                f"{' '.join(cmd[:4])} exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr}"
            )
        return proc.returncode

    # -- the timed part ----------------------------------------------------------------------------
    def time_test(self, i: int) -> float:
        from tasks_lib.core.constants import Side

        env = {}
        if self.side == Side.FRONTEND:
            env = {
                **self.pw_env,
                "PBENCH_OUT": f"/tmp/pbench-home/bare-{i}",
                "PBENCH_PW_JSON": f"/tmp/pbench-home/bare-{i}/pw.json",
            }
        start = time.monotonic()
        self._exec(self.command, extra_env=env, ok=(0, 1))
        return time.monotonic() - start

    def close(self) -> None:
        self.stack.close()


WAIT_HTTP = (
    "import sys, time, urllib.request, urllib.error\n"
    "deadline = time.monotonic() + 120\n"
    "while time.monotonic() < deadline:\n"
    "    try:\n"
    "        urllib.request.urlopen(sys.argv[1], timeout=2); sys.exit(0)\n"
    "    except urllib.error.HTTPError as e:\n"
    "        sys.exit(0 if e.code < 500 else 1)\n"
    "    except Exception:\n"
    "        time.sleep(0.25)\n"
    "sys.exit(1)\n"
)


def score_once(
    instance_id: str, out: Path, tree: Path | None = None, corpus_args: tuple[str, ...] = ()
) -> tuple[float, dict]:
    """One `pbench score --patch gold` with a fresh verdict cache: wall seconds and the sides' run.json timings.
    With `tree`, the CLI runs that copy of the project instead (its tasks_lib and containers/ come first)."""
    import os

    shutil.rmtree(Path(os.environ["PBENCH_CACHE_DIR"]) / "verdicts", ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    env = {"PYTHONPATH": str(tree)} if tree else None
    rc, secs, text = _bench.pbench(
        "score", instance_id, "--patch", "gold", "--out", str(out), *corpus_args, env=env
    )
    if rc != 0:
        raise SystemExit(f"pbench score {instance_id} --patch gold exited {rc}:\n{text[-3000:]}")
    timings = {}
    for run_json in sorted((out / "logs").glob("*/run.json")):
        timings[run_json.parent.name] = json.loads(run_json.read_text())["timings"]
    return secs, timings


def breakdown(scores: list[float], timings: list[dict]) -> list[float]:
    """Medians over runs of the engine's run.json timings (summed over sides), of the rest of the engine
    (containers created, started and removed, output copied), and of what is outside the engine (the CLI
    process: start-up, imports, corpus, image-id lookup, verdict)."""
    per_run = []
    for secs, t in zip(scores, timings, strict=True):
        d = {k: sum(s.get(k, 0.0) for s in t.values()) for k in (*RUN_KEYS, "total_s")}
        d["engine_other_s"] = d["total_s"] - sum(d[k] for k in RUN_KEYS)
        d["outside_engine_s"] = secs - d["total_s"]
        per_run.append(d)
    return [_bench.median([d[k] for d in per_run]) for k in (*RUN_KEYS, "engine_other_s", "outside_engine_s")]


BREAKDOWN_HEADERS = [
    "image",
    "services",
    "be-serve",
    "copy",
    "snapshot",
    "patch",
    "gate",
    "prestart",
    "test",
    "eng.other",
    "outside",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per instance, each side (default 5)")
    parser.add_argument("--id", action="append", default=[], help="only these instance ids")
    parser.add_argument("--backend-only", action="store_true", help="skip instances with frontend tests")
    parser.add_argument(
        "--compare-tree",
        type=Path,
        default=None,
        help="another copy of the project (e.g. `git archive` of the commit before a change): its `pbench score` "
        "is timed too, in alternation with this one's, against the same bare runs",
    )
    parser.add_argument("--dataset", default=None, help="another corpus (as `pbench score --dataset`)")
    parser.add_argument("--mirror", type=Path, default=None, help="local mirror of that corpus's repository")
    parser.add_argument("--scratch", type=Path, default=_bench.DEFAULT_SCRATCH)
    parser.add_argument("--json", type=Path, default=None, help="write every run's figures here")
    args = parser.parse_args()

    root = _bench.use_scratch(args.scratch, "overhead")
    from tasks_lib.core.config import Settings
    from tasks_lib.core.constants import Side
    from tasks_lib.corpus import load as corpus
    from tasks_lib.judge import evaluation

    settings = Settings.from_env()
    corpus_args: tuple[str, ...] = ()
    if args.dataset:
        instances = corpus.load_corpus(args.dataset)
        corpus_args = ("--dataset", args.dataset) + (("--mirror", str(args.mirror)) if args.mirror else ())
    else:
        _bench.ensure_demo_season(root)
        instances = _bench.demo_corpus()
    if args.id:
        instances = [i for i in instances if i["instance_id"] in args.id]
    if args.backend_only:
        instances = [i for i in instances if not any(evaluation._tests_of(i, Side.FRONTEND))]
    variants = {"this tree": None} | ({"compare tree": args.compare_tree} if args.compare_tree else {})

    raw: dict[str, dict] = {}
    for inst in instances:
        iid = inst["instance_id"]
        source = corpus.source_for(inst)
        repo = evaluation.repo_for(source, args.mirror)
        sides = [s for s in (Side.BACKEND, Side.FRONTEND) if any(evaluation._tests_of(inst, s))]
        out = root / "overhead" / iid
        for tree in variants.values():
            score_once(iid, out, tree, corpus_args)  # warm-up: images present, page cache warm; not timed
        bare = [BareSide(inst, s, source, repo, settings) for s in sides]
        rec = {"domain": inst["stack_domain"], "sides": [str(s) for s in sides], "bare": [], "load": []}
        rec["variants"] = {name: {"score": [], "timings": []} for name in variants}
        try:
            for b in bare:
                b.start()
            for i in range(args.runs):
                rec["bare"].append(sum(b.time_test(i) for b in bare))
                line = [f"{iid} run {i + 1}: bare {rec['bare'][-1]:.2f}s"]
                for name in list(variants) if i % 2 == 0 else list(reversed(variants)):
                    secs, timings = score_once(iid, out, variants[name], corpus_args)
                    rec["variants"][name]["score"].append(secs)
                    rec["variants"][name]["timings"].append(timings)
                    line.append(f"score ({name}) {secs:.2f}s")
                rec["load"].append(_bench.load())
                print(", ".join(line) + f", load {rec['load'][-1]:.1f}", flush=True)
        finally:
            for b in bare:
                b.close()
        for v in rec["variants"].values():
            v["ratio"] = _bench.median(v["score"]) / _bench.median(rec["bare"])
        raw[iid] = rec
        _bench.save_json(args.json, {"runs": args.runs, "instances": raw})  # kept if a later instance fails

    headers = ["instance", "domain", "bare s"]
    for name in variants:
        headers += [f"score s ({name})", f"ratio ({name})"]
    rows = []
    for iid, r in raw.items():
        row = [iid, r["domain"], _bench.median(r["bare"])]
        for name in variants:
            row += [_bench.median(r["variants"][name]["score"]), r["variants"][name]["ratio"]]
        rows.append(row + [f"{min(r['load']):.1f}-{max(r['load']):.1f}"])
    print()
    print(_bench.table([*headers, "load"], rows))
    for name in variants:
        ratios = [r["variants"][name]["ratio"] for r in raw.values()]
        print(
            f"median ratio ({name}) over {len(ratios)} instance(s): {_bench.median(ratios):.2f} "
            "(performance issue: <= 1.8 on the demo, <= 1.10 on real template instances)"
        )
    for name in variants:
        print(f"\nwhere the score time goes ({name}), medians in s:")
        brows = [
            [iid, *breakdown(r["variants"][name]["score"], r["variants"][name]["timings"])]
            for iid, r in raw.items()
        ]
        print(_bench.table(["instance", *BREAKDOWN_HEADERS], brows))
    _bench.save_json(args.json, {"runs": args.runs, "instances": raw})


if __name__ == "__main__":
    main()
