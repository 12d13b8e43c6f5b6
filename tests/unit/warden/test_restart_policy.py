"""Exponential backoff between warden starts and the circuit breaker, with history on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamwarden.settings import load_settings
from streamwarden.settings_loading import SettingsError
from streamwarden.warden.restart_policy import RestartHistory, load_history, save_history
from streamwarden.warden.settings import load_warden_settings


def test_backoff_doubles_and_is_capped() -> None:
    history = RestartHistory()
    assert history.backoff_until(1000.0, base=10, maximum=35) is None, "the first start is at once"
    history = history.with_start(1000.0)
    assert history.backoff_until(1001.0, base=10, maximum=35) == 1010.0
    assert history.backoff_until(1010.0, base=10, maximum=35) is None
    history = history.with_start(1010.0).with_start(1030.0)
    assert history.backoff_until(1031.0, base=10, maximum=35) == 1030.0 + 35, "10 x 2^2 = 40 capped at 35"


def test_breaker_opens_at_the_limit_and_closes_after_an_hour() -> None:
    history = RestartHistory().with_start(0.0).with_start(600.0)
    assert not history.breaker_open(700.0, max_per_hour=3)
    history = history.with_start(1200.0)
    assert history.breaker_open(1300.0, max_per_hour=3)
    assert not history.breaker_open(3601.0, max_per_hour=3), "the first start left the window"
    assert history.with_start(4300.0).starts == [1200.0, 4300.0], "starts older than an hour are dropped"
    assert history.backoff_until(7000.0, base=10, maximum=100) is None, "an hour later the backoff resets"


def test_history_is_shared_through_the_run_root(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path)
    assert load_history(settings) == RestartHistory()
    save_history(settings, RestartHistory([5.0]))
    assert load_history(settings) == RestartHistory([5.0])


def test_warden_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMWARDEN_WARDEN_BACKOFF_BASE", "2m")
    monkeypatch.setenv("STREAMWARDEN_WARDEN_MAX_RESTARTS_PER_HOUR", "5")
    warden = load_warden_settings()
    assert (warden.backoff_base, warden.max_restarts_per_hour, warden.webhook_url) == (120.0, 5, None)
    monkeypatch.setenv("STREAMWARDEN_WARDEN_MAX_RESTARTS_PER_HOUR", "0")
    monkeypatch.setenv("STREAMWARDEN_WARDEN_HEARTBEAT_FLOOR", "soon")
    with pytest.raises(SettingsError) as caught:
        load_warden_settings()
    message = str(caught.value)
    assert "STREAMWARDEN_WARDEN_MAX_RESTARTS_PER_HOUR='0'" in message
    assert "STREAMWARDEN_WARDEN_HEARTBEAT_FLOOR='soon'" in message
