"""Server time per page of the viewer (`gapforge ui`) on a big store: p50 / p95 per page.

Builds a run through the real graph with the lineage stages of tests/ui/lineage.py (planted
shop episodes, labels over R passes, the real selection statistics, env attempts with
self-test reports, adapters with their step logs, evaluation child runs, the report), by
default 10,000+ episodes, 31 capabilities (30 retained: all but the shop's decoy), 90 env
attempts (3 per retained capability) and 30 adapters, then requests every page N times
in-process and reads the app's own
`Server-Timing` header (time inside the app, rendering included). Baseline in the same run:
a static file (the cost of the request path alone). Target: p95 <= 300 ms on every page.

    .venv/bin/python -m bench.ui [--episodes 10000] [--capabilities 31] [--requests 30] [--keep DIR | --reuse DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SHOP_TASKS = 44
TARGET_MS = 300.0


def build(ws_root: Path, episodes: int, capabilities: int, passes: int) -> float:
    ws = ws_root / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "lineage.json").write_text(
        json.dumps(
            {
                "samples": math.ceil(episodes / SHOP_TASKS),
                "capabilities": capabilities,
                "failing_attempts": 2,
                "trials": 2,
                "steps": 12,
            }
        )
    )
    config = ws_root / "config.yaml"
    config.write_text(
        f"workspace: {ws}\nanalysis: {{passes: {passes}, bootstrap: 200}}\nsynthesis: {{max_attempts: 3}}\nstages: fixtures\n"
    )
    t0 = time.perf_counter()
    drive = "import sys; from pathlib import Path; from tests.ui.conftest import drive_lineage; print(drive_lineage(Path(sys.argv[1])))"
    out = subprocess.run(
        [sys.executable, "-c", drive, str(config)], cwd=ROOT, capture_output=True, text=True
    )  # the graph over tests/ui/lineage.py
    if out.returncode != 0:
        sys.exit(f"building the store failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return time.perf_counter() - t0


def server_ms(client, url: str) -> float:
    r = client.get(url)
    if r.status_code != 200:
        sys.exit(f"{url}: HTTP {r.status_code}\n{r.text[:500]}")
    return float(re.search(r"app;dur=([\d.]+)", r.headers["server-timing"]).group(1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=10_000)
    ap.add_argument("--capabilities", type=int, default=31, help="the dictionary; all but the shop decoy are retained")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--requests", type=int, default=30)
    ap.add_argument("--keep", type=Path, help="build the store in DIR and keep it")
    ap.add_argument("--reuse", type=Path, help="time a store built earlier with --keep DIR")
    ns = ap.parse_args()

    from fastapi.testclient import TestClient

    from gapforge.store.reader import StoreReader
    from gapforge.ui.app import create_app
    from gapforge.ui.sources import UiSettings

    tmp = None
    if ns.reuse:
        root = ns.reuse
    else:
        root = ns.keep or Path(tempfile.mkdtemp(prefix="gapforge-bench-ui-"))
        if not ns.keep:
            tmp = root
        print(f"building the store in {root} ...", flush=True)
        print(f"built in {build(root, ns.episodes, ns.capabilities, ns.passes):.0f} s")
    ws = root / "ws"
    url = f"sqlite:///{ws / 'gapforge.db'}"
    with StoreReader(url) as reader:
        run = reader.runs_page(["trace"], limit=1).rows[0].id
        n_eps = reader.episodes_page(run, limit=1).total
        caps = reader.capabilities(run)
        attempts = reader.env_attempts(run)
        adapters = reader.adapters(run)
        labels = sum(reader.label_counts(run, caps[0].name).values())
        deep = reader.episodes_page(run, limit=1).total // 2
        ep = reader.episodes_page(run, offset=deep, limit=1).rows[0].id
        cap = caps[-1].name
        lack_pages = reader.label_counts(run, cap).get("LACKING", 0) // 50
    print(
        f"store: run {run}, {n_eps} episodes, {len(caps)} capabilities, {len(attempts)} env attempts, {len(adapters)} adapters, "
        f"{ns.passes} labeling passes; {labels} labeled episodes per capability"
    )
    pages = {
        "static file (baseline)": "/static/ui.css",
        "runs": "/",
        "runs rows (htmx)": "/runs/rows",
        "run": f"/runs/{run}",
        "checkpoints": f"/runs/{run}/checkpoints",
        "capability LACKING p0": f"/runs/{run}/capability?name={cap}",
        "capability LACKING last page": f"/runs/{run}/capability?name={cap}&p={lack_pages}",
        "episodes p0": f"/runs/{run}/episodes",
        "episodes middle page": f"/runs/{run}/episodes?p={deep // 50}",
        "episodes failures, family": f"/runs/{run}/episodes?outcome=failure&family=policy_refusal",
        "episode": f"/episodes/{ep}",
        "env attempt (code + diff)": f"/envs/{attempts[-1].id}",
        "adapter": f"/runs/{run}/adapter?name={adapters[-1].name}",
        "evaluation": f"/runs/{run}/evaluation",
    }
    settings = UiSettings(
        store_url=url, checkpoint_path=ws / "checkpoints.sqlite", workspace=ws, allowed_hosts=("testserver",)
    )
    with TestClient(create_app(settings)) as client:
        for u in pages.values():
            server_ms(client, u)  # warm: imports, first connection, template compilation
        results = {}
        for name, u in pages.items():
            times = sorted(server_ms(client, u) for _ in range(ns.requests))
            results[name] = (statistics.median(times), times[max(0, math.ceil(0.95 * len(times)) - 1)])
    base_p50 = results["static file (baseline)"][0]
    print(f"\n{'page':32s} {'p50 ms':>8s} {'p95 ms':>8s} {'p95/target':>10s} {'p50/baseline':>12s}")
    for name, (p50, p95) in results.items():
        print(
            f"{name:32s} {p50:8.1f} {p95:8.1f} {p95 / TARGET_MS:10.2f} {p50 / base_p50 if base_p50 else float('nan'):12.1f}"
        )
    worst = max(p95 for n, (_, p95) in results.items())
    print(
        f"\nworst p95 {worst:.1f} ms (target {TARGET_MS:.0f} ms): {'meets' if worst <= TARGET_MS else 'MISSES'} the target; "
        f"{ns.requests} requests per page"
    )
    if tmp is not None:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
