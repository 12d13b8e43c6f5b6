"""Whether ``streamwarden up`` keeps a warm standby: on when the machine's free memory holds a second driver.

A standby is a second stream driver (its JVM and Python, about 1.2 GiB resident on the demo's stream) that waits
for the checkpoint's lease and takes over a killed stream in seconds (``STREAMWARDEN_WARDEN_STANDBY``). ``up``
turns it on when at least :data:`STANDBY_ROOM` is available, unless the setting or ``--standby`` says otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping

from streamwarden.settings_loading import WARDEN_ENV_PREFIX

STANDBY_ENV = f"{WARDEN_ENV_PREFIX}STANDBY"
GIB = 1024**3
STANDBY_ROOM = 6 * GIB
"""Free memory ``up`` needs to turn the standby on: the standby itself, and room for the stream to restart."""
CHOICES = ("auto", "on", "off")


def choose_standby(choice: str, environ: Mapping[str, str], available: int) -> tuple[bool, str]:
    """On or off, and why: the setting when given, else ``--standby`` (``auto``: whether it fits)."""
    given = environ.get(STANDBY_ENV)
    if given is not None:
        return given.strip().lower() in ("1", "true", "yes", "on"), f"{STANDBY_ENV}={given}"
    if choice != "auto":
        return choice == "on", f"--standby {choice}"
    fits = available >= STANDBY_ROOM
    return fits, (f"{available / GIB:.1f} GiB of memory available, {'at least' if fits else 'less than'} the "
                  f"{STANDBY_ROOM / GIB:.0f} GiB it needs")
