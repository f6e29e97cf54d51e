"""`build_router`: the router over the trained adapters and its accuracy on held-out synthetic seeds.
`Routing` also holds the run's routed models (base weights loaded once, every trained adapter on
them) that the evaluation plays and `gapforge serve` serves; a newly trained baseline adapter closes
them (`aclose`): the evaluation loads them again with it.

The router's data (its options in label order with their examples; with routing.backend=gate the
synthetic envs' openings and the trained gate: its weights and examples) is stored with the run the
first time it is built (evaluation.router_record); every later user of the run reads it back, so the
served router is the evaluated one and no sandbox container starts for it. The gate reads the base's hidden states: the loaded local backend's own weights, or
with a policy served by vLLM (policy.kind=endpoint) a local copy of the base at policy.local_path."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from typing import TYPE_CHECKING, Any

from gapforge.graph.context import RouterDone, StageFailed

if TYPE_CHECKING:
    from gapforge.stages import RunStages


class Routing:
    """The run's routed models (`RunStages.routing`), loaded on first use."""

    def __init__(self, sc: RunStages) -> None:
        self.sc = sc
        self._routed: tuple[Any, Any, Any] | None = None  # (artifacts, backend, router)
        self.baseline_adapter: str | None = (
            None  # a GRPO-on-target adapter dir given by hand (gapforge evaluate --baseline-adapter)
        )
        self.source = ""  # where the last router came from: "stored" | "built" | "built (stored now)"

    def routed(self, run_id: str, *, baseline: bool = True, keep: bool = True) -> tuple[Any, Any, Any]:
        """(artifacts, backend, router) of the run (blocking: loads weights; call it in a thread). `baseline`: load the
        GRPO-on-target adapter too (the evaluation plays it); `keep`: store the router's data when it had to be built."""
        if self._routed is None or self._routed[0].run_id != run_id:
            from gapforge.evaluation.service import build_router, load_backend, run_artifacts

            cfg = self.sc.cfg
            base = self.sc.base_dir()
            artifacts = run_artifacts(self.sc.store, run_id, workspace=self.sc.deps.workspace.root)
            for name, problem in artifacts.damaged.items():  # never routed to, evaluated or served without saying so
                self.sc.progress("build_router", f"warning: adapter {name} left out: {problem}")
            extra = self._baseline(run_id) if baseline else {}
            routing = cfg.routing
            if cfg.policy.kind == "endpoint":  # the served policy (vLLM): adapters loaded into it at run time
                backend = vllm_backend(cfg, {**artifacts.adapter_paths, **extra})
                routing = self._endpoint_routing()
            else:
                backend = load_backend(
                    base, artifacts, extra_adapters=extra, max_new_tokens=cfg.policy.max_new_tokens, seed=cfg.seed
                )
            artifacts, gate, encoder = self._router_data(run_id, artifacts, routing, backend, keep=keep)
            router = build_router(
                artifacts,
                routing=routing,
                backend=backend,
                tokenizer_path=base,
                gate=gate,
                encoder=encoder,
                endpoint=cfg.policy.endpoint,
            )
            self._routed = (artifacts, backend, router)
        return self._routed

    def _baseline(self, run_id: str) -> dict[str, Any]:
        from gapforge.evaluation.policies import GRPO_TARGET

        if self.baseline_adapter:
            return {GRPO_TARGET: self.baseline_adapter}
        from gapforge.evaluation.service import adapter_location

        row = self.sc.store.get_adapter(run_id, GRPO_TARGET)
        if row is None or row.status != "done" or not row.path:
            return {}
        return {GRPO_TARGET: adapter_location(row.path, run_id, self.sc.deps.workspace.root)}

    def _router_data(
        self, run_id: str, artifacts: Any, routing: Any, backend: Any, *, keep: bool
    ) -> tuple[Any, Any, Any]:
        """(artifacts with the router's options, the gate's weights, the encoder they were trained through: None when read
        from the store, build_router makes one): the stored router's when it was built over these adapters and
        has what routing.backend needs (gate: the trained gate), else built now (gate: trained on the synthetic envs'
        openings, read in the sandbox unless the stored router over these adapters has them, and the analysis split's
        labels) and stored when `keep`."""
        from gapforge.evaluation.router_record import load_router, router_record, save_router

        store, kind = self.sc.store, routing.backend
        record = load_router(store, run_id)
        same = record is not None and record.matches(artifacts)
        if same and (kind != "gate" or record.gate is not None):
            self.source = "stored"
            gate = record.gate.state if kind == "gate" and record.gate else None
            return dataclasses.replace(artifacts, capabilities=record.options()), gate, None
        openings, seeds, gate, encoder = None, list(range(self.sc.cfg.training.train_seeds)), None, None
        if kind == "gate":
            if same and record.openings is not None:  # the synthetic envs' openings are data: no sandbox needed again
                openings, seeds = record.openings, list(record.seeds)
            else:
                openings = self._openings(run_id, artifacts, seeds)
        if kind == "gate" and artifacts.capabilities:  # no trained adapter: nothing to route to, no gate
            gate, encoder = self._train_gate(run_id, artifacts, routing, backend, openings, seeds)
        if keep:
            save_router(
                store,
                run_id,
                router_record(artifacts, backend=kind, openings=openings, seeds=seeds if openings else [], gate=gate),
            )
        self.source = "built (stored now)" if keep else "built"
        return artifacts, (gate.state if gate else None), encoder

    def _train_gate(
        self, run_id: str, artifacts: Any, routing: Any, backend: Any, openings: dict[str, list[str]], seeds: list[int]
    ) -> tuple[Any, Any]:
        """The gate (agents.router.gate) on the synthetic envs' training openings and the analysis split's labelled tasks; a policy
        served by vLLM is read through a local copy of its base (policy.local_path)."""
        from gapforge.agents.router.gate import gate_encoder, gate_examples, train_gate
        from gapforge.serving.chat_format import load_tokenizer

        caps = [c["name"] for c in artifacts.capabilities]
        local = all(hasattr(backend, a) for a in ("model", "tokenizer", "base_context"))
        if not local:
            self.sc.progress(
                "build_router",
                f"gate: hidden states from a local copy of the base ({self.sc.base_dir()}); the served policy is not asked",
            )
        encoder = gate_encoder(
            backend if local else None,
            self.sc.base_dir(),
            max_tokens=routing.gate.max_tokens,
            load_tokenizer=load_tokenizer,
        )
        examples, left = gate_examples(
            self.sc.store,
            run_id,
            caps,
            openings,
            seeds,
            required_passes=self.sc.cfg.analysis.required_passes,
            routing=routing,
        )
        gate = train_gate(encoder, examples, caps, routing, left_out=left)
        acc = gate.heldout.accuracy
        self.sc.progress(
            "build_router",
            f"gate: {len(examples)} examples, held-out accuracy {'–' if acc is None else f'{acc:.0%}'} on {gate.heldout.n}",
        )
        return gate, encoder

    async def aclose(self) -> None:
        """Close the evaluation backend (vLLM sessions, batching worker); the next use loads it again
        (after a new adapter was trained, or when the run's stages close)."""
        old, self._routed = self._routed, None
        if old is not None and hasattr(old[1], "aclose"):
            await old[1].aclose()

    def synthetic(self, run_id: str, artifacts: Any) -> dict[str, Any]:
        """Each capability's accepted synthetic env, opened in the sandbox on the run's pool."""
        from gapforge.sandbox.env import open_env

        ws, sandbox, pool = self.sc.deps.workspace, self.sc.cfg.sandbox, self.sc.deps.sandbox_pool
        modules = {c["name"]: ws.synthetic_env(run_id, c["name"]) for c in artifacts.capabilities}
        return {name: functools.partial(open_env, module, sandbox, pool) for name, module in modules.items()}

    def _openings(self, run_id: str, artifacts: Any, seeds: list[int]) -> dict[str, list[str]]:
        """Each capability's synthetic-env openings on its TRAINING seeds (what its adapter was trained on), in the sandbox;
        the router's accuracy is measured on held-out seeds."""
        from gapforge.evaluation.routing import env_openings

        return {name: env_openings(opener, seeds) for name, opener in self.synthetic(run_id, artifacts).items()}

    def _endpoint_routing(self) -> Any:
        """Routing for a served policy: the label scorer (routing.backend=vllm) reads the same vLLM server's completions
        (policy.endpoint), the gate a local copy of the base."""
        routing = self.sc.cfg.routing
        if routing.backend == "transformers":
            raise StageFailed(
                "routing.backend=transformers needs the policy in this process: with policy.kind=endpoint set routing.backend=vllm"
            )
        return routing


def vllm_backend(cfg: Any, adapters: dict[str, Any]) -> Any:
    """The policy endpoint (policy.endpoint: a vLLM server) with every adapter registered under its versioned name
    (blocking; no running event loop in this thread)."""
    from gapforge.serving.vllm_backend import VLLMBackend

    ep = cfg.policy.endpoint
    backend = VLLMBackend(
        ep.base_url or "http://localhost:8000/v1",
        ep.model,
        adapters,
        api_key=ep.api_key.get_secret_value() if ep.api_key else None,
        timeout_s=ep.timeout_s,
        max_retries=ep.max_retries,
        max_new_tokens=cfg.policy.max_new_tokens,
    )
    asyncio.run(backend.ensure_registered())
    return backend


async def build_router(sc: RunStages, run_id: str, capabilities: list[str]) -> RouterDone:
    """The router over the trained adapters (its data stored with the run), and its accuracy on held-out synthetic
    seeds (in the sandbox)."""
    from gapforge.evaluation.routing import measure_router, routing_cases

    artifacts, _backend, router = await asyncio.to_thread(sc.routing.routed, run_id)
    seeds = sc.cfg.training.heldout_seed_list()[: sc.cfg.evaluation.routing_seeds]
    cases = await asyncio.to_thread(routing_cases, sc.routing.synthetic(run_id, artifacts), seeds)
    acc = await asyncio.to_thread(measure_router, router, cases, store=sc.store, run_id=run_id)
    return RouterDone(
        [c["name"] for c in artifacts.capabilities],
        {"accuracy": acc.accuracy, "cases": acc.cases, "abstained": acc.abstained},
    )
