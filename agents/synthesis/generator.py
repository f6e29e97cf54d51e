"""The generator agent: one call (prompts/synthesis_generator.md) writes one synthetic env module for a capability, from
its statistics, compacted LACKING episodes (analysis split only), the target's tool schemas, result formats and policy,
the SDK reference, one example module (labelled with its target) and the previous attempt's verdict.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage
from pydantic import BaseModel, ConfigDict, Field

from gapforge.agents.analysis.compact import ByteEstimate
from gapforge.agents.analysis.usage import UsageCounter
from gapforge.agents.llm import structured_call
from gapforge.agents.synthesis.context import GeneratorContext
from gapforge.prompts import Prompt, load_prompt

PROMPT_FILE = "synthesis_generator.md"
EXAMPLE = Path(__file__).resolve().parents[2] / "envs" / "examples" / "precondition_verification.py"


class GeneratedEnv(BaseModel):
    """The generator's answer."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(description="the complete Python module")
    notes: str = Field("", description="a short note on the design")


def generator_prompt() -> Prompt:
    return load_prompt(PROMPT_FILE)


def signature(tool: dict) -> str:
    """`name(param: type, ...)`: a compact line for a target tool whose full schema is not shown."""
    fn = tool["function"]
    props = (fn.get("parameters") or {}).get("properties") or {}
    params = ", ".join(f"{k}: {v.get('type', 'any')}" for k, v in props.items())
    return f"- {fn['name']}({params}): {(fn.get('description') or '').splitlines()[0][:120] if fn.get('description') else ''}"


def example_target(example: Path) -> str:
    """The target an example module was written for (its `target = "..."` line)."""
    found = re.search(r'^\s*target\s*=\s*["\']([^"\']+)["\']', example.read_text(), re.MULTILINE)
    return found.group(1) if found else "another target"


def render_generator_prompt(
    ctx: GeneratorContext, attempt: int, max_attempts: int, feedback: str | None, example: Path = EXAMPLE
) -> str:
    episodes = "\n\n".join(f"### episode {e.episode_id} (task {e.task_id})\n{e.text}" for e in ctx.episodes) or "(none)"
    return generator_prompt().body.format(
        capability=ctx.capability,
        attempt=attempt,
        max_attempts=max_attempts,
        definition=ctx.definition,
        statistics=ctx.statistics(),
        target=ctx.target.name,
        episodes=episodes,
        result_formats=ctx.result_formats_text(),
        target_tools=json.dumps(ctx.tools_in_episodes, indent=1),
        target_policy=ctx.target.policy.strip(),
        other_tools="\n".join(signature(t) for t in ctx.target.tools if t not in ctx.tools_in_episodes) or "(none)",
        sdk_reference=load_prompt("sdk_reference.md").body.strip(),
        example_module=example.read_text().strip(),
        example_target=example_target(example),
        feedback=feedback or "(first attempt)",
    )


def generate_env(
    model: BaseChatModel,
    ctx: GeneratorContext,
    attempt: int,
    max_attempts: int,
    feedback: str | None,
    usage: UsageCounter | None = None,
) -> GeneratedEnv:
    """Ask the generator for a module (structured output, re-asked once if malformed). `usage` counts its calls and
    tokens: the endpoint's reported usage, else the analyst's estimate (UTF-8 bytes / 4: compact.ByteEstimate)."""
    text = render_generator_prompt(ctx, attempt, max_attempts, feedback)
    answer = counted_call(model, text, GeneratedEnv, generator_prompt().name, usage)
    assert isinstance(answer, GeneratedEnv)
    return answer


def counted_call(
    model: BaseChatModel, text: str, schema: type[BaseModel], prompt_name: str, usage: UsageCounter | None
) -> BaseModel:
    """structured_call with its calls and tokens added to `usage`: the endpoint's reported usage, else the analyst's
    estimate, UTF-8 bytes / 4 (compact.ByteEstimate: recorded answers report none)."""
    usage = usage if usage is not None else UsageCounter()
    before = usage.prompt_tokens
    config: Any = {"callbacks": [usage]}
    answer = structured_call(model, [HumanMessage(content=text)], schema, prompt_name=prompt_name, config=config)
    if usage.prompt_tokens == before:
        estimate = ByteEstimate()
        usage.prompt_tokens += estimate.count(text)
        usage.completion_tokens += estimate.count(answer.model_dump_json())
    return answer
