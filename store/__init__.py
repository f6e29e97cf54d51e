"""The store: SQLAlchemy models, engine/sessions and the queries later stages use (docs/store.md).

Names are imported lazily (PEP 562) so that `store.errors` / `store.config` cost no
SQLAlchemy import (the CLI imports them at startup for its error policy and config tree).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_WHERE = {"LabelIn": "analysis", "Store": "db", "StoreError": "errors"}  # name -> its module in this package
__all__ = ["LabelIn", "Store", "StoreError"]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from gapforge.store.analysis import LabelIn
    from gapforge.store.db import Store
    from gapforge.store.errors import StoreError
