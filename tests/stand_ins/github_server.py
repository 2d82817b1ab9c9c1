"""A local GitHub REST v3 stand-in: recorded JSON shapes served over real HTTP on 127.0.0.1.

Each fixture file under `github_fixtures/` is the body of one GET, named after the request path
(`repos/acme/shop/pulls/11/files.json` answers `GET /repos/acme/shop/pulls/11/files`); `{{base}}` in a
fixture becomes the server's own URL. Lists are paginated with `per_page`/`page` and a `Link` header as
GitHub does, and `state=` filters pull lists. `fail_next(path, kind)` answers the next request for a path
with a primary rate-limit 403 (reset one second ahead), a secondary-limit 403 with `Retry-After`, a 429,
a 502 or a 422, so tests can watch the client wait, retry, or give up.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "github_fixtures"
FAULT_KINDS = ("rate_limit", "retry_after", "too_many", "bad_gateway", "unprocessable")


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    status: int


@dataclass
class GitHubStandIn:
    fixtures: Path = FIXTURES
    reset_in_s: int = 1
    requests: list[Seen] = field(default_factory=list)
    _faults: dict[str, deque[str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "stand-in not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def fail_next(self, path: str, kind: str, times: int = 1) -> None:
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; use {', '.join(FAULT_KINDS)}")
        with self._lock:
            self._faults.setdefault(path, deque()).extend([kind] * times)

    def hits(self, path: str) -> list[Seen]:
        return [r for r in self.requests if r.path == path]

    def _take_fault(self, path: str) -> str | None:
        with self._lock:
            queue = self._faults.get(path)
            return queue.popleft() if queue else None

    def start(self) -> GitHubStandIn:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query)
                status, headers, body = standin._answer(url.path, query)
                standin.requests.append(Seen("GET", url.path, query, dict(self.headers.items()), status))
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(payload)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="github-stand-in", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> GitHubStandIn:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _limits(self, remaining: int = 4999) -> dict[str, str]:
        return {
            "X-RateLimit-Limit": "5000",
            "X-RateLimit-Remaining": str(remaining),
            "X-RateLimit-Reset": str(int(time.time()) + self.reset_in_s),
            "X-RateLimit-Resource": "core",
        }

    def _answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, dict[str, str], object]:
        fault = self._take_fault(path)
        if fault == "rate_limit":
            # GitHub's primary limit: 403, remaining 0, reset as epoch seconds.
            return (
                403,
                self._limits(remaining=0),
                {
                    "message": "API rate limit exceeded for user ID 1.",
                    "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api",
                },
            )
        if fault == "retry_after":
            return (
                403,
                {**self._limits(), "Retry-After": str(self.reset_in_s)},
                {
                    "message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
                    "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api",
                },
            )
        if fault == "too_many":
            return (
                429,
                {**self._limits(remaining=0), "Retry-After": str(self.reset_in_s)},
                {"message": "Too Many Requests"},
            )
        if fault == "bad_gateway":
            return 502, {}, {"message": "Server Error"}
        if fault == "unprocessable":
            return 422, self._limits(), {"message": "Validation Failed", "errors": []}

        fixture = self.fixtures / (path.strip("/") + ".json")
        if ".." in path or not fixture.is_file():
            return (
                404,
                self._limits(),
                {
                    "message": "Not Found",
                    "documentation_url": "https://docs.github.com/rest",
                    "status": "404",
                },
            )
        body = json.loads(fixture.read_text().replace("{{base}}", self.base_url))
        if not isinstance(body, list):
            return 200, self._limits(), body
        return self._page(path, query, body)

    def _page(
        self, path: str, query: dict[str, list[str]], items: list
    ) -> tuple[int, dict[str, str], object]:
        state = query.get("state", ["open"])[0]
        if state != "all":
            items = [i for i in items if not isinstance(i, dict) or i.get("state", state) == state]
        per_page = int(query.get("per_page", ["30"])[0])
        page = int(query.get("page", ["1"])[0])
        last = max(1, -(-len(items) // per_page))
        headers = self._limits()
        links = []
        for rel, number in (("next", page + 1), ("last", last)):
            if page < last:
                params = {k: v[0] for k, v in query.items()} | {
                    "page": str(number),
                    "per_page": str(per_page),
                }
                links.append(f'<{self.base_url}{path}?{urllib.parse.urlencode(params)}>; rel="{rel}"')
        if links:
            headers["Link"] = ", ".join(links)
        return 200, headers, items[(page - 1) * per_page : page * per_page]
