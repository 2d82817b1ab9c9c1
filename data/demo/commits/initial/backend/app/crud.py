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
