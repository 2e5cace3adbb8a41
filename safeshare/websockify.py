"""The documented name of safeshare's websockify token plugin, `safeshare.websockify.TokenPlugin`, kept working.

Sites run `websockify --token-plugin safeshare.websockify.TokenPlugin --token-source SITE` (README, DESIGN.md's
"Contracts"), so this dotted name is a contract. The plugin itself is part of the proxy's front door and lives in
`proxy.websockify_plugin`; this module only re-exports it, so that the shared base package does not depend on the
proxy's token store and listings. Importing it loads the standard library, `proxy.websockify_plugin` and
`proxy.listen_address` only (websockify imports it in its own process).
"""
from __future__ import annotations

from proxy.websockify_plugin import TokenPlugin

__all__ = ["TokenPlugin"]
