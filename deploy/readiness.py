"""Waiting for a service to answer: the one polling loop that `safeshare up` and provisioning share."""
from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable


def wait_for_http_ok(url: str, timeout: float, check: Callable[[], None] | None = None,
                     interval: float = 0.1) -> bool:
    """Poll `url` until it answers 200 (True) or `timeout` seconds pass (False). `check` runs between attempts and
    may raise to stop waiting early, e.g. when the process that should answer has exited."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        if check is not None:
            check()
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
