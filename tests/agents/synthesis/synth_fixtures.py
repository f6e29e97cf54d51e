"""A run with the analysis already done (as the analysis stage stores it): shop episodes,
two retained capabilities, LACKING labels on failed episodes."""

from __future__ import annotations

from pathlib import Path

from gapforge.store import LabelIn, Store
from tests.agents.synthesis.shop_gold import gold_episodes

CAPABILITIES = {
    "precondition_verification": "Before a refund or a cancellation, verify identity, ownership, status, return window "
    "and payment method; act only when every precondition holds.",
    "multi_step_task_completion": "Carry a request with several dependent changes through to the end, in order.",
}


def analysed_run(store: Store, run_id: str = "r-synth") -> str:
    """Store a run whose policy_refusal episodes failed (LACKING precondition_verification)."""
    store.create_run("trace", {"rollouts": {"env": "shop"}}, run_id=run_id, versions={})
    failing: list[int] = []
    for task_id, messages, reward in gold_episodes():
        refusal = "refusal" in task_id
        ids = store.put_episode(
            run_id,
            "shop",
            task_id,
            0,
            policy="tiny",
            messages=messages,
            reward=0.0 if refusal else reward,
            success=not refusal and reward == 1.0,
            components={},
            termination="user_stop",
            error=None,
            turns=len(messages),
            timings={},
            task_family=task_id.split("-")[1],
        )
        if refusal:
            failing.append(ids)
    for name, definition in CAPABILITIES.items():
        store.put_capability(run_id, name, definition=definition, example_episode_ids=failing[:2])
        store.set_capability_retained(run_id, name, True)
        store.put_capability_stat(run_id, name, 0, er_plus=0.1, er_minus=0.8, gap=0.7, coverage=0.5, kept=True)
        store.put_labels(
            run_id,
            0,
            [
                LabelIn(e, name, "LACKING", f"acted on episode {e} without checking the order's status")
                for e in failing[:4]
            ],
        )
    return run_id


def store_at(tmp: Path) -> Store:
    return Store(f"sqlite:///{tmp / 'gapforge.db'}")
