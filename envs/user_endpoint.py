"""`UserEndpoint`: the OpenAI-compatible chat endpoint a benchmark's own LLM user simulator talks to (τ²'s through
litellm, ToolSandbox's through the OpenAI client in its worker) and τ²'s NL-assertion judge. `coerce_endpoint` takes a
UserEndpoint, a dict of its fields or an object with those attributes (gapforge's `EndpointConfig`, as
`rollouts.user=llm` passes it); a bad one is a one-line EnvError naming the field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from gapforge.envs.errors import EnvError, is_transient_status
from gapforge.faults import first_problem


class UserEndpoint(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, description="model name; τ² with base_url sends it as 'openai/<model>' to litellm")
    base_url: str | None = Field(
        None, description="e.g. http://localhost:8000/v1; None = the provider's default (litellm infers it for τ²)"
    )
    api_key: SecretStr | None = None
    temperature: float = Field(
        0.0, ge=0.0, le=2.0, description="τ²'s simulator and judge; ToolSandbox's user keeps its own"
    )
    timeout_s: float = Field(120.0, gt=0)
    max_retries: int = Field(2, ge=0, le=20)

    def secret(self) -> str:
        return self.api_key.get_secret_value() if self.api_key else ""


def coerce_endpoint(user_model: Any, who: str) -> UserEndpoint:
    """`user_model` as a UserEndpoint (module docstring); `who` names the simulator in errors ("tau2 user simulator")."""
    if user_model is None:
        raise EnvError("user='llm' needs user_model: an OpenAI-compatible endpoint (model, base_url, api_key)")
    if isinstance(user_model, UserEndpoint):
        return user_model
    if isinstance(user_model, Mapping):
        fields = dict(user_model)
    else:
        fields = {
            name: getattr(user_model, name)
            for name in UserEndpoint.model_fields
            if getattr(user_model, name, None) is not None
        }
    try:
        return UserEndpoint.model_validate(fields)
    except ValidationError as exc:
        raise EnvError(f"bad endpoint for the {who}: {first_problem(exc)}") from exc


# what litellm's, the OpenAI client's and httpx's errors are called when the endpoint is away or overloaded
_DOWN = frozenset(
    "APIConnectionError APITimeoutError Timeout RateLimitError ServiceUnavailableError InternalServerError "
    "ConnectError ConnectTimeout ReadTimeout".split()
)


def endpoint_down(type_name: str, status: int | None = None) -> bool:
    """Whether a client error (its class name, its HTTP status) says the endpoint is down or overloaded
    (SimulatorEndpointError), not that the request or the reply was wrong."""
    return type_name in _DOWN or (isinstance(status, int) and is_transient_status(status))
