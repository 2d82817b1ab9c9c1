"""Does work on the other core slow a single-threaded test? A pure-Python loop timed 3 times alone, 3 times while
another process spins, 3 times alone again (docs/performance.md, section 19: 3-5 % on this VM). Run:

    python benchmarks/core_interference.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import time


def loop(n: int = 12_000_000) -> float:
    t0 = time.perf_counter()
    x = 0
    for i in range(n):
        x += i * i
    return time.perf_counter() - t0


def main() -> None:
    alone = [loop() for _ in range(3)]
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        busy = [loop() for _ in range(3)]
    finally:
        burner.kill()
        burner.wait()
    after = [loop() for _ in range(3)]
    print(json.dumps({"alone": alone, "other_core_busy": busy, "alone_after": after}))


if __name__ == "__main__":
    main()
