"""The report in a real browser: headless Chromium opens report.html from disk with the network off.

Checks what a reader sees: the leaderboard rows in rank order, every image
decoded (naturalWidth > 0), the per-case anchors, and that the page asked for
nothing over the network. A screenshot is kept in test-artifacts/.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.browser import chromium, offline_page
from tests.helpers.paths import ARTIFACTS
from tests.helpers.report_runs import make_model_runs, make_opis_run, make_worldcast_run

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def report_file(tmp_path_factory) -> Path:
    from worldeval.report import build_report

    root = tmp_path_factory.mktemp("browser")
    runs = [make_opis_run(root), make_worldcast_run(root)]
    return build_report(runs, root / "report.html", bootstrap=100)


@pytest.fixture(scope="module")
def browser(request):
    chromium()  # skip before spending time on the report
    report_file = request.getfixturevalue("report_file")
    with offline_page(report_file) as driver:
        yield driver


def test_leaderboards_render_in_rank_order(browser):
    from selenium.webdriver.common.by import By

    rows = browser.find_elements(By.CSS_SELECTOR, "#opis-leaderboard tr.leaderboard-row")
    assert [r.get_attribute("data-model") for r in rows] == ["steady", "leaky"]
    cells = [c.text for c in rows[0].find_elements(By.TAG_NAME, "td")]
    # steady: every object matched, a = 0.9, s = 0.8 everywhere -> 100, 90, 80, C_S 100, OPIS 88
    assert cells[:6] == ["1", "steady", "100.00", "90.00", "80.00", "100.00"]
    assert cells[6].startswith("88.00")
    leaky = [c.text for c in rows[1].find_elements(By.TAG_NAME, "td")]
    assert leaky[1] == "leaky" and leaky[6].startswith("58.00")

    wc = browser.find_elements(By.CSS_SELECTOR, "#worldcast-leaderboard tr.leaderboard-row")
    assert [r.get_attribute("data-model") for r in wc] == ["painter"]
    assert wc[0].find_elements(By.TAG_NAME, "td")[2].text == "83.00 [83.0, 83.0]"


def test_every_image_loaded_and_nothing_fetched(browser):
    imgs = browser.execute_script(
        "return Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.getAttribute('alt'),"
        " i.getAttribute('src').slice(0, 22)])")
    # 2 references + 2 models x 2 cases x 4 frames + 4 timelines + 4 diagnostic plots
    # + WorldCast bar plot + 2 inputs + 2 cases x 2 steps
    assert len(imgs) == 2 + 16 + 4 + 4 + 1 + 2 + 4
    broken = [alt for complete, width, alt, _ in imgs if not complete or width <= 0]
    assert not broken, f"images that did not load: {broken}"
    assert all(src.startswith("data:image/") for *_, src in imgs)
    fetched = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name).filter(n => !n.startsWith('data:'))")
    assert fetched == []


def test_case_anchors_and_screenshot(browser):
    from selenium.webdriver.common.by import By

    link = browser.find_element(By.CSS_SELECTOR, "#opis-case-table a[href='#rollout-leaky-case_a']")
    link.click()
    target = browser.find_element(By.ID, "rollout-leaky-case_a")
    assert "leaky" in target.find_element(By.TAG_NAME, "h4").text
    assert browser.execute_script("return location.hash") == "#rollout-leaky-case_a"
    ARTIFACTS.mkdir(exist_ok=True)
    browser.execute_script("window.scrollTo(0, 0)")
    assert browser.save_screenshot(str(ARTIFACTS / "report_top.png"))
    browser.execute_script("document.getElementById('opis-diagnostics').scrollIntoView()")
    assert browser.save_screenshot(str(ARTIFACTS / "report_diagnostics.png"))
    target = browser.find_element(By.ID, "case-case_a")
    browser.execute_script("arguments[0].scrollIntoView()", target)
    assert browser.save_screenshot(str(ARTIFACTS / "report_case.png"))
    browser.execute_script("document.getElementById('worldcast-cases').scrollIntoView()")
    assert browser.save_screenshot(str(ARTIFACTS / "report_worldcast.png"))
    assert (ARTIFACTS / "report_top.png").stat().st_size > 10_000


def test_multi_run_report_shows_every_models_frames(tmp_path):
    """One run folder per model (the demo's layout): every model's strips are on screen, not just the first's."""
    chromium()
    from selenium.webdriver.common.by import By

    from worldeval.report import build_report

    models = ("steady", "leaky", "still")
    report = build_report(make_model_runs(tmp_path, models), tmp_path / "report.html", bootstrap=0)
    with offline_page(report) as page:
        for m in models:
            for c in ("case_a", "case_b"):
                block = page.find_element(By.ID, f"rollout-{m}-{c}")
                frames = block.find_elements(By.CSS_SELECTOR, "img.frame")
                assert len(frames) == 4, (m, c)
                assert all(f.is_displayed() and page.execute_script(
                    "return arguments[0].complete && arguments[0].naturalWidth > 0", f) for f in frames), (m, c)
                assert "no frames record" not in block.text
        assert "no frames record" not in page.find_element(By.TAG_NAME, "body").text
        ARTIFACTS.mkdir(exist_ok=True)
        page.execute_script("arguments[0].scrollIntoView()", page.find_element(By.ID, "case-case_a"))
        assert page.save_screenshot(str(ARTIFACTS / "report_multi_run_case.png"))
