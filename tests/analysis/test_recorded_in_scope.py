"""The recorded analyst's `in_scope` rule (in_scope_resolution): a question the tools can answer handed to a human
agent is LACKING, an answer from the record read is PRESENT, and episodes that ask for no value or end with neither
are NA."""

from __future__ import annotations

from gapforge.agents.analysis.recorded import Trajectory, in_scope

BODY = (
    "[1] user: Hello, how much did I pay in total for one of my recent orders?\n"
    '[2] assistant: CALL find_customer_by_email({"email": "liam.nguyen74@example.com"})\n'
    '[3] tool find_customer_by_email: {"customer_id": "liam_nguyen_5604"}\n'
    '[4] assistant: CALL get_order_details({"order_id": "#W2821034"})\n'
    '[5] tool get_order_details: {"items": [{"item_id": "3970002178", "price": 27.52}], "total": 114.83}\n'
)


def test_a_transfer_instead_of_the_answer_is_lacking():
    t = Trajectory(
        BODY + '[6] assistant: CALL transfer_to_human_agents({"summary": "wants a total"})\n'
        '[7] tool transfer_to_human_agents: {"result": "Transfer successful"}'
    )
    label, evidence, index = in_scope(t)
    assert (label, index) == ("LACKING", 6) and "human agent" in evidence


def test_an_answer_from_the_record_is_present_and_neither_is_na():
    assert in_scope(Trajectory(BODY + "[6] assistant: Done. 114.83"))[:1] == ("PRESENT",)
    assert in_scope(Trajectory(BODY + "[6] assistant: Which order do you mean?"))[0] == "NA"


def test_a_request_that_asks_for_no_value_is_na_even_with_a_transfer():
    t = Trajectory(
        "[1] user: Hi, I'd like to cancel an order I placed recently.\n"
        '[2] assistant: CALL transfer_to_human_agents({"summary": "cancel"})'
    )
    assert in_scope(t)[0] == "NA"  # whether to escalate a write is not this capability's question
