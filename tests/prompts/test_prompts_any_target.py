"""Every agent-role prompt, rendered by its own code path for a help-desk target, names that
target (its name, policy document and tools) and carries no shop / customer-service wording.
The recorded roles of the offline demo still read what they parse from the new prompts."""

from __future__ import annotations

import asyncio
import re
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage

from gapforge.agents.analysis.config import AnalysisConfig
from gapforge.agents.analysis.discovery import discover
from gapforge.agents.analysis.labeling import label_pass
from gapforge.agents.analysis.split import split_tasks
from gapforge.agents.analysis.target import _registered_tools, target_brief
from gapforge.agents.prompt_opt import reflection_template
from gapforge.agents.prompted_policy import hints_text
from gapforge.agents.router import LabelScorer, Router, make_options
from gapforge.agents.scripted import ScriptedChatModel
from gapforge.agents.synthesis.context import gather_context
from gapforge.agents.synthesis.generator import render_generator_prompt
from gapforge.agents.synthesis.recorded import _key
from gapforge.agents.synthesis.reviewer import review_env
from gapforge.prompts import load_prompt
from gapforge.store import Store
from tests.prompts.helpdesk import POLICY, TASKS, TOOL_NAMES, HelpdeskTarget, episode, store_run

SHOP_WORDS = re.compile(
    r"\b(orders?|shops?|customers?|refunds?|cancel\w*|shipping|e-?commerce|retail|purchases?)\b", re.I
)
CAPS = [
    ("hold_check", "Before unlocking an account the agent reads its lock reason and escalates a security hold."),
    ("identity_check", "The agent confirms the employee's badge digits before changing an account."),
    ("ticket_reporting", "The agent tells the employee the number of the ticket it opened."),
    ("vpn_triage", "The agent asks which client version and network the employee uses before advising."),
]
EXAMPLE = re.compile(
    r"## An example module.*?```python.*?```", re.S
)  # the SDK example: another target's code, labelled so


class Capture:
    """Scripted answers that keep every prompt they were asked."""

    def __init__(self) -> None:
        self.seen: dict[str, list[str]] = {}

    def keep(self, name: str, messages: list[BaseMessage]) -> str:
        text = "\n".join(str(m.content) for m in messages)
        self.seen.setdefault(name, []).append(text)
        return text

    def discover(self, messages: list[BaseMessage], tools: list[dict[str, Any]]) -> dict[str, Any]:
        ids = [int(i) for i in re.findall(r"^### episode (\d+)$", self.keep("analyst_discover", messages), re.M)]
        return {
            "structured": {
                "capabilities": [{"name": n, "definition": d, "example_episode_ids": ids[:1]} for n, d in CAPS]
            }
        }

    def label(self, messages: list[BaseMessage], tools: list[dict[str, Any]]) -> dict[str, Any]:
        text = self.keep("analyst_label", messages)
        failed = "outcome: FAILURE" in text
        return {
            "structured": {
                "labels": [
                    {
                        "capability": n,
                        "label": "LACKING" if failed and n == "hold_check" else "NA",
                        "evidence": "[6] unlocked a held account",
                        "message_index": 6 if failed and n == "hold_check" else None,
                    }
                    for n, _ in CAPS
                ]
            }
        }

    def review(self, messages: list[BaseMessage], tools: list[dict[str, Any]]) -> dict[str, Any]:
        self.keep("synthesis_reviewer", messages)
        return {
            "structured": {"capability_focus": True, "tools_match": True, "reward_gameable": False, "verdict": "accept"}
        }


class LetterScorer(LabelScorer):
    def label_token_ids(self, label: str) -> list[int]:
        return [ord(label)]


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """`make_env("helpdesk")` builds the help desk, as the registry builds a user's target from its spec."""
    import gapforge.agents.synthesis.context  # noqa: F401 (loads the submodule that the name below reaches)
    import gapforge.envs.registry  # noqa: F401 (loads the submodule that the name below reaches)
    from gapforge import agents, envs

    real = envs.registry.make_env
    fake = lambda name, **kw: HelpdeskTarget() if name == "helpdesk" else real(name, **kw)  # noqa: E731
    monkeypatch.setattr(envs.registry, "make_env", fake)
    monkeypatch.setattr(agents.synthesis.context, "make_env", fake)
    _registered_tools.cache_clear()
    yield
    _registered_tools.cache_clear()


@pytest.fixture
def rendered(tmp_path: Path, registered: None) -> dict[str, str]:
    """Each prompt's name -> its text, rendered by the code that renders it in a run."""
    capture = Capture()
    model = ScriptedChatModel.from_dict(
        {"analyst_discover": capture.discover, "analyst_label": capture.label, "synthesis_reviewer": capture.review}
    )
    cfg = AnalysisConfig(passes=1, bootstrap=0, concurrency=2, discovery_failed=4, discovery_success=2)
    with Store(f"sqlite:///{tmp_path / 'g.db'}") as store:
        run = store_run(store)
        discover(store, model, run, cfg=cfg)
        asyncio.run(label_pass(store, model, run, 0, cfg=cfg))
        ctx = gather_context(store, run, "hold_check", n_episodes=2, episode_chars=2000)
        review_env(model, ctx, "class Env: ...", 1)
        out = {name: texts[0] for name, texts in capture.seen.items()}
        out["synthesis_generator"] = render_generator_prompt(ctx, 1, 3, None)
    router = Router(
        make_options([{"name": n, "definition": d} for n, d in CAPS], list("ABCDE")),
        LetterScorer(),  # type: ignore[arg-type]
        target="helpdesk",
        policy=POLICY,
    )
    out["router"] = str(router.messages("My laptop login says my account is locked.")[0]["content"])
    out["capability_hints"] = hints_text([{"name": n, "definition": d} for n, d in CAPS])[0]
    template, _ = (
        reflection_template()
    )  # gepa fills its placeholders: the current instructions, the examples as markdown
    out["gepa_reflection"] = template.replace("<curr_param>", out["capability_hints"]).replace(
        "<side_info>",
        "# Example 1\n## Outcome\nFAILURE\n## Episode\n[1] user: My laptop login says my account is locked.\n",
    )
    out["structured_reask"] = load_prompt("structured_reask.md").body.format(
        error="field 'labels' missing", schema="EpisodeLabels"
    )
    out["sdk_reference"] = load_prompt("sdk_reference.md").body
    return out


def test_every_role_prompt_is_rendered_here() -> None:
    """A new prompt is added to this test (user simulators belong to their env and speak its domain)."""
    files = {
        f.name.removesuffix(".md")
        for f in resources.files("gapforge.prompts").iterdir()
        if f.name.endswith(".md") and f.name != "README.md"
    }
    covered = {
        "analyst_discover",
        "analyst_label",
        "synthesis_generator",
        "synthesis_reviewer",
        "router",
        "capability_hints",
        "structured_reask",
        "sdk_reference",
        "gepa_reflection",
    }
    assert {f for f in files if not f.endswith("_user_simulator")} == covered


def test_prompts_name_the_targets_domain_and_no_shop(rendered: dict[str, str]) -> None:
    assert len(rendered) == 9
    for name, text in rendered.items():
        outside_example = EXAMPLE.sub("", text)
        assert not SHOP_WORDS.findall(outside_example), (name, sorted(set(SHOP_WORDS.findall(outside_example))))
    for name in ("analyst_discover", "analyst_label", "synthesis_generator", "synthesis_reviewer"):
        text = rendered[name]
        assert POLICY in text, name  # the target's policy document, whole
        assert "helpdesk" in text, name
        assert all(t in text for t in TOOL_NAMES), (name, [t for t in TOOL_NAMES if t not in text])
    assert "helpdesk" in rendered["router"] and POLICY.splitlines()[0] in rendered["router"]
    assert "My laptop login says my account is locked." in rendered["router"]


def test_generator_gets_schemas_result_formats_and_only_analysis_split_episodes(rendered: dict[str, str]) -> None:
    text = rendered["synthesis_generator"]
    assert '"badge_last4"' in text  # the target's schema, from the env's tools
    assert re.search(r"- get_account: \{.*\"lock_reason\"", text)  # one stored result per tool: its format
    assert "written for the target `shop`" in text and "not its domain" in text  # the example module says whose it is
    shown = set(re.findall(r"\(task (hd-[\w-]+)\)", text))
    split = split_tasks({t: family for t, (family, _) in TASKS.items()}, 0.5, 0)
    assert shown and shown <= set(split.analysis)


def test_recorded_synthesis_roles_still_find_capability_and_attempt(rendered: dict[str, str]) -> None:
    assert _key([HumanMessage(rendered["synthesis_generator"])]) == ("hold_check", 1)
    assert _key([HumanMessage(rendered["synthesis_reviewer"])]) == ("hold_check", 1)


def test_long_policies_are_cut_at_a_line_in_the_router() -> None:
    policy = "\n".join(f"Rule {i}: " + "x" * 50 for i in range(40))
    router = Router(
        make_options([{"name": "a", "definition": "d"}], list("AB")), LetterScorer(), target="t", policy=policy
    )  # type: ignore[arg-type]
    text = str(router.messages("hi")[0]["content"])
    assert "Rule 0:" in text and "Rule 39:" not in text
    assert "(not given)" in str(Router(make_options([], list("AB")), LetterScorer()).messages("hi")[0]["content"])  # type: ignore[arg-type]


def test_an_unregistered_target_is_named_by_the_tools_its_episodes_call() -> None:
    _registered_tools.cache_clear()
    brief = target_brief("my-desk", [type("E", (), {"messages": episode("hd-lock-001", False)})()])
    assert brief.name == "my-desk" and brief.tool_names == ("verify_identity", "get_account", "unlock_account")
