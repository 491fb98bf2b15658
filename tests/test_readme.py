"""The README's Python code runs as written.

Blocks without ``if __name__ == "__main__":`` are one notebook: they run in order in one shared
namespace, as a reader pastes them into one session.  Each script-style block (with it) is
what a reader copies into a file and runs: it runs on its own, in a fresh interpreter, as
``python block.py``, so it must carry its own imports.  Shell blocks (```sh) are not run.
Blocks that import an optional extra that is not installed (JAX back-ends, Dask) are not run,
with the reason: a skip for a script block, a warning for a notebook block (the notebook is
one test, and the blocks after it still run).
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import os
import re
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"

#: importable module -> the extra that installs it (``pip install "bayesmv[extra]"``)
OPTIONAL = {"numpyro": "jax", "blackjax": "jax", "jax": "jax", "nutpie": "fast",
            "distributed": "dask", "dask": "dask"}
MAIN_GUARD = re.compile(r"^if\s+__name__\s*==\s*['\"]__main__['\"]\s*:", re.MULTILINE)


@dataclass(frozen=True)
class Block:
    code: str
    line: int       # of the opening fence in README.md
    heading: str    # the nearest heading above it

    @property
    def is_script(self) -> bool:
        return bool(MAIN_GUARD.search(self.code))

    @property
    def id(self) -> str:
        slug = re.sub(r"[^a-z0-9]+", "-", self.heading.lower()).strip("-") or "top"
        return f"line{self.line}-{slug}"

    def missing_extras(self) -> list[str]:
        """Optional modules the block imports or names as a sampler that are not installed."""
        needed = set()
        for node in ast.walk(ast.parse(self.code)):
            if isinstance(node, ast.Import):
                needed |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                needed.add(node.module.split(".")[0])
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                needed.add(node.value)  # e.g. nuts_sampler="numpyro"
        return sorted(m for m in needed & set(OPTIONAL) if importlib.util.find_spec(m) is None)


def _blocks() -> list[Block]:
    blocks, heading, fence, lines = [], "", None, []
    for number, text in enumerate(README.read_text(encoding="utf-8").splitlines(), start=1):
        if fence is None:
            if text.startswith("#"):
                heading = text.lstrip("#").strip()
            elif text.startswith("```"):
                fence, lines = (number, text[3:].strip()), []
        elif text.startswith("```"):
            if fence[1] == "python":
                blocks.append(Block("\n".join(lines) + "\n", fence[0], heading))
            fence = None
        else:
            lines.append(text)
    assert fence is None, f"README.md: code fence opened on line {fence[0]} is never closed"
    return blocks


BLOCKS = _blocks()
NOTEBOOK = [b for b in BLOCKS if not b.is_script]
SCRIPTS = [b for b in BLOCKS if b.is_script]


def _skip_reason(block: Block) -> str | None:
    missing = block.missing_extras()
    if not missing:
        return None
    extras = sorted({OPTIONAL[m] for m in missing})
    return (f"README.md line {block.line} needs {', '.join(missing)} (pip install "
            f"\"bayesmv[{','.join(extras)}]\"), which is not installed")


# --------------------------------------------------------------------- static checks
def test_readme_has_both_kinds_of_python_blocks():
    assert len(NOTEBOOK) >= 5 and len(SCRIPTS) >= 2
    for block in BLOCKS:
        compile(block.code, f"README.md:{block.line}", "exec")


def _undefined_names(code: str) -> set[str]:
    """Names a script reads but never binds (over-approximating what it binds: any
    assignment, import, definition or argument anywhere counts)."""
    tree = ast.parse(code)
    bound, loaded = set(dir(builtins)) | {"__name__", "__file__"}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return loaded - bound


@pytest.mark.parametrize("block", SCRIPTS, ids=lambda b: b.id)
def test_script_blocks_carry_their_own_imports(block):
    # caught without running anything: a block that leans on an earlier one fails when copied
    assert not _undefined_names(block.code), (
        f"README.md line {block.line}: this script-style block uses names it never imports "
        f"or defines: {sorted(_undefined_names(block.code))}")


# ------------------------------------------------------------------------ running
def _run_in(namespace: dict, block: Block) -> None:
    import matplotlib.pyplot as plt

    try:
        with warnings.catch_warnings():
            # the README's short runs are meant to be short: their convergence verdict is
            # printed, and is not what this test checks
            warnings.simplefilter("ignore")
            exec(compile(block.code, f"README.md:{block.line}", "exec"), namespace)
    except BaseException as exc:
        exc.add_note(f"in the README's notebook block {block.id} (README.md line {block.line})")
        raise
    finally:
        plt.close("all")


# One test, not one per block: the blocks share one namespace, so they must run in one
# process, in order.  Per-block tests relied on pytest-xdist's loadgroup to keep them on one
# worker, which pytest 9.2 silently breaks (pytest-xdist issue 1386): each block's test then
# re-ran every block above it on the other worker.
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_notebook_blocks_run_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the blocks write model.nc and report.html
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace, skipped = {"__name__": "readme_notebook"}, []
    for block in NOTEBOOK:
        reason = _skip_reason(block)
        if reason:
            skipped.append(reason)
        else:
            _run_in(namespace, block)
    for reason in skipped:  # the blocks after a skipped one still ran
        warnings.warn(f"not run: {reason}", UserWarning, stacklevel=1)


@pytest.mark.long
@pytest.mark.timeout(600)
@pytest.mark.parametrize("block", SCRIPTS, ids=lambda b: b.id)
def test_script_blocks_run_on_their_own(block, tmp_path):
    reason = _skip_reason(block)
    if reason:
        pytest.skip(reason)
    script = tmp_path / "readme_block.py"
    script.write_text(block.code, encoding="utf-8")
    env = {**os.environ, "MPLBACKEND": "Agg"}
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=540)
    assert run.returncode == 0, (
        f"README.md line {block.line}, run as `python readme_block.py`, exited with "
        f"{run.returncode}:\n{run.stderr[-4000:]}")
