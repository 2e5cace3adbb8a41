"""Process groups: every long-running child safeshare starts (the kiosk's Xvfb, x11vnc and Chromium; `safeshare
up`'s components) gets a session of its own, so that one signal to its group reaches everything it forked."""
from __future__ import annotations

import os


def signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to the process group; False when the group is gone. A member that changed user (PermissionError)
    still means the group exists, and its leader is ours."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still exists (zombies of reaped children do not count for long)."""
    return signal_group(pgid, 0)


__all__ = ["group_alive", "signal_group"]
