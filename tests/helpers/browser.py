"""Headless Chromium for the browser tests (marker `browser`): found or skipped, and opened offline on a file."""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest


def chromium() -> tuple[str, str]:
    browser = next((shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None)
    driver = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None)
    if not browser or not driver:
        pytest.skip("headless Chromium not installed (Debian packages chromium and chromium-driver)")
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.skip("selenium not installed (pip install -e '.[test]')")
    return browser, driver


@contextmanager
def offline_page(html: Path, window: str = "1400,1000"):
    """Headless Chromium opened on `html` with the network off (the report must work from the file alone)."""
    browser_bin, driver_bin = chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="worldeval-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser_bin
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                 f"--user-data-dir={profile}", f"--window-size={window}",
                 # Any request that tries to leave the machine goes to a dead proxy and fails.
                 "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=driver_bin), options=opts)
    try:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
            "offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0})
        driver.get(Path(html).resolve().as_uri())
        driver.execute_script("return document.readyState")
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
