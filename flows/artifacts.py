"""Prefect artifacts shared by the flows: links to the Parquet outputs and inline charts."""

from __future__ import annotations

import base64
from pathlib import Path

from prefect.artifacts import create_link_artifact


def key(text: str) -> str:
    """Artifact keys: lowercase letters, digits and dashes."""
    return "".join(c if c.isalnum() else "-" for c in text.lower())[:100]


def link_outputs(prefix: str, paths: list[Path], what: str) -> None:
    """One link artifact per output file (file:// URLs: the folder is local or on shared storage)."""
    for path in paths:
        if path.exists():
            create_link_artifact(
                key=key(f"{prefix}-{path.stem}"),
                link=path.resolve().as_uri(),
                link_text=path.name,
                description=f"{what}: {path}",
            )


def inline_png(path: Path, alt: str) -> str:
    """Markdown embedding a PNG as a data URI, so the chart shows in the Prefect UI without file access."""
    if not path.exists():
        return ""
    return f"\n\n![{alt}](data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()})\n"
