"""TRL environments in and out: a TRL env class with its dataset rows played as a gapforge target (`trl:`), and a
run's synthetic envs exported as TRL envs (`gapforge export --trl`, rows read in the Docker sandbox): played back
through `trl:` they score what the env scores on the same seeds and actions, and TRL's own GRPOTrainer takes a step
on one with the tiny model (Qwen3's chat template, which TRL recognises)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gapforge.envs.errors import EnvError
from gapforge.envs.protocol import Message, ToolCall
from gapforge.envs.registry import make_env

EXAMPLES = Path(__file__).resolve().parents[2] / "envs" / "examples"
CAPS = ["precondition_verification", "structured_data_reasoning"]

TRL_ENV = '''
class Counter:
    def reset(self, goal: int = 1, **row) -> str:
        self.goal, self.n = goal, 0
        return f" (goal {goal})"

    def add(self, k: int) -> str:
        """Add k to the counter.

        Args:
            k: how much to add.
        """
        if k < 0:
            raise ValueError("k must be positive")
        self.n += k
        return str(self.n)

    def get_reward(self) -> float:
        return 1.0 if self.n == self.goal else 0.0
'''


def _trl_files(tmp_path: Path, rows: list[dict]) -> str:
    (tmp_path / "counter_env.py").write_text(TRL_ENV)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f"trl:{tmp_path / 'counter_env.py'}:Counter?rows={tmp_path / 'rows.jsonl'}"


def _call(name: str, **arguments) -> Message:
    return Message.assistant(tool_calls=[ToolCall(id="c1", name=name, arguments=arguments)])


def test_a_trl_env_class_with_its_rows_is_a_target(tmp_path: Path) -> None:
    rows = [
        {"prompt": [{"role": "user", "content": "Count to two"}], "goal": 2, "family": "counting"},
        {"prompt": "Count to one", "goal": 1, "task_id": "one"},
    ]
    env = make_env(_trl_files(tmp_path, rows))
    assert env.task_ids() == ["row-0", "one"] and env.task_family("row-0") == "counting"
    assert env.task_family("one") == "default"
    (schema,) = env.tools()
    assert (
        schema["function"]["name"] == "add" and schema["function"]["parameters"]["properties"]["k"]["type"] == "integer"
    )
    assert [m.content for m in env.reset("row-0")] == ["Count to two (goal 2)"]  # reset's text joins the prompt
    assert env.step(_call("add", k=1)).messages[0].content == "1"
    assert env.step(_call("add", k=-3)).messages[0].content == "Error: ValueError: k must be positive"
    assert env.score().reward == 0.0
    env.step(_call("add", k=1))
    ended = env.step(Message.assistant("done"))  # a text turn ends it, as in TRL
    assert ended.done and not ended.messages and env.score().reward == 1.0 and env.score().success
    env.reset("one")
    assert env.score().reward == 0.0  # a fresh episode


def test_a_bad_trl_spec_is_one_line(tmp_path: Path) -> None:
    spec = _trl_files(tmp_path, [{"prompt": "x"}])
    with pytest.raises(EnvError, match="give the dataset rows"):
        make_env(spec.split("?")[0])
    with pytest.raises(EnvError, match="cannot be read"):
        make_env(spec.replace("rows.jsonl", "missing.jsonl"))
    (tmp_path / "bad.jsonl").write_text('{"goal": 1}\n')
    with pytest.raises(EnvError, match="line 1 has no 'prompt'"):
        make_env(spec.replace("rows.jsonl", "bad.jsonl"))
    (tmp_path / "no_reward.py").write_text("class E:\n    def reset(self, **row):\n        return None\n")
    with pytest.raises(EnvError, match="needs reset"):
        make_env(f"trl:{tmp_path / 'no_reward.py'}:E?rows={tmp_path / 'rows.jsonl'}")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, docker_client) -> Path:
    """The two example envs of a run, exported as TRL envs; their rows read in the sandbox."""
    import functools

    from gapforge.config import load_config
    from gapforge.export_trl import export_trl_envs
    from gapforge.sandbox.env import open_env
    from gapforge.sandbox.image import build_image, image_is_current
    from gapforge.store.workspace import Workspace

    tag = "gapforge-sandbox:latest"
    if not image_is_current(docker_client, tag):
        build_image(docker_client, tag, method="local-python")
    root = tmp_path_factory.mktemp("trl")
    cfg = load_config(
        None,
        [f"workspace={root / 'ws'}", "training.train_seeds=4", f"sandbox.image={tag}", "sandbox.memory_mb=256"],
        environ={},
    )
    ws = Workspace(root / "ws")
    for cap in CAPS:
        ws.synthetic_env("r-1", cap).parent.mkdir(parents=True, exist_ok=True)
        ws.synthetic_env("r-1", cap).write_text((EXAMPLES / f"{cap}.py").read_text())
    said: list[str] = []
    done = export_trl_envs(
        None, "r-1", root / "out", cfg, CAPS, open_env=functools.partial(open_env, cfg=cfg.sandbox), say=said.append
    )
    assert done == CAPS and all("LLM-written code" in line for line in said)
    return root / "out" / "trl"


@pytest.mark.docker
@pytest.mark.parametrize("cap", CAPS)
def test_an_exported_env_played_back_scores_what_the_env_scores(exported: Path, cap: str) -> None:
    from gapforge.envs.synthetic import InProcessSyntheticEnv

    where = exported / cap
    rows = [json.loads(line) for line in (where / "dataset.jsonl").read_text().splitlines()]
    assert [r["seed"] for r in rows] == [0, 1, 2, 3] and rows[0]["prompt"][0]["role"] == "system"
    original = InProcessSyntheticEnv(EXAMPLES / f"{cap}.py")  # trusted: the project's own example
    played = make_env(f"trl:{where / 'trl_env.py'}:SyntheticEnv?rows={where / 'dataset.jsonl'}")
    names = {t["function"]["name"] for t in played.tools()}
    assert names == {t["function"]["name"] for t in original.tools()} | {"say_to_user"}
    for i, row in enumerate(rows):
        opening = original.reset(row["seed"])
        assert [m.content for m in played.reset(f"row-{i}")] == [m.content for m in opening]
        for k, action in enumerate(original.solution(row["seed"])):
            if "tool" in action:
                msg = _call(action["tool"], **action.get("arguments", {}))
            else:  # the scripted user answers through say_to_user
                original.step(Message.assistant(action["say"]))
                played.step(_call("say_to_user", text=action["say"]))
                continue
            theirs, mine = original.step(msg), played.step(msg)
            assert mine.messages[0].content == theirs.messages[0].content, (cap, row["seed"], k)
        assert played.score().reward == pytest.approx(original.score().reward), (cap, row["seed"])
        assert original.score().reward > 0.99  # the gold actions: a reward that could differ
    nothing = played.reset("row-0") and played.score().reward
    assert nothing == pytest.approx(original.reset(0) and original.score().reward)  # do-nothing, both
    played.close()


@pytest.mark.docker
@pytest.mark.slow
def test_trls_own_trainer_takes_a_grpo_step_on_an_exported_multi_turn_env(
    exported: Path, qwen3_model_dir: Path, tmp_path: Path
) -> None:
    import importlib.util
    import sys

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    where = exported / "precondition_verification"  # its scripted user answers: a multi-turn env
    spec = importlib.util.spec_from_file_location("exported_trl_env", where / "trl_env.py")
    module = importlib.util.module_from_spec(spec)
    before = {k: sys.modules.get(k) for k in ("envs", "envs.sdk")}
    spec.loader.exec_module(module)
    after = {k: sys.modules.get(k) for k in ("envs", "envs.sdk")}
    assert after == before  # the export's SDK under names of its own: what the process held is left as it was
    rows = [json.loads(line) for line in (where / "dataset.jsonl").read_text().splitlines()]
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    args = GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        max_steps=1,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=16,
        use_cpu=True,
        report_to="none",
        logging_steps=1,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(qwen3_model_dir),
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=AutoTokenizer.from_pretrained(qwen3_model_dir),
        environment_factory=module.SyntheticEnv,
    )
    assert "say_to_user" in {t.__name__ for t in trainer.tools}
    trainer.train()
    assert trainer.state.global_step == 1
    assert any("SyntheticEnv" in k for k in trainer.state.log_history[0])  # the env's own reward column
