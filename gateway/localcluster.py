"""``lakegate cluster up|down`` (placeholder: being built)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    pass
