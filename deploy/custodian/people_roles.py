"""The roles a person of the review pages may hold, in a module of its own with no imports: the CLI offers them as
choices when it builds its parser, which must not load the database layer (`safeshare --help` stays fast)."""
from __future__ import annotations

ROLES = ("checker",)
