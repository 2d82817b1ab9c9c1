"""JSON with comments and trailing commas (tsconfig.json, jsconfig.json, bun.lock): stdlib only, so that the
in-container runner uses the same reader (shipped as pbench_jsonc.py)."""

from __future__ import annotations

import json
import re


def read_jsonc(text: str):
    """tsconfig/jsconfig text: JSON with comments and trailing commas. ValueError when it is not that."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("//", i):
            i = text.find("\n", i) if "\n" in text[i:] else n
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        else:
            out.append(c)
            i += 1
    return json.loads(re.sub(r",(\s*[}\]])", r"\1", "".join(out)))
