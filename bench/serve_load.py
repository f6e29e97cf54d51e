"""Benchmark: `gapforge serve` (local backend) under 64 concurrent OpenAI-client conversations.

    .venv/bin/python -m bench.serve_load [--workspace DIR --run RUN] [--requests 2000] [--concurrency 64]

The server is the real command in its own process (`python -m gapforge.cli serve RUN --port 0`), on a real run:
RUN in the workspace DIR when given (e.g. the demo's run: its stored config, adapters and router), else a small
run this script builds in a temporary workspace (the shipped shop policy as the base, two random LoRA adapters,
the shop's tasks split in two). Conversations are multi-turn with tools: each plays a held-out task of the run's
split (its env from the split, e.g. the shop) through `AsyncOpenAI` against the server's /v1 on loopback: the
env's opening, then the model's turns, each answered by the env's own step (tool results, the scripted user),
up to `--turns` turns, greedy, `--max-tokens` per answer. Routing happens once per conversation
(X-Conversation-Id).

Phases: a warm-up conversation; one client at a time for `--sequential` requests; then `--concurrency`
conversations at once until `--requests` requests in all (or `--max-seconds`). Prints p50 / p95 latency and
requests/s of each phase and their ratios, the answers by status (5xx must be 0), the server's RSS after 200 and
after `--requests` requests (and the ratio), then stops the server with SIGTERM and prints its exit code and its
drain line. Prints numbers; it does not pass or fail.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import queue
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import openai

from gapforge.demo_data import SHOP_POLICY_DIR
from gapforge.envs.protocol import Message, ToolCall
from gapforge.envs.registry import make_env
from gapforge.store import Store

ROOT = Path(__file__).resolve().parents[1]

ROUTED = "gapforge-router"
CAPS = ("precondition_verification", "structured_data_reasoning")


def random_adapter(base: Path, out: Path, seed: int) -> Path:
    """A LoRA adapter with random, non-zero weights on `base` (it changes the model's answers)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base, local_files_only=True)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(model, lora).save_pretrained(out)
    return out


def build_run(workspace: Path, base: Path) -> str:
    """A run with two retained capabilities, a random adapter each, and the shop's tasks split in two."""
    shop = make_env("shop")
    tasks = shop.task_ids()
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
        run = store.create_run("trace", {})
        for seed, cap in enumerate(CAPS):
            store.put_capability(run, cap, definition=f"{cap.replace('_', ' ')}: the shop's {cap} episodes")
            store.set_capability_retained(run, cap, True)
            path = random_adapter(base, workspace / "adapters" / run / cap, seed=seed + 1)
            store.put_adapter(run, cap, path=str(path), metrics={}, status="done", capability=cap)
        store.put_split(
            run,
            env="shop",
            seed=0,
            fraction=0.5,
            analysis_tasks=tasks[::2],
            heldout_tasks=tasks[1::2],
            families={t: shop.task_family(t) for t in tasks},
        )
    return run


def heldout(workspace: Path, run: str) -> tuple[str, list[str], str]:
    """(the split's env, its held-out tasks, how many of their openings equal those of the run's stored episodes)."""
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
        split = store.get_split(run)
        if split is None:
            raise SystemExit(f"run {run} stores no task split: pass a run that went through analysis, or no --run")
        stored = {e.task_id: e.messages for e in store.episodes(run) if e.task_id in split.heldout_tasks}
    env = make_env(split.env)
    same = 0
    for task, messages in stored.items():
        opening = [(m.role, m.content) for m in env.reset(task)]
        same += [(m.get("role"), m.get("content")) for m in messages[: len(opening)]] == opening
    return split.env, list(split.heldout_tasks), f"{same} of {len(stored)} stored"


class Server:
    """`gapforge serve RUN` in its own process; `root` once it listens; `rss_mb()` of that process."""

    def __init__(self, workspace: Path, run: str, base: Path | None) -> None:
        cmd = [sys.executable, "-m", "gapforge.cli", "serve", run, "--port", "0", "--set", f"workspace={workspace}"]
        cmd += ["--base", str(base)] if base is not None else []
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.root = self.wait_for(r"on (http://[\d.]+:\d+)/v1").group(1)

    def _pump(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.lines.put(line)
        self.lines.put("")

    def wait_for(self, pattern: str, timeout: float = 600) -> re.Match[str]:
        while True:
            line = self.lines.get(timeout=timeout)
            if not line:
                raise SystemExit(f"gapforge serve ended (exit {self.proc.wait()}): {self.proc.stderr.read()[-2000:]}")  # type: ignore[union-attr]
            print(f"  server: {line.rstrip()}")
            if m := re.search(pattern, line):
                return m

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024  # type: ignore[union-attr]

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        self.wait_for(r"stopped:")
        return self.proc.wait(60)


class Load:
    """Requests sent so far, their latencies and statuses, and the server's RSS at the marks."""

    def __init__(self, server: Server, limit: int, marks: tuple[int, ...], deadline: float) -> None:
        self.server, self.limit, self.marks, self.deadline = server, limit, marks, deadline
        self.started = self.done = 0
        self.latency: list[float] = []
        self.status: Counter[str] = Counter()
        self.adapters: Counter[str] = Counter()
        self.rss: dict[int, float] = {}

    def take(self) -> bool:
        if self.started >= self.limit or time.monotonic() > self.deadline:
            return False
        self.started += 1
        return True

    def finished(self, status: str, seconds: float | None) -> None:
        self.done += 1
        self.status[status] += 1
        if seconds is not None:
            self.latency.append(seconds)
        if self.done in self.marks:
            self.rss[self.done] = self.server.rss_mb()


async def conversation(
    client: openai.AsyncOpenAI, env_name: str, task: str, conv: str, load: Load, args: argparse.Namespace
) -> None:
    env = make_env(env_name)
    tools = env.tools()
    wire = [m.to_openai() for m in env.reset(task)]
    for _ in range(args.turns):
        if not load.take():
            return
        start = time.perf_counter()
        try:
            raw = await client.chat.completions.with_raw_response.create(
                model=ROUTED,
                messages=wire,
                tools=tools,
                max_tokens=args.max_tokens,
                temperature=0,
                extra_headers={"X-Conversation-Id": conv},
            )
        except openai.APIStatusError as e:
            load.finished(str(e.status_code), None)
            return
        except openai.APIConnectionError as e:  # timeouts included
            load.finished(type(e).__name__, None)
            return
        load.finished(str(raw.status_code), time.perf_counter() - start)
        answer = raw.parse()
        load.adapters[raw.headers.get("X-Gapforge-Adapter", "?")] += 1
        said = answer.choices[0].message
        calls = [
            ToolCall(id=tc.id, name=tc.function.name, arguments=json.loads(tc.function.arguments or "{}"))
            for tc in said.tool_calls or []
        ]
        reply = Message.assistant(said.content, calls)
        wire.append(reply.to_openai())
        result = env.step(reply)
        wire += [m.to_openai() for m in result.messages]
        if result.done:
            return


async def phase(
    root: str, env_name: str, tasks: list[str], load: Load, workers: int, args: argparse.Namespace, tag: str
) -> float:
    """Conversations on `workers` lanes until the load's limit; returns the wall seconds."""
    client = openai.AsyncOpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0, timeout=args.request_timeout)
    counter = iter(range(10**9))

    async def lane() -> None:
        while load.started < load.limit and time.monotonic() <= load.deadline:
            n = next(counter)
            await conversation(client, env_name, tasks[n % len(tasks)], f"{tag}-{n}", load, args)

    start = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(workers)))
    await client.close()
    return time.perf_counter() - start


def describe(name: str, latency: list[float], seconds: float) -> tuple[float, float, float]:
    p50 = statistics.median(latency)
    p95 = statistics.quantiles(latency, n=20)[-1] if len(latency) >= 20 else max(latency)
    rate = len(latency) / seconds
    print(
        f"{name}: {len(latency)} answered in {seconds:.1f} s -> {rate:.2f} req/s; latency p50 {p50 * 1e3:.0f} ms, p95 {p95 * 1e3:.0f} ms"
    )
    return p50, p95, rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workspace", type=Path, help="the workspace holding --run (e.g. a demo's .gapforge)")
    ap.add_argument(
        "--run", help="the run to serve (its stored config, adapters and router); default: a small run built here"
    )
    ap.add_argument("--model", type=Path, default=SHOP_POLICY_DIR, help="the base of the run built here")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--requests", type=int, default=2000, help="requests in all (the RSS marks: 200 and this)")
    ap.add_argument(
        "--sequential", type=int, default=40, help="requests sent one at a time before the concurrent phase"
    )
    ap.add_argument("--turns", type=int, default=4, help="assistant turns per conversation at most")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--max-seconds", type=float, default=1800, help="the whole load stops after this")
    ap.add_argument("--request-timeout", type=float, default=600, help="the client's own timeout per request")
    args = ap.parse_args()
    if (args.workspace is None) != (args.run is None):
        raise SystemExit("--workspace and --run go together (or neither: a run is built here)")

    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        workspace, run, base = args.workspace, args.run, None
        if run is None:
            workspace, base = Path(tmp), args.model
            run = build_run(workspace, base)
            print(f"built run {run} in {workspace}: base {base}, adapters {', '.join(CAPS)}")
        env_name, tasks, same = heldout(workspace, run)
        print(
            f"conversations: {len(tasks)} held-out {env_name} tasks (openings equal to the run's episodes': {same}); "
            f"up to {args.turns} turns, max_tokens {args.max_tokens}, greedy"
        )
        server = Server(workspace, run, base)
        try:
            deadline = time.monotonic() + args.max_seconds
            warm = Load(server, 2, (), deadline)
            asyncio.run(phase(server.root, env_name, tasks, warm, 1, args, "warm"))
            load = Load(server, args.sequential, (200, args.requests), deadline)
            seconds_1 = asyncio.run(phase(server.root, env_name, tasks, load, 1, args, "seq"))
            one = list(load.latency)
            load.limit = args.requests
            seconds_n = asyncio.run(phase(server.root, env_name, tasks, load, args.concurrency, args, "conc"))
            many = load.latency[len(one) :]
            counts = httpx.get(server.root + "/health").json().get("counts", {})
        finally:
            code = server.stop() if server.proc.poll() is None else server.proc.returncode
    p50_1, p95_1, rate_1 = describe("concurrency 1", one, seconds_1)
    p50_n, p95_n, rate_n = describe(f"concurrency {args.concurrency}", many, seconds_n)
    print(
        f"ratio concurrency {args.concurrency} / 1: throughput {rate_n / rate_1:.2f}x, p50 latency {p50_n / p50_1:.2f}x, p95 latency {p95_n / p95_1:.2f}x"
    )
    statuses = dict(sorted(load.status.items()))
    fives = sum(n for s, n in load.status.items() if s.isdigit() and s.startswith("5"))
    print(f"answers by status: {statuses}; 5xx: {fives}; server counts: {counts}")
    print(f"adapters answering: {dict(load.adapters)}")
    rss = load.rss
    if 200 in rss and args.requests in rss:
        last = rss[args.requests]
        print(
            f"server RSS: {rss[200]:.0f} MB after 200 requests, {last:.0f} MB after {args.requests} -> ratio {last / rss[200]:.3f}"
        )
    else:
        print(f"server RSS at the marks reached: {rss} (the load stopped at {load.done} requests)")
    print(f"gapforge serve exit code after SIGTERM: {code}")


if __name__ == "__main__":
    main()
