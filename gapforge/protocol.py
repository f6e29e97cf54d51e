"""The environment protocol for your own agent, under gapforge's own name.

    from gapforge.protocol import Message, StepResult, Score, tool_schema

A target env is any class with `tools()`, `reset(task_id)`, `step(message)`, `score()`, `close()`, `task_ids()` and
`task_family(task_id)` (docs/your-agent.md; `gapforge rollouts collect --env path/to/file.py:ClassName`). These are the
very classes of `envs.protocol`, re-exported so a project with a package of its own named `envs` can import them without
a clash. Nothing inside gapforge imports this module.
"""

from gapforge.envs.protocol import Environment, Message, Score, StepResult, TargetEnvironment, ToolCall, tool_schema

__all__ = ["Environment", "Message", "Score", "StepResult", "TargetEnvironment", "ToolCall", "tool_schema"]
