"""GEPA's reflection LM: the `llm` role answering prompts/gepa_reflection.md (evaluation/gepa_baseline.py runs the
optimisation through the `gepa` package with `ReflectionLM`). GEPA renders the prompt from our template (`<curr_param>`:
the current instructions, `<side_info>`: one `# Example N` per record) and takes the new instructions from the answer's
``` block. Offline (`llm.kind=scripted` without a file) the answers come from `agents/recorded/<env>_reflection.yaml`:
a recorded rule is appended when, and only when, a failed example shows the failure it is about (the recorded
analyst's rule of that name over the example's compacted episode decides).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import yaml
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage
from pydantic import BaseModel, ConfigDict

from gapforge.agents.config import LLMConfig
from gapforge.agents.errors import ModelError
from gapforge.agents.llm import chat_model_from_config, prompt_config
from gapforge.agents.scripted import ScriptedChatModel
from gapforge.faults import InputFault
from gapforge.prompts import load_prompt

PROMPT_FILE = "gepa_reflection.md"
PROMPT_NAME = "gepa_reflection"
EXAMPLE = re.compile(r"^# Example \d+\s*$", re.M)
FAILED = re.compile(r"^## Outcome\s*\n\s*FAILURE\b", re.M)


class GepaConfigError(InputFault):
    """The GEPA baseline cannot run as configured (no `gepa` package, no analysis tasks, a budget below one
    evaluation of them): one line saying what to change, exit 2."""


def reflection_template() -> tuple[str, str]:
    """The reflection prompt template (GEPA's placeholders inside) and its prompt id (name@version)."""
    prompt = load_prompt(PROMPT_FILE)
    return prompt.body, prompt.id


class ReflectionLM:
    """gepa's `LanguageModel` (prompt -> text) over a LangChain chat model, the prompt named `gepa_reflection`."""

    def __init__(self, model: BaseChatModel) -> None:
        self.model = model
        self.calls = 0

    def __call__(self, prompt: str | list[dict[str, Any]]) -> str:
        messages: Any = [HumanMessage(prompt)] if isinstance(prompt, str) else prompt
        answer = self.model.invoke(messages, config=prompt_config(PROMPT_NAME))
        self.calls += 1
        return answer.content if isinstance(answer.content, str) else str(answer.content)


def split_prompt(text: str, template: str) -> tuple[str, list[str]]:
    """(current instructions, the examples' texts) of a rendered reflection prompt, cut where the template's
    fixed text is (the instructions may hold anything, even ``` fences)."""
    head, rest = template.split("<curr_param>", 1)
    middle, tail = rest.split("<side_info>", 1)
    if not text.startswith(head) or middle not in text:
        raise ModelError(f"prompt {PROMPT_NAME}: the rendered prompt does not follow prompts/{PROMPT_FILE}")
    body = text[len(head) :]
    current, _, side = body.partition(middle)
    side = side[: len(side) - len(tail)] if tail and side.endswith(tail) else side
    return current.strip(), [e for e in EXAMPLE.split(side) if e.strip()]


def scripted_reflection(additions: Callable[[str], list[str]], *, source: str) -> ScriptedChatModel:
    """A reflection LM that appends `additions(example)` for every failed example shown (`## Outcome` FAILURE),
    each addition once and only when the current instructions lack it; unchanged instructions otherwise."""
    template, _ = reflection_template()

    def rule(messages: list[BaseMessage], tools: list[dict[str, Any]]) -> str:
        current, examples = split_prompt(str(messages[-1].content), template)
        new: list[str] = []
        for example in examples:
            if FAILED.search(example):
                new += [a for a in additions(example) if a not in current and a not in new]
        lines = [current, *(f"- {a}" for a in new)]
        return "```\n" + "\n".join(line for line in lines if line) + "\n```"

    return ScriptedChatModel.from_dict({PROMPT_NAME: {"repeat": rule}}, source=source)


class RecordedInstruction(BaseModel):
    model_config = ConfigDict(extra="forbid")

    capability: str
    rule: str  # a rule of agents.analysis.recorded.RULES
    add: str


class ReflectionRecording(BaseModel):
    model_config = ConfigDict(extra="forbid")

    env: str
    instructions: list[RecordedInstruction]


def recorded_reflection(env: str) -> ScriptedChatModel:
    """The recorded reflection LM for a built-in env (agents/recorded/<env>_reflection.yaml)."""
    from gapforge.agents.analysis.recorded import RULES, Trajectory, recording_path

    path = recording_path(env, "reflection")
    if not path.is_file():
        raise ModelError(
            f"no recorded GEPA reflection for env {env!r}: set llm.kind=openai and an llm.endpoint, "
            "or take gepa out of evaluation.comparisons"
        )
    recording = ReflectionRecording.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    unknown = sorted({i.rule for i in recording.instructions} - set(RULES))
    if unknown:
        raise ModelError(f"{path}: unknown rule(s) {', '.join(unknown)}; use one of {', '.join(sorted(RULES))}")

    def additions(example: str) -> list[str]:
        t = Trajectory(example)
        return [" ".join(i.add.split()) for i in recording.instructions if RULES[i.rule](t)[0] == "LACKING"]

    return scripted_reflection(additions, source=str(path))


def reflection_model(llm: LLMConfig, env: str) -> BaseChatModel:
    """The `llm` role as GEPA's reflection LM: the recorded one for `env` when llm.kind=scripted without a file."""
    if llm.kind == "scripted" and not llm.scripted_path:
        return recorded_reflection(env)
    return chat_model_from_config(llm)
