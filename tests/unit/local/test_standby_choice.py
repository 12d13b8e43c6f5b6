"""``up``'s warm standby: the setting decides when given, then ``--standby``; ``auto`` turns it on when it fits."""

from __future__ import annotations

from streamwarden.local.standby_choice import GIB, STANDBY_ENV, STANDBY_ROOM, choose_standby


def test_auto_turns_the_standby_on_only_when_the_memory_it_needs_is_available() -> None:
    assert choose_standby("auto", {}, STANDBY_ROOM) == (
        True, "6.0 GiB of memory available, at least the 6 GiB it needs")
    on, why = choose_standby("auto", {}, STANDBY_ROOM - GIB)
    assert not on and "less than the 6 GiB it needs" in why


def test_the_option_and_then_the_setting_override_what_fits() -> None:
    assert choose_standby("off", {}, 64 * GIB) == (False, "--standby off")
    assert choose_standby("on", {}, GIB) == (True, "--standby on")
    assert choose_standby("on", {STANDBY_ENV: "false"}, 64 * GIB) == (False, f"{STANDBY_ENV}=false")
    assert choose_standby("auto", {STANDBY_ENV: "True"}, GIB)[0]
