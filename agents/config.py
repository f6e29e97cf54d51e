"""The agents layer's config sections (`llm:`, `policy:`, `rollouts:` in the one config
tree, composed by gapforge/config.py): the chat endpoints of the LLM roles, the policy
being evaluated/trained, and rollout collection. Env vars are read only by the loader."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SecretStr, field_validator, model_validator

from gapforge.agents.errors import ModelError

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
DEFAULT_EPISODE_TIMEOUT_S = 1800.0  # an episode's time limit where no caller passes one (agents.rollouts.CollectPlan)
LOCAL_POLICY_CALL_S = 60.0  # a local model's turn, at most (a CPU turn of the demo's policy takes well under a second)
SCRIPTED_CALL_S = 1.0  # a recorded answer's turn
MIN_EPISODE_LIMIT_S, MAX_EPISODE_LIMIT_S = 60.0, 86400.0
OPENAI_API_HOST = "api.openai.com"
# The temperature of a chat model made from an endpoint when the caller gives none (agents/llm.py make_chat_model): the
# LLM roles (analyst's discovery, generator, reviewer) and an LLM user simulator sample greedily; the policy samples at
# policy.temperature, labeling passes at analysis.temperature.
ENDPOINT_TEMPERATURE = 0.0


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def is_loopback(host: str | None) -> bool:
    """localhost, 127.0.0.0/8 or ::1: a request to it never leaves the machine."""
    if not host:
        return False
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def credentials_in_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        return parts.password is not None or "@" in parts.netloc
    except ValueError:
        return False


def url_problem(url: str) -> str | None:
    """Why `url` cannot be an endpoint's base URL, None when it can: it must parse and name an http(s) host
    (`http://` or `http://[::1` are typos, not outages)."""
    import httpx

    try:
        parsed = httpx.URL(url)
        host = parsed.host
    except (httpx.InvalidURL, ValueError, TypeError) as e:
        return f"not a valid URL ({e})"
    return None if parsed.scheme in ("http", "https") and host else "not an http(s) URL with a host"


class EndpointConfig(_Section):
    """An OpenAI-compatible chat endpoint.

    Its key (`api_key`) goes only where it belongs: the default `OPENAI_API_KEY` only to
    OpenAI's own API (base_url unset or https://api.openai.com/...); any other endpoint gets
    a key only from the variable named in its own `api_key_env`, and never in clear text
    (http://) to a host other than this machine unless `allow_plain_http_key` says so."""

    base_url: str | None = Field(None, description="e.g. http://localhost:8000/v1; None: OpenAI's API")
    model: str = Field("gpt-4o-mini", description="model name sent to the endpoint")
    api_key_env: str | None = Field(
        None,
        description=f"env var holding this endpoint's key; unset: {DEFAULT_KEY_ENV}, sent only to OpenAI's own API",
    )
    allow_plain_http_key: bool = Field(
        False, description="send the key over plain http:// to a host other than this machine"
    )
    timeout_s: float = Field(120.0, gt=0, description="seconds per request")
    max_retries: int = Field(4, ge=0, le=20, description="retries of a failed request")
    retry_backoff_s: float = Field(
        1.0, ge=0.0, le=60.0, description="seconds before the first retry, doubled per retry (at least Retry-After)"
    )
    _key: SecretStr | None = PrivateAttr(None)  # read by the loader (load_key); never dumped

    @field_validator("base_url")
    @classmethod
    def _no_password_in_url(cls, value: str | None) -> str | None:
        if value and credentials_in_url(value):
            raise ValueError("the URL holds a user:password: put the key in an env var and name it in api_key_env")
        if value is not None and (problem := url_problem(value)):  # said here, not retried later as an outage
            raise ValueError(f"not a usable endpoint URL ({problem}): e.g. http://localhost:8000/v1")
        return value

    def load_key(self, environ: Mapping[str, str]) -> None:
        """The loader's step: read the named variable (or the default one). Env vars are read nowhere else."""
        value = environ.get(self.api_key_env or DEFAULT_KEY_ENV)
        self._key = SecretStr(value) if value else None

    def is_openai(self) -> bool:
        """OpenAI's own API: no base_url (and no other provider named in the model), or https://api.openai.com."""
        if self.base_url is None:
            return "/" not in self.model or self.model.startswith("openai/")
        url = urlsplit(self.base_url)
        return url.scheme == "https" and (url.hostname or "").lower() == OPENAI_API_HOST

    def key_refusal(self) -> str | None:
        """Why this endpoint must not get the key the user named for it (None: it may)."""
        if self._key is None or self.api_key_env is None or self.base_url is None or self.allow_plain_http_key:
            return None
        url = urlsplit(self.base_url)
        if url.scheme == "http" and not is_loopback(url.hostname):
            return (
                f"the key in {self.api_key_env} would travel in clear text to {url.hostname} (http://): "
                "use https://, or set endpoint.allow_plain_http_key=true if that network is trusted"
            )
        return None

    @property
    def api_key(self) -> SecretStr | None:
        """The key this endpoint may receive, decided at use time (the base URL may change after loading,
        e.g. `--policy URL`): the named variable's key, or the default key for OpenAI's API, else None."""
        if self._key is None:
            return None
        if self.api_key_env is None:
            return self._key if self.is_openai() else None
        refusal = self.key_refusal()
        if refusal:
            raise ModelError(refusal)
        return self._key

    @property
    def key_env(self) -> str:
        return self.api_key_env or DEFAULT_KEY_ENV


class LLMConfig(_Section):
    """The LLM roles: analyst, generator and reviewer (also GEPA's reflection, and the user simulator with
    `rollouts.user: llm`)."""

    kind: Literal["scripted", "openai"] = Field(
        "scripted", description="scripted: recorded answers (docs/recordings.md); openai: `llm.endpoint`"
    )
    scripted_path: str | None = Field(None, description="YAML/JSON of recorded answers keyed by prompt name")
    endpoint: EndpointConfig = Field(default_factory=EndpointConfig)


class PolicyConfig(_Section):
    """The base policy being evaluated and trained."""

    kind: Literal["scripted", "endpoint", "local"] = Field(
        "scripted",
        description="scripted (recorded answers; cannot train), local (weights at local_path) or endpoint (a server, e.g. vLLM; "
        "a run also needs local_path and a routing.backend other than transformers)",
    )
    endpoint: EndpointConfig = Field(default_factory=EndpointConfig)
    local_path: str | None = Field(
        None,
        description="Hugging Face model directory: the weights to load (local) or that the server serves (endpoint)",
    )
    adapter_path: str | None = Field(None, description="PEFT adapter applied on the local model (optional)")
    scripted_path: str | None = Field(None, description="recorded answers (kind scripted)")
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    max_new_tokens: int = Field(512, gt=0, description="tokens per turn")


EnvArg = str | int | float | bool | None


class RolloutConfig(_Section):
    env: str = Field(
        "shop",
        description="the target: shop | tau2:retail|airline|telecom | toolsandbox[:category] | mcp:FILE.yaml | "
        "composite:SPEC+SPEC | package.module:Class | path/to/file.py:Class (a class may add ?key=value keywords)",
    )
    env_args: dict[str, EnvArg] = Field(
        default_factory=dict, description="constructor keywords of a class env; folded into `env` as ?key=value on load"
    )
    samples: int = Field(1, ge=1, description="episodes per task")
    concurrency: int = Field(8, ge=1, le=1024, description="episodes in flight")
    max_turns: int = Field(30, ge=1, description="policy turns per episode (raised to the env's own limit)")
    tasks: list[str] | None = Field(None, description="task ids; None: all")
    user: Literal["scripted", "llm"] = Field("scripted", description="the env's scripted user, or an LLM")
    user_endpoint: Literal["llm", "policy"] = Field(
        "llm",
        description="the LLM user's endpoint: llm.endpoint, or policy.endpoint at temperature 0 (the paper's τ² setting; "
        "needs policy.kind endpoint)",
    )
    episode_timeout_s: float | None = Field(
        None,
        gt=0,
        le=MAX_EPISODE_LIMIT_S,
        description="seconds per episode; one past it ends as `timeout` and is replayed on resume. None: derived from max_turns "
        "and the call timeouts, within [60, 86400]",
    )
    heartbeat_s: float = Field(
        60.0,
        gt=0,
        le=3600.0,
        description="seconds between progress lines while collecting (`gapforge run`; `rollouts collect` when not on a terminal)",
    )
    env_call_s: float = Field(
        10.0, gt=0, le=3600.0, description="seconds one env call may take, in the derived episode limit"
    )
    max_env_failure_share: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="stop a collection (exit 4) once the env's own code failed more than this share of the planned episodes; 1: never",
    )

    @model_validator(mode="before")
    @classmethod
    def _fold_env_args(cls, data: object) -> object:
        """`env: x.py:C` + `env_args: {split: dev}` -> `env: x.py:C?split=dev`, `env_args: {}`."""
        if not isinstance(data, dict) or not data.get("env_args"):
            return data
        from gapforge.envs.errors import EnvError
        from gapforge.envs.loader import with_keywords
        from gapforge.envs.registry import is_builtin

        env, args = str(data.get("env", "shop")), data["env_args"]
        if not isinstance(args, dict):
            raise ValueError("rollouts.env_args must be a mapping of constructor keywords, e.g. {split: dev}")
        if is_builtin(env):
            raise ValueError(
                f"rollouts.env_args applies to an env given as package.module:ClassName or file.py:ClassName, not '{env}'"
            )
        try:
            return {**data, "env": with_keywords(env, args), "env_args": {}}
        except EnvError as e:
            raise ValueError(str(e)) from None


def episode_limit_s(
    rollouts: RolloutConfig, policy: PolicyConfig, llm: LLMConfig, env_turns: int | None = None
) -> float:
    """An episode's time limit: `rollouts.episode_timeout_s` when set, else derived so that a hang is noticed in minutes
    while the slowest honest episode still fits: every turn (the larger of rollouts.max_turns and the env's own turn
    limit, `env_turns`) may take one policy call at its timeout (an endpoint's `timeout_s`; a local model 60 s; recorded
    answers 1 s), one LLM-user call at its timeout (rollouts.user=llm) and one env call (`rollouts.env_call_s`).
    Clamped to [60, 86400] s."""
    if rollouts.episode_timeout_s is not None:
        return rollouts.episode_timeout_s
    turns = max(rollouts.max_turns, env_turns or 0)
    policy_s = {"endpoint": policy.endpoint.timeout_s, "local": LOCAL_POLICY_CALL_S}.get(policy.kind, SCRIPTED_CALL_S)
    user_s = 0.0
    if rollouts.user == "llm":
        user_s = policy.endpoint.timeout_s if rollouts.user_endpoint == "policy" else llm.endpoint.timeout_s
    return min(MAX_EPISODE_LIMIT_S, max(MIN_EPISODE_LIMIT_S, turns * (policy_s + user_s + rollouts.env_call_s)))
