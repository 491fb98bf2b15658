"""The ``bayesmv`` command: argument handling (no sampling) and one tiny end-to-end run."""

import runpy
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm

import bayesmv
from bayesmv import cli
from bayesmv.diagnostics.convergence import ConvergenceWarning

Z95 = float(norm.ppf(0.975))


# ------------------------------------------------------------------- parsing
def test_defaults_are_the_estimator_defaults_with_four_chains():
    args = cli.parse_args([])
    defaults = bayesmv.M3LAK().get_params()
    for name in ("draws", "tune", "latent_dim", "n_frequencies"):
        assert getattr(args, name) == defaults[name]
    # R-hat compares chains: the main job runs four (the estimator's default is two)
    assert args.chains == cli.MAIN_CHAINS == 4
    assert args.digits == (3, 5)
    assert args.seed == 0
    assert args.sampler == "hybrid"
    # one process per chain where the CPUs allow it (PyMC alone would run 2 chains serially
    # on a 2-core machine)
    assert 1 <= args.cores <= args.chains
    assert cli.parse_args(["--chains", "1"]).cores == 1
    assert not args.no_progress and not args.quick
    assert args.output == Path("bayesmv-output") / "m3lak-uci-3v5.nc"


def test_quick_preset_and_explicit_options_win():
    args = cli.parse_args(["--quick"])
    assert {k: getattr(args, k) for k in cli.QUICK} == cli.QUICK
    assert cli.QUICK == {"draws": 2000, "tune": 500, "chains": 2, "n_frequencies": 30,
                         "latent_dim": "auto"}
    args = cli.parse_args(["--quick", "--draws", "400", "--latent-dim", "4"])
    assert args.draws == 400 and args.latent_dim == 4
    assert args.tune == 500 and args.n_frequencies == 30


def test_all_options():
    args = cli.parse_args(["--draws", "7", "--tune", "0", "--chains", "3", "--cores", "1",
                           "--seed", "11", "--digits", "8", "1", "--sampler", "nuts",
                           "--output", "x/y.nc", "--no-progress", "--n-frequencies", "9"])
    assert (args.draws, args.tune, args.chains, args.cores, args.seed) == (7, 0, 3, 1, 11)
    assert args.digits == (1, 8)
    assert args.sampler == "nuts" and args.no_progress and args.n_frequencies == 9
    # the flag's old name still works, hidden from the help
    assert cli.parse_args(["--n-features", "7"]).n_frequencies == 7
    assert "--n-features" not in cli.build_parser().format_help()
    assert args.output == Path("x/y.nc")


def test_default_output_follows_the_digits():
    assert cli.parse_args(["--digits", "7", "2"]).output == Path("bayesmv-output/m3lak-uci-2v7.nc")


@pytest.mark.parametrize("argv", [
    ["--digits", "3", "3"],
    ["--digits", "3", "12"],
    ["--digits", "3"],
    ["--draws", "0"],
    ["--tune", "-1"],
    ["--chains", "two"],
    ["--sampler", "metropolis"],
    ["--bogus"],
])
def test_bad_arguments_exit_with_status_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(argv)
    assert exc.value.code == 2
    assert "usage: bayesmv" in capsys.readouterr().err


def test_python_dash_m_help(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["bayesmv", "--help"])
    with pytest.raises(SystemExit) as exc:
        runpy.run_module("bayesmv", run_name="__main__")
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--quick" in out and "--digits A B" in out


# ------------------------------------------------------------------- Wilson
@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (97, 100), (100, 100), (1, 1)])
def test_wilson_bounds_solve_the_score_equation(k, n):
    lo, hi = cli.wilson_interval(k, n)
    p_hat = k / n
    assert 0 <= lo <= p_hat <= hi <= 1
    # the Wilson bounds are where |p_hat - p| equals z standard errors evaluated at p
    for p in (lo, hi):
        if 0 < p < 1:
            assert (p_hat - p) ** 2 == pytest.approx(Z95**2 * p * (1 - p) / n, rel=1e-9)
    if k == 0:
        assert lo == 0 and hi == pytest.approx(Z95**2 / (n + Z95**2))
    if k == n:
        assert hi == 1 and lo == pytest.approx(n / (n + Z95**2))


def test_wilson_rejects_nonsense():
    with pytest.raises(ValueError):
        cli.wilson_interval(5, 4)
    with pytest.raises(ValueError):
        cli.wilson_interval(0, 0)


# --------------------------------------------------------------- end to end
@pytest.mark.slow
def test_main_end_to_end(tmp_path, monkeypatch, capsys):
    results = []
    real_run = cli.run

    def spy(args, out=None):
        results.append(real_run(args, out))
        return results[-1]

    monkeypatch.setattr(cli, "run", spy)
    output = tmp_path / "not-yet" / "model.nc"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status = cli.main(["--draws", "20", "--tune", "20", "--chains", "2", "--cores", "1",
                           "--no-progress", "--latent-dim", "3", "--n-frequencies", "10",
                           "--seed", "1", "--output", str(output)])
    assert status == 0
    # the convergence verdict goes into the report, never out as a raw warning
    assert not [w for w in caught if issubclass(w.category, ConvergenceWarning)]

    text = capsys.readouterr().out
    sections = ["Data", "Fit", "Test set (100 rows): M3LAK",
                "Baseline: RBF SVC on concatenated standardised views", "Convergence", "Output"]
    positions = [text.index(f"\n{s}\n{'-' * len(s)}\n") for s in sections]
    assert positions == sorted(positions)
    for needle in ("400 (train 300, test 100", "fou", "76 features", "mor", "6 features",
                   "fit time", "in pm.sample", "Wilson CI", "Brier score", "log-loss",
                   "C, gamma (3-fold CV)", "ConvergenceReport [", "max R-hat", str(output)):
        assert needle in text

    (result,) = results
    est = result.estimator
    if not est.convergence_.ok:  # 2 x 20 draws: expected, and must be reported as a line
        assert "ConvergenceWarning" in text and result.convergence_warnings
        for problem in est.convergence_.warnings:  # listed once, not again in the warning line
            assert text.count(problem) == 1, problem
    assert 0.0 <= result.scores["brier"] <= 1.0
    assert f"{result.scores['log_loss']:.4f}" in text

    assert output.is_file()
    loaded = bayesmv.load(output)
    assert isinstance(loaded, bayesmv.M3LAK)
    np.testing.assert_array_equal(loaded.classes_, np.array([3, 5]))
    np.testing.assert_array_equal(loaded.predict_proba(result.X_test), result.proba)
    np.testing.assert_array_equal(loaded.decision_function(result.X_test),
                                  est.decision_function(result.X_test))
    # the views keep the dataset's names: in the model, its draws, the file and the report
    names = ("fou", "fac", "kar", "pix", "zer", "mor")
    assert est.layout_.view_names == names and loaded.layout_.view_names == names
    assert tuple(loaded.idata_.posterior["tau"].coords["view"].values) == names
    page = result.html_report.read_text(encoding="utf-8")
    assert "fou (76), fac (216)" in page and "view0" not in page
    assert page.count("whole fit") == 1 and "sampling seconds" not in page
