"""A headless Chromium driven by Selenium (Debian's ``chromium`` and ``chromium-driver``), and what a person does
in Airflow's UI with it: log in, trigger a DAG from its form, answer an approval. Skips the test, saying why,
only when the browser or its driver is not installed.

The UI's selectors are those of Airflow 3.3's React UI (``airflow/ui``): the DAG page's
``trigger-dag-button``, the dialog's ``trigger-dag-submit`` (disabled while the form is invalid), a Param's
field ``#element_<name>`` (an enum a react-select combobox, a boolean a switch), and a human-in-the-loop task's
``hitl-option-<option>`` buttons on its "Required Actions" tab.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

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


def wait_for(check: Callable[[], Any], timeout: float, what: str, driver: Any = None, shots: Path | None = None
             ) -> Any:
    """Poll ``check`` until it returns a truthy value (exceptions count as not yet); screenshot on timeout."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            found = check()
            if found:
                return found
            last = found
        except Exception as exc:  # the page is between two renders
            last = exc
        time.sleep(0.5)
    if driver is not None and shots is not None:
        save(driver, shots, "timeout")
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def log_in(driver: Any, base: str, password: str, shots: Path) -> None:
    """Sign in as ``admin`` on Airflow's login page."""
    from selenium.webdriver.common.by import By

    driver.get(base + "/")
    wait_for(lambda: driver.find_elements(By.NAME, "username"), 60, "Airflow's login page", driver, shots)
    driver.find_element(By.NAME, "username").send_keys("admin")
    driver.find_element(By.NAME, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, 'button[type="submit"]').click()
    wait_for(lambda: "/login" not in driver.current_url and not driver.find_elements(By.NAME, "password"), 60,
             "the login to finish", driver, shots)


def trigger_from_form(driver: Any, base: str, dag_id: str, shots: Path, *, text: dict[str, str] | None = None,
                      choose: dict[str, str] | None = None, switch: tuple[str, ...] = ()) -> str:
    """Open ``dag_id``'s Trigger dialog, change only what is given (``text``: a Param's text field typed in;
    ``choose``: an enum Param's option picked from its dropdown; ``switch``: boolean Params flipped), submit it
    with every other Param at its default, and return the run id the UI went to. Fails, with a screenshot, when
    the dialog's Trigger button stays disabled (the form refused a value).

    Every element is looked up again when it is used: the dialog renders twice (loading, then the form), and an
    element found in the first render is stale in the second."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    def find(css: str) -> Any:
        return driver.find_element(By.CSS_SELECTOR, f"[role='dialog'] {css}")

    driver.get(f"{base}/dags/{quote(dag_id, safe='')}")
    wait_for(lambda: driver.find_element(By.CSS_SELECTOR, "button[data-testid='trigger-dag-button']"), 60,
             f"{dag_id}'s Trigger button", driver, shots).click()
    wait_for(lambda: find("[data-testid='config-form']").is_displayed(), 60, f"{dag_id}'s Params form", driver,
             shots)
    for name, value in (text or {}).items():
        find(f"#element_{name}").click()
        find(f"#element_{name}").send_keys(Keys.CONTROL, "a")
        find(f"#element_{name}").send_keys(Keys.DELETE)
        find(f"#element_{name}").send_keys(value)
    for name, label in (choose or {}).items():
        find(f"#element_{name} input[role='combobox']").click()
        option = (f"//div[@role='dialog']//div[@id='element_{name}']"
                  f"//div[@role='option' and normalize-space()='{label}']")
        wait_for(lambda o=option: driver.find_element(By.XPATH, o), 20, f"the option {label} of {name}", driver,
                 shots).click()
    for name in switch:
        field = f"//div[@role='dialog']//input[@name='element_{name}']/ancestor::label[1]"
        driver.find_element(By.XPATH, field).click()
    submit = "[data-testid='trigger-dag-submit']"
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", find(submit))
    save(driver, shots, f"trigger-{dag_id}")
    wait_for(lambda: find(submit).is_enabled(), 20, f"{dag_id}'s form to accept its Params (Trigger enabled)",
             driver, shots)
    find(submit).click()
    wait_for(lambda: f"/dags/{dag_id}/runs/" in driver.current_url, 60, f"the UI to open the new {dag_id} run",
             driver, shots)
    run_id = unquote(driver.current_url.split("/runs/", 1)[1].split("/")[0].split("?")[0])
    idle(driver)
    return run_id


def idle(driver: Any) -> None:
    """Leave Airflow's UI for a blank page: a run's page polls the API and renders again every few seconds, CPU
    the suite's other work needs while the test waits over REST."""
    driver.get("about:blank")


def choose_in_ui(driver: Any, base: str, shots: Path, *, dag_id: str, run_id: str, task_id: str, option: str) -> None:
    """On the task's "Required Actions" tab, click ``option`` (e.g. Approve), which answers at once; wait until
    the UI disables the buttons (the answer is recorded). The task must already be waiting for its answer."""
    from selenium.webdriver.common.by import By

    driver.get(f"{base}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}/tasks/"
               f"{quote(task_id, safe='')}/required_actions")
    selector = f"button[data-testid='hitl-option-{option}']"
    button = wait_for(lambda: next(iter(b for b in driver.find_elements(By.CSS_SELECTOR, selector)
                                        if b.is_enabled()), None), 60, f"the {option} button of {task_id}", driver,
                      shots)
    save(driver, shots, f"{dag_id}-{task_id}-before-{option}")
    button.click()
    wait_for(lambda: not driver.find_element(By.CSS_SELECTOR, selector).is_enabled(), 60,
             f"the UI to take the {option} answer", driver, shots)
    save(driver, shots, f"{dag_id}-{task_id}-{option}")
    idle(driver)
