"""Run-time settings, read from PBENCH_* environment variables when asked (never at import)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tasks_lib.core.errors import InputError

_HOST_CA_CANDIDATES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def _number(name: str, default, kind=float):
    """The setting `name` as `kind` (float or int), or InputError naming it (exit 2)."""
    value = _env(name)
    if value is None:
        return default
    try:
        return kind(value)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise InputError(f"{name}: {value!r} is not {what}") from None


@dataclass(frozen=True)
class Settings:
    # Base image: pulled from a registry when one answers, else bootstrapped with debootstrap.
    registry_base_image: str | None
    debian_suite: str
    debian_mirror: str
    # The registry of the harness's images (host:port), shared by every machine: pulled before a build, pushed
    # after one (tasks_lib/images/registry.py). None: every engine builds its own images.
    registry: str | None
    # Builds (never test containers) may reach package registries; these reach the build.
    extra_ca_bundle: Path | None
    pip_index_url: str | None
    npm_registry: str | None
    # Sandbox limits for containers that run untrusted code.
    mem_limit: str
    pids_limit: int
    cpus: float
    docker_timeout_s: int
    service_ready_timeout_s: int
    # A build starts only with this much free on a local engine's data root (tasks_lib/images/disk.py); 0: never
    # refused (a build that fills the disk is still the host's failure, not the commit's).
    min_free_gb: float = 3.0

    @classmethod
    def from_env(cls) -> Settings:
        ca = _env("PBENCH_EXTRA_CA_BUNDLE")
        if ca is None:
            ca = next((c for c in _HOST_CA_CANDIDATES if Path(c).is_file()), None)
        elif ca.lower() in ("none", "off"):
            ca = None
        return cls(
            registry_base_image=_env("PBENCH_BASE_IMAGE", "debian:bookworm-slim"),
            debian_suite=_env("PBENCH_DEBIAN_SUITE", "bookworm"),
            debian_mirror=_env("PBENCH_DEBIAN_MIRROR", "http://deb.debian.org/debian"),
            registry=_env("PBENCH_REGISTRY"),
            extra_ca_bundle=Path(ca) if ca else None,
            pip_index_url=_env("PBENCH_PIP_INDEX_URL", _env("PIP_INDEX_URL")),
            npm_registry=_env("PBENCH_NPM_REGISTRY", _env("npm_config_registry")),
            mem_limit=_env("PBENCH_MEM_LIMIT", "4g"),
            pids_limit=_number("PBENCH_PIDS_LIMIT", 2048, int),
            cpus=_number("PBENCH_CPUS", 1.5),
            docker_timeout_s=_number("PBENCH_DOCKER_TIMEOUT", 300, int),
            service_ready_timeout_s=_number("PBENCH_SERVICE_READY_TIMEOUT", 90, int),
            min_free_gb=_number("PBENCH_MIN_FREE_GB", 3.0),
        )
