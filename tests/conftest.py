import os
import warnings

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

warnings.filterwarnings("ignore", message=r"\s*ArviZ is undergoing a major refactor")


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def pytest_collection_modifyitems(config, items):
    """Long-running tests first: the two workers (``-n 2``) then take the short ones as they
    free up and finish together, instead of one worker starting a two-minute test last."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None
               and item.get_closest_marker("long") is None)


def pytest_configure(config):
    """One BLAS thread per xdist worker: two workers on two cores, each with a multi-threaded
    BLAS, oversubscribe the cores (OpenBLAS threads spin while they wait).  Tests that need
    another thread count set it themselves, in a subprocess or a threadpool_limits block."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        threadpool_limits(limits=1, user_api="blas")  # stays in force for the process
