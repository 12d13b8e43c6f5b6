"""The Streamwarden page end to end: a real stream, ``airflow standalone`` with this repository's plugins, and
a real browser (headless Chromium through Selenium) that logs in through Airflow's login page, opens
"Streamwarden" from the navigation and reads the figures; they must be what ``streamwarden status`` and the
tables say. Then a failed validation and a stopped stream must show as such, and every route refuses a request
without a login. On the same server, the supervisor DAG triggered through the REST API brings the stopped stream
back (one Airflow for both: its start is most of either test's time).

Screenshots are saved under the test's temporary folder (``screenshots/``); with
``UPDATE_README_SCREENSHOT=1`` the wide one is also copied to ``docs/images/streamwarden-page.png``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from fixtures.airflow_server import REPO, AirflowServer
from fixtures.browser import chromium_and_driver, headless_chromium, log_in, save, wait_for
from fixtures.stream_process import StreamProcess, all_offsets, log_ends, produce_raw, stream_env
from streamwarden.alerts import Alert, dispatch, read_alerts
from streamwarden.failures import FailureClass, FailureDocument
from streamwarden.local.broker import LocalBroker
from streamwarden.local.up import AirflowApi
from streamwarden.tables.location import RECORDS
from streamwarden.tables.reading import summarize
from streamwarden.validation.findings import Finding, FindingClass
from streamwarden.validation.report import ValidationReport, write_report
from streamwarden.warden.decision import recovery_action
from streamwarden.warden.launcher import running_holder
from streamwarden.warden.status import read_status
from streamwarden.warden.stop import stop_stream

pytestmark = pytest.mark.slow
README_IMAGE = REPO / "docs" / "images" / "streamwarden-page.png"


def status_without_login(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def get(url: str, token: str) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return int(response.status), response.read().decode()


def figure(driver: Any, name: str) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.CSS_SELECTOR, f'[data-figure="{name}"]').text)


def open_from_navigation(driver: Any, shots: Path) -> None:
    """Click "Streamwarden" in Airflow's navigation (opening the plugins' menu first when it is in one), then
    work inside the frame Airflow shows the page in."""
    from selenium.webdriver.common.by import By

    entry = "//*[self::a or self::button or @role='menuitem'][normalize-space(.)='Streamwarden']"

    def visible_entry() -> Any:
        found = [e for e in driver.find_elements(By.XPATH, entry) if e.is_displayed()]
        if found:
            return found[0]
        for menu in driver.find_elements(By.XPATH, "//nav//button | //button[@aria-label]"):
            label = (menu.get_attribute("aria-label") or menu.text or "").strip()
            if label in ("Plugins", "Browse") and menu.is_displayed():
                menu.click()
                time.sleep(0.5)
                found = [e for e in driver.find_elements(By.XPATH, entry) if e.is_displayed()]
                if found:
                    return found[0]
        return None

    wait_for(visible_entry, 60, '"Streamwarden" in the navigation', driver, shots).click()
    enter_frame(driver, shots)


def enter_frame(driver: Any, shots: Path) -> None:
    """Work inside the frame Airflow shows the page in (found again: a resize may re-create it)."""
    from selenium.webdriver.common.by import By

    driver.switch_to.default_content()
    frame = wait_for(lambda: [f for f in driver.find_elements(By.TAG_NAME, "iframe")
                              if "/streamwarden/" in (f.get_attribute("src") or "")], 60,
                     "the page's frame", driver, shots)[0]
    driver.switch_to.frame(frame)


def failed_validation(settings: Any, version: int) -> None:
    """A failed validate_output run, written as it writes one: a GAP in the records table."""
    now = datetime.now(UTC).isoformat()
    report = ValidationReport("e2e-failed", now, now, ("coverage",), {RECORDS: version}, None, (), (), (),
                              (Finding(FindingClass.GAP, RECORDS, "x", 0, ((3, 4),), 1, "offset 3 missing"),), ())
    write_report(settings.run_paths.validation, report)


@dataclass
class Platform:
    """A records stream caught up on its topic and ``airflow standalone`` on the same settings."""

    job: StreamProcess
    airflow: AirflowServer
    api: AirflowApi
    topics: list[str]
    ends: dict[str, dict[int, int]]
    started: float


@pytest.fixture(scope="module")
def platform(broker: LocalBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    from streamwarden.kafka.admin import create_topics

    tmp_path = tmp_path_factory.mktemp("page")
    topics = [f"page{os.getpid()}-s0"]
    create_topics({"bootstrap.servers": broker.bootstrap_servers}, topics, 2)
    produce_raw(broker.bootstrap_servers, topics, 2_000)
    ends = log_ends(all_offsets(broker.bootstrap_servers, topics))
    env = stream_env(tmp_path / "home", broker.bootstrap_servers, f"{topics[0].rsplit('-', 1)[0]}-.*")
    started = time.monotonic()
    job = StreamProcess(env, tmp_path / "stream.log").start()
    try:
        with AirflowServer(tmp_path / "airflow", env) as airflow:
            job.wait_until(lambda: job.caught_up(ends), 240, "the stream to catch up")
            api = airflow.ready("stream_supervisor")
            assert api.import_errors() == [], api.import_errors()
            yield Platform(job, airflow, api, topics, ends, started)
    finally:
        stop_stream(job.settings, drain_timeout=30, term_timeout=10)
        if job.process is not None and job.process.poll() is None:
            job.kill9()


def test_the_streamwarden_page(platform: Platform, tmp_path: Path) -> None:
    chromium_and_driver()  # skips, naming what to install, only when there is no browser
    job, airflow, api, topics, ends = platform.job, platform.airflow, platform.api, platform.topics, platform.ends
    settings = job.settings
    shots = tmp_path / "screenshots"
    driver: Any = None
    try:
        base = f"http://127.0.0.1:{airflow.port}"
        # Refused without a login; a script with a token gets the JSON and the metrics.
        for path in ("/streamwarden/", "/streamwarden/?fragment=1", "/streamwarden/api/dashboard",
                     "/streamwarden/metrics"):
            assert status_without_login(base + path) in (401, 403), path
        assert api.token is not None
        status, text = get(base + "/streamwarden/api/dashboard", api.token)
        document = json.loads(text)
        assert status == 200 and document["stream"]["state"] == "running", document["stream"]
        assert document["stream"]["pid"] == read_status(settings).pid
        status, metrics = get(base + "/streamwarden/metrics", api.token)
        assert status == 200 and 'streamwarden_stream_state{state="running"} 1' in metrics

        # An alert the warden would raise, to show its next action and the DAG to trigger.
        failure = FailureDocument(FailureClass.DATA_LOSS, "offsets expired", 81, topics[0], 0, 5,
                                  details={"available": [40, 900]})
        dispatch(Alert("critical", "stream failed: DATA_LOSS (drill)", {"label": "FAILED(DATA_LOSS)"},
                       "DATA_LOSS", failure.to_json(), {}, recovery_action(FailureClass.DATA_LOSS, failure),
                       source="stream_supervisor/e2e"), [], settings.run_paths.alerts)

        # A person: log in, open the page from the navigation, read the figures.
        driver = headless_chromium()
        password = json.loads((airflow.home / "simple_auth_manager_passwords.json.generated").read_text())["admin"]
        log_in(driver, base, password, shots)
        open_from_navigation(driver, shots)
        wait_for(lambda: figure(driver, "stream-state") == "running", 60, "the stream shown running", driver,
                 shots)
        shown_status = read_status(settings)
        table = summarize(settings, RECORDS)
        assert table.head is not None
        wait_for(lambda: figure(driver, f"table-{RECORDS}-version") == str(table.head.version), 60,
                 "the table's version", driver, shots)  # tables are read again at most every 30 s
        assert figure(driver, "stream-pid") == str(shown_status.pid)
        assert figure(driver, "stream-last-batch") == str(shown_status.last_batch_id)
        produced = sum(end for parts in ends.values() for end in parts.values())
        assert figure(driver, f"table-{RECORDS}-rows") == f"{table.rows:,}" == f"{produced:,}"
        assert figure(driver, f"table-{RECORDS}-files") == f"{table.files:,}"
        assert figure(driver, "lag-total") == "0"
        assert figure(driver, "lag-status") in ("OK", "STARTING")
        wait_for(lambda: "recover_stream" in figure(driver, "alerts"), 30, "the alert (a snapshot is kept 5 s)",
                 driver, shots)
        save(driver, shots, "page-wide")

        # A narrow window: nothing wider than the frame but the tables, which scroll inside their card.
        driver.set_window_size(420, 1000)
        time.sleep(1)
        enter_frame(driver, shots)
        wait_for(lambda: figure(driver, "stream-state") == "running", 30, "the page in a narrow window", driver,
                 shots)
        overflow = driver.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 1, f"the page is {overflow}px wider than a narrow window"
        save(driver, shots, "page-narrow")
        driver.set_window_size(1280, 1000)
        time.sleep(1)
        enter_frame(driver, shots)

        # A failed validation, then a stopped stream, each shown by the page's own refresh.
        failed_validation(settings, table.head.version)
        wait_for(lambda: figure(driver, f"validation-{RECORDS}").startswith("FAILED GAP"), 60,
                 "the failed validation", driver, shots)
        driver.set_window_size(1280, 1300)
        time.sleep(1)
        enter_frame(driver, shots)
        wait_for(lambda: figure(driver, f"validation-{RECORDS}").startswith("FAILED GAP"), 30,
                 "the page in a taller window", driver, shots)
        tall = save(driver, shots, "page-failed-validation")
        if os.environ.get("UPDATE_README_SCREENSHOT") == "1":
            README_IMAGE.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(tall, README_IMAGE)
        assert job.stop() == 0, job.log_tail()
        wait_for(lambda: figure(driver, "stream-state") == "stopped", 60, "the stream shown stopped", driver,
                 shots)
        assert figure(driver, "stream-pid") == "-"
        save(driver, shots, "page-stopped")

        # The alert's link leads to the DAG in Airflow's UI.
        from selenium.webdriver.common.by import By

        link = driver.find_element(By.CSS_SELECTOR, '[data-figure="alert-dag"]')
        assert link.text == "recover_stream"
        link.click()
        driver.switch_to.default_content()
        wait_for(lambda: driver.current_url.rstrip("/").endswith("/dags/recover_stream"), 30,
                 "the DAG's page", driver, shots)
        assert time.monotonic() - platform.started < 300
    finally:
        if driver is not None:
            driver.quit()


def test_supervisor_triggered_through_rest_brings_a_stopped_stream_back(platform: Platform) -> None:
    settings, airflow = platform.job.settings, platform.airflow
    if platform.job.process is not None and platform.job.process.poll() is None:  # run alone: the page stops it
        assert platform.job.stop() == 0, platform.job.log_tail()
    assert running_holder(settings) is None

    run_id = airflow.trigger("stream_supervisor", {"reason": "e2e: bring it back"})
    state = airflow.wait_run("stream_supervisor", run_id, 300)["state"]
    states = airflow.task_states("stream_supervisor", run_id)
    assert state == "success", (states, airflow.log_tail())
    assert states["restart_stream"] == "success" and states["healthy"] == "skipped", states

    holder = running_holder(settings)
    assert holder is not None, "the supervisor brought the stream back"
    restarted = [a for a in read_alerts(settings.run_paths.alerts) if a["summary"].startswith("stream restarted")]
    assert [a["source"] for a in restarted] == [f"stream_supervisor/{run_id}"]
    assert restarted[0]["verdict"]["label"] == "DEAD"
