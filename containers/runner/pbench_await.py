"""What the runner waits for before it runs any code of the repository: the run's services (Postgres) and, for a
frontend run, the backend-serve container. Stdlib only.

The runner asks them itself, on the run's private network, the moment its tree is set up: the host no longer
relays their readiness through a file (an exec in the service, then a copy into this container, ~0.1-0.3 s on
the critical path of every run). The host still watches the same services and ends the run when one of them
fails or never answers (infrastructure), so a probe here only decides *when* the repository's code starts.

The container may start before a service's container runs, so a service's name may not be known yet. Docker's
embedded DNS forwards such a name to the container's resolver: the runner's own (pbench_dns), which fails it at
once. Without that resolver (it could not bind) the forward goes unanswered and the lookup gives up after 10 s,
so every lookup here is still bounded and the next try asks again.

A job's "await" list holds probes:
  {"kind": "postgres", "host": "db", "port": 5432, "user": "...", "db": "..."}  ready as pg_isready says it
  {"kind": "http", "url": "http://backend:8000/"}                                ready on any status below 500
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from urllib.parse import urlsplit

POLL_S = {"postgres": 0.02, "http": 0.1}
LOOKUP_WAIT_S = 0.1  # one lookup's bound; an unknown name's lookup hangs (above), a known one takes ~1 ms
MAX_LOOKUPS = 64  # given-up lookups still hanging (each a thread, counted by the container's pids limit)
_lookups: list[threading.Thread] = []
PROTOCOL_3_0 = 196608
CANNOT_CONNECT_NOW = "57P03"  # "the database system is starting up" (or shutting down)


def resolve(host: str, port: int, wait: float = LOOKUP_WAIT_S) -> tuple | None:
    """The address of `host` (a socket address for `port`), or None when the lookup fails or has not answered
    within `wait` seconds: the lookup goes on in a daemon thread, and is given up."""
    _lookups[:] = [t for t in _lookups if t.is_alive()]
    if len(_lookups) >= MAX_LOOKUPS:
        time.sleep(wait)
        return None
    found: list = []

    def lookup() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4])
        except (OSError, IndexError, UnicodeError):
            found.append(None)

    thread = threading.Thread(target=lookup, name=f"lookup {host}", daemon=True)
    thread.start()
    _lookups.append(thread)
    thread.join(wait)
    return found[0] if found else None


def postgres_ready(host: str, port: int, user: str, db: str, timeout: float = 1.0) -> bool:
    """pg_isready's answer (libpq's PQping) without libpq: a startup message, then the server's first reply. An
    authentication request means it accepts connections; so does any error but "cannot connect now"."""
    params = b"".join(k + b"\0" + v.encode() + b"\0" for k, v in ((b"user", user), (b"database", db))) + b"\0"
    body = struct.pack("!I", PROTOCOL_3_0) + params
    address = resolve(host, port)
    if address is None:
        return False  # not resolvable yet
    try:
        with socket.create_connection(address[:2], timeout=timeout) as conn:
            conn.sendall(struct.pack("!I", len(body) + 4) + body)
            kind = recv_exactly(conn, 1)
            if kind == b"R":
                return True
            if kind != b"E":
                return False
            (length,) = struct.unpack("!I", recv_exactly(conn, 4))
            fields = recv_exactly(conn, min(length - 4, 8192))
            return _sqlstate(fields) != CANNOT_CONNECT_NOW
    except (OSError, struct.error, ValueError):
        return False  # refused, reset, or cut short: not ready


def recv_exactly(conn: socket.socket, n: int) -> bytes:
    """`n` bytes from `conn`; ValueError when the peer closes first (also pbench_dns's TCP reader)."""
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ValueError("connection closed")
        data += chunk
    return data


def _sqlstate(fields: bytes) -> str:
    for field in fields.split(b"\0"):
        if field[:1] == b"C":
            return field[1:].decode(errors="replace")
    return ""


def http_ready(url: str, timeout: float = 2.0) -> bool:
    """Whether a server answers at `url` with any status below 500 (no proxy: the private network only). Its
    host is looked up first, bounded: the request's own lookup then finds it at once."""
    parts = urlsplit(url)
    try:
        host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return False
    if host is None or resolve(host, port) is None:
        return False
    import urllib.error  # urllib.request: 20 ms of every run's start; only frontend runs probe HTTP
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout):
            return True
    except urllib.error.HTTPError as exc:
        return exc.code < 500
    except (OSError, ValueError):
        return False


def ready(probe: dict) -> bool:
    if probe["kind"] == "postgres":
        return postgres_ready(probe["host"], int(probe["port"]), probe["user"], probe["db"])
    if probe["kind"] == "http":
        return http_ready(probe["url"])
    raise ValueError(f"unknown probe kind {probe['kind']!r}")


def wait_for(probes: list[dict], sleep=time.sleep) -> None:
    """Return once every probe has answered, in order. No deadline of its own: the host ends a run whose
    services never answer (the runner's phase then blames the harness)."""
    for probe in probes:
        while not ready(probe):
            sleep(POLL_S.get(probe["kind"], 0.1))
