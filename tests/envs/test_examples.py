"""The two hand-written example synthetic envs: the self-test properties (sandbox/checks/README.md), in-process."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gapforge.envs.sdk import SyntheticEnv, action_to_message
from gapforge.envs.synthetic import InProcessSyntheticEnv, load_env_class
from tests.envs.conformance import check_conformance

# env modules, loaded as the sandbox and the trainer load them (they import the SDK as `envs.sdk`)
EXAMPLE_DIR = Path(__file__).resolve().parents[2] / "envs" / "examples"
PreconditionVerificationEnv = load_env_class(EXAMPLE_DIR / "precondition_verification.py")
StructuredDataReasoningEnv = load_env_class(EXAMPLE_DIR / "structured_data_reasoning.py")
EXAMPLES = [PreconditionVerificationEnv, StructuredDataReasoningEnv]
SEEDS = range(50)


def play(env: SyntheticEnv, seed: int, actions: list[dict]) -> float:
    env.reset(seed)
    for i, action in enumerate(actions):
        if env.step(action_to_message(action, f"call_{i}"))["done"]:
            break
    return env.score()["reward"]


def corrupt_argument(action: dict) -> dict:
    """The same tool call with its first string argument changed."""
    args = dict(action["arguments"])
    key = next(k for k, v in args.items() if isinstance(v, str))
    args[key] = args[key] + "9"
    return {"tool": action["tool"], "arguments": args}


@pytest.fixture(params=EXAMPLES, ids=lambda c: c.capability)
def env_class(request: pytest.FixtureRequest) -> type[SyntheticEnv]:
    return request.param


def test_protocol_conformance(env_class: type[SyntheticEnv]) -> None:
    check_conformance(lambda: InProcessSyntheticEnv(env_class), ["0", "7"])


def test_definition_and_shop_fidelity(env_class: type[SyntheticEnv]) -> None:
    env_class.check_definition()
    assert env_class.target == "shop"
    shop_tools = pytest.importorskip("gapforge.envs.shop.tools")
    shop = {s["function"]["name"]: s["function"]["parameters"] for s in shop_tools.SCHEMAS}

    def shape(params: dict) -> dict:
        return {k: {kk: vv for kk, vv in v.items() if kk != "description"} for k, v in params["properties"].items()}

    for schema in env_class().tools():
        fn = schema["function"]
        assert fn["name"] in shop, f"{fn['name']} is not a shop tool"
        assert shape(fn["parameters"]) == shape(shop[fn["name"]]), fn["name"]
        assert fn["parameters"]["required"] == shop[fn["name"]]["required"], fn["name"]


def test_deterministic_and_diverse(env_class: type[SyntheticEnv]) -> None:
    env = env_class()
    scenarios = [env.scenario_for(seed) for seed in SEEDS]
    assert scenarios[:5] == [env_class().scenario_for(seed) for seed in range(5)]
    assert len({repr(s) for s in scenarios}) >= 0.9 * len(scenarios)
    actions = env.solution(3)[:-1]
    assert play(env, 3, actions) == play(env_class(), 3, actions)
    assert env_class().reset(9) == env_class().reset(9)


def test_solution_solves_every_seed_and_doing_nothing_scores_low(env_class: type[SyntheticEnv]) -> None:
    env = env_class()
    for seed in SEEDS:
        assert play(env, seed, env.solution(seed)) >= 0.99, seed
        assert env.score()["success"] is True
        assert play(env, seed, []) < 0.2
        assert play(env, seed, [{"say": "Sorry, I cannot help with that."}]) < 0.2


def test_corrupted_solutions_score_lower_monotonically(env_class: type[SyntheticEnv]) -> None:
    env = env_class()
    for seed in SEEDS:
        solution = env.solution(seed)
        full = play(env, seed, solution)
        for k in range(len(solution)):
            dropped = play(env, seed, solution[:k] + solution[k + 1 :])
            assert dropped < full, f"seed {seed}: dropping action {k} {solution[k]} did not lower the reward"
            if "tool" in solution[k]:
                changed = play(env, seed, solution[:k] + [corrupt_argument(solution[k])] + solution[k + 1 :])
                assert changed < full, f"seed {seed}: changing an argument of {solution[k]} did not lower the reward"
        order = list(range(len(solution)))
        random.Random(seed).shuffle(order)
        rewards = [play(env, seed, [solution[i] for i in sorted(order[j:])]) for j in range(len(solution) + 1)]
        assert all(a >= b for a, b in zip(rewards, rewards[1:])), f"seed {seed}: not monotone {rewards}"
        assert rewards[-1] < 0.2 and len(set(rewards)) >= 3, f"seed {seed}: not graded {rewards}"


def test_precondition_scenarios_mix_eligible_and_ineligible_requests() -> None:
    env = PreconditionVerificationEnv()
    truths = [env.scenario_for(seed)["truth"] for seed in SEEDS]
    eligible = sum(t["eligible"] for t in truths)
    assert 10 <= eligible <= 40
    assert {t["case"] for t in truths} == {
        "ok",
        "not_pending",
        "not_owner",
        "not_delivered",
        "window_expired",
        "bad_payment",
    }


def test_precondition_forbidden_write_is_penalised() -> None:
    """Acting on an ineligible request after checking everything still loses the outcome and the write credit."""
    env = PreconditionVerificationEnv()
    seed = next(s for s in SEEDS if not env.scenario_for(s)["truth"]["eligible"])
    truth = env.scenario_for(seed)["truth"]
    checks = env.solution(seed)[:-1]
    if truth["kind"] == "cancel":
        write = {
            "tool": "cancel_pending_order",
            "arguments": {"order_id": truth["order_id"], "reason": "no longer needed"},
        }
    else:
        write = {
            "tool": "return_delivered_order_items",
            "arguments": {
                "order_id": truth["order_id"],
                "item_ids": truth["item_ids"],
                "payment_method_id": truth["payment_method_id"],
            },
        }
    play(env, seed, checks + [write, {"say": "Done."}])
    score = env.score()
    assert score["components"]["no_forbidden_write"] == 0.0 and score["components"]["correct_outcome"] == 0.0
    assert 0.2 < score["reward"] < 0.7


def test_structured_partial_credit_per_item() -> None:
    env = StructuredDataReasoningEnv()
    seed = next(
        s
        for s in SEEDS
        if env.scenario_for(s)["truth"]["kind"] == "list_matching" and len(env.scenario_for(s)["truth"]["matches"]) >= 2
    )
    truth = env.scenario_for(seed)["truth"]
    lookups = env.solution(seed)[:-1]
    first_id = truth["matches"][0][1]
    play(env, seed, lookups + [{"say": f"Your item is {first_id}. Total 0.00"}])
    credit = env.score()["components"]["item_credit"]
    assert credit == pytest.approx(1 / len(truth["matches"]))
    other_ids = [
        i["item_id"]
        for o in env.scenario["db"]["orders"].values()
        for i in o["items"]
        if [o["order_id"], i["item_id"]] not in truth["matches"]
    ]
    play(env, seed, lookups + [{"say": f"Items {first_id} {' '.join(other_ids)}. Total 0.00"}])
    assert env.score()["components"]["item_credit"] < credit  # naming wrong items costs credit
