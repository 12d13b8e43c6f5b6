"""Which alert back-ends the warden's settings configure (the alerts themselves: :mod:`streamwarden.alerts`)."""

from __future__ import annotations

import logging

from streamwarden.alerts import EmailNotifier, EmailSender, LogNotifier, Notifier, WebhookNotifier
from streamwarden.warden.settings import WardenSettings


def notifiers(warden: WardenSettings, logger: logging.Logger,
              email_sender: EmailSender | None = None) -> list[Notifier]:
    """The log back-end always; the webhook and e-mail ones when configured."""
    found: list[Notifier] = [LogNotifier(logger)]
    if warden.webhook_url:
        found.append(WebhookNotifier(warden.webhook_url, warden.broker_timeout))
    if warden.email_to and email_sender is not None:
        found.append(EmailNotifier([a.strip() for a in warden.email_to.split(",") if a.strip()], email_sender))
    return found
