"""The shop's tools: OpenAI function schemas and their implementation over a ShopDB.

Read tools never change the DB; write tools do, after checking the rules the
policy makes them enforce (identity verified, order owned by that customer,
order status, payment method). A rule violation or a bad id raises ToolError,
which the environment turns into an error tool message: never an exception
out of `step`. Results are JSON strings.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from gapforge.envs.protocol import tool_schema
from gapforge.envs.shop.data import Address, Order, ShopDB, Transaction

CANCEL_REASONS = ("no longer needed", "ordered by mistake")
_S = {"type": "string"}
_IDS = {"type": "array", "items": {"type": "string"}}


class ToolError(Exception):
    """A tool refused the call (bad id, bad argument, policy rule); the message goes back to the agent."""


SCHEMAS: list[dict[str, Any]] = [
    tool_schema(
        "find_customer_by_email",
        "Find a customer's id by email address. Verifies the customer's identity.",
        {"email": _S},
    ),
    tool_schema(
        "find_customer_by_name_zip",
        "Find a customer's id by first name, last name and zip code. Verifies the customer's identity.",
        {"first_name": _S, "last_name": _S, "zip": _S},
    ),
    tool_schema(
        "get_customer_details",
        "Get a customer's profile: name, email, address, payment methods (with gift card balances), order ids.",
        {"customer_id": _S},
    ),
    tool_schema("list_customer_orders", "List a customer's orders with their status and total.", {"customer_id": _S}),
    tool_schema(
        "get_order_details",
        "Get an order: status, items (item ids, options, prices), address, payments, tracking, dates.",
        {"order_id": {"type": "string", "description": "e.g. '#W1234567'"}},
    ),
    tool_schema("list_products", "List all products with their product ids.", {}),
    tool_schema(
        "get_product_details",
        "Get a product's variants: item id, options, price, availability; and whether it is final sale.",
        {"product_id": _S},
    ),
    tool_schema(
        "cancel_pending_order",
        "Cancel a pending order and refund it to the original payment method(s). Write action.",
        {"order_id": _S, "reason": {"type": "string", "enum": list(CANCEL_REASONS)}},
    ),
    tool_schema(
        "modify_pending_order_address",
        "Change the shipping address of a pending order. Write action.",
        {"order_id": _S, "address1": _S, "address2": _S, "city": _S, "state": _S, "country": _S, "zip": _S},
    ),
    tool_schema(
        "return_delivered_order_items",
        "Request a return of items of a delivered order; the refund goes to the given payment method "
        "(the original one or a gift card of the customer). Write action.",
        {"order_id": _S, "item_ids": _IDS, "payment_method_id": _S},
    ),
    tool_schema(
        "exchange_delivered_order_items",
        "Exchange items of a delivered order for available variants of the same products; the "
        "price difference is charged or refunded to the given payment method. Write action.",
        {"order_id": _S, "item_ids": _IDS, "new_item_ids": _IDS, "payment_method_id": _S},
    ),
    tool_schema(
        "transfer_to_human_agents",
        "Transfer the customer to a human agent, with a summary of the issue. Ends the conversation.",
        {"summary": _S},
    ),
]
TRANSFER_TOOL = "transfer_to_human_agents"
WRITE_TOOLS = frozenset(s["function"]["name"] for s in SCHEMAS if "Write action." in s["function"]["description"])
READ_TOOLS = frozenset(s["function"]["name"] for s in SCHEMAS) - WRITE_TOOLS - {TRANSFER_TOOL}
_BY_NAME = {s["function"]["name"]: s["function"]["parameters"] for s in SCHEMAS}


def _dump(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True)


def _order_dump(order: Order) -> str:
    return _dump({**order.model_dump(mode="json"), "total": order.total})


def _check_args(name: str, args: dict[str, Any]) -> None:
    params = _BY_NAME[name]
    missing = [r for r in params["required"] if r not in args]
    extra = [a for a in args if a not in params["properties"]]
    if missing or extra:
        raise ToolError(f"bad arguments for {name}: missing {missing}, unexpected {extra}")
    for key, value in args.items():
        spec = params["properties"][key]
        if spec["type"] == "string" and not isinstance(value, str):
            raise ToolError(f"bad arguments for {name}: '{key}' must be a string")
        if spec["type"] == "array" and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise ToolError(f"bad arguments for {name}: '{key}' must be a list of strings")
        if "enum" in spec and value not in spec["enum"]:
            raise ToolError(f"bad arguments for {name}: '{key}' must be one of {spec['enum']}")


class ShopTools:
    """Tool implementations bound to one episode's DB and its verified customer."""

    def __init__(self, db: ShopDB) -> None:
        self.db = db
        self.verified_customer: str | None = None

    def call(self, name: str, args: dict[str, Any]) -> str:
        if name not in _BY_NAME:
            raise ToolError(f"unknown tool '{name}'")
        _check_args(name, args)
        fn: Callable[..., str] = getattr(self, name)
        return fn(**args)

    def find_customer_by_email(self, email: str) -> str:
        for c in self.db.customers.values():
            if c.email.lower() == email.strip().lower():
                self.verified_customer = c.customer_id
                return _dump({"customer_id": c.customer_id})
        raise ToolError("customer not found")

    def find_customer_by_name_zip(self, first_name: str, last_name: str, zip: str) -> str:
        wanted = (first_name.strip().lower(), last_name.strip().lower(), zip.strip())
        for c in self.db.customers.values():
            if (c.first_name.lower(), c.last_name.lower(), c.address.zip) == wanted:
                self.verified_customer = c.customer_id
                return _dump({"customer_id": c.customer_id})
        raise ToolError("customer not found")

    def get_customer_details(self, customer_id: str) -> str:
        if customer_id not in self.db.customers:
            raise ToolError(f"customer '{customer_id}' not found")
        return _dump(self.db.customers[customer_id].model_dump(mode="json"))

    def list_customer_orders(self, customer_id: str) -> str:
        if customer_id not in self.db.customers:
            raise ToolError(f"customer '{customer_id}' not found")
        orders = [self.db.orders[o] for o in self.db.customers[customer_id].orders]
        return _dump([{"order_id": o.order_id, "status": o.status, "total": o.total} for o in orders])

    def get_order_details(self, order_id: str) -> str:
        order = self._order(order_id)
        return _order_dump(order)

    def list_products(self) -> str:
        return _dump({p.name: p.product_id for p in self.db.products.values()})

    def get_product_details(self, product_id: str) -> str:
        if product_id not in self.db.products:
            raise ToolError(f"product '{product_id}' not found")
        return _dump(self.db.products[product_id].model_dump(mode="json"))

    def cancel_pending_order(self, order_id: str, reason: str) -> str:
        order = self._owned_order(order_id)
        self._require_status(order, "pending", "be cancelled")
        order.status = "cancelled"
        order.cancel_reason = reason
        for tx in [t for t in order.payment_history if t.transaction_type == "payment"]:
            order.payment_history.append(
                Transaction(transaction_type="refund", amount=tx.amount, payment_method_id=tx.payment_method_id)
            )
            pm = self.db.customers[order.customer_id].payment_methods[tx.payment_method_id]
            if pm.source == "gift_card" and pm.balance is not None:
                pm.balance = round(pm.balance + tx.amount, 2)
        return _order_dump(order)

    def modify_pending_order_address(
        self, order_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
    ) -> str:
        order = self._owned_order(order_id)
        self._require_status(order, "pending", "have its address changed")
        order.address = Address(address1=address1, address2=address2, city=city, state=state, country=country, zip=zip)
        return _order_dump(order)

    def return_delivered_order_items(self, order_id: str, item_ids: list[str], payment_method_id: str) -> str:
        order = self._owned_order(order_id)
        self._require_status(order, "delivered", "be returned")
        self._check_items(order, item_ids)
        original = {t.payment_method_id for t in order.payment_history if t.transaction_type == "payment"}
        pm = self.db.customers[order.customer_id].payment_methods.get(payment_method_id)
        if pm is None:
            raise ToolError(f"payment method '{payment_method_id}' not found for this customer")
        if payment_method_id not in original and pm.source != "gift_card":
            raise ToolError("refunds go to the original payment method or a gift card of the customer")
        order.status = "return requested"
        order.return_items = sorted(item_ids)
        order.return_payment_method_id = payment_method_id
        refund = round(sum(i.price for i in order.items if i.item_id in item_ids), 2)
        return _dump({**order.model_dump(mode="json"), "refund_amount": refund})

    def exchange_delivered_order_items(
        self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> str:
        order = self._owned_order(order_id)
        self._require_status(order, "delivered", "be exchanged")
        self._check_items(order, item_ids)
        if len(new_item_ids) != len(item_ids):
            raise ToolError("item_ids and new_item_ids must have the same length")
        diff = 0.0
        for old_id, new_id in zip(item_ids, new_item_ids):
            old = next(i for i in order.items if i.item_id == old_id)
            variant = self.db.products[old.product_id].variants.get(new_id)
            if variant is None:
                raise ToolError(f"new item '{new_id}' is not a variant of the same product as '{old_id}'")
            if new_id == old_id:
                raise ToolError(f"new item '{new_id}' is the same as the old one")
            if not variant.available:
                raise ToolError(f"new item '{new_id}' is not available")
            diff += variant.price - old.price
        diff = round(diff, 2)
        pm = self.db.customers[order.customer_id].payment_methods.get(payment_method_id)
        if pm is None:
            raise ToolError(f"payment method '{payment_method_id}' not found for this customer")
        if pm.source == "gift_card" and diff > 0 and (pm.balance or 0.0) < diff:
            raise ToolError("insufficient gift card balance to pay the price difference")
        order.status = "exchange requested"
        pairs = sorted(zip(item_ids, new_item_ids))
        order.exchange_items = [old for old, _ in pairs]
        order.exchange_new_items = [new for _, new in pairs]
        order.exchange_payment_method_id = payment_method_id
        order.exchange_price_difference = diff
        return _dump({**order.model_dump(mode="json"), "price_difference": diff})

    def transfer_to_human_agents(self, summary: str) -> str:
        return _dump({"result": "Transfer successful"})

    def _order(self, order_id: str) -> Order:
        oid = order_id.strip() if order_id.strip().startswith("#") else f"#{order_id.strip()}"
        if oid not in self.db.orders:
            raise ToolError(f"order '{order_id}' not found")
        return self.db.orders[oid]

    def _owned_order(self, order_id: str) -> Order:
        if self.verified_customer is None:
            raise ToolError("identity not verified: find the customer by email, or by name and zip code, first")
        order = self._order(order_id)
        if order.customer_id != self.verified_customer:
            raise ToolError(f"order '{order_id}' does not belong to the verified customer")
        return order

    @staticmethod
    def _require_status(order: Order, status: str, action: str) -> None:
        if order.status != status:
            raise ToolError(f"order {order.order_id} is '{order.status}': only {status} orders can {action}")

    @staticmethod
    def _check_items(order: Order, item_ids: list[str]) -> None:
        if not item_ids or len(set(item_ids)) != len(item_ids):
            raise ToolError("item_ids must be a non-empty list without duplicates")
        known = {i.item_id for i in order.items}
        missing = [i for i in item_ids if i not in known]
        if missing:
            raise ToolError(f"items {missing} are not in order {order.order_id}")
