"""run_artifacts picks each capability's routing example by the one env naming rule
(envs.naming.synthetic_env_name, exact match), not by a substring of the env name."""

from __future__ import annotations

from pathlib import Path

from gapforge.envs.naming import capability_of, synthetic_env_name
from gapforge.envs.protocol import Message, ToolCall
from gapforge.evaluation.service import run_artifacts
from gapforge.store import Store


def _episode(store: Store, run_id: str, env: str, task: str, *, reward: float, success: bool, said: str) -> int:
    messages = [
        Message.system("sys"),
        Message.user(f"task {task}"),
        Message.assistant(None, [ToolCall(id="c1", name="check", arguments={"said": said})]),
        Message.assistant(said),
    ]
    return store.put_episode(
        run_id,
        env,
        task,
        0,
        policy="p",
        messages=messages,
        reward=reward,
        success=success,
        components={},
        termination="done",
        error=None,
        turns=2,
        timings={"total_s": 0.1},
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
        _episode(
            store,
            run_id,
            synthetic_env_name("precondition_verification_v2"),
            "t4",
            reward=1.0,
            success=True,
            said="other-cap",
        )
        _episode(store, run_id, "shop:precondition_verification", "t5", reward=1.0, success=True, said="target-env")

        arts = run_artifacts(store, run_id)
        by_name = {c["name"]: c for c in arts.capabilities}
        assert list(by_name) == ["precondition_verification", "structured_data_reasoning"]
        example = by_name["precondition_verification"]["example"]
        assert (
            "own-best" in example
            and "other-cap" not in example
            and "target-env" not in example
            and "own-failed" not in example
        )
        assert (
            by_name["structured_data_reasoning"]["example"] == ""
        )  # nothing stored under synthetic:structured_data_reasoning
        assert set(arts.adapter_paths) == {"precondition_verification", "structured_data_reasoning"}
    finally:
        store.close()


def test_an_adapter_stored_relative_to_another_directory_is_found_under_the_workspace(
    tmp_path: Path, monkeypatch
) -> None:
    """A run started with a relative workspace stores `.gapforge/adapters/RUN/CAP/...`; a command on it from another
    directory (given the workspace) still finds the adapter, and a finished adapter found nowhere is named, not dropped."""
    workspace = tmp_path / "ws" / ".gapforge"
    store = Store(f"sqlite:///{tmp_path / 'g.db'}")
    try:
        run_id = store.create_run("trace", {"env": "shop"})
        for cap in ("precondition_verification", "structured_data_reasoning"):
            store.put_capability(run_id, cap, definition=f"{cap} definition")
        kept = workspace / "adapters" / run_id / "precondition_verification" / "evals" / "step-000008"
        kept.mkdir(parents=True)
        (kept / "adapter_config.json").write_text("{}")
        rel = Path(".gapforge", "adapters", run_id, "precondition_verification", "evals", "step-000008")
        store.put_adapter(
            run_id,
            "precondition_verification",
            path=str(rel),
            metrics={},
            status="done",
            capability="precondition_verification",
        )
        store.put_adapter(
            run_id,
            "structured_data_reasoning",
            path=".gapforge/adapters/gone",
            metrics={},
            status="done",
            capability="structured_data_reasoning",
        )
        monkeypatch.chdir(tmp_path)  # not the directory the run was started in: `rel` does not exist from here

        blind = run_artifacts(store, run_id)
        assert blind.adapter_paths == {} and set(blind.damaged) == {
            "precondition_verification",
            "structured_data_reasoning",
        }

        found = run_artifacts(store, run_id, workspace=workspace)
        assert found.adapter_paths == {"precondition_verification": kept}
        assert [c["name"] for c in found.capabilities] == ["precondition_verification"]
        assert "not found at .gapforge/adapters/gone" in found.damaged["structured_data_reasoning"]
    finally:
        store.close()
