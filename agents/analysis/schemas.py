"""The analyst's structured outputs, validated beyond types. The checks that depend on the call (episode ids shown,
capabilities, the episode's message count) live in subclasses made per call (`discovery_schema` / `label_schema`): a
violation is a validation error like any other, re-asked once, then a failure. The JSON schema the model sees is the
same for every call of a pass (prefix caching).
"""

from __future__ import annotations

import contextvars
import copy
import functools
import hashlib
import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
# Messages in the episode being labeled: set by the labeling call around its model call (a
# contextvar, so concurrent calls on one event loop each see their own), read by the validator.
EPISODE_MESSAGES: contextvars.ContextVar[int | None] = contextvars.ContextVar("episode_messages", default=None)


class _CachedSchema(BaseModel):
    """JSON schema generated once per class: langchain converts the schema on every structured
    call, and pydantic regenerates it each time (~15 ms of CPU per labeling call)."""

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        key = (cls, repr(args), repr(sorted(kwargs.items())))
        if key not in _SCHEMAS:
            _SCHEMAS[key] = super().model_json_schema(*args, **kwargs)
        return copy.deepcopy(_SCHEMAS[key])


_SCHEMAS: dict[tuple[Any, str, str], dict[str, Any]] = {}


class CapabilityDef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="snake_case name of the capability")
    definition: str = Field(description="2-3 sentences, general (not specific to one task)")
    example_episode_ids: list[int] = Field(description="ids of shown episodes that illustrate it")


class CapabilityDictionary(_CachedSchema):
    """Discovery's answer: the candidate capabilities."""

    model_config = ConfigDict(extra="forbid")

    capabilities: list[CapabilityDef]


class CapabilityLabel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    capability: str
    label: Literal["NA", "PRESENT", "LACKING"]
    evidence: str = Field(description="one line; cite the message as [index]")
    message_index: int | None = Field(description="index of the cited message; null only for NA")


class EpisodeLabels(_CachedSchema):
    """Labeling's answer for one episode: every capability exactly once."""

    model_config = ConfigDict(extra="forbid")

    labels: list[CapabilityLabel]


def dictionary_hash(capabilities: list[tuple[str, str]]) -> str:
    """A stable hash of (name, definition) pairs: part of the labeling cache key."""
    blob = json.dumps(sorted(capabilities), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def dictionary_problems(answer: CapabilityDictionary, sample_ids: frozenset[int], lo: int, hi: int) -> list[str]:
    problems = []
    names = [c.name for c in answer.capabilities]
    if not lo <= len(names) <= hi:
        problems.append(f"propose between {lo} and {hi} capabilities, got {len(names)}")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        problems.append(f"capability names must be unique, repeated: {', '.join(dup)}")
    bad = [n for n in names if not SNAKE.match(n)]
    if bad:
        problems.append(f"names must be snake_case: {', '.join(bad)}")
    for c in answer.capabilities:
        if not c.definition.strip():
            problems.append(f"capability {c.name!r} has an empty definition")
        if not c.example_episode_ids:
            problems.append(f"capability {c.name!r} needs at least one example episode id")
        unknown = sorted(set(c.example_episode_ids) - sample_ids)
        if unknown:
            problems.append(f"capability {c.name!r} cites episode ids not shown: {unknown}")
    return problems


def label_problems(answer: EpisodeLabels, names: tuple[str, ...], n_messages: int | None) -> list[str]:
    """What is wrong with a labeling answer (empty: valid); n_messages None skips the index range check."""
    problems = []
    given = [lab.capability for lab in answer.labels]
    unknown = sorted(set(given) - set(names))
    if unknown:
        problems.append(f"unknown capabilities: {', '.join(unknown)} (use exactly: {', '.join(names)})")
    dup = sorted({n for n in given if given.count(n) > 1})
    if dup:
        problems.append(f"each capability exactly once, repeated: {', '.join(dup)}")
    missing = [n for n in names if n not in given]
    if missing:
        problems.append(f"missing capabilities: {', '.join(missing)}")
    for lab in answer.labels:
        idx = lab.message_index
        if lab.label != "NA" and idx is None:
            problems.append(f"{lab.capability}: {lab.label} needs a message_index")
        if idx is not None and n_messages is not None and not 0 <= idx < n_messages:
            problems.append(f"{lab.capability}: message_index {idx} out of range 0..{n_messages - 1}")
    return problems


def _checked(base: type[BaseModel], problems: Any) -> Any:
    """A subclass of `base` whose validation also fails on `problems(answer)`; named like `base` (the tool name and
    schema title the model sees)."""

    def semantic(self: BaseModel) -> BaseModel:
        found = problems(self)
        if found:
            raise ValueError("; ".join(found))
        return self

    checked = type(f"{base.__name__}Checked", (base,), {"_semantic": model_validator(mode="after")(semantic)})
    checked.__name__ = base.__name__
    return checked


@functools.lru_cache(maxsize=256)
def discovery_schema(sample_ids: frozenset[int], lo: int, hi: int) -> type[CapabilityDictionary]:
    return _checked(CapabilityDictionary, lambda answer: dictionary_problems(answer, sample_ids, lo, hi))


@functools.lru_cache(maxsize=256)
def label_schema(names: tuple[str, ...]) -> type[EpisodeLabels]:
    """One class per dictionary (same JSON schema for every call of a pass); the episode's
    message count comes from EPISODE_MESSAGES."""
    return _checked(EpisodeLabels, lambda answer: label_problems(answer, names, EPISODE_MESSAGES.get()))
