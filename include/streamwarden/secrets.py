"""Secrets never leave: which keys hold secrets, and the masking every message, document and alert goes through.

A value is secret when its key looks secret (``*password*``, ``*secret*``, ``*token*``, ``sasl.*``,
``ssl.*key*``, ``*credential*``, and the ``*api_key*``, ``*access_key*``, ``*account_key*``, ``*master_key*``,
``*sas_key*`` of object stores) or when it is the password of a URL (``https://user:pass@host``).
Two defences, both applied wherever text leaves the process (stderr, ``last_failure.json``, ``status``,
alerts, task logs, XCom):

1. :func:`redact` masks the values under secret keys in a structure, and credentials in URLs;
2. :func:`scrub` removes from free text every secret value known to this process (the ones found in the
   ``STREAMWARDEN_*`` environment and the config file, even when they do not parse) plus ``key: value``
   and ``key=value`` pairs whose key looks secret, so an error message that echoes its input is safe too.

Example::

    >>> redact({"sasl.password": "hunter2", "bootstrap.servers": "b:9092"})
    {'sasl.password': '***', 'bootstrap.servers': 'b:9092'}
    >>> scrub('bad value {"sasl.password": "hunter2"}')
    'bad value {"sasl.password": "***"}'
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

MASK = "***"
ENV_PREFIX = "STREAMWARDEN_"
CONFIG_FILE_ENV = "STREAMWARDEN_CONFIG_FILE"
_SECRET_KEY = re.compile(r"password|passwd|secret|token|credential|(?:api|access|account|master|sas)[._-]?key|"
                         r"^sasl\.|^ssl\..*key", re.I)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][\w+.-]*://)(?P<user>[^:/@\s]*):(?P<password>[^@/\s]+)@")
_KEY_VALUE = re.compile(
    r"""(?P<key>["']?(?P<name>[\w.-]*(?:password|passwd|secret|token|credential|(?:api|access|account|master|sas)"""
    r"""[._-]?key)[\w.-]*|sasl\.[\w.-]+|"""
    r"""ssl\.[\w.-]*key[\w.-]*)["']?\s*[:=]\s*)(?P<quote>["'])?(?P<value>(?(quote)[^"']*|[^\s,;}&]*))""",
    re.I,
)
_MIN_SECRET_LENGTH = 4  # shorter values ("1", "true") would mask ordinary text; their keys still mask them


def is_secret_key(key: str) -> bool:
    """True when a setting or librdkafka/Spark key names a secret."""
    return bool(_SECRET_KEY.search(key))


def redact(value: Any, key: str = "") -> Any:
    """``value`` with every secret masked: values under secret keys, URL credentials, known secret text."""
    if key and is_secret_key(key) and value not in (None, ""):
        return MASK
    if isinstance(value, Mapping):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact(v) for v in value)
    if isinstance(value, str):
        return scrub(value)
    return value


def scrub(text: str, extra: Iterable[str] = ()) -> str:
    """``text`` with known secret values, secret ``key: value`` pairs and URL passwords masked."""
    for secret in sorted({*known_secrets(), *extra}, key=len, reverse=True):
        if len(secret) >= _MIN_SECRET_LENGTH:
            text = text.replace(secret, MASK)
    text = _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    return _KEY_VALUE.sub(lambda m: f"{m['key']}{m['quote'] or ''}{MASK if m['value'] else ''}", text)


def known_secrets(environ: Mapping[str, str] | None = None) -> set[str]:
    """Secret values this process was configured with, from the environment and the config file.

    Read from the raw text, so a value is known even when its setting fails to parse (a JSON typo in
    ``STREAMWARDEN_KAFKA_CONFIG`` must not print the password it holds).
    """
    env = os.environ if environ is None else environ
    found: set[str] = set()
    sources = [value for name, value in env.items() if name.startswith(ENV_PREFIX)]
    config_file = env.get(CONFIG_FILE_ENV)
    if config_file:
        with contextlib.suppress(OSError):  # a missing file is reported by the settings, not here
            sources.append(Path(config_file).read_text(errors="replace"))
    for text in sources:
        found.update(m["value"] for m in _KEY_VALUE.finditer(text) if m["value"])
        found.update(m["password"] for m in _URL_CREDENTIALS.finditer(text))
    for name, value in env.items():
        if name.startswith(ENV_PREFIX) and is_secret_key(name.removeprefix(ENV_PREFIX)):
            found.add(value)
    return {s for s in found if len(s) >= _MIN_SECRET_LENGTH}
