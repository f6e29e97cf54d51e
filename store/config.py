"""The store's config section (`store:` in the one config tree, composed by gapforge/config.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class StoreConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    url: str | None = Field(None, description="SQLAlchemy URL; default: SQLite file in the workspace. Env: GAPFORGE_STORE_URL")
