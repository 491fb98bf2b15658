import warnings

import numpy as np
import pytest

warnings.filterwarnings("ignore", message=r"\s*ArviZ is undergoing a major refactor")


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def pytest_collection_modifyitems(config, items):
    """Long-running tests first: the two workers (``-n 2``) then take the short ones as they
    free up and finish together, instead of one worker starting a two-minute test last."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None
               and item.get_closest_marker("long") is None)
