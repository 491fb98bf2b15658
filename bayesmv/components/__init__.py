"""Pieces of the model graph (see :class:`bayesmv.ModelBuilder`)."""

from bayesmv.components.base import BuildContext, Component, Identity
from bayesmv.components.combine import SumCombiner
from bayesmv.components.features import (
    DPMixtureSpectral,
    GaussianSpectral,
    RandomFourierFeatures,
)
from bayesmv.components.latent import SharedLatent
from bayesmv.components.likelihoods import GaussianLikelihood, HingeLikelihood

__all__ = [
    "BuildContext",
    "Component",
    "GaussianLikelihood",
    "Identity",
    "DPMixtureSpectral",
    "GaussianSpectral",
    "HingeLikelihood",
    "RandomFourierFeatures",
    "SharedLatent",
    "SumCombiner",
]
