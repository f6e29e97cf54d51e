"""Labeling throughput vs concurrency, calls per (episode, pass), and the shared-prefix share.

A fake OpenAI-compatible server (its own process, fixed latency) answers every labeling
request with a valid EpisodeLabels object; the real labeling pass (ChatOpenAI client with
retries, structured output + validation, compaction, SQLite cache writes) labels the
analysis split of a planted-deficit shop run at several concurrency levels, each level a
fresh pass (no cache hits). The latency-bound ideal is concurrency / latency calls per
second over ceil(n / concurrency) waves; prints calls/s and the ratio to it (target >= 0.8 at 32), calls per episode per
pass (target exactly 1; the paper makes one per episode x capability), and the share of a
labeling prompt's tokens in the fixed prefix (instructions + dictionary + policy) that
server-side prefix caching can reuse.

Both labeling clients are measured in the same run: `lean` (agents/structured_http.py, the
default) and `langchain` (ChatOpenAI via agents.llm.astructured_call, the baseline), with the
client CPU per call (ms; load-independent, unlike calls/s on a shared machine).

    python -m bench.labeling [--latency 2.0] [--levels 8,32,64] [--clients lean,langchain] [--samples 4] [--tokenizer PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from statistics import mean

from gapforge.agents.analysis.compact import compact_episode, make_token_counter
from gapforge.agents.analysis.config import AnalysisConfig
from gapforge.agents.analysis.discovery import discover
from gapforge.agents.analysis.labeling import label_pass
from gapforge.agents.analysis.recorded import load_recording, recorded_analyst
from gapforge.agents.analysis.split import analysis_episodes
from gapforge.agents.config import EndpointConfig
from gapforge.agents.llm import make_chat_model
from gapforge.store import Store
from tests.fakes.planted_policy import collect_planted

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def fake_server(latency: float, answer: dict):
    cmd = [
        sys.executable,
        "-m",
        "tests.fakes.fake_openai",
        "--latency",
        str(latency),
        "--structured",
        json.dumps(answer),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--latency",
        type=float,
        default=2.0,
        help="seconds per request at the fake server (a ~300-token structured answer from a hosted LLM: 2-5 s)",
    )
    ap.add_argument("--levels", default="8,32,64")
    ap.add_argument(
        "--clients",
        default="lean,langchain",
        help="labeling clients to measure: lean (aiohttp) and/or langchain (ChatOpenAI)",
    )
    ap.add_argument("--samples", type=int, default=4, help="episodes per shop task")
    ap.add_argument(
        "--tokenizer", default="auto", help="token counter (analysis.tokenizer): auto | PATH | tiktoken:ENC"
    )
    ns = ap.parse_args()
    counter = make_token_counter(ns.tokenizer)
    names = [c["name"] for c in load_recording("shop")]
    answer = {
        "labels": [{"capability": n, "label": "NA", "evidence": "not needed", "message_index": None} for n in names]
    }
    with tempfile.TemporaryDirectory() as tmp, Store(f"sqlite:///{tmp}/bench.db") as store:
        run = store.create_run("bench", {})
        collect_planted(store, run, samples=ns.samples)
        cfg = AnalysisConfig(passes=1)
        discover(store, recorded_analyst("shop"), run, cfg=cfg, counter=counter)
        episodes = analysis_episodes(store, run, fraction=cfg.split_fraction, seed=cfg.seed)
        sizes = [compact_episode(store.get_episode(e.id), counter).tokens for e in episodes]
        print(
            f"{len(episodes)} analysis episodes, {len(names)} capabilities, latency {ns.latency}s, tokens: {counter.name}, "
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        )
        print(
            f"{'client':>9} {'concurrency':>11} {'calls/s':>8} {'ideal':>7} {'ratio':>6} {'calls/ep/pass':>13} {'cpu ms/call':>11}"
        )
        runs = [(c, int(x)) for c in ns.clients.split(",") for x in ns.levels.split(",")]
        with fake_server(ns.latency, answer) as url:
            for p, (client, level) in enumerate(runs):
                # a model per event loop: its pooled async connections die with the loop that opened them
                model = make_chat_model(EndpointConfig(base_url=url, model="fake", max_retries=0))
                lcfg = AnalysisConfig(passes=p + 1, concurrency=level, lean_http=client == "lean")
                t0, cpu0 = time.perf_counter(), time.process_time()
                r = asyncio.run(label_pass(store, model, run, p, cfg=lcfg, counter=counter))
                wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
                assert r.failed == 0 and r.cached == 0, r
                rate = r.calls / wall
                ideal = r.episodes / (-(-r.episodes // level) * ns.latency)  # latency-bound: ceil(n / c) waves
                print(
                    f"{client:>9} {level:>11} {rate:>8.1f} {ideal:>7.1f} {rate / ideal:>6.2f} {r.calls / r.episodes:>13.2f} "
                    f"{1000 * cpu / r.calls:>11.1f}   (load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
                prefix = r.prefix_tokens
        share = mean(prefix / (prefix + s) for s in sizes)
        print(
            f"prompt tokens: shared prefix {prefix}, episode mean {mean(sizes):.0f} (max {max(sizes)}); "
            f"prefix share of a labeling prompt: {share:.2f}"
        )
        print(f"paper layout (one call per episode x capability): {len(names)} calls per episode per pass")


if __name__ == "__main__":
    main()
