"""Estimators (one module per preset of the model-graph builder)."""

from bayesmv.models.base import MultiViewClassifier, load
from bayesmv.models.m3lak import M3LAK
from bayesmv.models.mvlsvm import MVLSVM
from bayesmv.models.mvm import MVM, MVMRegressor
from bayesmv.models.mvml import MVML
from bayesmv.models.rhotmvrkm import RhoTMVRKM

__all__ = ["M3LAK", "MVLSVM", "MVM", "MVML", "MVMRegressor", "MultiViewClassifier", "RhoTMVRKM",
           "load"]
