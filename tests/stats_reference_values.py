#!/usr/bin/env python3
"""tests/stats_reference_values.py — where the literals in tests/test_stats.c
come from.  Not run by the tests (they must not depend on Python); run it by
hand to re-derive them:

    pip install mpmath scipy numpy    # versions used: mpmath 1.3.0, scipy 1.17.1, numpy 2.4.6
    python3 tests/stats_reference_values.py > tests/test_stats_values.h   # a few minutes

Sources, each independent of precision/stats.c:
  - distribution values: mpmath at 40 digits (betainc, ncdf), inverses
    by bisection on the mpmath CDF;
  - worked datasets: scipy.stats (ttest_rel, ttest_ind, wilcoxon, pearsonr, f),
    Wilcoxon with ties/zeros by enumerating all 2^m sign patterns, the
    Pitman-Morgan interval by root-finding on the test statistic, TOST from
    scipy's t;
  - power: scipy.stats.nct (paired t) and Owen's integral by mpmath.quad (TOST),
    sample sizes by stepping n;
  - the confidence sequence: Lai's mixture martingale M_n(mu) by 2-D numerical
    integration (over the effect theta and the scale, scipy.integrate.quad),
    its 1/alpha crossings by brentq — not the closed form the C code uses.
"""
import itertools

import mpmath as mp
import numpy as np
from scipy import optimize, stats

mp.mp.dps = 40


def lit(x):
    return "%.17g" % float(x)


def bisect(f, lo, hi, n=160):
    """root of an increasing f on [lo, hi]"""
    for _ in range(n):
        m = (lo + hi) / 2
        if f(m) > 0:
            hi = m
        else:
            lo = m
    return (lo + hi) / 2


def t_lower(t, df):  # P(T <= t), t <= 0
    df, t = mp.mpf(df), mp.mpf(t)
    return mp.betainc(df / 2, mp.mpf(1) / 2, 0, df / (df + t * t), regularized=True) / 2


def f_cdf(f, d1, d2):
    u = mp.mpf(d1) * f
    return mp.betainc(mp.mpf(d1) / 2, mp.mpf(d2) / 2, 0, u / (u + d2), regularized=True)


def f_sf(f, d1, d2):
    u = mp.mpf(d1) * f
    return mp.betainc(mp.mpf(d2) / 2, mp.mpf(d1) / 2, 0, mp.mpf(d2) / (u + d2), regularized=True)


def table(name, rows):
    print("static const double %s[][%d] = {" % (name, len(rows[0])))
    for r in rows:
        print("    {" + ", ".join(lit(v) for v in r) + "},")
    print("};")


def distributions():
    print("/* ---- distributions: mpmath, 40 digits ---- */")
    table("normal_cdf_ref", [(z, mp.ncdf(z)) for z in [-37.5, -20, -8, -3, -1.96, -0.5, 0, 0.3, 1.5, 5]])
    def normal_quantile(p):  # bisection on the smaller tail (erfinv(2p - 1) loses tiny p)
        q = min(p, 1 - p)
        x = bisect(lambda x: mp.log(mp.ncdf(x)) - mp.log(q), mp.mpf(-40), mp.mpf(0), 200)
        return x if p < 0.5 else -x
    table("normal_quantile_ref",
          [(p, normal_quantile(p)) for p in [1e-300, 1e-100, 1e-20, 1e-8, 0.001, 0.025, 0.3, 0.7, 0.975, 0.999]])
    rows = []
    for df in [0.5, 1, 2, 3, 4.5, 7, 19, 49.3, 99, 499, 1000]:
        for t in [-40, -8, -3.5, -2.1, -1, -0.3]:
            rows.append((t, df, t_lower(t, df)))
    table("t_cdf_ref", rows)
    rows = []
    for df in [1e4, 1e5, 1e6]:
        for t in [-8, -3.5, -2.1, -1, -0.3]:
            rows.append((t, df, t_lower(t, df)))
    table("t_cdf_big_df_ref", rows)
    rows = []
    for df in [0.5, 1, 2, 3, 4.5, 7, 19, 49.3, 99, 499, 1000]:
        for p in [1e-12, 1e-6, 0.001, 0.025, 0.2, 0.4999, 0.8, 0.975]:
            q = min(p, 1 - p)
            x = -mp.exp(bisect(lambda u: -(t_lower(-mp.exp(u), df) - q), mp.mpf(-40), mp.mpf(700), 120))
            rows.append((p, df, x if p < 0.5 else -x))
    table("t_quantile_ref", rows)
    rows = []
    for d1 in [1, 3.5, 9, 40, 499]:
        for d2 in [1, 4, 19, 99, 998]:
            for f in [0.05, 0.5, 1, 2, 5]:
                rows.append((f, d1, d2, f_cdf(f, d1, d2), f_sf(f, d1, d2)))
    table("f_ref", rows)
    rows = []
    for d1 in [1, 3.5, 9, 40, 499]:
        for d2 in [1, 4, 19, 99, 998]:
            for p in [1e-8, 0.025, 0.5, 0.975]:
                rows.append((p, d1, d2, mp.exp(bisect(lambda u: f_cdf(mp.exp(u), d1, d2) - p,
                                                      mp.mpf(-200), mp.mpf(400), 120))))
    table("f_quantile_ref", rows)
    rows = []
    for a in [0.5, 2.5, 37.5, 250]:
        for b in [0.5, 4, 499.5]:
            for x in [1e-6, 0.2, 0.5, 0.8, 0.999999]:
                v = mp.betainc(a, b, 0, x, regularized=True)
                if v > 1e-300:
                    rows.append((a, b, x, v))
    table("beta_ref", rows)


def datasets():
    print("/* ---- worked datasets (numpy seed 20240611, rounded to 1e-6): scipy.stats ---- */")
    rng = np.random.default_rng(20240611)
    n = 8
    common = rng.normal(0, 0.0055, n)
    a = np.round(1.4 + common + rng.normal(0, 0.0025, n), 6)
    b = np.round(1.4 + 0.0005 + common + rng.normal(0, 0.0025, n), 6)
    print("static const double base8[] = {" + ", ".join("%.6f" % v for v in a) + "};")
    print("static const double cand8[] = {" + ", ".join("%.6f" % v for v in b) + "};")
    d = b - a
    r = stats.ttest_rel(b, a)
    ci = r.confidence_interval(0.95)
    print("/* paired t (ttest_rel(cand, base)): t, p, ci_lo, ci_hi; mean, sd of d */")
    print("static const double paired8_ref[] = {%s, %s, %s, %s, %s, %s};" %
          (lit(r.statistic), lit(r.pvalue), lit(ci.low), lit(ci.high), lit(np.mean(d)), lit(np.std(d, ddof=1))))
    r = stats.ttest_ind(b, a, equal_var=False)
    ci = r.confidence_interval(0.95)
    print("/* Welch (ttest_ind(cand, base, equal_var=False)): t, df, p, ci_lo, ci_hi */")
    print("static const double welch8_ref[] = {%s, %s, %s, %s, %s};" %
          (lit(r.statistic), lit(r.df), lit(r.pvalue), lit(ci.low), lit(ci.high)))
    w = stats.wilcoxon(b - a, method="exact")
    print("/* Wilcoxon (wilcoxon(cand - base, method='exact')): p; statistic = min(W+, W-) */")
    print("static const double wilcoxon8_ref[] = {%s, %s};" % (lit(w.pvalue), lit(w.statistic)))
    # Pitman-Morgan: correlation of sums and differences, t with n-2 df
    pr = stats.pearsonr(a + b, b - a)
    rr = pr.statistic
    tpm = rr * np.sqrt((n - 2) / (1 - rr * rr))
    c = stats.t.ppf(0.975, n - 2)

    def tstat(lam):  # the same test on (a, b / sqrt(lam))
        y = b / np.sqrt(lam)
        q = np.corrcoef(a + y, y - a)[0, 1]
        return q * np.sqrt((n - 2) / (1 - q * q))
    ratio = np.var(b, ddof=1) / np.var(a, ddof=1)
    lo = optimize.brentq(lambda L: tstat(L) - c, ratio * 1e-3, ratio, xtol=1e-15)
    hi = optimize.brentq(lambda L: tstat(L) + c, ratio, ratio * 1e3, xtol=1e-15)
    print("/* Pitman-Morgan (pearsonr(a+b, b-a)): ratio, r, t, p, ci_lo, ci_hi (interval by brentq on t) */")
    print("static const double pitman8_ref[] = {%s, %s, %s, %s, %s, %s};" %
          (lit(ratio), lit(rr), lit(tpm), lit(pr.pvalue), lit(lo), lit(hi)))
    fcdf = stats.f.cdf(ratio, n - 1, n - 1)
    fp = 2 * min(fcdf, stats.f.sf(ratio, n - 1, n - 1))
    print("/* F test treating the arms as unpaired: p, ci_lo, ci_hi */")
    print("static const double ftest8_ref[] = {%s, %s, %s};" %
          (lit(fp), lit(ratio / stats.f.ppf(0.975, n - 1, n - 1)), lit(ratio / stats.f.ppf(0.025, n - 1, n - 1))))
    margin = 0.004
    se = np.std(d, ddof=1) / np.sqrt(n)
    m = np.mean(d)
    pl = stats.t.sf((m + margin) / se, n - 1)
    pu = stats.t.cdf((m - margin) / se, n - 1)
    q = stats.t.ppf(0.95, n - 1)
    print("/* TOST margin 0.004, alpha 0.05: p_lower, p_upper, ci_lo, ci_hi (90%) */")
    print("static const double tost8_ref[] = {%s, %s, %s, %s};" % (lit(pl), lit(pu), lit(m - q * se), lit(m + q * se)))
    cs_reference(d)


def cs_reference(d):
    """Lai's mixture by numerical integration: M(mu) = int int prod phi(c x_i - theta) N(theta; 0, rho^2)
    c^(n-1) dtheta dc / int prod phi(c x_i) c^(n-1) dc, x_i = d_i - mu, with c = k / sqrt(S),
    S = sum x_i^2 (the ratio is scale-invariant); scipy.integrate.quad nested, brentq on log M."""
    from scipy import integrate
    alpha, rho = 0.05, 1.0
    n = len(d)
    mean = float(np.mean(d))
    scale = float(np.std(d, ddof=1))

    def log_m(mu):
        x = (np.asarray(d) - mu) / scale
        g = x.sum() / np.sqrt((x * x).sum())  # T / sqrt(S), |g| <= sqrt(n)

        def inner(k):  # over theta, centred where the exponent peaks
            centre = k * g / (n + 1 / rho ** 2)
            width = 1 / np.sqrt(n + 1 / rho ** 2)
            f = lambda th: np.exp((n - 1) * np.log(k) - 0.5 * (k * k - 2 * k * th * g + n * th * th)
                                  - th * th / (2 * rho * rho) - 0.5 * np.log(2 * np.pi) - np.log(rho))
            return integrate.quad(f, centre - 40 * width, centre + 40 * width, points=[centre],
                                  epsabs=0, epsrel=1e-13, limit=200)[0]
        top = 4 * np.sqrt(n) + 40
        num = integrate.quad(inner, 0, top, points=[np.sqrt(n)], epsabs=0, epsrel=1e-12, limit=200)[0]
        den = integrate.quad(lambda k: np.exp((n - 1) * np.log(k) - 0.5 * k * k), 0, top,
                             epsabs=0, epsrel=1e-13, limit=200)[0]
        return np.log(num / den)
    target = np.log(1 / alpha)

    def crossing(direction):  # log M - log(1/alpha) grows away from the mean: bracket, then brentq
        a = mean
        while log_m(a + direction * scale) < target:
            a += direction * scale
        return optimize.brentq(lambda mu: log_m(mu) - target, *sorted((a, a + direction * scale)),
                               xtol=1e-16, rtol=1e-14)
    lo, hi = crossing(-1), crossing(1)
    print("/* confidence sequence, alpha 0.05, mixture rho 1, at n = 8: lo, hi (nested quad, brentq) */")
    print("static const double cs8_ref[] = {%s, %s};" % (lit(lo), lit(hi)))


def wilcoxon_ties():
    print("/* ---- Wilcoxon with zeros and ties: all 2^m sign patterns (Pratt ranks) ---- */")
    d = [0.0, 0.001, -0.002, 0.002, 0.003, 0.0, 0.001, 0.004, -0.001, 0.002, 0.005, 0.003]
    print("static const double wilcoxon_ties_d[] = {" + ", ".join(repr(v) for v in d) + "};")
    ranks = stats.rankdata(np.abs(d))  # midranks over all |d|, zeros included
    nz = [(r, v) for r, v in zip(ranks, d) if v != 0]
    w = sum(r for r, v in nz if v > 0)
    le = ge = 0
    for signs in itertools.product([0, 1], repeat=len(nz)):
        s = sum(r for (r, _), b in zip(nz, signs) if b)
        le += s <= w
        ge += s >= w
    p = min(1.0, 2 * min(le, ge) / 2 ** len(nz))
    mean = sum(r for r, _ in nz) / 2
    sd = np.sqrt(sum(r * r for r, _ in nz) / 4)
    print("/* w_plus, exact p, null mean, null sd */")
    print("static const double wilcoxon_ties_ref[] = {%s, %s, %s, %s};" % (lit(w), lit(p), lit(mean), lit(sd)))
    rng = np.random.default_rng(7)
    big = np.round(rng.normal(0.0004, 0.004, 60), 3)  # on a 1e-3 grid: zeros and ties
    print("static const double wilcoxon60_d[] = {" + ", ".join(repr(float(v)) for v in big) + "};")
    r = stats.wilcoxon(big, zero_method="pratt", correction=False, method="approx")
    ranks = stats.rankdata(np.abs(big))
    nzr = ranks[big != 0]
    wp = ranks[big > 0].sum()
    z = (wp - nzr.sum() / 2) / np.sqrt((nzr ** 2).sum() / 4)
    print("/* w_plus, z and p by the formula (Pratt ranks, no continuity correction); scipy's p for comparison */")
    print("static const double wilcoxon60_ref[] = {%s, %s, %s, %s};" %
          (lit(wp), lit(z), lit(2 * stats.norm.sf(abs(z))), lit(r.pvalue)))


def power():
    print("/* ---- power: scipy.stats.nct (paired t), Owen's integral by mpmath.quad (TOST) ---- */")
    rows = []
    for n, shift, sd, a in [(5, 0.004, 0.004, 0.05), (10, 0.002, 0.004, 0.05), (34, 0.002, 0.004, 0.05),
                            (34, -0.002, 0.004, 0.01), (100, 0.0005, 0.004, 0.05), (500, 0.001, 0.004, 0.05),
                            (3, 0.01, 0.004, 0.05), (20, 0.0, 0.004, 0.05)]:
        df = n - 1
        c = stats.t.ppf(1 - a / 2, df)
        lam = shift * np.sqrt(n) / sd
        rows.append((n, shift, sd, a, stats.nct.sf(c, df, lam) + stats.nct.cdf(-c, df, lam)))
    table("power_t_ref", rows)

    def tost_power(n, theta, delta, sd, alpha):
        mp.mp.dps = 30
        n = mp.mpf(n)
        nu = n - 1
        se = mp.mpf(sd) / mp.sqrt(n)
        c = -mp.exp(bisect(lambda u: -(t_lower(-mp.exp(u), nu) - alpha), mp.mpf(-40), mp.mpf(40), 120))
        c = -c
        hi, lo = (delta - theta) / se, (-delta - theta) / se
        vmax = nu * ((hi - lo) / (2 * c)) ** 2

        def f(v):
            dens = mp.exp((nu / 2 - 1) * mp.log(v) - v / 2 - (nu / 2) * mp.log(2) - mp.loggamma(nu / 2))
            s = mp.sqrt(v / nu)
            return dens * (mp.ncdf(hi - c * s) - mp.ncdf(lo + c * s))
        r = mp.quad(f, [0, nu * 0.25, nu, vmax] if vmax > nu else [0, vmax / 2, vmax])
        mp.mp.dps = 40
        return r
    rows = []
    for n, theta, delta, sd in [(5, 0, 0.006, 0.004), (8, 0, 0.004, 0.004), (20, 0.001, 0.004, 0.004),
                                (36, 0, 0.002, 0.004), (100, -0.001, 0.002, 0.004), (400, 0, 0.0008, 0.004)]:
        rows.append((n, theta, delta, sd, 0.05, tost_power(n, theta, delta, sd, 0.05)))
    table("power_tost_ref", rows)
    print("/* sample sizes: smallest n with power >= target (stepping n) */")
    rows = []
    for shift, sd, a, pw in [(0.002, 0.004, 0.05, 0.8), (0.004, 0.004, 0.05, 0.9), (0.001, 0.004, 0.01, 0.8),
                             (0.0004, 0.004, 0.05, 0.8)]:
        n = 2
        while True:
            df = n - 1
            c = stats.t.ppf(1 - a / 2, df)
            lam = shift * np.sqrt(n) / sd
            if stats.nct.sf(c, df, lam) + stats.nct.cdf(-c, df, lam) >= pw:
                break
            n += 1
        rows.append((shift, sd, a, pw, n))
    table("runs_shift_ref", rows)
    rows = []
    for theta, delta, sd, pw in [(0, 0.004, 0.004, 0.8), (0, 0.002, 0.004, 0.8), (0.001, 0.003, 0.004, 0.9)]:
        # start from the normal formula minus a margin and step up
        z = stats.norm.ppf(0.95) + stats.norm.ppf((1 + pw) / 2 if theta == 0 else pw)
        n = max(2, int(z * z * sd * sd / (delta - abs(theta)) ** 2) - 10)
        while tost_power(n, theta, delta, sd, 0.05) >= pw and n > 2:
            n -= 1
        while tost_power(n, theta, delta, sd, 0.05) < pw:
            n += 1
        rows.append((theta, delta, sd, pw, n))
    table("runs_equivalence_ref", rows)


if __name__ == "__main__":
    print("/* tests/test_stats_values.h — GENERATED by tests/stats_reference_values.py (see there for")
    print(" * the sources: mpmath at 40 digits, scipy.stats, enumeration, numerical integration);")
    print(" * do not edit by hand.  Included by tests/test_stats.c only. */")
    print("#ifndef ULPSCOPE_TESTS_TEST_STATS_VALUES_H")
    print("#define ULPSCOPE_TESTS_TEST_STATS_VALUES_H")
    distributions()
    datasets()
    wilcoxon_ties()
    power()
    print("#endif")
