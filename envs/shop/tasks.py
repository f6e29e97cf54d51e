"""The shop's tasks, derived deterministically from the DB by small per-kind builders.

Each task has gold actions (replayed on a fresh DB for the reward), the strings
the agent must communicate, and a script for the simulated user (what it asks
for, the facts it reveals when asked, when it is satisfied).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gapforge.envs.shop.data import Customer, Order, OrderItem, ShopDB
from gapforge.envs.shop.tools import WRITE_TOOLS

Family = Literal["lookup_and_answer", "single_write", "compound_multi_step", "policy_refusal"]
FAMILIES: tuple[Family, ...] = ("lookup_and_answer", "single_write", "compound_multi_step", "policy_refusal")
_SHORT = dict(zip(FAMILIES, ("lookup", "write", "compound", "refusal")))  # task id: shop-<short>-NNN
FactKey = Literal["email", "name_zip", "order_id", "items", "reason", "address", "payment", "exchange_target"]


class GoldAction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class UserScript(BaseModel):
    model_config = ConfigDict(extra="forbid")
    opening: str
    facts: dict[FactKey, str] = Field(default_factory=dict)
    expected_writes: int = 0  # satisfied only after this many successful write actions
    needs_refusal: bool = False  # satisfied only once the agent says it cannot do it
    max_turns: int = 12


class ShopTask(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str
    family: Family
    goal: str
    gold_actions: list[GoldAction]
    required_info: list[str] = Field(default_factory=list)
    user: UserScript


def money(x: float) -> str:
    return f"{x:.2f}"


def options_text(options: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in options.items())


def item_text(it: OrderItem) -> str:
    return f"the {it.name} ({options_text(it.options)})"


class TaskBuilder:
    def __init__(self, db: ShopDB) -> None:
        self.db = db
        self.customers: list[Customer] = list(db.customers.values())
        self.tasks: dict[str, ShopTask] = {}
        self.counts: dict[str, int] = {}
        self.substituted: list[str] = []  # templates a later candidate served (`first`)

    def serve(self, ci: int, build: Any, *args: Any) -> None:
        """`first` over customer `ci`, then the customers of its shape: every property a template relies on (order
        statuses, item counts, payment methods, the final-sale order) depends on the customer's index mod 12
        (data.build_db)."""
        n = len(self.customers)
        self.first([ci, *((ci + step) % n for step in range(12, n, 12))], build, *args)

    def first(self, candidates: list[Any], build: Any, *args: Any) -> None:
        """`build(candidate, *args)` for the first candidate (a customer index or a product id) it can make a task of.
        In THE shop (instance 0) the first always can. In another instance a template's customer may lack what it
        needs (no exchangeable item, no sold-out variant, too few available variants): the next candidate serves it.
        `build` adds its task last, so a candidate that fails adds nothing."""
        for candidate in candidates:
            try:
                build(candidate, *args)
            except (AssertionError, IndexError, StopIteration):
                continue
            if candidate != candidates[0]:
                self.substituted.append(f"{build.__name__}: {candidates[0]} -> {candidate}")
            return
        raise AssertionError(f"no candidate among {candidates} can serve the template {build.__name__}")

    def order(self, ci: int, k: int) -> Order:
        return self.db.orders[self.customers[ci].orders[k]]

    def identity(self, ci: int, by_name: bool = False) -> tuple[dict[FactKey, str], GoldAction]:
        c = self.customers[ci]
        name_zip = f"My name is {c.first_name} {c.last_name} and my zip code is {c.address.zip}."
        if by_name:
            return {"name_zip": name_zip}, GoldAction(
                name="find_customer_by_name_zip",
                arguments={"first_name": c.first_name, "last_name": c.last_name, "zip": c.address.zip},
            )
        return {"email": f"My email is {c.email}.", "name_zip": name_zip}, GoldAction(
            name="find_customer_by_email", arguments={"email": c.email}
        )

    def original_pm(self, order: Order) -> str:
        return order.payment_history[0].payment_method_id

    def details(self, order: Order) -> GoldAction:
        return GoldAction(name="get_order_details", arguments={"order_id": order.order_id})

    def gift_card(self, ci: int) -> str | None:
        return next((p.id for p in self.customers[ci].payment_methods.values() if p.source == "gift_card"), None)

    def exchange_pair(
        self, order: Order, skip: int = 0, available: bool = True
    ) -> tuple[OrderItem, str, dict[str, str]] | None:
        """An item of `order` and another variant of its product (available or sold out)."""
        found = 0
        for it in order.items:
            product = self.db.products[it.product_id]
            if product.final_sale:
                continue
            for vid, v in product.variants.items():
                if vid != it.item_id and v.available == available:
                    if found == skip:
                        return it, vid, v.options
                    found += 1
                    break
        return None

    def add(
        self,
        family: Family,
        goal: str,
        facts: dict[FactKey, str],
        gold: list[GoldAction],
        info: list[str],
        opening: str,
        needs_refusal: bool = False,
    ) -> None:
        n = self.counts[family] = self.counts.get(family, 0) + 1
        task_id = f"shop-{_SHORT[family]}-{n:03d}"
        writes = sum(1 for g in gold if g.name in WRITE_TOOLS)
        self.tasks[task_id] = ShopTask(
            task_id=task_id,
            family=family,
            goal=goal,
            gold_actions=gold,
            required_info=info,
            user=UserScript(opening=opening, facts=facts, expected_writes=writes, needs_refusal=needs_refusal),
        )

    def cancel(self, ci: int, reason: str) -> tuple[dict[FactKey, str], list[GoldAction], str]:
        o = self.order(ci, 0)
        facts: dict[FactKey, str] = {
            "order_id": f"The order id is {o.order_id}.",
            "reason": f"The reason is: {reason}.",
        }
        cancel = GoldAction(name="cancel_pending_order", arguments={"order_id": o.order_id, "reason": reason})
        return facts, [self.details(o), cancel], money(o.total)

    def readdress(self, ci: int) -> tuple[dict[FactKey, str], list[GoldAction]]:
        o = self.order(ci, 0)
        street, suite, zip_code = f"{100 + ci * 7} Harbor Boulevard", f"Suite {ci + 2}", f"{43200 + ci}"
        new = dict(address1=street, address2=suite, city="Columbus", state="OH", country="USA", zip=zip_code)
        text = f"The new address is: {street}, {suite}, Columbus, OH, USA, zip {zip_code}."
        facts: dict[FactKey, str] = {"order_id": f"It's order {o.order_id}.", "address": text}
        return facts, [GoldAction(name="modify_pending_order_address", arguments={"order_id": o.order_id, **new})]

    def ret(self, ci: int, idx: list[int], to_gift: bool) -> tuple[dict[FactKey, str], list[GoldAction], str]:
        o = self.order(ci, 1)
        items = [o.items[i] for i in idx]
        pm = self.gift_card(ci) if to_gift else self.original_pm(o)
        assert pm is not None
        payment = (
            "Please put the refund on my gift card." if to_gift else "Refund it to the original payment method, please."
        )
        facts: dict[FactKey, str] = {
            "order_id": f"The order id is {o.order_id}.",
            "items": "I want to return " + " and ".join(item_text(it) for it in items) + ".",
            "payment": payment,
        }
        arguments = {"order_id": o.order_id, "item_ids": [it.item_id for it in items], "payment_method_id": pm}
        gold = [self.details(o), GoldAction(name="return_delivered_order_items", arguments=arguments)]
        return facts, gold, money(sum(it.price for it in items))

    def exchange(self, ci: int, n_items: int = 1) -> tuple[dict[FactKey, str], list[GoldAction], str]:
        o = self.order(ci, 1)
        pairs = [p for p in (self.exchange_pair(o, skip=s) for s in range(n_items)) if p]
        uniq = {p[0].item_id: p for p in pairs}
        pairs = list(uniq.values())[:n_items]
        assert len(pairs) == n_items, f"customer {ci} has no {n_items} exchangeable items"
        pm = self.original_pm(o)
        diff = round(sum(self.db.products[it.product_id].variants[new].price - it.price for it, new, _ in pairs), 2)
        facts: dict[FactKey, str] = {
            "order_id": f"The order id is {o.order_id}.",
            "items": "I want to exchange " + " and ".join(item_text(it) for it, _, _ in pairs) + ".",
            "exchange_target": " ".join(
                f"For {item_text(it)} I want {options_text(opts)} instead." for it, _, opts in pairs
            ),
            "payment": "Use the original payment method of the order.",
        }
        gold = [
            self.details(o),
            GoldAction(name="get_product_details", arguments={"product_id": pairs[0][0].product_id}),
            GoldAction(
                name="exchange_delivered_order_items",
                arguments={
                    "order_id": o.order_id,
                    "item_ids": [it.item_id for it, _, _ in pairs],
                    "new_item_ids": [new for _, new, _ in pairs],
                    "payment_method_id": pm,
                },
            ),
        ]
        return facts, gold, money(abs(diff))
