"""Reference code for the launcher's audit, compiled beside the tests (stdlib and the image's pytest only).

The audit (pbench_audit.py) compares the code that ran with code compiled from the protected files' bytes,
rewritten as pytest rewrites asserts. In the test process that is a second rewrite of every graded test module
after pytest's own, on the critical path: 2 s of mcp-context-forge #3325's 15 s. The runner starts this script
as the tool user when it starts the tests, with the test environment's interpreter in isolated mode (no working
directory, no PYTHONPATH: nothing of the repository is importable), on the graded test files and the conftests
on their way: it rewrites them with the image's pytest, as the launcher would with no assertion pass hook, while
the test process starts on the other core, and writes the code objects (marshal) into a folder only the tool
user may write. The launcher takes a function's reference from there when it is equal; anything else it still
compiles itself. Whatever happens here, the file is written (empty on failure): the launcher stops waiting.

    python -I pbench_refs.py OUT_DIR FILE...
"""

from __future__ import annotations

import marshal
import os
import sys
import time

REFS_FILE = "refs.marshal"


def main(argv: list[str]) -> int:
    out_dir, files = argv[0], argv[1:]
    codes: dict[str, object] = {}
    try:
        from pathlib import Path

        from _pytest.assertion.rewrite import _rewrite_test

        for path in files:
            t0 = time.monotonic()
            try:
                codes[path] = _rewrite_test(Path(path), None)[1]
            except Exception as exc:  # the launcher compiles this one itself
                print(f"{path}: {type(exc).__name__}: {exc}", flush=True)
                continue
            print(f"{path}: {time.monotonic() - t0:.3f} s", flush=True)
    finally:
        tmp = os.path.join(out_dir, f".{REFS_FILE}.tmp")
        with open(tmp, "wb") as fh:
            fh.write(marshal.dumps(codes))
        os.replace(tmp, os.path.join(out_dir, REFS_FILE))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
