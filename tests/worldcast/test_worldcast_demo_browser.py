"""`worldeval worldcast demo`'s report in headless Chromium (network off): every model's step images decode on
the per-case pages, the leaderboard carries CIs and ranks, and the scripted-judge notice is shown."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tests.helpers.browser import chromium, offline_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    chromium()  # skip before running the demo
    from worldeval.cli import app

    out = tmp_path_factory.mktemp("wcdemo")
    res = CliRunner().invoke(app, ["worldcast", "demo", "--out", str(out), "--bootstrap", "200", "-q"])
    assert res.exit_code == 0, res.output
    with offline_page(out / "report.html") as driver:
        yield driver


def test_demo_report_in_a_browser(page):
    from selenium.webdriver.common.by import By

    rows = page.find_elements(By.CSS_SELECTOR, "#worldcast-leaderboard tr.leaderboard-row")
    assert [(r.get_attribute("data-model"), r.get_attribute("data-rank")) for r in rows] == [("correct", "1"), ("shuffled", "2")]
    assert "[" in rows[0].find_elements(By.TAG_NAME, "td")[2].text  # Final with its interval
    unscored = page.find_elements(By.CSS_SELECTOR, "#worldcast-unscored tr.unscored-row")
    assert [r.get_attribute("data-model") for r in unscored] == ["broken"]
    assert "Scripted judge" in page.find_element(By.ID, "worldcast-scripted").text
    for model in ("correct", "shuffled"):
        block = page.find_element(By.ID, f"wc-rollout-{model}-phys_ball_drop")
        imgs = block.find_elements(By.CSS_SELECTOR, "img.wc-step")
        assert len(imgs) == 4
        assert all(page.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", i) for i in imgs)
        assert "Scripted judge" in block.text and "overall Final" in block.text
