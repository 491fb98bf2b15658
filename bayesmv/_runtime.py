"""Process-level settings that make PyTensor fast on a plain ``pip install``.

PyTensor's C back-end needs a BLAS to link its gradient and dot-product ops against; without
one it warns and falls back to slower code.  ``pip install bayesmv`` brings
``scipy-openblas32``, the OpenBLAS build that NumPy and SciPy ship, whose symbols carry a
``scipy_`` prefix (``scipy_dgemm_``).  PyTensor's C code calls the standard Fortran names
(``dgemm_``), so the flags below link that library and map each standard name to its prefixed
one with a preprocessor define.  The flags are set for this process only (an environment
variable read when PyTensor is first imported, or PyTensor's live config), and nothing here
overrides an explicit user setting (``PYTENSOR_FLAGS`` or ``~/.pytensorrc``).  A Debian
OpenBLAS (``libopenblas0``), which has the standard names, is used when the pip one is absent.
"""

from __future__ import annotations

import glob
import importlib.util
import logging
import os
import sys
from pathlib import Path

_SYSTEM_OPENBLAS_GLOBS = ("/usr/lib/*-linux-gnu/libopenblas.so.0",
                          "/usr/lib/*-linux-gnu/openblas-pthread/libopenblas.so.0",
                          "/usr/lib64/libopenblas.so.0", "/usr/lib/libopenblas.so.0")

# The reference BLAS routines (levels 1-3), by precision prefix; every one PyTensor's headers
# may declare is among them.  A define for a routine PyTensor never names is harmless.
_REAL = ("rotg", "rotmg", "rot", "rotm", "swap", "scal", "copy", "axpy", "dot", "nrm2", "asum",
         "gemv", "gbmv", "symv", "sbmv", "spmv", "trmv", "tbmv", "tpmv", "trsv", "tbsv", "tpsv",
         "ger", "syr", "spr", "syr2", "spr2", "gemm", "symm", "syrk", "syr2k", "trmm", "trsm")
_COMPLEX = ("rotg", "swap", "scal", "copy", "axpy", "dotu", "dotc", "gemv", "gbmv", "hemv",
            "hbmv", "hpmv", "trmv", "tbmv", "tpmv", "trsv", "tbsv", "tpsv", "geru", "gerc", "her",
            "hpr", "her2", "hpr2", "gemm", "symm", "hemm", "syrk", "herk", "syr2k", "her2k",
            "trmm", "trsm")
_EXTRA = ("isamax", "idamax", "icamax", "izamax", "sdsdot", "dsdot", "scnrm2", "dznrm2",
          "scasum", "dzasum", "csscal", "zdscal", "csrot", "zdrot")


def blas_routine_names() -> list[str]:
    """Fortran names (trailing underscore) of the reference BLAS routines."""
    names = [p + r for p in "sd" for r in _REAL] + [p + r for p in "cz" for r in _COMPLEX]
    return [f"{name}_" for name in names + list(_EXTRA)]


def pip_openblas_ldflags() -> str | None:
    """PyTensor ``blas__ldflags`` for the ``scipy-openblas32`` wheel, or None if absent.

    Found without importing the package: its import loads the library into the global symbol
    namespace, which nothing here needs.
    """
    spec = importlib.util.find_spec("scipy_openblas32")
    if spec is None or spec.origin is None:
        return None
    libdir = Path(spec.origin).parent / "lib"
    libs = sorted(libdir.glob("libscipy_openblas*.so")) + sorted(
        libdir.glob("libscipy_openblas*.dylib"))
    if not libs:
        return None
    name = libs[0].stem.removeprefix("lib")
    defines = " ".join(f"-D{routine}=scipy_{routine}" for routine in blas_routine_names())
    # no commas: PYTENSOR_FLAGS is comma-separated (hence no "-Wl,-rpath,DIR")
    return f"-L{libdir} -l{name} -Xlinker -rpath -Xlinker {libdir} {defines}"


def system_openblas_ldflags() -> str | None:
    """PyTensor ``blas__ldflags`` for a Debian/RedHat ``libopenblas.so.0``, or None."""
    for pattern in _SYSTEM_OPENBLAS_GLOBS:
        hits = sorted(glob.glob(pattern))
        if hits:
            return f"-L{os.path.dirname(hits[0])} -l:libopenblas.so.0"
    return None


def user_configured_blas() -> bool:
    """Whether the user set ``blas__ldflags`` themselves (environment or ``.pytensorrc``)."""
    if "blas__ldflags" in os.environ.get("PYTENSOR_FLAGS", ""):
        return True
    rc_files = os.environ.get("PYTENSORRC", os.path.expanduser("~/.pytensorrc"))
    for rc in rc_files.split(os.pathsep):
        try:
            if "ldflags" in Path(rc).read_text():
                return True
        except OSError:
            continue
    return False


def configure_runtime() -> None:
    """Point PyTensor at a BLAS when the user has not configured one."""
    if sys.platform == "win32" or user_configured_blas():
        return
    ldflags = pip_openblas_ldflags() or system_openblas_ldflags()
    if ldflags is None:
        return
    flags = os.environ.get("PYTENSOR_FLAGS", "")
    os.environ["PYTENSOR_FLAGS"] = ",".join(filter(None, [flags, f"blas__ldflags={ldflags}"]))
    # PyTensor's library-file check only recognises names ending in ".so" and logs a false
    # alarm about a missing dynamic library for "-l:libopenblas.so.0"; the link itself works
    logging.getLogger("pytensor.tensor.blas").setLevel(logging.ERROR)
    if "pytensor" in sys.modules:  # already imported: set the live config too
        import pytensor

        pytensor.config.blas__ldflags = ldflags
