"""A bounded, thread-safe memo of results keyed by bytes: least recently used entries go first.

Why: a population-uniqueness search asks for the same class-size histogram again and again (ARX's binary search over
the classes to suppress visits the same cuts of different transformations: on CUP 17,300 Pitman solves were 10,343
distinct histograms, and the 854 solves without a root only 198). A solve is a deterministic function of the
histogram, so answering a repeat from memory changes no result, only the time.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class BoundedMemo(Generic[T]):
    """At most `max_entries` values and `max_key_bytes` bytes of keys; a key longer than `max_key_bytes // 64` is
    never stored (so that one huge histogram cannot empty the memo)."""

    def __init__(self, max_entries: int, max_key_bytes: int) -> None:
        self.max_entries = max_entries
        self.max_key_bytes = max_key_bytes
        self._entries: OrderedDict[bytes, T] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get_or_compute(self, key: bytes, compute: Callable[[], T]) -> T:
        """The stored value for key, else compute() stored (computed outside the lock: two threads may both compute
        a value that is missing, which is harmless for a deterministic computation)."""
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                self.hits += 1
                return self._entries[key]
            self.misses += 1
        value = compute()
        if len(key) <= self.max_key_bytes // 64:
            with self._lock:
                if key not in self._entries:
                    self._entries[key] = value
                    self._bytes += len(key)
                    while len(self._entries) > self.max_entries or self._bytes > self.max_key_bytes:
                        old, _ = self._entries.popitem(last=False)
                        self._bytes -= len(old)
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)
