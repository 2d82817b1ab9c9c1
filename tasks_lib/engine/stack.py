"""The Docker objects of one run: a private network, service containers, sandboxed containers.

`Stack.close()` removes all of them, whatever happened. Everything carries the project's labels, so that
`pbench cleanup` (and the test suite's leak check) find what a crash left.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tasks_lib.core.config import Settings
from tasks_lib.core.constants import LABEL, LABEL_OWNER, LABEL_RUN
from tasks_lib.core.errors import InfraError

log = logging.getLogger(__name__)

RUNNER_COMMAND = ["/usr/bin/python3", "/pbench/tools/pbench_runner.py"]
# The work tree and the runner's git repository of it (base snapshot, one commit per patch, resets) in memory.
# Files written to the container's overlay cost ~0.6 ms each on this 2-core machine, and as much again when the
# container is removed: mcp-context-forge's 2,500 files took 1.5 s to unpack and 0.7 s to remove there, against
# 0.1 s and 0.04 s on a tmpfs (docs/performance.md sections 12 and 18). The tree's pages count against the
# container's memory limit; its mount allows executables (Docker's tmpfs default is noexec), as the overlay did.
# .git is root's only (the runner makes it unreadable to the code under test at the freeze anyway); a mount
# point, so that code cannot rename or remove it either.
TREE_TMPFS = {"/work/repo": "exec,mode=0755", "/work/repo/.git": "size=1g,mode=0700"}
# A sandbox's only resolver (behind Docker's embedded DNS, which answers the network's own names): the runner
# serves it and fails every other name at once (containers/runner/pbench_dns.py).
SANDBOX_RESOLVER = "127.0.0.1"
# The CPU weight (cgroup cpu shares) of a run made ahead until its go, and of every other container (Docker's
# default): the set-up of the next run, made while one's tests run, takes only what those tests leave.
STAGED_CPU_SHARES = 2
DEFAULT_CPU_SHARES = 1024
# Docker's own log of a container is a backstop only (the runner pipes everything the code under test
# prints into capped files): bounded so that no container's stdout can fill the daemon's disk.
LOG_CONFIG = {"type": "json-file", "config": {"max-size": "10m", "max-file": "1"}}


def tar(files: dict[str, bytes], mode: int = 0o644) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = mode
            info.mtime = 0
            archive.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def tar_stream(files: dict[str, bytes | Path], mode: int = 0o644, chunk: int = 1 << 20) -> Iterator[bytes]:
    """A tar of `files` produced as it is sent (`put_archive` takes an iterable): a host file (a Path) is
    streamed from disk, never held whole in memory. A file that changes size while it is read is an error,
    never a member cut short."""
    for name, data in files.items():
        info = tarfile.TarInfo(name)
        info.mode, info.mtime = mode, 0
        if isinstance(data, Path):
            with open(data, "rb") as fh:
                info.size = os.fstat(fh.fileno()).st_size
                yield info.tobuf(tarfile.PAX_FORMAT)
                left = info.size
                while left:
                    block = fh.read(min(chunk, left))
                    if not block:
                        raise InfraError(f"{data} shrank while it was sent to a container")
                    left -= len(block)
                    yield block
        else:
            info.size = len(data)
            yield info.tobuf(tarfile.PAX_FORMAT)
            yield data
        yield b"\0" * (-info.size % tarfile.BLOCKSIZE)
    yield b"\0" * (2 * tarfile.BLOCKSIZE)


class Stack:
    """Containers, network and volumes of one run."""

    def __init__(self, client, run_id: str):
        self.client = client
        self.run_id = run_id
        self.labels = {LABEL: "1", LABEL_RUN: run_id, LABEL_OWNER: os.environ.get("PBENCH_OWNER", "pbench")}
        self.containers: list = []
        self.network = None
        self.pending: list = []  # futures of Docker objects still being made in the background (services)
        self._network_made = None  # the network's future while it is made in the background

    def create_network(self, background: bool = False):
        """The run's private network (no route out). `background`: made while the caller goes on (the run's
        images are looked up meanwhile); `net()` waits for it."""

        def make():
            self.network = self.client.networks.create(
                f"pbench-{self.run_id}", driver="bridge", internal=True, labels=self.labels
            )
            return self.network

        if not background:
            return make()
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(1, thread_name_prefix="pbench-network")
        self._network_made = pool.submit(make)
        self.pending.append(self._network_made)
        pool.shutdown(wait=False)
        return None

    def net(self):
        """The network, once made (a failure to make it is raised here)."""
        if self._network_made is not None:
            self._network_made.result()
        return self.network

    def endpoint(self, aliases: list[str] | None) -> dict | None:
        """`networking_config` of a container reached under `aliases` on the private network (and nowhere
        else), given at its creation."""
        if not aliases:
            return None
        return {self.net().name: self.client.api.create_endpoint_config(aliases=list(aliases))}

    def sandbox(
        self,
        image: str,
        role: str,
        env: dict[str, str],
        settings: Settings,
        aliases=None,
        stdin: bool = False,
    ):
        """A container for untrusted code: the task's private network only, limits, no capabilities for the
        code of the repository (the runner drops to unprivileged users before running any of it). `stdin`:
        its standard input open to the host, for the go of a run made ahead (`go`); such a container has the
        least CPU weight until then (STAGED_CPU_SHARES): its set-up yields the CPU to the tests being run."""
        container = self.client.containers.create(
            image,
            command=RUNNER_COMMAND,
            name=f"pbench-{self.run_id}-{role}",
            environment=env,
            labels=self.labels,
            network=self.net().name,
            networking_config=self.endpoint(aliases),
            working_dir="/work/repo",
            tmpfs=TREE_TMPFS,
            mem_limit=settings.mem_limit,
            memswap_limit=settings.mem_limit,
            pids_limit=settings.pids_limit,
            nano_cpus=int(settings.cpus * 1e9),
            cap_drop=["ALL"],
            # Only what the runner needs to give the tree to an unprivileged user (CHOWN), to run code as such
            # users and to kill everything that code leaves; they have no capabilities at all.
            cap_add=["SETUID", "SETGID", "KILL", "CHOWN"],
            # The only resolver behind Docker's embedded DNS: the runner's, which answers at once for a name
            # outside the network (containers/runner/pbench_dns.py; otherwise each such lookup waits 10 s).
            dns=[SANDBOX_RESOLVER],
            security_opt=["no-new-privileges"],
            log_config=LOG_CONFIG,
            init=True,
            stdin_open=stdin,
            cpu_shares=STAGED_CPU_SHARES if stdin else None,
        )
        self.containers.append(container)
        return container

    def go(self, container) -> None:
        """Tell the runner of a run made ahead to go on (one line on its standard input; it reads no more). A
        container that has already exited (its patch did not apply) has nothing to be told."""
        import docker.errors

        # Its tests run with the weight of any other run's (the weight is relative: it matters only while
        # another run's tests want the same core).
        with contextlib.suppress(docker.errors.APIError):
            container.update(cpu_shares=DEFAULT_CPU_SHARES)
        try:
            sock = self.client.api.attach_socket(container.id, params={"stdin": 1, "stream": 1})
        except docker.errors.APIError:
            return
        try:
            raw = getattr(sock, "_sock", sock)
            raw.sendall(b"go\n")
        finally:
            sock.close()

    def retire(self, container, before=None) -> None:
        """Remove `container` in the background now (after `before(container)`, e.g. a copy of its log): a
        service no longer needed goes while the run's outputs are copied. `close` waits for it."""
        from concurrent.futures import ThreadPoolExecutor

        self.containers.remove(container)

        def go() -> None:
            try:
                if before is not None:
                    before(container)
            finally:
                _remove_container(container)

        pool = ThreadPoolExecutor(1, thread_name_prefix="pbench-retire")
        self.pending.append(pool.submit(go))
        pool.shutdown(wait=False)

    def close(self) -> None:
        """Containers removed side by side (each removal is a kill and a wait in the daemon; their anonymous
        volumes with them), then the network (nothing else uses it by then)."""
        from concurrent.futures import ThreadPoolExecutor, wait

        wait(self.pending)  # what is still being made or retired is removed with the rest
        with ThreadPoolExecutor(max(1, len(self.containers)), thread_name_prefix="pbench-close") as pool:
            list(pool.map(_remove_container, self.containers))
        if self.network is not None:
            remove(f"network {self.network.name}", self.network.remove)


def _remove_container(c) -> None:
    remove(f"container {c.name}", lambda: c.remove(force=True, v=True))


def remove(what: str, do_remove, attempts: int = 3) -> None:
    """Remove one Docker object; a busy daemon (timeouts under load) gets two more tries. What stays is
    logged, and `pbench cleanup` removes it later by label."""
    import docker.errors

    for attempt in range(1, attempts + 1):
        try:
            do_remove()
            return
        except docker.errors.NotFound:
            return
        except Exception as exc:  # keep removing the rest; report what stays
            if attempt == attempts:
                log.warning("could not remove %s: %s", what, exc)
            else:
                time.sleep(2 * attempt)


def extract_out(container, dest: Path, cap: int) -> None:
    """Copy /pbench/out to the host. The container ran untrusted code: only regular files, bounded size, and
    streamed through a file on disk (the host never holds the outputs in memory)."""
    stream, _ = container.get_archive("/pbench/out")
    dest.mkdir(parents=True, exist_ok=True)
    limit = cap + 16 * 2**20  # the runner's own files (result, traces) beside the capped logs
    with tempfile.TemporaryFile(dir=dest) as spool:
        size = 0
        for chunk in stream:
            size += len(chunk)
            if size > limit:
                raise InfraError(f"the run's outputs exceed {limit} bytes", log_path=dest)
            spool.write(chunk)
        spool.seek(0)
        with tarfile.open(fileobj=spool) as archive:
            members = [m for m in archive.getmembers() if m.isfile() and m.name.startswith("out/")]
            for m in members:
                m.name = m.name[len("out/") :]
            archive.extractall(dest, members=members, filter="data")


def copy_logs(container, path: Path, tail: int | str = "all") -> None:
    """A container's own stdout/stderr (Docker's bounded log) into `path`, streamed."""
    with open(path, "wb") as fh:
        for chunk in container.logs(stream=True, follow=False, tail=tail):
            fh.write(chunk)


def clear(paths: list[Path]) -> None:
    for p in paths:
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
