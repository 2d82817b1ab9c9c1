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
