"""A registry of the harness's images (opt-in: PBENCH_REGISTRY=host:port), so that an image is built once for
every machine: a run that misses an image pulls it by its content tag, builds it only when the registry lacks
it, then pushes it.

Tags stay the content keys (`pbench/env-<source>-<side>:<key>`); the registry only stores them under its
address. What the verdict and extraction keys hold, the local image id, keeps its meaning: on the engine's
image store (Debian's docker.io) the id is the sha256 of the image's config (its layers' content digests, its
command, its labels), which a push stores unchanged, so an image pulled on another engine has the id of the
image built (measured: docs/operations.md, "Several machines"). The registry's own digest (the manifest's) is
not used as the identity: it also covers how the layers were compressed for the upload. A pulled image must
carry the content key of its tag (`KEY_LABEL`) or it is dropped and built here.

The local case is a registry on 127.0.0.1, which Docker reaches over plain HTTP (127.0.0.0/8 is an insecure
registry by default); any other address is reached over HTTPS unless given as `http://host:port` (and then each
engine must list it in `insecure-registries`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlsplit

from tasks_lib.core.config import Settings
from tasks_lib.core.errors import InfraError, InputError
from tasks_lib.images.lineage import KEY_LABEL, ledger
from tasks_lib.sources import gitops

log = logging.getLogger(__name__)

_MANIFESTS = ", ".join(
    (
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.index.v1+json",
    )
)


class RegistryError(InfraError):
    """The registry did not answer, or refused a push or a pull."""


@dataclass(frozen=True)
class Remote:
    """What the registry holds under a tag: its manifest's digest and the image config's digest (the image id a
    pull gives; empty for a multi-platform index, which the harness never pushes)."""

    digest: str
    config: str


@dataclass(frozen=True)
class Registry:
    address: str  # host:port, the prefix of every reference
    scheme: str  # how the harness itself asks it (manifests): http or https
    timeout_s: float = 30.0

    @classmethod
    def parse(cls, value: str) -> Registry:
        """`host:port`, `http://host:port` or `https://host:port` (PBENCH_REGISTRY)."""
        url = urlsplit(value if "://" in value else f"//{value}")
        scheme = url.scheme or ""
        if scheme not in ("", "http", "https") or not url.hostname or url.path.strip("/") or url.query:
            raise InputError(f"PBENCH_REGISTRY: {value!r} is not host:port (or http://host:port)")
        try:
            port = url.port
        except ValueError:
            raise InputError(f"PBENCH_REGISTRY: {value!r} has a bad port") from None
        host = f"[{url.hostname}]" if ":" in url.hostname else url.hostname
        address = host + (f":{port}" if port else "")
        if not scheme:
            scheme = "http" if _loopback(url.hostname) else "https"
        return cls(address, scheme)

    def ref(self, tag: str) -> str:
        return f"{self.address}/{tag}"

    def manifest(self, tag: str) -> Remote | None:
        """What the registry holds under `tag`, or None when it holds nothing there. RegistryError when it does
        not answer."""
        repo, _, version = tag.rpartition(":")
        url = f"{self.scheme}://{self.address}/v2/{repo}/manifests/{version}"
        request = urllib.request.Request(url, headers={"Accept": _MANIFESTS})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:
                body = json.loads(resp.read())
                digest = resp.headers.get("Docker-Content-Digest", "")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise RegistryError(f"registry {self.address}: GET {url} answered HTTP {exc.code}") from None
        except (OSError, ValueError) as exc:
            raise RegistryError(f"registry {self.address} (PBENCH_REGISTRY) does not answer: {exc}") from None
        return Remote(digest, (body.get("config") or {}).get("digest", ""))


def of(settings: Settings) -> Registry | None:
    """The registry the settings name, or None (every image built here, as without one)."""
    return Registry.parse(settings.registry) if settings.registry else None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(host).is_loopback
    return False


def local_id(client, tag: str) -> str | None:
    from docker.errors import ImageNotFound

    try:
        return client.images.get(tag).id
    except ImageNotFound:
        return None


def _stream(chunks, what: str) -> dict:
    """Drains a pull's or push's progress; the last `aux` record (a push's digest), RegistryError on an error."""
    aux: dict = {}
    for chunk in chunks:
        if "error" in chunk:
            raise RegistryError(f"{what}: {chunk['error']}")
        aux = chunk.get("aux") or aux
    return aux


@contextlib.contextmanager
def _engine_refusal(what: str):
    """The engine's refusal of a pull or push (a registry it cannot reach, an HTTPS registry it was told is
    plain HTTP, ...) as a RegistryError, which a run logs before building the image itself."""
    from docker.errors import DockerException

    try:
        yield
    except DockerException as exc:
        raise RegistryError(f"{what}: {exc}") from None


@dataclass(frozen=True)
class Transfer:
    tag: str
    id: str  # the local image id (the config's digest)
    digest: str  # the registry's manifest digest
    seconds: float


def pull(client, registry: Registry, tag: str, key: str | None = None) -> Transfer | None:
    """`tag` from the registry into this engine under its plain name, or None when the registry lacks it.
    `key`: the content key the image must carry (its label); an image without it is dropped (a stray push
    under a content tag) and None returned, so the caller builds."""
    start = time.monotonic()
    remote = registry.manifest(tag)
    if remote is None:
        return None
    repo, _, version = tag.rpartition(":")
    ref = registry.ref(tag)
    with _engine_refusal(f"pull {ref}"):
        _stream(client.api.pull(registry.ref(repo), tag=version, stream=True, decode=True), f"pull {ref}")
        client.api.tag(ref, repo, version)
        client.api.remove_image(
            ref, noprune=True
        )  # only the plain tag stays: the registry's name is an address
    image = client.images.get(tag)
    found = (image.labels or {}).get(KEY_LABEL)
    if key is not None and found != key:
        log.warning(
            "registry %s: %s carries key %s, not %s; dropped, built here", registry.address, tag, found, key
        )
        client.api.remove_image(tag, noprune=False)
        return None
    return Transfer(tag, image.id, remote.digest, time.monotonic() - start)


def push(client, registry: Registry, tag: str) -> Transfer:
    """This engine's `tag` into the registry (RegistryError when refused)."""
    start = time.monotonic()
    repo, _, version = tag.rpartition(":")
    ref = registry.ref(tag)
    image_id = client.images.get(tag).id
    with _engine_refusal(f"push {ref}"):
        client.api.tag(image_id, registry.ref(repo), version)
        try:
            chunks = client.api.push(registry.ref(repo), tag=version, stream=True, decode=True)
            aux = _stream(chunks, f"push {ref}")
        finally:
            client.api.remove_image(ref, noprune=True)
    return Transfer(tag, image_id, aux.get("Digest", ""), time.monotonic() - start)


def fetch_logged(client, registry: Registry, tag: str, key: str | None) -> Transfer | None:
    """`pull` for a run that misses an image: a registry that does not answer is logged and the image built
    here (the registry saves builds, it is never needed for a verdict); a pull goes to the build ledger."""
    try:
        got = pull(client, registry, tag, key)
    except RegistryError as exc:
        log.warning("%s; building %s here", exc, tag)
        return None
    if got is not None:
        ledger(tag, key or "", got.seconds, _labels(client, tag), kind="pull", digest=got.digest)
    return got


def publish_logged(client, registry: Registry, tag: str, key: str) -> Transfer | None:
    """`push` of an image just built: a refusal is logged (the image is here; other machines build it too)
    and the ledger says what was pushed."""
    try:
        sent = push(client, registry, tag)
    except RegistryError as exc:
        log.warning("%s; other machines will build %s themselves", exc, tag)
        return None
    ledger(tag, key, sent.seconds, _labels(client, tag), kind="push", digest=sent.digest)
    return sent


def _labels(client, tag: str) -> dict:
    return client.images.get(tag).labels or {}


def publish(client, registry: Registry, tags: list[str]) -> list[dict]:
    """`pbench images push`: each tag the registry lacks pushed; one row per tag: `pushed`, `present` (the
    registry holds this very image) or `differs` (it holds another image under the tag, left as it is: an
    image built on two engines at once, or a root filesystem bootstrapped on two machines; see
    docs/operations.md)."""
    rows = []
    for tag in tags:
        with gitops.file_lock(lock_name(tag)):
            mine = local_id(client, tag)
            if mine is None:
                raise InputError(f"no such image on this engine: {tag}")
            remote = registry.manifest(tag)
            if remote is not None:
                state = "present" if remote.config == mine else "differs"
                rows.append({"tag": tag, "state": state, "id": mine, "digest": remote.digest, "seconds": 0.0})
                continue
            sent = push(client, registry, tag)
            labels = _labels(client, tag)
            ledger(tag, labels.get(KEY_LABEL, ""), sent.seconds, labels, kind="push", digest=sent.digest)
            rows.append(
                {"tag": tag, "state": "pushed", "id": mine, "digest": sent.digest, "seconds": sent.seconds}
            )
    return rows


def fetch(client, registry: Registry, tags: list[str]) -> list[dict]:
    """`pbench images pull`: each tag this engine lacks pulled; one row per tag: `pulled`, `present` (here
    already) or `missing` (the registry lacks it)."""
    rows = []
    for tag in tags:
        with gitops.file_lock(lock_name(tag)):
            mine = local_id(client, tag)
            if mine is not None:
                rows.append({"tag": tag, "state": "present", "id": mine, "digest": "", "seconds": 0.0})
                continue
            got = pull(client, registry, tag)
            if got is None:
                rows.append({"tag": tag, "state": "missing", "id": "", "digest": "", "seconds": 0.0})
                continue
            labels = _labels(client, tag)
            ledger(tag, labels.get(KEY_LABEL, ""), got.seconds, labels, kind="pull", digest=got.digest)
            rows.append(
                {"tag": tag, "state": "pulled", "id": got.id, "digest": got.digest, "seconds": got.seconds}
            )
    return rows


def lock_name(tag: str) -> str:
    """The file lock of one image: its build, pull and push on this host (and the cluster's, with a shared
    PBENCH_LOCK_DIR) one at a time."""
    return tag.replace("/", "_").replace(":", "_")
