"""A user's own help-desk env outside gapforge's package: loaded as `tests/data/your_env/desk_env.py:DeskEnv`
or, with this folder on the import path, as `desk_env:DeskEnv`. `split=dev` keeps one task."""

from desk_tasks import DEV, TASKS

from gapforge.protocol import Message, Score, StepResult, tool_schema


class DeskEnv:
    inline = True

    def __init__(self, split: str = "all") -> None:
        if split not in ("all", "dev"):
            raise ValueError(f"unknown split {split!r}")
        self.split = split

    def task_ids(self) -> list[str]:
        return list(DEV) if self.split == "dev" else list(TASKS)

    def task_family(self, task_id: str) -> str:
        return TASKS[task_id][0]

    def tools(self) -> list[dict]:
        return [
            tool_schema("reset_password", "Reset an account's password.", {"account": {"type": "string"}}),
            tool_schema("unlock_account", "Unlock an account.", {"account": {"type": "string"}}),
        ]

    def reset(self, task: str) -> list[Message]:
        self.family, request, self.account = TASKS[task]
        self.done_calls: list[tuple[str, str]] = []
        return [Message.system("You are the help desk. Act only on the account the user names."), Message.user(request)]

    def step(self, message: Message) -> StepResult:
        if not message.tool_calls:
            return StepResult(messages=[Message.user("ok, thanks")], done=True)
        out = []
        for call in message.tool_calls:
            self.done_calls.append((call.name, str(call.arguments.get("account"))))
            out.append(Message.tool(call.id, "done", name=call.name))
        return StepResult(messages=out)

    def score(self) -> Score:
        want = ("reset_password" if self.family == "password_reset" else "unlock_account", self.account)
        ok = self.done_calls == [want]
        return Score(reward=float(ok), success=ok, components={"db": float(ok)})

    def close(self) -> None:
        pass
