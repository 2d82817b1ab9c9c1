"""Images: the bootstrapped base, the Postgres service, and environment images keyed by lock hash.

Every image tag is derived from a content key (the Dockerfile text, the CA bundle, the parent image id,
the dependency files), so the same inputs always name the same tag and a second build is a lookup.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tasks_lib import docker_client, gitops, lockcheck, paths
from tasks_lib.config import Settings
from tasks_lib.errors import ImageBuildError, InfraError, InputError
from tasks_lib.sources import BackendSpec, SourceRecord

log = logging.getLogger(__name__)

ROOTFS_REPO = "pbench/rootfs"
BASE_REPO = "pbench/base"
POSTGRES_REPO = "pbench/postgres"
ENV_REPO_PREFIX = "pbench/env"
KEY_LABEL = "io.prototypebench.key"

INSTALL_COMMANDS = {
    # uv with the image's system Python (no Python downloads here); dependencies only, the project
    # itself is importable from the checkout at test time.
    "uv": (
        "python3 -m venv /opt/uv && /opt/uv/bin/pip install --no-cache-dir uv && "
        "cd /deps && /opt/uv/bin/uv sync --frozen --no-install-project --all-extras --all-packages"
        " --no-install-workspace"
    ),
    "pip": (
        "python3 -m venv /opt/venv && cd /deps/{backend_dir} && "
        "if [ -f requirements.txt ]; then /opt/venv/bin/pip install --no-cache-dir -r requirements.txt; "
        "else /opt/venv/bin/pip install --no-cache-dir .; fi"
    ),
}


def sha256_bytes(*chunks: bytes) -> str:
    h = hashlib.sha256()
    for chunk in chunks:
        h.update(len(chunk).to_bytes(8, "big"))
        h.update(chunk)
    return h.hexdigest()


def lock_sha(contents: Mapping[str, bytes | None]) -> str:
    """`sha256:<hex>` of the lock files, as the instance `environment` records it (one file: its hash)."""
    present = {k: v for k, v in contents.items() if v is not None}
    if len(present) == 1:
        return "sha256:" + hashlib.sha256(next(iter(present.values()))).hexdigest()
    return "sha256:" + sha256_bytes(*(k.encode() + b"\0" + v for k, v in sorted(present.items())))


@dataclass(frozen=True)
class ImageRef:
    tag: str
    id: str
    key: str
    built: bool  # False when the image already existed (a cache hit)
    log_path: str | None = None
    seconds: float = 0.0


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
    client, context: Path, tag: str, key: str, buildargs: dict[str, str], log_path: Path, network_mode=None
) -> str:
    """Legacy-builder build with the log kept on disk; raises ImageBuildError naming the log."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    image_id = None
    error = None
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
                labels={KEY_LABEL: key},
                pull=False,
                network_mode=network_mode,
            )
            for chunk in stream:
                if "stream" in chunk:
                    fh.write(chunk["stream"])
                if "error" in chunk:
                    error = chunk["error"]
                    fh.write(f"ERROR: {error}\n")
                aux = chunk.get("aux") or {}
                if "ID" in aux:
                    image_id = aux["ID"]
        except Exception as exc:  # the daemon died or refused: still a build failure with a log
            error = f"{type(exc).__name__}: {exc}"
            fh.write(f"ERROR: {error}\n")
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
) -> ImageRef:
    """The image of `key`, built when missing. `network` (a context manager factory) gives the build its
    network: the egress proxy of environment images."""
    tag = f"{repo}:{key[:16]}"
    existing = _find(client, tag)
    if existing:
        # Re-tagging refreshes LastTagTime: the "last used" that `pbench images prune` goes by.
        client.api.tag(existing, repo, key[:16])
        return ImageRef(tag, existing, key, built=False)
    with gitops.file_lock(tag.replace("/", "_").replace(":", "_")):
        existing = _find(client, tag)  # another process may have built it while we waited
        if existing:
            return ImageRef(tag, existing, key, built=False)
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
            try:
                image_id = _build(client, ctx, tag, key, args, log_path, net.network if net else None)
            finally:
                if net is not None:
                    _log_egress(log_path, net.requests())
        return ImageRef(
            tag, image_id, key, built=True, log_path=str(log_path), seconds=time.monotonic() - start
        )


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


def _rootfs(client, settings: Settings, say) -> str:
    """The root filesystem image: pulled from a registry if possible, else debootstrapped here."""
    tag = f"{ROOTFS_REPO}:{settings.debian_suite}"
    existing = _find(client, tag)
    if existing:
        return tag
    with gitops.file_lock("rootfs"):
        if _find(client, tag):
            return tag
        if settings.registry_base_image:
            try:
                say(f"pulling {settings.registry_base_image}")
                image = client.images.pull(settings.registry_base_image)
                image.tag(ROOTFS_REPO, settings.debian_suite)
                return tag
            except Exception as exc:  # no registry here is the normal case: fall through
                say(
                    f"pull of {settings.registry_base_image} failed ({type(exc).__name__}); bootstrapping locally"
                )
        _debootstrap_import(client, settings, tag, say)
        return tag


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
    rootfs_tag = _rootfs(client, settings, say)
    rootfs_id = client.images.get(rootfs_tag).id
    ctx = _base_context(settings)
    key = sha256_bytes(rootfs_id.encode(), *(k.encode() + v for k, v in sorted(ctx.items())))
    base = _build_keyed(client, BASE_REPO, key, ctx, {"ROOTFS": rootfs_tag}, "base")
    pg_ctx = {
        name: (paths.containers_dir() / "postgres" / name).read_bytes()
        for name in ("Dockerfile", "pg-entrypoint.sh", "pg-template.sh")
    }
    pg_key = sha256_bytes(base.id.encode(), *(k.encode() + v for k, v in sorted(pg_ctx.items())))
    postgres = _build_keyed(client, POSTGRES_REPO, pg_key, pg_ctx, {"BASE": base.tag}, "postgres")
    return {"base": base, "postgres": postgres}


# ----------------------------------------------------------------------------- environment images


# Build-context files per side (besides the dependency files under deps/). Run-time helpers (the runner, the
# injected Playwright config) are shipped per run instead, so a harness change never rebuilds an image.
CONTEXT_FILES = {
    "backend": ("backend/Dockerfile",),
    "frontend": (
        "frontend/Dockerfile",
        "frontend/install-toolchain.sh",
        "frontend/install-deps.sh",
    ),
}


@dataclass(frozen=True)
class EnvSpec:
    """What an environment image is made of. Its key names the tag: same lock, same image."""

    source: str
    side: str
    install: str
    dependency_files: tuple[tuple[str, bytes | None], ...]
    buildargs: tuple[tuple[str, str], ...] = ()
    # Packages whose build code the install may run (npm lifecycle scripts): those the base lock needed.
    allowed_scripts: tuple[str, ...] = ()

    @property
    def lock_sha(self) -> str:
        return lock_sha(dict(self.dependency_files))

    def context(self) -> dict[str, bytes]:
        files = {
            rel.split("/", 1)[1]: (paths.containers_dir() / rel).read_bytes()
            for rel in CONTEXT_FILES[self.side]
        }
        if self.side == "backend":
            files["install.sh"] = self.install.encode() + b"\n"
        else:
            files["allowed-scripts.txt"] = " ".join(self.allowed_scripts).encode() + b"\n"
        for rel, data in self.dependency_files:
            if data is not None:
                files[f"deps/{rel}"] = data
        files.setdefault("deps/.keep", b"")
        return files

    def key(self, base_id: str) -> str:
        parts = [self.source.encode(), self.side.encode(), self.install.encode(), base_id.encode()]
        parts += [f"{k}={v}".encode() for k, v in self.buildargs]
        parts += [rel.encode() + b"\0" + data for rel, data in sorted(self.context().items())]
        parts += [rel.encode() for rel, data in self.dependency_files if data is None]
        return sha256_bytes(*parts)


def backend_env_spec(
    source: SourceRecord, contents: Mapping[str, bytes | None], base: Mapping[str, bytes | None] | None = None
) -> EnvSpec:
    """The backend environment of `contents`; `base` are the dependency files before the agent's patch (a
    patched lock may build from source only what the base lock needed to)."""
    spec: BackendSpec = source.backend
    install = spec.install_command or INSTALL_COMMANDS[spec.installer].format(backend_dir=spec.dir)
    missing = [p for p in spec.lock_files if contents.get(p) is None]
    if len(missing) == len(spec.lock_files):
        raise ImageBuildError(
            f"source {source.name}: none of the lock files {list(spec.lock_files)} exist at this commit"
        )
    files = tuple((rel, contents.get(rel)) for rel in spec.dependency_files)
    return EnvSpec(source.name, "backend", _build_policy(spec, contents, base) + install, files)


def _build_policy(spec: BackendSpec, contents, base) -> str:
    """Shell lines that restrict the install of a patched lock: no source build (no package build code) but
    for the packages the base lock itself builds from source. Empty for the base lock."""
    if base is None or all(contents.get(p) == base.get(p) for p in spec.dependency_files):
        return ""
    uv_locks = [p for p in spec.lock_files if p.endswith("uv.lock")]
    if uv_locks:
        text = lambda files: (files.get(uv_locks[0]) or b"").decode("utf-8", "replace")  # noqa: E731
        allowed = set(lockcheck.uv_source_builds(text(base)))
        denied = [n for n in lockcheck.uv_package_names(text(contents)) if n not in allowed]
        if not allowed:
            return "export UV_NO_BUILD=1\n"
        return f"export UV_NO_BUILD_PACKAGE='{' '.join(denied)}'\n" if denied else ""
    return "export PIP_ONLY_BINARY=:all:\n"


def frontend_env_spec(
    source: SourceRecord,
    contents: Mapping[str, bytes | None],
    settings: Settings | None = None,
    base: Mapping[str, bytes | None] | None = None,
) -> EnvSpec:
    """Node major and package manager from the source, dependencies from the frontend lock; lifecycle scripts
    only for the packages the base lock (`base`, before the agent's patch; else the lock itself) needed."""
    if source.frontend is None:
        raise ImageBuildError(f"source {source.name}: no [frontend] table, no frontend image")
    fe = source.frontend
    present = [p for p in fe.lock_files if contents.get(p) is not None]
    if not present:
        raise ImageBuildError(
            f"source {source.name}: none of the lock files {list(fe.lock_files)} exist at this commit"
        )
    install_dir = present[0].rsplit("/", 1)[0] if "/" in present[0] else "."
    settings = settings or Settings.from_env()
    args = (
        ("NODE_MAJOR", fe.node_version.split(".")[0]),
        ("PACKAGE_MANAGER", fe.package_manager),
        ("FRONTEND_DIR", fe.dir),
        ("INSTALL_DIR", install_dir),
        ("NPM_CONFIG_REGISTRY", settings.npm_registry or ""),
    )
    files = tuple((rel, contents.get(rel)) for rel in fe.dependency_files)
    return EnvSpec(
        source.name,
        "frontend",
        f"{fe.package_manager} node{args[0][1]}",
        files,
        args,
        _allowed_scripts(fe, base if base is not None else contents),
    )


def _allowed_scripts(fe, files: Mapping[str, bytes | None]) -> tuple[str, ...]:
    text = lambda rel: (files.get(rel) or b"").decode("utf-8", "replace") or None  # noqa: E731
    if fe.package_manager == "npm":
        return tuple(
            n
            for rel in fe.lock_files
            if rel.endswith("package-lock.json")
            for n in lockcheck.npm_install_scripts(text(rel))
        )
    return tuple(
        n
        for rel in fe.manifest_files
        if rel.endswith("package.json")
        for n in lockcheck.bun_trusted(text(rel))
    )


_SPECS: dict[str, tuple] = {}  # one scoring asks for the same chain's specs several times


def run_env_specs(
    source: SourceRecord, repo: Path, commit: str, chain, side: str, settings: Settings | None = None
) -> tuple[EnvSpec, EnvSpec | None]:
    """The backend spec and (for a frontend run) the frontend spec of a patch chain: [(diff, untrusted)].
    The trusted patches alone give the base that decides what the install may run."""
    settings = settings or Settings.from_env()
    key = sha256_bytes(
        repr(source).encode(),
        str(repo).encode(),
        commit.encode(),
        side.encode(),
        str(settings.npm_registry).encode(),
        *(patches_key(d, u) for d, u in chain),
    )
    if key not in _SPECS:
        if len(_SPECS) > 256:
            _SPECS.clear()
        _SPECS[key] = _run_env_specs(source, repo, commit, chain, side, settings)
    return _SPECS[key]


def patches_key(diff: str, untrusted: bool) -> bytes:
    from tasks_lib.patches import patch_bytes

    return (b"u" if untrusted else b"t") + patch_bytes(diff)


def _run_env_specs(source, repo, commit, chain, side, settings):
    texts = [d for d, _ in chain]
    trusted = [d for d, untrusted in chain if not untrusted]

    def both(s: str):
        """The dependency files after the whole chain, and after its trusted patches only (the base)."""
        return dependency_contents(source, repo, commit, texts, s), dependency_contents(source, repo, commit, trusted, s)

    contents, base = both("backend")
    backend = backend_env_spec(source, contents, base)
    if side != "frontend":
        return backend, None
    contents, base = both("frontend")
    return backend, frontend_env_spec(source, contents, settings, base)


def dependency_contents(
    source: SourceRecord, repo: Path, commit: str, patches: list[str] = (), side: str = "backend"
) -> dict:
    """Dependency files at `commit`, after the given patches (a PR that adds a package changes the lock)."""
    deps = source.backend.dependency_files if side == "backend" else source.frontend.dependency_files
    contents = {rel: gitops.read_file(repo, commit, rel) for rel in deps}
    return gitops.patched_files(contents, list(patches)) if patches else contents


def ensure_env_image(spec: EnvSpec, settings: Settings | None = None) -> ImageRef:
    settings = settings or Settings.from_env()
    client = docker_client.get()
    base = bootstrap(settings)["base"]
    buildargs = {"BASE": base.tag, **dict(spec.buildargs)}
    if spec.side == "backend" and settings.pip_index_url:
        buildargs["PIP_INDEX_URL"] = settings.pip_index_url
    from tasks_lib import egress

    return _build_keyed(
        client,
        f"{ENV_REPO_PREFIX}-{spec.source}-{spec.side}",
        spec.key(base.id),
        spec.context(),
        buildargs,
        f"env-{spec.source}-{spec.side}",
        network=lambda: egress.proxy(client, base.tag, settings),
    )


def list_images() -> list[dict]:
    client = docker_client.get()
    out = []
    for image in client.images.list(filters={"label": KEY_LABEL}):
        out.append(
            {
                "tags": image.tags,
                "id": image.id,
                "key": image.labels.get(KEY_LABEL),
                "size_mb": round(image.attrs.get("Size", 0) / 2**20, 1),
            }
        )
    return sorted(out, key=lambda r: json.dumps(r["tags"]))


def prune_env_images(older_than_days: float = 30.0, dry_run: bool = False) -> list[dict]:
    """Remove environment images not used for `older_than_days` (base, rootfs and Postgres stay).

    "Used" is the image's last tag time or creation, whichever is later; a run that needs a pruned image
    rebuilds it from its lock (same key, same tag), so pruning never changes a verdict, only costs a build.
    """
    import datetime as dt

    client = docker_client.get()
    cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(days=older_than_days)
    removed = []
    for image in client.images.list(filters={"label": KEY_LABEL}):
        if not any(t.startswith(ENV_REPO_PREFIX + "-") for t in image.tags):
            continue
        stamps = [image.attrs.get("Created", ""), (image.attrs.get("Metadata") or {}).get("LastTagTime", "")]
        last = max(
            dt.datetime.fromisoformat(s[:26].rstrip("Z") + "+00:00") for s in stamps if s and s[:4] > "0001"
        )
        if last >= cutoff:
            continue
        row = {
            "tags": image.tags,
            "id": image.id,
            "last_used": last.isoformat(timespec="seconds"),
            "size_mb": round(image.attrs.get("Size", 0) / 2**20, 1),
        }
        if not dry_run:
            for tag in image.tags:
                client.images.remove(tag, noprune=False)
        removed.append(row)
    return removed
