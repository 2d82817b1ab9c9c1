"""The dev server's warm-up (containers/runner/pbench_warm.py), against a real HTTP server on the host: it fetches
the page and every module reachable from it the way a Vite dev server serves them (static imports, re-exports,
side-effect imports, dynamic `import()` of lazy routes), only on the server's own origin, within its budget."""

from __future__ import annotations

import importlib
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tasks_lib.core import paths

# What a Vite dev server answers (imports rewritten to absolute paths, `?v=` on pre-bundled dependencies).
SITE = {
    "/": '<html><script type="module" src="/@vite/client"></script>'
    '<script type="module" src="/src/main.tsx"></script></html>',
    "/@vite/client": "export const x = 1;",
    "/src/main.tsx": 'import React from "/node_modules/.vite/deps/react.js?v=1a2b";\n'
    'import "/src/index.css";\nimport { App } from "/src/App.tsx";\n'
    'import x from "https://cdn.example.com/evil.js";\n',
    "/node_modules/.vite/deps/react.js?v=1a2b": "export default {};",
    "/src/index.css": "const css = 1; export default css;",
    "/src/App.tsx": 'export * from "./util.ts";\n'
    'const Flow = lazy(() => import("/src/pages/FlowPage/index.tsx"));\n',
    "/src/util.ts": "export const u = 1;",
    "/src/pages/FlowPage/index.tsx": 'import { big } from "../../big.ts";',
    "/src/big.ts": "export const big = 1;",
}


@pytest.fixture
def warm(monkeypatch):
    monkeypatch.syspath_prepend(str(paths.containers_dir() / "runner"))
    return importlib.import_module("pbench_warm")


@pytest.fixture
def site():
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            asked.append(self.path)
            body = SITE.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write((body or "not found").encode())

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/", asked
    server.shutdown()


def test_every_module_reachable_from_the_page_is_fetched_once(warm, site):
    url, asked = site
    counts = warm.warm(url, 30)
    assert sorted(asked) == sorted(SITE)  # lazy route and relative re-export included, the other origin not
    assert counts == {"fetched": len(SITE), "failed": 0, "left": 0, "answered": True}


def test_imports_stay_on_the_servers_origin(warm):
    text = (
        'import a from "/src/a.ts"; import("./b.ts"); import "//other.example/c.js";'
        ' import d from "data:text/javascript,1"; import e from "react"; export * from "http://o:1/f.js";'
    )
    got = warm.imports_of(text, "http://127.0.0.1:3000/src/x.ts", "http://127.0.0.1:3000")
    assert got == ["http://127.0.0.1:3000/src/a.ts", "http://127.0.0.1:3000/src/b.ts"]


def test_a_server_that_never_answers_ends_at_the_budget(warm):
    def down(url, headers, timeout):
        raise ConnectionRefusedError(url)

    t0 = time.monotonic()
    counts = warm.warm("http://127.0.0.1:9/", 1.0, fetcher=down)
    assert counts["answered"] is False and counts["fetched"] == 0
    assert time.monotonic() - t0 < 10


def test_an_endless_graph_stops_at_the_module_cap(warm, monkeypatch):
    monkeypatch.setattr(warm, "MAX_MODULES", 50)
    n = iter(range(10**6))

    def endless(url, headers, timeout):
        return f'import "/m{next(n)}.js"; import "/m{next(n)}.js";'

    counts = warm.warm("http://127.0.0.1:9/", 30, fetcher=endless)
    assert counts["fetched"] <= 50 and counts["left"] == 0
