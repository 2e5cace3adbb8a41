"""policies/ knows no component (DESIGN.md, "Dependencies point one way"): a policy must not depend on the component
that enforces it, so no module under policies/ imports proxy/, enclave/ or deploy/, not even inside a function.

Checked two ways: an AST scan of every policies/ source file (catches lazy imports that a given run never reaches),
and a fresh interpreter that loads every policies/ module and then finds none of those packages loaded."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.import_scan import imports_in_source, imports_under, module_name, offending

REPO = Path(__file__).resolve().parents[1]
COMPONENTS = {"proxy", "enclave", "deploy"}


def _policy_modules() -> list[str]:
    return [module_name(REPO, p) for p in sorted((REPO / "policies").rglob("*.py")) if "__pycache__" not in p.parts]


def test_no_policies_module_imports_a_component():
    imports = imports_under(REPO, "policies")
    assert any(imp.module == "policies.limits" for imp in imports)  # the scan sees policies/recipient.py's imports
    bad = offending(imports, COMPONENTS)
    assert not bad, "policies/ must not import a component:\n" + "\n".join(map(str, bad))


def test_the_scan_sees_function_level_and_relative_imports():
    source = ("import yaml\n"
              "def later():\n"
              "    from proxy.limits import SessionLimits\n"
              "class A:\n"
              "    def m(self):\n"
              "        import enclave.app.release\n"
              "try:\n"
              "    from ..deploy import plan\n"
              "except ImportError:\n"
              "    pass\n")
    found = offending(imports_in_source(source, "policies.sample", False), COMPONENTS)
    assert sorted({imp.top for imp in found}) == ["deploy", "enclave", "proxy"]
    assert {imp.line for imp in found} == {3, 6, 8}


def test_loading_every_policies_module_loads_no_component():
    modules = _policy_modules()
    assert "policies.limits" in modules and "policies.shortcuts" in modules and "policies.recipient" in modules
    code = ("import importlib, json, sys\n"
            f"for name in {modules!r}:\n"
            "    importlib.import_module(name)\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            f"{sorted(COMPONENTS)!r})))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_the_limits_schema_is_the_policys_and_the_proxy_enforces_it():
    """proxy.limits re-exports the policy's schema (one class, not a copy), so a limit validated when a policy loads is
    the one the proxy's InputFilter enforces."""
    import policies.limits
    import proxy.limits
    from policies.recipient import RecipientPolicy

    assert proxy.limits.SessionLimits is policies.limits.SessionLimits
    assert RecipientPolicy.model_fields["limits"].annotation is policies.limits.SessionLimits
    limits = RecipientPolicy.model_validate({"recipient": "r", "limits": {"blocked_shortcuts": ["Ctrl+Q"]}}).limits
    assert proxy.limits.InputFilter(limits).key(True, ord("q")) == (proxy.limits.FORWARD, None)
    held = proxy.limits.InputFilter(limits)
    assert held.key(True, 0xFFE3) == (proxy.limits.FORWARD, None)  # Control_L
    assert held.key(True, ord("q")) == (proxy.limits.BLOCKED, "Ctrl+Q")
