"""The LLM code review of a generated env (check `llm_review`): a structured verdict on
whether success depends on the capability, whether the tools match the target, and whether
the reward can be gamed -- with concrete fixes for the generator."""

from __future__ import annotations

import json
from typing import Literal

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, ConfigDict, Field

from gapforge.agents.analysis.usage import UsageCounter
from gapforge.agents.synthesis.context import GeneratorContext
from gapforge.agents.synthesis.generator import counted_call
from gapforge.prompts import Prompt, load_prompt
from gapforge.sandbox.checks.report import CheckResult

PROMPT_FILE = "synthesis_reviewer.md"


class ReviewVerdict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    capability_focus: bool = Field(description="success depends mainly on exercising the capability")
    tools_match: bool = Field(description="tools sharing a name with the target keep its schema and result format")
    reward_gameable: bool = Field(description="a policy could collect high reward without the capability")
    verdict: Literal["accept", "revise"]
    problems: list[str] = Field(default_factory=list)
    fixes: list[str] = Field(default_factory=list)

    @property
    def accepted(self) -> bool:
        return self.verdict == "accept" and self.capability_focus and self.tools_match and not self.reward_gameable


def reviewer_prompt() -> Prompt:
    return load_prompt(PROMPT_FILE)


def review_env(
    model: BaseChatModel, ctx: GeneratorContext, code: str, attempt: int, usage: UsageCounter | None = None
) -> ReviewVerdict:
    text = reviewer_prompt().body.format(
        capability=ctx.capability,
        attempt=attempt,
        definition=ctx.definition,
        target=ctx.target.name,
        target_policy=ctx.target.policy.strip(),
        target_tools=json.dumps(ctx.target.tools, indent=1),
        result_formats=ctx.result_formats_text(),
        code=code,
    )
    answer = counted_call(model, text, ReviewVerdict, reviewer_prompt().name, usage)
    assert isinstance(answer, ReviewVerdict)
    return answer


def review_check(verdict: ReviewVerdict) -> CheckResult:
    """The review as a required self-test check."""
    flags = [
        name
        for name, bad in (
            ("success does not depend mainly on the capability", not verdict.capability_focus),
            ("tools do not match the target", not verdict.tools_match),
            ("the reward can be gamed", verdict.reward_gameable),
        )
        if bad
    ]
    fields = ("verdict", "problems", "fixes", "capability_focus", "tools_match", "reward_gameable")
    evidence = {k: getattr(verdict, k) for k in fields} | {"prompt": reviewer_prompt().id}
    if verdict.accepted:
        return CheckResult.ok("llm_review", "the reviewer accepts the module", **evidence)
    why = "; ".join(flags + verdict.problems[:3]) or f"verdict {verdict.verdict}"
    return CheckResult.fail("llm_review", f"the reviewer asks for a revision: {why}", **evidence)
