"""The consolidation control (bench/consolidation.py): the mixed env sends each task to one env as that env's own seed,
shows one tool list (the union), scales the budget so each env gets its adapter's seeds, and a tiny model trains one
adapter on two envs mixed through the trainer's own env spec."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote

import pytest

from bench.consolidation import MixedEnv, consolidated_config, mixed_spec, union_tools
from gapforge.envs.protocol import Message, tool_schema
from gapforge.training.config import TrainingConfig
from gapforge.training.envs import EnvSpec, open_factory

ROOT = Path(__file__).resolve().parents[2]


class _Env:
    def __init__(self, name: str, tools: list[str]) -> None:
        self.name, self.names, self.seed, self.closed = name, tools, None, False

    def tools(self) -> list[dict]:
        return [tool_schema(n, f"{n} tool", {"key": {"type": "string"}}) for n in self.names]

    def reset(self, task: int) -> list[Message]:
        self.seed = task
        return [Message.system(self.name), Message.user(f"{self.name} seed {task}")]

    def close(self) -> None:
        self.closed = True


def test_task_t_goes_to_env_t_mod_n_as_its_seed_t_div_n_and_tools_are_the_union() -> None:
    made: list[_Env] = []

    def maker(name: str, tools: list[str]):
        def make() -> _Env:
            made.append(_Env(name, tools))
            return made[-1]

        return make

    tools = union_tools([_Env("a", ["lookup", "cancel"]).tools(), _Env("b", ["lookup", "return"]).tools()])
    assert [t["function"]["name"] for t in tools] == ["lookup", "cancel", "return"]
    env = MixedEnv([maker("a", ["lookup", "cancel"]), maker("b", ["lookup", "return"])], tools)
    assert env.reset(0)[1].content == "a seed 0"
    assert env.reset(5)[1].content == "b seed 2" and made[0].closed  # a reset closes the env it replaces
    assert env.reset(6)[1].content == "a seed 3"
    env.close()
    assert made[-1].closed and [t["function"]["name"] for t in env.tools()] == ["lookup", "cancel", "return"]


def test_the_budget_gives_each_env_the_seeds_and_rollouts_its_own_adapter_had() -> None:
    one = TrainingConfig.tiny(max_steps=16, groups_per_step=2, num_generations=8, train_seeds=32, heldout_seeds=16)
    both = consolidated_config(one, 2)
    assert both.max_steps * both.rollouts_per_step == 2 * one.max_steps * one.rollouts_per_step
    per_env = {k: sorted(t // 2 for t in both.train_seed_list() if t % 2 == k) for k in (0, 1)}
    assert per_env[0] == per_env[1] == one.train_seed_list()
    held = {k: sorted(t // 2 for t in both.heldout_seed_list() if t % 2 == k) for k in (0, 1)}
    assert held[0] == held[1] == one.heldout_seed_list()


def _toy_specs() -> list[EnvSpec]:
    return [
        EnvSpec(kind="python", factory="tests.training.toy_env:ToyDeskEnv"),
        EnvSpec(kind="python", factory="tests.training.toy_env:ToyDeskEnv?crash_at=99"),
    ]


def test_the_trainers_env_spec_opens_the_mix() -> None:
    spec = mixed_spec(_toy_specs())
    assert spec.kind == "python" and json.loads(unquote(spec.factory.split("specs=", 1)[1]))[1]["factory"].endswith(
        "crash_at=99"
    )
    make, close = open_factory(spec)
    try:
        env = make()
        assert [t["function"]["name"] for t in env.tools()] == ["lookup"]
        assert env.reset(7)[1].content == "Hi, ticket 3."  # env 1, seed 3
        env.close()
    finally:
        close()


@pytest.mark.slow
def test_a_tiny_model_trains_one_adapter_on_two_envs_mixed(tmp_path: Path, tiny_model_dir: Path) -> None:
    from gapforge.training.service import TrainJob, train_capability

    one = TrainingConfig.tiny(
        max_steps=1,
        groups_per_step=1,
        num_generations=2,
        max_turns=2,
        max_new_tokens=8,
        max_completion_length=128,
        train_seeds=2,
        heldout_seeds=1,
        heldout_samples=1,
        eval_every=1,
        save_every=1,
        patience=10,
    )
    cfg = consolidated_config(one, 2)
    res = train_capability(
        TrainJob(
            name="consolidated",
            capability="consolidated",
            base_model=str(tiny_model_dir),
            config=cfg,
            out_dir=str(tmp_path / "c"),
            env=mixed_spec(_toy_specs()),
        )
    )
    assert res.steps == 2 and Path(res.adapter_path).is_dir()
    steps = [
        json.loads(line) for line in (tmp_path / "c" / "steps.jsonl").read_text().splitlines() if line.startswith("{")
    ]
    assert [s["step"] for s in steps if s.get("event") == "step"] == [1, 2]


def test_a_wrong_demo_is_one_line_before_any_training_and_creates_no_store(tmp_path: Path) -> None:
    from bench.consolidation_eval import demo_store
    from gapforge.store.db import Store

    inner = tmp_path / "ws" / ".gapforge"  # the workspace's .gapforge/ given in place of the workspace
    inner.mkdir(parents=True)
    with Store(f"sqlite:///{inner / 'gapforge.db'}") as store:
        store.create_run("trace", {}, run_id="r-1")
    with pytest.raises(SystemExit, match=r"no store at .*\.gapforge/\.gapforge/gapforge\.db: give WORKSPACE:RUN"):
        demo_store(f"{inner}:r-1")
    assert not (inner / ".gapforge").exists()  # nothing created where the store was looked for
    with pytest.raises(SystemExit, match="unknown run 'r-2'"):
        demo_store(f"{tmp_path / 'ws'}:r-2")
    assert demo_store(f"{tmp_path / 'ws'}:r-1") == (inner / "gapforge.db", "r-1")
