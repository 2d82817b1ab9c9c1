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


def test_read_item_not_found(client: TestClient) -> None:
    r = client.get(f"{API}/999999")
    assert r.status_code == 404
    assert r.json() == {"detail": "Item not found"}
