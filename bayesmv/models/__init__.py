"""Estimators: the composed :class:`MultiViewClassifier` and one module per preset."""

from bayesmv.models.base import BaseMultiViewClassifier, load
from bayesmv.models.composed import MultiViewClassifier
from bayesmv.models.m3lak import M3LAK
from bayesmv.models.mvlsvm import MVLSVM
from bayesmv.models.mvm import MVM, MVMRegressor
from bayesmv.models.mvml import MVML
from bayesmv.models.rhotmvrkm import RhoTMVRKM

__all__ = ["BaseMultiViewClassifier", "M3LAK", "MVLSVM", "MVM", "MVML", "MVMRegressor",
           "MultiViewClassifier", "RhoTMVRKM", "load"]
