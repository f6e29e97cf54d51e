"""The policies an evaluation compares, built over one shared backend so the base weights are loaded once: base, TRACE
(routed), each single adapter, the comparisons' policies (evaluation/registry.py): the capability descriptions in the
system prompt (`capability_hints`, unoptimised), GEPA's optimised system prompt (`gepa`, evaluation/gepa_baseline.py,
when prepared), and GRPO directly on the target (an adapter trained by training/ on the target env with the same
rollout budget as all capability adapters together; loaded by path like any adapter).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gapforge.agents.router import RoutedPolicy, Router
from gapforge.evaluation.registry import comparison_policies
from gapforge.evaluation.summary import GRPO_TARGET


def standard_policies(
    backend: Any,  # serving.multi_adapter: `adapters` and `policy(adapter, temperature=, name=)`
    router: Router,
    capabilities: Sequence[dict[str, str]],
    *,
    temperature: float = 1.0,
    capability_adapters: Sequence[str] | None = None,
    prepared: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """{evaluation name: PolicyModel}: base, routed TRACE, each capability adapter, then every comparison's policies
    (evaluation.registry: the capability hints; GEPA's prompt when `prepared` holds it; GRPO on the target when the
    backend holds its adapter, GRPO_TARGET)."""
    adapters = [a for a in (capability_adapters or backend.adapters) if a != GRPO_TARGET]
    base = backend.policy(None, temperature=temperature, name="base")
    per_adapter = {a: backend.policy(a, temperature=temperature, name=f"adapter:{a}") for a in adapters}
    policies: dict[str, Any] = {"base": base, "trace_routed": RoutedPolicy(router, base, per_adapter)}
    policies.update({f"adapter:{a}": p for a, p in per_adapter.items()})
    policies.update(comparison_policies(base, backend, capabilities, temperature, prepared))
    return policies
