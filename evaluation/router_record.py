"""The router's data, stored with the run when the router is built, so every later user of the run (`gapforge
evaluate`, `gapforge serve`, a resumed graph run) routes with exactly the router that was measured, without opening a
synthetic env again.

The record lives in the store (an `evaluations` row named `router`, policy `router`, beside the `router_accuracy` row
measured on it): the store is the run's record of what was evaluated, it moves with the run (SQLite file or
PostgreSQL), and reading it starts no sandbox container.

    record = router_record(artifacts, backend="transformers")
    record = router_record(artifacts, backend="gate", openings={...}, seeds=[...], gate=GateRecord(...))  # router.gate
    save_router(store, run_id, record)
    record = load_router(store, run_id)          # None: a run stored before routers were recorded
    record.matches(artifacts)                    # the same capabilities and adapters, in the same order
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from gapforge.agents.router import GateRecord

if TYPE_CHECKING:
    from gapforge.store import Store

ROUTER_ROW = "router"


class RoutedCapability(BaseModel):
    """One router option as built: label order = list order."""

    model_config = ConfigDict(extra="forbid")

    name: str
    definition: str
    example: str
    adapter: str


class RouterRecord(BaseModel):
    """What a router is made of besides the base weights and `routing:` settings."""

    model_config = ConfigDict(extra="forbid")

    backend: str  # routing.backend when it was built (gate | transformers | vllm)
    capabilities: list[RoutedCapability]
    openings: dict[str, list[str]] | None = None  # gate: each capability's synthetic-env openings (training examples)
    seeds: list[int] = []  # the synthetic-env seeds the openings came from (the adapters' training seeds)
    gate: GateRecord | None = None  # routing.backend=gate

    def matches(self, artifacts: Any) -> bool:
        """True when the run's trained capabilities (names and adapters, in order) are the ones this router was built over."""
        mine = [(c.name, c.adapter) for c in self.capabilities]
        return mine == [(c["name"], c["adapter"]) for c in artifacts.capabilities]

    def options(self) -> list[dict[str, str]]:
        """The capabilities in the shape `evaluation.service.RunArtifacts.capabilities` has."""
        return [c.model_dump() for c in self.capabilities]


def router_record(
    artifacts: Any,
    *,
    backend: str,
    openings: dict[str, list[str]] | None = None,
    seeds: list[int] | None = None,
    gate: GateRecord | None = None,
) -> RouterRecord:
    caps = [
        RoutedCapability(**{k: c[k] for k in ("name", "definition", "example", "adapter")})
        for c in artifacts.capabilities
    ]
    return RouterRecord(backend=backend, capabilities=caps, openings=openings, seeds=list(seeds or []), gate=gate)


def save_router(store: Store, run_id: str, record: RouterRecord) -> None:
    store.put_evaluation(run_id, ROUTER_ROW, policy="router", metrics=record.model_dump(mode="json"))


def load_router(store: Store, run_id: str) -> RouterRecord | None:
    """The stored router of the run, or None (none stored, or stored in a shape this version does not read)."""
    row = store.get_evaluation(run_id, ROUTER_ROW)
    if row is None:
        return None
    try:
        return RouterRecord.model_validate(row.metrics)
    except ValueError:
        return None
