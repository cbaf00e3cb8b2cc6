"""The import graph keeps its direction (DESIGN.md): gateway -> cachetier -> policies; nothing
imports gateway (but the CLI entry point and the tests); tools/ start gateways as processes and
import none of lakegate's packages; harness/ is dev-only (tests/unit/test_harness.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("gateway", "cachetier", "policies", "tools", "harness")
# which of lakegate's top-level packages each may import
ALLOWED = {
    "gateway": {"gateway", "cachetier", "policies", "tools"},  # the CLI offers the tools
    "cachetier": {"cachetier", "policies"},
    "policies": {"policies"},
    "tools": {"tools"},
}


def imported_packages(source: str) -> set[str]:
    """lakegate's top-level packages that ``source`` imports (anywhere in it, lazily too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found & set(PACKAGES)


def test_the_checker_sees_every_form_of_import() -> None:
    source = "import gateway.app\nfrom cachetier.lake import Lake\ndef f():\n    from harness import ports\n"
    assert imported_packages(source) == {"gateway", "cachetier", "harness"}
    assert imported_packages("import os\nfrom . import x\n") == set()


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_what_its_layer_may(package: str) -> None:
    wrong = {
        str(path.relative_to(REPO)): sorted(imported_packages(path.read_text()) - ALLOWED[package])
        for path in sorted((REPO / package).rglob("*.py"))
    }
    assert {name: found for name, found in wrong.items() if found} == {}
