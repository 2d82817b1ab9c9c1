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
