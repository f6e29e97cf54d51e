"""The viewer's routes with FastAPI's TestClient on a run built through the real graph: what each
page shows is checked against the store; the XSS probe renders inert; a missing or empty store
is one clear page; nothing is ever written."""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the viewer needs the ui extra: pip install -e '.[ui]'")
from fastapi.testclient import TestClient  # noqa: E402

from gapforge.store import Store  # noqa: E402
from gapforge.store.reader import StoreReader  # noqa: E402
from gapforge.ui.app import create_app
from gapforge.ui.pages_runs import RUN_STEPS  # noqa: E402
from gapforge.ui.sources import UiSettings  # noqa: E402
from tests.ui import lineage_rows  # noqa: E402
from tests.ui.conftest import Lineage  # noqa: E402


@pytest.fixture(scope="module")
def client(lineage: Lineage) -> Iterator[TestClient]:
    with TestClient(create_app(lineage.settings()), raise_server_exceptions=False) as c:
        yield c


@pytest.fixture(scope="module")
def reader(lineage: Lineage) -> Iterator[StoreReader]:
    with StoreReader(lineage.store_url) as r:
        yield r


def row(page: str, attr: str, value: str) -> str:
    """The <tr> whose data-ATTR is VALUE (its HTML up to </tr>)."""
    m = re.search(rf'<tr data-{attr}="{re.escape(html.escape(value))}"[^>]*>(.*?)</tr>', page, re.S)
    assert m, f"no row data-{attr}={value!r}"
    return m.group(1)


def text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def get(client: TestClient, url: str, status: int = 200) -> str:
    r = client.get(url)
    assert r.status_code == status, (url, r.status_code, r.text[:500])
    assert "Traceback" not in r.text
    return r.text


def test_runs_and_run_pages_match_the_store(client: TestClient, reader: StoreReader, lineage: Lineage) -> None:
    rid = lineage.run_id
    runs = get(client, "/")
    cells = text(row(runs, "run", rid))
    steps = len(RUN_STEPS)  # the graph's steps the progress counts (the capability branches as one)
    assert "done" in cells and "report" in cells and f"{steps}/{steps}" in cells  # status, stage, every step finished
    base = next(e for e in reader.evaluations(rid) if e.name == "eval:base").metrics["pass_rate"]["value"]
    assert f"{100 * base:.1f}%" in cells

    page = get(client, f"/runs/{rid}")
    summaries = {s.capability: s for s in reader.capability_summaries(rid)}
    assert len(summaries) == 3
    for name, s in summaries.items():
        cells = text(row(page, "capability", name))
        assert s.verdict in cells and f"{s.gap:.2f} [{s.gap_low:.2f}, {s.gap_high:.2f}]" in cells
    assert "#1 #2" in text(row(page, "capability", "tool_argument_precision"))  # two env attempts
    assert "(step 0: untrained)" in text(row(page, "capability", "precondition_verification"))
    timeline = re.search(r'<table class="grid" id="timeline">(.*?)</table>', page, re.S).group(1)
    nodes = [text(m) for m in re.findall(r"<tr><td>\d+</td><td>([^<]+)</td>", timeline)]
    assert nodes[:4] == ["start", "collect_rollouts", "discover", "label"] and nodes[-1] == "report"
    assert "label: llm calls" in text(timeline)  # the cost each step added
    assert '<svg class="plot"' in page and "gap vs coverage" in page
    for line in ("policy_refusal: base", "TRACE − base"):
        assert line in html.unescape(page)
    cost = re.search(r'<table class="grid" id="cost-stages">(.*?)</table>', page, re.S).group(1)
    assert re.search(r"<td>label</td>(<td>[^<]*</td>){7}<td>\$[\d.]+</td>", cost)  # each stage with its dollars
    per_capability = re.search(r'<table class="grid" id="cost-capabilities">(.*?)</table>', page, re.S).group(1)
    assert "<td>tool_argument_precision</td>" in per_capability  # two env attempts: its own synthesis cost
    assert "TRACE (collection, analysis, synthesis, training, router): $" in html.unescape(page)


def test_capability_page_pages_through_labeled_episodes(
    client: TestClient, reader: StoreReader, lineage: Lineage
) -> None:
    rid, cap = lineage.run_id, "user_confirmation"
    counts = reader.label_counts(rid, cap)
    page = get(client, f"/runs/{rid}/capability?name={cap}&label=LACKING")
    for value, n in counts.items():
        assert f"{value} ({n})" in page
    want = reader.labeled_episodes(rid, cap, "LACKING", limit=50)
    shown = [int(i) for i in re.findall(r'<tr data-episode="(\d+)">', page)]
    assert shown == [r.episode.id for r in want.rows]
    first = want.rows[0]
    votes = re.search(r'<td class="votes">(.*?)</td>', row(page, "episode", str(first.episode.id)), re.S).group(1)
    assert re.findall(r'class="vote [a-z]+"[^>]*>([A-Z]+)<', votes) == [
        v.value for v in first.votes
    ]  # the R votes, by pass
    last = (counts["LACKING"] - 1) // 50
    tail = get(client, f"/runs/{rid}/capability?name={cap}&label=LACKING&p={last}")
    assert len(re.findall(r'<tr data-episode="', tail)) == counts["LACKING"] - 50 * last
    assert f"of {counts['LACKING']}" in tail and 'rel="next"' not in tail


def test_episode_page_is_the_trajectory(client: TestClient, reader: StoreReader, lineage: Lineage) -> None:
    lacking = reader.labeled_episodes(lineage.run_id, "precondition_verification", "LACKING", limit=1).rows[0].episode
    ep = reader.get_episode(lacking.id)  # a failed refusal episode of the analysis split
    page = get(client, f"/episodes/{ep.id}")
    roles = re.findall(r'<li class="msg [a-z]+" data-role="([a-z]+)">', page)
    assert roles == [m["role"] for m in ep.messages]
    calls = [c for m in ep.messages for c in (m.get("tool_calls") or [])]
    assert calls and all(html.escape(c["name"]) in page for c in calls)
    for k, v in ep.components.items():
        assert f"<td>{k}</td><td>{v:.3f}</td>" in page  # the reward breakdown
    labels = reader.episode_labels(ep.id)
    assert labels and all(f"pass {lab.pass_index}: {html.escape(lab.evidence)}" in page for lab in labels)


def test_env_attempt_adapter_and_evaluation_pages(client: TestClient, reader: StoreReader, lineage: Lineage) -> None:
    rid = lineage.run_id
    one, second = reader.env_attempts(rid, "tool_argument_precision")
    page = get(client, f"/envs/{second.id}")
    assert len(re.findall(r'<tr data-check="', page)) == len(lineage_rows.CHECKS)
    assert "Diff to attempt 1" in page and "WINDOW_DAYS" in page  # the changed constant is in the diff
    assert 'class="code' in page  # highlighted
    first = get(client, f"/envs/{one.id}")
    assert "FAIL" in text(row(first, "check", "result_format")) and "Diff to attempt" not in first

    page = get(client, f"/runs/{rid}/adapter?name=tool_argument_precision")
    adapter = reader.get_adapter(rid, "tool_argument_precision")
    assert f"step {adapter.metrics['best_step']} of 12 steps" in text(page)
    steps = (lineage.workspace / "adapters" / rid / "tool_argument_precision" / "steps.jsonl").read_text().splitlines()
    assert len(re.findall(r"<tr><td>\d+</td><td>0\.\d{3}</td>", page.split('id="steps"')[1])) == len(steps)
    assert "step 0 (untrained" in get(client, f"/runs/{rid}/adapter?name=precondition_verification")

    page = get(client, f"/runs/{rid}/evaluation")
    for e in reader.evaluations(rid):
        if e.name.startswith("eval:"):
            cells = row(page, "policy", e.name.removeprefix("eval:"))
            pr = e.metrics["pass_rate"]
            assert f"{100 * pr['value']:.1f}% [{100 * pr['low']:.1f}, {100 * pr['high']:.1f}]" in cells
            assert f'href="/runs/{e.metrics["child_run"]}/episodes"' in cells  # the number links to its episodes
    child = f"{rid}.eval.base"
    listed = get(client, f"/runs/{child}/episodes?family=policy_refusal")
    assert len(re.findall(r'<tr data-episode="', listed)) == reader.episodes_page(child, family="policy_refusal").total
    assert 'id="confusion"' in page and 'id="routing"' in page


def test_checkpoints_page_has_the_fork_commands(client: TestClient, lineage: Lineage) -> None:
    page = get(client, f"/runs/{lineage.run_id}/checkpoints")
    forks = re.findall(r"gapforge fork (\S+) --checkpoint (\S+)</code>", page)
    assert forks and all(r == lineage.run_id for r, _ in forks)
    for _, cid in forks:
        nxt = text(row(page, "checkpoint", cid))
        assert any(n in nxt for n in ("collect_rollouts", "discover", "label", "select"))
    assert len(forks) < len(re.findall(r'<tr data-checkpoint="', page))  # not after select


def test_xss_probe_renders_inert(client: TestClient, reader: StoreReader, lineage: Lineage) -> None:
    rid = lineage.run_id
    probe = reader.episodes_page(rid, task_id=lineage_rows.PROBE_TASK).rows[0]
    env = reader.env_attempts(rid, "tool_argument_precision")[0]
    urls = [
        "/",
        f"/runs/{rid}",
        f"/episodes/{probe.id}",
        f"/runs/{rid}/episodes?task={lineage_rows.PROBE_TASK}",
        f"/runs/{rid}/capability?name=user_confirmation&label=LACKING",
        f"/envs/{env.id}",
    ]
    for url in urls:
        r = client.get(url)
        assert r.status_code == 200
        assert "default-src 'none'; script-src 'self'" in r.headers["content-security-policy"]
        tags = _Tags(r.text).tags
        assert [a for t, a in tags if t == "script"] == [{"src": "/static/htmx.min.js", "defer": None}], url
        assert not [t for t, _ in tags if t in ("img", "iframe", "object", "embed", "b")], url
        assert not [(t, k) for t, a in tags for k in a if k.startswith("on")], url  # no event handler attribute
        assert not [a for _, a in tags if (a.get("href") or "").lower().startswith("javascript:")], url
    episode = client.get(f"/episodes/{probe.id}").text
    assert "&lt;script&gt;alert(&#34;xss&#34;)&lt;/script&gt;" in episode  # shown, as text
    assert "[click me](javascript:alert(document.cookie))" in episode  # a markdown link stays text


def test_unknown_ids_are_one_line_pages(client: TestClient, lineage: Lineage) -> None:
    for url in (
        "/runs/r-nope",
        "/episodes/99999999",
        "/envs/99999999",
        f"/runs/{lineage.run_id}/capability?name=nope",
        f"/runs/{lineage.run_id}/adapter?name=nope",
        "/nowhere",
    ):
        page = get(client, url, 404)
        assert '<p class="message">' in page
    assert "its capabilities: precondition_verification" in get(
        client, f"/runs/{lineage.run_id}/capability?name=nope", 404
    )
    r = client.post("/")
    assert r.status_code == 405 and "only reads" in r.text


class _Tags(HTMLParser):
    """Every element the browser would build: (tag, attributes)."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_viewing_writes_nothing(lineage: Lineage) -> None:
    db, ck = lineage.workspace / "gapforge.db", lineage.workspace / "checkpoints.sqlite"
    before = (_sha(db), _sha(ck))
    with TestClient(create_app(lineage.settings()), raise_server_exceptions=False) as c:
        for url in (
            "/",
            f"/runs/{lineage.run_id}",
            f"/runs/{lineage.run_id}/checkpoints",
            f"/runs/{lineage.run_id}/evaluation",
        ):
            get(c, url)
    assert (_sha(db), _sha(ck)) == before
    with StoreReader(lineage.store_url) as r, pytest.raises(Exception, match="readonly|read-only"):
        r.set_run_status(lineage.run_id, "failed")


def test_missing_store_is_one_clear_page(tmp_path: Path) -> None:
    ws = tmp_path / "nothing" / "ws"
    settings = UiSettings(
        store_url=f"sqlite:///{ws / 'gapforge.db'}",
        checkpoint_path=ws / "checkpoints.sqlite",
        workspace=ws,
        allowed_hosts=("testserver",),
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        page = get(c, "/")
        assert "No store yet" in page and "gapforge demo" in page
        assert "No store yet" in get(c, "/runs/r-1", 404)
    assert not (tmp_path / "nothing").exists()  # the viewer created nothing


def test_empty_store_and_a_store_without_tables(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gapforge.db'}"
    Store(url).close()  # the schema, no run
    settings = UiSettings(
        store_url=url,
        checkpoint_path=tmp_path / "checkpoints.sqlite",
        workspace=tmp_path,
        allowed_hosts=("testserver",),
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        assert "No graph run in this store yet" in get(c, "/")
    bare = tmp_path / "bare.db"
    bare.write_bytes(b"")
    settings = UiSettings(
        store_url=f"sqlite:///{bare}",
        checkpoint_path=tmp_path / "none.sqlite",
        workspace=tmp_path,
        allowed_hosts=("testserver",),
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        assert "is empty (no gapforge tables yet)" in get(c, "/")


def test_running_run_polls_until_it_is_done(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gapforge.db'}"
    with Store(url) as store:
        rid = store.create_run("trace", {"command": "run"})
        store.set_run_status(rid, "running")
    settings = UiSettings(
        store_url=url,
        checkpoint_path=tmp_path / "checkpoints.sqlite",
        workspace=tmp_path,
        poll_s=0.5,
        allowed_hosts=("testserver",),
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        assert 'hx-get="/runs/rows?p=0" hx-trigger="every 0.5s"' in get(c, "/")
        assert f'hx-get="/runs/{rid}/live"' in get(c, f"/runs/{rid}")
        with Store(url) as store:
            store.set_run_status(rid, "done")
        rows = get(c, "/runs/rows")
        assert "hx-trigger" not in rows and "done" in text(row(rows, "run", rid))


def test_other_hosts_are_refused(lineage: Lineage) -> None:
    with TestClient(create_app(lineage.settings()), raise_server_exceptions=False) as c:
        assert c.get("/", headers={"host": "attacker.example"}).status_code == 400


def test_cli_refuses_a_busy_port_in_one_line(lineage: Lineage) -> None:
    import socket

    from typer.testing import CliRunner

    from gapforge.cli import app
    from gapforge.cli_ui import allowed_hosts

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = CliRunner().invoke(app, ["ui", "--config", str(lineage.config), "--port", str(port)])
    assert out.exit_code == 2 and f"cannot listen on 127.0.0.1:{port}" in out.output and "Traceback" not in out.output
    assert allowed_hosts("127.0.0.1") == ("127.0.0.1", "localhost", "::1")
    assert allowed_hosts("10.1.2.3")[-1] == "10.1.2.3" and allowed_hosts("0.0.0.0") == ("*",)


def test_a_run_paused_for_review_says_how_to_decide(tmp_path: Path) -> None:
    from tests.ui.conftest import drive_lineage, write_lineage_config

    config = write_lineage_config(tmp_path)
    rid = drive_lineage(config, review=True)
    paused = Lineage(config, tmp_path / "ws", rid)
    with TestClient(create_app(paused.settings()), raise_server_exceptions=False) as c:
        assert "paused (review)" in text(row(get(c, "/"), "run", rid))
        assert "paused for review" in get(c, f"/runs/{rid}")
        page = get(c, f"/runs/{rid}/checkpoints")
        assert (
            "Paused for review" in page
            and f"gapforge review {rid} --approve" in page
            and f"gapforge run --resume {rid}" in page
        )
        assert "precondition_verification" in text(
            re.search(r'id="review">(.*?)</section>', page, re.S).group(1)
        )  # the retained list
