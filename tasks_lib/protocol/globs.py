"""Path globs with `**`, for test-file patterns and source dirs (repo-relative, '/'-separated)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

# Files that change how the tests run or what the interpreter loads before any test, for every source and
# whatever its record says: an untrusted patch may not add or edit them (they are restored to base inside
# the container, and the patch is graded `patch_touches_tests`). pyproject.toml and setup.cfg are checked
# by section instead (only their pytest tables count), tsconfig/jsconfig by their path mappings, and new
# top-level modules by the names the image provides: see containers/runner/pbench_protect.py.
HARNESS_PROTECTED = (
    "**/conftest.py",
    "**/pytest.ini",
    "**/.pytest.ini",
    "**/pytest.toml",
    "**/.pytest.toml",
    "**/tox.ini",
    "**/sitecustomize.py",
    "**/usercustomize.py",
    "**/*.pth",
    "**/playwright.config.*",
    # Package metadata on sys.path registers plugins (pytest11 entry points); packages come from the image.
    "**/*.dist-info/**",
    "**/*.egg-info/**",
    "**/*.egg-link",
    "**/node_modules/**",
    # npm/yarn/bun settings of the project (node-options preloads code into whatever npm starts).
    "**/.npmrc",
    "**/.yarnrc",
    "**/.yarnrc.yml",
    "**/bunfig.toml",
)


@lru_cache(maxsize=512)
def _compile(pattern: str) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out) + r"\Z")


def match(path: str, pattern: str) -> bool:
    """True when `path` matches `pattern`; `**` spans directories, `*` does not."""
    return _compile(pattern).match(path) is not None


def match_any(path: str, patterns: Iterable[str]) -> bool:
    return any(match(path, p) for p in patterns)
