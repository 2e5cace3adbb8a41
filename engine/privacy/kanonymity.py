"""k-anonymity (Sweeney 2002): every released class holds at least k records."""
from __future__ import annotations

import numpy as np

from .base import ClassPrivacyModel


class KAnonymity(ClassPrivacyModel):
    name = "k_anonymity"
    monotone = True

    def __init__(self, k: int) -> None:
        if k < 1:
            raise ValueError("k must be at least 1")
        self.k = int(k)

    def violating(self, sizes: np.ndarray) -> np.ndarray:
        return sizes < self.k

    def describe(self) -> dict:
        return {"model": self.name, "k": self.k}
