"""network="stand-in": ToolSandbox's RapidAPI tools answered from standin_rapidapi.json (ToolSandbox venv only).

Only the HTTP call is replaced: `tool_sandbox.tools.rapid_api_search_tools` keeps its tools, validators, wifi check
and post-processing; its module-level `requests` becomes `StandInRequests`, answering in each service's shape from
the stand-in data (written from the scenarios' milestone constants, never fetched or recorded), so such scores are
not comparable to live runs. An uncovered query gets the service's "nothing found" shape. Every request is logged,
so the score can say which answers the data had and which were misses.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import tool_sandbox.tools.rapid_api_search_tools as rapid_api

DATA = Path(__file__).resolve().parent / "standin_rapidapi.json"
_ORIGINAL_REQUESTS = rapid_api.requests
KEY_PLACEHOLDER = "stand-in-answers-no-network"


class _Response:
    def __init__(self, payload: dict[str, Any]) -> None:
        self._payload = payload

    def json(self) -> dict[str, Any]:
        return json.loads(json.dumps(self._payload))  # a fresh copy: the tools mutate what they get


def _near(a: float, b: float, tol: float) -> bool:
    return abs(float(a) - float(b)) <= tol


def _near_record(records: list[dict[str, Any]], text: str) -> dict[str, Any] | None:
    """The first record within its `tolerance` of the "lat,lon" in `text` (None for none, or no lat,lon)."""
    try:
        lat, lon = (float(x) for x in str(text).split(","))
    except ValueError:
        return None
    return next(
        (
            r
            for r in records
            if _near(lat, r["latitude"], r["tolerance"]) and _near(lon, r["longitude"], r["tolerance"])
        ),
        None,
    )


class StandInRequests:
    """Stands in for the `requests` module inside ToolSandbox's RapidAPI tools."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.log: list[dict[str, Any]] = []

    def get(
        self, url: str, headers: dict[str, Any] | None = None, params: dict[str, Any] | None = None, **_: Any
    ) -> _Response:
        params = dict(params or {})
        host = str((headers or {}).get("X-RapidAPI-Host") or url.split("/")[2])
        handler = {
            "trueway-geocoding.p.rapidapi.com": self._geocode,
            "maps-data.p.rapidapi.com": self._places,
            "weatherapi-com.p.rapidapi.com": self._weather,
            "real-time-finance-data.p.rapidapi.com": self._stock,
            "currency-converter18.p.rapidapi.com": self._currency,
        }.get(host)
        payload, hit = handler(params) if handler else ({}, False)
        self.log.append({"service": host, "params": {k: str(v) for k, v in params.items()}, "answered": hit})
        return _Response(payload)

    def _geocode(self, params: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        rec = _near_record(self.data["reverse_geocode"], params.get("location", ""))
        return ({"results": [{"address": rec["address"]}]}, True) if rec else ({"results": []}, False)

    def _places(self, params: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        query = " ".join(str(params.get("query", "")).lower().split())
        found = [rec for rec in self.data["places"] if rec["match"] in query]
        found.sort(key=lambda rec: not any(p in query for p in rec["prefer"]))
        limit = int(params.get("limit", 4))
        return {"status": "OK", "data": [dict(rec["result"]) for rec in found[:limit]]}, bool(found)

    def _weather(self, params: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        rec = _near_record(self.data["weather"], str(params.get("q", "")))
        days = int(params.get("days", 1))
        if rec is None:
            return {"error": {"code": 1006, "message": "No matching location found."}}, False
        forecast = {"forecastday": [dict(d) for d in rec["days"][:days]]}
        return {"location": rec["location"], "current": rec["current"], "forecast": forecast}, days <= len(rec["days"])

    def _stock(self, params: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        query = str(params.get("query", "")).strip().lower()
        for rec in self.data["stocks"]:
            if query in rec["match"]:
                return {"status": "OK", "data": {"stock": [rec["stock"]]}}, True
        return {"status": "OK", "data": {"stock": []}}, False

    def _currency(self, params: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        rates = self.data["currency_per_usd"]
        src, dst = str(params.get("from", "")).upper(), str(params.get("to", "")).upper()
        if src not in rates or dst not in rates:
            return {
                "success": False,
                "validationMessage": [f"unknown currency {src if src not in rates else dst}"],
            }, False
        amount = float(params.get("amount", 0))
        converted = round(amount / rates[src] * rates[dst], 4)
        return {
            "success": True,
            "result": {"from": src, "to": dst, "amountToConvert": amount, "convertedAmount": converted},
        }, True


_ACTIVE: StandInRequests | None = None


def use(mode: str) -> None:
    """Switch this worker's RapidAPI layer: "stand-in" (answers from the data file) or "off" (ToolSandbox's own requests)."""
    global _ACTIVE
    if mode == "stand-in":
        if _ACTIVE is None:
            _ACTIVE = StandInRequests(json.loads(DATA.read_text()))
        _ACTIVE.log = []
        rapid_api.requests = _ACTIVE
        os.environ.setdefault("RAPID_API_KEY", KEY_PLACEHOLDER)  # its key check passes; no request leaves the process
    else:
        rapid_api.requests = _ORIGINAL_REQUESTS
        if os.environ.get("RAPID_API_KEY") == KEY_PLACEHOLDER:
            del os.environ["RAPID_API_KEY"]


def report() -> dict[str, Any] | None:
    """What the stand-in layer served this episode (None when it is not active)."""
    if _ACTIVE is None or rapid_api.requests is not _ACTIVE:
        return None
    return {
        "source": DATA.name,
        "sha256": hashlib.sha256(DATA.read_bytes()).hexdigest()[:12],
        "calls": len(_ACTIVE.log),
        "misses": sum(not c["answered"] for c in _ACTIVE.log),
        "log": list(_ACTIVE.log),
    }
