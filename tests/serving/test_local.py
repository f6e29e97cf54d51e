"""LocalPolicy on the tiny model: a parsed Message or a MalformedOutputError, reproducible
sampling, off-loop generation, PEFT adapters, and one-line errors for bad paths."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from gapforge.envs.errors import MalformedOutputError, PolicyError
from gapforge.envs.protocol import Message, PolicyModel, tool_schema
from gapforge.serving.errors import ServingError
from gapforge.serving.local import LocalPolicy

TOOLS = [tool_schema("get_order", "Look up an order by id.", {"order_id": {"type": "string"}})]
CONVERSATION = [Message.system("You are a shop agent."), Message.user("Where is my order #W1234567?")]


async def _outcome(policy: LocalPolicy, temperature: float | None = None) -> Message | MalformedOutputError:
    try:
        return await policy.respond(CONVERSATION, TOOLS, temperature=temperature)
    except MalformedOutputError as e:
        return e


def _key(outcome: Message | MalformedOutputError) -> object:
    if isinstance(outcome, MalformedOutputError):
        return ("malformed", outcome.raw)
    return ("message", outcome.content, [(c.name, c.arguments) for c in outcome.tool_calls])


@pytest.mark.parametrize("temperature", [0.0, 1.0])
async def test_respond_returns_a_message_or_a_malformed_output(tiny_model_dir: Path, temperature: float) -> None:
    policy = LocalPolicy(tiny_model_dir, max_new_tokens=48)
    assert isinstance(policy, PolicyModel) and policy.name == tiny_model_dir.name
    for _ in range(3):
        outcome = await _outcome(policy, temperature)
        if isinstance(outcome, MalformedOutputError):
            assert outcome.termination == "malformed_output" and str(outcome)
            assert "<tool_call>" in outcome.raw or "</tool_call>" in outcome.raw  # only a broken block is malformed
        else:
            assert outcome.role == "assistant" and outcome.tool_call_id is None
            assert outcome.content is None or (outcome.content.strip() == outcome.content and outcome.content)
            assert all(c.id.startswith("call_") and c.name for c in outcome.tool_calls)


def test_prompt_is_the_chat_template_with_tools(tiny_model_dir: Path) -> None:
    policy = LocalPolicy(tiny_model_dir)
    prompt = policy.render(CONVERSATION, TOOLS)
    assert prompt.startswith("<|im_start|>system\nYou are a shop agent.\n\n# Tools\n")
    assert '"name": "get_order"' in prompt.split("\n</tools>")[0].split("<tools>\n")[1]
    assert prompt.endswith("<|im_start|>user\nWhere is my order #W1234567?<|im_end|>\n<|im_start|>assistant\n")
    assert "<tools>" not in policy.render(CONVERSATION, [])


async def test_sampling_is_reproducible_per_seed_and_call(tiny_model_dir: Path) -> None:
    a, b = (LocalPolicy(tiny_model_dir, max_new_tokens=32, seed=7) for _ in range(2))
    c = LocalPolicy(tiny_model_dir, max_new_tokens=32, seed=8)
    torch.manual_seed(123)
    global_state = torch.random.get_rng_state()
    run_a = [_key(await _outcome(a, 1.0)) for _ in range(3)]
    assert torch.equal(torch.random.get_rng_state(), global_state)  # the global RNG is untouched
    run_b = [_key(await _outcome(b, 1.0)) for _ in range(3)]
    run_c = [_key(await _outcome(c, 1.0)) for _ in range(3)]
    assert run_a == run_b
    assert run_a != run_c  # another seed samples differently
    assert len(set(map(str, run_a))) > 1  # successive calls draw fresh samples (GRPO groups need that)
    greedy = [_key(await _outcome(c, 0.0)) for _ in range(2)]
    assert greedy[0] == greedy[1]


async def test_generation_runs_off_the_event_loop_and_is_serialised(tiny_model_dir: Path) -> None:
    policy = LocalPolicy(tiny_model_dir, max_new_tokens=64, temperature=1.0)
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0.005)  # sleep(0) would spin on the GIL and starve the generation thread

    tick_task = asyncio.create_task(ticker())
    outcomes = await asyncio.gather(*(_outcome(policy) for _ in range(3)))
    stop.set()
    await tick_task
    assert len(outcomes) == 3 and all(isinstance(o, (Message, MalformedOutputError)) for o in outcomes)
    assert ticks >= 5  # the loop kept running while the model generated


async def test_prompt_longer_than_the_context_is_a_policy_error(tiny_model_dir: Path) -> None:
    policy = LocalPolicy(tiny_model_dir, max_new_tokens=8190)
    with pytest.raises(PolicyError, match="exceeds the model context of 8192"):
        await policy.respond(CONVERSATION, TOOLS)


def _make_adapter(tiny_model_dir: Path, out: Path) -> Path:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    # init_lora_weights=False: non-zero B, so the adapter really changes the outputs
    config = LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False, task_type="CAUSAL_LM"
    )
    get_peft_model(base, config).save_pretrained(out)
    return out


def _logits(policy: LocalPolicy) -> torch.Tensor:
    ids = policy.tokenizer(policy.render(CONVERSATION, TOOLS), add_special_tokens=False, return_tensors="pt")
    with torch.inference_mode():
        return policy.model(**ids).logits[0, -1]


async def test_peft_adapter_is_loaded_and_changes_the_model(tiny_model_dir: Path, tmp_path: Path) -> None:
    from peft import PeftModel

    adapter = _make_adapter(tiny_model_dir, tmp_path / "precondition_verification")
    base = LocalPolicy(tiny_model_dir, max_new_tokens=16)
    adapted = LocalPolicy(tiny_model_dir, adapter_path=adapter, max_new_tokens=16)
    assert isinstance(adapted.model, PeftModel)
    assert adapted.name == f"{tiny_model_dir.name}+precondition_verification"
    assert not torch.allclose(_logits(base), _logits(adapted))
    assert isinstance(await _outcome(adapted, 0.0), (Message, MalformedOutputError))


def test_bad_paths_are_one_line_serving_errors(tiny_model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ServingError, match="no config.json"):
        LocalPolicy(tmp_path / "missing")
    (tmp_path / "not_adapter").mkdir()
    with pytest.raises(ServingError, match="no adapter_config.json"):
        LocalPolicy(tiny_model_dir, adapter_path=tmp_path / "not_adapter")
    with pytest.raises(ServingError, match="temperature"):
        LocalPolicy(tiny_model_dir, temperature=-1)


def test_serving_renders_the_prompt_training_rendered(tiny_model_dir: Path) -> None:
    """Adapters are trained on training.tokens.render's prompt and the base policy collects rollouts with
    LocalPolicy's: the multi-adapter backend (evaluation, the routed endpoint) must show the same text; an
    extra template kwarg (e.g. enable_thinking=False's empty think block) made a taught model babble."""
    from gapforge.serving.multi_adapter import MultiAdapterModel
    from gapforge.training.tokens import render

    trained = render(LocalPolicy(tiny_model_dir).tokenizer, CONVERSATION, TOOLS, generation_prompt=True)
    assert LocalPolicy(tiny_model_dir).render(CONVERSATION, TOOLS) == trained
    served = MultiAdapterModel(tiny_model_dir).render(CONVERSATION, TOOLS)
    assert served == trained and "<think>" not in served
