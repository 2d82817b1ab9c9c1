"""The embedded demo source: a small full-stack repository (FastAPI + SQLModel + Postgres backend, Vite + React
frontend tested with Playwright) and its merged pull requests.

`generate_demo_repo(dest)` builds, deterministically, a git repository whose `main` holds an initial app and
eight merged pull requests of the kinds the pipeline must handle (a feature with a closing issue, a bugfix, a
PR whose new test file fails to collect at its base and that changes the lock file, a docs-only PR, a bot
dependency bump, a feature with one genuinely flaky test, a frontend-only UI change with a new Playwright
test, and a fullstack feature - a backend endpoint plus the UI that uses it - with new tests on both sides).
Beside the repository it writes `prs.jsonl`, shaped like `gh pr list --state merged --json ...`, with the
real merge SHAs and per-file line counts taken from git.

Same generator version -> byte-identical commit SHAs on any machine: every author, committer and date is
explicit, commits are made with `git commit-tree`, and no user or system git configuration is read.

File contents live below as plain string constants, one constant per version of a file, so the app can be
read as it is at every step of its history. The one exception is `frontend/package-lock.json` (machine-written,
~950 lines), embedded from `tasks_lib/demo_frontend/package-lock.json`; the fingerprint covers it.

The frontend never calls the backend's origin: the browser talks only to the Vite server
(http://localhost:5173), which proxies `/api` to the backend (`API_PROXY_TARGET`, default
http://localhost:8000; `server.proxy` and `preview.proxy` in frontend/vite.config.js). So the backend needs
no CORS middleware, and a harness that forwards localhost:8000 to a backend-serve container (or sets
API_PROXY_TARGET) runs the repository's tests unchanged. The backend is served with
`uvicorn app.main:app --host 0.0.0.0 --port 8000` after `python -m app.prestart`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.resources
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from tasks_lib import paths
from tasks_lib.errors import InfraError, InputError

__all__ = [
    "DEMO_PRS",
    "FLAKY_TEST_ID",
    "FRONTEND_FAIL_TO_PASS",
    "GENERATOR_VERSION",
    "REPO",
    "demo_prs_path",
    "ensure_demo_repo",
    "fingerprint",
    "generate_demo_repo",
]

# Bump on any change of the generated history (contents, messages, people, dates).
GENERATOR_VERSION = "2"

REPO = "prototypebench/demo-fullstack"
REPO_URL = f"https://github.com/{REPO}"
MARKER_NAME = "pbench-demo-version"
PRS_FILE_NAME = "prs.jsonl"

# Kind of pull request -> its number in the generated history (see PULL_REQUESTS below).
DEMO_PRS: dict[str, int] = {
    "feature": 3,
    "bugfix": 5,
    "collection_error": 8,
    "docs": 9,
    "bot_bump": 11,
    "flaky": 12,
    "frontend_only": 14,
    "fullstack": 16,
}

# The deliberately flaky test added by the "flaky" PR; node ids are relative to `backend/`.
FLAKY_TEST_ID = "tests/test_items.py::test_list_items_flaky"


def _src(text: str) -> str:
    """File content written as a triple-quoted constant: drop the newline right after the opening quotes."""
    return text.removeprefix("\n")


# --------------------------------------------------------------------------------------------------
# People
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Person:
    name: str
    email: str
    login: str
    node_id: str = ""
    is_bot: bool = False

    def as_gh_author(self) -> dict:
        """The `author` object of `gh pr list --json author` (bots carry only login and is_bot)."""
        if self.is_bot:
            return {"is_bot": True, "login": self.login}
        return {"id": self.node_id, "is_bot": False, "login": self.login, "name": self.name}


ALICE = _Person("Alice Maintainer", "alice-dev@users.noreply.github.com", "alice-dev", "U_demoAlice01")
BOB = _Person("Bob Builder", "bob-dev@users.noreply.github.com", "bob-dev", "U_demoBob0002")
CAROL = _Person("Carol Coder", "carol-dev@users.noreply.github.com", "carol-dev", "U_demoCarol03")
DEPENDABOT = _Person(
    "dependabot[bot]", "49699333+dependabot[bot]@users.noreply.github.com", "app/dependabot", is_bot=True
)
GITHUB = _Person("GitHub", "noreply@github.com", "web-flow")

_LABELS = {
    "feature": {"color": "a2eeef", "description": "New feature or request", "id": "LA_demoFeature"},
    "bug": {"color": "d73a4a", "description": "Something isn't working", "id": "LA_demoBug"},
    "docs": {"color": "9AC359", "description": "", "id": "LA_demoDocs"},
    "dependencies": {
        "color": "0366d6",
        "description": "Pull requests that update a dependency file",
        "id": "LA_demoDependencies",
    },
}

# --------------------------------------------------------------------------------------------------
# File contents, one constant per version. Suffixes name the PR that introduced the version.
# --------------------------------------------------------------------------------------------------

README_MD = _src(
    """
# demo-fullstack

A small items app: an API built with FastAPI, SQLModel and Postgres, and a React frontend built with Vite.

## Backend

Requirements: Python 3.11 and a reachable Postgres server.

```bash
cd backend
pip install -r requirements.txt
export POSTGRES_SERVER=localhost POSTGRES_PORT=5432 POSTGRES_USER=postgres
export POSTGRES_PASSWORD=secret POSTGRES_DB=app
python -m app.prestart   # waits for the database, then creates the tables
python -m pytest
uvicorn app.main:app --host 0.0.0.0 --port 8000   # serve the API
```

The tests use the real database named by the `POSTGRES_*` variables and empty its tables before each test.

## Frontend

Requirements: Node.js 20 and the API served on http://localhost:8000 (see above).

```bash
cd frontend
npm ci
npm run dev                       # http://localhost:5173
npx playwright install chromium   # once
npm run test:e2e                  # starts the dev server unless one is running
```

The browser only ever talks to the frontend's origin: the Vite server proxies `/api` to the backend
(`API_PROXY_TARGET`, default `http://localhost:8000`), so the API needs no CORS setup. The Playwright tests
create items through the UI and the API: they need the backend and its database, and never empty them.
"""
)

_README_API_SECTION = """
## API

All routes live under `/api/v1/items`:

| method | path | what it does |
| --- | --- | --- |
| `POST` | `/api/v1/items/` | create an item from `{"title": ..., "description": ...}` |
| `GET` | `/api/v1/items/` | list items, oldest first (`?include_archived=true` to see archived ones) |
| `GET` | `/api/v1/items/{id}` | read one item; `404` when it does not exist |
| `POST` | `/api/v1/items/{id}/archive` | archive an item |

See [docs/usage.md](docs/usage.md) for examples.
"""

README_MD_DOCS = README_MD + _README_API_SECTION

DOCS_USAGE_MD = _src(
    """
# Using the items API

Start the API however you serve ASGI apps, for example with uvicorn:

```bash
cd backend
python -m app.prestart
uvicorn app.main:app --reload
```

## Create an item

```bash
curl -X POST http://localhost:8000/api/v1/items/ \\
  -H 'Content-Type: application/json' \\
  -d '{"title": "Groceries", "description": "milk, eggs"}'
```

```json
{"title": "Groceries", "description": "milk, eggs", "id": 1, "archived": false}
```

## List and read items

```bash
curl http://localhost:8000/api/v1/items/
curl http://localhost:8000/api/v1/items/1
```

Reading an id that does not exist answers `404` with `{"detail": "Item not found"}`.

## Archive an item

Archived items stay readable by id but leave the list:

```bash
curl -X POST http://localhost:8000/api/v1/items/1/archive
curl 'http://localhost:8000/api/v1/items/?include_archived=true'
```

## Slugs

`app.slugs.slugify_title("Crème Brûlée")` gives `"creme-brulee"`, handy for links to an item.
"""
)

REQUIREMENTS_TXT = _src(
    """
fastapi==0.115.6
uvicorn==0.32.1
sqlmodel==0.0.22
psycopg[binary]==3.2.3
pytest==8.3.4
httpx==0.28.1
"""
)

REQUIREMENTS_TXT_SLUGS = _src(
    """
fastapi==0.115.6
uvicorn==0.32.1
sqlmodel==0.0.22
psycopg[binary]==3.2.3
python-slugify==8.0.4
pytest==8.3.4
httpx==0.28.1
"""
)

REQUIREMENTS_TXT_PYTEST_BUMP = _src(
    """
fastapi==0.115.6
uvicorn==0.32.1
sqlmodel==0.0.22
psycopg[binary]==3.2.3
python-slugify==8.0.4
pytest==8.3.5
httpx==0.28.1
"""
)

CONFIG_PY = _src(
    '''
"""Settings of the app, read from the environment (no .env file, no pydantic-settings)."""

import os

from sqlalchemy.engine import URL


class Settings:
    API_V1_STR = "/api/v1"

    def __init__(self) -> None:
        self.PROJECT_NAME = os.environ.get("PROJECT_NAME", "demo")
        self.POSTGRES_SERVER = os.environ.get("POSTGRES_SERVER", "localhost")
        self.POSTGRES_PORT = int(os.environ.get("POSTGRES_PORT", "5432"))
        self.POSTGRES_USER = os.environ.get("POSTGRES_USER", "postgres")
        self.POSTGRES_PASSWORD = os.environ.get("POSTGRES_PASSWORD", "")
        self.POSTGRES_DB = os.environ.get("POSTGRES_DB", "app")

    @property
    def SQLALCHEMY_DATABASE_URI(self) -> URL:
        """A postgresql+psycopg:// URL; URL.create quotes special characters of the password."""
        return URL.create(
            "postgresql+psycopg",
            username=self.POSTGRES_USER,
            password=self.POSTGRES_PASSWORD or None,
            host=self.POSTGRES_SERVER,
            port=self.POSTGRES_PORT,
            database=self.POSTGRES_DB,
        )


settings = Settings()
'''
)

DB_PY = _src(
    '''
"""The database engine and the session dependency."""

from collections.abc import Iterator

from sqlmodel import Session, SQLModel, create_engine

from app import models  # noqa: F401  (registers the tables on SQLModel.metadata)
from app.core.config import settings

engine = create_engine(
    settings.SQLALCHEMY_DATABASE_URI,
    pool_pre_ping=True,
    connect_args={"connect_timeout": 5},
)


def init_db() -> None:
    """Create the tables that do not exist yet."""
    SQLModel.metadata.create_all(engine)


def get_session() -> Iterator[Session]:
    with Session(engine) as session:
        yield session
'''
)

MODELS_PY = _src(
    '''
"""Database tables and API schemas."""

from sqlmodel import Field, SQLModel


class ItemBase(SQLModel):
    title: str = Field(min_length=1, max_length=255)
    description: str | None = Field(default=None, max_length=255)


class ItemCreate(ItemBase):
    """Body of POST /api/v1/items/."""


class Item(ItemBase, table=True):
    id: int | None = Field(default=None, primary_key=True)


class ItemPublic(ItemBase):
    """What the API returns for one item."""

    id: int
'''
)

MODELS_PY_ARCHIVE = _src(
    '''
"""Database tables and API schemas."""

from sqlmodel import Field, SQLModel


class ItemBase(SQLModel):
    title: str = Field(min_length=1, max_length=255)
    description: str | None = Field(default=None, max_length=255)


class ItemCreate(ItemBase):
    """Body of POST /api/v1/items/."""


class Item(ItemBase, table=True):
    id: int | None = Field(default=None, primary_key=True)
    archived: bool = Field(default=False)


class ItemPublic(ItemBase):
    """What the API returns for one item."""

    id: int
    archived: bool
'''
)

MODELS_PY_COUNT = _src(
    '''
"""Database tables and API schemas."""

from sqlmodel import Field, SQLModel


class ItemBase(SQLModel):
    title: str = Field(min_length=1, max_length=255)
    description: str | None = Field(default=None, max_length=255)


class ItemCreate(ItemBase):
    """Body of POST /api/v1/items/."""


class Item(ItemBase, table=True):
    id: int | None = Field(default=None, primary_key=True)
    archived: bool = Field(default=False)


class ItemPublic(ItemBase):
    """What the API returns for one item."""

    id: int
    archived: bool


class ItemsCount(SQLModel):
    """What GET /api/v1/items/count returns."""

    count: int
'''
)

CRUD_PY = _src(
    '''
"""Database operations on items."""

from sqlmodel import Session, select

from app.models import Item, ItemCreate


def create_item(*, session: Session, item_in: ItemCreate) -> Item:
    item = Item.model_validate(item_in)
    session.add(item)
    session.commit()
    session.refresh(item)
    return item


def list_items(*, session: Session, skip: int = 0, limit: int = 100) -> list[Item]:
    statement = select(Item).order_by(Item.id).offset(skip).limit(limit)
    return list(session.exec(statement).all())


def get_item(*, session: Session, item_id: int) -> Item | None:
    return session.get(Item, item_id)
'''
)

CRUD_PY_ARCHIVE = _src(
    '''
"""Database operations on items."""

from sqlmodel import Session, col, select

from app.models import Item, ItemCreate


def create_item(*, session: Session, item_in: ItemCreate) -> Item:
    item = Item.model_validate(item_in)
    session.add(item)
    session.commit()
    session.refresh(item)
    return item


def list_items(
    *, session: Session, skip: int = 0, limit: int = 100, include_archived: bool = False
) -> list[Item]:
    statement = select(Item)
    if not include_archived:
        statement = statement.where(col(Item.archived).is_(False))
    statement = statement.order_by(Item.id).offset(skip).limit(limit)
    return list(session.exec(statement).all())


def get_item(*, session: Session, item_id: int) -> Item | None:
    return session.get(Item, item_id)


def archive_item(*, session: Session, item: Item) -> Item:
    item.archived = True
    session.add(item)
    session.commit()
    session.refresh(item)
    return item
'''
)

CRUD_PY_COUNT = _src(
    '''
"""Database operations on items."""

from sqlmodel import Session, col, func, select

from app.models import Item, ItemCreate


def create_item(*, session: Session, item_in: ItemCreate) -> Item:
    item = Item.model_validate(item_in)
    session.add(item)
    session.commit()
    session.refresh(item)
    return item


def list_items(
    *, session: Session, skip: int = 0, limit: int = 100, include_archived: bool = False
) -> list[Item]:
    statement = select(Item)
    if not include_archived:
        statement = statement.where(col(Item.archived).is_(False))
    statement = statement.order_by(Item.id).offset(skip).limit(limit)
    return list(session.exec(statement).all())


def count_items(*, session: Session, include_archived: bool = False) -> int:
    statement = select(func.count()).select_from(Item)
    if not include_archived:
        statement = statement.where(col(Item.archived).is_(False))
    return session.exec(statement).one()


def get_item(*, session: Session, item_id: int) -> Item | None:
    return session.get(Item, item_id)


def archive_item(*, session: Session, item: Item) -> Item:
    item.archived = True
    session.add(item)
    session.commit()
    session.refresh(item)
    return item
'''
)

CRUD_PY_DELETE = _src(
    '''
"""Database operations on items."""

from sqlmodel import Session, col, func, select

from app.models import Item, ItemCreate


def create_item(*, session: Session, item_in: ItemCreate) -> Item:
    item = Item.model_validate(item_in)
    session.add(item)
    session.commit()
    session.refresh(item)
    return item


def list_items(
    *, session: Session, skip: int = 0, limit: int = 100, include_archived: bool = False
) -> list[Item]:
    statement = select(Item)
    if not include_archived:
        statement = statement.where(col(Item.archived).is_(False))
    statement = statement.order_by(Item.id).offset(skip).limit(limit)
    return list(session.exec(statement).all())


def count_items(*, session: Session, include_archived: bool = False) -> int:
    statement = select(func.count()).select_from(Item)
    if not include_archived:
        statement = statement.where(col(Item.archived).is_(False))
    return session.exec(statement).one()


def get_item(*, session: Session, item_id: int) -> Item | None:
    return session.get(Item, item_id)


def archive_item(*, session: Session, item: Item) -> Item:
    item.archived = True
    session.add(item)
    session.commit()
    session.refresh(item)
    return item


def delete_item(*, session: Session, item: Item) -> None:
    session.delete(item)
    session.commit()
'''
)

MAIN_PY = _src(
    '''
"""The items API."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI
from sqlmodel import Session

from app import crud
from app.core.config import settings
from app.db import get_session
from app.models import ItemCreate, ItemPublic

SessionDep = Annotated[Session, Depends(get_session)]

router = APIRouter(prefix="/items", tags=["items"])


@router.post("/", response_model=ItemPublic)
def create_item(session: SessionDep, item_in: ItemCreate) -> Any:
    """Create an item."""
    return crud.create_item(session=session, item_in=item_in)


@router.get("/", response_model=list[ItemPublic])
def list_items(session: SessionDep, skip: int = 0, limit: int = 100) -> Any:
    """List items, oldest first."""
    return crud.list_items(session=session, skip=skip, limit=limit)


@router.get("/{item_id}", response_model=ItemPublic)
def read_item(session: SessionDep, item_id: int) -> Any:
    """Read one item by id."""
    return crud.get_item(session=session, item_id=item_id)


app = FastAPI(title=settings.PROJECT_NAME, openapi_url=f"{settings.API_V1_STR}/openapi.json")
app.include_router(router, prefix=settings.API_V1_STR)
'''
)

MAIN_PY_ARCHIVE = _src(
    '''
"""The items API."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException
from sqlmodel import Session

from app import crud
from app.core.config import settings
from app.db import get_session
from app.models import ItemCreate, ItemPublic

SessionDep = Annotated[Session, Depends(get_session)]

router = APIRouter(prefix="/items", tags=["items"])


@router.post("/", response_model=ItemPublic)
def create_item(session: SessionDep, item_in: ItemCreate) -> Any:
    """Create an item."""
    return crud.create_item(session=session, item_in=item_in)


@router.get("/", response_model=list[ItemPublic])
def list_items(
    session: SessionDep, skip: int = 0, limit: int = 100, include_archived: bool = False
) -> Any:
    """List items, oldest first. Archived items are left out unless include_archived is set."""
    return crud.list_items(
        session=session, skip=skip, limit=limit, include_archived=include_archived
    )


@router.get("/{item_id}", response_model=ItemPublic)
def read_item(session: SessionDep, item_id: int) -> Any:
    """Read one item by id."""
    return crud.get_item(session=session, item_id=item_id)


@router.post("/{item_id}/archive", response_model=ItemPublic)
def archive_item(session: SessionDep, item_id: int) -> Any:
    """Archive an item: it stays readable by id but leaves the list."""
    item = crud.get_item(session=session, item_id=item_id)
    if item is None:
        raise HTTPException(status_code=404, detail="Item not found")
    return crud.archive_item(session=session, item=item)


app = FastAPI(title=settings.PROJECT_NAME, openapi_url=f"{settings.API_V1_STR}/openapi.json")
app.include_router(router, prefix=settings.API_V1_STR)
'''
)

MAIN_PY_NOT_FOUND = _src(
    '''
"""The items API."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException
from sqlmodel import Session

from app import crud
from app.core.config import settings
from app.db import get_session
from app.models import ItemCreate, ItemPublic

SessionDep = Annotated[Session, Depends(get_session)]

router = APIRouter(prefix="/items", tags=["items"])


@router.post("/", response_model=ItemPublic)
def create_item(session: SessionDep, item_in: ItemCreate) -> Any:
    """Create an item."""
    return crud.create_item(session=session, item_in=item_in)


@router.get("/", response_model=list[ItemPublic])
def list_items(
    session: SessionDep, skip: int = 0, limit: int = 100, include_archived: bool = False
) -> Any:
    """List items, oldest first. Archived items are left out unless include_archived is set."""
    return crud.list_items(
        session=session, skip=skip, limit=limit, include_archived=include_archived
    )


@router.get("/{item_id}", response_model=ItemPublic)
def read_item(session: SessionDep, item_id: int) -> Any:
    """Read one item by id."""
    item = crud.get_item(session=session, item_id=item_id)
    if item is None:
        raise HTTPException(status_code=404, detail="Item not found")
    return item


@router.post("/{item_id}/archive", response_model=ItemPublic)
def archive_item(session: SessionDep, item_id: int) -> Any:
    """Archive an item: it stays readable by id but leaves the list."""
    item = crud.get_item(session=session, item_id=item_id)
    if item is None:
        raise HTTPException(status_code=404, detail="Item not found")
    return crud.archive_item(session=session, item=item)


app = FastAPI(title=settings.PROJECT_NAME, openapi_url=f"{settings.API_V1_STR}/openapi.json")
app.include_router(router, prefix=settings.API_V1_STR)
'''
)

MAIN_PY_COUNT = _src(
    '''
"""The items API."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException
from sqlmodel import Session

from app import crud
from app.core.config import settings
from app.db import get_session
from app.models import ItemCreate, ItemPublic, ItemsCount

SessionDep = Annotated[Session, Depends(get_session)]

router = APIRouter(prefix="/items", tags=["items"])


@router.post("/", response_model=ItemPublic)
def create_item(session: SessionDep, item_in: ItemCreate) -> Any:
    """Create an item."""
    return crud.create_item(session=session, item_in=item_in)


@router.get("/", response_model=list[ItemPublic])
def list_items(
    session: SessionDep, skip: int = 0, limit: int = 100, include_archived: bool = False
) -> Any:
    """List items, oldest first. Archived items are left out unless include_archived is set."""
    return crud.list_items(
        session=session, skip=skip, limit=limit, include_archived=include_archived
    )


# Declared before /{item_id}, which would otherwise try to read "count" as an item id.
@router.get("/count", response_model=ItemsCount)
def count_items(session: SessionDep, include_archived: bool = False) -> Any:
    """Number of items the list would show."""
    return ItemsCount(count=crud.count_items(session=session, include_archived=include_archived))


@router.get("/{item_id}", response_model=ItemPublic)
def read_item(session: SessionDep, item_id: int) -> Any:
    """Read one item by id."""
    item = crud.get_item(session=session, item_id=item_id)
    if item is None:
        raise HTTPException(status_code=404, detail="Item not found")
    return item


@router.post("/{item_id}/archive", response_model=ItemPublic)
def archive_item(session: SessionDep, item_id: int) -> Any:
    """Archive an item: it stays readable by id but leaves the list."""
    item = crud.get_item(session=session, item_id=item_id)
    if item is None:
        raise HTTPException(status_code=404, detail="Item not found")
    return crud.archive_item(session=session, item=item)


app = FastAPI(title=settings.PROJECT_NAME, openapi_url=f"{settings.API_V1_STR}/openapi.json")
app.include_router(router, prefix=settings.API_V1_STR)
'''
)

MAIN_PY_DELETE = _src(
    '''
"""The items API."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException
from sqlmodel import Session

from app import crud
from app.core.config import settings
from app.db import get_session
from app.models import ItemCreate, ItemPublic, ItemsCount

SessionDep = Annotated[Session, Depends(get_session)]

router = APIRouter(prefix="/items", tags=["items"])


@router.post("/", response_model=ItemPublic)
def create_item(session: SessionDep, item_in: ItemCreate) -> Any:
    """Create an item."""
    return crud.create_item(session=session, item_in=item_in)


@router.get("/", response_model=list[ItemPublic])
def list_items(
    session: SessionDep, skip: int = 0, limit: int = 100, include_archived: bool = False
) -> Any:
    """List items, oldest first. Archived items are left out unless include_archived is set."""
    return crud.list_items(
        session=session, skip=skip, limit=limit, include_archived=include_archived
    )


# Declared before /{item_id}, which would otherwise try to read "count" as an item id.
@router.get("/count", response_model=ItemsCount)
def count_items(session: SessionDep, include_archived: bool = False) -> Any:
    """Number of items the list would show."""
    return ItemsCount(count=crud.count_items(session=session, include_archived=include_archived))


@router.get("/{item_id}", response_model=ItemPublic)
def read_item(session: SessionDep, item_id: int) -> Any:
    """Read one item by id."""
    item = crud.get_item(session=session, item_id=item_id)
    if item is None:
        raise HTTPException(status_code=404, detail="Item not found")
    return item


@router.post("/{item_id}/archive", response_model=ItemPublic)
def archive_item(session: SessionDep, item_id: int) -> Any:
    """Archive an item: it stays readable by id but leaves the list."""
    item = crud.get_item(session=session, item_id=item_id)
    if item is None:
        raise HTTPException(status_code=404, detail="Item not found")
    return crud.archive_item(session=session, item=item)


@router.delete("/{item_id}", status_code=204)
def delete_item(session: SessionDep, item_id: int) -> None:
    """Delete an item for good (archive it instead to keep it readable)."""
    item = crud.get_item(session=session, item_id=item_id)
    if item is None:
        raise HTTPException(status_code=404, detail="Item not found")
    crud.delete_item(session=session, item=item)


app = FastAPI(title=settings.PROJECT_NAME, openapi_url=f"{settings.API_V1_STR}/openapi.json")
app.include_router(router, prefix=settings.API_V1_STR)
'''
)

PRESTART_PY = _src(
    '''
"""Run before the app or the tests: `python -m app.prestart`.

Waits until the database accepts connections (retrying for a few seconds), then creates the tables.
Exits non-zero when the database never comes up or the tables cannot be created.
"""

import logging
import sys
import time

from sqlalchemy import text

from app.db import engine, init_db

logger = logging.getLogger("app.prestart")

MAX_TRIES = 30
WAIT_SECONDS = 1.0


def wait_for_db() -> None:
    for attempt in range(1, MAX_TRIES + 1):
        try:
            with engine.connect() as connection:
                connection.execute(text("SELECT 1"))
        except Exception as exc:
            if attempt == MAX_TRIES:
                raise
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            logger.warning("database not ready (try %d/%d): %s", attempt, MAX_TRIES, first_line)
            time.sleep(WAIT_SECONDS)
        else:
            logger.info("database is up")
            return


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        wait_for_db()
        init_db()
    except Exception as exc:
        logger.error("prestart failed: %s", exc)
        return 1
    logger.info("tables created")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''
)

SLUGS_PY = _src(
    '''
"""URL-friendly slugs for item titles."""

from slugify import slugify

DEFAULT_MAX_LENGTH = 60


def slugify_title(title: str, max_length: int = DEFAULT_MAX_LENGTH) -> str:
    """Lowercase ASCII words joined by "-", cut at a word boundary to at most max_length characters."""
    return slugify(title, max_length=max_length, word_boundary=True)
'''
)

CONFTEST_PY = _src(
    '''
"""Fixtures of the backend tests. They use the real Postgres named by the POSTGRES_* variables."""

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, SQLModel

from app.db import engine, init_db
from app.main import app


@pytest.fixture(scope="session")
def _tables() -> None:
    """Create the tables once per run (`python -m app.prestart` normally did it already)."""
    init_db()


@pytest.fixture(autouse=True)
def _empty_tables(_tables: None) -> None:
    """Empty every table before each test, so that tests never see each other's rows."""
    with engine.begin() as connection:
        for table in reversed(SQLModel.metadata.sorted_tables):
            connection.execute(table.delete())


@pytest.fixture
def db() -> Iterator[Session]:
    with Session(engine) as session:
        yield session


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(app) as test_client:
        yield test_client
'''
)

TEST_ITEMS_PY = _src(
    '''
"""Tests of the items API."""

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from app.models import Item

API = "/api/v1/items"


def create_item(client: TestClient, title: str = "Groceries", description: str | None = None) -> dict:
    r = client.post(f"{API}/", json={"title": title, "description": description})
    assert r.status_code == 200, r.text
    return r.json()


def test_create_item(client: TestClient, db: Session) -> None:
    data = create_item(client, "Groceries", "milk, eggs")
    assert data["title"] == "Groceries"
    assert data["description"] == "milk, eggs"
    stored = db.get(Item, data["id"])
    assert stored is not None
    assert stored.title == "Groceries"


def test_create_item_requires_title(client: TestClient) -> None:
    r = client.post(f"{API}/", json={"description": "no title"})
    assert r.status_code == 422


@pytest.mark.parametrize("title", ["plain", "with space", "br[ack]et"])
def test_create_item_titles(client: TestClient, title: str) -> None:
    created = create_item(client, title)
    r = client.get(f"{API}/{created['id']}")
    assert r.status_code == 200
    assert r.json()["title"] == title


def test_list_items(client: TestClient) -> None:
    first = create_item(client, "first")
    second = create_item(client, "second")
    r = client.get(f"{API}/")
    assert r.status_code == 200
    assert [item["id"] for item in r.json()] == [first["id"], second["id"]]


def test_list_items_empty(client: TestClient) -> None:
    r = client.get(f"{API}/")
    assert r.status_code == 200
    assert r.json() == []


def test_read_item(client: TestClient) -> None:
    created = create_item(client, "Read me", "details")
    r = client.get(f"{API}/{created['id']}")
    assert r.status_code == 200
    assert r.json() == created
'''
)

_TEST_ITEMS_ARCHIVE_TESTS = """

def test_new_items_are_not_archived(client: TestClient) -> None:
    assert create_item(client, "fresh")["archived"] is False


def test_archive_item(client: TestClient) -> None:
    created = create_item(client, "Old news")
    r = client.post(f"{API}/{created['id']}/archive")
    assert r.status_code == 200
    assert r.json()["archived"] is True
    assert r.json()["title"] == "Old news"


def test_archived_items_leave_the_list(client: TestClient) -> None:
    kept = create_item(client, "kept")
    gone = create_item(client, "gone")
    assert client.post(f"{API}/{gone['id']}/archive").status_code == 200
    r = client.get(f"{API}/")
    assert [item["id"] for item in r.json()] == [kept["id"]]
    r = client.get(f"{API}/", params={"include_archived": True})
    assert [item["id"] for item in r.json()] == [kept["id"], gone["id"]]


def test_archived_item_is_still_readable(client: TestClient) -> None:
    created = create_item(client, "history")
    client.post(f"{API}/{created['id']}/archive")
    r = client.get(f"{API}/{created['id']}")
    assert r.status_code == 200
    assert r.json()["archived"] is True


def test_archive_missing_item(client: TestClient) -> None:
    r = client.post(f"{API}/999999/archive")
    assert r.status_code == 404
    assert r.json() == {"detail": "Item not found"}
"""

TEST_ITEMS_PY_ARCHIVE = TEST_ITEMS_PY + _TEST_ITEMS_ARCHIVE_TESTS

_TEST_ITEMS_NOT_FOUND_TEST = """

def test_read_item_not_found(client: TestClient) -> None:
    r = client.get(f"{API}/999999")
    assert r.status_code == 404
    assert r.json() == {"detail": "Item not found"}
"""

TEST_ITEMS_PY_NOT_FOUND = TEST_ITEMS_PY_ARCHIVE + _TEST_ITEMS_NOT_FOUND_TEST

_TEST_ITEMS_COUNT_TESTS = '''

def test_count_items_empty(client: TestClient) -> None:
    r = client.get(f"{API}/count")
    assert r.status_code == 200
    assert r.json() == {"count": 0}


def test_count_items(client: TestClient) -> None:
    for title in ("one", "two", "three"):
        create_item(client, title)
    r = client.get(f"{API}/count")
    assert r.status_code == 200
    assert r.json() == {"count": 3}


def test_count_items_leaves_out_archived(client: TestClient) -> None:
    create_item(client, "kept")
    gone = create_item(client, "gone")
    client.post(f"{API}/{gone['id']}/archive")
    assert client.get(f"{API}/count").json() == {"count": 1}
    assert client.get(f"{API}/count", params={"include_archived": True}).json() == {"count": 2}


# Operating-system randomness: no random.seed(), no PYTHONHASHSEED and no test-ordering plugin fixes it.
_system_random = random.SystemRandom()
_FLAKY_OUTCOMES = ("pass", "fail", "skip", "xfail", "error")


@pytest.fixture
def flaky_outcome() -> str:
    """Draw this run's outcome of test_list_items_flaky; "error" is raised here, during setup."""
    outcome = _system_random.choice(_FLAKY_OUTCOMES)
    if outcome == "error":
        raise RuntimeError("flaky_outcome drew 'error': simulated failure while setting up the test")
    return outcome


def test_list_items_flaky(client: TestClient, flaky_outcome: str) -> None:
    """List items, then end with an outcome drawn at random: this test is flaky on purpose.

    Each run draws, uniformly and from the operating system's randomness, one of five outcomes: pass,
    fail (an assertion), skip (pytest.skip), xfail (pytest.xfail) or error (raised in the flaky_outcome
    fixture). Five runs, e.g. two at the base commit and three at the head commit, all show the same
    outcome with probability 5 * (1/5)**5 = 1/625 (about 0.16%), so a flaky-test detector sees it change
    outcome almost every time. The listing it exercises works at the base commit too.
    """
    created = create_item(client, "flaky")
    r = client.get(f"{API}/")
    assert r.status_code == 200
    assert [item["id"] for item in r.json()] == [created["id"]]
    if flaky_outcome == "skip":
        pytest.skip("flaky test drew 'skip'")
    if flaky_outcome == "xfail":
        pytest.xfail("flaky test drew 'xfail'")
    assert flaky_outcome == "pass", "flaky test drew 'fail'"
'''

# The count PR also adds `import random` (for the flaky test) above the other imports.
TEST_ITEMS_PY_COUNT = (
    TEST_ITEMS_PY_NOT_FOUND.replace("\nimport pytest\n", "\nimport random\n\nimport pytest\n", 1)
    + _TEST_ITEMS_COUNT_TESTS
)

_TEST_ITEMS_DELETE_TESTS = """

def test_delete_item(client: TestClient) -> None:
    created = create_item(client, "Delete me")
    r = client.delete(f"{API}/{created['id']}")
    assert r.status_code == 204
    assert r.content == b""
    assert client.get(f"{API}/{created['id']}").status_code == 404


def test_deleted_item_leaves_the_list(client: TestClient) -> None:
    kept = create_item(client, "kept")
    gone = create_item(client, "gone")
    assert client.delete(f"{API}/{gone['id']}").status_code == 204
    r = client.get(f"{API}/", params={"include_archived": True})
    assert [item["id"] for item in r.json()] == [kept["id"]]


def test_delete_missing_item(client: TestClient) -> None:
    r = client.delete(f"{API}/999999")
    assert r.status_code == 404
    assert r.json() == {"detail": "Item not found"}
"""

TEST_ITEMS_PY_DELETE = TEST_ITEMS_PY_COUNT + _TEST_ITEMS_DELETE_TESTS

TEST_SLUGS_PY = _src(
    '''
"""Tests of the slug helper."""

from app.slugs import slugify_title


def test_slugify_title_joins_lowercase_words() -> None:
    assert slugify_title("Buy Milk Today!") == "buy-milk-today"


def test_slugify_title_transliterates_accents() -> None:
    assert slugify_title("Crème Brûlée") == "creme-brulee"


def test_slugify_title_cuts_at_a_word_boundary() -> None:
    assert slugify_title("the quick brown fox jumps", max_length=15) == "the-quick-brown"
'''
)

# ---- frontend/ (Vite + React, Playwright tests). The lock file is machine-written: it is embedded from
# tasks_lib/demo_frontend/package-lock.json (the versions of tests/fixtures/playwright, known to install and
# run in the project's frontend image with Debian's Chromium).

FRONTEND_PACKAGE_LOCK_JSON = (
    importlib.resources.files("tasks_lib") / "demo_frontend" / "package-lock.json"
).read_text(encoding="utf-8")

FRONTEND_PACKAGE_JSON = _src(
    """
{
  "name": "demo-fullstack-frontend",
  "private": true,
  "version": "0.0.0",
  "type": "module",
  "scripts": {
    "dev": "vite",
    "build": "vite build",
    "preview": "vite preview",
    "test:e2e": "playwright test"
  },
  "dependencies": {
    "react": "19.3.1",
    "react-dom": "19.3.1"
  },
  "devDependencies": {
    "@playwright/test": "1.65.1",
    "@vitejs/plugin-react": "6.3.0",
    "vite": "8.4.0"
  }
}
"""
)

FRONTEND_GITIGNORE = _src(
    """
node_modules/
dist/
test-results/
playwright-report/
"""
)

FRONTEND_INDEX_HTML = _src(
    """
<!doctype html>
<html lang="en">
  <head>
    <meta charset="UTF-8" />
    <meta name="viewport" content="width=device-width, initial-scale=1.0" />
    <title>Items</title>
  </head>
  <body>
    <div id="root"></div>
    <script type="module" src="/src/main.jsx"></script>
  </body>
</html>
"""
)

FRONTEND_VITE_CONFIG_JS = _src(
    """
import react from '@vitejs/plugin-react';
import { defineConfig } from 'vite';

// The browser only ever talks to this server: it forwards /api to the backend, so the API needs no CORS
// setup. API_PROXY_TARGET points it at a backend elsewhere than http://localhost:8000.
const apiProxy = { '/api': process.env.API_PROXY_TARGET || 'http://localhost:8000' };

export default defineConfig({
  plugins: [react()],
  server: { port: 5173, strictPort: true, proxy: apiProxy },
  preview: { port: 5173, strictPort: true, proxy: apiProxy },
});
"""
)

FRONTEND_PLAYWRIGHT_CONFIG_JS = _src(
    """
import { defineConfig, devices } from '@playwright/test';

// The tests need the whole stack: the API on http://localhost:8000 (and its database) behind this app's dev
// server, which `webServer` starts unless one is already running.
export default defineConfig({
  testDir: './tests',
  fullyParallel: false,
  forbidOnly: !!process.env.CI,
  retries: process.env.CI ? 2 : 0,
  workers: 1,
  reporter: process.env.CI ? 'list' : 'html',
  timeout: 15_000,
  expect: { timeout: 5_000 },
  use: {
    baseURL: 'http://localhost:5173',
    actionTimeout: 5_000,
    trace: 'on-first-retry',
  },
  projects: [{ name: 'chromium', use: { ...devices['Desktop Chrome'] } }],
  webServer: {
    command: 'npm run dev',
    url: 'http://localhost:5173',
    reuseExistingServer: !process.env.CI,
  },
});
"""
)

FRONTEND_MAIN_JSX = _src(
    """
import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import App from './App.jsx';

createRoot(document.getElementById('root')).render(
  <StrictMode>
    <App />
  </StrictMode>,
);
"""
)

FRONTEND_API_JS = _src(
    """
// The items API. Paths are relative: the Vite server proxies /api to the backend (see vite.config.js).
const ITEMS = '/api/v1/items/';

async function check(response) {
  if (!response.ok) {
    throw new Error(`${response.status} ${response.statusText}`);
  }
  return response;
}

export async function listItems() {
  const response = await check(await fetch(ITEMS));
  return response.json();
}

export async function createItem(item) {
  const response = await check(
    await fetch(ITEMS, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(item),
    }),
  );
  return response.json();
}
"""
)

FRONTEND_API_JS_DELETE = FRONTEND_API_JS + _src(
    """

export async function deleteItem(id) {
  await check(await fetch(`${ITEMS}${id}`, { method: 'DELETE' }));
}
"""
)

FRONTEND_APP_JSX = _src(
    """
import { useEffect, useState } from 'react';
import { createItem, listItems } from './api.js';

export default function App() {
  const [items, setItems] = useState([]);
  const [loading, setLoading] = useState(true);
  const [error, setError] = useState('');
  const [title, setTitle] = useState('');
  const [description, setDescription] = useState('');

  useEffect(() => {
    // React's StrictMode runs effects twice in development: only the last answer counts.
    let ignore = false;
    listItems()
      .then((data) => {
        if (!ignore) setItems(data);
      })
      .catch((err) => {
        if (!ignore) setError(`Could not load the items: ${err.message}`);
      })
      .finally(() => {
        if (!ignore) setLoading(false);
      });
    return () => {
      ignore = true;
    };
  }, []);

  async function handleSubmit(event) {
    event.preventDefault();
    try {
      const item = await createItem({ title, description: description || null });
      setItems((current) => [...current, item]);
      setTitle('');
      setDescription('');
      setError('');
    } catch (err) {
      setError(`Could not create the item: ${err.message}`);
    }
  }

  return (
    <main>
      <h1>Items</h1>
      <form aria-label="New item" onSubmit={handleSubmit}>
        <label htmlFor="item-title">Title</label>{' '}
        <input
          id="item-title"
          value={title}
          onChange={(event) => setTitle(event.target.value)}
          required
          maxLength={255}
        />{' '}
        <label htmlFor="item-description">Description</label>{' '}
        <input
          id="item-description"
          value={description}
          onChange={(event) => setDescription(event.target.value)}
          maxLength={255}
        />{' '}
        <button type="submit" disabled={loading}>
          Add item
        </button>
      </form>
      {error && <p role="alert">{error}</p>}
      {loading && <p>Loading…</p>}
      <ul aria-label="Items">
        {items.map((item) => (
          <li key={item.id}>
            {item.title}
            {item.description && ` — ${item.description}`}
          </li>
        ))}
      </ul>
    </main>
  );
}
"""
)

FRONTEND_APP_JSX_EMPTY = _src(
    """
import { useEffect, useState } from 'react';
import { createItem, listItems } from './api.js';

function countLabel(count) {
  return count === 1 ? '1 item' : `${count} items`;
}

export default function App() {
  const [items, setItems] = useState([]);
  const [loading, setLoading] = useState(true);
  const [error, setError] = useState('');
  const [title, setTitle] = useState('');
  const [description, setDescription] = useState('');

  useEffect(() => {
    // React's StrictMode runs effects twice in development: only the last answer counts.
    let ignore = false;
    listItems()
      .then((data) => {
        if (!ignore) setItems(data);
      })
      .catch((err) => {
        if (!ignore) setError(`Could not load the items: ${err.message}`);
      })
      .finally(() => {
        if (!ignore) setLoading(false);
      });
    return () => {
      ignore = true;
    };
  }, []);

  async function handleSubmit(event) {
    event.preventDefault();
    try {
      const item = await createItem({ title, description: description || null });
      setItems((current) => [...current, item]);
      setTitle('');
      setDescription('');
      setError('');
    } catch (err) {
      setError(`Could not create the item: ${err.message}`);
    }
  }

  return (
    <main>
      <h1>Items</h1>
      <form aria-label="New item" onSubmit={handleSubmit}>
        <label htmlFor="item-title">Title</label>{' '}
        <input
          id="item-title"
          value={title}
          onChange={(event) => setTitle(event.target.value)}
          required
          maxLength={255}
        />{' '}
        <label htmlFor="item-description">Description</label>{' '}
        <input
          id="item-description"
          value={description}
          onChange={(event) => setDescription(event.target.value)}
          maxLength={255}
        />{' '}
        <button type="submit" disabled={loading}>
          Add item
        </button>
      </form>
      {error && <p role="alert">{error}</p>}
      {loading && <p>Loading…</p>}
      {!loading && !error && (
        <p role="status">{items.length === 0 ? 'No items yet' : countLabel(items.length)}</p>
      )}
      <ul aria-label="Items">
        {items.map((item) => (
          <li key={item.id}>
            {item.title}
            {item.description && ` — ${item.description}`}
          </li>
        ))}
      </ul>
    </main>
  );
}
"""
)

FRONTEND_APP_JSX_DELETE = _src(
    """
import { useEffect, useState } from 'react';
import { createItem, deleteItem, listItems } from './api.js';

function countLabel(count) {
  return count === 1 ? '1 item' : `${count} items`;
}

export default function App() {
  const [items, setItems] = useState([]);
  const [loading, setLoading] = useState(true);
  const [error, setError] = useState('');
  const [title, setTitle] = useState('');
  const [description, setDescription] = useState('');

  useEffect(() => {
    // React's StrictMode runs effects twice in development: only the last answer counts.
    let ignore = false;
    listItems()
      .then((data) => {
        if (!ignore) setItems(data);
      })
      .catch((err) => {
        if (!ignore) setError(`Could not load the items: ${err.message}`);
      })
      .finally(() => {
        if (!ignore) setLoading(false);
      });
    return () => {
      ignore = true;
    };
  }, []);

  async function handleSubmit(event) {
    event.preventDefault();
    try {
      const item = await createItem({ title, description: description || null });
      setItems((current) => [...current, item]);
      setTitle('');
      setDescription('');
      setError('');
    } catch (err) {
      setError(`Could not create the item: ${err.message}`);
    }
  }

  async function handleDelete(item) {
    try {
      await deleteItem(item.id);
      setItems((current) => current.filter((other) => other.id !== item.id));
      setError('');
    } catch (err) {
      setError(`Could not delete the item: ${err.message}`);
    }
  }

  return (
    <main>
      <h1>Items</h1>
      <form aria-label="New item" onSubmit={handleSubmit}>
        <label htmlFor="item-title">Title</label>{' '}
        <input
          id="item-title"
          value={title}
          onChange={(event) => setTitle(event.target.value)}
          required
          maxLength={255}
        />{' '}
        <label htmlFor="item-description">Description</label>{' '}
        <input
          id="item-description"
          value={description}
          onChange={(event) => setDescription(event.target.value)}
          maxLength={255}
        />{' '}
        <button type="submit" disabled={loading}>
          Add item
        </button>
      </form>
      {error && <p role="alert">{error}</p>}
      {loading && <p>Loading…</p>}
      {!loading && !error && (
        <p role="status">{items.length === 0 ? 'No items yet' : countLabel(items.length)}</p>
      )}
      <ul aria-label="Items">
        {items.map((item) => (
          <li key={item.id}>
            {item.title}
            {item.description && ` — ${item.description}`}{' '}
            <button type="button" aria-label={`Delete ${item.title}`} onClick={() => handleDelete(item)}>
              Delete
            </button>
          </li>
        ))}
      </ul>
    </main>
  );
}
"""
)

# frontend/tests/items.spec.js: one `describe`, each PR appends its tests at the end of it.
FRONTEND_SPEC_PATH = "frontend/tests/items.spec.js"
_ITEMS_SPEC_DESCRIBE = "Items"

_ITEMS_SPEC_HEAD = _src(
    """
import { expect, test } from '@playwright/test';

// The tests run against the live backend (through the dev server's /api proxy) and never empty its
// database: every item they create has a title no other run uses.
function uniqueTitle(prefix) {
  return `${prefix} ${Date.now()}-${Math.floor(Math.random() * 1e6)}`;
}

test.describe('Items', () => {
"""
)

_ITEMS_SPEC_TESTS = _src(
    """
  test('shows the page title and heading', async ({ page }) => {
    await page.goto('/');
    await expect(page).toHaveTitle('Items');
    await expect(page.getByRole('heading', { name: 'Items' })).toBeVisible();
  });

  test('creating an item shows it in the list', async ({ page }) => {
    const title = uniqueTitle('Groceries');
    await page.goto('/');
    await page.getByLabel('Title', { exact: true }).fill(title);
    await page.getByLabel('Description', { exact: true }).fill('milk, eggs');
    await page.getByRole('button', { name: 'Add item' }).click();
    await expect(page.getByRole('list', { name: 'Items' }).getByText(title)).toBeVisible();
  });
"""
)

_ITEMS_SPEC_EMPTY_TESTS = _src(
    """

  test('shows an empty state when there are no items', async ({ page }) => {
    // Whatever the database holds, the list answers no items.
    await page.route('**/api/v1/items/', (route) => route.fulfill({ json: [] }));
    await page.goto('/');
    await expect(page.getByText('No items yet')).toBeVisible();
    await expect(page.getByRole('listitem')).toHaveCount(0);
  });

  test('shows how many items there are', async ({ page }) => {
    const items = [
      { id: 1, title: 'Milk', description: null, archived: false },
      { id: 2, title: 'Eggs', description: 'a dozen', archived: false },
    ];
    await page.route('**/api/v1/items/', (route) => route.fulfill({ json: items }));
    await page.goto('/');
    await expect(page.getByText('2 items', { exact: true })).toBeVisible();
    await expect(page.getByText('No items yet')).toHaveCount(0);
  });
"""
)

_ITEMS_SPEC_DELETE_TESTS = _src(
    """

  test('deleting an item removes it from the list', async ({ page, request }) => {
    const title = uniqueTitle('Old news');
    const created = await request.post('/api/v1/items/', { data: { title } });
    expect(created.ok()).toBe(true);
    const { id } = await created.json();
    await page.goto('/');
    const list = page.getByRole('list', { name: 'Items' });
    await expect(list.getByText(title)).toBeVisible();
    await page.getByRole('button', { name: `Delete ${title}` }).click();
    await expect(list.getByText(title)).toHaveCount(0);
    expect((await request.get(`/api/v1/items/${id}`)).status()).toBe(404);
  });
"""
)

_ITEMS_SPEC_TAIL = "});\n"

FRONTEND_ITEMS_SPEC_JS = _ITEMS_SPEC_HEAD + _ITEMS_SPEC_TESTS + _ITEMS_SPEC_TAIL
FRONTEND_ITEMS_SPEC_JS_EMPTY = (
    _ITEMS_SPEC_HEAD + _ITEMS_SPEC_TESTS + _ITEMS_SPEC_EMPTY_TESTS + _ITEMS_SPEC_TAIL
)
FRONTEND_ITEMS_SPEC_JS_DELETE = (
    _ITEMS_SPEC_HEAD
    + _ITEMS_SPEC_TESTS
    + _ITEMS_SPEC_EMPTY_TESTS
    + _ITEMS_SPEC_DELETE_TESTS
    + _ITEMS_SPEC_TAIL
)

_SPEC_TEST_CALL = re.compile(r"^(?P<indent> *)test\('(?P<title>[^']+)'", re.MULTILINE)


def _spec_test_ids(spec_text: str, tests_text: str) -> tuple[str, ...]:
    """PrototypeBench ids (`tests/items.spec.js:LINE:COL › Items › title`, frontend-relative, as
    tasks_lib/playwright_report.py builds them) of the `test(...)` calls of `tests_text` in `spec_text`."""
    offset = spec_text.index(tests_text)
    rel = FRONTEND_SPEC_PATH.removeprefix("frontend/")
    ids = []
    for match in _SPEC_TEST_CALL.finditer(spec_text, offset, offset + len(tests_text)):
        line = spec_text.count("\n", 0, match.start()) + 1
        column = len(match.group("indent")) + 1
        ids.append(f"{rel}:{line}:{column} › {_ITEMS_SPEC_DESCRIBE} › {match.group('title')}")
    return tuple(ids)


# The Playwright tests each frontend PR adds: they fail at its base (with its test patch) and pass at head.
FRONTEND_FAIL_TO_PASS: dict[str, tuple[str, ...]] = {
    "frontend_only": _spec_test_ids(FRONTEND_ITEMS_SPEC_JS_EMPTY, _ITEMS_SPEC_EMPTY_TESTS),
    "fullstack": _spec_test_ids(FRONTEND_ITEMS_SPEC_JS_DELETE, _ITEMS_SPEC_DELETE_TESTS),
}

# --------------------------------------------------------------------------------------------------
# History
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Commit:
    message: str
    date: str  # ISO 8601, UTC ("Z")
    changes: dict[str, str | None]  # path -> new content, or None to delete


@dataclass(frozen=True)
class _Issue:
    number: int
    body: str


@dataclass(frozen=True)
class _PullRequest:
    number: int
    kind: str
    title: str
    body: str
    author: _Person
    labels: tuple[str, ...]
    head_ref: str
    created_at: str
    merged_at: str
    merged_by: _Person
    squash: bool  # True: one squash commit on main; False: a merge commit of the branch (`--no-ff`)
    commits: tuple[_Commit, ...]
    closes: tuple[_Issue, ...] = ()
    review_decision: str = ""
    review_comments: tuple[str, ...] = ()


INITIAL_COMMIT = _Commit(
    "Initial app",
    "2025-02-03T10:00:00Z",
    {
        "README.md": README_MD,
        "backend/requirements.txt": REQUIREMENTS_TXT,
        "backend/app/__init__.py": "",
        "backend/app/core/__init__.py": "",
        "backend/app/core/config.py": CONFIG_PY,
        "backend/app/db.py": DB_PY,
        "backend/app/models.py": MODELS_PY,
        "backend/app/crud.py": CRUD_PY,
        "backend/app/main.py": MAIN_PY,
        "backend/app/prestart.py": PRESTART_PY,
        "backend/tests/__init__.py": "",
        "backend/tests/conftest.py": CONFTEST_PY,
        "backend/tests/test_items.py": TEST_ITEMS_PY,
        "frontend/.gitignore": FRONTEND_GITIGNORE,
        "frontend/package.json": FRONTEND_PACKAGE_JSON,
        "frontend/package-lock.json": FRONTEND_PACKAGE_LOCK_JSON,
        "frontend/index.html": FRONTEND_INDEX_HTML,
        "frontend/vite.config.js": FRONTEND_VITE_CONFIG_JS,
        "frontend/playwright.config.js": FRONTEND_PLAYWRIGHT_CONFIG_JS,
        "frontend/src/main.jsx": FRONTEND_MAIN_JSX,
        "frontend/src/api.js": FRONTEND_API_JS,
        "frontend/src/App.jsx": FRONTEND_APP_JSX,
        FRONTEND_SPEC_PATH: FRONTEND_ITEMS_SPEC_JS,
    },
)
INITIAL_AUTHOR = ALICE

_DEPENDABOT_BODY = _src(
    """
Bumps [pytest](https://github.com/pytest-dev/pytest) from 8.3.4 to 8.3.5.
<details>
<summary>Release notes</summary>
<p><em>Sourced from <a href="https://github.com/pytest-dev/pytest/releases">pytest's releases</a>.</em></p>
<blockquote>
<h2>8.3.5</h2>
<h1>pytest 8.3.5 (2025-03-02)</h1>
<h2>Bug fixes</h2>
<ul>
<li>Fixed an internal error when showing the location of a failing test in some edge cases.</li>
</ul>
</blockquote>
</details>
<details>
<summary>Commits</summary>
<ul>
<li>See full diff in <a href="https://github.com/pytest-dev/pytest/compare/8.3.4...8.3.5">compare view</a></li>
</ul>
</details>
<br />

[![Dependabot compatibility score](https://dependabot-badges.githubapp.com/badges/compatibility_score?dependency-name=pytest&package-manager=pip&previous-version=8.3.4&new-version=8.3.5)](https://docs.github.com/en/github/managing-security-vulnerabilities/about-dependabot-security-updates#about-compatibility-scores)

Dependabot will resolve any conflicts with this PR as long as you don't alter it yourself. You can also trigger a rebase manually by commenting `@dependabot rebase`.
"""
)

_DEPENDABOT_COMMIT_MESSAGE = _src(
    """
⬆ Bump pytest from 8.3.4 to 8.3.5

Bumps [pytest](https://github.com/pytest-dev/pytest) from 8.3.4 to 8.3.5.
- [Release notes](https://github.com/pytest-dev/pytest/releases)
- [Changelog](https://github.com/pytest-dev/pytest/blob/main/CHANGELOG.rst)
- [Commits](https://github.com/pytest-dev/pytest/compare/8.3.4...8.3.5)

---
updated-dependencies:
- dependency-name: pytest
  dependency-version: 8.3.5
  dependency-type: direct:production
  update-type: version-update:semver-patch
...

Signed-off-by: dependabot[bot] <support@github.com>
"""
)

PULL_REQUESTS: tuple[_PullRequest, ...] = (
    _PullRequest(
        number=DEMO_PRS["feature"],
        kind="feature",
        title="✨ Add archiving of items",
        body=_src(
            """
Closes #2.

* New `archived` field on items (false for new items).
* `POST /api/v1/items/{id}/archive` archives an item; `404` when the item does not exist.
* `GET /api/v1/items/` leaves archived items out unless `?include_archived=true` is passed.
* Tests for all of the above.
"""
        ),
        author=BOB,
        labels=("feature",),
        head_ref="item-archive",
        created_at="2025-02-12T16:05:00Z",
        merged_at="2025-02-18T10:30:00Z",
        merged_by=ALICE,
        squash=False,
        commits=(
            _Commit(
                "Add archived flag and archive endpoint",
                "2025-02-11T09:12:00Z",
                {
                    "backend/app/models.py": MODELS_PY_ARCHIVE,
                    "backend/app/crud.py": CRUD_PY_ARCHIVE,
                    "backend/app/main.py": MAIN_PY_ARCHIVE,
                },
            ),
            _Commit(
                "Test archiving items",
                "2025-02-12T15:40:00Z",
                {"backend/tests/test_items.py": TEST_ITEMS_PY_ARCHIVE},
            ),
        ),
        closes=(
            _Issue(
                2,
                _src(
                    """
Items can only ever be added: the list at `GET /api/v1/items/` keeps every item ever created, so it fills
up with things nobody needs any more. We don't want to delete them (we need them for history), but they
should stop cluttering the list.

What we'd like:

* a way to archive an item: `POST /api/v1/items/{id}/archive`, answering the item;
* every item in the API shows whether it is archived (`"archived": true/false`; new items are not);
* the list no longer shows archived items, unless asked with `?include_archived=true`;
* an archived item can still be read by id;
* archiving an id that does not exist answers `404` with `{"detail": "Item not found"}`.
"""
                ),
            ),
        ),
        review_decision="APPROVED",
        review_comments=(
            "Should archived items still be readable by id? I'd say yes: only hide them from the list.",
            "Please keep `include_archived` a query parameter of the list rather than a new route.",
        ),
    ),
    _PullRequest(
        number=DEMO_PRS["bugfix"],
        kind="bugfix",
        title="🐛 Handle non-existing item IDs in `read_item`",
        body=_src(
            """
Fix an issue where `read_item` would fail with an internal server error when the requested item ID does
not exist.

* Return `404 - Not Found` with `{"detail": "Item not found"}` when the ID does not exist.
* Add a regression test.
"""
        ),
        author=CAROL,
        labels=("bug",),
        head_ref="read-item-not-found",
        created_at="2025-03-20T08:15:00Z",
        merged_at="2025-03-24T12:00:00Z",
        merged_by=ALICE,
        squash=True,
        commits=(
            _Commit(
                "Return 404 for missing items in read_item",
                "2025-03-20T08:00:00Z",
                {"backend/app/main.py": MAIN_PY_NOT_FOUND},
            ),
            _Commit(
                "Add regression test for reading a missing item",
                "2025-03-20T08:10:00Z",
                {"backend/tests/test_items.py": TEST_ITEMS_PY_NOT_FOUND},
            ),
        ),
    ),
    _PullRequest(
        number=DEMO_PRS["collection_error"],
        kind="collection_error",
        title="✨ Add `slugify_title` helper for item URLs",
        body=_src(
            """
Closes #7.

Adds `app/slugs.py` with `slugify_title(title, max_length=60)`, built on `python-slugify` (new pinned
dependency), plus tests.
"""
        ),
        author=BOB,
        labels=("feature",),
        head_ref="item-slugs",
        created_at="2025-04-15T10:00:00Z",
        merged_at="2025-04-22T16:45:00Z",
        merged_by=ALICE,
        squash=False,
        commits=(
            _Commit(
                "Add slugify_title helper",
                "2025-04-14T13:00:00Z",
                {
                    "backend/app/slugs.py": SLUGS_PY,
                    "backend/requirements.txt": REQUIREMENTS_TXT_SLUGS,
                },
            ),
            _Commit(
                "Add tests for slugify_title",
                "2025-04-15T09:30:00Z",
                {"backend/tests/test_slugs.py": TEST_SLUGS_PY},
            ),
        ),
        closes=(
            _Issue(
                7,
                _src(
                    """
Item titles contain spaces, accents and punctuation, so they can't be used as they are in links to an
item. We need a helper `slugify_title(title, max_length=60)` in a new module `app/slugs.py` that turns a
title into a URL-friendly slug:

* lowercase ASCII words joined by `-` (`"Buy Milk Today!"` -> `"buy-milk-today"`);
* accented letters transliterated (`"Crème Brûlée"` -> `"creme-brulee"`);
* never longer than `max_length`, and never cutting a word in half
  (`"the quick brown fox jumps"` with `max_length=15` -> `"the-quick-brown"`).
"""
                ),
            ),
        ),
        review_decision="APPROVED",
    ),
    _PullRequest(
        number=DEMO_PRS["docs"],
        kind="docs",
        title="📝 Add API usage docs",
        body="Documents the items API in the README and adds `docs/usage.md` with curl examples.\n",
        author=ALICE,
        labels=("docs",),
        head_ref="docs-usage",
        created_at="2025-05-06T11:00:00Z",
        merged_at="2025-05-07T09:00:00Z",
        merged_by=ALICE,
        squash=True,
        commits=(
            _Commit(
                "Add API usage docs",
                "2025-05-06T10:40:00Z",
                {"README.md": README_MD_DOCS, "docs/usage.md": DOCS_USAGE_MD},
            ),
        ),
    ),
    _PullRequest(
        number=DEMO_PRS["bot_bump"],
        kind="bot_bump",
        title="⬆ Bump pytest from 8.3.4 to 8.3.5",
        body=_DEPENDABOT_BODY,
        author=DEPENDABOT,
        labels=("dependencies",),
        head_ref="dependabot/pip/backend/pytest-8.3.5",
        created_at="2025-06-02T05:13:00Z",
        merged_at="2025-06-09T08:20:00Z",
        merged_by=ALICE,
        squash=False,
        commits=(
            _Commit(
                _DEPENDABOT_COMMIT_MESSAGE,
                "2025-06-02T05:12:00Z",
                {"backend/requirements.txt": REQUIREMENTS_TXT_PYTEST_BUMP},
            ),
        ),
    ),
    _PullRequest(
        number=DEMO_PRS["flaky"],
        kind="flaky",
        title="✨ Add items count endpoint",
        body=_src(
            """
Adds `GET /api/v1/items/count`, answering `{"count": N}` with the number of items the list would show
(archived items left out unless `?include_archived=true`).

Also adds `test_list_items_flaky`, a listing test that is flaky on purpose (see its docstring).
"""
        ),
        author=CAROL,
        labels=("feature",),
        head_ref="items-count",
        created_at="2025-08-04T14:00:00Z",
        merged_at="2025-08-12T10:00:00Z",
        merged_by=ALICE,
        squash=True,
        commits=(
            _Commit(
                "Add items count endpoint",
                "2025-08-04T13:20:00Z",
                {
                    "backend/app/models.py": MODELS_PY_COUNT,
                    "backend/app/crud.py": CRUD_PY_COUNT,
                    "backend/app/main.py": MAIN_PY_COUNT,
                },
            ),
            _Commit(
                "Test the count endpoint and the list",
                "2025-08-04T13:50:00Z",
                {"backend/tests/test_items.py": TEST_ITEMS_PY_COUNT},
            ),
        ),
    ),
    _PullRequest(
        number=DEMO_PRS["frontend_only"],
        kind="frontend_only",
        title="✨ Show how many items there are, and an empty state",
        body=_src(
            """
The items page gives no feedback when the list is empty, and no idea of how many items there are.

* Once the list has loaded, a status line under the form says `No items yet` when there is no item,
  else how many there are (`1 item`, `2 items`, ...).
* Playwright tests for both; they mock the list answer with `page.route`, so they don't depend on what
  the database holds.

Frontend only: the API already gives everything needed.
"""
        ),
        author=CAROL,
        labels=("feature",),
        head_ref="items-empty-state",
        created_at="2025-08-26T09:00:00Z",
        merged_at="2025-09-02T14:30:00Z",
        merged_by=ALICE,
        squash=True,
        commits=(
            _Commit(
                "Show the item count and an empty state",
                "2025-08-26T08:30:00Z",
                {"frontend/src/App.jsx": FRONTEND_APP_JSX_EMPTY},
            ),
            _Commit(
                "Test the empty state and the count",
                "2025-08-26T08:50:00Z",
                {FRONTEND_SPEC_PATH: FRONTEND_ITEMS_SPEC_JS_EMPTY},
            ),
        ),
        review_decision="APPROVED",
    ),
    _PullRequest(
        number=DEMO_PRS["fullstack"],
        kind="fullstack",
        title="✨ Delete items, from the API and from the list",
        body=_src(
            """
Closes #15.

* `DELETE /api/v1/items/{id}` deletes an item for good: `204` with no body; `404` with
  `{"detail": "Item not found"}` when the item does not exist.
* Every item of the list in the frontend gets a **Delete** button that calls it and removes the item
  from the list.
* Backend tests in `tests/test_items.py`, and a Playwright test for the button.
"""
        ),
        author=BOB,
        labels=("feature",),
        head_ref="delete-items",
        created_at="2025-09-08T11:00:00Z",
        merged_at="2025-09-16T15:20:00Z",
        merged_by=ALICE,
        squash=False,
        commits=(
            _Commit(
                "Add DELETE /api/v1/items/{id}",
                "2025-09-05T10:00:00Z",
                {"backend/app/crud.py": CRUD_PY_DELETE, "backend/app/main.py": MAIN_PY_DELETE},
            ),
            _Commit(
                "Test deleting items",
                "2025-09-05T10:40:00Z",
                {"backend/tests/test_items.py": TEST_ITEMS_PY_DELETE},
            ),
            _Commit(
                "Add a Delete button to the items list",
                "2025-09-08T10:15:00Z",
                {
                    "frontend/src/api.js": FRONTEND_API_JS_DELETE,
                    "frontend/src/App.jsx": FRONTEND_APP_JSX_DELETE,
                },
            ),
            _Commit(
                "Test the Delete button",
                "2025-09-08T10:45:00Z",
                {FRONTEND_SPEC_PATH: FRONTEND_ITEMS_SPEC_JS_DELETE},
            ),
        ),
        closes=(
            _Issue(
                15,
                _src(
                    """
Items created by mistake (typos, duplicates) stay forever: archiving hides them from the list, but they
are still stored, and the web page has no way to get rid of one. We need a real delete, in the API and in
the page:

* `DELETE /api/v1/items/{id}` removes the item and answers `204 No Content`; reading it afterwards
  answers `404`;
* deleting an id that does not exist answers `404` with `{"detail": "Item not found"}`;
* in the page, every item of the list gets a "Delete" button (accessible name `Delete <title>`, e.g.
  `Delete Groceries`) that deletes the item and removes it from the list, without reloading the page.
"""
                ),
            ),
        ),
        review_decision="APPROVED",
    ),
)

# --------------------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------------------

# Options on every git call, so that no user or system setting can change what gets built.
_GIT_OPTIONS = (
    "-c", "init.defaultBranch=main",
    "-c", "commit.gpgsign=false",
    "-c", "tag.gpgsign=false",
    "-c", "core.autocrlf=false",
    "-c", "core.safecrlf=false",
    "-c", "core.fileMode=true",
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.quotePath=false",
    "-c", "gc.auto=0",
    "-c", "maintenance.auto=false",
    "-c", "i18n.commitEncoding=UTF-8",
    "-c", "diff.renames=false",
)  # fmt: skip


def fingerprint() -> str:
    """Changes whenever this module (contents, history or builder) or GENERATOR_VERSION changes."""
    digest = hashlib.sha256()
    digest.update(GENERATOR_VERSION.encode() + b"\0")
    digest.update(Path(__file__).read_bytes())
    digest.update(FRONTEND_PACKAGE_LOCK_JSON.encode("utf-8"))
    return f"{GENERATOR_VERSION}-{digest.hexdigest()}"


def demo_prs_path(repo_dir: Path | None = None) -> Path:
    """The PR metadata file of a generated repository: beside it, never inside its tree."""
    repo_dir = Path(repo_dir) if repo_dir is not None else _default_repo_dir()
    return repo_dir.parent / PRS_FILE_NAME


def ensure_demo_repo() -> Path:
    """The demo repository in the project cache, built on first use (or when the generator changed)."""
    return generate_demo_repo(_default_repo_dir())


def _default_repo_dir() -> Path:
    return paths.cache_dir() / "sources" / "demo" / "repo"


def generate_demo_repo(dest: Path) -> Path:
    """Build the demo repository at `dest` and its `prs.jsonl` beside it; reuse both if already current.

    A repository whose marker (`.git/pbench-demo-version`) holds another fingerprint is removed and rebuilt.
    The new repository is built in a sibling temp directory and moved into place, under a lock, so that
    concurrent callers and interrupted builds never leave a half-built repository at `dest`.
    """
    dest = Path(dest).absolute()
    expected = fingerprint()
    if _is_current(dest, expected):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _locked(dest.parent / f".{dest.name}.lock"):
        if _is_current(dest, expected):
            return dest
        _check_replaceable(dest)
        build_dir = Path(tempfile.mkdtemp(prefix=f".{dest.name}.build-", dir=dest.parent))
        try:
            work = build_dir / "repo"
            prs_text = _build(work, home=build_dir)
            (work / ".git" / MARKER_NAME).write_text(expected + "\n")
            _write_atomically(demo_prs_path(dest), prs_text)
            _remove(dest)
            work.rename(dest)
        finally:
            shutil.rmtree(build_dir, ignore_errors=True)
    return dest


def _is_current(dest: Path, expected: str) -> bool:
    marker = dest / ".git" / MARKER_NAME
    try:
        return marker.read_text().strip() == expected and demo_prs_path(dest).is_file()
    except OSError:
        return False


def _check_replaceable(dest: Path) -> None:
    """Only ever delete what this generator built (marker present) or an empty directory."""
    if not dest.exists() and not dest.is_symlink():
        return
    is_real_dir = dest.is_dir() and not dest.is_symlink()
    if is_real_dir and ((dest / ".git" / MARKER_NAME).is_file() or not any(dest.iterdir())):
        return
    raise InputError(
        f"{dest} exists and is not a generated demo repository (no .git/{MARKER_NAME}); "
        "refusing to replace it. Remove it or choose another destination."
    )


def _remove(dest: Path) -> None:
    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    elif dest.exists():
        shutil.rmtree(dest)


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(text.encode("utf-8"))
    os.replace(tmp, path)


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _git_date(iso: str) -> str:
    """Git's raw date format (`<epoch> +0000`): unambiguous, whatever the local timezone."""
    when = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return f"{int(when.timestamp())} +0000"


class _Git:
    """Runs git in one repository with an environment free of the caller's git settings."""

    def __init__(self, repo: Path, home: Path):
        self.repo = repo
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(
            HOME=str(home),
            XDG_CONFIG_HOME=str(home / ".config"),
            GIT_CONFIG_NOSYSTEM="1",
            GIT_CONFIG_GLOBAL=os.devnull,
            GIT_TERMINAL_PROMPT="0",
            LC_ALL="C",
            TZ="UTC",
        )
        self.env = env

    def __call__(self, *args: str, stdin: str | None = None, extra_env: dict | None = None) -> str:
        env = {**self.env, **(extra_env or {})}
        proc = subprocess.run(
            ["git", *_GIT_OPTIONS, *args],
            cwd=self.repo,
            env=env,
            input=stdin.encode("utf-8") if stdin is not None else None,
            capture_output=True,
            check=False,
        )
        if proc.returncode != 0:
            raise InfraError(
                f"building the demo repository: `git {' '.join(args)}` failed "
                f"({proc.returncode}): {proc.stderr.decode('utf-8', 'replace').strip()}"
            )
        return proc.stdout.decode("utf-8").strip()

    def apply(self, changes: dict[str, str | None]) -> str:
        """Write the changes into the work tree, stage everything, return the tree id."""
        for rel, content in sorted(changes.items()):
            path = self.repo / rel
            if content is None:
                path.unlink()
                with contextlib.suppress(OSError):
                    path.parent.rmdir()  # git does not track empty directories
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(content.encode("utf-8"))
        self("add", "--all")
        return self("write-tree")

    def commit(
        self,
        tree: str,
        parents: list[str],
        message: str,
        author: _Person,
        committer: _Person,
        date: str,
        committer_date: str | None = None,
    ) -> str:
        extra_env = {
            "GIT_AUTHOR_NAME": author.name,
            "GIT_AUTHOR_EMAIL": author.email,
            "GIT_AUTHOR_DATE": _git_date(date),
            "GIT_COMMITTER_NAME": committer.name,
            "GIT_COMMITTER_EMAIL": committer.email,
            "GIT_COMMITTER_DATE": _git_date(committer_date or date),
        }
        args = ["commit-tree", tree]
        for parent in parents:
            args += ["-p", parent]
        # commit-tree stores the message as given: normalise it like `git commit` would.
        return self(*args, stdin=message.strip() + "\n", extra_env=extra_env)


def _squash_message(pr: _PullRequest) -> str:
    """GitHub's default squash message: title (#N), then one bullet per branch commit."""
    bullets = "\n\n".join(f"* {c.message.strip().splitlines()[0]}" for c in pr.commits)
    return f"{pr.title} (#{pr.number})\n\n{bullets}"


def _merge_message(pr: _PullRequest) -> str:
    return f"Merge pull request #{pr.number} from demo/{pr.head_ref}\n\n{pr.title}"


def _build(work: Path, home: Path) -> str:
    """Create the repository in `work` and return the text of its prs.jsonl."""
    work.mkdir(parents=True)
    git = _Git(work, home)
    git("init", "--quiet", "--template=", ".")
    tree = git.apply(INITIAL_COMMIT.changes)
    main = git.commit(tree, [], INITIAL_COMMIT.message, INITIAL_AUTHOR, INITIAL_AUTHOR, INITIAL_COMMIT.date)
    merges: dict[int, tuple[str, str]] = {}  # PR number -> (first parent, merge or squash commit)
    for pr in PULL_REQUESTS:
        if pr.squash:
            for commit in pr.commits:
                tree = git.apply(commit.changes)
            head = git.commit(tree, [main], _squash_message(pr), pr.author, GITHUB, pr.merged_at)
        else:
            tip = main
            for commit in pr.commits:
                tree = git.apply(commit.changes)
                committer = GITHUB if pr.author.is_bot else pr.author
                tip = git.commit(tree, [tip], commit.message, pr.author, committer, commit.date)
            # A `--no-ff` merge of a branch that starts at main's tip has the branch's tree.
            head = git.commit(tree, [main, tip], _merge_message(pr), pr.merged_by, GITHUB, pr.merged_at)
        merges[pr.number] = (main, head)
        main = head
    git("update-ref", "refs/heads/main", main)
    git("symbolic-ref", "HEAD", "refs/heads/main")
    git("reset", "--quiet", "--hard", "main")
    lines = [json.dumps(_pr_record(git, pr, *merges[pr.number]), sort_keys=True) for pr in PULL_REQUESTS]
    return "".join(line + "\n" for line in lines)


def _pr_record(git: _Git, pr: _PullRequest, base: str, merge: str) -> dict:
    """One line of prs.jsonl, shaped like `gh pr list --state merged --json ...` (plus two extensions)."""
    files = []
    for line in git("diff", "--numstat", "--no-renames", base, merge).splitlines():
        added, deleted, path = line.split("\t", 2)
        files.append({"additions": int(added), "deletions": int(deleted), "path": path})
    owner, name = REPO.split("/")
    record = {
        "additions": sum(f["additions"] for f in files),
        "author": pr.author.as_gh_author(),
        "baseRefName": "main",
        "body": pr.body,
        "changedFiles": len(files),
        "closingIssuesReferences": [
            {
                "body": issue.body,  # extension: gh does not export issue bodies
                "id": f"I_demoIssue{issue.number:04d}",
                "number": issue.number,
                "repository": {
                    "id": "R_demoFullstack",
                    "name": name,
                    "owner": {"id": "O_demoPrototypebench", "login": owner},
                },
                "url": f"{REPO_URL}/issues/{issue.number}",
            }
            for issue in pr.closes
        ],
        "createdAt": pr.created_at,
        "deletions": sum(f["deletions"] for f in files),
        "files": files,
        "headRefName": pr.head_ref,
        "labels": [{"name": label, **_LABELS[label]} for label in pr.labels],
        "mergeCommit": {"oid": merge},
        "mergedAt": pr.merged_at,
        "number": pr.number,
        "repo": REPO,
        "reviewDecision": pr.review_decision,
        "state": "MERGED",
        "title": pr.title,
        "url": f"{REPO_URL}/pull/{pr.number}",
    }
    if pr.review_comments:
        record["reviewComments"] = list(pr.review_comments)  # extension: becomes hints_text
    return record
