"""The router on a tiny model taught to prefer labels: picks the taught label,
refuses multi-token labels, abstains below the margin, routes in batches."""

from __future__ import annotations

from pathlib import Path

import pytest
from router_helpers import capability_specs, first_messages, shared_taught_model

from gapforge.agents.router import (
    RouteOption,
    Router,
    RouterError,
    RoutingConfig,
    TransformersScorer,
    compact_trajectory,
    confusion,
    make_options,
)


def _options() -> list[RouteOption]:
    return make_options(capability_specs(), RoutingConfig().labels)


@pytest.fixture(scope="module")
def taught_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny model taught: cancel/return messages -> A (precondition_verification), info questions -> C (none)."""
    return shared_taught_model(tmp_path_factory, tiny_model_dir)


def test_taught_model_routes_to_the_taught_labels_in_one_batch(taught_dir: Path) -> None:
    router = Router(_options(), TransformersScorer.from_pretrained(taught_dir), RoutingConfig(batch_size=4))
    msgs = first_messages()
    decisions = router.route_batch(msgs["A"] + msgs["B"] + msgs["C"])
    assert [d.label for d in decisions] == ["A", "A", "B", "B", "C", "C"]
    assert [d.adapter for d in decisions[:4]] == ["precondition_verification"] * 2 + ["structured_data_reasoning"] * 2
    assert all(d.adapter is None and d.capability is None and not d.abstained for d in decisions[4:])  # none -> base
    assert all(d.margin > 0 for d in decisions)
    # batched (padded) and one-at-a-time forward passes agree
    single = router.route(msgs["C"][1])
    assert single.logprobs == pytest.approx(decisions[5].logprobs, abs=1e-4)


def test_abstains_to_base_below_the_margin(taught_dir: Path) -> None:
    scorer = TransformersScorer.from_pretrained(taught_dir)
    msg = first_messages()["A"][0]
    margin = Router(_options(), scorer).route(msg).margin
    strict = Router(_options(), scorer, RoutingConfig(margin=margin + 0.01)).route(msg)
    assert strict.abstained and strict.adapter is None and strict.label == "A"
    lenient = Router(_options(), scorer, RoutingConfig(margin=margin - 0.01)).route(msg)
    assert not lenient.abstained and lenient.adapter == "precondition_verification"


def test_refuses_a_multi_token_label_at_build_time(tiny_model_dir: Path) -> None:
    scorer = TransformersScorer.from_pretrained(tiny_model_dir)
    assert len(scorer.label_token_ids("precondition_verification")) > 1
    opts = [RouteOption("precondition_verification", "precondition_verification", "x")]
    with pytest.raises(RouterError, match="is .* tokens of this tokenizer, not 1"):
        Router(opts, scorer)
    with pytest.raises(RouterError, match="labels"):
        make_options(capability_specs(), ["A", "B"])  # no label left for 'none'


def test_disabled_routing_keeps_the_base_model(tiny_model_dir: Path) -> None:
    router = Router(_options(), TransformersScorer.from_pretrained(tiny_model_dir), RoutingConfig(enabled=False))
    d = router.route("Return my order")
    assert d.adapter is None and d.label is None


def test_prompt_holds_message_labels_definitions_and_example(tiny_model_dir: Path) -> None:
    traj = [
        {"role": "system", "content": "policy"},
        {"role": "user", "content": "return order 7"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id": "7"}'}}
            ],
        },
        {"role": "tool", "content": '{"status": "delivered"}', "tool_call_id": "c"},
    ]
    example = compact_trajectory(traj, 400)
    assert "assistant -> get_order(" in example and "policy" not in example
    specs = capability_specs()
    specs[0]["example"] = example
    router = Router(
        make_options(specs, list("XYZ")),
        TransformersScorer.from_pretrained(tiny_model_dir),
        RoutingConfig(labels=list("XYZ")),
    )
    text = router.messages("Cancel order 1012")[0]["content"]
    assert router.none_label == "Z" and "Z: none of these" in text
    assert "X: precondition_verification" in text and "get_order" in text and "Cancel order 1012" in text
    assert len(compact_trajectory(traj * 50, 300)) <= 300


def test_vllm_completions_scorer_matches_the_transformers_pass(taught_dir: Path) -> None:
    """The vLLM path (completions + logprob_token_ids) against a stand-in server whose logprobs come
    from the same model's forward pass: the same decisions and logprobs as the direct backend."""
    import torch

    from gapforge.agents.router import CompletionsScorer
    from tests.fakes.fake_vllm import FakeVLLMServer

    direct = TransformersScorer.from_pretrained(taught_dir)

    def scorer(prompt_ids: list[int], token_ids: list[int]) -> list[float]:
        with torch.inference_mode():
            logits = direct.model(input_ids=torch.tensor([prompt_ids])).logits[0, -1].log_softmax(-1)
        return logits[token_ids].tolist()

    msgs = [first_messages()["A"][0], first_messages()["B"][0], first_messages()["C"][0]]
    with FakeVLLMServer("tiny", scorer=scorer) as srv:
        remote = CompletionsScorer(srv.base_url, "tiny", direct.tokenizer)
        via_vllm = Router(_options(), remote, RoutingConfig(batch_size=3)).route_batch(msgs)
        body = next(b for path, b in srv.requests if path == "/v1/completions")
        remote.close()
    assert [d.label for d in via_vllm] == ["A", "B", "C"]
    local = Router(_options(), direct).route_batch(msgs)
    for a, b in zip(via_vllm, local):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert body["max_tokens"] == 1 and body["return_tokens_as_token_ids"] is True and len(body["prompt"]) == 3
    assert body["logprob_token_ids"] == direct.token_ids(Router(_options(), direct).labels)


def test_vllm_scorer_blames_the_endpoint(tiny_model_dir: Path) -> None:
    from gapforge.agents.errors import ModelEndpointError
    from gapforge.agents.router import CompletionsScorer
    from tests.fakes.fake_vllm import FakeVLLMServer

    tok = TransformersScorer.from_pretrained(tiny_model_dir).tokenizer
    # an old server that drops one of the requested ids
    with (
        FakeVLLMServer("tiny", scorer=lambda p, ids: [0.0] * (len(ids) - 1)) as srv,
        pytest.raises(ModelEndpointError, match="no logprob for label token id"),
    ):
        Router(_options(), CompletionsScorer(srv.base_url, "tiny", tok)).route("hi")
    with pytest.raises(ModelEndpointError, match="unreachable"):
        Router(_options(), CompletionsScorer("http://127.0.0.1:9/v1", "tiny", tok, timeout_s=2)).route("hi")


def test_a_backend_s_scores_pick_the_option_and_none_keeps_the_base() -> None:
    from router_helpers import OpeningsScorer

    scorer = OpeningsScorer(
        [
            ["Hi, I want to cancel my order, I don't need it anymore. ava@x.com #W1"],
            ["Hello, how much did I pay in total for one of my recent orders?"],
        ],
        min_similarity=0.5,
    )
    router = Router(
        [RouteOption("A", "precondition", "d", adapter="pre"), RouteOption("B", "lookup", "d", adapter="look")],
        scorer,
        RoutingConfig(),
    )
    cancel = router.route("Hi, I want to cancel my order, I don't need it anymore.")
    assert cancel.adapter == "pre" and cancel.logprobs["A"] == 1.0
    assert router.route("Hello, how much did I pay in total for one of my recent orders? #W42").adapter == "look"
    other = router.route("Hi, what's the remaining balance on my gift card?")
    assert other.adapter is None and other.label == "C" and not other.abstained  # none scores highest: the base model


def test_confusion_matrix_rows_are_expected() -> None:
    c = confusion([("a", "a"), ("a", "none"), ("none", "none")], ["a", "none"])
    assert c["matrix"] == [[1, 1], [0, 1]] and c["accuracy"] == pytest.approx(2 / 3)
