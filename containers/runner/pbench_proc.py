"""Processes of the in-container runner: trusted commands, untrusted ones under other users, the output cap.

Three users run code in a test container:
  root (the runner, with only SETUID/SETGID/KILL)    git, patch, the harness's own steps;
  TEST_UID (65534)                                   the repository's code: prestart, servers, pytest;
  TOOL_UID (65533)                                   harness tools that read results the repository's code
                                                     must not reach (Playwright): a process of another uid
                                                     cannot be signalled, traced or written into by it.
Everything an untrusted process prints reaches the logs through a pipe the runner reads, counted against one
cap for the whole run: past it the log is cut, the run is stopped, and the result says so.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import stat
import struct
import subprocess
import threading
import time
from pathlib import Path

TEST_UID = TEST_GID = 65534  # nobody / nogroup: the repository's code
TOOL_UID = TOOL_GID = 65533  # harness tools that must be out of the repository code's reach
OUT = Path("/pbench/out")


def run(cmd, cwd, log, env=None, shell=False):
    """Run one trusted command (git, patch) as root, append its output to `log`, return (exit code, s)."""
    start = time.monotonic()
    with open(log, "ab") as fh:
        fh.write(f"$ {cmd if shell else shlex.join(cmd)}\n".encode())
        fh.flush()
        proc = subprocess.run(cmd, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, env=env, shell=shell)
        fh.write(f"[exit {proc.returncode}]\n".encode())
    return proc.returncode, round(time.monotonic() - start, 3)


def can_drop_privileges():
    return os.geteuid() == 0 and os.environ.get("PBENCH_RUNNER_SAME_USER") != "1"


def become(uid, gid):
    """A preexec_fn: the child becomes `uid` with no supplementary groups, before exec."""

    def drop():
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
        os.umask(0o022)
        os.setsid()  # its own process group: the runner can stop it and all it started

    return drop


def drop_privileges():
    become(TEST_UID, TEST_GID)()


def _other_pids():
    """Processes in this container other than init and the runner (names only: reading a process's own
    /proc files can block while a fork bomb holds its memory map)."""
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and int(e) not in (1, os.getpid())]


def kill_all_others():
    """SIGKILL every process but init and the runner (daemons, a fork bomb's children): kill(-1) from the
    root runner (CAP_KILL) needs no fork, which a fork bomb at the pids limit would deny. Repeated until
    none is left."""
    if not can_drop_privileges():
        return []
    left = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)
        time.sleep(0.02)
        _reap_children()  # the runner's own children (servers it started); init reaps the others
        left = _other_pids()
        if not left:
            break
    return left


def _reap_children() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


class OutputBudget:
    """One cap on all the bytes untrusted processes write to the run's logs. `spend` returns how many of
    `n` bytes may still be written; the first refusal marks the run as stopped."""

    def __init__(self, cap: int):
        self.cap = cap
        self.used = 0
        self.exceeded_by: str | None = None
        self._lock = threading.Lock()

    def spend(self, n: int, who: str) -> int:
        with self._lock:
            allowed = max(0, min(n, self.cap - self.used))
            self.used += allowed
            if allowed < n and self.exceeded_by is None:
                self.exceeded_by = who
            return allowed


class Untrusted:
    """One untrusted process: started as `uid`, its output copied through a pipe into `log` within the
    budget. `stop()` ends it and everything in its process group."""

    def __init__(
        self,
        cmd,
        cwd,
        log,
        env,
        budget: OutputBudget,
        *,
        shell=False,
        uid=TEST_UID,
        gid=TEST_GID,
        name="",
        on_exceeded=None,
        pass_fds=(),
    ):
        self.name = name or (cmd if shell else shlex.join(cmd))
        self.log = open(log, "ab")  # noqa: SIM115 (closed by close(), after the reader thread)
        self.log.write(f"$ {cmd if shell else shlex.join(cmd)}\n".encode())
        self.log.flush()
        self.start = time.monotonic()
        self.proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            shell=shell,
            preexec_fn=become(uid, gid) if can_drop_privileges() else os.setsid,
            pass_fds=tuple(pass_fds),
        )
        self.budget = budget
        self.on_exceeded = on_exceeded
        self.reader = threading.Thread(target=self._copy, daemon=True)
        self.reader.start()

    def _copy(self):
        for chunk in iter(lambda: self.proc.stdout.read1(65536), b""):
            allowed = self.budget.spend(len(chunk), self.name)
            if allowed:
                self.log.write(chunk[:allowed])
                self.log.flush()
            if allowed < len(chunk):
                self.log.write(
                    f"\n[pbench: output over the cap of {self.budget.cap} bytes: cut here, run stopped]\n".encode()
                )
                self.log.flush()
                self.stop()
                if self.on_exceeded:
                    self.on_exceeded()
                # Keep draining (and dropping) so that a writer never blocks on a full pipe before it is killed.
                for _ in iter(lambda: self.proc.stdout.read1(65536), b""):
                    pass
                return

    def poll(self):
        return self.proc.poll()

    def wait(self, timeout=None):
        return self.proc.wait(timeout)

    def stop(self):
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)

    def close(self, code=None):
        """Finish the log; a process still running when the step ended was killed by the runner."""
        self.reader.join(timeout=10)
        self.log.write(f"[exit {'killed by the runner' if code is None else code}]\n".encode())
        self.log.close()
        return round(time.monotonic() - self.start, 3)


def run_untrusted(
    cmd, cwd, log, env, budget: OutputBudget, shell=False, uid=TEST_UID, gid=TEST_GID, channel=None
):
    """Run repository code (or a tool) as another user. Its output comes through a pipe (it cannot rewrite
    or truncate the log); when it exits, or the output cap is reached, every process it left is killed
    before the log is closed. `channel` (an EvidenceChannel): its other end is handed to the process, and
    read to its end. Returns (exit code, seconds)."""
    pass_fds = (channel.child_fd,) if channel is not None else ()
    proc = Untrusted(
        cmd,
        cwd,
        log,
        env,
        budget,
        shell=shell,
        uid=uid,
        gid=gid,
        on_exceeded=kill_all_others,
        pass_fds=pass_fds,
    )
    if channel is not None:
        channel.started(proc.proc.pid)
    code = proc.wait()
    kill_all_others()  # a background process holding the pipe would otherwise keep the log open
    if channel is not None:
        channel.finish()
    return code, proc.close(code)


class EvidenceChannel:
    """A socket pair for evidence that must leave a process as it happens (the launcher's test reports and
    findings): the process gets one end (`child_fd`), the runner reads the other to its end in a thread of
    its own and writes every message to `log` with the id of the process that sent it, which the kernel
    attaches (SO_PASSCRED): a message is only ever added, never taken back, and one from another process
    (a forked child of the tested process) is seen as such."""

    def __init__(self, log: Path, budget: OutputBudget):
        self.mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.mine.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        theirs.set_inheritable(True)
        self._theirs = theirs
        self.child_fd = theirs.fileno()
        self.log, self.budget = log, budget
        self.pid = None
        self.messages = 0
        self.thread = threading.Thread(target=self._read, daemon=True)

    def started(self, pid: int) -> None:
        self.pid = pid
        self._theirs.close()  # the runner's copy: the end comes when the process and its children are gone
        self.thread.start()

    def _read(self) -> None:
        size = socket.CMSG_SPACE(struct.calcsize("3i"))
        with open(self.log, "ab") as fh:
            while True:
                try:
                    data, ancillary, _flags, _addr = self.mine.recvmsg(65536, size)
                except OSError:
                    return
                if not data:
                    return
                pid = -1
                for level, kind, value in ancillary:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                        pid = struct.unpack("3i", value[: struct.calcsize("3i")])[0]
                line = f"{pid}\t".encode() + data.replace(b"\n", b"\\n") + b"\n"
                allowed = self.budget.spend(len(line), "evidence channel")
                fh.write(line[:allowed])
                fh.flush()
                self.messages += 1
                if allowed < len(line):
                    return

    def finish(self, timeout: float = 10) -> None:
        self.thread.join(timeout)
        self.mine.close()


def collect_stage(stage: Path, budget: OutputBudget | None = None, out: Path | None = None):
    """Copy what an unprivileged user wrote under `stage` into /pbench/out: regular files only, never through
    a link, never over a file the runner wrote itself, within what is left of the output cap."""
    out = out or OUT
    if not stage.is_dir():
        return
    for root, _dirs, files in os.walk(stage):
        rel_root = os.path.relpath(root, stage)
        for name in files:
            rel = os.path.normpath(os.path.join(rel_root, name))
            dest = out / rel
            if dest.exists() or dest.is_symlink():
                continue
            try:
                fd = os.open(os.path.join(root, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue
            with os.fdopen(fd, "rb") as src:
                st = os.fstat(src.fileno())
                if not stat.S_ISREG(st.st_mode):
                    continue
                allowed = budget.spend(st.st_size, f"report {rel}") if budget else st.st_size
                dest.parent.mkdir(parents=True, exist_ok=True)
                with open(dest, "wb") as dst:
                    dst.write(src.read(allowed))
