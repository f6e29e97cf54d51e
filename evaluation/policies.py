"""The policies an evaluation compares, built over one shared backend so the base
weights are loaded once: base, TRACE (routed), each single adapter, the
capability-descriptions-in-the-system-prompt policy (`capability_hints`, unoptimised), GEPA's optimised
system prompt (`gepa`, evaluation/gepa_baseline.py, when the run stores one), and GRPO directly on the
target (an adapter trained by training/ on the target env with the same rollout
budget as all capability adapters together; loaded by path like any adapter).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from gapforge.agents.routed_policy import HintedPolicy, RoutedPolicy
from gapforge.agents.router import Router
from gapforge.envs.protocol import PolicyModel

GRPO_TARGET = "baseline_grpo_target"
CAPABILITY_HINTS = "capability_hints"  # the base with the capability descriptions appended, unoptimised
RENAMED = {"baseline_hints": CAPABILITY_HINTS}  # evaluation names stored by earlier versions -> today's


def current_name(name: str) -> str:
    """A stored evaluation name (bare or `eval:`-prefixed) as this version calls it."""
    prefix = "eval:" if name.startswith("eval:") else ""
    bare = name.removeprefix("eval:")
    return prefix + RENAMED.get(bare, bare)


class AdapterBackend(Protocol):
    @property
    def adapters(self) -> list[str]: ...

    def policy(self, adapter: str | None, *, temperature: float = 1.0, name: str | None = None) -> PolicyModel: ...


def baseline_labels(store: Any, run_id: str) -> dict[str, str]:
    """Report labels of the baselines whose evaluation names alone do not say what they are."""
    from gapforge.evaluation.gepa_baseline import GEPA, gepa_label, load_gepa

    return {
        CAPABILITY_HINTS: "capability hints (descriptions appended, unoptimised)",
        GEPA: gepa_label(load_gepa(store, run_id)),
    }


def standard_policies(
    backend: AdapterBackend,
    router: Router,
    capabilities: Sequence[dict[str, str]],
    *,
    temperature: float = 1.0,
    capability_adapters: Sequence[str] | None = None,
    grpo_target_adapter: str | None = None,
    gepa: Any = None,
) -> dict[str, Any]:
    """{evaluation name: PolicyModel}. `grpo_target_adapter`: the backend's name for the GRPO-on-target
    baseline adapter (None: that baseline is left out and the report says so). `gepa`: the run's stored
    `evaluation.gepa_baseline.GepaRecord` (the base under GEPA's optimised system prompt, evaluated as `gepa`)."""
    adapters = [a for a in (capability_adapters or backend.adapters) if a != grpo_target_adapter]
    base = backend.policy(None, temperature=temperature, name="base")
    per_adapter = {a: backend.policy(a, temperature=temperature, name=f"adapter:{a}") for a in adapters}
    policies: dict[str, Any] = {"base": base, "trace_routed": RoutedPolicy(router, base, per_adapter)}
    policies.update({f"adapter:{a}": p for a, p in per_adapter.items()})
    policies[CAPABILITY_HINTS] = HintedPolicy(base, list(capabilities), name=CAPABILITY_HINTS)
    if gepa is not None:
        from gapforge.evaluation.gepa_baseline import GEPA, gepa_policy

        policies[GEPA] = gepa_policy(base, gepa)
    if grpo_target_adapter is not None:
        policies[GRPO_TARGET] = backend.policy(grpo_target_adapter, temperature=temperature, name=GRPO_TARGET)
    return policies
