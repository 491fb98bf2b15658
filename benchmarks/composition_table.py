"""Which compositions of the builder's pieces fit, and with which inference engines.

Every cell of {identity, shared latent} × {linear, random Fourier, Nyström, landmarks,
per-view exact kernels, per-view random features} × {sum, ϱ-tensor, CP, block metric} ×
{hinge, logistic, Gaussian} is built (or refused by the builder, whose message is printed),
and every buildable cell is fitted on a small problem (40 rows of three views of the UCI
digits 3 vs 5, 6 columns each; one chain of 20 + 20 draws for the samplers) with each engine
of ``MultiViewClassifier(inference=...)``: the engine fits and predicts, or refuses before
fitting with its reason.  The cells are the ones ``tests/test_composition.py`` checks.

Run: ``python benchmarks/composition_table.py`` (about 30 minutes on two cores; name a
representation, e.g. ``"shared latent"``, to run only its cells); prints a
Markdown table per representation (rows: feature map × combiner, columns: likelihood; each
entry lists the engines that fit, or the builder's refusal) and the refusal messages.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_composition import (  # noqa: E402
    COMBINERS,
    FEATURE_MAPS,
    LIKELIHOODS,
    REPRESENTATIONS,
    make,
)

from bayesmv import MultiViewClassifier  # noqa: E402
from bayesmv.builder import CompositionError  # noqa: E402
from bayesmv.datasets import load_multiple_features  # noqa: E402
from bayesmv.inference.engines import INFERENCES  # noqa: E402

ENGINES = [i for i in INFERENCES if i != "auto"]


def small_problem():
    views, y = load_multiple_features(classes=(3, 5))
    rng = np.random.default_rng(1)
    idx = rng.permutation(len(y))
    tr, te = idx[:40], idx[40:60]
    cols = [rng.choice(v.shape[1], size=min(6, v.shape[1]), replace=False) for v in views[:3]]
    return ([v[tr][:, c] for v, c in zip(views, cols, strict=False)], y[tr],
            [v[te][:, c] for v, c in zip(views, cols, strict=False)])


def run_cell(cell, X, y, Xt) -> tuple[str, list[str], dict[str, str]]:
    try:
        make(*cell)
    except CompositionError as err:
        return "refused", [], {"builder": str(err)}
    works, reasons = [], {}
    for engine in ENGINES:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est = MultiViewClassifier(make(*cell), inference=engine, draws=20, tune=20,
                                          chains=1, random_seed=0).fit(X, y)
                proba = est.predict_proba(Xt)
            if not np.allclose(proba.sum(axis=1), 1.0):
                raise AssertionError("probabilities do not sum to one")
            works.append(engine)
        except ValueError as err:
            reasons[engine] = str(err).split(": ", 1)[-1]
    return "built", works, reasons


def main() -> None:
    X, y, Xt = small_problem()
    refusals: dict[str, str] = {}
    start = time.perf_counter()
    chosen = sys.argv[1:] or list(REPRESENTATIONS)  # e.g. "shared latent"
    for rep in chosen:
        print(f"\n### representation: {rep}\n")
        print("| feature map × combiner | " + " | ".join(LIKELIHOODS) + " |")
        print("|---|" + "---|" * len(LIKELIHOODS))
        for fmap in FEATURE_MAPS:
            for comb in COMBINERS:
                entries = []
                for lik in LIKELIHOODS:
                    status, works, reasons = run_cell((rep, fmap, comb, lik), X, y, Xt)
                    if status == "refused":
                        key = f"R{len(refusals) + 1}"
                        text = reasons["builder"]
                        for k, v in refusals.items():
                            if v == text:
                                key = k
                                break
                        refusals[key] = text
                        entries.append(f"refused ({key})")
                    else:
                        entries.append(", ".join(works) if works else "no engine")
                print(f"| {fmap} × {comb} | " + " | ".join(entries) + " |", flush=True)
    print("\nBuilder refusals:\n")
    for key, text in refusals.items():
        print(f"- {key}: {text}")
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
