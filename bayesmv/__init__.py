"""bayesmv: Bayesian multi-view classification on PyMC."""

from bayesmv._runtime import configure_runtime

configure_runtime()

from bayesmv.builder import ModelBuilder  # noqa: E402
from bayesmv.models import M3LAK, load  # noqa: E402

__version__ = "0.1.0"
__all__ = ["M3LAK", "ModelBuilder", "load", "__version__"]
