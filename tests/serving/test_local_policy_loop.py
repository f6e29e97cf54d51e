"""The tiny model driven through agents.policy.run_episode against a small environment.

With random weights, whatever the model emits, the episode is recorded with a reason.
To exercise both outcomes deterministically, the tiny model is also taught (a few
dozen full fine-tuning steps, greedy decoding) to emit one valid tool call for one
request and one broken tool call for another.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from envs.protocol import Environment, Message, Score, StepResult, TaskRef, tool_schema
from serving.local import LocalPolicy

agents_policy = pytest.importorskip("agents.policy")


class OrderDesk:
    """One order lookup tool; the user asks once; success = the right order was looked up."""

    name = "order_desk"

    def __init__(self) -> None:
        self.looked_up: list[str] = []
        self.steps = 0

    def tools(self) -> list[dict[str, Any]]:
        return [tool_schema("get_order", "Look up an order by id.", {"order_id": {"type": "string"}})]

    def reset(self, task: TaskRef) -> list[Message]:
        self.looked_up, self.steps = [], 0
        return [Message.system("You are a shop agent. Use the tools."), Message.user(f"Where is my order #W{task}?")]

    def step(self, message: Message) -> StepResult:
        self.steps += 1
        replies = []
        for call in message.tool_calls:
            if call.name == "get_order":
                self.looked_up.append(str(call.arguments.get("order_id")))
                replies.append(Message.tool(call.id, json.dumps({"status": "shipped"}), name=call.name))
            else:
                replies.append(Message.tool(call.id, json.dumps({"error": f"unknown tool {call.name}"}), name=call.name))
        if not message.tool_calls:
            replies.append(Message.user("Thanks, bye."))
        return StepResult(messages=replies, done=not message.tool_calls)

    def score(self) -> Score:
        hit = any(order.lstrip("#W") == "1234567" for order in self.looked_up)
        return Score(reward=1.0 if hit else 0.0, success=hit, components={"lookup": float(hit)})

    def close(self) -> None:
        pass


@pytest.mark.parametrize("seed", [0, 1, 2])
async def test_tiny_model_episode_is_recorded_with_a_reason(tiny_model_dir: Path, seed: int) -> None:
    env = OrderDesk()
    assert isinstance(env, Environment)
    policy = LocalPolicy(tiny_model_dir, max_new_tokens=24, seed=seed)
    episode = await agents_policy.run_episode(policy, env, 1234567, max_turns=3, temperature=1.0)

    assert (episode.env, episode.task, episode.policy) == ("order_desk", 1234567, policy.name)
    assert [m.role for m in episode.messages[:2]] == ["system", "user"]
    assert episode.timings["policy_s"] > 0 and episode.timings["total_s"] >= episode.timings["policy_s"]
    assistant = [m for m in episode.messages if m.role == "assistant"]
    if episode.termination == "malformed_output":
        # the raw completion is kept as the last assistant message, with the parse error as the reason
        assert episode.error and assistant and episode.messages[-1].role == "assistant"
        raw = episode.messages[-1].content or ""
        assert "<tool_call>" in raw or "</tool_call>" in raw
        assert episode.turns == len(assistant) - 1
    else:
        assert episode.termination in ("done", "max_turns") and episode.error is None
        assert episode.turns == len(assistant) >= 1
        # every parsed tool call was answered by the environment with its id
        answered = {m.tool_call_id for m in episode.messages if m.role == "tool"}
        assert {c.id for c in episode.tool_calls} == answered
        assert (episode.termination == "done") == (not assistant[-1].tool_calls)
    assert episode.success == (episode.reward == 1.0) == ("1234567" in [o.lstrip("#W") for o in env.looked_up])


GOOD_REQUEST, BROKEN_REQUEST = 1234567, 7654321
TEACH = {
    GOOD_REQUEST: '<tool_call>\n{"name": "get_order", "arguments": {"order_id": "#W1234567"}}\n</tool_call><|im_end|>',
    BROKEN_REQUEST: '<tool_call>\n{"name": "get_order", "arguments": {"order_id": </tool_call><|im_end|>',
}


@pytest.fixture(scope="module")
def taught_model_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model fine-tuned until greedy decoding reproduces TEACH[task] after the task's prompt."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    renderer, env = LocalPolicy(tiny_model_dir), OrderDesk()
    tok = renderer.tokenizer
    rows = []
    for task, completion in TEACH.items():
        prompt = tok(renderer.render(env.reset(task), env.tools()), add_special_tokens=False)["input_ids"]
        rows.append((prompt, tok(completion, add_special_tokens=False)["input_ids"]))
    width = max(len(p) + len(c) for p, c in rows)
    ids = torch.full((len(rows), width), tok.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (p, c) in enumerate(rows):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        labels[i, len(p) : len(p) + len(c)] = torch.tensor(c)
        mask[i, : len(p) + len(c)] = 1

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(300):
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        targets = labels[:, 1:]
        predicted = out.logits[:, :-1].argmax(-1)
        if bool(((predicted == targets) | (targets == -100)).all()):
            break
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
    else:
        pytest.fail("the tiny model did not learn the taught completions in 300 steps")
    path = tmp_path_factory.mktemp("taught-model")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


async def test_a_tool_call_the_model_emits_is_parsed_and_executed(taught_model_dir: Path) -> None:
    env = OrderDesk()
    policy = LocalPolicy(taught_model_dir, temperature=0.0, max_new_tokens=40)
    episode = await agents_policy.run_episode(policy, env, GOOD_REQUEST, max_turns=1)

    assert (episode.termination, episode.turns, episode.error) == ("max_turns", 1, None)
    (call,) = episode.tool_calls
    assert (call.name, call.arguments) == ("get_order", {"order_id": "#W1234567"})
    assert episode.messages[2].role == "assistant" and episode.messages[2].content is None
    assert episode.messages[3].role == "tool" and episode.messages[3].tool_call_id == call.id
    assert env.looked_up == ["#W1234567"]
    assert (episode.reward, episode.success, episode.components) == (1.0, True, {"lookup": 1.0})


async def test_a_broken_tool_call_ends_the_episode_as_malformed_output(taught_model_dir: Path) -> None:
    env = OrderDesk()
    policy = LocalPolicy(taught_model_dir, temperature=0.0, max_new_tokens=40)
    episode = await agents_policy.run_episode(policy, env, BROKEN_REQUEST, max_turns=3)

    assert (episode.termination, episode.turns) == ("malformed_output", 0)
    assert "not valid JSON" in (episode.error or "")
    assert episode.messages[-1].role == "assistant"
    assert episode.messages[-1].content == TEACH[BROKEN_REQUEST].removesuffix("<|im_end|>")  # the raw text, kept for analysis
    assert (episode.reward, episode.success, env.steps) == (0.0, False, 0)
