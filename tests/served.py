"""An ASGI app (the custodian service) served by uvicorn on a free local port in a thread, for tests that need a
real browser or HTTP client in front of it: started, waited for until /healthz answers, and stopped after."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.proxy.rfbtools import free_port


@contextmanager
def served(app, ready_seconds: float = 10) -> Iterator[str]:
    """Serve `app` at http://127.0.0.1:PORT (yielded) until the block ends; /healthz is polled for up to
    `ready_seconds` first (the block's own requests fail if it never answers)."""
    import httpx
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.config.port}"
    try:
        deadline = time.monotonic() + ready_seconds
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        yield base
    finally:
        server.should_exit = True
        thread.join(10)
