"""The websockify token plugin lives in the proxy's front door (`proxy.websockify_plugin`, issue 30 item 3) and its
documented name `safeshare.websockify.TokenPlugin` keeps working: the shared base package only re-exports it and
depends on no token store or listing of the proxy. The plugin's behaviour through that name, including the real
websockify process, is tests/proxy/test_websockify.py."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.import_scan import imports_under, offending

REPO = Path(__file__).resolve().parents[2]


def test_the_documented_name_is_the_proxys_plugin():
    import proxy.websockify_plugin
    import safeshare.websockify

    assert safeshare.websockify.TokenPlugin is proxy.websockify_plugin.TokenPlugin
    assert safeshare.websockify.__all__ == ["TokenPlugin"]


def test_the_base_package_names_no_token_store_or_listing():
    bad = offending(imports_under(REPO, "safeshare"), {"proxy.tokens", "proxy.listen_address", "proxy.db"})
    assert not bad, "\n".join(map(str, bad))


def test_websockify_loading_the_plugin_by_its_name_stays_light():
    """websockify imports the plugin in its own process: no database driver, site or server comes with the import
    (they load when websockify constructs the plugin, in its parent process)."""
    code = ("import importlib, json, sys\n"
            "module = importlib.import_module('safeshare.websockify')\n"
            "assert callable(getattr(module, 'TokenPlugin'))\n"
            "print(json.dumps(sorted(sys.modules)))\n")
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                                           check=True).stdout))
    heavy = {"sqlalchemy", "aiohttp", "deploy", "deploy.site.folder", "proxy.tokens", "proxy.db", "numpy", "pydantic"}
    assert not heavy & loaded, sorted(heavy & loaded)
    assert {"proxy.websockify_plugin", "proxy.listen_address"} <= loaded
