"""Privacy models as the search sees them.

A class-level model marks the equivalence classes that violate it; those classes are suppressed. When the model is
monotone (merging classes never creates a violation, as for k-anonymity), the number of suppressed records can only
fall under generalization, so a transformation that exceeds the suppression limit lets the search discard all of its
specializations.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np


class ClassPrivacyModel(ABC):
    name: str = ""
    monotone: bool = False

    @abstractmethod
    def violating(self, sizes: np.ndarray) -> np.ndarray:
        """Boolean mask of the classes that must be suppressed."""

    def describe(self) -> dict:
        return {"model": self.name}
