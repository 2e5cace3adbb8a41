"""safeshare's token plugin for websockify, for sites whose noVNC front door is websockify (part of the proxy's
front door, beside the built-in gateway; its documented name is `safeshare.websockify.TokenPlugin`):

    websockify --token-plugin safeshare.websockify.TokenPlugin --token-source /var/lib/safeshare \\
        [--web /usr/share/novnc] 127.0.0.1:6080

noVNC connects to `ws(s)://HOST/websockify?token=T`. websockify asks `TokenPlugin.lookup(T)` for a target; the plugin
verifies T against the site's token database (stored hashed, expiring, revocable: `proxy.tokens`) and answers with
the address where the recipient's inspecting proxy listens (`safeshare proxy-for RECIPIENT`, which published it in
`SITE/proxies/<rid>.json`, `proxy.listen_address`), a Unix socket (`["unix_socket", PATH]`) or a loopback port.
Everything else answers None, which websockify turns into a refused connection: an unknown, malformed, expired or
revoked token, a recipient whose proxy is not running, a listing of another recipient, and any error in the plugin
(fail closed).

The database is the site's (SQLite in `SITE/db/`) unless `$SAFESHARE_DB` names another (PostgreSQL), as for the
other commands' `--db`. websockify runs each connection in a forked process: the plugin opens the database per
lookup, never sharing a connection across a fork, and imports what the lookups need when websockify constructs it,
in the parent, so that children inherit the modules. Importing this module itself loads nothing beyond the
standard library and `proxy.listen_address` (websockify imports it in its own process).

websockify writes the request path to its log, and the path holds the token (noVNC's `?token=`): keep websockify's
log as private as the database, or run it with `--log-file` on a protected file. The plugin itself never logs a
token.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from proxy.listen_address import listing_path, read_listing

# The logger keeps the plugin's documented name, which sites' websockify logging configurations select.
log = logging.getLogger("safeshare.websockify")


def open_site(root: str | os.PathLike[str], db_url: str | None = None) -> Any:
    """The site folder with its database URL: `db_url`, else $SAFESHARE_DB, else the site's SQLite file."""
    from deploy.site.folder import Site
    from proxy.db import DB_URL_ENV

    return Site(Path(root), db_url=db_url or os.environ.get(DB_URL_ENV) or None)


class TokenPlugin:
    """websockify's token plugin interface: constructed with `--token-source`, `lookup(token)` -> target or None."""

    def __init__(self, src: str) -> None:
        if not src:
            raise ValueError("safeshare.websockify.TokenPlugin needs --token-source SITE (the site folder)")
        self.source = src
        self.site = open_site(src)
        if not self.site.root.is_dir():
            raise ValueError(f"safeshare.websockify.TokenPlugin: no site folder at {self.site.root}")
        # What lookups need, imported once here in websockify's parent process (its children are forks).
        from proxy.tokens import TokenRefused, TokenStore

        self._store_class = TokenStore
        self._refused = TokenRefused

    def lookup(self, token: str) -> list[str] | None:
        try:
            return self._lookup(token)
        except self._refused as refused:
            log.info("safeshare: token %s: no target", refused.reason)
        except Exception as exc:  # fail closed: whatever went wrong, websockify gets no target
            log.error("safeshare: token lookup failed, no target: %s: %s", type(exc).__name__, exc)
        return None

    def _lookup(self, token: str) -> list[str] | None:
        store = self._store_class(self.site.db_url)
        try:
            grant = store.verify(token)
            address = read_listing(listing_path(self.site, grant.recipient), grant.recipient)
            if address is None:
                log.warning("safeshare: token %d: no proxy of %s is listening (safeshare proxy-for %s)",
                            grant.token_id, grant.recipient, grant.recipient)
                return None
            try:  # the proxy runs the session under the token used last
                store.mark_used(grant.token_id)
            except Exception as exc:
                log.warning("safeshare: token %d: could not mark it used: %s", grant.token_id, exc)
            log.info("safeshare: token %d of %s -> %s", grant.token_id, grant.recipient, address)
            return address.websockify_target()
        finally:
            store.dispose()
