"""Env classes that each break one rule of the target protocol (tests/envs/test_spec_checks.py)."""

from gapforge.protocol import Score, StepResult, tool_schema

NOT_A_CLASS = 3


class Good:
    def task_ids(self):
        return ["t1"]

    def task_family(self, task_id):
        return "f"

    def tools(self):
        return [tool_schema("noop", "Do nothing.", {})]

    def reset(self, task):
        return []

    def step(self, message):
        return StepResult(done=True)

    def score(self):
        return Score(reward=0.0, success=False)

    def close(self):
        pass


class NoStep(Good):
    step = None


class ResetWithoutTask(Good):
    def reset(self):
        return []


class NoTasks(Good):
    def task_ids(self):
        return []


class FamilyFails(Good):
    def task_family(self, task_id):
        raise KeyError(task_id)


class ToolsNotSchemas(Good):
    def tools(self):
        return [{"name": "noop"}]


class ToolsNotAList(Good):
    def tools(self):
        return {"noop": {}}


class RaisesInInit(Good):
    def __init__(self):
        raise RuntimeError("database file missing")


class TakesSplit(Good):
    def __init__(self, split="all"):
        self.split = split
