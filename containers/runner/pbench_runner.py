"""In-container runner: patches, protections, prestart, tests. Stdlib only; runs with the image's /usr/bin/python3.

Reads /pbench/in/job.json and writes /pbench/out/result.json; every step's output goes to its own log under
/pbench/out, so a trace can be read without re-running anything. /pbench/in and /pbench/out are root's only
(the job names the graded tests the witnesses copy); the harness's code the other users run is in /pbench/tools.

Privilege separation (pbench_proc): the runner is root with only SETUID/SETGID/KILL/CHOWN (its first act is the
sandbox's resolver, pbench_dns, on 127.0.0.1:53, taken before any other code runs); the repository's code
(prestart steps, servers, pytest) runs as uid 65534, harness tools that must be out of its reach (Playwright)
as uid 65533. The tree's protections (pbench_protect) are set before any of the repository's code runs and
checked after. `phase` in /pbench/out says how far a run got, so that a run stopped by the wall clock can be
charged to the patch (its code had started) or to the harness (it had not).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pbench_await  # noqa: E402
import pbench_dns  # noqa: E402
import pbench_protect as protect  # noqa: E402
from pbench_proc import (  # noqa: E402
    OUT,
    TEST_GID,
    TEST_UID,
    TOOL_GID,
    TOOL_UID,
    EvidenceChannel,
    OutputBudget,
    Untrusted,
    can_drop_privileges,
    collect_stage,
    kill_all_others,
    run,
    run_untrusted,
)
from pbench_protocol import (  # noqa: E402
    JOB_FILE,
    OUTPUT_CAP_BYTES,
    PHASE_FILE,
    SERVE,
    Phase,
    RunnerStatus,
    write_result,
)

IN = Path("/pbench/in")
STAGE = Path("/pbench/stage")  # where the test user's runner writes its reports (made just before the tests)
REFS = Path("/pbench/refs")  # the audit's reference code, written by the tool user (pbench_refs.py)
TOOLS = Path(__file__).parent
TEST_HOME = Path("/tmp/pbench-home")
BASE_TAG = protect.BASE_TAG

APPLY_METHODS = (
    ("git apply", ["git", "apply", "--verbose", "--whitespace=nowarn"]),
    ("git apply --3way", ["git", "apply", "--verbose", "--3way", "--whitespace=nowarn"]),
    ("patch --fuzz=5", ["patch", "--batch", "--fuzz=5", "-p1", "--no-backup-if-mismatch", "-r", "-", "-i"]),
)

git_quiet = protect.git_quiet
GIT_REFRESH = [*protect.GIT, "update-index", "-q", "--refresh"]
restore_protected = protect.restore_protected
pytest_section_changed = protect.pytest_section_changed
kill_test_user = kill_all_others


def phase(name: Phase) -> None:
    """How far the run got (read by the host after a wall-clock kill): patches, prestart, serving, tests."""
    with open(OUT / PHASE_FILE, "a") as fh:
        fh.write(f"{name} {time.time():.3f}\n")


def reset_to(ref, repo):
    git_quiet(["reset", "-q", "--hard", ref], repo)
    git_quiet(["clean", "-q", "-fdx"], repo)


def snapshot(repo, message):
    # -f: a tracked file that matches .gitignore must survive the resets below.
    git_quiet(["add", "-A", "-f", "."], repo)
    git_quiet(["commit", "-q", "--allow-empty", "--no-verify", "-m", message], repo)


def apply_patch(patch, repo, log):
    """Try each method on a clean tree; a failed attempt is rolled back before the next one."""
    path = IN / patch["file"]
    if path.stat().st_size == 0:
        return "empty"
    for name, cmd in APPLY_METHODS:
        code, _ = run(cmd + [str(path)], repo, log)
        if code == 0:
            return name
        reset_to("HEAD", repo)
    return None


def fresh_dir(path: Path, uid=TEST_UID, gid=TEST_GID) -> Path:
    """A new, empty folder of `uid` (0755: the runner, root without DAC_OVERRIDE, reads what lands in it).
    Never one an earlier step could have written: the runner cannot empty another user's folder."""
    if path.exists():
        path = path.with_name(f"{path.name}-{time.monotonic_ns()}")
    path.mkdir(parents=True)
    path.chmod(0o755 if can_drop_privileges() else 0o777)
    if can_drop_privileges():
        os.chown(path, uid, gid)
    return path


def lock_down():
    """Only root reads the job (the graded tests), the patches and the results (the witnesses written)."""
    for path in (IN, OUT):
        path.mkdir(parents=True, exist_ok=True)
        if can_drop_privileges():
            os.chown(path, 0, 0)
            path.chmod(0o700)


def python_import_roots(repo: Path, workdir: Path, env: dict, patterns) -> list[str]:
    """Folders on sys.path of the tests, relative to the repository: the working directory, PYTHONPATH entries
    inside the tree, and the folder pytest inserts for each test package (the parent of its top package)."""
    roots = {os.path.relpath(workdir, repo)}
    for entry in filter(None, env.get("PYTHONPATH", "").split(":")):
        path = Path(entry) if entry.startswith("/") else workdir / entry
        if str(path.resolve()).startswith(str(repo)):
            roots.add(os.path.relpath(path.resolve(), repo))
    for root, dirs, files in os.walk(repo):
        if root == str(repo) and ".git" in dirs:
            dirs.remove(".git")
        dirs[:] = [d for d in dirs if d != "node_modules" and not os.path.islink(os.path.join(root, d))]
        rel_root = os.path.relpath(root, repo)
        if not any(
            f.endswith(".py") and protect.match_any(os.path.normpath(f"{rel_root}/{f}"), patterns)
            for f in files
        ):
            continue
        folder = Path(root)
        while (folder / "__init__.py").exists() and folder != repo:
            folder = folder.parent
        roots.add(os.path.relpath(folder, repo))
    return sorted("" if r == "." else r for r in roots)


class Run:
    """One job: the tree, its protections, the output budget, and the result being written."""

    def __init__(self, job: dict):
        self.job = job
        self.repo = Path(job["repo_dir"])
        self.workdir = self.repo / job.get("workdir", ".")
        self.budget = OutputBudget(int(job.get("output_cap", OUTPUT_CAP_BYTES)))
        self.result = {
            "status": RunnerStatus.COMPLETED,
            "patches": [],
            "restored": [],
            "prestart": [],
            "test": None,
            "tampering": [],
        }
        self.timings: dict[str, float] = {}
        self.env = dict(os.environ)
        self.env.update({"PYTHONNOUSERSITE": "1"})
        if can_drop_privileges():
            self.env["HOME"] = str(TEST_HOME)
        self.guard = None
        self.py_roots: list[str] = []
        self.py_names: set[str] = set()
        self.node_roots: list[str] = []
        self.node_names: set[str] = set()
        self.agent_files: list[str] = []
        self.servers = None  # a frontend run's dev server, when it started before the gate
        self.pw_tsconfig = None  # a Playwright run's tsconfig, the harness's (pbench_tsconfig)
        self.refs = None  # the audit's references being compiled (pbench_refs.py), from the freeze on
        self.refs_env: dict[str, str] = {}
        self.refs_started = False

    def finish(self, status):
        if self.guard is not None:
            self.result["tampering"] += self.guard.finish()
        self.result["tampering"] = list(dict.fromkeys(self.result["tampering"]))
        if self.budget.exceeded_by and status != RunnerStatus.PATCH_APPLY_FAILED:
            status = RunnerStatus.OUTPUT_LIMIT
            self.result["output_limit"] = {"cap": self.budget.cap, "by": self.budget.exceeded_by}
        self.result["status"] = status
        self.result["timings"] = self.timings
        write_result(OUT, self.result)
        return 0

    def _rules(self):
        frontend_dir = self.job.get("frontend_dir")
        self.py_names = protect.python_module_names(protect.site_dirs())
        self.node_names = protect.node_package_names("/deps")
        self.py_roots = python_import_roots(self.repo, self.workdir, self.env, self.job["test_patterns"])
        self.node_roots = protect.node_import_roots(self.repo, frontend_dir) if frontend_dir else []

    def unpack_tree(self) -> None:
        """The base commit's tree, sent as one file (/pbench/in/tree.tar), unpacked into the work tree as
        Docker would (owners, modes and times of the archive): a tmpfs, where a file costs a fraction of what
        it costs in the container's overlay."""
        name = self.job.get("tree")
        if not name:
            return  # a job whose tree was put in place by the host
        t0 = time.monotonic()
        subprocess.run(
            ["tar", "-x", "--numeric-owner", "-f", str(IN / name), "-C", str(self.repo)],
            check=True,
            capture_output=True,
        )
        self.timings["tree_s"] = round(time.monotonic() - t0, 3)

    def seed_git(self) -> None:
        """The host's seed of the new repository (the job's `git_seed`): the base commit's blobs as
        a pack and its files in an index without stat data. Refreshing that index hashes each file once to
        compare it with the commit's, instead of compressing and writing every file as an object; whatever
        differs (a file the host stubbed, a path `git archive` leaves out) is hashed and written by the
        snapshot's `git add` as before. The seed decides nothing: the base commit is the unpacked tree."""
        seed = IN / (self.job.get("git_seed") or "-")
        if not (seed / "index").is_file():
            return
        git_dir = self.repo / ".git"
        for pack in seed.glob("pack-*"):
            shutil.copyfile(pack, git_dir / "objects" / "pack" / pack.name)
        shutil.copyfile(seed / "index", git_dir / "index")
        # Exit 1 when files differ from the seed: `git add` takes them.
        subprocess.run(GIT_REFRESH, cwd=self.repo, capture_output=True, check=False)

    def patches(self) -> bool:
        t0 = time.monotonic()
        repo = self.repo
        git_quiet(["init", "-q"], repo)
        self.seed_git()
        snapshot(repo, "base snapshot")
        git_quiet(["tag", BASE_TAG], repo)
        self.timings["snapshot_s"] = round(time.monotonic() - t0, 3)
        t0 = time.monotonic()
        for patch in self.job["patches"]:
            method = apply_patch(patch, repo, OUT / "patch.log")
            self.result["patches"].append({"name": patch["name"], "method": method})
            if method is None:
                self.timings["patch_s"] = round(time.monotonic() - t0, 3)
                return False
            if patch.get("untrusted"):
                self._rules()
                restored = restore_protected(
                    self.job["test_patterns"],
                    repo,
                    OUT / "patch.log",
                    import_roots=self.py_roots,
                    py_names=self.py_names,
                    node_roots=self.node_roots,
                    node_names=self.node_names,
                )
                self.result["restored"] += [rel for rel, _ in restored]
                self.result["restored_why"] = self.result.get("restored_why", {}) | dict(restored)
                snapshot(repo, f"after {patch['name']}")
                self.agent_files += protect.agent_changed_files(repo, BASE_TAG)
            else:
                snapshot(repo, f"after {patch['name']}")
        if self.job.get("witnesses"):
            self.write_witnesses(self.job["witnesses"])
            snapshot(repo, "witnesses")
        with open(OUT / "applied.diff", "w") as fh:
            diff = subprocess.run(["git", "diff", BASE_TAG, "HEAD"], cwd=repo, capture_output=True, text=True)
            fh.write(diff.stdout)
        self.timings["patch_s"] = round(time.monotonic() - t0, 3)
        return True

    def write_witnesses(self, spec: dict) -> None:
        """The witness tests, written by root into the graded test files after the test patch (pbench_witness):
        what they are goes to result.json only (root's); a Playwright run's selection follows the lines."""
        import secrets

        import pbench_witness

        rng = secrets.SystemRandom()
        playwright = spec.get("runner") == "playwright"
        written = []
        for rel, models in sorted(spec.get("files", {}).items()):
            path = self.workdir / rel
            if path.is_symlink() or not path.is_file():
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            plan = getattr(pbench_witness, WITNESS_PLANS[spec.get("runner", "pytest")])
            new_text, found = plan(text, models, rng)
            if not found:
                continue
            path.write_text(new_text, encoding="utf-8")
            written += [{"path": rel, **w} for w in found]
        self.result["witnesses"] = written
        if playwright and written:
            selection = []
            for arg in self.job["test"].get("selection", []):
                file, _, line = arg.rpartition(":")
                mine = [w for w in written if w["path"] == file]
                selection.append(
                    f"{file}:{pbench_witness.shift_line(int(line), mine)}" if line.isdigit() and mine else arg
                )
            selection += [f"{w['path']}:{w['line']}" for w in written]
            self.job["test"]["selection"] = selection

    def freeze(self):
        if not self.py_names:
            self._rules()
        (TOOLS / "agent-files.json").write_text(json.dumps(sorted(set(self.agent_files))))
        removed = protect.remove_bytecode(self.repo)
        if removed:
            with open(OUT / "patch.log", "a") as fh:
                fh.write(f"pbench: removed {len(removed)} bytecode file(s) from the tree: {removed[:5]}\n")
        playwright = self.job["test"]["runner"] == "playwright"
        if playwright:
            import pbench_frontend
            import pbench_tsconfig

            pbench_frontend.link_node_modules(Path("/deps"), self.repo, OUT / "prestart.log")
            if self.job.get("frontend", {}).get("harness_tsconfig", True):
                selection = [a.rpartition(":")[0] or a for a in self.job["test"].get("selection", [])]
                folder = self.workdir / os.path.dirname(selection[0]) if selection else self.workdir
                self.pw_tsconfig, notes = pbench_tsconfig.write(
                    str(self.repo), str(folder), str(TOOLS / "tsconfig"), self.node_names
                )
                with open(OUT / "prestart.log", "a") as fh:
                    fh.write(f"pbench: the specs compile with {self.pw_tsconfig}: {'; '.join(notes)}\n")
        self.guard = protect.Guard(
            self.repo,
            self.job["test_patterns"],
            import_roots=self.py_roots,
            py_names=self.py_names,
            node_roots=self.node_roots,
            node_names=self.node_names,
            package_dirs=protect.node_modules_dirs("/deps") if playwright else (),
            shared_mode=0o1777 if playwright else 0o1775,
        )
        self.guard.freeze()
        # The launcher compares the code that ran with these files' bytes (pbench_audit.py).
        (TOOLS / "protected.json").write_text(
            json.dumps(sorted(r for r in self.guard.protected if r.endswith(".py")))
        )
        fresh_dir(TEST_HOME)

    def wait_for_go(self) -> bool:
        """A run made ahead (the job's `go`: the host started it while another run's tests ran) waits here,
        its tree set up and frozen, no code of the repository run, until the host says "go" on its standard
        input; False when the host closed it instead (the run is not wanted). Standard input is /dev/null from
        here on."""
        if not self.job.get("go"):
            return True
        t0 = time.monotonic()
        line = sys.stdin.buffer.readline()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        self.timings["go_wait_s"] = round(time.monotonic() - t0, 3)
        return line.strip() == b"go"

    def serve_early(self) -> None:
        """A frontend run without prestart steps starts its dev server now, while the gate waits for the
        backend server: nothing it would wait for changes the tree the dev server serves. From here on the
        repository's code runs (phase "serving"), so a run stopped later is the patch's."""
        if self.job["test"]["runner"] != "playwright" or self.job.get("prestart"):
            return
        import pbench_frontend

        phase(Phase.SERVING)
        self.servers = pbench_frontend.start_servers(self, OUT)

    def await_gate(self) -> None:
        """Wait until the run's services (and a frontend run's backend server) answer, asked from here
        (pbench_await): the container started while they started and has set its tree up meanwhile. The phase
        says so: a run stopped here never ran the patch's code (unless its dev server started early)."""
        probes = self.job.get("await") or []
        if not probes:
            return
        if self.servers is None:  # otherwise the repository's code runs already: its phase stands
            phase(Phase.SERVICES)
        t0 = time.monotonic()
        pbench_await.wait_for(probes)
        self.timings["gate_wait_s"] = round(time.monotonic() - t0, 3)

    def prestart(self) -> bool:
        phase(Phase.PRESTART)
        t0 = time.monotonic()
        if self.refs is not None and self.job.get("prestart"):
            # Every step ends with every process but the runner killed: the references are finished first
            # (begun at the freeze, they ran while the gate waited); stopped after two minutes.
            try:
                self.refs.wait(120)
            except subprocess.TimeoutExpired:
                self.refs.stop()
        for cmd in self.job.get("prestart", []):
            code, secs = run_untrusted(
                cmd, self.workdir, OUT / "prestart.log", self.env, self.budget, shell=True
            )
            self.result["prestart"].append({"cmd": cmd, "exit_code": code, "seconds": secs})
            if code != 0 or self.budget.exceeded_by:
                self.timings["prestart_s"] = round(time.monotonic() - t0, 3)
                return False
        self.timings["prestart_s"] = round(time.monotonic() - t0, 3)
        if (
            self.job.get("prestart") or self.servers is not None
        ):  # otherwise no code of the repository has run
            self.result["tampering"] += self.guard.scan("after the prestart steps")
        return True

    def serve(self):
        """The backend-serve container of a frontend run: the server runs until the container is removed;
        its output goes through the capped pipe like every other process of the repository's code."""
        self.timings["serve_started_at"] = time.time()
        self.result["status"] = RunnerStatus.SERVING
        write_result(OUT, self.result | {"timings": self.timings})
        phase(Phase.SERVING)
        server = Untrusted(
            ["/bin/sh", "-c", "exec " + self.job["test"]["command"]],
            self.workdir,
            OUT / "serve.log",
            self.env,
            self.budget,
            on_exceeded=kill_all_others,
        )
        code = server.wait()
        server.close(code)
        self.result["test"] = {"command": self.job["test"]["command"], "exit_code": code}
        return self.finish(RunnerStatus.SERVE_EXITED)

    def pytest(self):
        test = self.job["test"]
        cmd, env = pytest_command(test, self.env, self.workdir, self.repo)
        stage = fresh_dir(STAGE)
        self.stage = stage
        cmd += [f"--junitxml={stage / 'junit.xml'}"]
        if test.get("continue_on_collection_errors"):
            cmd.append("--continue-on-collection-errors")
        cmd += test.get("selection", [])
        channel = EvidenceChannel(OUT / "evidence.log", self.budget)
        env["PBENCH_EVIDENCE_FD"] = str(channel.child_fd)
        env["PBENCH_AGENT_FILES_JSON"] = str(TOOLS / "agent-files.json")
        env["PBENCH_PROTECTED_JSON"] = str(TOOLS / "protected.json")
        if self.job.get("pytest_plugins") is not None:
            env["PBENCH_PYTEST_PLUGINS"] = json.dumps(self.job["pytest_plugins"])
        env.update(self.refs_env)
        phase(Phase.TESTS)
        code, secs = run_untrusted(cmd, self.workdir, OUT / "test.log", env, self.budget, channel=channel)
        if self.refs is not None:  # done long before, or killed with everything else the tests left
            self.refs.close(self.refs.poll())
        self.result["test"] = {
            "command": cmd,
            "exit_code": code,
            "seconds": secs,
            "pid": channel.pid,
            "evidence_messages": channel.messages,
        }
        self.timings["test_s"] = secs

    def start_references(self) -> None:
        """The launcher audit's reference code of the graded test files and the conftests on their way,
        compiled by pbench_refs.py as the tool user as soon as the tree is frozen: before a staged run's go,
        the gate and the prestart steps, so that the tests rarely wait for a module's (the folder and the
        process are named to the launcher by `Run.pytest`). Nothing to compile: nothing started."""
        if self.refs_started:
            return
        self.refs_started = True
        test = self.job["test"]
        if test["runner"] != "pytest":
            return
        files = reference_files(self.repo, self.workdir, test.get("selection", []), self.guard.protected)
        if not files:
            return
        interpreter = pytest_command(test, self.env, self.workdir, self.repo)[0][0]
        folder = fresh_dir(REFS, uid=TOOL_UID, gid=TOOL_GID)
        refs_env = {k: v for k, v in self.env.items() if not k.startswith("PYTHON")}
        cmd = [interpreter, "-I", str(TOOLS / "pbench_refs.py"), str(folder), *files]
        self.refs = Untrusted(cmd, "/", OUT / "refs.log", refs_env, self.budget, uid=TOOL_UID, gid=TOOL_GID)
        self.refs_env = {"PBENCH_REFS_DIR": str(folder), "PBENCH_REFS_PID": str(self.refs.proc.pid)}

    def playwright(self):
        import pbench_frontend

        phase(Phase.TESTS)
        self.result["test"] = pbench_frontend.run_playwright(self, OUT, started=self.servers)
        self.timings.update(self.result["test"].get("timings", {}))

    def tests(self):
        runner = self.job["test"]["runner"]
        if runner == SERVE:
            return self.serve()
        if runner not in TEST_RUNNERS:
            raise SystemExit(f"job: no test runner {runner!r} (known: {', '.join(TEST_RUNNERS)})")
        TEST_RUNNERS[runner](self)
        t0 = time.monotonic()
        self.result["tampering"] += self.guard.scan("after the tests")
        if runner == "pytest":  # its reports were staged by the test user: copied out after the scan
            collect_stage(self.stage, self.budget)
        self.timings["after_tests_s"] = round(time.monotonic() - t0, 3)
        return self.finish(RunnerStatus.COMPLETED)


# The test runners, by the name a job gives (protocol's TEST_RUNNERS; the host's registry is
# tasks_lib/engine/runners.py): the function that runs the job's tests, and pbench_witness's planner of the
# witnesses written into its test files. Runner-specific set-up beside them: Playwright's node_modules links,
# tsconfig and package protections in `Run.freeze`, its dev server in `Run.serve_early`.
TEST_RUNNERS = {"pytest": Run.pytest, "playwright": Run.playwright}
WITNESS_PLANS = {"pytest": "plan_pytest", "playwright": "plan_spec"}


def reference_files(repo: Path, workdir: Path, selection: list[str], protected) -> list[str]:
    """The protected Python files the audit will compare the most code with (absolute paths, as pytest names
    its modules): the selected test files and the conftest.py files of the folders from the repository down to
    them. Any other file's reference the launcher compiles itself."""
    files: dict[str, None] = {}
    for arg in selection:
        path = workdir / arg.split("::", 1)[0]
        try:
            rel = path.resolve().relative_to(repo)
        except (OSError, ValueError):
            continue
        for depth in range(len(rel.parts)):
            folder = Path(*rel.parts[:depth])
            files[str(folder / "conftest.py")] = None
        files[str(rel)] = None
    return [str(repo / rel) for rel in files if rel.endswith(".py") and rel in protected]


def pytest_command(test: dict, env: dict, workdir: Path, repo: Path):
    """The source's pytest command started through the harness's launcher, and the environment for it."""
    words = shlex.split(test["command"])
    if len(words) >= 3 and words[1:3] == ["-m", "pytest"]:
        interpreter, rest = words[0], words[3:]
    elif words and words[0] == "pytest":
        interpreter, rest = "python", words[1:]
    else:
        raise SystemExit(f"test command {test['command']!r}: expected 'python -m pytest ...' or 'pytest ...'")
    interpreter = shutil.which(interpreter, path=env.get("PATH")) or interpreter
    env = dict(env)
    pythonpath = env.pop("PYTHONPATH", "")
    env["PBENCH_PYTHONPATH"] = pythonpath
    env["PBENCH_IMPORT_ROOTS"] = json.dumps(
        [str(Path(p) if p.startswith("/") else workdir / p) for p in pythonpath.split(":") if p]
    )
    env["PBENCH_WORK_TREE"] = str(repo)
    cmd = [
        interpreter,
        "-P",
        "-s",
        str(TOOLS / "pbench_pytest.py"),
        *rest,
        # Every outcome's summary line (the cross-check reads them), without the PASSES section that -rA
        # adds: the captured output of every passing test (~20 MB and half the time of a large real suite).
        "-rfEsxXp",
        # Every failure and error in its section, whatever the source's --tb said: the cross-check reads them.
        "--tb=short",
        # Every selected test runs whatever fails first (a must-fail witness among them): no -x / --maxfail.
        "--maxfail=0",
        "-p",
        "no:cacheprovider",
        "-o",
        "junit_family=xunit1",
    ]
    return cmd, env


def main() -> int:
    print(pbench_dns.start(), flush=True)  # before any lookup (the gate's) and any code of the repository
    job = json.loads((IN / JOB_FILE).read_text())
    lock_down()
    run_ = Run(job)
    phase(Phase.PATCHES)
    run_.unpack_tree()
    if not run_.patches():
        return run_.finish(RunnerStatus.PATCH_APPLY_FAILED)
    run_.freeze()
    if job.get("go") or not job.get("prestart"):
        # Made ahead, they have the previous instance's tests to run in; without a prestart, nothing waits for
        # them but the launcher (per module). A one-shot run with a prestart starts them after it, beside the
        # tests: each prestart step ends with every other process killed, so it would wait for them first
        # (docs/performance.md, section 19: +0.5-1 s on the template's and the demo's critical path).
        run_.start_references()
    if not run_.wait_for_go():
        return 0  # the host let the staged run go: nobody reads a result
    run_.serve_early()
    run_.await_gate()
    if not run_.prestart():
        return run_.finish(RunnerStatus.PRESTART_FAILED)
    run_.start_references()  # once: nothing when they were started at the freeze
    return run_.tests()


if __name__ == "__main__":
    sys.exit(main())
