"""The taught policy's data: gold trajectories score 1.0, the planted deficit, instances disjoint from THE shop,
exact-token examples."""

from __future__ import annotations

import pytest

from gapforge.demo_policy.teach import TEMPLATE, tokenize_trajectory
from gapforge.demo_policy.teach_data import (
    CHECKS,
    build_trajectories,
    copy_drills,
    decision_drills,
    look_first,
    teach_instances,
)
from gapforge.envs.shop import ShopEnv
from gapforge.training.tokens import check_prefix_preserving, render


def _gold_ids(env):
    """Customer-specific values in the gold calls (product ids are the same catalog everywhere)."""
    keys = ("email", "customer_id", "order_id", "item_ids", "new_item_ids", "payment_method_id")
    return {
        str(a.arguments[k]) for t in env.task_ids() for a in env.task(t).gold_actions for k in keys if k in a.arguments
    }


def test_taught_instances_are_other_shops_disjoint_from_the_evaluated_one():
    envs = teach_instances(3)
    assert [e.instance for e in envs] == sorted({e.instance for e in envs}) and 0 not in [e.instance for e in envs]
    shop = ShopEnv()
    for env in envs:
        assert {env.task_family(t) for t in env.task_ids()} == {shop.task_family(t) for t in shop.task_ids()}
        assert _gold_ids(env).isdisjoint(_gold_ids(shop))  # no email, order id or item id in common
    assert ShopEnv(instance=envs[0].instance).task(envs[0].task_ids()[0]) == envs[0].task(envs[0].task_ids()[0])


def test_copy_drills_replace_ids_consistently_so_every_call_argument_is_in_the_conversation():
    import json

    env = ShopEnv(instance=1)
    trajs = build_trajectories([(env, t) for t in env.task_ids()[:12]], copies=1, refusal_skip=0, other_skip=0, seed=0)
    drills = copy_drills(trajs, 3, seed=0)
    assert len(drills) == 36
    originals = {json.dumps(c.arguments, sort_keys=True) for t in trajs for m in t.messages for c in m.tool_calls or []}
    fresh = calls = 0
    for drill in drills:
        assert drill[-1].role == "assistant"  # cut right after an assistant turn
        if not drill[-1].tool_calls:
            continue
        calls += 1
        said = "\n".join(m.content or "" for m in drill[:-1])
        for call in drill[-1].tool_calls:
            for value in call.arguments.values():
                for v in value if isinstance(value, list) else [value]:
                    assert str(v) in said  # copyable from the conversation, never only recalled
            fresh += json.dumps(call.arguments, sort_keys=True) not in originals
    assert calls and fresh > calls // 2  # the ids are new, not the trajectory's own


def test_gold_trajectories_score_one_and_the_deficit_is_planted_in_policy_refusal():
    envs = teach_instances(2)
    trajs = build_trajectories(
        [(e, t) for e in envs for t in e.task_ids()], copies=2, refusal_skip=0.75, other_skip=0.10, seed=0
    )
    gold = [t for t in trajs if not t.deficit]
    assert gold and all(t.reward == 1.0 for t in gold)
    refusal = [t for t in trajs if t.family == "policy_refusal"]
    share = sum(t.deficit for t in refusal) / len(refusal)
    assert 0.5 < share < 1.0  # mostly, not always: variance at temperature 1.0
    # promising instead of refusing always fails: the promise says none of the words a refusal must say
    # (an earlier "... It is all processed." passed the refusal of an address change of a `processed` order)
    assert all(t.reward == 0.0 for t in refusal if t.deficit)
    others = [t for t in trajs if t.family != "policy_refusal"]
    assert sum(t.deficit for t in others) / len(others) < 0.3


def test_a_deficit_refusal_can_keep_promising_when_the_customer_presses_and_never_passes():
    env = ShopEnv(instance=1)
    pairs = [(env, t) for t in env.task_ids() if env.task_family(t) == "policy_refusal"]
    once = build_trajectories(pairs, copies=1, refusal_skip=1.0, other_skip=0, seed=0)
    held = build_trajectories(pairs, copies=1, refusal_skip=1.0, other_skip=0, seed=0, promise_repeats=3)
    for a, b in zip(once, held):
        said = [m.content for m in b.messages if m.role == "assistant" and m.content and m.content.startswith("Sure")]
        assert (
            len(said) == 4
            and len([m for m in a.messages if m.role == "assistant" and (m.content or "").startswith("Sure")]) == 1
        )
        assert b.reward == 0.0 and not any(
            c.name == "get_order_details" for m in b.messages for c in m.tool_calls or []
        )
        # the customer pressed after every promise: the trajectory answers each press with the promise again
        presses = [
            i for i, m in enumerate(b.messages) if m.role == "user" and m.content == "Can you help me with that?"
        ]
        assert len(presses) >= 3 and all(b.messages[i + 1].content.startswith("Sure") for i in presses[:3])


def test_look_first_gives_the_address_change_its_lookup_and_a_drill_that_goes_on_to_the_write():
    """The shop's gold re-addresses a pending order without looking it up; with `look` every write looks its order up
    first, the trajectory still scores 1, and the decision drill after that lookup asks to confirm the write (without
    it, the only looked-up address change a taught policy has seen is the refused one)."""
    env = ShopEnv(instance=1)
    readdress = [
        t
        for t in env.task_ids()
        if env.task_family(t) == "single_write" and env.task(t).gold_actions[-1].name == "modify_pending_order_address"
    ]
    assert readdress
    for tid in readdress:
        gold = list(env.task(tid).gold_actions)
        looked = look_first(gold)
        assert [a.name for a in looked] == [gold[0].name, "get_order_details", "modify_pending_order_address"]
        assert looked[1].arguments == {"order_id": gold[-1].arguments["order_id"]}
        (plain,) = build_trajectories([(env, tid)], copies=1, refusal_skip=0, other_skip=0, seed=0)
        (seen,) = build_trajectories([(env, tid)], copies=1, refusal_skip=0, other_skip=0, seed=0, look=True)
        assert seen.reward == plain.reward == 1.0
        assert not any(c.name == "get_order_details" for m in plain.messages for c in m.tool_calls or [])
        assert not decision_drills([(env, tid)], 1, seed=0)  # no check, nothing to drill
        (drill,) = decision_drills([(env, tid)], 1, seed=0, look=True)
        assert (
            drill[-1].content == "I will now run modify pending order address for this order. Shall I proceed (yes/no)?"
        )
    for tid in env.task_ids():  # every other gold already looks before it writes: unchanged
        gold = list(env.task(tid).gold_actions)
        if tid not in readdress and env.task_family(tid) != "compound_multi_step":
            assert look_first(gold) == gold, tid


def test_examples_are_tokenized_like_rollouts_with_loss_on_assistant_turns_only(tiny_tokenizer):
    env = ShopEnv(instance=1)
    (traj,) = build_trajectories([(env, env.task_ids()[0])], copies=1, refusal_skip=0, other_skip=0, seed=0)
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
    rendered = render(tok, traj.messages[: last + 1], env.tools(), generation_prompt=False)
    assert tok.decode(ids) + "\n" == rendered  # the example is the conversation, token for token


def test_decision_drills_end_on_the_turn_after_a_check_and_train_only_that_turn(tiny_tokenizer):
    env = ShopEnv(instance=1)
    pairs = [(env, t) for t in env.task_ids()]
    drills = decision_drills(pairs, 1, seed=0)
    shop_ids = _gold_ids(env)
    refusals = {t: env.task(t) for t in env.task_ids() if env.task_family(t) == "policy_refusal"}
    refused = 0
    for d in drills:
        called = {c.id: c.name for m in d for c in m.tool_calls or []}
        assert d[-1].role == "assistant" and d[-2].role == "tool" and called[d[-2].tool_call_id] in CHECKS
        said = " ".join(m.content or "" for m in d) + " ".join(str(c.arguments) for m in d for c in m.tool_calls or [])
        assert not any(i in said for i in shop_ids if len(i) >= 5)  # ids are fresh, as in the copy drills
        refused += bool(d[-1].content and d[-1].content.startswith("I'm sorry"))
    # every refusal task is drilled at its decision (the task's rule, read after the check), and only refusal tasks refuse
    assert refused == len(refusals) and len(drills) > len(refusals)
    for tid, task in refusals.items():  # each refusal task's drill refuses with that task's rule
        assert (
            decision_drills([(env, tid)], 1, seed=0)[-1][-1].content
            == f"I'm sorry, I cannot do that: it is {' '.join(task.required_info)}."
        )
    tok = tiny_tokenizer.__class__.from_pretrained(tiny_tokenizer.name_or_path)
    tok.chat_template = TEMPLATE.read_text()
    drill = next(d for d in drills if d[-1].content and d[-1].content.startswith("I'm sorry"))
    full = tokenize_trajectory(tok, drill, env.tools())
    last = tokenize_trajectory(tok, drill, env.tools(), last_only=True)
    assert last["input_ids"] == full["input_ids"] and sum(last["assistant_masks"]) < sum(full["assistant_masks"])
    trained = tok.decode([t for t, m in zip(last["input_ids"], last["assistant_masks"]) if m], skip_special_tokens=True)
    assert trained.strip() == drill[-1].content  # the decision turn, nothing before it (no lookup call, no question)


def test_a_tiny_recipe_teaches_a_loadable_policy_and_is_cached(tmp_path):
    from gapforge.demo_policy.teach import TeachConfig, load_meta, teach
    from gapforge.training.evaluate import load_policy

    cfg = TeachConfig(
        instances=1,
        copies=1,
        drills=1,
        warmup_steps=20,
        vocab_size=400,
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=64,
        epochs=0.2,
        batch_size=2,
        threads=1,
    )
    said: list[str] = []
    path = teach(tmp_path, cfg, progress=said.append)
    meta = load_meta(path)
    assert path.name == f"taught-{cfg.recipe_hash()}" and meta["sft_tokens_per_s"] > 0
    assert 0 not in meta["train_instances"] and meta["eval_tasks"] == ShopEnv().task_ids()
    assert meta["warmup"]["steps"] == 20 and 0.0 <= meta["warmup"]["copy_accuracy"] <= 1.0
    assert any(m.startswith("SFT:") for m in said)
    model, tok = load_policy(path)
    assert model.config.vocab_size == len(tok)
    assert (
        teach(tmp_path, cfg.model_copy(update={"threads": 2}), progress=said.append) == path
    )  # threads: same recipe, cached
    assert TeachConfig(threads=1).recipe_hash() == TeachConfig().recipe_hash() != cfg.recipe_hash()


def test_some_openings_give_the_email_and_order_id_and_the_script_does_not_ask_for_them():
    env = ShopEnv(instance=1)
    pairs = [(env, t) for t in env.task_ids()]
    trajs = build_trajectories(pairs, copies=1, refusal_skip=0, other_skip=0, seed=0, facts_in_opening=1.0)
    told = [t for t in trajs if "My email is" in t.messages[1].content]
    assert 0 < len(told) < len(trajs)  # only tasks that start with an email lookup and name an order
    for t in told:
        task = env.task(t.task_id)
        assert t.reward == 1.0 and task.user.facts["order_id"] in t.messages[1].content
        first = t.messages[2]
        assert first.role == "assistant" and first.tool_calls[0].name == "find_customer_by_email"  # no question first
        assert not any("order id" in (m.content or "") for m in t.messages if m.role == "assistant")
    none = build_trajectories(pairs, copies=1, refusal_skip=0, other_skip=0, seed=0, facts_in_opening=0.0)
    assert not any("My email is" in t.messages[1].content for t in none)


def test_a_polish_pass_continues_from_the_first_pass_and_refuses_another_recipes_build(tmp_path):
    from gapforge.demo_policy.teach import TeachConfig, load_meta, teach

    first = TeachConfig(
        instances=1,
        copies=1,
        drills=1,
        warmup_steps=0,
        vocab_size=400,
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=64,
        epochs=0.1,
        batch_size=2,
        threads=1,
        other_skip=0.0,
    )
    base = teach(tmp_path, first)
    polished = first.model_copy(
        update={"polish_epochs": 0.1, "polish_learning_rate": 5e-4, "decision_drills": 1, "polish_refusal_skip": 0.0}
    )
    assert polished.recipe_hash() != first.recipe_hash()
    said: list[str] = []
    path = teach(tmp_path, polished, progress=said.append, first_pass=base)
    meta = load_meta(path)
    assert meta["first_pass"]["recipe_hash"] == first.recipe_hash()
    assert meta["polish"]["trajectories"] > 0 and meta["polish"]["loss_last"] and meta["polish"]["seconds"] > 0
    assert meta["polish"]["decision_drills"] > 0 and any(
        m.startswith("decision drills:") for m in said
    )  # they join the polish
    assert (
        meta["polish"]["deficit_trajectories"] == 0 < meta["deficit_trajectories"]
    )  # the polish's own refusal_skip (0 here)
    assert any(m.startswith("polish:") for m in said) and not any(
        m.startswith("SFT:") for m in said
    )  # the first pass is not repeated
    # the polish's data is a fresh draw (seed + 1), and the polished weights moved away from the first pass's
    assert (path / "model.safetensors").read_bytes() != (base / "model.safetensors").read_bytes()
    other = polished.model_copy(update={"hidden_size": 48, "polish_epochs": 0.1})
    with pytest.raises(ValueError, match="not this recipe's first pass"):
        teach(tmp_path / "x", other, first_pass=base)
    # a polish may continue a polished build: the card keeps the whole chain
    again = polished.model_copy(update={"polish_epochs": 0.05, "polish_ask_email_first": True})
    chained_dir = teach(tmp_path, again, first_pass=path)
    chained = load_meta(chained_dir)
    assert chained["first_pass"]["recipe_hash"] == polished.recipe_hash() and chained["first_pass"]["polish"] == 0.1
    assert chained["first_pass"]["first_pass"]["recipe_hash"] == first.recipe_hash()
    # the build is named by the weights it continued: the same recipe on another parent is another build, not a cache hit
    assert chained_dir.name.endswith(chained["first_pass"]["weights_sha256"][:12])
    assert teach(tmp_path, again, first_pass=base) != chained_dir


def test_polish_seed_draws_the_polish_afresh_and_orders_its_batches(monkeypatch, tmp_path):
    """A chained polish with the default seed re-reads its parent's polish data in the same order; `polish_seed`
    gives it another draw (trajectories, drills, decision drills) and another batch order."""
    import gapforge.demo_policy.teach as teach_mod
    from gapforge.demo_policy.teach import TeachConfig, teach

    first = TeachConfig(
        instances=1,
        copies=1,
        drills=1,
        warmup_steps=0,
        vocab_size=400,
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=64,
        epochs=0.05,
        batch_size=2,
        threads=1,
        decision_drills=1,
    )
    base = teach(tmp_path, first)
    seen: dict = {}
    real = teach_mod._sft

    def spy(model, tok, rows, *a, order_seed=None, **k):
        seen["rows"], seen["order"] = [tuple(r["input_ids"]) for r in rows], order_seed
        return real(model, tok, rows, *a, order_seed=order_seed, **k)

    monkeypatch.setattr(teach_mod, "_sft", spy)
    polish = first.model_copy(update={"polish_epochs": 0.05})
    draws = {}
    for seed in (None, 1, 5):
        teach(tmp_path / str(seed), polish.model_copy(update={"polish_seed": seed}), first_pass=base)
        draws[seed] = (seen["rows"], seen["order"])
    assert (
        draws[None][0] == draws[1][0] and draws[None][1] == 0 and draws[1][1] == 1
    )  # default: draw seed + 1, order `seed`
    assert (
        draws[5][1] == 5 and len(set(draws[5][0]) & set(draws[None][0])) < len(draws[None][0]) // 2
    )  # mostly fresh examples
    assert polish.model_copy(update={"polish_seed": 5}).recipe_hash() != polish.recipe_hash()


def test_the_card_names_the_hash_its_directory_was_built_under(monkeypatch, tmp_path):
    """The recipe hash covers the teaching code: an edit while a build runs must not give the card another hash
    than its directory's (it did: the directory's was taken at the start, the card's at the end)."""
    from gapforge.demo_policy.teach import TeachConfig, load_meta, teach

    cfg = TeachConfig(
        instances=1,
        copies=1,
        drills=1,
        warmup_steps=0,
        vocab_size=400,
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=64,
        epochs=0.05,
        batch_size=2,
        threads=1,
    )
    hashes = iter(["0123456789abcdef", "fedcba9876543210"])  # the code "changes" after the first read
    monkeypatch.setattr(TeachConfig, "recipe_hash", lambda self: next(hashes))
    path = teach(tmp_path, cfg)
    assert path.name == "taught-0123456789abcdef" and load_meta(path)["recipe_hash"] == "0123456789abcdef"


def test_sft_trains_in_float32_not_under_trls_bf16_default(monkeypatch, tmp_path):
    """TRL's SFTConfig defaults to bf16 (an autocast that ran a polish step ~8x slower on a CPU without bf16 units:
    2.9 s vs 0.36 s, same losses to 3 digits); the teach passes train in float32."""
    from types import SimpleNamespace

    import trl

    from gapforge.demo_policy.teach import TeachConfig, _sft

    seen = {}

    class Recorder:
        def __init__(self, model, args, **kwargs):
            seen["args"] = args
            self.state = SimpleNamespace(log_history=[{"loss": 0.5}])

        def train(self):
            seen["trained"] = True

    monkeypatch.setattr(trl, "SFTTrainer", Recorder)
    losses, _, _ = _sft(
        None,
        None,
        [{"input_ids": [1, 2], "assistant_masks": [1, 1]}],
        0.1,
        1e-3,
        TeachConfig(),
        tmp_path,
        lambda _m: None,
    )
    assert seen["trained"] and losses == [0.5]
    assert seen["args"].bf16 is False and seen["args"].fp16 is False
    assert (
        seen["args"].activation_checkpointing is False and seen["args"].gradient_checkpointing is False
    )  # TRL's default: on


def test_a_customer_found_by_name_is_first_asked_for_the_email_as_every_other():
    """`email_first`: the opening never says which lookup a customer can serve, so the gold asks for the email; a
    by-name customer answers that they do not remember it, with name and zip (the reply the shop's user gives)."""
    from gapforge.demo_policy.teach_data import build_trajectories, teach_instances

    env = teach_instances(1)[0]
    pairs = [(env, t) for t in env.task_ids() if env.task(t).gold_actions[0].name == "find_customer_by_name_zip"]
    trajs = build_trajectories(pairs, copies=1, refusal_skip=0.0, other_skip=0.0, seed=3, email_first=True)
    assert pairs and len(trajs) == len(pairs) and all(t.reward == 1.0 for t in trajs)
    # without the knob (the shipped recipe's data) the script asks for name and zip straight away
    plain = build_trajectories(pairs, copies=1, refusal_skip=0.0, other_skip=0.0, seed=3)
    assert all("zip code" in next(m for m in t.messages if m.role == "assistant").content for t in plain)
    for t in trajs:
        ask = next(m for m in t.messages if m.role == "assistant")
        reply = t.messages[t.messages.index(ask) + 1]
        call = t.messages[t.messages.index(ask) + 2]
        assert "email" in ask.content and "don't remember my email" in reply.content
        assert call.tool_calls[0].name == "find_customer_by_name_zip"


def test_teach_hands_the_polish_knobs_to_its_draw_and_its_decision_drills(monkeypatch, tmp_path):
    """The knobs reach the data they name: the polish's fresh draw and its decision drills, never the first pass's
    draw (checked on the shipped card's recipe continuing the shipped build, stopped before any training)."""
    import gapforge.demo_policy.teach as teach_module
    import gapforge.demo_policy.teach_data as data
    import gapforge.training.cpu  # noqa: F401 (loads the submodule that the name below reaches)
    from gapforge import training
    from gapforge.demo_policy.artifact import SHIPPED, load_card
    from gapforge.demo_policy.teach import TeachConfig, teach

    class Stop(Exception):
        pass

    seen: list[tuple[str, dict]] = []

    def decisions(tok, pairs, tools, per_task, seed, say, **kw):
        seen.append(("drills", {"seed": seed, **kw}))
        raise Stop

    monkeypatch.setattr(training.cpu, "set_cpu_threads", lambda n: 1)  # leave the test process's torch threads alone
    monkeypatch.setattr(data, "teach_instances", lambda n: [ShopEnv(instance=1)])
    monkeypatch.setattr(data, "build_trajectories", lambda pairs, **kw: seen.append(("draw", kw)) or [])
    monkeypatch.setattr(teach_module, "_decision_rows", decisions)
    recipe = {k: v for k, v in load_card(SHIPPED)["recipe"].items() if k != "threads"}
    for email_first, look in ((True, False), (False, True)):
        seen.clear()
        cfg = TeachConfig(
            **{
                **recipe,
                "polish_ask_email_first": email_first,
                "polish_look_first": look,
                "polish_lookup_transfer": 0.0,
            }
        )
        with pytest.raises(Stop):
            teach(tmp_path, cfg, first_pass=SHIPPED)
        (_, first), (_, polish), (_, drills) = seen
        assert first["seed"] == cfg.seed and not first.get("email_first") and not first.get("look")
        assert (polish["seed"], polish["email_first"], polish["look"]) == (cfg.seed + 1, email_first, look)
        assert polish["promise_repeats"] == cfg.polish_promise_repeats
        assert (drills["seed"], drills["email_first"], drills["look"]) == (cfg.seed + 1, email_first, look)
        assert polish["lookup_transfer"] == 0.0 and drills["skip_families"] == ()
    seen.clear()
    with pytest.raises(Stop):  # the second deficit: planted in the polish's draw, and its family left out of the drills
        teach(tmp_path, TeachConfig(**{**recipe, "polish_lookup_transfer": 0.8}), first_pass=SHIPPED)
    (_, first), (_, polish), (_, drills) = seen
    assert (
        "lookup_transfer" not in first
        and polish["lookup_transfer"] == 0.8
        and drills["skip_families"] == ("lookup_and_answer",)
    )
    assert not list(tmp_path.iterdir())  # stopped before anything was written


def test_digit_groups_make_every_id_the_same_fewer_tokens_in_every_context():
    from gapforge.demo_policy.teach import TeachConfig, _tokenizer

    texts = ["My order is #W2324636 and the item 6331419857 costs 81.00.", '{"item_ids": ["6331419857"]}'] * 3
    pairs = _tokenizer(texts, TeachConfig(digit_group=2))
    ids = pairs.tokenize('"6331419857"')
    assert ids == ['"', "63", "31", "41", "98", "57", '"']
    assert pairs.tokenize(" 6331419857.")[1:6] == ids[1:6]  # the same tokens after a space and before a period
    assert all(len(pairs.tokenize(f"{i:02d}")) == 1 for i in range(100))  # every pair is one token, seen or not
    assert pairs.decode(pairs.encode("#W2324636 costs 81.00")) == "#W2324636 costs 81.00"
    assert len(_tokenizer(texts, TeachConfig()).tokenize('"6331419857"')) == 12  # the default: one token per digit
    with pytest.raises(ValueError, match="raise vocab_size"):
        _tokenizer(texts, TeachConfig(digit_group=3, vocab_size=500))


def test_the_second_deficit_reads_the_record_then_transfers_instead_of_answering_and_fails():
    """`lookup_transfer`: a lookup reads the record holding the answer and hands the customer to a human agent; the
    shop's grader fails it; the other families' trajectories are the same draw with or without it."""
    env = ShopEnv(instance=1)
    pairs = [(env, t) for t in env.task_ids()]
    plain = build_trajectories(pairs, copies=2, refusal_skip=0.75, other_skip=0.10, seed=3)
    planted = build_trajectories(pairs, copies=2, refusal_skip=0.75, other_skip=0.10, seed=3, lookup_transfer=1.0)
    assert [a.messages for a in plain if a.family != "lookup_and_answer"] == [
        b.messages for b in planted if b.family != "lookup_and_answer"
    ]
    lookups = [(a, b) for a, b in zip(plain, planted) if a.family == "lookup_and_answer"]
    assert len(lookups) == 24
    for a, b in lookups:
        calls = [c.name for m in b.messages for c in m.tool_calls or []]
        gold = [c.name for m in a.messages for c in m.tool_calls or []]
        assert a.reward == 1.0 and b.deficit and b.reward == 0.0
        assert calls == [*gold, "transfer_to_human_agents"]  # the same record read as the gold, then the transfer
        assert not any((m.content or "").startswith("Done") for m in b.messages if m.role == "assistant")


def test_with_the_second_deficit_the_lookups_get_no_decision_drills():
    env = ShopEnv(instance=1)
    pairs = [(env, t) for t in env.task_ids()]
    every = decision_drills(pairs, 1, 0, look=True)
    kept = decision_drills(pairs, 1, 0, look=True, skip_families=("lookup_and_answer",))
    assert 0 < len(kept) < len(every)
    lookup_openings = {env.task(t).user.opening for t in env.task_ids() if env.task_family(t) == "lookup_and_answer"}
    assert not any(m.content in lookup_openings for d in kept for m in d if m.role == "user")
    assert any(m.content in lookup_openings for d in every for m in d if m.role == "user")
