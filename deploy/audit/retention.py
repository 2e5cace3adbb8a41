"""Retention of recorded sessions: delete what is past its period and log every deletion as an audit event
(`session-deleted`, actor `system:retention` or the caller), with the session's seal hash so that the log says
exactly which recording was removed. The period is the recipient policy's `retention_days` as provisioned, else
the site's `session_retention_days`."""
from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path
from typing import Any

from deploy.records import Records
from deploy.site.folder import Site
from proxy.audit.retention import due_sessions
from policies.recipient import PolicyError, load_recipient_policy
from proxy.sessiondir import read_meta


def retention_days_for(site: Site, records: Records):
    cache: dict[str | None, int] = {}

    def days(recipient: str | None) -> int:
        if recipient not in cache:
            value = site.settings.session_retention_days
            known = records.recipient(recipient) if recipient else None
            if known is not None:
                try:
                    policy = load_recipient_policy(Path(known.policy_file))
                    value = policy.retention_days or value
                except PolicyError:
                    pass  # the site default applies; a broken policy copy must not keep data forever
            cache[recipient] = value
        return cache[recipient]
    return days


def apply_retention(site: Site, records: Records, now: datetime, *, actor: str = "system:retention",
                    dry_run: bool = False) -> list[dict[str, Any]]:
    if not site.sessions.is_dir():
        return []
    done = []
    for due in due_sessions(site.sessions, now, retention_days_for(site, records)):
        summary = due.summary
        folder = Path(summary.folder)
        head = read_meta(folder).get("log_head")
        item = {"session": summary.session, "recipient": summary.recipient, "release": summary.release,
                "start": summary.start.isoformat() if summary.start else None,
                "end": summary.end.isoformat() if summary.end else None, "retention_days": due.retention_days,
                "due_at": due.due_at.isoformat(), "log_head": head, "deleted": False}
        if not dry_run:
            shutil.rmtree(site.player_cache / summary.session, ignore_errors=True)
            shutil.rmtree(folder)
            item["deleted"] = True
            records.audit(actor, "session-deleted", "ok", summary.recipient, **{k: v for k, v in item.items()
                                                                               if k not in ("recipient", "deleted")})
        done.append(item)
    return done
