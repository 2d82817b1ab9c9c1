"""Images: the bootstrapped base, the Postgres service, and environment images keyed by lock hash.

Every image tag is derived from a content key (the Dockerfile text, the CA bundle, the parent image id,
the dependency files), so the same inputs always name the same tag and a second build is a lookup.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tasks_lib.core import docker_client, paths, stopping
from tasks_lib.core.config import Settings
from tasks_lib.core.errors import ImageBuildError, InfraError, InputError
from tasks_lib.images import disk, registry

# What an environment image is made of lives in tasks_lib/images/envspecs.py; re-exported here, where images are built.
from tasks_lib.images.envspecs import (  # noqa: F401
    INSTALL_COMMANDS,
    EnvSpec,
    EnvSpecBook,
    backend_env_spec,
    dependency_contents,
    frontend_env_spec,
    lock_sha,
    run_env_specs,
    sha256_bytes,
)
from tasks_lib.images.lineage import (  # noqa: F401  (labels and usage re-exported where images live)
    BASE_REPO,
    DEPTH_LABEL,
    ENV_REPO_PREFIX,
    KEY_LABEL,
    MAX_DELTA_DEPTH,
    PACKAGES_LABEL,
    PARENT_LABEL,
    POSTGRES_REPO,
    RECIPE_LABEL,
    ROOTFS_REPO,
    SIDE_LABEL,
    SOURCE_LABEL,
    delta_parent,
    ledger,
    list_images,
    prune_env_images,
    usage,
)
from tasks_lib.sources import gitops

log = logging.getLogger(__name__)

_LOOKUP_ONLY = contextvars.ContextVar("pbench_images_lookup_only", default=False)


class NotBuilt(Exception):
    """Under `lookup_only()`: an image to build or a probe container to start (not an ImageBuildError)."""


@contextlib.contextmanager
def lookup_only():
    """Images looked up, never built, and no probe container: what a command asks before it needs Prefect."""
    token = _LOOKUP_ONLY.set(True)
    try:
        yield
    finally:
        _LOOKUP_ONLY.reset(token)


def require_build(what: str) -> None:
    """Called where work would start (a build, a probe container): refused under `lookup_only()`."""
    if _LOOKUP_ONLY.get():
        raise NotBuilt(what)


@dataclass(frozen=True)
class ImageRef:
    tag: str
    id: str
    key: str
    built: bool  # False when the image already existed (a cache hit) or was pulled
    log_path: str | None = None
    seconds: float = 0.0  # of the build, or of the pull
    pulled: bool = False  # from the registry (PBENCH_REGISTRY), not built here


def _find(client, tag: str) -> str | None:
    from docker.errors import ImageNotFound

    try:
        return client.images.get(tag).id
    except ImageNotFound:
        return None


def _ca_bytes(settings: Settings) -> bytes:
    if settings.extra_ca_bundle is None:
        return b""
    try:
        return settings.extra_ca_bundle.read_bytes()
    except OSError as exc:
        raise InputError(f"PBENCH_EXTRA_CA_BUNDLE: cannot read {settings.extra_ca_bundle}: {exc}") from None


def _build(
    client,
    context: Path,
    tag: str,
    key: str,
    buildargs: dict[str, str],
    log_path: Path,
    network_mode=None,
    labels: Mapping[str, str] | None = None,
) -> str:
    """Legacy-builder build with the log kept on disk; raises ImageBuildError naming the log, or InfraError
    when the daemon went away or its disk filled up (tasks_lib/images/disk.py): the host's failure."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    image_id = None
    error = None
    infra = False
    tail = ""  # the build's last output
    with open(log_path, "w") as fh:
        fh.write(f"# build {tag} key={key} at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
        try:
            stream = client.api.build(
                path=str(context),
                tag=tag,
                buildargs=buildargs,
                rm=True,
                forcerm=True,
                decode=True,
                labels={KEY_LABEL: key, **(labels or {})},
                pull=False,
                network_mode=network_mode,
            )
            for chunk in stream:
                if stopping.requested():  # the operator's stop: drop the build (the daemon cancels it)
                    stream.close()
                    fh.write("ERROR: stopped (SIGTERM / Ctrl-C)\n")
                    stopping.check()
                if "stream" in chunk:
                    fh.write(chunk["stream"])
                    fh.flush()  # an operator (or a test) tails the log while it builds
                    # The failing step's output is where a full disk shows (apt, uv, npm write ENOSPC there).
                    tail = (tail + chunk["stream"])[-16384:]
                if "error" in chunk:
                    error = chunk["error"]
                    fh.write(f"ERROR: {error}\n")
                aux = chunk.get("aux") or {}
                if "ID" in aux:
                    image_id = aux["ID"]
        except Exception as exc:  # the daemon died or refused mid-build: the host's, whatever the recipe
            error, infra = f"{type(exc).__name__}: {exc}", True
            fh.write(f"ERROR: {error}\n")
    disk_full = bool(error) and disk.says_disk_full(f"{tail}\n{error}")
    if error and (infra or disk_full):
        why = "the engine's disk is full" if disk_full else "the engine failed"
        raise InfraError(f"building {tag} failed, {why}: {error}", log_path=log_path)
    if error or not image_id:
        raise ImageBuildError(f"building {tag} failed: {error or 'no image id'}", log_path=log_path)
    return image_id


def _build_keyed(
    client,
    repo: str,
    key: str,
    context_files: Mapping[str, bytes],
    buildargs: dict[str, str],
    log_name: str,
    network=None,
    labels: Mapping[str, str] | None = None,
    parent=None,
    remote: registry.Registry | None = None,
) -> ImageRef:
    """The image of `key`, built when missing. `network` (a context manager factory) gives the build its
    network: the egress proxy of environment images. `parent()` may name an image to build on (a delta
    build: its `BASE` build argument and labels), asked only when a build is needed. `remote`: the registry
    to pull the image from before building it, and to push it to after."""
    tag = f"{repo}:{key[:16]}"
    existing = _find(client, tag)
    if existing:
        # Re-tagging refreshes LastTagTime: the "last used" that `pbench images prune` goes by.
        client.api.tag(existing, repo, key[:16])
        return ImageRef(tag, existing, key, built=False)
    known = _known_remotely(remote, tag)
    if known:  # a lookup-only question: the id a pull would give, without the pull
        return ImageRef(tag, known, key, built=False)
    require_build(tag)
    with gitops.file_lock(registry.lock_name(tag)):
        existing = _find(client, tag)  # another process may have built it while we waited
        if existing:
            return ImageRef(tag, existing, key, built=False)
        pulled = remote and registry.fetch_logged(client, remote, tag, key)
        if pulled:
            return ImageRef(tag, pulled.id, key, built=False, seconds=pulled.seconds, pulled=True)
        disk.require_free(client, tag, Settings.from_env().min_free_gb)
        log_path = paths.cache_dir() / "build-logs" / f"{log_name}-{key[:16]}.log"
        start = time.monotonic()
        with (
            tempfile.TemporaryDirectory(prefix="pbench-ctx-") as tmp,
            (network or contextlib.nullcontext)() as net,
        ):
            ctx = Path(tmp)
            for rel, data in context_files.items():
                (ctx / rel).parent.mkdir(parents=True, exist_ok=True)
                (ctx / rel).write_bytes(data)
            args = {**buildargs, **(net.buildargs if net else {})}
            extra = dict(labels or {})
            if parent is not None:
                over_args, over_labels = parent()
                args |= over_args
                extra |= over_labels
            try:
                image_id = _build(
                    client, ctx, tag, key, args, log_path, net.network if net else None, labels=extra
                )
            finally:
                if net is not None:
                    _log_egress(log_path, net.requests())
                if PARENT_LABEL in extra:
                    with open(log_path, "a") as fh:
                        fh.write(f"# delta build on {extra[PARENT_LABEL]} (depth {extra.get(DEPTH_LABEL)})\n")
        seconds = time.monotonic() - start
        ledger(tag, key, seconds, extra)
        if remote:
            registry.publish_logged(client, remote, tag, key)
        return ImageRef(tag, image_id, key, built=True, log_path=str(log_path), seconds=seconds)


def _known_remotely(remote: registry.Registry | None, tag: str) -> str:
    """Under `lookup_only()` with a registry: the id of the image the registry holds under `tag` (its config's
    digest: a pull gives that id), so that a cached verdict is found on a machine that never pulled the image.
    "" otherwise, and when the registry lacks the tag or does not answer (the question then needs a run)."""
    if remote is None or not _LOOKUP_ONLY.get():
        return ""
    try:
        found = remote.manifest(tag)
    except registry.RegistryError:
        return ""
    return found.config if found else ""


def _log_egress(log_path: Path, requests: list[dict]) -> None:
    """What the build reached through the egress proxy, at the end of its log (one line per request)."""
    with open(log_path, "a") as fh:
        fh.write(f"# egress: {len(requests)} request(s)\n")
        for r in requests:
            fh.write(
                f"# egress {'allowed' if r.get('allowed') else 'REFUSED'} {r.get('method')} {r.get('host')}:{r.get('port')}\n"
            )


def egress_requests(log_path: str | Path) -> list[tuple[str, str]]:
    """(allowed|REFUSED, host) of every request a build made, from its log."""
    out = []
    for line in Path(log_path).read_text(errors="replace").splitlines():
        if line.startswith("# egress ") and not line.startswith("# egress:"):
            verdict, _method, hostport = line.split(" ", 4)[2:5]
            out.append((verdict, hostport.rsplit(":", 1)[0]))
    return out


# ----------------------------------------------------------------------------- base image


def _rootfs(client, settings: Settings, say, remote: registry.Registry | None) -> tuple[str, str]:
    """(tag, id) of the root filesystem image: this engine's; else the harness's registry's (its id starts every
    content key: engines that share it share their images); else a registry's Debian image; else debootstrapped
    here (and pushed to the harness's registry)."""
    tag = f"{ROOTFS_REPO}:{settings.debian_suite}"
    existing = _find(client, tag) or _known_remotely(remote, tag)
    if existing:
        return tag, existing
    require_build(tag)
    with gitops.file_lock("rootfs"):
        if existing := _find(client, tag):
            return tag, existing
        pulled = remote and registry.fetch_logged(client, remote, tag, None)
        if pulled:
            say(f"pulled {tag} from {remote.address} in {pulled.seconds:.0f}s")
            return tag, pulled.id
        _rootfs_here(client, settings, say, tag)
        if remote:
            registry.publish_logged(client, remote, tag, "")
        return tag, client.images.get(tag).id


def _rootfs_here(client, settings: Settings, say, tag: str) -> None:
    """The root filesystem from a public registry's Debian image, else debootstrapped here."""
    if settings.registry_base_image:
        try:
            say(f"pulling {settings.registry_base_image}")
            image = client.images.pull(settings.registry_base_image)
            image.tag(ROOTFS_REPO, settings.debian_suite)
            return
        except Exception as exc:  # no registry here is the normal case: fall through
            say(
                f"pull of {settings.registry_base_image} failed ({type(exc).__name__}); bootstrapping locally"
            )
    _debootstrap_import(client, settings, tag, say)


def _debootstrap_import(client, settings: Settings, tag: str, say) -> None:
    if shutil.which("debootstrap") is None:
        raise InfraError(
            "no registry image could be pulled and debootstrap is not installed (apt-get install debootstrap)"
        )
    log_path = paths.cache_dir() / "build-logs" / f"rootfs-{settings.debian_suite}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pbench-rootfs-", dir=paths.cache_dir()) as tmp:
        rootfs = Path(tmp) / "rootfs"
        say(f"debootstrap --variant=minbase {settings.debian_suite} (about a minute)")
        with open(log_path, "w") as fh:
            proc = subprocess.run(
                [
                    "debootstrap",
                    "--variant=minbase",
                    settings.debian_suite,
                    str(rootfs),
                    settings.debian_mirror,
                ],
                stdout=fh,
                stderr=subprocess.STDOUT,
                timeout=1800,
            )
        if proc.returncode != 0:
            raise ImageBuildError(f"debootstrap failed with exit {proc.returncode}", log_path=log_path)
        tarball = Path(tmp) / "rootfs.tar"
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], check=True)
        say(f"docker import -> {tag}")
        repo, _, version = tag.partition(":")
        client.api.import_image(src=str(tarball), repository=repo, tag=version)


def _base_context(settings: Settings) -> dict[str, bytes]:
    return {
        "Dockerfile": (paths.containers_dir() / "base" / "Dockerfile").read_bytes(),
        "extra-ca.crt": _ca_bytes(settings),
    }


def bootstrap(settings: Settings | None = None, say=log.info) -> dict[str, ImageRef]:
    """Base and Postgres images; idempotent (a second call finds both tags and builds nothing)."""
    settings = settings or Settings.from_env()
    client = docker_client.get()
    remote = registry.of(settings)
    rootfs_tag, rootfs_id = _rootfs(client, settings, say, remote)
    ctx = _base_context(settings)
    key = sha256_bytes(rootfs_id.encode(), *(k.encode() + v for k, v in sorted(ctx.items())))
    base = _build_keyed(client, BASE_REPO, key, ctx, {"ROOTFS": rootfs_tag}, "base", remote=remote)
    pg_ctx = {
        name: (paths.containers_dir() / "postgres" / name).read_bytes()
        for name in ("Dockerfile", "pg-entrypoint.sh", "pg-template.sh")
    }
    pg_key = sha256_bytes(base.id.encode(), *(k.encode() + v for k, v in sorted(pg_ctx.items())))
    postgres = _build_keyed(
        client, POSTGRES_REPO, pg_key, pg_ctx, {"BASE": base.tag}, "postgres", remote=remote
    )
    return {"base": base, "postgres": postgres}


def identity(settings: Settings | None = None) -> str:
    """The ids of the base and Postgres images (built if missing): what every environment image and service
    starts from, so part of the extraction cache key."""
    refs = bootstrap(settings)
    return ";".join(f"{name}={ref.id}" for name, ref in sorted(refs.items()))


def ensure_env_image(spec: EnvSpec, settings: Settings | None = None) -> ImageRef:
    settings = settings or Settings.from_env()
    client = docker_client.get()
    base = bootstrap(settings)["base"]
    buildargs = {"BASE": base.tag, **dict(spec.buildargs)}
    if spec.side == "backend" and settings.pip_index_url:
        buildargs["PIP_INDEX_URL"] = settings.pip_index_url
    from tasks_lib.images import egress

    recipe = spec.recipe(base.id)
    labels = {SOURCE_LABEL: spec.source, SIDE_LABEL: spec.side, RECIPE_LABEL: recipe}

    def parent() -> tuple[dict, dict]:
        # Only for a build: the lock's packages (a parse of the whole lock, ~50 ms for the template's) label
        # the image and choose the image to build on. An image that exists needs neither.
        packages = spec.packages()
        if packages is None:
            return {}, {}
        args, extra = delta_parent(client, spec, recipe, packages)
        return args, {PACKAGES_LABEL: " ".join(sorted(packages)), **extra}

    return _build_keyed(
        client,
        f"{ENV_REPO_PREFIX}-{spec.source}-{spec.side}",
        spec.key(base.id),
        spec.context(),
        buildargs,
        f"env-{spec.source}-{spec.side}",
        network=lambda: egress.proxy(client, base.tag, settings),
        labels=labels,
        parent=parent,
        remote=registry.of(settings),
    )
