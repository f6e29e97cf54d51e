"""What the card's per-family measures count as the planted behaviours (training.evaluate): a lookup handed to a human
agent, and a settled request without the order check."""

from __future__ import annotations

from gapforge.training.evaluate import skipped_check, transferred


def _call(name: str) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [{"name": name, "arguments": {}}]}


OPEN = [
    {"role": "user", "content": "Hello, how much did I pay in total for one of my recent orders?"},
    _call("find_customer_by_email"),
    {"role": "tool", "content": '{"customer_id": "liam_nguyen_5604"}'},
    {"role": "user", "content": "The order is #W2821034."},
]


def test_a_lookup_handed_to_a_human_agent_is_the_second_deficit():
    read = [*OPEN, _call("get_order_details"), {"role": "tool", "content": '{"total": 114.83}'}]
    assert transferred(
        [*read, _call("transfer_to_human_agents"), {"role": "tool", "content": '{"result": "Transfer successful"}'}]
    )
    assert not transferred(
        [*read, {"role": "assistant", "content": "Done. 27.52"}]
    )  # a wrong answer is another failure
    # only the agent's call counts: not a transfer it talks about, nor a tool call of another role
    assert not transferred([*read, {"role": "assistant", "content": "I could transfer you to a human agent."}])
    assert not transferred(
        [*read, {"role": "user", "content": None, "tool_calls": [{"name": "transfer_to_human_agents"}]}]
    )


def test_the_first_deficit_measure_is_not_fooled_by_a_lookup():
    read = [*OPEN, _call("get_order_details"), {"role": "assistant", "content": "Done. 27.52"}]
    assert not skipped_check(read) and skipped_check(
        [*OPEN, {"role": "assistant", "content": "Sure, I have taken care of that."}]
    )
