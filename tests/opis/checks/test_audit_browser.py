"""The labelling page in headless Chromium: label by clicking and by keys, reload, export, agree."""

from __future__ import annotations

import json
import shutil
import tempfile

import pytest

from tests.helpers.audit import DAVIS, make_run
from tests.helpers.browser import chromium
from tests.helpers.paths import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.skipif(not DAVIS.is_dir(), reason="shared DAVIS data not present")]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    browser_bin, driver_bin = chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    from worldeval.opis.checks.audit_manual import sample_audit

    root = tmp_path_factory.mktemp("audit_page")
    sample_audit(make_run(root), root / "audit", per_dimension=150, seed=0)
    profile = tempfile.mkdtemp(prefix="worldeval-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser_bin
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 f"--user-data-dir={profile}", "--window-size=1400,1000",
                 "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>"):
        opts.add_argument(flag)
    opts.add_experimental_option("prefs", {"download.default_directory": str(root / "downloads")})
    driver = webdriver.Chrome(service=Service(executable_path=driver_bin), options=opts)
    try:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
            "offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0})
        driver.get((root / "audit" / "audit.html").resolve().as_uri())
        yield root, driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _item(driver) -> str:
    return driver.find_element("id", "meta").text.split(" · ")[0]


def _click(driver, label):
    driver.find_element("css selector", f'#labels button[data-label="{label}"]').click()


def _key(driver, keys):
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).send_keys(keys).perform()


def test_label_by_click_and_keys_reload_export_and_agree(page):
    from selenium.webdriver.common.keys import Keys

    from worldeval.opis.checks.audit_manual import agree

    root, d = page
    key = {k["id"]: k["evaluator"] for k in json.loads((root / "audit" / "key.json").read_text())["items"]}
    assert _item(d) == "association-0001"
    assert all(d.execute_script("return [...document.images].every(i => i.complete && i.naturalWidth > 0)") for _ in [0])
    given = {}
    _click(d, "null"); given["association-0001"] = "null"
    assert _item(d) == "association-0002"  # labelling moves on
    _key(d, "1"); given["association-0002"] = "1"
    _key(d, "a"); given["association-0003"] = "ambiguous"
    _click(d, "1"); given["association-0004"] = "1"
    _key(d, Keys.ARROW_RIGHT * 4)
    assert _item(d) == "visibility-0001"
    _key(d, "v"); given["visibility-0001"] = "expected_visible"
    _click(d, "occluded"); given["visibility-0002"] = "occluded"
    _key(d, "f"); given["visibility-0003"] = "out_of_view"
    # progress survives a reload (local storage), position included
    d.refresh()
    assert "7 labelled" in d.find_element("id", "progress").text and _item(d) == "visibility-0004"
    _key(d, Keys.ARROW_RIGHT * 5)
    assert _item(d) == "identity-0001"
    _key(d, "p"); given["identity-0001"] = "preserved"
    _click(d, "changed"); given["identity-0002"] = "changed"
    _key(d, Keys.ARROW_LEFT)
    assert _item(d) == "identity-0002"
    assert d.find_element("css selector", "#labels button.chosen").get_attribute("data-label") == "changed"
    d.find_element("id", "export-btn").click()
    exported = json.loads(d.find_element("id", "export").get_attribute("value"))
    assert exported["labels"] == given
    ARTIFACTS.mkdir(exist_ok=True)
    d.save_screenshot(str(ARTIFACTS / "audit_page.png"))
    path = root / "labels.json"
    path.write_text(json.dumps(exported))
    res = agree(root / "audit", path)
    # by hand: the person's label against the evaluator's hidden one, item by item
    for dim in ("association", "visibility", "identity", "structure"):
        mine = [i for i in given if i.startswith(dim)]
        agreeing = sum(given[i] == key[i] for i in mine)
        assert (res["checks"][dim]["n"], res["checks"][dim]["agreeing"]) == (len(mine), agreeing)
    assert res["unlabelled"] == {"association": 4, "visibility": 5, "identity": 3, "structure": 3}
    assert d.execute_script("return performance.getEntriesByType('resource').filter(e => !e.name.startsWith('data:')).length") == 0
