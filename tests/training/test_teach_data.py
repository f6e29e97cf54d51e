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


def test_a_tiny_recipe_teaches_a_loadable_policy_and_is_cached(tmp_path):
    from training.evaluate import load_policy
    from training.teach import TeachConfig, load_meta, teach

    cfg = TeachConfig(copies=1, vocab_size=400, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                      intermediate_size=64, epochs=0.2, batch_size=2, threads=1)
    said: list[str] = []
    path = teach(tmp_path, cfg, progress=said.append)
    meta = load_meta(path)
    assert path.name == f"taught-{cfg.recipe_hash()}" and meta["sft_tokens_per_s"] > 0
    assert set(meta["train_tasks"]).isdisjoint(meta["eval_tasks"])
    assert any(m.startswith("SFT:") for m in said)
    model, tok = load_policy(path)
    assert model.config.vocab_size == len(tok)
    assert teach(tmp_path, cfg.model_copy(update={"threads": 2}), progress=said.append) == path  # threads: same recipe, cached
    assert TeachConfig(threads=1).recipe_hash() == TeachConfig().recipe_hash() != cfg.recipe_hash()
