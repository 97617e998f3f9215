"""Kubernetes timestamps (RFC 3339, as metadata and conditions carry them) read as Unix seconds."""

from __future__ import annotations

import datetime
from typing import Any


def parse_time_s(value: Any) -> float | None:
    """An RFC 3339 timestamp as Unix seconds; None when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
