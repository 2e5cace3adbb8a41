"""Fixtures for the tests that need a real Docker engine: the engine (started if none answers; the module is skipped
with the reason only when none can start here) and the offline images (built once per test session, then cached by
content: the first build on a fresh machine takes a few minutes, later ones a second or two).

Everything here is session-scoped so that every deploy test module shares one engine check and one build.
"""
from __future__ import annotations

import pytest

from deploy import dockerd
from deploy.images.build import BuildResult, build_all
from deploy.images.rootfs import DEFAULT_CACHE, ImageBuildError


@pytest.fixture(scope="session")
def docker_engine() -> dockerd.EngineStatus:
    """The running engine's status; skips when no engine can start (not installed, not root, dockerd fails)."""
    try:
        return dockerd.start()
    except dockerd.EngineUnavailable as exc:
        pytest.skip(f"no Docker engine: {exc}")


@pytest.fixture(scope="session")
def isolated_engine(docker_engine: dockerd.EngineStatus) -> dockerd.EngineStatus:
    """An engine whose networks can keep enclaves in; skips (with what is missing) otherwise."""
    if not docker_engine.networks_isolated:
        pytest.skip("the Docker engine cannot isolate networks here: " + "; ".join(docker_engine.problems))
    return docker_engine


@pytest.fixture(scope="session")
def offline_images(docker_engine: dockerd.EngineStatus) -> BuildResult:
    """app, gateway and kiosk images from the offline build (a failure is a test failure, not a skip: the engine
    is there, so the build must work)."""
    try:
        return build_all(DEFAULT_CACHE, say=lambda text: print(text, flush=True))
    except ImageBuildError as exc:
        pytest.fail(f"offline image build failed: {exc}")
