"""Real chat templates of the families gapforge trains (Qwen3, Qwen3-Instruct-2507, Qwen2.5, Llama 3.1 / 3.2), as TRL
ships them: the family's training template is chosen (Qwen3's stock one rewrites history and is replaced), multi-turn
rollouts with tool calls, tool results, user turns and <think> blocks give masks that decode to exactly the env's and
the model's text, and the prompt the served policy renders at every turn is the context training sampled from."""

from __future__ import annotations

import pytest

from gapforge.envs.protocol import Message, ToolCall
from gapforge.serving.chat_format import chat_format, qwen3_training_template, stock_template, use_chat_format
from gapforge.serving.errors import ServingError
from gapforge.serving.local import render_prompt
from gapforge.training.rollout import run_group
from gapforge.training.template_check import prepare_tokenizer
from gapforge.training.tokens import TemplateDriftError, check_prefix_preserving
from tests.training.families import family_tokenizer
from tests.training.test_tokens import ScriptedSampler
from tests.training.toy_env import ToyDeskEnv

TOOLS = ToyDeskEnv().tools()
QWEN3_TURNS = [
    '<think>\nThe size is in the lookup table.\n</think>\n\nLet me check.\n<tool_call>\n{"name": "lookup", "arguments": {"key": "size"}}\n</tool_call>',
    "<think>\nThe customer has to choose.\n</think>\n\nWhich size do you need?",
    "Done, I booked a medium.",  # a turn without reasoning
]
HERMES_TURNS = [
    'Let me check.\n<tool_call>\n{"name": "lookup", "arguments": {"key": "size"}}\n</tool_call>',
    "Which size do you need?",
    "Done, I booked a medium.",
]
LLAMA_TURNS = [
    '{"name": "lookup", "parameters": {"key": "size"}}',
    "Which size do you need?",
    "Done, I booked a medium.",
]
IM_ENV = (
    "\n<|im_start|>user\n<tool_response>\nvalue of size\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
    "\n<|im_start|>user\nWhich size?<|im_end|>\n<|im_start|>assistant\n",
)
LLAMA_ENV = (  # Llama 3.1's template JSON-encodes tool results
    '<|start_header_id|>ipython<|end_header_id|>\n\n"value of size"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n',
    "<|start_header_id|>user<|end_header_id|>\n\nWhich size?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
)
FAMILIES = {  # TRL's template -> (family, template source, the model's turns, the env's turns as the template writes them)
    "qwen3": ("qwen3", "gapforge:qwen3_training.jinja", QWEN3_TURNS, IM_ENV),
    "qwen3_instruct_2507": ("qwen3-instruct-2507", "stock", HERMES_TURNS, IM_ENV),
    "qwen2_5": ("qwen2.5", "stock", HERMES_TURNS, IM_ENV),
    "llama3_1": ("llama3.1", "stock", LLAMA_TURNS, LLAMA_ENV),
    "llama3_2": ("llama3.2", "stock", LLAMA_TURNS, LLAMA_ENV),
}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request):
    return request.param, family_tokenizer(request.param)


def test_qwen3s_stock_template_rewrites_history_and_is_refused_as_it_stands():
    tok = family_tokenizer("qwen3")
    with pytest.raises(TemplateDriftError, match="not prefix-preserving"):
        check_prefix_preserving(tok, TOOLS)


def test_each_family_gets_a_prefix_preserving_template_that_it_trains_and_serves_with(family):
    stem, tok = family
    name, source, _, _ = FAMILIES[stem]
    fmt = prepare_tokenizer(tok, TOOLS)
    assert (fmt.family, fmt.source) == (name, source) and tok.chat_template == fmt.template
    assert fmt.tool_format == ("llama3_json" if stem.startswith("llama") else "hermes")
    assert bool(fmt.dropped) == (stem == "qwen3")  # only a swapped template throws something away
    assert chat_format(tok) == fmt  # installed: choosing again keeps it


def test_rollout_masks_decode_to_exactly_the_models_and_the_envs_text(family):
    stem, tok = family
    _, _, turns, env_text = FAMILIES[stem]
    prepare_tokenizer(tok, TOOLS)
    sampler = ScriptedSampler(tok, turns)
    (r,) = run_group(
        ToyDeskEnv,
        3,
        1,
        sampler=sampler,
        tokenizer=tok,
        max_turns=6,
        max_new_tokens=96,
        max_completion_length=4096,
        temperature=1.0,
        env_timeout_s=10,
    )
    assert r.failure is None and r.turns == 3
    spans = r.traj.spans()
    assert [m for m, _ in spans] == [1, 0, 1, 0, 1]
    assert [ids for m, ids in spans if m] == sampler.sampled  # the loss sees the sampled ids
    assert [tok.decode(ids, skip_special_tokens=True) for m, ids in spans if m] == turns
    assert tuple(tok.decode(ids) for m, ids in spans if not m) == env_text
    said = [m for m in r.messages if m.role == "assistant"]
    assert (
        said[0].tool_calls
        and said[0].tool_calls[0].name == "lookup"
        and said[0].tool_calls[0].arguments == {"key": "size"}
    )
    if stem == "qwen3":
        assert [m.reasoning for m in said] == ["The size is in the lookup table.", "The customer has to choose.", None]


def test_the_prompt_served_at_every_turn_is_the_context_training_sampled_from(family):
    """One rendering function: what serving.local.render_prompt gives the served / evaluated policy before each of its
    turns is, token stream decoded, exactly what the rollout conditioned on -- reasoning of past turns included."""
    stem, tok = family
    _, _, turns, _ = FAMILIES[stem]
    prepare_tokenizer(tok, TOOLS)
    (r,) = run_group(
        ToyDeskEnv,
        3,
        1,
        sampler=ScriptedSampler(tok, turns),
        tokenizer=tok,
        max_turns=6,
        max_new_tokens=96,
        max_completion_length=4096,
        temperature=1.0,
        env_timeout_s=10,
    )
    starts = [i for i, m in enumerate(r.traj.env_mask) if m and (i == 0 or not r.traj.env_mask[i - 1])]
    at = [i for i, m in enumerate(r.messages) if m.role == "assistant"]
    for start, k in zip(starts, at, strict=True):
        assert render_prompt(tok, r.messages[:k], TOOLS) == tok.decode(
            r.traj.prompt_ids + r.traj.completion_ids[:start]
        )
    full = render_prompt(tok, r.messages, TOOLS, generation_prompt=False)
    stream = tok.decode(r.traj.prompt_ids + r.traj.completion_ids)
    assert full.startswith(stream) and not full[len(stream) :].strip()  # (what follows the last eos is never sampled)


def _qwen3(template: str, messages: list[Message], tools=TOOLS) -> str:
    tok = family_tokenizer("qwen3")
    tok.chat_template = template
    return render_prompt(tok, messages, tools)


CALL = [ToolCall(id="c1", name="lookup", arguments={"key": "size"})]


@pytest.mark.parametrize("tools", [TOOLS, []], ids=["tools", "no-tools"])
def test_qwen3_training_template_is_the_stock_text_wherever_the_stock_one_is_stable(tools):
    stock, ours = stock_template("qwen3"), qwen3_training_template()
    system, user = Message.system("You help at a desk."), Message.user("Hi, ticket 3.")
    stable = [
        [system, user],
        [system, user, Message.assistant("Let me check.", CALL), Message.tool("c1", "value of size", name="lookup")],
        [
            system,
            user,
            Message.assistant(None, CALL),
            Message.tool("c1", "a"),
            Message.tool("c1", "b"),
            Message.assistant("Which?"),
            Message.user("Medium."),
        ],
        [
            user,
            Message(role="assistant", content="Let me check.", tool_calls=CALL, reasoning="Look it up."),
            Message.tool("c1", "x"),
        ],
    ]
    for convo in stable:
        assert _qwen3(ours, convo, tools) == _qwen3(stock, convo, tools)
    # what differs: reasoning before the last user message is kept (the stock template drops it)
    earlier = [
        system,
        user,
        Message(role="assistant", content="Which size?", reasoning="Ask first."),
        Message.user("Medium."),
    ]
    kept, dropped = _qwen3(ours, earlier, tools), _qwen3(stock, earlier, tools)
    assert kept.replace("<think>\nAsk first.\n</think>\n\n", "") == dropped and kept != dropped


@pytest.mark.parametrize(
    "stem, reason", [("llama3", "drops assistant tool calls"), ("qwen3_6", "no parser"), ("qwen3_5_think", "no parser")]
)
def test_families_gapforge_cannot_train_are_refused_with_the_reason(stem, reason):
    tok = family_tokenizer(stem)
    with pytest.raises(ServingError, match=reason):
        use_chat_format(tok)


def test_an_unknown_drifting_template_is_refused_naming_the_fix(tiny_tokenizer):
    tok = tiny_tokenizer.__class__.from_pretrained(tiny_tokenizer.name_or_path)
    tok.chat_template = (
        tiny_tokenizer.chat_template.replace(  # drops reasoning of earlier turns, as Qwen3's stock one does
            "{{- '<|im_start|>assistant\\n' + (message.content or '') -}}",
            "{%- set c = message.content or '' -%}{%- if not loop.last and '</think>' in c -%}"
            "{%- set c = c.split('</think>')[-1].lstrip() -%}{%- endif -%}{{- '<|im_start|>assistant\\n' + c -}}",
        )
    )
    with pytest.raises(
        TemplateDriftError, match=r"unknown template \(stock\): .*fix: save a prefix-preserving template"
    ):
        prepare_tokenizer(tok, TOOLS)


@pytest.mark.slow
def test_a_model_shipped_with_qwen3s_stock_template_trains_end_to_end(tmp_path, qwen3_model_dir):
    """Through the training service, as a run calls it: the stock Qwen3 template no longer stops GRPO at its first turn."""
    from gapforge.training.config import TrainingConfig
    from gapforge.training.envs import EnvSpec
    from gapforge.training.service import TrainJob, train_capability

    cfg = TrainingConfig.tiny(
        max_steps=2,
        groups_per_step=1,
        num_generations=2,
        max_turns=3,
        max_new_tokens=8,
        max_completion_length=256,
        train_seeds=2,
        heldout_seeds=1,
        heldout_samples=1,
        eval_every=2,
        save_every=2,
    )
    job = TrainJob(
        name="qwen3",
        capability=None,
        base_model=str(qwen3_model_dir),
        config=cfg,
        out_dir=str(tmp_path / "qwen3"),
        env=EnvSpec(kind="python", factory="tests.training.toy_env:ToyDeskEnv"),
    )
    result = train_capability(job)
    assert result.status == "done" and result.steps == 2
    saved = (tmp_path / "qwen3" / "trl" / "checkpoint-2" / "chat_template.jinja").read_text()
    assert saved == qwen3_training_template()  # the checkpoint carries the template it was trained with
