"""What the release bundles (engine.bundle) and the signed release names (engine.release_names) share, kept below
both so that neither imports the other to get it: the purpose the site's release key signs under, and the refusal
of a bundle or name that must not be used."""
from __future__ import annotations

PURPOSE = "release"


class BundleError(RuntimeError):
    """A release bundle that must not be used (refused: exit 1 at the command line)."""


__all__ = ["PURPOSE", "BundleError"]
