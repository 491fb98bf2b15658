"""Process-level settings that make PyTensor fast on a stock pip install.

PyTensor compiled without a BLAS falls back to slow Python code for some gradient ops; when
Debian's OpenBLAS (package ``libopenblas0``) is present and the user has not configured
``blas__ldflags`` themselves, link it.  Nothing here overrides an explicit user setting
(``PYTENSOR_FLAGS`` or ``.pytensorrc``).
"""

from __future__ import annotations

import glob
import logging
import os

_OPENBLAS_GLOBS = ("/usr/lib/*-linux-gnu/libopenblas.so.0",
                   "/usr/lib/*-linux-gnu/openblas-pthread/libopenblas.so.0",
                   "/usr/lib64/libopenblas.so.0", "/usr/lib/libopenblas.so.0")


def find_openblas() -> str | None:
    """Directory holding ``libopenblas.so.0``, or None."""
    for pattern in _OPENBLAS_GLOBS:
        hits = sorted(glob.glob(pattern))
        if hits:
            return os.path.dirname(hits[0])
    return None


def configure_runtime() -> None:
    """Point PyTensor at a system OpenBLAS when it has none configured."""
    flags = os.environ.get("PYTENSOR_FLAGS", "")
    if "blas__ldflags" in flags or os.path.exists(os.path.expanduser("~/.pytensorrc")):
        return
    directory = find_openblas()
    if directory is None:
        return
    # no commas: PYTENSOR_FLAGS is comma-separated
    ldflags = f"-L{directory} -l:libopenblas.so.0"
    os.environ["PYTENSOR_FLAGS"] = ",".join(filter(None, [flags, f"blas__ldflags={ldflags}"]))
    # PyTensor's library-file check only recognises names ending in ".so" and then logs a
    # false alarm about a missing dynamic library; the link itself works
    logging.getLogger("pytensor.tensor.blas").setLevel(logging.ERROR)
    import sys

    if "pytensor" in sys.modules:  # already imported: set the live config too
        import pytensor

        pytensor.config.blas__ldflags = ldflags
