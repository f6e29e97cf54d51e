"""routing.backend=gate through the routing stage (gapforge/stages/routing.py) on a small real run: the gate's examples
come from the synthetic envs' openings stored with the run and the analysis split's labels, it is stored with the run,
and every later user of the run (serve = evaluate) routes with it exactly; a policy served by vLLM (the stand-in) is
routed through a local copy of the base, never asking the server."""

from __future__ import annotations

from pathlib import Path

import pytest
from router_helpers import random_adapter
from test_gate import CAPS, one_thread, toy_examples  # noqa: F401 (one_thread: an autouse fixture)

from gapforge.agents.router.gate import task_labels
from gapforge.config import load_config
from gapforge.evaluation.router_record import load_router, router_record, save_router
from gapforge.evaluation.service import run_artifacts
from gapforge.stages import stage_context
from gapforge.stages.routing import Routing
from gapforge.store import Store
from gapforge.store.analysis import LabelIn
from gapforge.store.workspace import Workspace
from tests.fakes.fake_vllm import FakeVLLMServer

# analysis-split tasks, their first user messages and their labels per pass (two episodes each): (cap0, cap1) values
TASKS = {
    "shop-refusal-002": (
        "I want to return the kettle from order 4410, it arrived broken.",
        [("LACKING", "NA"), ("PRESENT", "NA")] * 3,
    ),
    "shop-write-002": (
        "Please add up the totals of my 3 orders from May and tell me the sum.",
        [("PRESENT", "LACKING"), ("PRESENT", "LACKING")] * 3,
    ),
    "shop-lookup-002": ("Hello, what are your opening hours on Monday?", [("NA", "NA"), ("NA", "NA")] * 3),
    "shop-compound-002": (
        "Return the lamp and add up my orders.",
        [("LACKING", "NA")] * 4 + [("NA", "NA")] * 2,
    ),  # needed in 2 passes of 3
    "shop-lookup-003": ("Hello, is the shop open on Friday?", []),
}
PROBES = [
    "I want to return the chair from order 1234, it arrived broken.",
    "Please add up the totals of my 7 orders from July and tell me the sum.",
    "Hello, what are your opening hours on Sunday?",
    "Where is my parcel?",
]


def _run(store: Store, workspace: Path, tiny_model_dir: Path) -> str:
    """Two retained capabilities with adapters, a stored router without a gate but with the synthetic envs' openings,
    labels of the analysis split."""
    run = store.create_run("trace", {}, run_id="r-gate")
    ws = Workspace(workspace)
    for seed, cap in enumerate(CAPS):
        store.put_capability(run, cap, definition=f"{cap} definition")
        store.set_capability_retained(run, cap, True)
        path = random_adapter(tiny_model_dir, ws.adapter_dir(run, cap), seed=seed + 3)
        store.put_adapter(run, cap, path=str(path), metrics={}, status="done", capability=cap)
    store.put_split(
        run,
        env="shop",
        seed=0,
        fraction=0.5,
        analysis_tasks=sorted(TASKS),
        heldout_tasks=["shop-refusal-001"],
        families={t: t.split("-")[1] for t in [*TASKS, "shop-refusal-001"]},
    )
    for task, (text, per_pass) in TASKS.items():
        ids = [
            store.put_episode(
                run,
                "shop",
                task,
                s,
                policy="base",
                messages=[{"role": "system", "content": "the policy"}, {"role": "user", "content": text}],
                reward=0.0,
                success=False,
                components={},
                termination="done",
                error=None,
                turns=1,
                timings={},
            )
            for s in range(2)
        ]
        for i, values in enumerate(per_pass):
            store.put_labels(run, i // 2, [LabelIn(ids[i % 2], cap, v) for cap, v in zip(CAPS, values)])
    openings = {c: [e.text for e in toy_examples(8) if e.label == c] for c in CAPS}
    save_router(
        store,
        run,
        router_record(run_artifacts(store, run), backend="transformers", openings=openings, seeds=list(range(8))),
    )
    return run


def _cfg(workspace: Path, tiny_model_dir: Path, *extra: str):
    return load_config(
        None,
        [
            f"workspace={workspace}",
            "policy.kind=local",
            f"policy.local_path={tiny_model_dir}",
            "routing.backend=gate",
            "routing.gate.max_tokens=64",
            *extra,
        ],
        environ={},
    )


def test_task_labels_follow_k_of_r_passes(workspace: Path, tiny_model_dir: Path) -> None:
    with Store(_cfg(workspace, tiny_model_dir).store_url) as store:
        run = _run(store, workspace, tiny_model_dir)
        labels, left = task_labels(store, run, CAPS, required_passes=3)
        assert {t: c for t, (c, _) in labels.items()} == {
            "shop-refusal-002": CAPS[0],
            "shop-write-002": CAPS[1],
            "shop-lookup-002": "none",
        }
        assert (
            labels["shop-refusal-002"][1] == TASKS["shop-refusal-002"][0]
        )  # the first user message, not the system prompt
        assert left == {"labels split across passes (neither needed nor NA in >= 3 of 3)": 1, "not labelled": 1}
        labels, _ = task_labels(store, run, CAPS, required_passes=2)  # K = 2: the compound task needs cap0 in 2 of 3
        assert labels["shop-compound-002"][0] == CAPS[0]


def test_a_capability_every_task_needs_routes_only_where_the_base_lacks_it(
    workspace: Path, tiny_model_dir: Path
) -> None:
    """cap1 applies to every labelled task (PRESENT or LACKING everywhere): by applicability alone no task could be
    `none`; it is needed only where an episode lacked it in >= K passes, and `none` where the base did it every time."""
    universal = {
        "shop-write-001": [("NA", "LACKING"), ("NA", "PRESENT")] * 3,  # lacked in every pass -> cap1
        "shop-write-004": [("NA", "PRESENT")] * 6,  # done every time -> none
        "shop-refusal-004": [("LACKING", "PRESENT")] * 6,  # cap0 by applicability, as before
        "shop-write-005": [("NA", "LACKING")] * 2 + [("NA", "PRESENT")] * 4,  # lacked in 1 pass of 3
    }
    with Store(_cfg(workspace, tiny_model_dir).store_url) as store:
        run = store.create_run("trace", {}, run_id="r-universal")
        for cap in CAPS:
            store.put_capability(run, cap, definition=f"{cap} definition")
        store.put_split(
            run,
            env="shop",
            seed=0,
            fraction=0.5,
            analysis_tasks=sorted(universal),
            heldout_tasks=["shop-refusal-001"],
            families={t: t.split("-")[1] for t in [*universal, "shop-refusal-001"]},
        )
        for task, per_pass in universal.items():
            ids = [
                store.put_episode(
                    run,
                    "shop",
                    task,
                    s,
                    policy="base",
                    messages=[{"role": "user", "content": f"about {task}"}],
                    reward=0.0,
                    success=False,
                    components={},
                    termination="done",
                    error=None,
                    turns=1,
                    timings={},
                )
                for s in range(2)
            ]
            for i, values in enumerate(per_pass):
                store.put_labels(run, i // 2, [LabelIn(ids[i % 2], cap, v) for cap, v in zip(CAPS, values)])
        labels, left = task_labels(store, run, CAPS, required_passes=3)
        assert {t: c for t, (c, _) in labels.items()} == {
            "shop-write-001": CAPS[1],
            "shop-write-004": "none",
            "shop-refusal-004": CAPS[0],
        }
        assert left == {
            "labels split across passes (neither needed nor NA in >= 3 of 3)": 1
        }  # write-005: cap1 lacked in 1 of 3
        labels, _ = task_labels(store, run, CAPS, required_passes=1)
        assert labels["shop-write-005"][0] == CAPS[1]


def test_the_stored_gate_is_the_one_every_later_user_routes_with(workspace: Path, tiny_model_dir: Path) -> None:
    cfg = _cfg(workspace, tiny_model_dir)
    with Store(cfg.store_url) as store:
        run = _run(store, workspace, tiny_model_dir)
        lines: list[str] = []
        built = Routing(stage_context(cfg, store, lambda where, text: lines.append(text)))
        _, _, router = built.routed(run, baseline=False, keep=True)
        assert built.source == "built (stored now)"
        record = load_router(store, run)
        assert (
            record is not None and record.backend == "gate" and record.gate is not None and record.openings is not None
        )
        ids = [e.id for e in record.gate.examples]
        assert (
            ids.count("target:shop-lookup-002") == 1 and "target:shop-compound-002" not in ids and len(ids) == 2 * 8 + 3
        )
        assert sum(record.gate.left_out.values()) == 2 and any("held-out accuracy" in ln for ln in lines)
        evaluated = router.route_batch(PROBES)

        served = Routing(stage_context(cfg, store))  # `gapforge serve RUN`: reads the router, writes nothing
        _, _, again = served.routed(run, baseline=False, keep=False)
        assert served.source == "stored"
        assert again.route_batch(PROBES) == evaluated  # labels, margins and every log-probability
        assert [d.capability for d in evaluated[:2]] == CAPS

        # the policy served by vLLM (policy.kind=endpoint): the gate reads a local copy of the base; the server is never asked to route
        with FakeVLLMServer("tiny-base") as vllm:
            ecfg = _cfg(
                workspace,
                tiny_model_dir,
                "policy.kind=endpoint",
                f"policy.endpoint.base_url={vllm.base_url}",
                "policy.endpoint.model=tiny-base",
            )
            remote = Routing(stage_context(ecfg, store))
            _, backend, via_vllm = remote.routed(run, baseline=False, keep=False)
            assert remote.source == "stored" and type(backend).__name__ == "VLLMBackend"
            assert via_vllm.route_batch(PROBES) == evaluated
            assert {path for path, _ in vllm.requests} == {
                "/v1/load_lora_adapter"
            }  # adapters registered; no completions for routing


def test_a_vllm_run_without_a_stored_gate_trains_it_through_the_local_copy(
    workspace: Path, tiny_model_dir: Path
) -> None:
    cfg = _cfg(workspace, tiny_model_dir)
    with Store(cfg.store_url) as store:
        run = _run(store, workspace, tiny_model_dir)
        local = Routing(stage_context(cfg, store))
        _, _, router = local.routed(run, baseline=False, keep=False)  # trained here, not stored
        assert local.source == "built" and load_router(store, run).backend == "transformers"
        with FakeVLLMServer("tiny-base") as vllm:
            lines: list[str] = []
            ecfg = _cfg(
                workspace,
                tiny_model_dir,
                "policy.kind=endpoint",
                f"policy.endpoint.base_url={vllm.base_url}",
                "policy.endpoint.model=tiny-base",
            )
            _, _, remote = Routing(stage_context(ecfg, store, lambda where, text: lines.append(text))).routed(
                run, baseline=False, keep=True
            )
        assert any("local copy of the base" in ln for ln in lines)
        assert load_router(store, run).gate is not None
        got, want = remote.route_batch(PROBES), router.route_batch(PROBES)
        assert [d.label for d in got] == [d.label for d in want]
        assert [d.margin for d in got] == pytest.approx([d.margin for d in want], abs=1e-4)


def test_a_target_task_outvoted_on_its_own_first_message_is_left_out() -> None:
    """A lookup labelled `none` (its episodes never reached the record) whose question the synthetic env and other tasks
    carry under the capability would teach the gate `none` for that question: it is left out. A lone synthetic opening
    never is, and a tie keeps the task."""
    from gapforge.agents.router.gate import GateExample, agree_on_text

    q, other = "Hello, how much did I pay in total for one of my recent orders?", "Hi, I'd like to cancel an order."
    examples = [GateExample(id=f"synthetic:scope:seed={i}", text=q, label="scope", split="train") for i in range(3)]
    examples += [
        GateExample(id="target:lookup-004", text=q, label="scope", split="train"),
        GateExample(id="target:lookup-005", text=q, label="none", split="train"),
        GateExample(id="synthetic:pre:seed=0", text=other, label="pre", split="train"),
        GateExample(id="target:write-001", text=other, label="none", split="train"),
    ]
    kept, dropped = agree_on_text(examples)
    assert dropped == 1 and "target:lookup-005" not in {e.id for e in kept}
    assert {"synthetic:pre:seed=0", "target:write-001", "target:lookup-004"} <= {e.id for e in kept}  # a tie: both stay
