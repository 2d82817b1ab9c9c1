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
