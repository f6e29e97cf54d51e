"""User simulators for the ToolSandbox env: ToolSandbox's own LLM user on an endpoint, or a scripted user.

Both run inside the worker (worker/ts_roles.py). The LLM user is ToolSandbox's
`OpenAIAPIUser` (its user instruction and few-shot examples come with each
scenario) with its client pointed at the configured OpenAI-compatible endpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from gapforge.envs.errors import EnvError


class UserEndpoint(BaseModel):
    """An OpenAI-compatible chat endpoint for ToolSandbox's LLM user simulator."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    base_url: str | None = Field(
        None, description="e.g. http://localhost:8000/v1; None = OpenAI's default (as gapforge's EndpointConfig)"
    )
    api_key: SecretStr | None = None
    timeout_s: float = Field(120.0, gt=0)
    max_retries: int = Field(2, ge=0, le=20)


def coerce_endpoint(user_model: Any) -> UserEndpoint:
    """A UserEndpoint, a dict of its fields, or an object with those attributes (gapforge's `llm.endpoint`
    EndpointConfig, as `rollouts.user=llm` passes it)."""
    if user_model is None:
        raise EnvError("user='llm' needs user_model: an OpenAI-compatible endpoint (model, base_url, api_key)")
    if isinstance(user_model, UserEndpoint):
        return user_model
    if isinstance(user_model, Mapping):
        fields = {k: v for k, v in user_model.items() if k in UserEndpoint.model_fields}
    else:
        fields = {
            name: getattr(user_model, name)
            for name in UserEndpoint.model_fields
            if getattr(user_model, name, None) is not None
        }
    try:
        return UserEndpoint.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise EnvError(
            f"bad user_model for the ToolSandbox user simulator: {'.'.join(map(str, first['loc']))}: {first['msg']}"
        ) from exc


def user_spec(kind: str, user_model: Any, replies: list[str] | None = None) -> dict[str, Any]:
    """The worker's user description (wire format)."""
    if kind == "scripted":
        return {"kind": "scripted", "replies": list(replies or [])}
    endpoint = coerce_endpoint(user_model)
    return {
        "kind": "llm",
        "model": endpoint.model,
        "base_url": endpoint.base_url,
        "api_key": endpoint.api_key.get_secret_value() if endpoint.api_key else "",
        "timeout_s": endpoint.timeout_s,
        "max_retries": endpoint.max_retries,
    }
