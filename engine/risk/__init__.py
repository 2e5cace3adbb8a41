"""Re-identification risk: super-population models of population uniqueness (Pitman, Zayatz, SNB, Dankar's rule)."""
from .estimate import ESTIMATORS, RiskEstimate, population_uniqueness
from .histogram import SizeHistogram
from .populations import presets, resolve_population

__all__ = ["ESTIMATORS", "RiskEstimate", "SizeHistogram", "population_uniqueness", "presets", "resolve_population"]
