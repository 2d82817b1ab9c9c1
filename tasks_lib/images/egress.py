"""The network of environment-image builds: an internal Docker network whose only way out is the harness's
egress proxy (containers/egress/pbench_egress.py), which lets through the package indexes and Debian's
mirror and nothing else. What a build reached is kept in its build log."""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from tasks_lib.core import paths
from tasks_lib.core.config import Settings
from tasks_lib.core.constants import LABEL, LABEL_OWNER, LABEL_RUN

PORT = 3128
DEFAULT_HOSTS = ("pypi.org", "files.pythonhosted.org", "registry.npmjs.org")


def allowed_hosts(settings: Settings) -> list[str]:
    """The package indexes the settings name (or the public ones), Debian's mirror, and PBENCH_EGRESS_ALLOW."""
    hosts = set(DEFAULT_HOSTS)
    for url in (settings.pip_index_url, settings.npm_registry, settings.debian_mirror):
        if url:
            hosts.add(urlsplit(url).hostname or "")
    hosts |= set(os.environ.get("PBENCH_EGRESS_ALLOW", "").split())
    return sorted(h for h in hosts if h)


@dataclass
class Egress:
    network: str
    proxy_url: str
    container: object = field(repr=False)

    @property
    def buildargs(self) -> dict[str, str]:
        # Docker's predefined proxy arguments: seen by every RUN, kept out of the build cache and the history.
        url = self.proxy_url
        return {
            "HTTP_PROXY": url,
            "HTTPS_PROXY": url,
            "http_proxy": url,
            "https_proxy": url,
            "NO_PROXY": "localhost,127.0.0.1",
            "no_proxy": "localhost,127.0.0.1",
        }

    def requests(self) -> list[dict]:
        out = []
        for line in self.container.logs().decode(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if "host" in record:
                    out.append(record)
        return out


@contextlib.contextmanager
def proxy(client, base_image: str, settings: Settings):
    """An internal build network and the proxy on it (also on Docker's default bridge, its way out)."""
    run_id = "build" + uuid.uuid4().hex[:10]
    labels = {LABEL: "1", LABEL_RUN: run_id, LABEL_OWNER: os.environ.get("PBENCH_OWNER", "pbench")}
    network = client.networks.create(f"pbench-{run_id}", driver="bridge", internal=True, labels=labels)
    container = None
    try:
        source = (paths.containers_dir() / "egress" / "pbench_egress.py").read_text()
        container = client.containers.create(
            base_image,
            command=["python3", "-I", "-c", source],
            name=f"pbench-{run_id}-egress",
            environment={
                "PBENCH_EGRESS_ALLOW": " ".join(allowed_hosts(settings)),
                "PBENCH_EGRESS_PORT": str(PORT),
            },
            labels=labels,
            network=network.name,
            mem_limit="256m",
            pids_limit=256,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            user="65533:65533",
        )
        client.networks.get("bridge").connect(container)
        container.start()
        container.reload()
        ip = container.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]
        _wait_listening(container)
        yield Egress(network.name, f"http://{ip}:{PORT}", container)
    finally:
        if container is not None:
            with contextlib.suppress(Exception):
                container.remove(force=True)
        with contextlib.suppress(Exception):
            network.remove()


def _wait_listening(container, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if b'"listening"' in container.logs():
            return
        container.reload()
        if container.status not in ("created", "running"):
            break
        time.sleep(0.1)
    raise RuntimeError(f"the egress proxy did not start: {container.logs(tail=20).decode(errors='replace')}")
