"""The store's config section (`store:` in the one config tree, composed by gapforge/config.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class StoreConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    url: str | None = Field(
        None, description="SQLAlchemy URL (SQLite or PostgreSQL); None: gapforge.db in the workspace"
    )
    lease_ttl_s: float = Field(
        120.0,
        ge=1.0,
        le=3600.0,
        description="seconds without a heartbeat (sent every ttl/4) before another process may take over the run",
    )
