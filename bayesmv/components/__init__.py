"""Pieces of the model graph (see :class:`bayesmv.ModelBuilder`)."""

from bayesmv.components.base import BuildContext, Component, Identity, WideFlat
from bayesmv.components.combine import SumCombiner
from bayesmv.components.features import (
    DiagonalNormalMixture,
    DPMixtureSpectral,
    GaussianSpectral,
    RandomFourierFeatures,
)
from bayesmv.components.interaction import CPInteractionCombiner
from bayesmv.components.kernels import ViewKernels, ViewRandomFeatures
from bayesmv.components.landmarks import LandmarkFeatures, LandmarkMap
from bayesmv.components.latent import SharedLatent
from bayesmv.components.likelihoods import (
    GaussianLikelihood,
    HingeLikelihood,
    LogisticLikelihood,
)
from bayesmv.components.linear import LinearFeatures
from bayesmv.components.metric import BlockMetricCombiner
from bayesmv.components.nystrom import NystromFeatures
from bayesmv.components.tensor import RhoTensorCombiner

__all__ = [
    "BlockMetricCombiner",
    "BuildContext",
    "Component",
    "CPInteractionCombiner",
    "DiagonalNormalMixture",
    "GaussianLikelihood",
    "Identity",
    "DPMixtureSpectral",
    "GaussianSpectral",
    "HingeLikelihood",
    "LandmarkFeatures",
    "LandmarkMap",
    "LinearFeatures",
    "LogisticLikelihood",
    "NystromFeatures",
    "RandomFourierFeatures",
    "RhoTensorCombiner",
    "ViewKernels",
    "ViewRandomFeatures",
    "SharedLatent",
    "SumCombiner",
    "WideFlat",
]
