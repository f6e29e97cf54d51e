"""A user's env for the time-limit and fault tests, loaded as `tests/data/faulty_env.py:FaultyEnv`.

Each task's id says what its episode does: `ok-*` tasks end after the agent's first reply; `hang-step` blocks
in `step` on an Event nobody sets (a call that never returns); `raise-reset`, `raise-step` and `raise-score`
raise in that method. It declares `inline = True`, as a careless user's env might: gapforge still runs it on
a thread, where a time limit can fire.
"""

import threading

from gapforge.protocol import Message, Score, StepResult, tool_schema

NEVER = threading.Event()  # never set: `hang-step` waits on it forever
TASKS = ["ok-1", "ok-2", "ok-3", "hang-step", "raise-reset", "raise-step", "raise-score"]


class FaultyEnv:
    inline = True  # not honoured for a class outside gapforge's packages

    def task_ids(self) -> list[str]:
        return list(TASKS)

    def task_family(self, task_id: str) -> str:
        return task_id.split("-")[0]

    def tools(self) -> list[dict]:
        return [tool_schema("noop", "Does nothing.", {})]

    def reset(self, task: str) -> list[Message]:
        if task == "raise-reset":
            raise KeyError("the ticket database has no row for raise-reset")
        self.task = task
        return [Message.system("Answer the user."), Message.user(f"Please handle {task}.")]

    def step(self, message: Message) -> StepResult:
        if self.task == "hang-step":
            NEVER.wait()
        if self.task == "raise-step":
            raise RuntimeError("the backend refused the request")
        return StepResult(messages=[Message.user("Thanks.")], done=True)

    def score(self) -> Score:
        if self.task == "raise-score":
            raise ValueError("no score for raise-score")
        return Score(reward=1.0, success=True, components={"answered": 1.0})

    def close(self) -> None:
        pass
