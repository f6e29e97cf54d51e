"""The recorded analyst's `arguments` rule (tool_argument_precision): what the shop's rejections of a wrong value
look like, and that a rejection the agent corrected is not counted against it."""

from __future__ import annotations

import pytest

from gapforge.agents.analysis.recorded import Trajectory, arguments

OPENING = (
    "[1] user: Hi, I'd like to return something from an order I received.\n"
    '[2] assistant: CALL find_customer_by_email({"email": "hugo.okafor53@example.com"})\n'
    '[3] tool find_customer_by_email: {"customer_id": "hugo_okafor_5732"}\n'
    '[4] assistant: CALL get_order_details({"order_id": "#W8278397"})\n'
    '[5] tool get_order_details: {"items": [{"item_id": "3588492211"}]}\n'
)
WRITE = '[6] assistant: CALL return_delivered_order_items({"item_ids": ["5388492211"], "order_id": "#W8278397"})\n'


@pytest.mark.parametrize(
    "error",
    [
        "Error: items ['5388492211'] are not in order #W8278397",  # a 10-digit item id miscopied from the order
        "Error: payment method 'gift_card_7137289' not found for this customer",
        "Error: new item '1234567890' is not a variant of the same product as '3588492211'",
        "Error: new item '3588492211' is the same as the old one",
        "Error: bad arguments for return_delivered_order_items: missing ['payment_method_id'], unexpected []",
    ],
)
def test_an_uncorrected_rejection_of_a_value_is_lacking(error: str) -> None:
    t = Trajectory(OPENING + WRITE + f"[7] tool return_delivered_order_items: {error}\n[8] assistant: Done.")
    assert arguments(t)[0] == "LACKING" and arguments(t)[2] == 7


def test_a_rejection_corrected_by_an_accepted_call_of_the_same_tool_is_present() -> None:
    fixed = (
        OPENING
        + WRITE
        + "[7] tool return_delivered_order_items: Error: items ['5388492211'] are not in order #W8278397\n"
        + WRITE.replace("[6]", "[8]").replace("5388492211", "3588492211")
        + '[9] tool return_delivered_order_items: {"status": "return requested"}'
    )
    label, evidence, index = arguments(Trajectory(fixed))
    assert (label, index) == ("PRESENT", 7) and "corrected" in evidence


def test_a_customer_lookup_that_missed_is_corrected_by_the_other_lookup_not_by_another_tool() -> None:
    missed = (
        "[1] user: My name is Mia Kim and my zip code is 52702.\n"
        '[2] assistant: CALL find_customer_by_name_zip({"first_name": "Mia", "last_name": "Tanaka", "zip": "52702"})\n'
        "[3] tool find_customer_by_name_zip: Error: customer not found\n"
        '[4] assistant: CALL get_order_details({"order_id": "#W8261051"})\n[5] tool get_order_details: {"total": 231.07}\n'
    )
    assert arguments(Trajectory(missed))[0] == "LACKING"  # the name was miscopied and never looked up right
    by_email = missed + (
        '[6] assistant: CALL find_customer_by_email({"email": "mia.kim1@example.com"})\n'
        '[7] tool find_customer_by_email: {"customer_id": "mia_kim_1631"}'
    )
    assert arguments(Trajectory(by_email))[0] == "PRESENT"


def test_a_rejection_for_an_order_state_is_not_an_argument_error_and_no_call_is_na() -> None:
    state = (
        OPENING
        + WRITE
        + "[7] tool return_delivered_order_items: Error: order #W8278397 is 'pending': only delivered orders can be returned"
    )
    assert arguments(Trajectory(state))[0] == "PRESENT"
    assert arguments(Trajectory("[1] user: Hi.\n[2] assistant: Hello, how can I help?"))[0] == "NA"
