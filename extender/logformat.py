"""The service's log lines: text for a terminal, or one JSON object per line for a log pipeline.

A gang's steps are logged with structured fields (`extra={"pod": ..., "gang": ..., "domain": ...}`):
in JSON they are keys of the object; in text they follow the message as key=value pairs, so either
format can be searched for one gang. JSON lines come from python-json-logger, which already knows
the standard LogRecord attributes, exceptions and values JSON cannot hold.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

FORMATS = ("text", "json")
TEXT_LAYOUT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# not part of a line's own fields: the standard attributes, and those newer Pythons add
_STANDARD = frozenset(RESERVED_ATTRS) | {"taskName"}


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields a call passed with `extra=`, in the order given."""
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}


def _logfmt(value: Any) -> str:
    text = str(value)
    if not text or any(c in text for c in ' ="\n'):
        return json.dumps(text)
    return text


class TextFormatter(logging.Formatter):
    """The classic line, then the structured fields as key=value (empty ones left out)."""

    def __init__(self) -> None:
        super().__init__(TEXT_LAYOUT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        pairs = [f"{k}={_logfmt(v)}" for k, v in fields_of(record).items() if v not in ("", None)]
        return f"{line} {' '.join(pairs)}" if pairs else line


def formatter(fmt: str) -> logging.Formatter:
    """The formatter for --log-format `fmt` ("text" or "json"; validated by config.validate)."""
    if fmt == "json":
        # {"timestamp": ISO 8601 UTC, "level": ..., "logger": ..., "message": ..., fields...}
        return JsonFormatter(
            "%(levelname)s %(name)s %(message)s",
            rename_fields={"levelname": "level", "name": "logger"},
            timestamp=True,
        )
    return TextFormatter()
