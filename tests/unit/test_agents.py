"""Plugging an agent in (issue 39): the checkout an agent starts from, the budget it runs under, the diff taken
back from it, and the predictions file a batch writes, resumes and hands to the judge. No Docker: the demo
repository is generated from data/demo, the instances are built from its pull requests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tasks_lib.core.constants import AgentOutcome
from tasks_lib.core.errors import InputError
from tasks_lib.judge import agents, workspace
from tasks_lib.judge.agent_command import Budget, run_command
from tasks_lib.judge.predictions import load_predictions
from tasks_lib.sources import demo_repo, gitops

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "instance-1396.jsonl"
SCRIPTED = ROOT / "tests" / "stand_ins" / "scripted_agent.py"
AGENT = f"{sys.executable} {SCRIPTED}"
DEMO = "prototypebench__demo-fullstack-"
BUDGET = Budget(timeout_s=120, max_output_bytes=100_000)


@pytest.fixture(scope="module")
def demo():
    """The generated demo repository and its pull requests by number."""
    repo = demo_repo.ensure_demo_repo()
    prs = {r["number"]: r for r in map(json.loads, demo_repo.demo_prs_path(repo).read_text().splitlines())}
    return repo, prs


def _record(demo, number: int) -> dict:
    """A demo instance as curation would package it (the statement: the closing issue, else the PR body); its
    patches and tests are another instance's, which nothing here reads."""
    repo, prs = demo
    pr = prs[number]
    merge = pr["mergeCommit"]["oid"]
    issues = pr["closingIssuesReferences"]
    return {
        **json.loads(FIXTURE.read_text().splitlines()[0]),
        "instance_id": f"{DEMO}{number}",
        "repo": demo_repo.REPO,
        "pr_number": number,
        "base_commit": gitops.first_parent(repo / ".git", merge),
        "head_commit": merge,
        "problem_statement": issues[0]["body"] if issues else pr["body"],
        "created_at": pr["mergedAt"],
        "stack_domain": "backend_only",
    }


@pytest.fixture
def corpus(demo, tmp_path) -> Path:
    path = tmp_path / "demo.jsonl"
    path.write_text("".join(json.dumps(_record(demo, n)) + "\n" for n in (3, 5, 8, 12)))
    return path


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def _checkout(demo, number: int, dest: Path) -> workspace.Checkout:
    from tasks_lib.corpus.instance import TaskInstance

    return workspace.checkout(TaskInstance.from_record(_record(demo, number)), demo[0] / ".git", dest)


def test_a_checkout_is_the_base_tree_with_nothing_of_the_future(demo, tmp_path):
    """Rule: the agent's starting tree is the base commit's tree, in a repository whose only object graph is
    that one commit: the merge commit (the answer), the test files the PR adds and later history are not in
    it, whatever git command the agent runs; its status is clean and `git diff` empty."""
    repo, prs = demo
    made = _checkout(demo, 8, tmp_path / "co")
    co = made.dir
    head = prs[8]["mergeCommit"]["oid"]
    assert (
        made.same_tree
        and _git(co, "rev-parse", "HEAD^{tree}").strip()
        == _git(repo, "rev-parse", f"{made.base_commit}^{{tree}}").strip()
    )
    assert (
        _git(co, "rev-list", "--all").split() == [made.root] == [_git(co, "rev-parse", "pbench-base").strip()]
    )
    assert _git(co, "status", "--porcelain") == "" and _git(co, "diff") == "" and _git(co, "remote") == ""

    def has(obj: str) -> bool:
        return subprocess.run(["git", "cat-file", "-e", obj], cwd=co).returncode == 0

    assert has(made.root) and has(_git(repo, "rev-parse", f"{made.base_commit}:README.md").strip())
    for future in (head, gitops.first_parent(repo / ".git", prs[16]["mergeCommit"]["oid"])):
        assert not has(future)
    # The PR's own files (its new module and its tests) are neither in the tree nor among the objects.
    for path in ("backend/app/slugs.py", "backend/tests/test_slugs.py"):
        assert not (co / path).exists()
        assert not has(_git(repo, "rev-parse", f"{head}:{path}").strip())
    # Every object of the checkout is reachable from its one commit: nothing else is stored.
    reachable = {line.split()[0] for line in _git(co, "rev-list", "--objects", "--all").splitlines()}
    stored = {
        p.parent.name + p.name
        for p in (co / ".git" / "objects").glob("??/*")
        if p.parent.name not in ("info", "pack")
    }
    assert stored == reachable and not list((co / ".git" / "objects" / "pack").glob("*.pack"))


def test_a_checkout_refuses_a_folder_that_is_not_empty(demo, tmp_path, corpus):
    """Bad input: a non-empty DIR (or a file) is refused with exit 2, naming it, and left as it was."""
    dest = tmp_path / "busy"
    dest.mkdir()
    (dest / "mine.txt").write_text("keep me")
    with pytest.raises(InputError, match="busy: not empty"):
        _checkout(demo, 5, dest)
    res = subprocess.run(
        [sys.executable, "-m", "cli.pbench", "checkout", f"{DEMO}5", str(dest), "--dataset", str(corpus)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2 and str(dest) in res.stderr and "not empty" in res.stderr
    assert [p.name for p in dest.iterdir()] == ["mine.txt"]


def test_the_diff_holds_every_change_against_the_base_and_applies_to_it(demo, tmp_path):
    """Rule: the prediction is everything the work tree holds that the base does not (edits, new files in new
    folders, deletions, a change the agent committed); bytecode, tool caches and what .gitignore names are
    not part of it. Applied to a fresh checkout, it gives back the agent's tree."""
    co = _checkout(demo, 5, tmp_path / "agent").dir
    (co / "backend" / "app" / "main.py").write_text("# rewritten\n")
    (co / "backend" / "app" / "extra").mkdir()
    (co / "backend" / "app" / "extra" / "new.py").write_text("NEW = 1\n")
    (co / "README.md").unlink()
    _git(co, "add", "-A")
    _git(co, "commit", "-q", "-m", "the agent commits")
    (co / "backend" / "app" / "crud.py").write_text("# after the commit\n")
    (co / "backend" / "app" / "__pycache__").mkdir()
    (co / "backend" / "app" / "__pycache__" / "main.cpython-311.pyc").write_bytes(b"\x00\x01bytecode")
    (co / "frontend" / "node_modules" / "x").mkdir(parents=True)
    (co / "frontend" / "node_modules" / "x" / "index.js").write_text("module.exports = 1\n")

    diff = subprocess.run(
        [sys.executable, "-m", "cli.pbench", "agent", "diff", str(co)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout
    root = workspace.read_marker(co).root
    assert diff == workspace.read_change(co, root)
    from tasks_lib.formats.patches import changed_paths, validate_patch

    assert sorted(changed_paths(diff)) == [
        "README.md",
        "backend/app/crud.py",
        "backend/app/extra/new.py",
        "backend/app/main.py",
    ]
    assert validate_patch(diff) == []
    fresh = _checkout(demo, 5, tmp_path / "fresh").dir
    subprocess.run(["git", "apply", "-"], cwd=fresh, input=diff, text=True, check=True)
    for rel in ("backend/app/main.py", "backend/app/crud.py", "backend/app/extra/new.py"):
        assert (fresh / rel).read_text() == (co / rel).read_text()
    assert not (fresh / "README.md").exists()
    # The agent's own index and history are as it left them.
    assert _git(co, "rev-list", "--count", "HEAD").strip() == "2"
    assert " M backend/app/crud.py" in _git(co, "status", "--porcelain")


def test_the_time_limit_kills_the_agents_whole_process_group(tmp_path):
    """Budget: at the limit the agent and what it started are stopped (its process group), the run says
    timeout, and the log says so; what it printed before stays."""
    command = "echo started; sleep 300 & echo $! > child.pid; sleep 300"
    run = run_command(command, tmp_path, dict(os.environ), None, Budget(1, 10_000), tmp_path / "agent.log")
    assert run.timed_out and run.outcome == AgentOutcome.TIMEOUT and run.exit_code is None
    child = int((tmp_path / "child.pid").read_text())
    status = Path(f"/proc/{child}/status")
    assert not status.exists() or "State:\tZ" in status.read_text()  # gone (or dead, not yet reaped by init)
    log = (tmp_path / "agent.log").read_text()
    assert log.startswith("started\n") and "stopped at the time limit of 1 s" in log


def test_a_stop_asked_for_by_the_operator_stops_the_agent_and_its_group(tmp_path):
    """Ctrl-C / SIGTERM (the stop every thread sees) ends a running agent and what it started, at once, and the
    batch's thread raises Interrupted (never a prediction of a half-run agent)."""
    import threading
    import time

    from tasks_lib.core import stopping

    command = "sleep 300 & echo $! > child.pid; sleep 300"

    def stop_once_started() -> None:
        while not (tmp_path / "child.pid").exists():
            time.sleep(0.05)
        stopping.request_stop()

    threading.Thread(target=stop_once_started, daemon=True).start()
    try:
        with pytest.raises(stopping.Interrupted):
            run_command(command, tmp_path, dict(os.environ), None, Budget(300, 1000), tmp_path / "agent.log")
    finally:
        stopping.reset()
    status = Path(f"/proc/{int((tmp_path / 'child.pid').read_text())}/status")

    def gone() -> bool:
        try:
            return "State:\tZ" in status.read_text()
        except FileNotFoundError:
            return True

    # SIGKILL is delivered when the killed process is next scheduled: on a loaded machine it may still show
    # "R" for a moment after the kill returned. Gone within 5 s is "at once" for an operator.
    deadline = time.monotonic() + 5
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert gone()


def test_output_over_the_cap_is_dropped_from_the_log_not_fatal(tmp_path):
    """Budget: an agent that prints more than the cap keeps running to its end; the log holds the cap, then a
    note, and the run counts all it printed."""
    command = f"{sys.executable} -c \"import sys; sys.stdout.write('x' * 200_000); sys.stderr.write('e')\""
    run = run_command(command, tmp_path, dict(os.environ), None, Budget(60, 1000), tmp_path / "agent.log")
    assert run.outcome == AgentOutcome.COMPLETED and run.exit_code == 0
    assert run.output_bytes == 200_001 and run.output_truncated
    log = (tmp_path / "agent.log").read_bytes()
    assert log.startswith(b"x" * 1000) and b"output over 1000 bytes" in log and len(log) < 1100


@pytest.mark.parametrize("mode", ["stdin", "file"])
def test_what_the_agent_sees(corpus, tmp_path, mode):
    """The agent runs in the checkout with the statement on stdin (`stdin`) or not (`file`: stdin empty),
    always in $PBENCH_STATEMENT_FILE outside the checkout, and the instance in its environment."""
    command = "cat > ../stdin.txt; pwd > ../cwd.txt; env > ../env.txt"
    plan = agents.plan_agents(
        str(corpus), command, "probe", tmp_path / "p.jsonl", BUDGET, mode, ids=[f"{DEMO}5"]
    )
    agents.run_batch(plan)
    folder = plan.folder / f"{DEMO}5"
    statement = _record_statement(corpus, f"{DEMO}5")
    assert (folder / "stdin.txt").read_text() == (statement if mode == "stdin" else "")
    assert (folder / "cwd.txt").read_text().strip() == str(folder / "checkout")
    env = dict(line.split("=", 1) for line in (folder / "env.txt").read_text().splitlines() if "=" in line)
    assert env["PBENCH_INSTANCE_ID"] == f"{DEMO}5" and env["PBENCH_REPO"] == demo_repo.REPO
    assert Path(env["PBENCH_STATEMENT_FILE"]).read_text() == statement
    assert env["PBENCH_STATEMENT_FILE"] == str(folder / "statement.md")
    assert len(env["PBENCH_BASE_COMMIT"]) == 40 and env["PBENCH_TIMEOUT_S"] == "120"
    assert not (folder / "checkout").exists()  # removed once its diff is taken (--keep-checkouts keeps it)
    assert json.loads((tmp_path / "p.jsonl").read_text())["model_patch"] == ""


def _record_statement(corpus: Path, iid: str) -> str:
    rows = [json.loads(line) for line in corpus.read_text().splitlines()]
    return next(r["problem_statement"] for r in rows if r["instance_id"] == iid)


def test_the_scripted_agent_batch_writes_swebench_predictions_the_judge_loads(corpus, tmp_path):
    """A batch of the scripted stand-in agent: one SWE-bench prediction per instance (exactly its three fields,
    `model_name_or_path` the model), the new file of demo-8 in its diff, the agent that gave up (demo-12, exit
    3) counted as failed with an empty prediction, never a crash; `pbench evaluate`'s loader takes the file."""
    out = tmp_path / "preds.jsonl"
    plan = agents.plan_agents(str(corpus), AGENT, "scripted", out, BUDGET)
    summary = agents.run_batch(plan, max_agents=2)
    assert summary["by_outcome"] == {"completed": 3, "failed": 1} and summary["harness_errors"] == []
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(set(r) == {"instance_id", "model_name_or_path", "model_patch"} for r in rows)
    by_id = {r["instance_id"]: r["model_patch"] for r in rows}
    assert sorted(by_id) == sorted(f"{DEMO}{n}" for n in (3, 5, 8, 12))
    assert "new file mode 100644" in by_id[f"{DEMO}8"] and "+def slugify_title(" in by_id[f"{DEMO}8"]
    assert 'raise HTTPException(status_code=404, detail="Item not found")' in by_id[f"{DEMO}5"]
    assert by_id[f"{DEMO}12"] == ""
    loaded = load_predictions(out, list(by_id), default_model="scripted", require_model=True)
    assert [p.model_patch for p in loaded] == [by_id[p.instance_id] for p in loaded]
    attempts = {
        r["instance_id"]: r
        for r in map(json.loads, (plan.folder / "attempts.jsonl").read_text().splitlines())
    }
    assert attempts[f"{DEMO}12"]["outcome"] == "failed" and attempts[f"{DEMO}12"]["exit_code"] == 3
    assert attempts[f"{DEMO}8"]["files"] == ["backend/app/slugs.py"]
    assert "no idea how to solve" in (plan.folder / f"{DEMO}12" / "agent.log").read_text()
    assert (plan.folder / f"{DEMO}5" / "model.patch").read_text() == by_id[f"{DEMO}5"]


def test_a_rerun_resumes_and_retry_failed_runs_the_failed_again(corpus, tmp_path):
    """Idempotent: a second run of the same command runs nothing; --retry-failed runs again only what did not
    complete; a file of another model, or (for an evaluation) of instances outside the selection, is refused."""
    out = tmp_path / "preds.jsonl"
    agents.run_batch(
        agents.plan_agents(str(corpus), AGENT, "scripted", out, BUDGET, ids=[f"{DEMO}5", f"{DEMO}12"])
    )
    before = out.read_text()
    again = agents.plan_agents(str(corpus), AGENT, "scripted", out, BUDGET, ids=[f"{DEMO}5", f"{DEMO}12"])
    assert again.jobs == {} and again.skipped == [f"{DEMO}5", f"{DEMO}12"]
    wider = agents.plan_agents(str(corpus), AGENT, "scripted", out, BUDGET)
    assert list(wider.jobs) == [f"{DEMO}3", f"{DEMO}8"]
    retry = agents.plan_agents(str(corpus), AGENT, "scripted", out, BUDGET, retry_failed=True)
    assert list(retry.jobs) == [f"{DEMO}3", f"{DEMO}8", f"{DEMO}12"]
    assert out.read_text() == before
    with pytest.raises(InputError, match="not of --model 'other'"):
        agents.plan_agents(str(corpus), AGENT, "other", out, BUDGET)
    with pytest.raises(InputError, match="outside this selection"):
        agents.plan_agents(str(corpus), AGENT, "scripted", out, BUDGET, ids=[f"{DEMO}5"], for_evaluation=True)


def test_an_agent_stopped_at_the_limit_still_leaves_its_diff(corpus, tmp_path):
    """A timeout is recorded, and what the agent had written by then is its prediction (autosubmission)."""
    command = "echo '# half done' >> backend/app/main.py; sleep 300"
    plan = agents.plan_agents(
        str(corpus), command, "slow", tmp_path / "p.jsonl", Budget(1, 1000), ids=[f"{DEMO}5"]
    )
    summary = agents.run_batch(plan)
    assert summary["by_outcome"] == {"timeout": 1}
    patch = json.loads((tmp_path / "p.jsonl").read_text())["model_patch"]
    assert "+# half done" in patch


def test_test_edits_are_named_as_refused_or_left_out_on_request(corpus, tmp_path):
    """The judge refuses a patch that touches a test file: the attempt says so; with drop_test_edits the test
    files are left out of the diff and named."""
    command = "echo '# fix' >> backend/app/main.py; echo '# mine' >> backend/tests/test_items.py"
    kept = agents.plan_agents(str(corpus), command, "m", tmp_path / "a.jsonl", BUDGET, ids=[f"{DEMO}5"])
    [done] = [a for a in _attempts(kept)]
    assert any("backend/tests/test_items.py" in p and "test file" in p for p in done.problems)
    dropped = agents.plan_agents(
        str(corpus), command, "m", tmp_path / "b.jsonl", BUDGET, ids=[f"{DEMO}5"], drop_test_edits=True
    )
    [done] = _attempts(dropped)
    assert done.dropped == ("backend/tests/test_items.py",) and done.problems == ()
    assert done.files == ("backend/app/main.py",)


def _attempts(plan) -> list:
    seen = []
    agents.run_batch(plan, on_attempt=lambda a, n, t: seen.append(a))
    return seen


def test_bad_inputs_are_refused_before_any_agent_runs(demo, corpus, tmp_path):
    """Exit 2 before anything runs: a base commit the clone lacks (named), --evaluate without a cutoff, an
    --out that is not .jsonl, an unknown statement mode; nothing written."""
    rows = [_record(demo, 5) | {"base_commit": "0" * 40}]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rows[0]) + "\n")
    with pytest.raises(
        InputError, match=f"{DEMO}5: base commit 0000000000000000000000000000000000000000 is not"
    ):
        agents.plan_agents(str(bad), AGENT, "m", tmp_path / "p.jsonl", BUDGET)
    base = [
        sys.executable,
        "-m",
        "cli.pbench",
        "agent",
        "run",
        "-c",
        "true",
        "--model",
        "m",
        "--dataset",
        str(corpus),
    ]
    for extra, says in (
        (["--out", str(tmp_path / "p.jsonl"), "--evaluate"], "--model-cutoff"),
        (["--out", str(tmp_path / "p.json")], "a .jsonl file"),
        (["--out", str(tmp_path / "p.jsonl"), "--statement", "pipe"], "--statement: one of stdin, file"),
        (["--out", str(tmp_path / "p.jsonl"), "--model-cutoff", "2025-01-01"], "go with --evaluate"),
    ):
        res = subprocess.run([*base, *extra], cwd=ROOT, capture_output=True, text=True)
        assert res.returncode == 2 and says in res.stderr, res.stderr
    assert not (tmp_path / "p.jsonl").exists() and not (tmp_path / "p-agent").exists()
