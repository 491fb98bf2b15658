"""MVM against logistic regression and a 2nd-order factorization machine, same splits.

Part 1, UCI Multiple Features (bundled, six views, 649 features): binary digit pairs and
"0-4 vs 5-9".  Stratified 75/25 splits (seeds 0, 1).  Each model's regularisation is chosen by
3-fold cross-validated log-loss on the training part: logistic regression C, FM λ, MVM prior
scale s; the chosen model is refitted on the whole training part (MVM: one MAP,
``ensemble=1``, the best of 3 starts, so that the loss and prior are compared, not averaging;
"MVM-L" is the Laplace approximation at that mode, diagonal curvature, 200 draws, predicting
with its linearised (GLM) predictive, as bayesmv does; "L-smp" is the same fit's draws pushed
through the model equation itself (the sampled-factor predictive, computed here for contrast);
k̂ is the Pareto k̂ of the draws: the digit pairs are (nearly) separable, the likelihood is flat
at the mode, and the Gaussian, as wide as the prior, does not fit — k̂ says so).

Part 2, synthetic CTR-like data: 3 views (user, ad, query), 10⁵ rows, 10⁴ hashed features per
view, 0.1 % density.  Each view has 10 categorical fields (cardinalities 2 … 5000, Zipf
popularity) hashed into 10⁴ buckets (collisions included), one active value per field.  The
click logit is planted: bias + linear terms + pairwise cross-view interactions (rank 2) +
a three-way user × ad × query interaction (rank 2), on the (field, value) level before hashing.
So it has interactions of every order (the MVM's home ground; the FM sees orders ≤ 2, logistic
regression order 1).  Train 60 000 / validation 20 000 (chooses each model's regularisation
by log-loss) / test 20 000.  The factor models (FM and MVM) get the same 500-iteration
L-BFGS-B budget.  "oracle" is the planted probability, the ceiling.

Baselines see the concatenated views (standardised on UCI): logistic regression (scikit-learn)
and a 2nd-order factorization machine (Rendle 2010; logistic loss, L2, rank 8, full-batch
L-BFGS-B with its exact gradient, written below).  Fit times are wall-clock seconds of the
final fit (MVM: including building and compiling its graph).

Run:  python benchmarks/mvm.py            (about 12 minutes on 2 cores)
      python benchmarks/mvm.py --quick    (one UCI seed, 3·10⁴ CTR rows)
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from functools import partial
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from scipy.optimize import minimize
from scipy.special import expit
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss, roc_auc_score
from sklearn.model_selection import StratifiedKFold, train_test_split
from sklearn.preprocessing import StandardScaler

from bayesmv import MVM
from bayesmv.components import CPInteractionCombiner, LinearFeatures
from bayesmv.datasets import load_multiple_features

#: the MAP and the Laplace fit the same likelihood here (MVM's default MAP is the hinge's)
LOSS = "logistic"
RANK = 8
RESULTS = Path(__file__).parent / "results" / "mvm.txt"


# ------------------------------------------------------------------ FM baseline
class FactorizationMachine:
    """Second-order factorization machine with logistic loss and L2 penalties.

    ``ŷ = w₀ + xᵀw + Σ_{i<j} ⟨v_i, v_j⟩ x_i x_j``, computed as
    ``w₀ + xᵀw + ½ Σ_f [(xᵀV_f)² − (x²)ᵀ(V_f²)]`` in O(k·nnz); objective
    ``Σ log(1 + exp(−y ŷ)) + λ/2 (|w|² + |V|²)``, minimised by full-batch L-BFGS-B from
    V ~ N(0, 0.01²) with the exact gradient.  Dense arrays or scipy.sparse rows.
    """

    def __init__(self, rank: int = RANK, reg: float = 1.0, max_iter: int = 500,
                 random_state: int = 0) -> None:
        self.rank, self.reg, self.max_iter, self.random_state = rank, reg, max_iter, random_state

    @staticmethod
    def _prepare(X):
        if sp.issparse(X):
            X = sp.csr_matrix(X, dtype=float)
            return X, X.multiply(X).tocsr()
        X = np.asarray(X, dtype=float)
        return X, X * X

    @staticmethod
    def _decision(X, X2, w0, w, V):
        XV = np.asarray(X @ V)
        sq = np.asarray(X2 @ (V * V)).sum(axis=1)
        return w0 + np.asarray(X @ w).ravel() + 0.5 * ((XV**2).sum(axis=1) - sq), XV

    def fit(self, X, y) -> FactorizationMachine:
        X, X2 = self._prepare(X)
        XT, X2T = X.T.tocsr() if sp.issparse(X) else X.T, X2.T.tocsr() if sp.issparse(X) \
            else X2.T
        n, d = X.shape
        k = self.rank
        s = np.where(np.asarray(y) > 0, 1.0, -1.0)
        rng = np.random.default_rng(self.random_state)
        theta0 = np.concatenate([[0.0], np.zeros(d), 0.01 * rng.standard_normal(d * k)])

        def unpack(t):
            return t[0], t[1:d + 1], t[d + 1:].reshape(d, k)

        def objective(t):
            w0, w, V = unpack(t)
            f, XV = self._decision(X, X2, w0, w, V)
            m = s * f
            loss = np.logaddexp(0.0, -m).sum() + 0.5 * self.reg * (w @ w + np.sum(V * V))
            r = -s * expit(-m)
            gw = np.asarray(XT @ r).ravel() + self.reg * w
            gV = (np.asarray(XT @ (r[:, None] * XV)) - V * np.asarray(X2T @ r).ravel()[:, None]
                  + self.reg * V)
            return loss, np.concatenate([[r.sum()], gw, gV.ravel()])

        res = minimize(objective, theta0, jac=True, method="L-BFGS-B",
                       options={"maxiter": self.max_iter, "ftol": 1e-9, "gtol": 1e-6,
                                "maxcor": 20})
        self.n_iter_ = int(res.nit)
        self.w0_, self.w_, self.V_ = unpack(res.x)
        return self

    def predict_proba(self, X) -> np.ndarray:
        X, X2 = self._prepare(X)
        p = expit(self._decision(X, X2, self.w0_, self.w_, self.V_)[0])
        return np.column_stack([1.0 - p, p])


def check_fm_gradient() -> float:
    """Largest |analytic − finite-difference| gradient entry of the FM objective (sanity)."""
    from scipy.optimize import approx_fprime

    rng = np.random.default_rng(0)
    X = sp.random(40, 6, density=0.5, random_state=1, format="csr")
    y = rng.integers(0, 2, 40)
    captured = {}
    fm = FactorizationMachine(rank=3, reg=0.7, max_iter=1)
    real = minimize

    def spy(fun, x0, **kwargs):
        captured["fun"] = fun
        return real(fun, x0, **kwargs)

    globals()["minimize"] = spy
    try:
        fm.fit(X, y)
    finally:
        globals()["minimize"] = real
    fun = captured["fun"]
    x = rng.standard_normal(1 + 6 + 18) * 0.5
    return float(np.abs(fun(x)[1] - approx_fprime(x, lambda t: fun(t)[0], 1e-7)).max())


# --------------------------------------------------------------------- helpers
def metrics(y, p) -> tuple[float, float]:
    p = np.clip(p, 1e-15, 1 - 1e-15)
    return float(np.mean((p > 0.5) == y)), float(log_loss(y, p, labels=[0, 1]))


def timed(model, *data):
    """``model.fit(*data)`` and its wall-clock seconds."""
    start = time.perf_counter()
    model.fit(*data)
    return model, time.perf_counter() - start


def cv_choose(make, param, grid, X_parts, y, fit_predict, seed):
    """Value of ``param`` in ``grid`` with the lowest 3-fold cross-validated log-loss."""
    folds = StratifiedKFold(3, shuffle=True, random_state=seed).split(np.zeros(len(y)), y)
    folds = list(folds)
    scores = []
    for value in grid:
        losses = []
        for tr, va in folds:
            p = fit_predict(make(**{param: value}), [x[tr] for x in X_parts], y[tr],
                            [x[va] for x in X_parts])
            losses.append(metrics(y[va], p)[1])
        scores.append(np.mean(losses))
    return grid[int(np.argmin(scores))]


def lr_fit_predict(model, Xtr, ytr, Xte):
    scaler = StandardScaler().fit(np.hstack(Xtr))
    model.fit(scaler.transform(np.hstack(Xtr)), ytr)
    return model.predict_proba(scaler.transform(np.hstack(Xte)))[:, 1]


def mvm_fit_predict(model, Xtr, ytr, Xte):
    return model.fit(Xtr, ytr).predict_proba(Xte)[:, 1]


def sampled_factor_proba(model: MVM, Xte) -> np.ndarray:
    """P(y = 1) averaged over the model equation at each retained Laplace draw of the factors
    (the sampled-factor predictive that bayesmv replaced by the linearised one)."""
    views = LinearFeatures().transform(model._prepare(Xte))
    post = model.idata_.posterior
    V = len(views)
    draws = [post[f"A_{v}"].values.reshape((-1,) + post[f"A_{v}"].shape[2:]) for v in range(V)]
    return np.mean([expit(CPInteractionCombiner.evaluate([A[s] for A in draws], views)[:, 0])
                    for s in range(draws[0].shape[0])], axis=0)


# ------------------------------------------------------------------- part 1: UCI
def uci_tasks():
    for digits in [(3, 5), (1, 7), (6, 9), (2, 3)]:
        X, y = load_multiple_features(classes=digits)
        yield f"UCI {digits[0]} vs {digits[1]}", X, (y == digits[1]).astype(int)
    X, y = load_multiple_features()
    yield "UCI 0-4 vs 5-9", X, (y >= 5).astype(int)


LR_GRID = [0.001, 0.01, 0.1, 1.0, 10.0]
FM_GRID_UCI = [1.0, 10.0, 100.0, 1000.0]
MVM_GRID_UCI = [0.1, 0.3, 1.0, 3.0]


def run_uci(seeds: int, out) -> None:
    out("accuracy and log-loss of MVM (MAP), MVM-L (Laplace, same s, linearised "
        "predictive), L-smp (the same Laplace draws through the model equation), logistic "
        "regression, FM; fit seconds of MVM (MAP), LR, FM; Pareto k̂ of the Laplace draws "
        "(> 0.7: the Gaussian does not fit the posterior)")
    header = (f"{'task':<17}{'seed':>4} |{'MVM':>7}{'MVM-L':>7}{'L-smp':>7}{'LR':>7}{'FM':>7} |"
              f"{'MVM':>8}{'MVM-L':>8}{'L-smp':>8}{'LR':>8}{'FM':>8} | "
              f"{'MVM':>6}{'LR':>6}{'FM':>6}"
              f" | {'k̂':>4} | chosen s / C / λ")
    out(header)
    out("-" * len(header))
    rows = []
    for name, X, y in uci_tasks():
        for seed in range(seeds):
            itr, ite = train_test_split(np.arange(len(y)), test_size=0.25, stratify=y,
                                        random_state=seed)
            Xtr, Xte, ytr, yte = [x[itr] for x in X], [x[ite] for x in X], y[itr], y[ite]
            C = cv_choose(partial(LogisticRegression, max_iter=5000), "C", LR_GRID, Xtr, ytr,
                          lr_fit_predict, seed)
            reg = cv_choose(partial(FactorizationMachine, random_state=seed), "reg", FM_GRID_UCI,
                            Xtr, ytr, lr_fit_predict, seed)
            s = cv_choose(partial(MVM, rank=RANK, loss=LOSS, ensemble=1, random_seed=seed),
                          "prior_scale",
                          MVM_GRID_UCI, Xtr, ytr,
                          mvm_fit_predict, seed)
            mvm, t_mvm = timed(MVM(rank=RANK, loss=LOSS, prior_scale=s, n_init=3, ensemble=1,
                                   random_seed=seed), Xtr, ytr)
            lap = MVM(rank=RANK, loss=LOSS, prior_scale=s, n_init=3, random_seed=seed,
                      inference="laplace", draws=200).fit(Xtr, ytr)
            scaler = StandardScaler().fit(np.hstack(Xtr))
            Ztr, Zte = scaler.transform(np.hstack(Xtr)), scaler.transform(np.hstack(Xte))
            lr, t_lr = timed(LogisticRegression(C=C, max_iter=5000), Ztr, ytr)
            fm, t_fm = timed(FactorizationMachine(reg=reg, random_state=seed), Ztr, ytr)
            m = [metrics(yte, mvm.predict_proba(Xte)[:, 1]),
                 metrics(yte, lap.predict_proba(Xte)[:, 1]),
                 metrics(yte, sampled_factor_proba(lap, Xte)),
                 metrics(yte, lr.predict_proba(Zte)[:, 1]),
                 metrics(yte, fm.predict_proba(Zte)[:, 1])]
            khat = float(lap.idata_.posterior.attrs["laplace_khat"])
            row = (name, seed, *(a for a, _ in m), *(b for _, b in m), t_mvm, t_lr, t_fm, khat)
            rows.append(row)
            out(f"{name:<17}{seed:>4} |{_fmt(row[2:7], 7, 3)} |{_fmt(row[7:12], 8, 4)} | "
                f"{row[12]:>6.1f}{row[13]:>6.2f}{row[14]:>6.1f} |{khat:>6.2f} | "
                f"{s:g} / {C:g} / {reg:g}")
    out("-" * len(header))
    for name in dict.fromkeys(r[0] for r in rows):
        mean = np.array([r[2:15] for r in rows if r[0] == name], dtype=float).mean(axis=0)
        out(f"{name + ' (mean)':<21} |{_fmt(mean[0:5], 7, 3)} |{_fmt(mean[5:10], 8, 4)} | "
            f"{mean[10]:>6.1f}{mean[11]:>6.2f}{mean[12]:>6.1f}")


def _fmt(values, width: int, digits: int) -> str:
    return "".join(f"{v:>{width}.{digits}f}" for v in values)


# ------------------------------------------------------------------- part 2: CTR
CARDINALITIES = (2, 3, 5, 10, 20, 50, 100, 300, 1000, 5000)


def make_ctr(n: int = 100_000, n_views: int = 3, n_hash: int = 10_000, rank: int = 2,
             seed: int = 0, zipf: float = 1.2, bias: float = -1.0):
    """Hashed categorical CTR-like views, labels from a planted all-orders logit."""
    rng = np.random.default_rng(seed)
    s = 1.0 / np.sqrt(len(CARDINALITIES))
    views, lin, pair_emb, three_emb = [], np.zeros(n), [], []
    for _ in range(n_views):
        rows, cols = [], []
        e2, e3 = np.zeros((n, rank)), np.zeros((n, rank))
        for card in CARDINALITIES:
            pop = 1.0 / np.arange(1, card + 1) ** zipf
            value = rng.choice(card, size=n, p=pop / pop.sum())
            bucket = rng.integers(0, n_hash, size=card)  # the hash of (field, value)
            rows.append(np.arange(n))
            cols.append(bucket[value])
            lin += (s * rng.standard_normal(card))[value] / np.sqrt(n_views)
            e2 += (s * rng.standard_normal((card, rank)))[value]
            e3 += (s * rng.standard_normal((card, rank)))[value]
        X = sp.csr_matrix((np.ones(n * len(CARDINALITIES)),
                           (np.concatenate(rows), np.concatenate(cols))), shape=(n, n_hash))
        X.sum_duplicates()
        X.data[:] = 1.0  # two fields hashed to one bucket: still an indicator
        views.append(X)
        pair_emb.append(e2)
        three_emb.append(e3)
    pair = sum((pair_emb[p] * pair_emb[q]).sum(axis=1)
               for p in range(n_views) for q in range(p + 1, n_views)) / np.sqrt(3 * rank)
    three = np.prod(three_emb, axis=0).sum(axis=1) / np.sqrt(rank)
    logit = bias + 0.6 * lin + pair + three
    y = (rng.random(n) < expit(logit)).astype(int)
    return views, y, logit


CTR_LR_GRID = [0.01, 0.03, 0.1]
CTR_FM_GRID = [100.0, 300.0, 1000.0]
CTR_MVM_GRID = [0.02, 0.03, 0.05, 0.1]
CTR_ITER = 500


def run_ctr(n: int, out) -> None:
    views, y, logit = make_ctr(n=n)
    density = np.mean([X.nnz / (X.shape[0] * X.shape[1]) for X in views])
    n_tr, n_va = int(0.6 * n), int(0.8 * n)
    tr, va, te = slice(0, n_tr), slice(n_tr, n_va), slice(n_va, n)
    out(f"{n} rows, 3 views x {views[0].shape[1]} hashed features, density "
        f"{100 * density:.3f} %, click rate {y.mean():.3f}; train {n_tr}, validation "
        f"{n_va - n_tr}, test {n - n_va}")
    Z = sp.hstack(views, format="csr")
    yte = y[te]

    def score(p):
        acc, ll = metrics(yte, p)
        return acc, ll, float(roc_auc_score(yte, p))

    results = [("oracle (planted p)", *score(expit(logit[te])), float("nan"), "")]

    def select(label, grid, make, data, predict):
        best = None
        for value in grid:
            model, seconds = timed(make(value), *data)
            val_loss = metrics(y[va], predict(model, va))[1]
            out(f"  {label:<14} {value:>6g}: validation log-loss {val_loss:.4f} "
                f"({seconds:.1f} s{_iters(model)})")
            if best is None or val_loss < best[0]:
                best = (val_loss, value, model, seconds)
        _, value, model, seconds = best
        results.append((label, *score(predict(model, te)), seconds, f"{value:g}"))

    def concat_proba(model, rows):
        return model.predict_proba(Z[rows])[:, 1]

    def views_proba(model, rows):
        return model.predict_proba([X[rows] for X in views])[:, 1]

    select("logistic reg.", CTR_LR_GRID, lambda c: LogisticRegression(C=c, max_iter=5000),
           (Z[tr], y[tr]), concat_proba)
    select("FM (2nd order)", CTR_FM_GRID,
           lambda r: FactorizationMachine(reg=r, max_iter=CTR_ITER), (Z[tr], y[tr]),
           concat_proba)
    train_views = [X[tr] for X in views]
    for inference in ("map", "laplace"):
        select(f"MVM {inference}", CTR_MVM_GRID,
               partial(_ctr_mvm, inference=inference), (train_views, y[tr]), views_proba)
    header = f"{'model':<20}{'accuracy':>10}{'log-loss':>10}{'AUC':>8}{'fit s':>9}  chosen"
    out(header)
    out("-" * len(header))
    for label, acc, ll, auc, seconds, chosen in results:
        out(f"{label:<20}{acc:>10.4f}{ll:>10.4f}{auc:>8.4f}{seconds:>9.1f}  {chosen}")


def _ctr_mvm(prior_scale: float, inference: str) -> MVM:
    return MVM(rank=RANK, loss=LOSS, prior_scale=prior_scale, max_iter=CTR_ITER,
               inference=inference, ensemble=1 if inference == "map" else None,
               draws=100, random_seed=0)


def _iters(model) -> str:
    if isinstance(model, MVM):
        attrs = model.idata_.posterior.attrs
        khat = f", Laplace k̂ {attrs['laplace_khat']:.2f}" if "laplace_khat" in attrs else ""
        return f", {model.optimizer_['optimizer_iterations']} iterations{khat}"
    if isinstance(model, FactorizationMachine):
        return f", {model.n_iter_} iterations"
    return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-write", action="store_true", help="do not write results/mvm.txt")
    args = parser.parse_args()
    lines: list[str] = []

    def out(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    warnings.simplefilter("ignore", ConvergenceWarning)
    # the Laplace fits warn about their k̂, which the tables report
    warnings.filterwarnings("ignore", message="The Laplace approximation",
                            category=RuntimeWarning)
    out(f"FM gradient check (max |analytic - finite difference|): {check_fm_gradient():.1e}")
    out("")
    out("== UCI Multiple Features (six views), 75/25 splits; regularisation by 3-fold CV "
        "log-loss ==")
    run_uci(1 if args.quick else 2, out)
    out("")
    out("== Synthetic CTR-like sparse data (hashed categoricals, planted interactions of "
        "orders 1-3) ==")
    run_ctr(30_000 if args.quick else 100_000, out)
    if not args.no_write:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text("$ python benchmarks/mvm.py" + (" --quick" if args.quick else "")
                           + "\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
