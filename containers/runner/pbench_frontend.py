"""The frontend test step of a test container: dev server, forwards, Playwright (stdlib only, runs as root).

In order, after the prestart steps:
  1. forwards from localhost to other containers of the task's network (`pbench-forward.mjs`, as the tool user);
  2. the frontend server (the source's serve command: the repository's code, as the test user), its output
     through the capped pipe into serve.log;
  3. wait until the server answers (any status below 500), or it exits, or the serve timeout passes
     (exit code 3: no report);
  4. Playwright from the image, by absolute path (`node <deps>/node_modules/@playwright/test/cli.js test`),
     as the tool user (uid 65533: the dev server cannot signal, trace or write into it), with a clean
     environment (no NODE_OPTIONS, no npm configuration, its own HOME and TMPDIR), the harness's config and
     reporters, the JSON report in a stage only that user can write;
  5. when Playwright aborted because spec files failed to load (it has no --continue-on-collection-errors),
     the first report is kept as playwright-load-errors.json and the run is repeated once without them. An
     error that names no file (a missing export is a link error: "The requested module ... does not provide
     an export named ...", no location, no "imported from") is found by listing each spec file alone
     (`--list`, which loads but runs nothing; output in probe.log); the kept report then names those files.
Exit code: Playwright's (0 all passed, 1 a test failed or a file failed to load); 3 when the server never
answered.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from pbench_proc import TOOL_GID, TOOL_UID, Untrusted, can_drop_privileges, collect_stage, kill_all_others
from pbench_protect import node_modules_dirs, shared

TOOLS = Path(__file__).parent
PW_ROOT = Path("/pbench/pw")  # the tool user's: stage (reports), home, tmp
REPORT = "playwright.json"
LOAD_ERRORS = "playwright-load-errors.json"
_SOURCE = re.compile(r"(?<![\w.~-])(/[^\s'\"`()]+\.[cm]?[jt]sx?)\b")  # absolute: not the tail of './x.mjs'
_SPEC_NAME = re.compile(r"\.(?:spec|test|setup)\.[cm]?[jt]sx?$")
PROBE_LIMIT = 100  # files listed one by one at most, and for at most PROBE_BUDGET_S seconds in all
PROBE_BUDGET_S = 180
_CLEAN_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "CI", "SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS")


def link_node_modules(deps: Path, repo: Path, log: Path) -> None:
    """Symlink (as root) every top-level node_modules of the image's /deps into the checkout at the same
    relative path. Patches never reach these folders (a path under node_modules is protected)."""
    lines = []
    for nm in node_modules_dirs(deps):
        target = repo / nm.relative_to(deps)
        if target.is_symlink():
            target.unlink()
        elif target.exists():
            lines.append(f"pbench: {target} exists in the checkout (committed at base); left as it is")
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(nm)
        lines.append(f"linked {target} -> {nm}")
        # Vite and friends keep caches in node_modules/.vite*, .cache: the test user may create entries at the
        # top (sticky: the image's packages stay as they are, read-only); Playwright's user may not.
        try:
            shared(nm, 0o1775)
        except PermissionError:
            lines.append(f"pbench: could not open {nm} for caches")
    with open(log, "a") as fh:
        fh.write("\n".join(lines or ["pbench: no node_modules in the image"]) + "\n")


def playwright_cli(deps: Path) -> Path | None:
    """The image's Playwright CLI, the shallowest install first."""
    for nm in sorted(node_modules_dirs(deps), key=lambda p: len(p.parts)):
        for rel in ("@playwright/test/cli.js", "playwright/cli.js"):
            if (nm / rel).is_file():
                return nm / rel
    return None


def wait_http(url: str, timeout_s: float, server: Untrusted | None) -> tuple[bool, str]:
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    while time.monotonic() < deadline:
        if server is not None and server.poll() is not None:
            return False, f"the server exited (code {server.poll()}) before {url} answered ({last})"
        try:
            with urllib.request.urlopen(url, timeout=2) as res:
                return True, f"{url} answered {res.status}"
        except urllib.error.HTTPError as exc:
            if exc.code < 500:
                return True, f"{url} answered {exc.code}"
            last = f"HTTP {exc.code}"
        except (OSError, ValueError) as exc:
            last = type(exc).__name__
        time.sleep(0.25)
    return False, f"{url} did not answer within {timeout_s:.0f}s ({last})"


def load_error_files(report_path: Path) -> list[str]:
    """Spec files that failed to load, when the report shows a run Playwright aborted because of them (errors
    at the top, no test run at all). Same rule as tasks_lib/formats/playwright_report.py (`error_file`)."""
    try:
        report = json.loads(report_path.read_text())
    except (OSError, ValueError):
        return []
    stats = report.get("stats") or {}
    if any((stats.get(k) or 0) > 0 for k in ("expected", "unexpected", "flaky", "skipped")):
        return []
    files = []
    for error in report.get("errors") or []:
        location = error.get("location") or {}
        path = location.get("file")
        text = f"{error.get('message') or ''}\n{error.get('stack') or ''}"
        if not path:
            match = re.search(r"imported from (/\S+)", text)
            path = match.group(1) if match else None
        if not path:
            path = next((p for p in _SOURCE.findall(text) if "/node_modules/" not in p), None)
        if not path or not Path(path).is_file():
            return []  # an error not tied to a file of the checkout (config, "No tests found", a link error)
        files.append(path)
    return list(dict.fromkeys(files))


def aborted_without_file(report_path: Path) -> bool:
    """The report shows a run Playwright aborted at load (errors at the top, no test run) and none of its
    errors is Playwright's "No tests found" (called when `load_error_files` could name no file of the checkout)."""
    try:
        report = json.loads(report_path.read_text())
    except (OSError, ValueError):
        return False
    stats = report.get("stats") or {}
    if any((stats.get(k) or 0) > 0 for k in ("expected", "unexpected", "flaky", "skipped")):
        return False
    errors = report.get("errors") or []
    texts = [f"{e.get('message') or ''}\n{e.get('stack') or ''}" for e in errors]
    return bool(errors) and not any("No tests found" in t for t in texts)


def spec_candidates(frontend: Path) -> list[Path]:
    """Files under the frontend dir named like tests (`*.spec.*`, `*.test.*`, `*.setup.*`), outside
    node_modules and dot-folders, at most PROBE_LIMIT: which of them the config runs, Playwright decides."""
    found = []
    for root, dirs, files in os.walk(frontend):
        dirs[:] = sorted(d for d in dirs if d != "node_modules" and not d.startswith("."))
        found += [Path(root) / f for f in sorted(files) if _SPEC_NAME.search(f)]
        if len(found) >= PROBE_LIMIT:
            break
    return found[:PROBE_LIMIT]


def probe_load_errors(cmd: list[str], run, env: dict, probe_dir: Path, out: Path) -> dict[str, str]:
    """Spec file -> its load error, by listing each candidate alone (`cmd` without the run's selection, and a
    `/^path$/` filter: exactly that file)."""
    broken = {}
    candidates = spec_candidates(Path(run.workdir))
    deadline = time.monotonic() + PROBE_BUDGET_S
    for i, spec in enumerate(candidates):
        if time.monotonic() > deadline:
            with open(out / "probe.log", "ab") as fh:
                fh.write(
                    f"pbench: probe budget ({PROBE_BUDGET_S}s) spent after {i} of {len(candidates)} files\n".encode()
                )
            break
        # One file per listing: the folder is the tool user's, root (no DAC_OVERRIDE) reads there, never unlinks.
        probe_json = probe_dir / f"list-{i}.json"
        pattern = "/^" + re.sub(r"([.*+?^${}()|\[\]\\/])", r"\\\1", str(spec)) + "$/"
        _run_tool([*cmd, "--list", pattern], run, env | {"PBENCH_PW_JSON": str(probe_json)}, out, "probe.log")
        try:
            errors = json.loads(probe_json.read_text()).get("errors") or []
        except (OSError, ValueError):
            continue
        texts = [(e.get("message") or "").strip() for e in errors]
        texts = [t for t in texts if t and "No tests found" not in t]
        if texts:
            broken[str(spec)] = texts[0]
    if len(broken) > 1 and len(broken) == len(candidates):
        return {}  # every file fails alone: the error is not theirs (the config, a global setup)
    return broken


def named_load_errors(report_path: Path, broken: dict[str, str]) -> bytes:
    """The aborted report, its errors replaced by one per file found (with `location.file`), so that the
    report parser names the files; the original errors are kept under `pbenchUnlocatedErrors`."""
    report = json.loads(report_path.read_text())
    report["pbenchUnlocatedErrors"] = report.get("errors") or []
    report["errors"] = [
        {"message": f"{message} (pbench: found by loading this file alone)", "location": {"file": path}}
        for path, message in broken.items()
    ]
    return json.dumps(report).encode()


def _tool_dirs() -> dict[str, Path]:
    dirs = {name: PW_ROOT / name for name in ("stage", "probe", "home", "tmp")}
    shutil.rmtree(PW_ROOT, ignore_errors=True)
    for name, path in dirs.items():
        path.mkdir(parents=True)
        # The stage stays readable: the runner (root without DAC_OVERRIDE) copies the reports out of it.
        path.chmod((0o755 if name in ("stage", "probe") else 0o700) if can_drop_privileges() else 0o777)
        if can_drop_privileges():
            os.chown(path, TOOL_UID, TOOL_GID)
    PW_ROOT.chmod(0o755)
    return dirs


def start_servers(run, out: Path) -> tuple[list, Untrusted | None]:
    """The forward to the backend and the repository's dev server, started (not awaited): every process, and
    the server among them. With the source's `warm_up_s`, the walk of the server's module graph
    (pbench_warm.py, as the tool user) starts too: it waits for the server itself, and Playwright for it."""
    fe = run.job["frontend"]
    procs = []
    if fe.get("forward"):
        procs.append(
            Untrusted(
                ["node", str(TOOLS / "pbench-forward.mjs"), *fe["forward"]],
                run.workdir,
                out / "forward.log",
                run.env,
                run.budget,
                uid=TOOL_UID,
                gid=TOOL_GID,
            )
        )
    server = None
    if fe.get("serve_command"):
        server = Untrusted(
            fe["serve_command"],
            run.workdir,
            out / "serve.log",
            run.env,
            run.budget,
            shell=True,
            on_exceeded=kill_all_others,
        )
        procs.append(server)
        if fe.get("warm_up_s") and fe.get("serve_url"):
            run.warming = Untrusted(
                [
                    "/usr/bin/python3",
                    "-I",
                    str(TOOLS / "pbench_warm.py"),
                    fe["serve_url"],
                    str(fe["warm_up_s"]),
                ],
                "/",
                out / "warm.log",
                {k: os.environ[k] for k in ("PATH", "LANG") if k in os.environ},
                run.budget,
                uid=TOOL_UID,
                gid=TOOL_GID,
            )
            procs.append(run.warming)
    return procs, server


def run_playwright(run, out: Path, started: tuple[list, Untrusted | None] | None = None) -> dict:
    """The dev server awaited (started here unless `started` says it already was), then Playwright."""
    fe = run.job["frontend"]
    timings = {}
    t0 = time.monotonic()
    procs, server = started or start_servers(run, out)
    record = {"command": None, "exit_code": None, "seconds": 0.0}
    try:
        if fe.get("serve_url"):
            ok, said = wait_http(fe["serve_url"], float(fe.get("serve_timeout_s", 120)), server)
            with open(out / "serve.log", "ab") as fh:
                fh.write(f"pbench: {said}\n".encode())
            if not ok:
                record["exit_code"] = 3
                return record
        timings["serve_s"] = round(time.monotonic() - t0, 3)
        warming = getattr(run, "warming", None)
        if warming is not None:  # it ends by its own budget; most of it passed while the backend started
            t1 = time.monotonic()
            try:
                warming.wait(float(fe["warm_up_s"]) + 15)
            except subprocess.TimeoutExpired:
                warming.stop()
            timings["warm_wait_s"] = round(time.monotonic() - t1, 3)
        run.result["tampering"] += run.guard.scan("after the frontend server started")
        record.update(_playwright(run, fe, out))
        timings["playwright_s"] = record["seconds"]
    finally:
        still = [p for p in procs if p.poll() is None]
        kill_all_others()
        for proc in procs:
            proc.close(None if proc in still else proc.poll())
    record["timings"] = timings
    return record


def _playwright(run, fe: dict, out: Path) -> dict:
    cli = playwright_cli(Path("/deps"))
    if cli is None:
        (out / "test.log").write_text("pbench: no @playwright/test (or playwright) installed in the image\n")
        return {"command": None, "exit_code": 2, "seconds": 0.0}
    node = shutil.which("node", path=os.environ.get("PATH")) or "node"
    dirs = _tool_dirs()
    env = {k: os.environ[k] for k in _CLEAN_ENV if k in os.environ}
    env.update(fe.get("env", {}))
    env.update(
        {
            "HOME": str(dirs["home"]),
            "TMPDIR": str(dirs["tmp"]),
            "PBENCH_OUT": str(dirs["stage"]),
            "PBENCH_PW_JSON": str(dirs["stage"] / REPORT),
            "PBENCH_FRONTEND_DIR": str(run.workdir),
            "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1",
        }
    )
    if getattr(run, "pw_tsconfig", None):
        env["PBENCH_PW_TSCONFIG"] = run.pw_tsconfig
    env.update({k: v for k, v in fe.get("playwright_env", {}).items()})
    selection = list(job_selection(run.job))
    bare = [node, str(cli), "test", "-c", str(TOOLS / "playwright.pbench.config.mjs")]
    cmd = [*bare, *selection]
    start = time.monotonic()
    code = _run_tool(cmd, run, env, out)
    runs = 1
    report = dirs["stage"] / REPORT
    if code != 0 and fe.get("continue_on_load_errors", True) and report.exists():
        broken = load_error_files(report)
        aborted = None
        if not broken and aborted_without_file(report):
            found = probe_load_errors(bare, run, env, dirs["probe"], out)
            if found:
                aborted, broken = named_load_errors(report, found), list(found)
        if broken:
            # The stage is the tool user's (root cannot rename or write there): the aborted report is copied
            # into /pbench/out now, the second run writes the stage's report again.
            aborted = aborted if aborted is not None else report.read_bytes()
            allowed = run.budget.spend(len(aborted), f"report {LOAD_ERRORS}") if run.budget else len(aborted)
            (out / LOAD_ERRORS).write_bytes(aborted[:allowed])
            with open(out / "test.log", "ab") as fh:
                fh.write(
                    f"pbench: spec files failed to load; running again without them: {' '.join(broken)}\n".encode()
                )
            code2 = _run_tool(cmd, run, env | {"PBENCH_PW_IGNORE": " ".join(broken)}, out)
            runs = 2
            code = code2 if code2 > 1 else code  # the run as a whole failed (files did not load)
    collect_stage(dirs["stage"], run.budget)
    return {"command": cmd, "exit_code": code, "seconds": round(time.monotonic() - start, 3), "runs": runs}


def job_selection(job: dict):
    yield from job["test"].get("selection", [])


def _run_tool(cmd, run, env, out: Path, log: str = "test.log") -> int:
    proc = Untrusted(
        cmd,
        run.workdir,
        out / log,
        env,
        run.budget,
        uid=TOOL_UID,
        gid=TOOL_GID,
        on_exceeded=kill_all_others,
    )
    code = proc.wait()
    proc.close(code)
    return code
