"""The `tau2:` config section: which τ² task set the adapter loads (composed by gapforge/config.py)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Tau2Config(BaseModel):
    """τ²-bench data (docs/gpu.md, "τ² task set")."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    data_dir: Path | None = Field(
        None,
        description="a τ² data directory (<dir>/tau2/domains/<domain>/tasks.json), e.g. a τ²-bench checkout's data/; "
        "None: the data packaged with tau2",
    )

    @field_validator("data_dir")
    @classmethod
    def _has_taus_layout(cls, value: Path | None) -> Path | None:
        if value is not None and not (value / "tau2" / "domains").is_dir():
            raise ValueError(
                f"{value} is not a τ² data directory: expected {value}/tau2/domains/<domain>/tasks.json "
                "(point it at the data/ folder of a τ²-bench checkout)"
            )
        return value.resolve() if value is not None else None
