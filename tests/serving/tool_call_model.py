"""A tiny model TAUGHT (a few dozen full fine-tuning steps, greedy decoding) to emit one
valid tool call for one request and one broken tool call for another, and the small
env it was taught on. Shared by the policy-loop tests and the routed-endpoint tests
(fixture `taught_model_dir` in tests/serving/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gapforge.envs.protocol import Message, Score, StepResult, TaskRef, tool_schema
from gapforge.serving.local import LocalPolicy


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
                replies.append(
                    Message.tool(call.id, json.dumps({"error": f"unknown tool {call.name}"}), name=call.name)
                )
        if not message.tool_calls:
            replies.append(Message.user("Thanks, bye."))
        return StepResult(messages=replies, done=not message.tool_calls)

    def score(self) -> Score:
        hit = any(order.lstrip("#W") == "1234567" for order in self.looked_up)
        return Score(reward=1.0 if hit else 0.0, success=hit, components={"lookup": float(hit)})

    def close(self) -> None:
        pass


GOOD_REQUEST, BROKEN_REQUEST = 1234567, 7654321
TEACH = {
    GOOD_REQUEST: '<tool_call>\n{"name": "get_order", "arguments": {"order_id": "#W1234567"}}\n</tool_call><|im_end|>',
    BROKEN_REQUEST: '<tool_call>\n{"name": "get_order", "arguments": {"order_id": </tool_call><|im_end|>',
}


def teach_tool_calls(tiny_model_dir: Path, path: Path) -> Path:
    """The tiny model fine-tuned (saved to `path`) until greedy decoding reproduces TEACH[task] after the task's prompt
    rendered by LocalPolicy (the model's chat template, no template kwargs)."""
    import torch
    from transformers import AutoModelForCausalLM

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
        raise AssertionError("the tiny model did not learn the taught completions in 300 steps")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path
