"""routing.backend=gate on a tiny model: the gate learns a separable toy routing problem from pooled hidden states,
abstains below the margin, is deterministic given its seed, and its stored weights decide exactly as the trained ones."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from gapforge.agents.router import GateConfig, RouterError, RoutingConfig
from gapforge.agents.router.gate import (
    GateClassifier,
    GateExample,
    GateScorer,
    GateState,
    HiddenStateEncoder,
    fit_gate,
    gate_encoder,
    split_examples,
    train_gate,
)
from gapforge.evaluation.service import RunArtifacts, build_router

CAPS = ["precondition_verification", "structured_data_reasoning"]


def toy_examples(n: int = 12, seed: int = 0) -> list[GateExample]:
    """Three classes whose first messages use different words (ids and numbers vary)."""
    rng = random.Random(seed)
    items = ["blender", "lamp", "jacket", "kettle", "chair", "phone"]
    texts = {
        CAPS[0]: lambda: (
            f"I want to return the {rng.choice(items)} from order {rng.randint(1000, 9999)}, it arrived broken."
        ),
        CAPS[1]: lambda: (
            f"Please add up the totals of my {rng.randint(2, 9)} orders from {rng.choice(['May', 'June', 'July'])} and tell me the sum."
        ),
        "none": lambda: f"Hello, what are your opening hours on {rng.choice(['Monday', 'Sunday', 'Friday'])}?",
    }
    return [
        GateExample(id=f"{label}:{i:02d}", text=make(), label=label, split="train")
        for label, make in texts.items()
        for i in range(n)
    ]


def artifacts() -> RunArtifacts:
    return RunArtifacts("r", [{"name": c, "definition": "d", "example": "", "adapter": c} for c in CAPS], {})


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread for these small forward passes (on a busy 2-core machine two threads contend: ~20x slower)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def encoder(tiny_model_dir: Path) -> HiddenStateEncoder:
    from gapforge.serving.chat_format import load_tokenizer

    return gate_encoder(None, tiny_model_dir, max_tokens=64, load_tokenizer=load_tokenizer)


def test_the_gate_learns_a_separable_toy_problem_and_abstains_below_the_margin(encoder: HiddenStateEncoder) -> None:
    examples = split_examples(toy_examples(), 0.25, seed=0)
    held = [e for e in examples if e.split == "heldout"]
    assert [sum(e.label == c for e in held) for c in [*CAPS, "none"]] == [3, 3, 3]  # ceil(0.25 x 12) per class
    record = train_gate(
        encoder, examples, CAPS, RoutingConfig(backend="gate", gate=GateConfig(refit=False))
    )  # the measured gate is the served one
    assert (
        record.heldout.n == 9 and record.heldout.accuracy is not None and record.heldout.accuracy >= 0.8
    )  # chance: 1/3
    assert [e.id for e in record.examples] == [e.id for e in examples]

    router = build_router(artifacts(), routing=RoutingConfig(backend="gate"), gate=record.state, encoder=encoder)
    decisions = router.route_batch([e.text for e in held])
    assert sum((d.capability or "none") == e.label for d, e in zip(decisions, held)) == round(
        record.heldout.accuracy * 9
    )
    chosen = next(d for d in decisions if d.capability is not None)
    assert chosen.margin == pytest.approx(chosen.logprobs[chosen.label] - sorted(chosen.logprobs.values())[-2])
    text = held[decisions.index(chosen)].text
    above = build_router(
        artifacts(),
        routing=RoutingConfig(backend="gate", margin=chosen.margin + 1e-6),
        gate=record.state,
        encoder=encoder,
    )
    below = build_router(
        artifacts(),
        routing=RoutingConfig(backend="gate", margin=chosen.margin - 1e-6),
        gate=record.state,
        encoder=encoder,
    )
    assert above.route(text).abstained and above.route(text).adapter is None
    assert below.route(text).adapter == chosen.adapter and not below.route(text).abstained
    # the gate's stored accuracy is decided as the router decides: with a margin nothing clears, every example goes to none
    wary = train_gate(encoder, examples, CAPS, RoutingConfig(backend="gate", margin=1e6, gate=GateConfig(refit=False)))
    assert wary.heldout.accuracy == pytest.approx(1 / 3) and wary.heldout.matrix[0] == [0, 0, 3]


def test_the_served_gate_is_refit_on_the_held_out_examples_too(encoder: HiddenStateEncoder) -> None:
    """A kind of question the class carries only in its held-out share (the shop's price questions) reaches the class
    through the refit gate; the stored accuracy is still the first fit's, measured on examples it never saw."""
    rng = random.Random(1)
    items = ["blender", "lamp", "jacket", "kettle", "chair", "phone", "toaster", "mirror"]
    examples = [e.model_copy(update={"split": "train"}) for e in toy_examples(8)]
    examples += [
        GateExample(
            id=f"price:{i}",
            text=f"Hi, how much does the {item} with color {rng.choice(['red', 'blue'])} cost?",
            label=CAPS[1],
            split="heldout",
        )
        for i, item in enumerate(items[:6])
    ]
    fresh = [f"Hi, how much does the {item} with color green cost?" for item in items[6:]]
    measured = train_gate(encoder, examples, CAPS, RoutingConfig(backend="gate", gate=GateConfig(refit=False)))
    served = train_gate(encoder, examples, CAPS, RoutingConfig(backend="gate"))
    assert served.settings["refit"] is True and measured.settings["refit"] is False
    assert served.heldout == measured.heldout and served.train_accuracy == measured.train_accuracy
    x = encoder.encode([e.text for e in examples])
    refit = fit_gate(x, [e.label for e in examples], [*CAPS, "none"], seed=0, epochs=300, lr=0.05, weight_decay=1e-3)
    assert served.state == refit.state(max_tokens=encoder.max_tokens)  # exactly the same fit on every example
    route = {
        name: build_router(artifacts(), routing=RoutingConfig(backend="gate"), gate=rec.state, encoder=encoder)
        for name, rec in [("measured", measured), ("served", served)]
    }
    to_cap = {name: [r.route(t).capability for t in fresh] for name, r in route.items()}
    assert to_cap["served"] == [CAPS[1]] * len(fresh)
    assert to_cap["measured"] != to_cap["served"]  # without the refit the price questions never reached the class


def test_the_same_examples_and_seed_give_the_same_gate_and_leave_the_global_rng_alone(
    encoder: HiddenStateEncoder,
) -> None:
    import torch

    examples = toy_examples(6)
    x = encoder.encode([e.text for e in examples])
    labels = [e.label for e in examples]
    before = torch.random.get_rng_state()
    one = fit_gate(x, labels, [*CAPS, "none"], hidden=16, seed=3, epochs=50).state(max_tokens=64)
    assert torch.equal(before, torch.random.get_rng_state())
    assert fit_gate(x, labels, [*CAPS, "none"], hidden=16, seed=3, epochs=50).state(max_tokens=64) == one
    assert fit_gate(x, labels, [*CAPS, "none"], hidden=16, seed=4, epochs=50).state(max_tokens=64) != one
    assert (
        encoder.encode([examples[0].text]).tolist() == x[:1].tolist()
    )  # one pass per message: the same alone or in a list


def test_stored_weights_decide_exactly_as_the_trained_gate(encoder: HiddenStateEncoder) -> None:
    examples = toy_examples(6)
    x = encoder.encode([e.text for e in examples])
    gate = fit_gate(x, [e.label for e in examples], [*CAPS, "none"], hidden=8, epochs=40)
    stored = GateState.model_validate_json(gate.state(max_tokens=64).model_dump_json())
    assert np.array_equal(GateClassifier.from_state(stored).log_probs(x), gate.log_probs(x))


def test_the_pooled_tokens_are_the_first_user_message_only(encoder: HiddenStateEncoder) -> None:
    text = "Please cancel order 1012 right away."
    ids, keep = encoder.span(text)
    assert encoder.tokenizer.decode([ids[i] for i in keep]).strip() == text
    assert keep[0] > 0  # the chat template's role header is rendered (context) but not pooled
    assert len(encoder.span(" ".join(["word"] * 200))[1]) == 64  # at most max_tokens of a long message


def test_a_gate_for_another_base_or_other_capabilities_is_refused(encoder: HiddenStateEncoder) -> None:
    x = np.random.default_rng(0).normal(size=(6, encoder.hidden_size + 1))
    wrong = fit_gate(x, ["none", CAPS[0]] * 3, [*CAPS, "none"], epochs=5)
    with pytest.raises(RouterError, match="hidden size"):
        GateScorer(encoder, wrong)
    other = fit_gate(x[:, :-1], ["none", "x"] * 3, ["x", "none"], epochs=5)
    with pytest.raises(RouterError, match="rebuild it"):
        build_router(
            artifacts(), routing=RoutingConfig(backend="gate"), gate=other.state(max_tokens=64), encoder=encoder
        )
    with pytest.raises(RouterError, match="needs the run's trained gate"):
        build_router(artifacts(), routing=RoutingConfig(backend="gate"), encoder=encoder)
    nothing = build_router(
        RunArtifacts("r", [], {}), routing=RoutingConfig(backend="gate"), encoder=encoder
    )  # no adapter trained yet
    assert nothing.route("Please cancel order 1012.").target == "base"
