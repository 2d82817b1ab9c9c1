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
