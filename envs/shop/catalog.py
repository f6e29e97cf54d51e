"""The list of shop tasks: 44 tasks in 4 families, built from the deterministic DB (any instance of it)."""

from __future__ import annotations

import functools

from gapforge.envs.shop.data import ShopDB
from gapforge.envs.shop.tasks import FactKey, GoldAction, ShopTask, TaskBuilder, item_text, money, options_text


def _lookups(b: TaskBuilder) -> None:
    add = functools.partial(b.add, "lookup_and_answer")

    def tracking(ci: int) -> None:
        o = b.order(ci, 2)
        facts, find = b.identity(ci)
        add(
            "learn the tracking number of a shipped order",
            {**facts, "order_id": f"It's order {o.order_id}."},
            [find, b.details(o)],
            [o.tracking_number or ""],
            "Hi, one of my orders hasn't arrived yet. Can you tell me its tracking number?",
        )

    def total(ci: int, by_name: bool) -> None:
        o = b.order(ci, 1)
        facts, find = b.identity(ci, by_name)
        add(
            "learn the total paid for an order",
            {**facts, "order_id": f"The order is {o.order_id}."},
            [find, b.details(o)],
            [money(o.total)],
            "Hello, how much did I pay in total for one of my recent orders?",
        )

    def balance(ci: int, by_name: bool) -> None:
        c = b.customers[ci]
        gc = next(p for p in c.payment_methods.values() if p.source == "gift_card")
        facts, find = b.identity(ci, by_name)
        add(
            "learn the gift card balance",
            facts,
            [find, GoldAction(name="get_customer_details", arguments={"customer_id": c.customer_id})],
            [money(gc.balance or 0.0)],
            "Hi, what's the remaining balance on my gift card?",
        )

    asked: set[str] = set()  # the products price tasks ask about

    def price(pid: str, pick: int) -> None:
        p = b.db.products[pid]
        v = [v for v in p.variants.values() if v.available][pick]
        add(
            "learn the price of a product variant",
            {},
            [GoldAction(name="list_products"), GoldAction(name="get_product_details", arguments={"product_id": pid})],
            [money(v.price)],
            f"Hi, how much does the {p.name} with {options_text(v.options)} cost?",
        )
        asked.add(pid)

    for ci in (0, 4, 8):  # i % 4 == 0: the third order is shipped
        b.serve(ci, tracking)
    for ci, by_name in ((1, False), (3, True), (5, False)):
        b.serve(ci, total, by_name)
    for ci in (6, 7, 10):
        b.serve(ci, balance, ci == 10)
    priced = [("prod_1003", 0), ("prod_1004", 1), ("prod_1008", 1)]
    for pid, pick in priced:  # a template that falls back takes a product no other price task asks about
        taken = {p for p, _ in priced} | asked
        b.first([pid, *(q for q in sorted(b.db.products) if q not in taken)], price, pick)


def _single_writes(b: TaskBuilder) -> None:
    add = functools.partial(b.add, "single_write")

    def cancel(ci: int, reason: str, by_name: bool) -> None:
        facts, find = b.identity(ci, by_name)
        f2, gold, total = b.cancel(ci, reason)
        add(
            "cancel a pending order",
            {**facts, **f2},
            [find, *gold],
            [total],
            "Hi, I'd like to cancel an order I placed recently.",
        )

    def readdress(ci: int) -> None:
        facts, find = b.identity(ci)
        f2, gold = b.readdress(ci)
        add(
            "change the shipping address of a pending order",
            {**facts, **f2},
            [find, *gold],
            [],
            "Hello, I moved and need to change the shipping address of an order that hasn't shipped yet.",
        )

    def ret(ci: int, idx: list[int], to_gift: bool, by_name: bool) -> None:
        facts, find = b.identity(ci, by_name)
        f2, gold, refund = b.ret(ci, idx, to_gift)
        add(
            "return an item of a delivered order",
            {**facts, **f2},
            [find, *gold],
            [refund],
            "Hi, I'd like to return something from an order I received.",
        )

    def exchange(ci: int) -> None:
        facts, find = b.identity(ci)
        f2, gold, diff = b.exchange(ci)
        add(
            "exchange an item of a delivered order",
            {**facts, **f2},
            [find, *gold],
            [diff],
            "Hi, I received my order but I'd like to exchange an item for a different variant.",
        )

    for ci, reason in ((10, "no longer needed"), (11, "ordered by mistake"), (13, "no longer needed")):
        b.serve(ci, cancel, reason, ci == 11)
    for ci in (14, 15, 16):
        b.serve(ci, readdress)
    for ci, idx, to_gift in ((17, [0], False), (19, [1], True), (22, [0], True)):
        b.serve(ci, ret, idx, to_gift, ci == 19)
    for ci in (21, 22, 23):
        b.serve(ci, exchange)


def _compounds(b: TaskBuilder) -> None:
    add = functools.partial(b.add, "compound_multi_step")

    def cancel_return(ci: int) -> None:
        facts, find = b.identity(ci)
        fc, gc, total = b.cancel(ci, "no longer needed")
        fr, gr, refund = b.ret(ci, [0], False)
        facts2: dict[FactKey, str] = {
            **facts,
            **fc,
            **fr,
            "order_id": f"The order to cancel is {b.order(ci, 0).order_id} and the one to return from is {b.order(ci, 1).order_id}.",
        }
        add(
            "cancel a pending order and return an item of a delivered one",
            facts2,
            [find, *gc, *gr],
            [total, refund],
            "Hi, I have two things: I want to cancel one order and return an item from another.",
        )

    def readdress_exchange(ci: int) -> None:
        facts, find = b.identity(ci)
        fa, ga = b.readdress(ci)
        fx, gx, diff = b.exchange(ci)
        facts2 = {
            **facts,
            **fa,
            **fx,
            "order_id": f"The address change is for {b.order(ci, 0).order_id} and the exchange is for {b.order(ci, 1).order_id}.",
        }
        add(
            "change an address and exchange an item",
            facts2,
            [find, *ga, *gx],
            [diff],
            "Hello, I need to update the shipping address of a pending order, and exchange an item from a delivered order.",
        )

    def return_two(ci: int, by_name: bool) -> None:
        facts, find = b.identity(ci, by_name)
        fr, gr, refund = b.ret(ci, [0, 1], True)
        add(
            "return two items to a gift card",
            {**facts, **fr},
            [find, *gr],
            [refund],
            "Hi, I want to return two items from one order and get the money back on my gift card.",
        )

    def cancel_tracking(ci: int) -> None:
        facts, find = b.identity(ci)
        fc, gc, total = b.cancel(ci, "ordered by mistake")
        shipped = b.order(ci, 2)
        facts2 = {
            **facts,
            **fc,
            "order_id": f"Cancel {b.order(ci, 0).order_id}; the shipped one is {shipped.order_id}.",
        }
        add(
            "cancel a pending order and learn a tracking number",
            facts2,
            [find, *gc, b.details(shipped)],
            [total, shipped.tracking_number or ""],
            "Hi, please cancel one of my pending orders, and also give me the tracking number of my shipped order.",
        )

    def exchange_two(ci: int) -> None:
        facts, find = b.identity(ci)
        fx, gx, diff = b.exchange(ci, n_items=2)
        add(
            "exchange two items of one order",
            {**facts, **fx},
            [find, *gx],
            [diff],
            "Hi, I'd like to exchange two items from an order I received.",
        )

    for ci in (1, 3):
        b.serve(ci, cancel_return)
    for ci in (5, 7):
        b.serve(ci, readdress_exchange)
    for ci in (9, 13):
        b.serve(ci, return_two, ci == 13)
    for ci in (4, 12):  # third order shipped
        b.serve(ci, cancel_tracking)
    for ci in (11, 15):  # odd customers have three items in the delivered order
        b.serve(ci, exchange_two)


def _refusals(b: TaskBuilder) -> None:
    add = functools.partial(b.add, "policy_refusal", needs_refusal=True)

    def cancel_delivered(ci: int) -> None:
        o = b.order(ci, 1)
        facts, find = b.identity(ci)
        add(
            "cancel a delivered order (not allowed)",
            {**facts, "order_id": f"It's order {o.order_id}.", "reason": "I no longer need it."},
            [find, b.details(o)],
            ["delivered"],
            "Hi, I want to cancel my order, I don't need it anymore.",
        )

    def readdress_sent(ci: int) -> None:
        o = b.order(ci, 2)
        facts, find = b.identity(ci)
        f2, _ = b.readdress(ci)
        add(
            f"change the address of a {o.status} order (not allowed)",
            {**facts, **f2, "order_id": f"It's order {o.order_id}."},
            [find, b.details(o)],
            [o.status],
            "Hello, I need to send one of my orders to a different address.",
        )

    def return_old(ci: int) -> None:
        o = b.order(ci, 2)
        facts, find = b.identity(ci)
        add(
            "return an item delivered more than 30 days ago (not allowed)",
            {
                **facts,
                "order_id": f"The order id is {o.order_id}.",
                "items": f"I want to return {item_text(o.items[0])}.",
                "payment": "Refund it to the original payment method, please.",
            },
            [find, b.details(o)],
            ["30"],
            "Hi, I'd like to return an item from an older order.",
        )

    def return_final_sale(ci: int) -> None:
        o = b.order(ci, 1)
        mat = next(it for it in o.items if b.db.products[it.product_id].final_sale)
        facts, find = b.identity(ci)
        add(
            "return a final-sale item (not allowed)",
            {
                **facts,
                "order_id": f"The order id is {o.order_id}.",
                "items": f"I want to return {item_text(mat)}.",
                "payment": "Refund it to the original payment method, please.",
            },
            [find, b.details(o), GoldAction(name="get_product_details", arguments={"product_id": mat.product_id})],
            ["final sale"],
            "Hi, I'd like to return the yoga mat I bought.",
        )

    def exchange_sold_out(ci: int) -> None:
        o = b.order(ci, 1)
        pair = b.exchange_pair(o, available=False)
        assert pair is not None, f"customer {ci} has no sold-out variant to ask for"
        it, _, opts = pair
        facts, find = b.identity(ci)
        add(
            "exchange for a sold-out variant (not allowed)",
            {
                **facts,
                "order_id": f"The order id is {o.order_id}.",
                "items": f"I want to exchange {item_text(it)}.",
                "exchange_target": f"I want it with {options_text(opts)} instead, nothing else.",
                "payment": "Use the original payment method of the order.",
            },
            [find, b.details(o), GoldAction(name="get_product_details", arguments={"product_id": it.product_id})],
            ["available"],
            f"Hi, I'd like to exchange the {it.name} I received for another variant.",
        )

    for ci in (2, 14):
        b.serve(ci, cancel_delivered)
    for ci in (8, 6):  # 8: shipped, 6: processed
        b.serve(ci, readdress_sent)
    for ci in (1, 9):  # i % 4 == 1: the third order was delivered more than 30 days ago
        b.serve(ci, return_old)
    for ci in (0, 6):  # the delivered order holds a final-sale Yoga Mat
        b.serve(ci, return_final_sale)
    for ci in (17, 23):
        b.serve(ci, exchange_sold_out)


def build_tasks(db: ShopDB) -> tuple[dict[str, ShopTask], list[str]]:
    """All tasks, keyed by id (stable: derived from the fixed DB), and the templates another customer or product
    served (TaskBuilder.first; none in instance 0). For another shop instance (`build_db(instance=k)`) a template no
    candidate can serve raises AssertionError."""
    b = TaskBuilder(db)
    _lookups(b)
    _single_writes(b)
    _compounds(b)
    _refusals(b)
    return b.tasks, b.substituted
