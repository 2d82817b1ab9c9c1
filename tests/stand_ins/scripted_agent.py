#!/usr/bin/env python3
"""A scripted stand-in for an agent, for tests of `pbench agent run` and the `agent-run` deployment on the demo.

It works as a real agent must: in its working directory (the checkout), from the problem statement (on stdin,
else in $PBENCH_STATEMENT_FILE) and $PBENCH_INSTANCE_ID. Its fixes are a small table written from the demo's
statements, independently of the reference patches (it never sees them: they are nowhere in its reach), and
the error message it returns is read from the statement, so without the statement it cannot fix anything:

- demo-5 (bugfix): `read_item` answers 404 for an unknown id: resolves;
- demo-8 (a new module): `app/slugs.py`, a new file, slugs without the library the PR adds: resolves;
- demo-3 (feature): archiving, but the list still shows archived items: a real edit that does not resolve;
- any other instance: it says it has no idea and exits 3, changing nothing (an agent failure).

Standard library only: a deployment's worker can start it with any `python3`.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

DEMO = "prototypebench__demo-fullstack-"


def statement() -> str:
    text = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
    if not text.strip() and os.environ.get("PBENCH_STATEMENT_FILE"):
        text = Path(os.environ["PBENCH_STATEMENT_FILE"]).read_text(encoding="utf-8")
    return text


def not_found_detail(text: str) -> str:
    """The error detail the statement asks for (`{"detail": "..."}`)."""
    match = re.search(r'\{"detail": "([^"]+)"\}', text)
    if match is None:
        raise SystemExit("scripted agent: the statement names no error detail; giving up")
    return match.group(1)


def edit(path: str, old: str, new: str) -> None:
    file = Path(path)
    text = file.read_text(encoding="utf-8")
    if old not in text:
        raise SystemExit(f"scripted agent: {path} is not as expected (no {old.splitlines()[0]!r}); giving up")
    file.write_text(text.replace(old, new, 1), encoding="utf-8")


def fix_read_item(text: str) -> None:
    detail = not_found_detail(text)
    edit(
        "backend/app/main.py",
        '    return crud.get_item(session=session, item_id=item_id)\n\n\n@router.post("/{item_id}/archive"',
        "    item = crud.get_item(session=session, item_id=item_id)\n"
        "    if item is None:\n"
        f'        raise HTTPException(status_code=404, detail="{detail}")\n'
        '    return item\n\n\n@router.post("/{item_id}/archive"',
    )


SLUGS = '''"""URL-friendly slugs of item titles."""

import re
import unicodedata


def slugify_title(title: str, max_length: int = 60) -> str:
    """Lowercase ASCII words joined by "-", accents transliterated, at most `max_length` characters, never
    cutting a word."""
    ascii_text = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    slug = ""
    for word in re.findall(r"[a-z0-9]+", ascii_text.lower()):
        longer = f"{slug}-{word}" if slug else word
        if len(longer) > max_length:
            break
        slug = longer
    return slug
'''


def add_slugs(text: str) -> None:
    if "slugify_title" not in text:
        raise SystemExit("scripted agent: the statement asks for no slugify_title; giving up")
    Path("backend/app/slugs.py").write_text(SLUGS, encoding="utf-8")


def archive_without_filter(text: str) -> None:
    """Archiving as asked, except that the list still shows archived items: it does not resolve."""
    detail = not_found_detail(text)
    edit(
        "backend/app/models.py",
        "    id: int | None = Field(default=None, primary_key=True)\n",
        "    id: int | None = Field(default=None, primary_key=True)\n    archived: bool = False\n",
    )
    edit("backend/app/models.py", "    id: int\n", "    id: int\n    archived: bool = False\n")
    edit(
        "backend/app/main.py",
        "from fastapi import APIRouter, Depends, FastAPI\n",
        "from fastapi import APIRouter, Depends, FastAPI, HTTPException\n",
    )
    edit(
        "backend/app/main.py",
        "\n\napp = FastAPI(",
        '\n\n@router.post("/{item_id}/archive", response_model=ItemPublic)\n'
        "def archive_item(session: SessionDep, item_id: int) -> Any:\n"
        '    """Archive an item."""\n'
        "    item = crud.get_item(session=session, item_id=item_id)\n"
        "    if item is None:\n"
        f'        raise HTTPException(status_code=404, detail="{detail}")\n'
        "    item.archived = True\n"
        "    session.add(item)\n"
        "    session.commit()\n"
        "    session.refresh(item)\n"
        "    return item\n\n\napp = FastAPI(",
    )


FIXES = {
    f"{DEMO}5": fix_read_item,
    f"{DEMO}8": add_slugs,
    f"{DEMO}3": archive_without_filter,
}


def main() -> int:
    instance_id = os.environ.get("PBENCH_INSTANCE_ID", "")
    text = statement()
    print(f"scripted agent: {instance_id}, a statement of {len(text)} characters, in {os.getcwd()}")
    fix = FIXES.get(instance_id)
    if fix is None:
        print(f"scripted agent: no idea how to solve {instance_id}", file=sys.stderr)
        return 3
    fix(text)
    print(f"scripted agent: {fix.__name__} done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
