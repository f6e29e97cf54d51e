"""A small test environment (envs.protocol.Environment): open the locker with the right code.

Tools: `read_code()` tells the code, `open_locker(code)` ends the episode when the
code is right, `explode()` raises inside step (an env bug, for the env_error path).
Unknown tools get an error tool message (a tool error is an observation).
Reward by state: 1.0 opened, 0.5 code read but not opened, 0.0 otherwise.
"""

from __future__ import annotations

from typing import Any

from gapforge.envs.errors import EnvError
from gapforge.envs.protocol import Message, Score, StepResult, TaskRef, tool_schema

TASKS = {"easy": 1234, "hard": 9876}


class LockerEnv:
    name = "toy-locker"

    def __init__(self, *, fail_score: bool = False) -> None:
        self.fail_score = fail_score
        self.code = 0
        self.read = False
        self.opened = False
        self.wrong_attempts = 0
        self.steps = 0

    def tools(self) -> list[dict[str, Any]]:
        return [
            tool_schema("read_code", "Read the locker code from the note.", {}),
            tool_schema("open_locker", "Try a code on the locker.", {"code": {"type": "integer"}}),
            tool_schema("explode", "Do not call this.", {}),
        ]

    def reset(self, task: TaskRef) -> list[Message]:
        if isinstance(task, int):
            self.code = 1000 + task
        elif task in TASKS:
            self.code = TASKS[task]
        else:
            raise EnvError(f"unknown locker task '{task}': use one of {sorted(TASKS)} or an integer seed")
        self.read = self.opened = False
        self.wrong_attempts = self.steps = 0
        return [Message.system("You open lockers with the tools."), Message.user("Please open my locker.")]

    def step(self, message: Message) -> StepResult:
        self.steps += 1
        if not message.tool_calls:
            return StepResult(messages=[Message.user("Please use the tools.")])
        out = []
        for call in message.tool_calls:
            if call.name == "explode":
                raise RuntimeError("the locker room caught fire")
            if call.name == "read_code":
                self.read = True
                out.append(Message.tool(call.id, f"The note says: {self.code}", name=call.name))
            elif call.name == "open_locker":
                if call.arguments.get("code") == self.code:
                    self.opened = True
                    out.append(Message.tool(call.id, "The locker is open.", name=call.name))
                else:
                    self.wrong_attempts += 1
                    out.append(Message.tool(call.id, "Error: wrong code.", name=call.name))
            else:
                out.append(Message.tool(call.id, f"Error: unknown tool '{call.name}'.", name=call.name))
        return StepResult(messages=out, done=self.opened, info={"steps": self.steps})

    def score(self) -> Score:
        if self.fail_score:
            raise ValueError("score table missing")
        reward = 1.0 if self.opened else (0.5 if self.read else 0.0)
        return Score(
            reward=reward,
            success=self.opened,
            components={"read": float(self.read), "opened": float(self.opened)},
            info={"wrong_attempts": self.wrong_attempts},
        )

    def close(self) -> None:
        pass
