"""The shop's database: typed records and their deterministic generation.

`build_db()` always returns the same database (fixed seed, no clock, no I/O), so
task ids, gold actions and the DB-state hash are stable across machines.
`build_db(instance=k)` (k >= 1) is another, equally deterministic shop: other
names, emails, ids, prices and stock. Its tasks are new *instances* of the same
task templates -- used to teach the tiny base policy on data disjoint from the
shop it is evaluated on (`demo_policy.teach_data`).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import random
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

TODAY = "2025-06-15"  # the shop's "today"; the policy's return window counts from here
SEED = 20250615

OrderStatus = Literal[
    "pending", "processed", "shipped", "delivered", "cancelled", "return requested", "exchange requested"
]


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Address(Record):
    address1: str
    address2: str
    city: str
    state: str
    country: str
    zip: str


class PaymentMethod(Record):
    id: str
    source: Literal["credit_card", "paypal", "gift_card"]
    last_four: str | None = None
    balance: float | None = None  # gift cards only


class Variant(Record):
    item_id: str
    options: dict[str, str]
    price: float
    available: bool


class Product(Record):
    product_id: str
    name: str
    final_sale: bool = False
    variants: dict[str, Variant]


class Customer(Record):
    customer_id: str
    first_name: str
    last_name: str
    email: str
    address: Address
    payment_methods: dict[str, PaymentMethod]
    orders: list[str] = Field(default_factory=list)


class OrderItem(Record):
    item_id: str
    product_id: str
    name: str
    options: dict[str, str]
    price: float


class Transaction(Record):
    transaction_type: Literal["payment", "refund"]
    amount: float
    payment_method_id: str


class Order(Record):
    order_id: str
    customer_id: str
    status: OrderStatus
    address: Address
    items: list[OrderItem]
    payment_history: list[Transaction]
    created_date: str
    tracking_number: str | None = None
    delivered_date: str | None = None
    cancel_reason: str | None = None
    return_items: list[str] = Field(default_factory=list)
    return_payment_method_id: str | None = None
    exchange_items: list[str] = Field(default_factory=list)
    exchange_new_items: list[str] = Field(default_factory=list)
    exchange_payment_method_id: str | None = None
    exchange_price_difference: float | None = None

    @property
    def total(self) -> float:
        return round(sum(i.price for i in self.items), 2)


class ShopDB(Record):
    products: dict[str, Product]
    customers: dict[str, Customer]
    orders: dict[str, Order]

    def state_hash(self) -> str:
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()


_CATALOG: list[tuple[str, bool, dict[str, list[str]], float]] = [
    ("T-Shirt", False, {"color": ["black", "white", "blue", "red"], "size": ["S", "M", "L"]}, 19.0),
    ("Running Shoes", False, {"color": ["black", "grey"], "size": ["8", "9", "10", "11"]}, 89.0),
    ("Backpack", False, {"color": ["green", "navy", "black"]}, 54.0),
    ("Wireless Headphones", False, {"color": ["black", "silver", "white"]}, 129.0),
    ("Water Bottle", False, {"capacity": ["500ml", "750ml", "1000ml"]}, 17.0),
    ("Desk Lamp", False, {"color": ["white", "black", "brass"]}, 39.0),
    ("Yoga Mat", True, {"thickness": ["4mm", "6mm", "8mm"]}, 32.0),
    ("Mechanical Keyboard", False, {"switch": ["red", "blue", "brown"]}, 99.0),
]
_FIRST = (
    "Ava Liam Noah Mia Ethan Zoe Lucas Ivy Omar Sofia Mateo Chloe Yusuf Hana Leo Nora Raj Elena Kai Maya Felix Aria Hugo "
    "Lena".split()
)
_LAST = "Garcia Nguyen Patel Kim Rossi Silva Moreau Novak Haddad Larsen Okafor Tanaka".split()
_STREETS = "Oak Street|Maple Avenue|Cedar Lane|Pine Road|Elm Court|Birch Way|Lake Drive|Hill Street".split("|")
_CITIES = [
    ("Springfield", "IL"),
    ("Portland", "OR"),
    ("Austin", "TX"),
    ("Denver", "CO"),
    ("Madison", "WI"),
    ("Raleigh", "NC"),
]
_THIRD_STATUS: list[OrderStatus] = ["shipped", "delivered", "processed", "cancelled"]
N_CUSTOMERS = 24


def _date(days_before_today: int) -> str:
    # fixed calendar arithmetic from TODAY, never the machine's clock
    return (datetime.date.fromisoformat(TODAY) - datetime.timedelta(days=days_before_today)).isoformat()


def _catalog(rng: random.Random) -> dict[str, Product]:
    products: dict[str, Product] = {}
    for p_idx, (name, final_sale, opts, base) in enumerate(_CATALOG):
        combos: list[dict[str, str]] = [{}]
        for key, values in opts.items():
            combos = [{**c, key: v} for c in combos for v in values]
        variants: dict[str, Variant] = {}
        for v_idx, combo in enumerate(combos):
            item_id = str(rng.randrange(10**9, 10**10))
            price = round(base + rng.randrange(0, 1200) / 100, 2)
            available = v_idx != 1 and rng.random() > 0.15  # variant #1 is always sold out
            variants[item_id] = Variant(item_id=item_id, options=combo, price=price, available=available)
        pid = f"prod_{1001 + p_idx}"
        products[pid] = Product(product_id=pid, name=name, final_sale=final_sale, variants=variants)
    return products


def _order_items(rng: random.Random, products: dict[str, Product], n: int, must: str | None = None) -> list[OrderItem]:
    pids = sorted(products)
    chosen = rng.sample([p for p in pids if p != must], n - (1 if must else 0))
    if must:
        chosen.insert(rng.randrange(len(chosen) + 1), must)
    items = []
    for pid in chosen:
        variant = products[pid].variants[rng.choice(sorted(products[pid].variants))]
        item = {"item_id": variant.item_id, "product_id": pid, "name": products[pid].name}
        items.append(OrderItem(**item, options=dict(variant.options), price=variant.price))
    return items


def build_db(instance: int = 0) -> ShopDB:
    """The shop's initial database (identical on every call). `instance` 0 is THE shop;
    other values give other shops of the same shape (names drawn from the same lists)."""
    if instance < 0:
        raise ValueError(f"shop instance must be >= 0, got {instance}")
    rng = random.Random(SEED if instance == 0 else SEED * 1000 + instance)
    first_names, last_names = list(_FIRST), list(_LAST)
    if instance:
        rng.shuffle(first_names)
        rng.shuffle(last_names)
    products = _catalog(rng)
    customers: dict[str, Customer] = {}
    orders: dict[str, Order] = {}
    used_order_ids: set[str] = set()
    yoga = next(pid for pid, p in products.items() if p.final_sale)
    for i in range(N_CUSTOMERS):
        first, last = first_names[i], last_names[i % len(last_names)]
        city, state = _CITIES[i % len(_CITIES)]
        street = f"{rng.randrange(10, 999)} {_STREETS[i % len(_STREETS)]}"
        apt = f"Apt {rng.randrange(1, 40)}" if i % 3 else ""
        address = Address(
            address1=street, address2=apt, city=city, state=state, country="USA", zip=f"{rng.randrange(10000, 99999)}"
        )
        cid = f"{first.lower()}_{last.lower()}_{rng.randrange(1000, 9999)}"
        card = f"credit_card_{rng.randrange(10**6, 10**7)}"
        methods = [PaymentMethod(id=card, source="credit_card", last_four=f"{rng.randrange(1000, 9999)}")]
        if i % 2 == 0:
            methods.append(PaymentMethod(id=f"paypal_{rng.randrange(10**6, 10**7)}", source="paypal"))
        if i % 3 != 2:
            gift = f"gift_card_{rng.randrange(10**6, 10**7)}"
            methods.append(PaymentMethod(id=gift, source="gift_card", balance=float(rng.randrange(20, 300))))
        pms = {pm.id: pm for pm in methods}
        email = f"{first.lower()}.{last.lower()}{rng.randrange(10, 99)}@example.com"
        customer = Customer(
            customer_id=cid, first_name=first, last_name=last, email=email, address=address, payment_methods=pms
        )
        plan: list[tuple[OrderStatus, int, str | None]] = [
            ("pending", 2, None),
            ("delivered", 3 if i % 2 else 2, yoga if i % 6 == 0 else None),
            (_THIRD_STATUS[i % 4], 2, None),
        ]
        for k, (status, n_items, must) in enumerate(plan):
            while (oid := f"#W{rng.randrange(10**6, 10**7)}") in used_order_ids:
                pass
            used_order_ids.add(oid)
            items = _order_items(rng, products, n_items, must)
            pm = sorted(pms)[rng.randrange(len(pms))]
            total = round(sum(it.price for it in items), 2)
            recent = k == 1 or status != "delivered"
            delivered_ago = rng.randrange(3, 25) if recent else rng.randrange(40, 90)
            order = Order(
                order_id=oid,
                customer_id=cid,
                status=status,
                address=address.model_copy(),
                items=items,
                payment_history=[Transaction(transaction_type="payment", amount=total, payment_method_id=pm)],
                created_date=_date(delivered_ago + 5 if status == "delivered" else rng.randrange(1, 6)),
            )
            if status in ("shipped", "delivered"):
                order.tracking_number = f"{rng.randrange(10**11, 10**12)}"
            if status == "delivered":
                order.delivered_date = _date(delivered_ago)
            if status == "cancelled":
                order.cancel_reason = "no longer needed"
                order.payment_history.append(Transaction(transaction_type="refund", amount=total, payment_method_id=pm))
            orders[oid] = order
            customer.orders.append(oid)
        customers[cid] = customer
    return ShopDB(products=products, customers=customers, orders=orders)
