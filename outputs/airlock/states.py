"""The airlock's names of states and votes, in a module that imports nothing: the `safeshare` command lists them in
its --help without loading SQLAlchemy (tests/test_startup.py)."""
from __future__ import annotations

DRAFT, SUBMITTED, RETURNED, APPROVED, REJECTED, RELEASED, WITHDRAWN = (
    "draft", "submitted", "returned", "approved", "rejected", "released", "withdrawn")
STATES = (DRAFT, SUBMITTED, RETURNED, APPROVED, REJECTED, RELEASED, WITHDRAWN)
OPEN_STATES = (SUBMITTED, RETURNED, APPROVED)
VOTES = ("approve", "changes", "reject")

__all__ = ["APPROVED", "DRAFT", "OPEN_STATES", "REJECTED", "RELEASED", "RETURNED", "STATES", "SUBMITTED", "VOTES",
           "WITHDRAWN"]
