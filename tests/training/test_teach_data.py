"""The taught policy's data: gold trajectories score 1.0, the planted deficit, disjoint tasks, exact-token examples."""

from __future__ import annotations

from envs.shop import ShopEnv
from training.teach import TEMPLATE, tokenize_trajectory
from training.teach_data import build_trajectories, split_tasks
from training.tokens import check_prefix_preserving, render


def test_gold_trajectories_score_one_and_the_deficit_is_planted_in_policy_refusal():
    env = ShopEnv()
    train, evaluation = split_tasks(env)
    assert set(train).isdisjoint(evaluation) and len(train) + len(evaluation) == len(env.task_ids())
    assert {env.task_family(t) for t in evaluation} == {env.task_family(t) for t in train}
    trajs = build_trajectories(env, train, copies=4, refusal_skip=0.75, other_skip=0.10, seed=0)
    gold = [t for t in trajs if not t.deficit]
    assert gold and all(t.reward == 1.0 for t in gold)
    refusal = [t for t in trajs if t.family == "policy_refusal"]
    share = sum(t.deficit for t in refusal) / len(refusal)
    assert 0.5 < share < 1.0  # mostly, not always: variance at temperature 1.0
    assert all(t.reward == 0.0 for t in refusal if t.deficit)  # promising instead of refusing fails
    others = [t for t in trajs if t.family != "policy_refusal"]
    assert sum(t.deficit for t in others) / len(others) < 0.3


def test_examples_are_tokenized_like_rollouts_with_loss_on_assistant_turns_only(tiny_tokenizer):
    env = ShopEnv()
    (traj,) = build_trajectories(env, [split_tasks(env)[0][0]], copies=1, refusal_skip=0, other_skip=0, seed=0)
    tok = tiny_tokenizer.__class__.from_pretrained(tiny_tokenizer.name_or_path)
    tok.chat_template = TEMPLATE.read_text()
    check_prefix_preserving(tok, env.tools())
    row = tokenize_trajectory(tok, traj.messages, env.tools())
    ids, mask = row["input_ids"], row["assistant_masks"]
    said = tok.decode([t for t, m in zip(ids, mask) if m], skip_special_tokens=True)
    for m in traj.messages:
        if m.role == "assistant" and m.content:
            assert m.content in said
        if m.role == "tool":
            assert m.content not in said
    last = max(i for i, m in enumerate(traj.messages) if m.role == "assistant")
    rendered = render(tok, traj.messages[:last + 1], env.tools(), generation_prompt=False)
    assert tok.decode(ids) + "\n" == rendered  # the example is the conversation, token for token
