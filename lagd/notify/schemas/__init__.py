"""JSON Schemas (draft 2020-12) of every notification payload, shipped with lagd and served at
GET /lagd/v1/schemas/{name}."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any


def names() -> list[str]:
    """Every schema's name (its file name without .json)."""
    return sorted(p.name[: -len(".json")] for p in resources.files(__name__).iterdir() if p.name.endswith(".json"))


def load(name: str) -> dict[str, Any] | None:
    """The schema called `name`, or None if there is none."""
    if name not in names():
        return None
    data: dict[str, Any] = json.loads(resources.files(__name__).joinpath(f"{name}.json").read_text("utf-8"))
    return data
