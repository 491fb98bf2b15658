"""Pieces of the model graph (see :class:`bayesmv.ModelBuilder`)."""

from bayesmv.components.combine import SumCombiner
from bayesmv.components.features import (
    DPMixtureSpectral,
    GaussianSpectral,
    RandomFourierFeatures,
)
from bayesmv.components.latent import SharedLatent
from bayesmv.components.likelihoods import HingeLikelihood

__all__ = [
    "DPMixtureSpectral",
    "GaussianSpectral",
    "HingeLikelihood",
    "RandomFourierFeatures",
    "SharedLatent",
    "SumCombiner",
]
