"""In-container runner: patches, prestart, tests. Stdlib only; runs with the image's /usr/bin/python3.

Reads /pbench/in/job.json and writes /pbench/out/result.json. Every step's output goes to its own
log under /pbench/out so a trace can be read without re-running anything.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

IN = Path("/pbench/in")
OUT = Path("/pbench/out")
BASE_TAG = "pbench-base"
GIT = ["git", "-c", "user.name=pbench", "-c", "user.email=pbench@localhost", "-c", "commit.gpgsign=false"]

APPLY_METHODS = (
    ("git apply", ["git", "apply", "--verbose", "--whitespace=nowarn"]),
    ("git apply --3way", ["git", "apply", "--verbose", "--3way", "--whitespace=nowarn"]),
    ("patch --fuzz=5", ["patch", "--batch", "--fuzz=5", "-p1", "--no-backup-if-mismatch", "-r", "-", "-i"]),
)


def run(cmd, cwd, log, env=None, shell=False):
    """Run one command, append its output to `log`, return (exit code, seconds)."""
    start = time.monotonic()
    with open(log, "ab") as fh:
        fh.write(f"$ {cmd if shell else shlex.join(cmd)}\n".encode())
        fh.flush()
        proc = subprocess.run(cmd, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, env=env, shell=shell)
        fh.write(f"[exit {proc.returncode}]\n".encode())
    return proc.returncode, round(time.monotonic() - start, 3)


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


def restore_tests(patterns, repo, log):
    """Put every test file an untrusted patch touched back to its base content (or remove it).

    Found from the tree itself after applying, not from the diff text, so no header trick escapes it.
    """
    from pbench_globs import match_any  # shipped beside this file: the host's own matcher

    git_quiet(["add", "-A", "-f", "."], repo)
    changed = git_quiet(["diff", "--cached", "--name-only", "--no-renames", "-z", "HEAD"], repo).split("\0")
    paths = [p for p in changed if p and match_any(p, patterns)]
    restored = []
    tracked = set(git_quiet(["ls-tree", "-r", "--name-only", BASE_TAG], repo).splitlines())
    for rel in paths:
        target = repo / rel
        if rel in tracked:
            git_quiet(["checkout", BASE_TAG, "--", rel], repo)
        elif target.exists() or target.is_symlink():
            git_quiet(["rm", "-q", "--cached", "--", rel], repo)
            target.unlink()
        else:
            continue
        restored.append(rel)
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
            result["restored"] += restore_tests(job["test_patterns"], repo, OUT / "patch.log")
        snapshot(repo, f"after {patch['name']}")
    with open(OUT / "applied.diff", "w") as fh:
        fh.write(
            subprocess.run(["git", "diff", BASE_TAG, "HEAD"], cwd=repo, capture_output=True, text=True).stdout
        )
    timings["patch_s"] = round(time.monotonic() - t0, 3)

    env = dict(os.environ)
    t0 = time.monotonic()
    for cmd in job.get("prestart", []):
        code, secs = run(cmd, workdir, OUT / "prestart.log", env=env, shell=True)
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
        os.execvpe("/bin/sh", ["/bin/sh", "-c", "exec " + test["command"]], env)
    cmd = shlex.split(test["command"])
    if test["runner"] == "pytest":
        cmd += [
            "-rA",
            "-p",
            "no:cacheprovider",
            f"--junitxml={OUT / 'junit.xml'}",
            "-o",
            "junit_family=xunit1",
        ]
        if test.get("continue_on_collection_errors"):
            cmd.append("--continue-on-collection-errors")
    cmd += test.get("selection", [])
    code, secs = run(cmd, workdir, OUT / "test.log", env=env)
    result["test"] = {"command": cmd, "exit_code": code, "seconds": secs}
    timings["test_s"] = secs
    return finish("completed")


if __name__ == "__main__":
    sys.exit(main())
