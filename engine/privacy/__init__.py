"""Privacy models behind one protocol (engine.privacy.base), built from policy specs through one registry."""
from .base import ClassModel, PrivacyModel, RiskBasedModel
from .configuration import Monotonicity, PrivacyConfiguration
from .kanonymity import KAnonymity
from .population import PopulationUniquenessModel
from .registry import build_model, build_models, register

__all__ = ["ClassModel", "KAnonymity", "Monotonicity", "PopulationUniquenessModel", "PrivacyConfiguration",
           "PrivacyModel", "RiskBasedModel", "build_model", "build_models", "register"]
