"""run_artifacts picks each capability's routing example by the one env naming rule
(envs.naming.synthetic_env_name, exact match), not by a substring of the env name."""

from __future__ import annotations

from pathlib import Path

from envs.naming import capability_of, synthetic_env_name
from envs.protocol import Message, ToolCall
from evaluation.service import run_artifacts
from store import Store


def _episode(store: Store, run_id: str, env: str, task: str, *, reward: float, success: bool, said: str) -> int:
    messages = [
        Message.system("sys"),
        Message.user(f"task {task}"),
        Message.assistant(None, [ToolCall(id="c1", name="check", arguments={"said": said})]),
        Message.assistant(said),
    ]
    return store.put_episode(
        run_id, env, task, 0, policy="p", messages=messages, reward=reward, success=success, components={},
        termination="done", error=None, turns=2, timings={"total_s": 0.1},
    )


def test_the_example_is_the_best_success_of_the_capability_s_own_synthetic_env(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'g.db'}")
    try:
        run_id = store.create_run("trace", {"env": "shop"})
        for cap in ("precondition_verification", "structured_data_reasoning"):
            store.put_capability(run_id, cap, definition=f"{cap} definition")
            adapter = tmp_path / cap
            adapter.mkdir()
            (adapter / "adapter_config.json").write_text("{}")
            store.put_adapter(run_id, cap, path=str(adapter), metrics={}, status="trained", capability=cap)
        own = synthetic_env_name("precondition_verification")
        assert own == "synthetic:precondition_verification" and capability_of(own) == "precondition_verification"
        _episode(store, run_id, own, "t1", reward=0.6, success=True, said="own-ok")
        _episode(store, run_id, own, "t2", reward=0.9, success=True, said="own-best")
        _episode(store, run_id, own, "t3", reward=1.0, success=False, said="own-failed")  # a failure never counts
        # env names that merely CONTAIN the capability name: the old substring guess picked these
        _episode(store, run_id, synthetic_env_name("precondition_verification_v2"), "t4", reward=1.0, success=True, said="other-cap")
        _episode(store, run_id, "shop:precondition_verification", "t5", reward=1.0, success=True, said="target-env")

        arts = run_artifacts(store, run_id)
        by_name = {c["name"]: c for c in arts.capabilities}
        assert list(by_name) == ["precondition_verification", "structured_data_reasoning"]
        example = by_name["precondition_verification"]["example"]
        assert "own-best" in example and "other-cap" not in example and "target-env" not in example and "own-failed" not in example
        assert by_name["structured_data_reasoning"]["example"] == ""  # nothing stored under synthetic:structured_data_reasoning
        assert set(arts.adapter_paths) == {"precondition_verification", "structured_data_reasoning"}
    finally:
        store.close()
