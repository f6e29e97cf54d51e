"""The GPU dry run (opt-in): docs/gpu.md's steps, run line by line as they stand, on CPU.

Four swaps, nothing else: MODEL is a tiny Qwen3-architecture model whose tokenizer carries Qwen3's real chat template
(`hf download` -> `gapforge dev tiny-model --template qwen3`), `vllm serve` is the project's vLLM stand-in with the same
flags (tests.fakes.vllm_standin: same HTTP API, runtime LoRA loading), the LLM roles answer from a fake OpenAI server
(tests/gapforge/dryrun_roles.py, via GAPFORGE_LLM_BASE_URL), and `gapforge run` gets the --set overrides below that make
every stage small. The run must go through every stage to the report: rollouts on τ² retail through the served policy,
analysis, synthesis + self-test in the Docker sandbox, GRPO + LoRA on the synthetic env and on the target (baseline),
adapters loaded into the server at run time, the router on its completions, evaluation, report.
Measured: 1.6-2.0 min on 2 busy cores (docs/gpu.md).
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gapforge.evaluation.policies import GRPO_TARGET
from gapforge.serving.chat_format import qwen3_training_template
from tests.fakes.fake_openai import FakeOpenAIServer
from tests.gapforge.dryrun_roles import CAPABILITY, respond

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.skipif(
        os.environ.get("GAPFORGE_GPU_DRYRUN") != "1",
        reason="opt-in: GAPFORGE_GPU_DRYRUN=1 runs docs/gpu.md's steps on CPU stand-ins (~2 min, needs Docker)",
    ),
    pytest.mark.tau2,
    pytest.mark.slow,
]
TASKS = [
    "25",
    "57",
    "65",
    "38",
    "66",
]  # τ² retail: three read-only tasks (a user who stops at once passes them), two cancellations
SMALL = [  # every stage small; everything else is the config's
    f"rollouts.tasks=[{','.join(repr(t) for t in TASKS)}]",
    "rollouts.samples=2",
    "rollouts.concurrency=4",
    "rollouts.max_turns=3",
    "policy.max_new_tokens=24",
    "analysis.passes=2",
    "analysis.min_passes=2",
    "analysis.min_capabilities=1",
    "analysis.bootstrap=20",
    "analysis.concurrency=4",
    "synthesis.max_attempts=1",
    "synthesis.validation_seeds=4",
    "synthesis.rollout_budget=8",
    # a random tiny policy scores the floor on every seed: readiness cannot pass with the defaults (real models: leave them)
    "grpo_readiness.groups=2",
    "grpo_readiness.samples=2",
    "grpo_readiness.min_informative=0",
    "grpo_readiness.max_all_zero=1",
    "grpo_readiness.mean_low=0",
    "grpo_readiness.concurrency=2",
    "sandbox.pool_size=2",
    "training.max_steps=2",
    "training.groups_per_step=1",
    "training.num_generations=2",
    "training.max_turns=2",
    "training.max_new_tokens=16",
    "training.max_completion_length=512",
    "training.malformed_tool_calls=continue",
    "training.train_seeds=2",
    "training.heldout_seeds=1",
    "training.heldout_samples=1",
    "training.eval_every=2",
    "training.save_every=2",
    "evaluation.trials=1",
    "evaluation.routing_seeds=1",
]


def readme_steps() -> list[str]:
    text = (ROOT / "docs" / "gpu.md").read_text()
    block = text.split("<!-- gpu-steps:", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def dry(line: str) -> str:
    """The model, the server and the CLI entry point swapped (in this order: the first swap writes a gapforge command)."""
    for readme, here in (
        ("hf download $MODEL --local-dir $WEIGHTS", "gapforge dev tiny-model $WEIGHTS --template qwen3"),
        ("vllm serve ", f"{sys.executable} -m tests.fakes.vllm_standin "),
        ("gapforge ", f"{sys.executable} -m gapforge.cli "),
    ):
        line = line.replace(readme, here)
    return line


def test_the_readme_gpu_steps_run_every_stage_to_the_report(tmp_path: Path) -> None:
    from gapforge.config import load_config
    from gapforge.store import Store

    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 8000)) == 0:
            pytest.fail("port 8000 is taken: docs/gpu.md's vLLM command serves there; stop what listens on it")
    steps = readme_steps()
    assert [s.split()[0] for s in steps if not s.startswith("export")] == [
        "hf",
        "gapforge",
        "gapforge",
        "CUDA_VISIBLE_DEVICES=0",
        "CUDA_VISIBLE_DEVICES=1",
    ]
    workspace, log = tmp_path / "ws", tmp_path / "run.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    server: subprocess.Popen | None = None
    t0 = time.perf_counter()
    with FakeOpenAIServer(respond) as llm:
        env["GAPFORGE_LLM_BASE_URL"] = llm.base_url
        try:
            for line in steps:
                if line.startswith("export "):
                    for item in shlex.split(line)[1:]:
                        key, _, value = item.partition("=")
                        env[key] = {
                            "MODEL": "gapforge/tiny-qwen3",
                            "WEIGHTS": str(tmp_path / "tiny-qwen3"),
                            "OPENAI_API_KEY": "dry-run",
                        }[key]
                    continue
                cmd = dry(line)
                if cmd.endswith("&"):
                    server = subprocess.Popen(
                        ["bash", "-c", cmd[:-1]],
                        cwd=ROOT,
                        env=env,
                        stdout=subprocess.PIPE,
                        text=True,
                        start_new_session=True,
                    )
                    ready = server.stdout.readline()
                    assert ready.startswith("serving gapforge/tiny-qwen3 on "), ready
                    served_at = ready.split()[-1]
                    continue
                if " run --config " in cmd:
                    cmd += "".join(f" --set {shlex.quote(s)}" for s in [f"workspace={workspace}", *SMALL])
                with log.open("a") as out:
                    done = subprocess.run(
                        ["bash", "-c", cmd], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=3600
                    )
                assert done.returncode == 0, (
                    f"{line!r} failed ({done.returncode}); see {log}:\n" + log.read_text()[-3000:]
                )
            served = {m["id"] for m in httpx.get(f"{served_at}/models").json()["data"]}  # adapters loaded at run time
        finally:
            if server is not None:
                os.killpg(server.pid, signal.SIGTERM)
                server.wait()
    wall = time.perf_counter() - t0
    out = log.read_text()
    print(f"\nGPU dry run: {wall / 60:.1f} min; log {log}")
    cfg = load_config(ROOT / "configs" / "tau2-retail-qwen3-gpu.yaml", [f"workspace={workspace}"], environ={})
    with Store(cfg.store_url) as store:
        (run,) = [r for r in store.list_runs() if r.kind == "trace"]
        assert run.status == "done", out[-3000:]
        assert {a.name: a.status for a in store.adapters(run.id)} == {CAPABILITY: "done", GRPO_TARGET: "done"}
        evaluated = {e.name.removeprefix("eval:") for e in store.evaluations(run.id)}
        assert {"base", "trace_routed", f"adapter:{CAPABILITY}", GRPO_TARGET} <= evaluated, evaluated
        episodes = store.episodes(run.id, env="tau2:retail")
        assert episodes and any(e.success for e in episodes) and any(not e.success for e in episodes)
    assert "gapforge/tiny-qwen3" in served and {n.rsplit("-", 1)[0] for n in served - {"gapforge/tiny-qwen3"}} == {
        CAPABILITY,
        GRPO_TARGET,
    }
    for adapter in (CAPABILITY, GRPO_TARGET):  # trained with Qwen3's training template, as served
        saved = workspace / "adapters" / run.id / adapter / "trl" / "checkpoint-2" / "chat_template.jinja"
        assert saved.read_text() == qwen3_training_template()
    assert (workspace / "reports" / run.id / "report.md").is_file()
