"""The execution engine against the real Docker engine and a real Postgres (issue 2 must-shows)."""

from __future__ import annotations

import dataclasses
import os
import time

import pytest

from tasks_lib import engine
from tasks_lib.core.constants import LABEL_OWNER, Outcome, RunStatus, Side
from tasks_lib.formats import patches
from tasks_lib.images import build as images
from tasks_lib.sources import gitops
from tasks_lib.sources.demo_repo import DEMO_PRS

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _pr(demo_repo, demo_prs, kind):
    head = demo_prs[DEMO_PRS[kind]]["mergeCommit"]["oid"]
    return gitops.first_parent(demo_repo, head), head


def _split(demo_source, demo_repo, base, head):
    return patches.split_patch(gitops.diff(demo_repo, base, head), demo_source)


def _run(demo_source, demo_repo, commit, chain, tmp_path, name, **kw):
    return engine.run_tests(
        engine.RunRequest(demo_source, demo_repo, commit, tmp_path / name, tuple(chain), **kw)
    )


def test_feature_pr_new_tests_fail_at_base_and_pass_with_reference(
    demo_source, demo_repo, demo_prs, tmp_path, base_images
):
    """Same engine, different inputs: the feature PR's new tests fail at base + test patch and pass with the
    reference patch, against a real Postgres (the DB-backed tests pass on both sides)."""
    base, head = _pr(demo_repo, demo_prs, "feature")
    split = _split(demo_source, demo_repo, base, head)
    test_patch = engine.PatchInput("test_patch", split.test_patch)
    before = _run(demo_source, demo_repo, base, [test_patch], tmp_path, "base")
    after = _run(
        demo_source, demo_repo, base, [engine.PatchInput("gold", split.patch), test_patch], tmp_path, "head"
    )

    assert before.status == after.status == RunStatus.COMPLETED
    assert before.suite_ran and after.suite_ran
    added = {t for t in after.tests if "archive" in t}
    assert added, after.tests
    assert all(before.tests[t] == Outcome.FAILED for t in added)
    assert all(after.tests[t] == Outcome.PASSED for t in after.tests)
    # Tests that need the database (create + read through the API) pass at base: Postgres was real.
    assert before.tests["tests/test_items.py::test_read_item"] == Outcome.PASSED
    # Parametrized ids with spaces and brackets survive the round trip through JUnit XML.
    assert after.tests["tests/test_items.py::test_create_item_titles[with space]"] == Outcome.PASSED
    assert after.tests["tests/test_items.py::test_create_item_titles[br[ack]et]"] == Outcome.PASSED
    assert (tmp_path / "head" / "junit.xml").exists() and (tmp_path / "head" / "test.log").exists()
    assert after.patch_methods == {"gold": "git apply", "test_patch": "git apply"}


def test_patch_that_does_not_apply_is_reported_not_run(
    demo_source, demo_repo, demo_prs, tmp_path, base_images
):
    """A patch whose context is not in the tree ends the run as patch_apply_failed (after all three methods)."""
    base, _ = _pr(demo_repo, demo_prs, "feature")
    bogus = (
        "diff --git a/backend/app/main.py b/backend/app/main.py\n--- a/backend/app/main.py\n"
        "+++ b/backend/app/main.py\n@@ -1,3 +1,3 @@\n-this line is not there\n+nor this\n context\n"
    )
    res = _run(
        demo_source, demo_repo, base, [engine.PatchInput("agent", bogus, untrusted=True)], tmp_path, "bad"
    )
    assert res.status == RunStatus.PATCH_APPLY_FAILED
    assert res.patch_methods == {"agent": None}
    assert not res.suite_ran and not res.tests


SANDBOX_PROBE = """
import locale
import os
import socket
import sys
import time

import pytest


def test_no_route_to_the_internet():
    for host, port in (("1.1.1.1", 443), ("pypi.org", 443)):
        with pytest.raises(OSError):
            socket.create_connection((host, port), timeout=3)


def test_database_is_reachable_on_the_private_network():
    socket.create_connection((os.environ["POSTGRES_SERVER"], int(os.environ["POSTGRES_PORT"])), timeout=3).close()


def test_no_docker_socket_and_no_host_environment():
    assert not os.path.exists("/var/run/docker.sock")
    assert "PBENCH_CANARY_SECRET" not in os.environ
    assert not any("TOKEN" in k for k in os.environ)


def test_pinned_environment():
    assert os.environ["TZ"] == "UTC"
    assert os.environ["PYTHONHASHSEED"] == "0"
    assert os.environ["LANG"] == os.environ["LC_ALL"] == "C.UTF-8"
    # In effect, not only set: no hash randomisation, UTC clock, UTF-8 locale.
    assert sys.flags.hash_randomization == 0
    assert time.strftime("%Z", time.localtime(0)) == "UTC"
    assert locale.getpreferredencoding(False) == "UTF-8"
"""


def _new_file_diff(path: str, text: str) -> str:
    lines = text.strip("\n").splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{len(lines)} @@\n{body}"


def test_sandbox_has_no_internet_no_socket_no_host_env(
    demo_source, demo_repo, demo_prs, tmp_path, base_images, monkeypatch
):
    """Untrusted code runs without a route out, without the Docker socket, without the host's environment,
    with TZ, PYTHONHASHSEED, LANG and LC_ALL pinned (and in effect); the database is reachable on the task's
    private network."""
    monkeypatch.setenv("PBENCH_CANARY_SECRET", "s3cret")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_canary")
    base, _ = _pr(demo_repo, demo_prs, "feature")
    probe = engine.PatchInput("test_patch", _new_file_diff("backend/tests/test_sandbox.py", SANDBOX_PROBE))
    res = _run(
        demo_source, demo_repo, base, [probe], tmp_path, "sandbox", selection=("tests/test_sandbox.py",)
    )
    assert res.status == RunStatus.COMPLETED, res.error
    assert res.tests == {
        "tests/test_sandbox.py::test_no_route_to_the_internet": Outcome.PASSED,
        "tests/test_sandbox.py::test_database_is_reachable_on_the_private_network": Outcome.PASSED,
        "tests/test_sandbox.py::test_no_docker_socket_and_no_host_environment": Outcome.PASSED,
        "tests/test_sandbox.py::test_pinned_environment": Outcome.PASSED,
    }, res.messages


def test_untrusted_patch_cannot_change_a_test(demo_source, demo_repo, demo_prs, tmp_path, base_images):
    """Test files an untrusted patch touches are put back to base inside the container before the test patch."""
    base, _ = _pr(demo_repo, demo_prs, "feature")
    cheat = (
        "diff --git a/backend/tests/test_items.py b/backend/tests/test_items.py\n"
        "--- a/backend/tests/test_items.py\n+++ b/backend/tests/test_items.py\n"
        "@@ -1,1 +1,2 @@\n+raise SystemExit('edited by the agent')\n"
    )
    first_line = gitops.read_file(demo_repo, base, "backend/tests/test_items.py").decode().splitlines()[0]
    cheat += f" {first_line}\n"
    added = _new_file_diff("backend/tests/test_extra.py", "def test_free_pass():\n    assert True\n")
    res = _run(
        demo_source,
        demo_repo,
        base,
        [engine.PatchInput("agent", cheat + added, untrusted=True)],
        tmp_path,
        "cheat",
    )
    assert res.status == RunStatus.COMPLETED, res.error
    assert sorted(res.restored) == ["backend/tests/test_extra.py", "backend/tests/test_items.py"]
    assert "tests/test_extra.py::test_free_pass" not in res.tests
    assert res.tests["tests/test_items.py::test_read_item"] == Outcome.PASSED


def test_wall_clock_timeout_kills_the_stack(
    demo_source, demo_repo, demo_prs, tmp_path, docker_engine, base_images
):
    """A run over its wall-clock budget ends as `timeout`, and its containers, network and volume are gone."""
    base, _ = _pr(demo_repo, demo_prs, "feature")
    slow = dataclasses.replace(
        demo_source, backend=dataclasses.replace(demo_source.backend, prestart=("sleep 120",))
    )
    start = time.monotonic()
    res = engine.run_tests(engine.RunRequest(slow, demo_repo, base, tmp_path / "slow", timeout_s=25))
    assert res.status == RunStatus.TIMEOUT
    assert time.monotonic() - start < 90
    flt = {"label": f"{LABEL_OWNER}={os.environ['PBENCH_OWNER']}"}
    assert not docker_engine.containers.list(all=True, filters=flt)
    assert not docker_engine.networks.list(filters=flt)
    assert not docker_engine.volumes.list(filters=flt)


ORDER_PROBE = """
import os

# Read when the module is collected: the repository's code must not run before the prestart steps are done.
DONE_AT_IMPORT = os.path.exists(os.path.expanduser("~/prestart-done"))


def test_imported_after_the_prestart():
    assert DONE_AT_IMPORT
"""


def test_the_tests_run_no_code_before_the_prestart_is_done(
    demo_source, demo_repo, demo_prs, tmp_path, base_images
):
    """No code of the repository runs in the test process until the prestart steps are done (a test module
    reads at import what the last prestart step writes after a pause: a guard for any cut that overlaps the
    two, docs/performance.md section 16). A prestart that fails: no test runs."""
    base, _ = _pr(demo_repo, demo_prs, "feature")
    probe = engine.PatchInput("test_patch", _new_file_diff("backend/tests/test_order.py", ORDER_PROBE))
    slow = dataclasses.replace(
        demo_source,
        backend=dataclasses.replace(
            demo_source.backend,
            prestart=(*demo_source.backend.prestart, 'sleep 2 && touch "$HOME/prestart-done"'),
        ),
    )
    res = engine.run_tests(
        engine.RunRequest(
            slow, demo_repo, base, tmp_path / "order", (probe,), selection=("tests/test_order.py",)
        )
    )
    assert res.status == RunStatus.COMPLETED, res.error
    assert res.tests == {"tests/test_order.py::test_imported_after_the_prestart": Outcome.PASSED}, (
        res.messages
    )

    failing = dataclasses.replace(
        demo_source, backend=dataclasses.replace(demo_source.backend, prestart=("sleep 1 && exit 3",))
    )
    res = engine.run_tests(
        engine.RunRequest(
            failing, demo_repo, base, tmp_path / "fail", (probe,), selection=("tests/test_order.py",)
        )
    )
    assert res.status == RunStatus.PRESTART_FAILED
    assert not res.tests and not (tmp_path / "fail" / "junit.xml").exists()


def test_unchanged_lock_is_a_cache_hit(demo_source, demo_repo, demo_prs, base_images):
    """A second build of an unchanged lock builds nothing and takes seconds."""
    base, _ = _pr(demo_repo, demo_prs, "feature")
    spec = images.backend_env_spec(demo_source, images.dependency_contents(demo_source, demo_repo, base))
    first = images.ensure_env_image(spec)
    start = time.monotonic()
    second = images.ensure_env_image(spec)
    assert not second.built and second.id == first.id
    assert time.monotonic() - start < 5


def test_patch_changing_the_lock_runs_in_the_patched_lock_image(
    demo_source, demo_repo, demo_prs, tmp_path, base_images
):
    """A reference patch that adds a package runs in the image for the patched lock (so the gold patch
    passes), while the base side keeps the base lock's image."""
    base, head = _pr(demo_repo, demo_prs, "collection_error")
    split = _split(demo_source, demo_repo, base, head)
    assert "backend/requirements.txt" in patches.changed_paths(split.patch)
    test_patch = engine.PatchInput("test_patch", split.test_patch)
    before = _run(demo_source, demo_repo, base, [test_patch], tmp_path, "base")
    after = _run(
        demo_source, demo_repo, base, [engine.PatchInput("gold", split.patch), test_patch], tmp_path, "head"
    )
    assert before.image != after.image
    assert before.lock_sha != after.lock_sha
    assert before.collection_errors == ["tests/test_slugs.py"]
    assert all(o == Outcome.PASSED for o in after.tests.values()) and any("slug" in t for t in after.tests)


def test_prune_goes_by_last_use(demo_source, demo_repo, demo_prs, base_images):
    """`pbench images prune` removes environment images by last use (a cache hit counts as a use) and never the
    base or Postgres images; dry-run removes nothing."""
    base, _ = _pr(demo_repo, demo_prs, "feature")
    spec = images.backend_env_spec(demo_source, images.dependency_contents(demo_source, demo_repo, base))
    ref = images.ensure_env_image(spec)
    # Just used, so not stale; other images of this machine (other sources, older locks) may well be.
    recent = images.prune_env_images(older_than_days=1, dry_run=True)
    assert ref.tag not in {t for row in recent for t in row["tags"]}
    # A cutoff a day ahead: every environment image is stale, even one that another process on this machine
    # re-tags (uses) while the test runs (images are shared between processes: keyed by content).
    stale = images.prune_env_images(older_than_days=-1, dry_run=True)
    assert ref.tag in {t for row in stale for t in row["tags"]}
    assert not any(
        t.startswith(("pbench/base", "pbench/postgres", "pbench/rootfs"))
        for row in stale
        for t in row["tags"]
    )
    assert images.ensure_env_image(spec).id == ref.id  # still there: it was a dry run


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        # A link error: Playwright's report names no file (no location, no "imported from").
        ("import { nope } from './pbench-helper.mjs'\n", "does not provide an export named 'nope'"),
        # An exception at the top of the file: the report names it.
        ("throw new Error('broken at load')\n", "broken at load"),
    ],
    ids=["missing-export", "throws-at-load"],
)
def test_a_spec_file_that_fails_to_load_leaves_the_others_their_outcomes(
    demo_source, demo_repo, demo_prs, tmp_path, base_images, spec, why
):
    """Rule: Playwright aborts the whole run when one spec file fails to load; the runner runs again without
    the files that failed (found by loading each alone when the error names none), so every other test has
    its outcome and the broken file is a collection error, named."""
    base, head = _pr(demo_repo, demo_prs, "frontend_only")
    patch = _new_file_diff("frontend/tests/pbench-helper.mjs", "export const yes = 1\n") + _new_file_diff(
        "frontend/tests/broken.spec.js",
        spec + "import { test } from '@playwright/test'\ntest('x', () => {})\n",
    )
    res = _run(
        demo_source,
        demo_repo,
        head,
        [engine.PatchInput("test_patch", patch)],
        tmp_path,
        "run",
        side=Side.FRONTEND,
    )
    assert res.suite_ran and res.collection_errors == ["tests/broken.spec.js"], (res.status, res.error)
    assert res.tests and all(o == Outcome.PASSED for o in res.tests.values()), res.tests
    assert why in (tmp_path / "run" / "playwright-load-errors.json").read_text()


def test_a_run_made_ahead_gives_what_the_run_gives(
    demo_source, demo_repo, demo_prs, tmp_path, base_images, monkeypatch
):
    """A run made ahead (`engine.staging`): its runner sets the tree up and waits for the go before any code
    of the repository runs (its phase says so), with the least CPU weight until then (its tests run with the
    weight of any other); taken over by the run of an equal request, its outcomes are the direct run's; one
    that nobody takes, or whose patch does not apply, leaves nothing behind."""
    import docker

    from tasks_lib.engine import stack as stack_mod
    from tasks_lib.engine import staging

    weights_at_go = []
    original_go = stack_mod.Stack.go

    def go(self, container):
        original_go(self, container)
        container.reload()
        weights_at_go.append(container.attrs["HostConfig"]["CpuShares"])

    monkeypatch.setattr(stack_mod.Stack, "go", go)

    base, head = _pr(demo_repo, demo_prs, "feature")
    split = _split(demo_source, demo_repo, base, head)
    chain = (
        engine.PatchInput("gold", split.patch, untrusted=True),
        engine.PatchInput("test_patch", split.test_patch),
    )

    def request(name):
        return engine.RunRequest(demo_source, demo_repo, base, tmp_path / name, chain)

    direct = engine.run_tests(request("ahead"))
    assert staging.stage(request("ahead"))
    side = staging._staged[staging.key(request("ahead"))].side()
    time.sleep(3)  # the runner has set the tree up and waits: nothing of the repository ran
    out = side.tests.get_archive("/pbench/out/phase")[0]
    assert b"prestart" not in b"".join(out) and side.tests.reload() is None and side.tests.status == "running"
    assert side.tests.attrs["HostConfig"]["CpuShares"] == stack_mod.STAGED_CPU_SHARES
    staged = engine.run_tests(request("ahead"))
    assert staged.status == direct.status == RunStatus.COMPLETED and "staged_s" in staged.timings
    assert weights_at_go == [stack_mod.DEFAULT_CPU_SHARES]
    assert staged.tests == direct.tests and staged.witness_doubts == direct.witness_doubts == []
    assert staged.tampering == direct.tampering == []

    bogus = "diff --git a/backend/app/main.py b/backend/app/main.py\n--- a/backend/app/main.py\n"
    bogus += "+++ b/backend/app/main.py\n@@ -1,3 +1,3 @@\n-this line is not there\n+nor this\n context\n"
    failing = engine.RunRequest(
        demo_source, demo_repo, base, tmp_path / "bad", (engine.PatchInput("agent", bogus, untrusted=True),)
    )
    assert staging.stage(failing)
    assert engine.run_tests(failing).status == RunStatus.PATCH_APPLY_FAILED
    assert staging.stage(request("never taken"))
    assert staging.discard() == 1
    client = docker.from_env()
    owner = {"label": f"{LABEL_OWNER}={os.environ['PBENCH_OWNER']}"}
    assert client.containers.list(all=True, filters=owner) == []
