"""A stop asked for by the operator (SIGTERM, Ctrl-C), seen by every thread of the process.

A signal interrupts only the main thread; the flows run their tasks on worker threads, which would otherwise
finish the task at hand (a whole extraction: five engine runs) before the process can exit. The engine checks
this flag before a run and while it waits for a container, and stops: its containers are removed by its own
`finally`, and what is finished stays cached, so rerunning the command resumes.
"""

from __future__ import annotations

import threading

_STOP = threading.Event()


class Interrupted(KeyboardInterrupt):
    """Raised in a worker thread when a stop was asked for (a KeyboardInterrupt: never caught as an error,
    never cached, never retried)."""


def request_stop() -> None:
    _STOP.set()


def requested() -> bool:
    return _STOP.is_set()


def check() -> None:
    if _STOP.is_set():
        raise Interrupted("stop requested")


def reset() -> None:
    """For tests and long-lived processes that handled a stop and go on."""
    _STOP.clear()


def chain_sigterm() -> None:
    """Called at the start of a flow, in its main thread: Prefect swaps in its own SIGTERM handler for the
    flow run (it raises in the main thread only); this one sets the stop flag first, then hands over."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum, frame):
        request_stop()
        if callable(previous):
            previous(signum, frame)
        else:
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
