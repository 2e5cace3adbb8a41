"""Privacy models."""
from .base import ClassPrivacyModel
from .kanonymity import KAnonymity

__all__ = ["ClassPrivacyModel", "KAnonymity"]
