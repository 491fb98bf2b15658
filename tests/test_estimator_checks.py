"""scikit-learn's own estimator checks (``sklearn.utils.estimator_checks``) on every estimator.

Every preset (and MVMRegressor) runs the whole suite, and so do two-view models in the
one-array + ``view_sizes`` form.  The checks pass one plain 2-D array of 1 to 10 columns,
which an estimator without ``view_sizes`` reads as a single view.  A fixed ``view_sizes``
would reject every check whose width differs from its sum (a ValueError by design), so the
composed models use ``view_sizes=(-1, 1)``: the last column is one view and the columns before
it the other, at every width from 2 up.  The wide view comes first because the NaN check puts
its NaN in ``X[0, 0]``: in a two-column view that is a partly NaN row, which is rejected,
whereas a one-column view would read it as a missing view, which MVLSVM fits by design.

A check that cannot pass is declared, with its reason, by the estimator itself
(``_expected_failed_checks``): only M3LAK declares any (the checks that set n_components=1,
run separately with its Gaussian spectral density, which has no components).

scikit-learn's ``set_random_state`` seeds a ``random_state`` parameter; these estimators call
theirs ``random_seed``, so every instance gets ``random_seed=0`` (with ``None`` a fit draws
fresh random numbers, which the ``non_deterministic`` tag says).
"""

import pytest
from sklearn.exceptions import ConvergenceWarning as SklearnConvergenceWarning
from sklearn.utils.estimator_checks import estimator_checks_generator, parametrize_with_checks

from bayesmv import M3LAK, MVLSVM, MVM, MVML, MultiViewClassifier, MVMRegressor, RhoTMVRKM
from bayesmv.diagnostics import ConvergenceWarning
from bayesmv.models.m3lak import _N_COMPONENTS_CHECKS

SEED = {"random_seed": 0}
# a fit in about a second: one short chain.  100 + 100 draws clear check_classifiers_train's
# 0.83 training accuracy with a margin (0.92-0.94 on its three-blob problem, float64 and
# float32, seeds 0-2); with 50 + 50 one float32 run stuck at 0.76, with 10-30 several did
M3LAK_TINY = dict(latent_dim=2, n_frequencies=8, view_latent_dim=1, n_components=2, draws=100,
                  tune=100, chains=1, cores=1, n_latent_draws=2, max_predict_draws=10, **SEED)

# closed-form / numpy fits: the whole suite in about 20 s
FAST = [
    RhoTMVRKM(**SEED),
    MVML(**SEED),
    MVLSVM(**SEED),
    # the one-array + view_sizes form: two views whatever the check's width (2 columns up)
    RhoTMVRKM(view_sizes=(-1, 1), **SEED),
    MVML(view_sizes=(-1, 1), **SEED),
    MVLSVM(view_sizes=(-1, 1), **SEED),
]
# every fit builds and compiles a PyTensor graph (0.25 s for MVM's MAP, 1.5 s for M3LAK, whose
# convergence check on 300 rows costs as much again): 20 s (MVM) to 95 s (M3LAK) per estimator
# on two shared cores: about 3 min together, which would take the suite past its 10-minute
# budget, so they are marked exhaustive and run with ``python -m pytest -m exhaustive``
# the composed estimator (default builder: Bayesian logistic regression) by MAP, in the
# one-array + view_sizes form
EXHAUSTIVE = [MVM(**SEED), MVMRegressor(**SEED), M3LAK(**M3LAK_TINY),
              MultiViewClassifier(inference="map", view_sizes=(-1, 1), **SEED)]


def expected_failed_checks(estimator):
    """The estimator's own declaration: ``{check name: reason}``."""
    return getattr(estimator, "_expected_failed_checks", dict)()


# tiny fits are expected to miss the convergence thresholds; that is not what is checked here
# (and check_supervised_y_no_nan's own cast of an inf y warns inside scikit-learn)
pytestmark = [pytest.mark.filterwarnings(f"ignore::{w.__module__}.{w.__name__}")
              for w in (ConvergenceWarning, SklearnConvergenceWarning)] + [
    pytest.mark.filterwarnings("ignore:invalid value encountered in cast:RuntimeWarning")]


@parametrize_with_checks(FAST, expected_failed_checks=expected_failed_checks)
def test_sklearn_checks(estimator, check):
    check(estimator)


@pytest.mark.exhaustive
@parametrize_with_checks(EXHAUSTIVE, expected_failed_checks=expected_failed_checks)
def test_sklearn_checks_exhaustive(estimator, check):
    check(estimator)


def _checks_named(estimator, names):
    return [pytest.param(est, check, id=f"{check.func.__name__}")
            for est, check in estimator_checks_generator(estimator, mark=None)
            if check.func.__name__ in names]


@pytest.mark.exhaustive
@pytest.mark.parametrize(("estimator", "check"), _checks_named(
    M3LAK(spectral="gaussian", **{k: v for k, v in M3LAK_TINY.items() if k != "n_components"}),
    _N_COMPONENTS_CHECKS))
def test_m3lak_checks_that_set_n_components(estimator, check):
    """The checks M3LAK's DP mixture declares failed set n_components=1; with the Gaussian
    spectral density (which has no components) they run and pass."""
    check(estimator)


def test_tags_follow_the_parameters():
    """Tags the checks read (and a few they cannot see), without fitting anything."""
    from sklearn.utils import get_tags

    for est in (M3LAK(), MVM(), MVML(), MVLSVM(), RhoTMVRKM(n_frequencies=50)):
        # random_seed=None draws fresh starts, chains, landmarks or features in every fit
        assert get_tags(est).non_deterministic
        assert not get_tags(est.set_params(random_seed=0)).non_deterministic
        assert get_tags(est).estimator_type == "classifier"
        assert get_tags(est).target_tags.required
    assert not get_tags(RhoTMVRKM()).non_deterministic  # exact kernels draw nothing
    assert get_tags(MVMRegressor()).estimator_type == "regressor"
    assert get_tags(MVMRegressor()).non_deterministic
    # MVM uses scipy.sparse views as given; the others reject them with a TypeError
    assert get_tags(MVM()).input_tags.sparse and get_tags(MVMRegressor()).input_tags.sparse
    assert not any(get_tags(e).input_tags.sparse for e in (M3LAK(), MVML(), MVLSVM()))
    # MVLSVM.transform gives its landmark features: a transformer too
    assert get_tags(MVLSVM()).transformer_tags is not None
    assert get_tags(MVML()).transformer_tags is None
    assert expected_failed_checks(M3LAK(spectral="gaussian")) == {}
    assert set(expected_failed_checks(M3LAK())) == set(_N_COMPONENTS_CHECKS)
