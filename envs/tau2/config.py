"""The `tau2:` config section: which τ² task set the adapter loads (composed by gapforge/config.py)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Tau2Config(BaseModel):
    """τ²-bench data. Env: TAU2_DATA_DIR (τ²-bench's own variable) sets `data_dir`."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    data_dir: Path | None = Field(
        None,
        description="a τ² task-set directory in τ²'s own layout (<dir>/tau2/domains/<domain>/tasks.json, split_tasks.json, "
        "db, policy; <dir>/tau2/user_simulator/), e.g. the data/ folder of a τ²-bench 1.0.x checkout; "
        "None: the data packaged with the installed tau2",
    )

    @field_validator("data_dir")
    @classmethod
    def _has_taus_layout(cls, value: Path | None) -> Path | None:
        if value is not None and not (value / "tau2" / "domains").is_dir():
            raise ValueError(f"{value} is not a τ² data directory: expected {value}/tau2/domains/<domain>/tasks.json "
                             "(point it at the data/ folder of a τ²-bench checkout)")
        return value.resolve() if value is not None else None
