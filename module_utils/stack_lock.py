"""The host's run lock as the stack's modules read it (host_lock takes and gives it back,
layer_state refuses to touch a layer unless it names the run): one reader, one idea of what an
unreadable lock is."""

from __future__ import annotations

import json
from typing import Any, Optional


def read_lock(path: str) -> Optional[dict[str, Any]]:
    """The lock's content; None when there is none; unreadable=true (with the error) when it is not a lock."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read(1 << 16)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return {"id": "", "unreadable": True, "error": "cannot be read: %s" % exc}
    try:
        data = json.loads(text)
    except ValueError as exc:
        return {"id": "", "unreadable": True, "error": "not JSON: %s" % exc}
    if not isinstance(data, dict) or not isinstance(data.get("id"), str) or not data["id"].strip():
        return {"id": "", "unreadable": True, "error": "JSON, but no run id in it"}
    return data
