"""In-container runner: patches, prestart, tests. Stdlib only; runs with the image's /usr/bin/python3.

Reads /pbench/in/job.json and writes /pbench/out/result.json. Every step's output goes to its own
log under /pbench/out so a trace can be read without re-running anything.

Privilege separation: the runner is root (without capabilities but SETUID/SETGID); everything that runs
code of the repository (prestart steps, the tests, the server) runs as an unprivileged user (uid 65534)
that cannot write /pbench/out, the runner, the image's packages or .git. Its output reaches the logs
through pipes the runner reads; its report files are written to /pbench/stage and copied out by the
runner only after every process of that user is killed, so nothing it leaves behind writes after the fact.
"""

from __future__ import annotations

import configparser
import contextlib
import json
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

IN = Path("/pbench/in")
OUT = Path("/pbench/out")
STAGE = Path("/pbench/stage")  # the only place under /pbench the test user may write
TEST_UID = TEST_GID = 65534  # nobody / nogroup
TEST_HOME = Path("/tmp/pbench-home")
BASE_TAG = "pbench-base"
GIT = ["git", "-c", "user.name=pbench", "-c", "user.email=pbench@localhost", "-c", "commit.gpgsign=false"]

APPLY_METHODS = (
    ("git apply", ["git", "apply", "--verbose", "--whitespace=nowarn"]),
    ("git apply --3way", ["git", "apply", "--verbose", "--3way", "--whitespace=nowarn"]),
    ("patch --fuzz=5", ["patch", "--batch", "--fuzz=5", "-p1", "--no-backup-if-mismatch", "-r", "-", "-i"]),
)


def run(cmd, cwd, log, env=None, shell=False):
    """Run one trusted command (git, patch) as root, append its output to `log`, return (exit code, s)."""
    start = time.monotonic()
    with open(log, "ab") as fh:
        fh.write(f"$ {cmd if shell else shlex.join(cmd)}\n".encode())
        fh.flush()
        proc = subprocess.run(cmd, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, env=env, shell=shell)
        fh.write(f"[exit {proc.returncode}]\n".encode())
    return proc.returncode, round(time.monotonic() - start, 3)


def drop_privileges():
    """In the child, before exec: become the test user, with no supplementary groups."""
    os.setgroups([])
    os.setgid(TEST_GID)
    os.setuid(TEST_UID)
    os.umask(0o022)


def can_drop_privileges():
    return os.geteuid() == 0 and os.environ.get("PBENCH_RUNNER_SAME_USER") != "1"


def _other_pids():
    """Processes in this container other than init and the runner (names only: reading a process's own
    /proc files can block while a fork bomb holds its memory map)."""
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and int(e) not in (1, os.getpid())]


def kill_test_user():
    """SIGKILL every process the repository's code left (daemons, a fork bomb's children): kill(-1) from
    the root runner (CAP_KILL) reaches every process of the container but init and itself, without
    needing a fork (which a fork bomb at the pids limit would deny). Repeated until none is left."""
    if not can_drop_privileges():
        return []
    left = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)
        time.sleep(0.02)
        left = _other_pids()  # init reaps the killed ones
        if not left:
            break
    return left


def run_untrusted(cmd, cwd, log, env, shell=False):
    """Run repository code as the test user. Its output comes through a pipe (it cannot rewrite or
    truncate the log), and when it exits every process it left is killed before the log is closed."""
    start = time.monotonic()
    drop = can_drop_privileges()
    with open(log, "ab") as fh:
        fh.write(f"$ {cmd if shell else shlex.join(cmd)}\n".encode())
        fh.flush()
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            shell=shell,
            preexec_fn=drop_privileges if drop else None,
        )

        def copy():
            for chunk in iter(lambda: proc.stdout.read1(65536), b""):
                fh.write(chunk)
                fh.flush()

        reader = threading.Thread(target=copy, daemon=True)
        reader.start()
        code = proc.wait()
        kill_test_user()  # a background process holding the pipe would otherwise keep the log open
        reader.join(timeout=10)
        fh.write(f"[exit {code}]\n".encode())
    return code, round(time.monotonic() - start, 3)


def prepare_sandbox(repo):
    """Give the test user what it may write, and nothing else: the work tree (not .git), a home, the
    stage dir for reports, and the caches tools keep inside node_modules."""
    if not can_drop_privileges():
        STAGE.mkdir(parents=True, exist_ok=True)
        return
    for path in (STAGE, TEST_HOME):
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o777)
    for root, dirs, files in os.walk(repo):
        if root == str(repo) and ".git" in dirs:
            dirs.remove(".git")
        for name in dirs + files:
            p = os.path.join(root, name)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                continue
            os.chmod(p, (st.st_mode | 0o666 | (0o111 if stat.S_ISDIR(st.st_mode) else 0)) & 0o7777)
    os.chmod(repo, 0o777)
    deps = Path("/deps")
    if deps.is_dir():
        # Vite and friends write caches in node_modules/.vite*, .cache: let them create entries at the top
        # of each node_modules (existing packages stay root's and read-only).
        for nm in deps.rglob("node_modules"):
            if nm.is_dir() and not nm.is_symlink() and "node_modules" not in nm.parent.parts:
                nm.chmod(0o1777)


def collect_stage():
    """Copy what the test user wrote under /pbench/stage into /pbench/out: regular files only, never through
    a link, never over a file the runner wrote itself."""
    if not STAGE.is_dir():
        return
    for root, _dirs, files in os.walk(STAGE):
        rel_root = os.path.relpath(root, STAGE)
        for name in files:
            rel = os.path.normpath(os.path.join(rel_root, name))
            dest = OUT / rel
            if dest.exists() or dest.is_symlink():
                continue
            try:
                fd = os.open(os.path.join(root, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue
            with os.fdopen(fd, "rb") as src:
                if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                with open(dest, "wb") as dst:
                    shutil.copyfileobj(src, dst)


def git_quiet(args, cwd):
    return subprocess.run(GIT + args, cwd=cwd, capture_output=True, text=True, check=True).stdout


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


PYTEST_SECTIONS = {
    "pyproject.toml": lambda text: tomllib.loads(text).get("tool", {}).get("pytest"),
    "setup.cfg": lambda text: _ini_section(text, "tool:pytest"),
}


def _ini_section(text, name):
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    return dict(parser[name]) if parser.has_section(name) else None


def pytest_section_changed(rel, repo):
    """True when an edit changed the pytest table of a pyproject.toml / setup.cfg (other tables are the
    agent's to change: dependencies, tool settings). Unreadable after the patch counts as changed."""
    parse = PYTEST_SECTIONS.get(rel.rsplit("/", 1)[-1])
    if parse is None:
        return False
    try:
        before = parse(git_quiet(["show", f"HEAD:{rel}"], repo))
    except (subprocess.CalledProcessError, ValueError, configparser.Error):
        before = None  # a new file
    target = repo / rel
    if not target.is_file() or target.is_symlink():
        return before is not None
    try:
        after = parse(target.read_text())
    except (ValueError, configparser.Error, UnicodeDecodeError):
        return True
    return before != after


def restore_protected(patterns, repo, log):
    """Put every protected file an untrusted patch touched back to its content before the patch (or remove
    it): test files, harness files (HARNESS_PROTECTED), pytest tables of pyproject.toml / setup.cfg, and
    any symlink it made. Found from the tree itself after applying, not from the diff text, so no header
    trick escapes it. Returns [(path, why)]."""
    from pbench_globs import HARNESS_PROTECTED, match_any  # shipped beside this file: the host's matcher

    git_quiet(["add", "-A", "-f", "."], repo)
    changed = git_quiet(["diff", "--cached", "--name-only", "--no-renames", "-z", "HEAD"], repo).split("\0")
    tracked = set(git_quiet(["ls-tree", "-r", "--name-only", "HEAD"], repo).splitlines())
    restored = []
    for rel in filter(None, changed):
        target = repo / rel
        if match_any(rel, patterns):
            why = "test file"
        elif match_any(rel, HARNESS_PROTECTED):
            why = "harness file"
        elif target.is_symlink():
            why = "symlink"
        elif pytest_section_changed(rel, repo):
            why = "pytest configuration"
        else:
            continue
        if target.is_symlink() or (target.exists() and not target.is_dir()):
            target.unlink()
        if rel in tracked:
            git_quiet(["checkout", "HEAD", "--", rel], repo)
        restored.append((rel, why))
    git_quiet(["add", "-A", "-f", "."], repo)
    with open(log, "a") as fh:
        fh.write(f"restored to base: {restored}\n")
    return restored


def main() -> int:
    job = json.loads((IN / "job.json").read_text())
    repo = Path(job["repo_dir"])
    workdir = repo / job.get("workdir", ".")
    OUT.mkdir(parents=True, exist_ok=True)
    result = {"status": "completed", "patches": [], "restored": [], "prestart": [], "test": None}
    timings = {}

    def finish(status):
        result["status"] = status
        result["timings"] = timings
        (OUT / "result.json").write_text(json.dumps(result, indent=2))
        return 0

    t0 = time.monotonic()
    git_quiet(["init", "-q"], repo)
    snapshot(repo, "base snapshot")
    git_quiet(["tag", BASE_TAG], repo)
    timings["snapshot_s"] = round(time.monotonic() - t0, 3)

    t0 = time.monotonic()
    for patch in job["patches"]:
        method = apply_patch(patch, repo, OUT / "patch.log")
        result["patches"].append({"name": patch["name"], "method": method})
        if method is None:
            timings["patch_s"] = round(time.monotonic() - t0, 3)
            return finish("patch_apply_failed")
        if patch.get("untrusted"):
            restored = restore_protected(job["test_patterns"], repo, OUT / "patch.log")
            result["restored"] += [rel for rel, _ in restored]
            result["restored_why"] = result.get("restored_why", {}) | dict(restored)
        snapshot(repo, f"after {patch['name']}")
    with open(OUT / "applied.diff", "w") as fh:
        fh.write(
            subprocess.run(["git", "diff", BASE_TAG, "HEAD"], cwd=repo, capture_output=True, text=True).stdout
        )
    timings["patch_s"] = round(time.monotonic() - t0, 3)

    prepare_sandbox(repo)
    env = dict(os.environ)
    if can_drop_privileges():
        env["HOME"] = str(TEST_HOME)
    t0 = time.monotonic()
    for cmd in job.get("prestart", []):
        code, secs = run_untrusted(cmd, workdir, OUT / "prestart.log", env, shell=True)
        result["prestart"].append({"cmd": cmd, "exit_code": code, "seconds": secs})
        if code != 0:
            timings["prestart_s"] = round(time.monotonic() - t0, 3)
            return finish("prestart_failed")
    timings["prestart_s"] = round(time.monotonic() - t0, 3)

    test = job["test"]
    if test["runner"] == "serve":
        # The backend-serve container of a frontend run: after the patches and prestart steps, the server
        # becomes the container's main process. result.json says so before the exec.
        timings["serve_started_at"] = time.time()
        finish("serving")
        sys.stdout.flush()
        os.chdir(workdir)
        if can_drop_privileges():
            drop_privileges()
        os.execvpe("/bin/sh", ["/bin/sh", "-c", "exec " + test["command"]], env)
    cmd = shlex.split(test["command"])
    if test["runner"] == "pytest":
        cmd += [
            "-rA",
            "-p",
            "no:cacheprovider",
            f"--junitxml={STAGE / 'junit.xml'}",
            "-o",
            "junit_family=xunit1",
        ]
        if test.get("continue_on_collection_errors"):
            cmd.append("--continue-on-collection-errors")
    cmd += test.get("selection", [])
    code, secs = run_untrusted(cmd, workdir, OUT / "test.log", env)
    collect_stage()
    result["test"] = {"command": cmd, "exit_code": code, "seconds": secs}
    timings["test_s"] = secs
    return finish("completed")


if __name__ == "__main__":
    sys.exit(main())
