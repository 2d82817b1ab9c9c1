"""One agent command, run on the host under a budget: a wall-clock limit and an output cap.

The agent is the evaluator's own program, trusted by them: it runs on the host as they do, with their
environment (its API keys), in the checkout. What is untrusted is its patch, which only ever runs in the
harness's sandboxed containers. The budget is about the batch, not about safety: a hung agent must not hold up
the instances after it, and one that prints without end must not fill the disk.

The command runs through `/bin/sh -c` in a session of its own, so that at the limit its whole process group
(the agent and whatever it started) is stopped: SIGTERM, then SIGKILL after a grace. Its stdout and stderr go
to one log, capped; past the cap the output is read and dropped (the agent never blocks on a full pipe) and
the log says how much was left out. Whatever the agent left running after its own exit is killed too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tasks_lib.core import stopping
from tasks_lib.core.constants import AgentOutcome

TERM_GRACE_S = 5.0  # between SIGTERM and SIGKILL: time to save work and exit
DRAIN_WAIT_S = 10.0  # how long the log may still be drained once the group is gone
_POLL_S = 0.1
_CHUNK = 1 << 16


@dataclass(frozen=True)
class Budget:
    """What one agent run may take: `timeout_s` of wall-clock time, `max_output_bytes` of log."""

    timeout_s: float
    max_output_bytes: int

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"Budget.timeout_s must be positive, got {self.timeout_s}")
        if self.max_output_bytes < 0:
            raise ValueError(f"Budget.max_output_bytes must not be negative, got {self.max_output_bytes}")


@dataclass(frozen=True)
class CommandRun:
    """What happened to one agent command."""

    exit_code: int | None  # None: it was stopped at the limit; negative: killed by that signal
    timed_out: bool
    duration_s: float
    output_bytes: int  # all it printed, kept or not
    output_truncated: bool

    @property
    def outcome(self) -> AgentOutcome:
        if self.timed_out:
            return AgentOutcome.TIMEOUT
        return AgentOutcome.COMPLETED if self.exit_code == 0 else AgentOutcome.FAILED


class _CappedLog:
    """Copies a pipe into a file up to `cap` bytes, then counts and drops the rest."""

    def __init__(self, pipe, path: Path, cap: int):
        self.pipe, self.path, self.cap = pipe, path, cap
        self.total = 0
        self.thread = threading.Thread(target=self._copy, name=f"agent-log {path.parent.name}", daemon=True)

    def _copy(self) -> None:
        fd = self.pipe.fileno()
        with open(self.path, "ab") as out:
            while chunk := os.read(fd, _CHUNK):
                room = self.cap - self.total
                if room > 0:
                    out.write(chunk[:room])
                    out.flush()
                self.total += len(chunk)

    @property
    def truncated(self) -> bool:
        return self.total > self.cap


def _feed(pipe, data: bytes) -> None:
    """The statement on the agent's stdin, then end of file; an agent that never reads it is not an error."""
    with contextlib.suppress(OSError):  # BrokenPipeError: it exited without reading
        pipe.write(data)
    with contextlib.suppress(OSError):
        pipe.close()


def _exited(pid: int) -> bool:
    """Whether the process has exited, without reaping it: until it is reaped its process group id stays
    taken, so killing the group afterwards can never reach another program's processes."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped already (by `Popen.wait`)
        return True
    return info is not None


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone already
        os.killpg(pgid, sig)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the whole group, SIGKILL after the grace."""
    _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + TERM_GRACE_S
    while time.monotonic() < deadline and not _exited(proc.pid):
        time.sleep(_POLL_S)
    _signal_group(proc.pid, signal.SIGKILL)


def run_command(
    command: str, cwd: Path, env: dict[str, str], stdin: bytes | None, budget: Budget, log_path: Path
) -> CommandRun:
    """Run `command` in `cwd` with `env` (the whole environment), `stdin` as its input (None: /dev/null),
    stdout and stderr into `log_path` under the budget. A stop asked for by the operator stops it and raises
    `stopping.Interrupted`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    proc = subprocess.Popen(
        ["/bin/sh", "-c", command],
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log = _CappedLog(proc.stdout, log_path, budget.max_output_bytes)
    log.thread.start()
    if stdin is not None:
        threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True).start()
    timed_out = False
    try:
        deadline = started + budget.timeout_s
        while not _exited(proc.pid):
            if stopping.requested():
                raise stopping.Interrupted("stop requested")
            if time.monotonic() >= deadline:
                timed_out = True
                _stop(proc)
                break
            time.sleep(_POLL_S)
    finally:
        # The agent's leftovers (a server it started, a background job) go with it, and so does the agent
        # itself when this thread was interrupted.
        if not _exited(proc.pid):
            _stop(proc)
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
    duration = time.monotonic() - started
    log.thread.join(DRAIN_WAIT_S)
    if log.truncated or log.thread.is_alive():
        with open(log_path, "ab") as out:
            if log.truncated:
                out.write(
                    f"\n[pbench: output over {budget.max_output_bytes} bytes; the rest dropped]\n".encode()
                )
            if log.thread.is_alive():
                out.write(b"\n[pbench: a process outside the agent's group still holds its output]\n")
    if timed_out:
        with open(log_path, "ab") as out:
            out.write(f"\n[pbench: stopped at the time limit of {budget.timeout_s:g} s]\n".encode())
    return CommandRun(
        exit_code=None if timed_out else proc.returncode,
        timed_out=timed_out,
        duration_s=round(duration, 3),
        output_bytes=log.total,
        output_truncated=log.truncated,
    )
