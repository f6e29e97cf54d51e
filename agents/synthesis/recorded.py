"""Recorded generator / reviewer answers (gapforge.demo_data.RECORDINGS_DIR) as ScriptedChatModel rules: prompt name ->
capability -> one answer per attempt. The rule reads the capability and attempt from the rendered prompt
("Capability: ...", "Attempt: N"), so a resumed run gets the answer of the attempt it resumes at. Every answer still
goes through the real static gate, sandbox checks and repair loop.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from langchain_core.messages import BaseMessage

from gapforge.agents.errors import ModelError
from gapforge.agents.scripted import ScriptedChatModel
from gapforge.demo_data import RECORDINGS_DIR

SHOP_RECORDINGS = RECORDINGS_DIR / "shop.yaml"  # read as data, never imported
_CAP = re.compile(r"^Capability: (\S+)$", re.MULTILINE)
_ATTEMPT = re.compile(r"^Attempt: (\d+)", re.MULTILINE)


def _key(messages: list[BaseMessage]) -> tuple[str, int]:
    for m in messages:
        text = m.content if isinstance(m.content, str) else ""
        cap, attempt = _CAP.search(text), _ATTEMPT.search(text)
        if cap and attempt:
            return cap.group(1), int(attempt.group(1))
    raise ModelError("recorded synthesis answers: the prompt names no 'Capability:' and 'Attempt:' lines")


def synthesis_rules(path: str | Path | None = None) -> dict[str, Any]:
    """{prompt name: rule} for ScriptedChatModel (merge with other roles' recorded answers)."""
    p = Path(path) if path else SHOP_RECORDINGS
    if not p.is_file():
        raise ModelError(f"synthesis recordings '{p}' not found: set synthesis.recordings to a YAML file")
    data = yaml.safe_load(p.read_text()) or {}
    rules: dict[str, Any] = {}
    for prompt, by_capability in data.items():
        answers: dict[str, list[dict[str, Any]]] = {}
        for cap, items in (by_capability or {}).items():
            answers[cap] = [_load(p.parent, prompt, cap, i, item) for i, item in enumerate(items or [])]
        rules[prompt] = _rule(prompt, answers, str(p))
    return rules


def _load(base: Path, prompt: str, cap: str, i: int, item: dict[str, Any]) -> dict[str, Any]:
    item = dict(item)
    if "code_file" in item:
        f = base / item.pop("code_file")
        if not f.is_file():
            raise ModelError(f"recording {prompt}/{cap} #{i + 1}: code file '{f}' not found")
        item["code"] = f.read_text()
    return {"structured": item}


def _rule(prompt: str, answers: dict[str, list[dict[str, Any]]], source: str) -> Any:
    def rule(messages: list[BaseMessage], tools: list[dict[str, Any]]) -> dict[str, Any]:
        cap, attempt = _key(messages)
        if not answers.get(cap):
            raise ModelError(
                f"no recorded '{prompt}' answer for capability '{cap}' in {source}; record one or use llm.kind openai"
            )
        return answers[cap][min(attempt, len(answers[cap])) - 1]

    return rule


def recorded_synthesis_model(path: str | Path | None = None) -> ScriptedChatModel:
    return ScriptedChatModel.from_dict(synthesis_rules(path), source=str(path or SHOP_RECORDINGS))
