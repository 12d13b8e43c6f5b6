"""A headless Chromium driven by Selenium (Debian's ``chromium`` and ``chromium-driver``), for the page's
end-to-end test. Skips the test, saying why, only when the browser or its driver is not installed."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
DRIVER = "chromedriver"


def chromium_and_driver() -> tuple[str, str]:
    """The browser's and its driver's paths (a skip naming what is missing and how to install it)."""
    browser = next((found for name in CHROMIUM if (found := shutil.which(name))), None)
    driver = shutil.which(DRIVER)
    if browser is None or driver is None:
        pytest.skip("chromium and chromium-driver are not installed (apt-get install -y chromium chromium-driver; "
                    ".ci/run installs them)")
    return browser, driver


def headless_chromium(width: int = 1280, height: int = 1000) -> Any:
    """A headless Chromium session (``selenium.webdriver.Chrome``); quit it when done."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = chromium_and_driver()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--no-first-run", "--disable-extensions", f"--window-size={width},{height}",
                     "--proxy-server=direct://", "--proxy-bypass-list=*"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


def save(driver: Any, folder: Path, name: str) -> Path:
    """A screenshot of the browser's window as ``folder/name.png``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    driver.save_screenshot(str(path))
    return path
