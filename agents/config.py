"""The agents layer's config sections (`llm:`, `policy:`, `rollouts:` in the one config
tree, composed by gapforge/config.py): the chat endpoints of the LLM roles, the policy
being evaluated/trained, and rollout collection. Env vars are read only by the loader."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class EndpointConfig(_Section):
    """An OpenAI-compatible chat endpoint."""

    base_url: str | None = Field(None, description="e.g. http://localhost:8000/v1; None = OpenAI's default")
    model: str = "gpt-4o-mini"
    api_key_env: str = Field("OPENAI_API_KEY", description="name of the env var holding the key")
    api_key: SecretStr | None = Field(None, exclude=True, description="filled by the loader from api_key_env")
    timeout_s: float = Field(120.0, gt=0)
    max_retries: int = Field(4, ge=0, le=20)
    retry_backoff_s: float = Field(1.0, ge=0.0, le=60.0, description="first retry wait; doubles per attempt (at least what Retry-After asks)")
    breaker_failures: int = Field(8, ge=1, description="consecutive failed requests that mark the endpoint down (circuit open)")
    breaker_cooldown_s: float = Field(30.0, ge=0.0, description="while down, calls fail at once; then one probe request is tried")
    temperature: float = Field(0.0, ge=0.0, le=2.0)


class LLMConfig(_Section):
    """The agent roles (analyst, generator, validator, user simulator)."""

    kind: Literal["scripted", "openai"] = "scripted"
    scripted_path: str | None = Field(None, description="YAML/JSON of recorded answers keyed by prompt name")
    endpoint: EndpointConfig = Field(default_factory=EndpointConfig)


class PolicyConfig(_Section):
    """The policy being evaluated/trained."""

    kind: Literal["scripted", "endpoint", "local"] = "scripted"
    endpoint: EndpointConfig = Field(default_factory=lambda: EndpointConfig(temperature=1.0))
    local_path: str | None = Field(None, description="directory of a Hugging Face model (kind=local)")
    adapter_path: str | None = Field(None, description="optional PEFT adapter applied on the local model")
    scripted_path: str | None = None
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    max_new_tokens: int = Field(512, gt=0)


class RolloutConfig(_Section):
    env: str = Field("shop", description="shop | tau2:retail | tau2:airline | tau2:telecom")
    samples: int = Field(1, ge=1, description="episodes per task")
    concurrency: int = Field(8, ge=1, le=1024, description="episodes in flight (and worker threads for blocking envs)")
    max_turns: int = Field(30, ge=1)
    tasks: list[str] | None = Field(None, description="task ids; None = all")
    user: Literal["scripted", "llm"] = "scripted"
