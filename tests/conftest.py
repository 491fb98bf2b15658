import warnings

import numpy as np
import pytest

warnings.filterwarnings("ignore", message=r"\s*ArviZ is undergoing a major refactor")


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
