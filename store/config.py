"""The store's config section (`store:` in the one config tree, composed by gapforge/config.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class StoreConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    url: str | None = Field(None, description="SQLAlchemy URL; default: SQLite file in the workspace. Env: GAPFORGE_STORE_URL")
    lease_ttl_s: float = Field(120.0, ge=1.0, le=3600.0, description="a run's lease is taken over after this long without a "
                               "heartbeat (renewed every ttl/4); a holder that finds it taken over stops")
    lock_timeout_s: float = Field(30.0, gt=0.0, le=3600.0, description="PostgreSQL: how long taking over a run's lease waits "
                                  "for a lease row that a stopped or hung holder's write still locks, then names that process "
                                  "to stop (SQLite waits its busy timeout, 30 s)")
