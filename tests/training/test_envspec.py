"""EnvSpec(kind="target"): the "GRPO on the target" baseline trains on a target env's own task ids."""

from __future__ import annotations

import pytest

from gapforge.training.envs import EnvSpec, open_factory, task_split


def test_a_target_spec_needs_disjoint_task_lists() -> None:
    with pytest.raises(ValueError, match="needs target, train_tasks and heldout_tasks"):
        EnvSpec(kind="target", target="shop", train_tasks=["shop-lookup-001"]).check()
    with pytest.raises(ValueError, match="overlap"):
        EnvSpec(
            kind="target",
            target="shop",
            train_tasks=["shop-lookup-001", "shop-lookup-002"],
            heldout_tasks=["shop-lookup-002"],
        ).check()


def test_a_target_spec_opens_fresh_target_envs_and_splits_by_its_task_ids() -> None:
    spec = EnvSpec(
        kind="target",
        target="shop",
        train_tasks=["shop-lookup-001", "shop-write-001"],
        heldout_tasks=["shop-refusal-001"],
    )
    make_env, close = open_factory(spec)
    try:
        a, b = make_env(), make_env()
        assert a is not b  # one env per rollout: no state shared across a group
        first = a.reset("shop-write-001")
        assert first and first[0].role in ("system", "user")
        assert set(spec.train_tasks or []) | set(spec.heldout_tasks or []) <= set(a.task_ids())
        a.close()
        b.close()
    finally:
        close()
    # the synthetic seeds of the config are ignored: a target trains and selects on its own tasks
    assert task_split(spec, [0, 1, 2], [3]) == (["shop-lookup-001", "shop-write-001"], ["shop-refusal-001"])
