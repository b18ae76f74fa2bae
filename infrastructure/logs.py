"""Logging set-up for the CLI: our INFO lines, third-party chatter only at WARNING."""

from __future__ import annotations

import logging

NOISY_LOGGERS = ("httpx", "httpcore", "urllib3", "filelock")


def quiet_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
