"""End to end in a real headless Chromium (Debian's `chromium` + `chromium-driver`, driven by
Selenium; `.ci/run` installs both): `gapforge ui` serves a run built through the real graph, the
browser walks runs → run → capability → episode → env attempt → adapter → evaluation by
clicking links, checks what each page shows against the store, watches a running run's status
change live (htmx polling, no reload) and saves screenshots. Skips only where no browser is
installed."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_helpers import wait_until_listening

from gapforge.store import Store
from gapforge.store.reader import StoreReader
from tests.ui.conftest import Lineage

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and DRIVER), reason="no headless Chromium here: apt-get install chromium chromium-driver"
)
pytest.importorskip("fastapi", reason="the viewer needs the ui extra: pip install -e '.[ui]'")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed: pip install -e '.[dev]'")

from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(lineage: Lineage, tmp_path: Path) -> Iterator[tuple[str, Lineage]]:
    """`gapforge ui` (the real command, its own process) over a copy of the run's workspace."""
    ws = tmp_path / "ws"
    shutil.copytree(lineage.workspace, ws)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({**yaml.safe_load(lineage.config.read_text()), "workspace": str(ws)}))
    copy = Lineage(config, ws, lineage.run_id)
    port = _free_port()
    # started outside the checkout, as a user starts it: from the root, `-m` puts it on sys.path, where its top-level
    # folders import under their own names and would hide code that asks for one of them instead of gapforge.<folder>
    proc = subprocess.Popen(
        [sys.executable, "-m", "gapforge.cli", "ui", "--config", str(config), "--port", str(port), "--refresh", "0.3"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until_listening(proc, port, what="gapforge ui")
        yield f"http://127.0.0.1:{port}", copy
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def browser() -> Iterator[Any]:
    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def click(driver: Any, css: str, text: str | None = None) -> None:
    links = driver.find_elements(By.CSS_SELECTOR, css)
    chosen = next((a for a in links if text is None or a.text.strip() == text), None)
    assert chosen is not None, (css, text, [a.text for a in links])
    chosen.click()
    WebDriverWait(driver, 10).until(lambda d: d.execute_script("return document.readyState") == "complete")


def cells(driver: Any, row_css: str) -> str:
    return driver.find_element(By.CSS_SELECTOR, row_css).text


def test_walk_the_lineage_by_clicking(served: tuple[str, Lineage], browser: Any, tmp_path: Path) -> None:
    base, lin = served
    rid, cap = lin.run_id, "precondition_verification"
    with StoreReader(lin.store_url) as store:
        summaries = {s.capability: s for s in store.capability_summaries(rid)}
        counts = store.label_counts(rid, cap)
        attempts = store.env_attempts(rid, cap)
        adapter = store.get_adapter(rid, cap)
        evals = {e.name.removeprefix("eval:"): e.metrics for e in store.evaluations(rid) if e.name.startswith("eval:")}
        first_lacking = store.labeled_episodes(rid, cap, "LACKING", limit=1).rows[0].episode
        episode = store.get_episode(first_lacking.id)

    browser.get(base + "/")
    assert "done" in cells(browser, f'tr[data-run="{rid}"]')
    click(browser, f'tr[data-run="{rid}"] a', rid)

    assert rid in browser.find_element(By.TAG_NAME, "h1").text  # run
    for name, s in summaries.items():
        assert s.verdict in cells(browser, f'tr[data-capability="{name}"]')
    assert browser.find_elements(By.CSS_SELECTOR, "svg.plot circle")  # the gap-vs-coverage plot drew its points
    browser.save_screenshot(str(tmp_path / "run.png"))
    click(browser, f'tr[data-capability="{cap}"] a', cap)

    tabs = {
        a.get_attribute("data-label"): a.text for a in browser.find_elements(By.CSS_SELECTOR, ".tabs a")
    }  # capability
    assert tabs["LACKING"] == f"LACKING ({counts['LACKING']})"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#labeled tr[data-episode]")) == min(50, counts["LACKING"])
    click(browser, f'tr[data-episode="{episode.id}"] a', f"#{episode.id}")

    assert len(browser.find_elements(By.CSS_SELECTOR, "li.msg")) == len(episode.messages)  # episode
    assert browser.find_element(By.CSS_SELECTOR, "dd.reward").text == f"{episode.reward:.3f}"
    click(browser, "#episode-labels a", cap)  # back to the capability through what the analyst said
    click(browser, "dd a", f"attempt {attempts[-1].attempt}")

    assert len(browser.find_elements(By.CSS_SELECTOR, "#checks tr[data-check]")) == 12  # env attempt
    assert "accepted" in browser.find_element(By.ID, "verdict").text
    assert browser.find_elements(By.CSS_SELECTOR, "span.gd, span.gi")  # the highlighted diff to the previous attempt
    click(browser, "dd a", f"adapter {adapter.name}")

    assert browser.find_element(By.ID, "kept").text.startswith(f"step {adapter.metrics['best_step']}")  # adapter
    assert len(browser.find_elements(By.CSS_SELECTOR, "#curve tbody tr")) == len(adapter.metrics["curve"])
    assert len(browser.find_elements(By.CSS_SELECTOR, "#steps tbody tr")) == adapter.metrics["steps"]
    click(browser, "#evaluation-link")

    for name, m in evals.items():  # evaluation
        pr = m["pass_rate"]
        assert f"{100 * pr['value']:.1f}% [{100 * pr['low']:.1f}, {100 * pr['high']:.1f}]" in cells(
            browser, f'tr[data-policy="{name}"]'
        )
    assert browser.find_elements(By.CSS_SELECTOR, "#confusion td.heat")
    shot = tmp_path / "evaluation.png"
    browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
    click(
        browser,
        'tr[data-policy="base"] a',
        f"{100 * evals['base']['pass_rate']['value']:.1f}% "
        f"[{100 * evals['base']['pass_rate']['low']:.1f}, {100 * evals['base']['pass_rate']['high']:.1f}]",
    )
    assert browser.current_url.endswith(f"/runs/{rid}.eval.base/episodes")  # the number's episodes
    assert len(browser.find_elements(By.CSS_SELECTOR, "#episodes tr[data-episode]")) == min(
        50, evals["base"]["episodes"]
    )
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, severe  # no script error, no CSP violation


def test_a_running_run_refreshes_live(served: tuple[str, Lineage], browser: Any) -> None:
    base, lin = served
    with Store(lin.store_url) as store:
        store.set_run_status(lin.run_id, "running")
    browser.get(base + "/")
    status = f'tr[data-run="{lin.run_id}"] td.status'
    assert cells(browser, status) == "running"
    browser.execute_script("window.__same_page = true")
    with Store(lin.store_url) as store:
        store.set_run_status(lin.run_id, "done")
    WebDriverWait(browser, 15).until(lambda d: d.find_element(By.CSS_SELECTOR, status).text == "done")
    assert browser.execute_script(
        "return window.__same_page === true"
    )  # htmx swapped the rows; the page was not reloaded
    assert not browser.find_elements(By.CSS_SELECTOR, "tbody[hx-trigger]")  # the done rows poll no more
