"""Estimators (one module per preset of the model-graph builder)."""

from bayesmv.models.base import MultiViewClassifier, load
from bayesmv.models.m3lak import M3LAK

__all__ = ["M3LAK", "MultiViewClassifier", "load"]
