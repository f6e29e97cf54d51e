"""`build_router`: the router over the trained adapters and its accuracy on held-out synthetic seeds.
`Routing` also holds the run's routed models (base weights loaded once, every trained adapter on
them) that the evaluation plays; a newly trained baseline adapter closes them (`aclose`): the
evaluation loads them again with it."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from gapforge.stages.common import StageContext, require
from graph.context import RouterDone, StageFailed


class Routing:
    def __init__(self, sc: StageContext) -> None:
        self.sc = sc
        self._routed: tuple[Any, Any, Any] | None = None  # (artifacts, backend, router)

    def routed(self, run_id: str) -> tuple[Any, Any, Any]:
        """(artifacts, backend, router) of the run (blocking: loads weights; call it in a thread)."""
        if self._routed is None or self._routed[0].run_id != run_id:
            from evaluation.policies import GRPO_TARGET
            from evaluation.service import build_router, load_backend, run_artifacts

            cfg, store = self.sc.cfg, self.sc.store
            base = self.sc.base_dir()
            artifacts = run_artifacts(store, run_id, max_example_chars=cfg.routing.max_example_chars)
            baseline = store.get_adapter(run_id, GRPO_TARGET)
            extra = {GRPO_TARGET: baseline.path} if baseline is not None and baseline.status == "done" and baseline.path else {}
            routing = cfg.routing
            if cfg.policy.kind == "endpoint":  # the served policy (vLLM): adapters loaded into it at run time
                backend = self._vllm_backend({**artifacts.adapter_paths, **extra})
                routing = self._endpoint_routing()
            else:
                backend = load_backend(base, artifacts, extra_adapters=extra, max_new_tokens=cfg.policy.max_new_tokens, seed=cfg.seed)
            openings = self._openings(run_id, artifacts) if routing.backend == "openings" else None
            key = cfg.policy.endpoint.api_key
            router = build_router(artifacts, routing=routing, backend=backend, tokenizer_path=base, openings=openings,
                                  api_key=key.get_secret_value() if key else None)  # fmt: skip
            self._routed = (artifacts, backend, router)
        return self._routed

    async def aclose(self) -> None:
        """Close the evaluation backend (vLLM sessions, batching worker); the next use loads it again
        (after a new adapter was trained, or when the run's stages close)."""
        old, self._routed = self._routed, None
        if old is not None and hasattr(old[1], "aclose"):
            await old[1].aclose()

    def _synthetic(self, run_id: str, artifacts: Any) -> dict[str, Any]:
        """Each capability's accepted synthetic env, opened in the sandbox on the run's pool."""
        from sandbox.env import open_env

        ws, sandbox, pool = self.sc.deps.workspace, self.sc.cfg.sandbox, self.sc.deps.sandbox_pool
        modules = {c["name"]: ws.synthetic_env(run_id, c["name"]) for c in artifacts.capabilities}
        return {name: functools.partial(open_env, module, sandbox, pool) for name, module in modules.items()}

    def _openings(self, run_id: str, artifacts: Any) -> dict[str, list[str]]:
        """Each capability's synthetic-env openings on its TRAINING seeds (what its adapter was trained on), in the sandbox;
        the router's accuracy is measured on held-out seeds."""
        from evaluation.routing import env_openings

        seeds = list(range(self.sc.cfg.training.train_seeds))
        return {name: env_openings(opener, seeds) for name, opener in self._synthetic(run_id, artifacts).items()}

    def _vllm_backend(self, adapters: dict[str, Any]) -> Any:
        """The policy endpoint (a vLLM server) with every adapter registered under its versioned name."""
        from serving.vllm_backend import VLLMBackend

        ep = self.sc.cfg.policy.endpoint
        backend = VLLMBackend(ep.base_url or "http://localhost:8000/v1", ep.model, adapters, api_key=ep.api_key.get_secret_value() if ep.api_key else None,
                              timeout_s=ep.timeout_s, max_retries=ep.max_retries, max_new_tokens=self.sc.cfg.policy.max_new_tokens)  # fmt: skip
        asyncio.run(backend.ensure_registered())  # (called in a worker thread: no running loop here)
        return backend

    def _endpoint_routing(self) -> Any:
        """Routing for a served policy: the same vLLM server's completions (routing.vllm_* default to the policy endpoint)."""
        routing = self.sc.cfg.routing
        if routing.backend == "transformers":
            raise StageFailed("routing.backend=transformers needs the policy in this process: with policy.kind=endpoint set routing.backend=vllm")
        if routing.backend != "vllm":
            return routing
        ep = self.sc.cfg.policy.endpoint
        return routing.model_copy(update={"vllm_base_url": routing.vllm_base_url or ep.base_url, "vllm_model": routing.vllm_model or ep.model})

    async def build_router(self, run_id: str, capabilities: list[str]) -> RouterDone:
        """The router over the trained adapters, and its accuracy on held-out synthetic seeds (in the sandbox)."""
        require("evaluation.service", "the router")
        from evaluation.routing import measure_router, routing_cases

        artifacts, _backend, router = await asyncio.to_thread(self.routed, run_id)
        seeds = self.sc.cfg.training.heldout_seed_list()[: self.sc.cfg.evaluation.routing_seeds]
        cases = await asyncio.to_thread(routing_cases, self._synthetic(run_id, artifacts), seeds)
        acc = await asyncio.to_thread(measure_router, router, cases, store=self.sc.store, run_id=run_id)
        return RouterDone([c["name"] for c in artifacts.capabilities], {"accuracy": acc.accuracy, "cases": acc.cases, "abstained": acc.abstained})
