"""policies/ stays pure: no module under it imports the clock, sleeps, sockets, threads,
processes, the OS, randomness or the rest of lakegate, nor opens files. Checked by parsing every
.py file with ast (not by importing it, so a violation cannot hide behind a lazy import), and
the checker itself is checked on sources that break each rule."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

POLICIES = Path(__file__).resolve().parents[2] / "policies"

# Modules whose very import means I/O, a clock, concurrency or randomness in a decision.
FORBIDDEN_MODULES = frozenset(
    {"time", "asyncio", "socket", "threading", "subprocess", "os", "random", "pathlib", "io", "shutil",
     "multiprocessing", "concurrent", "selectors", "signal", "tempfile", "importlib", "cachetier", "gateway"}
)
FORBIDDEN_CALLS = frozenset({"open", "__import__", "eval", "exec"})
# Methods that read files or the clock on pathlib paths and datetimes.
FORBIDDEN_METHODS = frozenset({"read_text", "read_bytes", "write_text", "write_bytes", "open", "now", "utcnow", "today"})


def violations(source: str, filename: str = "<policy>") -> list[str]:
    """What in ``source`` breaks a policy's purity, one line each (empty: pure)."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found += [f"{where} imports {a.name}" for a in node.names if _forbidden(a.name)]
        elif isinstance(node, ast.ImportFrom):
            if node.level > 1:  # above policies/: the rest of lakegate
                found.append(f"{where} imports from {'.' * node.level}{node.module or ''}")
            elif node.level == 0 and node.module and _forbidden(node.module):
                found.append(f"{where} imports from {node.module}")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS:
                found.append(f"{where} calls {func.id}()")
            elif isinstance(func, ast.Attribute) and func.attr in FORBIDDEN_METHODS:
                found.append(f"{where} calls .{func.attr}()")
    return found


def _forbidden(module: str) -> bool:
    return module.split(".")[0] in FORBIDDEN_MODULES


def policy_files() -> list[Path]:
    return sorted(POLICIES.rglob("*.py"))


def test_there_are_policies_to_check() -> None:
    names = {p.name for p in policy_files()}
    assert {"__init__.py", "placement.py", "selection.py", "retry.py"} <= names


@pytest.mark.parametrize("path", policy_files(), ids=lambda p: p.name)
def test_a_policy_module_is_pure(path: Path) -> None:
    assert violations(path.read_text(encoding="utf-8"), path.name) == []


@pytest.mark.parametrize(
    "source",
    [
        "import time",
        "import os.path",
        "import asyncio as aio",
        "import json, socket",
        "from threading import Lock",
        "from subprocess import run",
        "from random import random",
        "from os import path",
        "from pathlib import Path",
        "import cachetier.cluster.ring",
        "from cachetier import errors",
        "from gateway.settings import Settings",
        "from .. import cachetier",
        "def f():\n    import time\n    return time.time()",  # a lazy import is still an import
        "def f(name):\n    return open(name).read()",
        "def f(path):\n    return path.read_text()",
        "def f(path):\n    return path.read_bytes()",
        "def f(when):\n    return when.now()",
        "m = __import__('time')",
    ],
)
def test_the_checker_catches_each_kind_of_impurity(source: str) -> None:
    assert violations(source) != []


@pytest.mark.parametrize(
    "source",
    [
        "from __future__ import annotations",
        "import hashlib\nfrom dataclasses import dataclass",
        "from collections.abc import Mapping",
        "from uhashring import HashRing",
        "from . import placement",
        "from .selection import PeerHealth",
        "def decide(state, snapshot, now):\n    return now + 1.0",
        "timeout = 3  # a name that merely looks like a module: time",
    ],
)
def test_the_checker_lets_pure_code_pass(source: str) -> None:
    assert violations(source) == []
