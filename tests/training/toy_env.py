"""A small protocol env for trainer tests: a tool, a simulated user, an optional crash.

reset(seed) -> [system, user]; a tool call gets a tool result; the first text turn
gets a user reply ("Which size?") and the second text turn ends the episode.
Reward = share of assistant text characters that are letters a-m (varies between
samples of a random model, so GRPO groups carry signal). `crash_at` makes step
number N raise (an env bug inside a rollout) for odd seeds; `lose_sandbox` raises
sandbox.errors.SandboxLost there instead (the sandbox killed from outside for good).
`GatedToyDeskEnv` stops for good at its first reset once a file exists, so a test kills a job at a known point.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from gapforge.envs.protocol import Message, Score, StepResult, TaskRef, tool_schema


class ToyDeskEnv:
    name = "toy-desk"

    def __init__(self, crash_at: int | None = None, lose_sandbox: bool = False) -> None:
        self.crash_at, self.lose_sandbox = crash_at, lose_sandbox
        self.seed = 0
        self.steps = 0
        self.texts = 0
        self.said: list[str] = []
        self.closed = False

    def tools(self) -> list[dict[str, Any]]:
        return [tool_schema("lookup", "Look a key up.", {"key": {"type": "string"}})]

    def reset(self, task: TaskRef) -> list[Message]:
        self.seed, self.steps, self.texts, self.said = int(task), 0, 0, []
        return [Message.system("You help at a desk."), Message.user(f"Hi, ticket {self.seed}.")]

    def step(self, message: Message) -> StepResult:
        self.steps += 1
        if self.crash_at is not None and self.steps >= self.crash_at and self.seed % 2 == 1:
            if self.lose_sandbox:
                from gapforge.sandbox.errors import SandboxLost

                raise SandboxLost("killed", "container killed from outside", method="step")
            raise RuntimeError("toy env bug: step exploded")
        if message.tool_calls:
            return StepResult(
                messages=[
                    Message.tool(c.id, f"value of {c.arguments.get('key')}", name=c.name) for c in message.tool_calls
                ]
            )
        self.said.append(message.content or "")
        self.texts += 1
        if self.texts >= 2:
            return StepResult(done=True)
        return StepResult(messages=[Message.user("Which size?")])

    def score(self) -> Score:
        text = "".join(self.said)
        share = sum(1 for ch in text if "a" <= ch <= "m") / len(text) if text else 0.0
        return Score(reward=share, success=share > 0.5)

    def close(self) -> None:
        self.closed = True


class GatedToyDeskEnv(ToyDeskEnv):
    """ToyDeskEnv that, once the file named by the env var TOY_GATE exists, writes `<TOY_GATE>.reached` at its next
    reset and blocks there for good: a test waits for that file and kills the job at a known point (the tiny job's
    last steps take ~0.2 s, less than a test's polling could be sure to catch). Without TOY_GATE it is ToyDeskEnv."""

    def reset(self, task: TaskRef) -> list[Message]:
        gate = os.environ.get("TOY_GATE")
        if gate and Path(gate).is_file():
            Path(gate + ".reached").write_text("")
            threading.Event().wait()  # until the test kills the process
        return super().reset(task)
