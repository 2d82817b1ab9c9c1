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
