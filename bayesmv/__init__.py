"""bayesmv: Bayesian multi-view classification on PyMC."""

import warnings

from bayesmv._runtime import configure_runtime

# ArviZ announces its 1.0 refactor on import; bayesmv pins the 0.x API, so the notice is noise
warnings.filterwarnings("ignore", message=r"\s*ArviZ is undergoing a major refactor",
                        category=FutureWarning)
configure_runtime()

from bayesmv.builder import ModelBuilder  # noqa: E402
from bayesmv.models import (  # noqa: E402
    M3LAK,
    MVLSVM,
    MVM,
    MVML,
    MultiViewClassifier,
    MVMRegressor,
    RhoTMVRKM,
    load,
)

__version__ = "0.1.0"
__all__ = ["M3LAK", "MVLSVM", "MVM", "MVML", "MVMRegressor", "ModelBuilder", "MultiViewClassifier",
           "RhoTMVRKM", "load", "__version__"]
