"""What the build_router and evaluate stages (gapforge/stages/) and `gapforge serve` call (plain functions: no
printing, typed results).

    artifacts = run_artifacts(store, run_id)                       # capabilities + trained adapters + examples
    backend   = load_backend(base_model_path, artifacts, extra_adapters={...})
    router    = build_router(artifacts, backend=backend, routing=cfg)          # transformers, shared base weights
    router    = build_router(artifacts, routing=cfg, tokenizer_path=base, endpoint=policy_endpoint)  # "vllm"
    router    = build_router(artifacts, routing=cfg, backend=backend, gate=record.gate.state)  # "gate" (agents.router.gate)
    result    = await evaluate_run(store, run_id, backend=backend, router=router, artifacts=artifacts, ...)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gapforge.agents.router import (
    CompletionsScorer,
    NoScorer,
    RouteOption,
    Router,
    RouterError,
    RoutingConfig,
    TransformersScorer,
    compact_trajectory,
)
from gapforge.envs.naming import synthetic_env_name
from gapforge.envs.protocol import TargetEnvironment
from gapforge.evaluation.policies import standard_policies
from gapforge.evaluation.registry import scored
from gapforge.evaluation.run import EvalPlan, EvaluationResult, evaluate

if TYPE_CHECKING:
    from gapforge.store import Store


@dataclass(frozen=True)
class RunArtifacts:
    run_id: str
    capabilities: list[dict[str, str]]  # [{name, definition, example, adapter}] in router-label order
    adapter_paths: dict[str, Path] = field(default_factory=dict)  # adapter name -> PEFT dir
    damaged: dict[str, str] = field(default_factory=dict)  # adapter name -> why its directory does not read back whole


def _example(store: Store, run_id: str, capability: str, max_chars: int) -> str:
    """A successful trajectory of the capability's synthetic env: the best successful stored episode of the env
    named `synthetic_env_name(capability)` (envs.naming, exact match; ties -> the earliest)."""
    good = store.episodes(run_id, env=synthetic_env_name(capability), success=True)
    if not good:
        return ""
    best = max(good, key=lambda e: (e.reward, -e.id))
    return compact_trajectory(best.messages, max_chars)


def adapter_location(path: str | Path, run_id: str, workspace: Path | None) -> Path:
    """Where a stored adapter path is now. Paths are stored as the training saw them (relative to the directory the
    run was started in when its workspace was relative, e.g. `.gapforge/adapters/RUN/CAP/...`): one that does not
    exist from here is looked up under `workspace` by its part from `adapters/RUN/` on (a command run from another
    directory, or a workspace moved whole)."""
    stored = Path(path)
    if stored.exists() or workspace is None:
        return stored
    parts = stored.parts
    for i in range(len(parts) - 1):
        if parts[i] == "adapters" and parts[i + 1] == run_id:
            moved = Path(workspace, *parts[i:])
            return moved if moved.exists() else stored
    return stored


def run_artifacts(
    store: Store, run_id: str, *, max_example_chars: int = 1200, workspace: Path | None = None
) -> RunArtifacts:
    """Retained capabilities that have a trained adapter on disk that reads back whole (store.files.check_dir:
    adapter_config.json present, sizes as its manifest records, safetensors headers matching the bytes), in
    stored order; a damaged one is left out and named in `damaged` (a resumed `train` redoes it), and so is a
    finished adapter whose directory is not found (`workspace`: where to look for it besides its stored path)."""
    from gapforge.store.files import check_dir

    caps = store.capabilities(run_id, retained=True) or store.capabilities(run_id)
    by_cap, damaged, where = {}, {}, {}
    for a in store.adapters(run_id):
        if not a.capability or not a.path:
            continue
        where[a.name] = adapter_location(a.path, run_id, workspace)
        problem = check_dir(where[a.name], required=("adapter_config.json",))
        if problem is None:
            by_cap[a.capability] = a
        elif where[a.name].is_dir():  # there but not whole
            damaged[a.name] = problem
        elif a.status == "done":  # trained, and not found: never served or evaluated silently without it
            damaged[a.name] = (
                f"not found at {a.path} (nor under {workspace})" if workspace else f"not found at {a.path}"
            )
    out, paths = [], {}
    for c in caps:
        adapter = by_cap.get(c.name)
        if adapter is None:
            continue
        paths[adapter.name] = where[adapter.name]
        out.append(
            {
                "name": c.name,
                "definition": c.definition,
                "example": _example(store, run_id, c.name, max_example_chars),
                "adapter": adapter.name,
            }
        )
    return RunArtifacts(run_id, out, paths, damaged)


def load_backend(
    base_model_path: str | Path,
    artifacts: RunArtifacts,
    *,
    extra_adapters: Mapping[str, str | Path] | None = None,
    max_new_tokens: int = 512,
    seed: int = 0,
):
    """One MultiAdapterModel: the base weights once, every capability adapter (+ e.g. the GRPO-on-target baseline)."""
    from gapforge.serving.multi_adapter import MultiAdapterModel

    adapters: dict[str, str | Path] = dict(artifacts.adapter_paths)
    adapters.update(extra_adapters or {})
    return MultiAdapterModel(base_model_path, adapters, max_new_tokens=max_new_tokens, seed=seed)


def build_router(
    artifacts: RunArtifacts,
    *,
    routing: RoutingConfig,
    backend: Any = None,
    tokenizer_path: str | Path | None = None,
    endpoint: Any = None,
    gate: Any = None,
    encoder: Any = None,
) -> Router:
    """The router over the run's capabilities. routing.backend = transformers: the backend's own base weights
    (adapters disabled under its lock); vllm: completions on `endpoint` (policy.endpoint: the vLLM server that serves
    the base) with the local tokenizer;
    gate: the run's trained gate (`gate`: agents.router.gate.GateState) over the hidden states of `encoder`, else of
    agents.router.gate.gate_encoder(backend, tokenizer_path) (a vLLM backend: a local copy of the base)."""
    options = [
        RouteOption(routing.labels[i], c["name"], c["definition"], c["example"], c["adapter"])
        for i, c in enumerate(artifacts.capabilities)
    ]
    if len(options) + 1 > len(routing.labels):
        raise RouterError(f"{len(options)} capabilities need {len(options) + 1} labels: add labels to routing.labels")
    scorer: Any
    if routing.backend == "gate":
        from gapforge.agents.router.gate import gate_encoder, gate_scorer
        from gapforge.serving.chat_format import load_tokenizer

        if (
            gate is None and not artifacts.capabilities
        ):  # nothing to route to: the router keeps every task on the base, never scoring
            return Router(options, NoScorer(), routing)
        if gate is None:
            raise RouterError(
                "routing.backend=gate needs the run's trained gate (the routing stage trains and stores it: gapforge evaluate RUN)"
            )
        scorer = gate_scorer(
            gate,
            [c["name"] for c in artifacts.capabilities],
            lambda: (
                encoder
                or gate_encoder(backend, tokenizer_path, max_tokens=gate.max_tokens, load_tokenizer=load_tokenizer)
            ),
        )
    elif routing.backend == "vllm":
        if endpoint is None or not endpoint.base_url or tokenizer_path is None:
            raise RouterError(
                "routing.backend=vllm scores on the policy's vLLM server: set policy.endpoint.base_url and "
                "policy.endpoint.model, and give the base model dir for the tokenizer"
            )
        from gapforge.serving.chat_format import load_tokenizer

        tok = load_tokenizer(tokenizer_path)  # the chat format the policy is served with
        key = endpoint.api_key.get_secret_value() if endpoint.api_key else None
        scorer = CompletionsScorer(endpoint.base_url, endpoint.model, tok, api_key=key, timeout_s=endpoint.timeout_s)
    elif backend is not None:
        scorer = TransformersScorer(backend.model, backend.tokenizer, context=backend.base_context)
    elif tokenizer_path is not None:
        scorer = TransformersScorer.from_pretrained(tokenizer_path)
    else:
        raise RouterError("build_router needs a loaded backend or the base model dir")
    return Router(options, scorer, routing)


async def evaluate_run(
    store: Store,
    run_id: str,
    *,
    backend: Any,
    router: Router,
    artifacts: RunArtifacts,
    env: str,
    make_env: Callable[[], TargetEnvironment],
    tasks: list[str],
    families: Mapping[str, str],
    trials: int = 4,
    max_turns: int = 30,
    temperature: float = 1.0,
    concurrency: int = 4,
    prepared: Mapping[str, Any] | None = None,
    seed: int = 0,
    family_trials: Mapping[str, int] | None = None,
    family_trials_policies: Sequence[str] = ("base", "trace_routed"),
    focus_family: str | None = None,
    min_family_episodes: int = 0,
    on_policy_done: Callable[[str], None] | None = None,
    players: Any = None,
    together: bool = True,
    scope: str = "eval",
) -> EvaluationResult:
    """Base, TRACE (routed), each adapter and every comparison's policies (evaluation.registry: the capability hints,
    GRPO on the target when the backend holds its adapter, GEPA's prompt when `prepared` holds the run's
    evaluation.gepa_baseline.GepaRecord) on `tasks` x `trials` (x `family_trials[family]` on a family's tasks for the
    policies in `family_trials_policies`); then each comparison's `scored` (the oracle row, for scope `eval`)."""
    policies = standard_policies(
        backend,
        router,
        artifacts.capabilities,
        temperature=temperature,
        capability_adapters=list(artifacts.adapter_paths),
        prepared=prepared,
    )
    plan = EvalPlan(
        run_id,
        env,
        list(tasks),
        trials=trials,
        max_turns=max_turns,
        temperature=temperature,
        concurrency=concurrency,
        seed=seed,
        family_trials=dict(family_trials or {}),
        family_trials_policies=tuple(family_trials_policies),
        focus_family=focus_family,
        min_family_episodes=min_family_episodes,
        scope=scope,
    )
    result = await evaluate(
        store,
        plan,
        make_env=make_env,
        policies=policies,
        families=families,
        on_policy_done=on_policy_done,
        players=players,
        together=together,
    )
    scored(store, run_id, scope=scope, seed=seed)  # e.g. routed TRACE against oracle routing, the row `oracle`
    return result
