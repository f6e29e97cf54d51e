"""Exact tokens: masks, sampled ids, prefix-preserving templates."""

from __future__ import annotations

import pytest

from gapforge.envs.protocol import Message, ToolCall
from gapforge.training.rollout import run_group
from gapforge.training.sampler import Sample
from gapforge.training.tokens import TemplateDriftError, check_prefix_preserving, encode, render
from tests.training.toy_env import ToyDeskEnv

MODEL_TURNS = [
    '<tool_call>\n{"name": "lookup", "arguments": {"key": "size"}}\n</tool_call>',
    "Sure, which size do you need?",
    "Done, I booked a medium.",
]


class ScriptedSampler:
    """Answers each turn with the next scripted text (as token ids + eos) and fake logprobs."""

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.texts, self.turn = tokenizer, list(texts), 0
        self.sampled: list[list[int]] = []

    def sample(self, contexts, *, max_new_tokens, temperature):
        out = []
        for _ in contexts:
            ids = encode(self.tokenizer, self.texts[self.turn]) + [self.tokenizer.eos_token_id]
            lps = [-0.1 * (i + 1) for i in range(len(ids))]
            self.sampled.append(ids)
            out.append(Sample(ids, lps, True))
        self.turn += 1
        return out


def _play(tokenizer, sampler, make_env=ToyDeskEnv, k=1, malformed="end"):
    return run_group(
        make_env,
        3,
        k,
        sampler=sampler,
        tokenizer=tokenizer,
        max_turns=6,
        max_new_tokens=64,
        max_completion_length=4096,
        temperature=1.0,
        env_timeout_s=10,
        malformed=malformed,
    )


def test_masked_spans_are_exactly_the_env_text_and_unmasked_exactly_the_model(tiny_tokenizer):
    sampler = ScriptedSampler(tiny_tokenizer, MODEL_TURNS)
    (r,) = _play(tiny_tokenizer, sampler)
    assert r.failure is None and r.turns == 3
    spans = r.traj.spans()
    assert [m for m, _ in spans] == [1, 0, 1, 0, 1]
    model_spans = [ids for m, ids in spans if m == 1]
    assert model_spans == sampler.sampled  # the ids the loss sees are the sampled ids
    assert [tiny_tokenizer.decode(ids, skip_special_tokens=True) for ids in model_spans] == MODEL_TURNS
    env_spans = [tiny_tokenizer.decode(ids) for m, ids in spans if m == 0]
    assert (
        env_spans[0]
        == "\n<|im_start|>user\n<tool_response>\nvalue of size\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    assert env_spans[1] == "\n<|im_start|>user\nWhich size?<|im_end|>\n<|im_start|>assistant\n"
    # logprobs: the sampler's on model tokens, 0 on env tokens
    for (m, ids), lps in zip(spans, _split(r.traj.logprobs, spans)):
        assert lps == ([-0.1 * (i + 1) for i in range(len(ids))] if m else [0.0] * len(ids))
    # the stream is the conversation: decoding prompt + completion gives the template's own rendering
    full = render(tiny_tokenizer, r.messages, ToyDeskEnv().tools(), generation_prompt=False)
    # (the episode ends on the model's own eos; the template's newline after it is never appended)
    assert tiny_tokenizer.decode(r.traj.prompt_ids + r.traj.completion_ids) + "\n" == full


def _split(values, spans):
    out, pos = [], 0
    for _, ids in spans:
        out.append(values[pos : pos + len(ids)])
        pos += len(ids)
    return out


def test_env_crash_mid_rollout_is_dropped_from_the_loss_and_envs_are_closed(tiny_tokenizer):
    made: list[ToyDeskEnv] = []

    def make_env():
        made.append(ToyDeskEnv(crash_at=2))
        return made[-1]

    rollouts = run_group(
        make_env,
        5,
        2,
        sampler=ScriptedSampler(tiny_tokenizer, MODEL_TURNS * 2),
        tokenizer=tiny_tokenizer,
        max_turns=6,
        max_new_tokens=64,
        max_completion_length=4096,
        temperature=1.0,
        env_timeout_s=10,
    )
    assert all(r.reward == 0.0 and r.failure.startswith("env: RuntimeError: toy env bug") for r in rollouts)
    assert all(r.dropped == "env" and set(r.traj.env_mask) == {0} for r in rollouts)  # the loss sees none of its tokens
    assert all(e.closed for e in made)
    assert rollouts[0].traj.logprobs[-1] != 0.0  # it ends with the last sampled token (a logprob), no dangling env turn


def test_unparsable_model_turn_ends_the_rollout_blamed_on_the_model(tiny_tokenizer):
    (r,) = _play(tiny_tokenizer, ScriptedSampler(tiny_tokenizer, ["<tool_call>\n{not json\n</tool_call>"]))
    assert r.failure.startswith("model:") and r.turns == 1


def test_tiny_template_is_prefix_preserving(tiny_tokenizer):
    check_prefix_preserving(tiny_tokenizer, ToyDeskEnv().tools())


def test_a_template_that_rewrites_history_is_refused(tiny_tokenizer):
    # like Qwen3's: reasoning is dropped from earlier assistant turns once a later turn exists
    drifting = tiny_tokenizer.chat_template.replace(
        "{{- '<|im_start|>assistant\\n' + (message.content or '') -}}",
        "{%- set c = message.content or '' -%}{%- if not loop.last and '</think>' in c -%}"
        "{%- set c = c.split('</think>')[-1].lstrip() -%}{%- endif -%}{{- '<|im_start|>assistant\\n' + c -}}",
    )
    assert drifting != tiny_tokenizer.chat_template
    tok = tiny_tokenizer.__class__.from_pretrained(tiny_tokenizer.name_or_path)
    tok.chat_template = drifting
    with pytest.raises(TemplateDriftError, match="not prefix-preserving"):
        check_prefix_preserving(tok, ToyDeskEnv().tools())
    history = [
        Message.system("s"),
        Message.user("u"),
        Message.assistant(
            content="<think>\nx\n</think>\n\nok", tool_calls=[ToolCall(id="c", name="lookup", arguments={})]
        ),
    ]
    from gapforge.training.tokens import env_delta

    with pytest.raises(TemplateDriftError):
        env_delta(tok, history, [Message.tool("c", "r", name="lookup")], ToyDeskEnv().tools())


def test_temperature_zero_samples_greedily(tiny_model, tiny_tokenizer):
    import torch

    from gapforge.training.sampler import TransformersSampler

    ctx = tiny_tokenizer("hello there", add_special_tokens=False)["input_ids"]
    a = TransformersSampler(tiny_model, tiny_tokenizer, seed=1).sample([ctx], max_new_tokens=4, temperature=0)[0]
    b = TransformersSampler(tiny_model, tiny_tokenizer, seed=2).sample([ctx], max_new_tokens=4, temperature=0)[0]
    assert a.ids == b.ids
    with torch.no_grad():
        first = int(tiny_model(torch.tensor([ctx])).logits[0, -1].argmax())
    assert a.ids[0] == first


def test_unparsable_model_turn_goes_to_the_env_as_text_when_rollouts_continue(tiny_tokenizer):
    broken = "<tool_call>\n{not json\n</tool_call>"
    (r,) = _play(tiny_tokenizer, ScriptedSampler(tiny_tokenizer, [broken, "All done."]), malformed="continue")
    assert r.failure is None and r.malformed_turns == 1 and r.turns >= 2
    said = [m.content for m in r.messages if m.role == "assistant"]
    assert said[0] == broken  # the env saw the turn's text, as a chat API would return it
    sampled = tiny_tokenizer.decode([t for t, m in zip(r.traj.completion_ids, r.traj.env_mask) if m])
    assert broken in sampled  # the loss still sees exactly the sampled ids


def test_sampler_logprobs_are_the_models_own_for_the_sampled_ids(tiny_model, tiny_tokenizer):
    """What TRL gets as the sampler's logprobs equals a plain forward pass over prompt + sampled ids
    (logits / temperature), for every row of a batch of differently long contexts."""
    import torch

    from gapforge.training.sampler import TransformersSampler

    contexts = [
        tiny_tokenizer(t, add_special_tokens=False)["input_ids"]
        for t in ("hello there", "a much longer context than the other one", "x")
    ]
    samples = TransformersSampler(tiny_model, tiny_tokenizer, seed=3).sample(
        contexts, max_new_tokens=12, temperature=0.7
    )
    for ctx, s in zip(contexts, samples):
        assert s.ids and len(s.logprobs) == len(s.ids)
        with torch.no_grad():
            logits = tiny_model(torch.tensor([ctx + s.ids])).logits[0, len(ctx) - 1 : -1].float() / 0.7
        expected = logits.log_softmax(-1).gather(-1, torch.tensor(s.ids)[:, None])[:, 0]
        assert s.logprobs == pytest.approx(expected.tolist(), abs=1e-4)
        assert s.finished == (s.ids[-1] == tiny_tokenizer.eos_token_id)


def test_an_episode_over_at_reset_is_scored_without_a_model_turn(tiny_tokenizer):
    # τ²: the user stopped in its first message (or max_steps=1); the env says so with `done`
    class OverAtReset(ToyDeskEnv):
        done = True

    sampler = ScriptedSampler(tiny_tokenizer, MODEL_TURNS)
    (r,) = _play(tiny_tokenizer, sampler, make_env=OverAtReset)
    assert r.turns == 0 and sampler.sampled == [] and r.failure is None
    assert r.reward == OverAtReset().score().reward  # scored as it stands, not dropped


def test_groups_played_together_sample_what_each_samples_in_another_batch(tiny_model, tiny_tokenizer):
    """run_groups keys each row's seed by (group, row, turn): a row's tokens do not depend on its batch-mates."""
    from gapforge.training.rollout import run_groups
    from gapforge.training.sampler import TransformersSampler

    kw = {
        "tokenizer": tiny_tokenizer,
        "max_turns": 3,
        "max_new_tokens": 12,
        "max_completion_length": 4096,
        "temperature": 1.0,
        "env_timeout_s": 10,
        "malformed": "continue",
    }

    def play(groups):
        return run_groups(ToyDeskEnv, groups, sampler=TransformersSampler(tiny_model, tiny_tokenizer, seed=5), **kw)

    together, alone, other_mates = play([(3, 2), (4, 2)]), play([(3, 2)]), play([(6, 3), (4, 2)])
    assert [len(g) for g in together] == [2, 2] and all(r.task == t for g, t in zip(together, (3, 4)) for r in g)
    assert [r.traj.completion_ids for r in together[0]] == [r.traj.completion_ids for r in alone[0]]
    assert [r.traj.completion_ids for r in together[1]] == [r.traj.completion_ids for r in other_mates[1]]
    assert (
        len({tuple(r.traj.completion_ids) for g in together for r in g}) > 1
    )  # sampling varied: not a vacuous equality


def test_an_llm_users_tokens_in_the_rollouts_score_info_are_summed_for_the_jobs_cost(tiny_model, tiny_tokenizer):
    """What a GRPO job's rollouts spent on an LLM user simulator (Score.info `user_tokens`) reaches its
    TrainResult.user_tokens through training.rollout.USER_TOKENS_SPENT; a user with none adds nothing."""
    from gapforge.envs.protocol import Score
    from gapforge.training import rollout
    from gapforge.training.rollout import run_groups
    from gapforge.training.sampler import TransformersSampler

    class MeteredDesk(ToyDeskEnv):
        def score(self) -> Score:
            plain = super().score()
            return Score(reward=plain.reward, success=plain.success, info={"user_tokens": [120, 9]})

    kw = {
        "tokenizer": tiny_tokenizer,
        "max_turns": 2,
        "max_new_tokens": 8,
        "max_completion_length": 4096,
        "temperature": 1.0,
        "env_timeout_s": 10,
        "malformed": "continue",
    }
    before = list(rollout.USER_TOKENS_SPENT)
    run_groups(MeteredDesk, [(1, 2), (2, 1)], sampler=TransformersSampler(tiny_model, tiny_tokenizer, seed=1), **kw)
    assert [a - b for a, b in zip(rollout.USER_TOKENS_SPENT, before)] == [360, 27]  # 3 rollouts scored
    run_groups(ToyDeskEnv, [(1, 2)], sampler=TransformersSampler(tiny_model, tiny_tokenizer, seed=1), **kw)
    assert [a - b for a, b in zip(rollout.USER_TOKENS_SPENT, before)] == [360, 27]
