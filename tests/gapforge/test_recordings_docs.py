"""docs/recordings.md is generated from the models that validate each LLM role's answer, and every example it shows
loads through the real loader of its file into an answer that the role's model (with its checks) accepts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from langchain_core.messages import HumanMessage

from gapforge.agents.analysis.schemas import discovery_schema, label_schema
from gapforge.agents.llm import structured_call
from gapforge.agents.policy import ChatModelPolicy
from gapforge.agents.prompt_opt import ReflectionLM
from gapforge.agents.scripted import ScriptedAnswer, ScriptedChatModel
from gapforge.agents.synthesis.generator import GeneratedEnv
from gapforge.agents.synthesis.recorded import recorded_synthesis_model
from gapforge.agents.synthesis.reviewer import ReviewVerdict
from gapforge.recordings_reference import REGENERATE, file_text, render, schema_rows
from gapforge.recordings_roles import ROLES

DOC = Path(__file__).resolve().parents[2] / "docs" / "recordings.md"
BY_PROMPT = {r.prompt: r for r in ROLES}


def _loaded(role_prompt: str) -> dict:
    """The role's example file as the page shows it, parsed back."""
    return yaml.safe_load(file_text(BY_PROMPT[role_prompt].file_example))


def test_docs_recordings_md_is_the_generated_reference() -> None:
    assert DOC.is_file(), f"docs/recordings.md is missing: run `{REGENERATE}`"
    assert DOC.read_text() == render(), f"docs/recordings.md is stale: run `{REGENERATE}`"


def test_every_role_with_a_recorded_form_is_listed_with_its_fields() -> None:
    assert set(BY_PROMPT) == {
        "policy",
        "analyst_discover",
        "analyst_label",
        "gepa_reflection",
        "synthesis_generator",
        "synthesis_reviewer",
    }
    text = render()
    for role in ROLES:
        for path, *_ in schema_rows(role.schema.model_json_schema()) if role.schema else []:
            assert f"| `{path}` |" in text
    assert '| `labels[].label` | "NA" \\| "PRESENT" \\| "LACKING" | yes |' in text


def test_the_analyst_examples_pass_through_a_structured_call_and_the_checks() -> None:
    model = ScriptedChatModel.from_dict(_loaded("analyst_discover") | _loaded("analyst_label"))
    found = structured_call(
        model, [HumanMessage("x")], discovery_schema(frozenset({3}), 1, 8), prompt_name="analyst_discover"
    )
    assert found.model_dump() == BY_PROMPT["analyst_discover"].example
    labels = structured_call(model, [HumanMessage("x")], label_schema(("invoice_lookup",)), prompt_name="analyst_label")
    assert labels.model_dump() == BY_PROMPT["analyst_label"].example


def test_the_synthesis_examples_load_from_a_recordings_file(tmp_path: Path) -> None:
    recordings = tmp_path / "synthesis.yaml"
    recordings.write_text(yaml.safe_dump(_loaded("synthesis_generator") | _loaded("synthesis_reviewer")))
    code = tmp_path / BY_PROMPT["synthesis_generator"].example["code_file"]
    code.parent.mkdir(parents=True)
    code.write_text("# the module\n")
    model = recorded_synthesis_model(recordings)
    prompt = [HumanMessage("Capability: invoice_lookup\nAttempt: 2 of 3")]
    env = structured_call(model, prompt, GeneratedEnv, prompt_name="synthesis_generator")
    assert env.code == "# the module\n" and env.notes == BY_PROMPT["synthesis_generator"].example["notes"]
    verdict = structured_call(model, prompt, ReviewVerdict, prompt_name="synthesis_reviewer")
    assert verdict.accepted and verdict.model_dump() == BY_PROMPT["synthesis_reviewer"].example


def test_the_policy_and_reflection_examples_answer(tmp_path: Path) -> None:
    ScriptedAnswer.model_validate(BY_PROMPT["policy"].example)
    path = tmp_path / "policy.yaml"
    path.write_text(file_text(BY_PROMPT["policy"].file_example))
    assert ChatModelPolicy(ScriptedChatModel.from_file(path), name="p").chat_model.answers_prompt("policy")
    reflection = ReflectionLM(ScriptedChatModel.from_dict(_loaded("gepa_reflection")))
    assert reflection("the prompt") == BY_PROMPT["gepa_reflection"].example


@pytest.mark.parametrize("role", [r for r in ROLES if r.schema is not None], ids=lambda r: r.prompt)
def test_each_example_validates_against_its_model(role) -> None:
    example = dict(role.example)
    if "code_file" in example:  # the recordings loader reads the file into `code`
        example["code"] = example.pop("code_file")
    role.schema.model_validate(example)
