#!/usr/bin/env python3
"""Periodic meta-stable state on the circle (Bruno, Pasqualotto, Agazzi, "Emergence of meta-stable clustering in
mean-field transformer models", ICLR 2025, Figure 4; docs/science/particles.md section 9): tokens equally spaced
on the circle plus white noise sigma = 0.01 (init.type = circle, init.noise = 0.01), beta = 5, Q = K = V = I,
integrated by rcsim's RK4 for SA and USA attention. The paper predicts a 3-periodic state at beta = 5.

The linearisation about the uniform state (derived here, docs section 9): a density mode exp(i k theta) grows at
    lambda_k = k^2 I_k(beta) / beta            (USA, A_ij = exp(beta <x_i, x_j>) / N)
    lambda_k = k^2 I_k(beta) / (beta I_0(beta)) (SA, the softmax),
I_k the modified Bessel function; the state that emerges is k_max = argmax_k lambda_k (3 at beta = 5, both
kinds). `--self-test` checks lambda_k against the velocity of a perturbed equally spaced configuration.

usage: particles_periodic.py [--tiny] [--rcsim PATH] --data DIR --out PREFIX [--seed S] [--perturb KEY=VALUE ...]
       particles_periodic.py --self-test

Checks (exit 1 when one fails), for SA and USA each:
- the growth rate of mode 3 in the linear phase (a fit of log |c_3(t)| while every |c_k| < LINEAR) is the
  predicted lambda_3 within 2% (median over trials);
- the fastest growing of the modes k = 2..5 (median fitted rates) is the paper's k = 3;
- the mode the dynamics selects is 3 in every trial: the largest amplification |c_k(t_e)| / |c_k(0)|, t_e
  the time at which some |c_k| first exceeds 0.3;
- the state that emerges is 3-periodic: rcsim's `fourier_k` (the k = 1..8 of the largest |c_k|, stored by the
  run) at t_e is 3 in more than half of the trials. A NaN rate fails the rate checks; k = 4 fails this one.
  (At finite N the random initial amplitudes decide between modes 3 and 4 in some draws, since mode 4 grows
  only 12% slower: at N = 256 both tiny draws emerged as k = 4; the tiny run uses N = 1024, where the linear
  phase is long enough, ln(sqrt(N)/sigma)/lambda_3.)
And rcsim's `fourier_mode` (k = 1..4) and `fourier_k` (k = 1..8) measures equal the Python values on the
stored tokens (engine checks).

Settings: the paper's (Fig. 4 caption; a mean-field PDE there): beta = 5, Q = K = V = I on the circle,
the uniform state perturbed by white noise sigma = 0.01. rcsim's own choices: N particles (512; tiny 1024)
equally spaced plus N(0, sigma^2) per coordinate, projected back to the circle (their particle experiment,
per issue 37, is USA from i.i.d. uniform angles instead); SA and USA both; RK4 with dt = 0.05 (SA) and
0.005 (USA); T; the trials and seed 5; the growth-rate formula (derived in docs/science/particles.md,
section 9, not copied from the paper) and the thresholds of the checks.
"""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import h5py  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from particles_common import Checks, angles, components, flow_args, run_rcsim, script_args  # noqa: E402
from rcsim.figures import atomic_writer, save_figure  # noqa: E402

BETA, SIGMA, KMAX_SHOWN = 5.0, 0.01, 6
LINEAR = 0.05  # the linear phase: every |c_k| below this


def bessel_i(k, beta, m=4096):
    """I_k(beta) = (1/pi) int_0^pi exp(beta cos u) cos(k u) du (trapezoid on a periodic integrand: spectral)."""
    u = np.linspace(0.0, 2 * np.pi, m, endpoint=False)
    return float(np.mean(np.exp(beta * np.cos(u)) * np.cos(k * u)))


def growth_rate(k, beta, kind):
    lam = k * k * bessel_i(k, beta) / beta
    return lam / bessel_i(0, beta) if kind == "softmax" else lam


def circle_velocity(theta, beta, kind):
    """d theta_i / dt of the flow on the circle with Q = K = V = I: sum_j A_ij sin(theta_j - theta_i)."""
    diff = theta[None, :] - theta[:, None]
    w = np.exp(beta * np.cos(diff))
    w = w / w.sum(axis=1, keepdims=True) if kind == "softmax" else w / len(theta)
    return np.sum(w * np.sin(diff), axis=1)


def self_test():
    """lambda_k against the measured velocity of theta_j = 2 pi j / N + eps cos(k theta_j): v_j / (eps cos) -> lambda_k."""
    n, eps, worst = 2048, 1e-7, 0.0
    th0 = 2 * np.pi * np.arange(n) / n
    for beta in (1.0, 5.0, 12.0):
        for kind in ("softmax", "usa"):
            for k in range(1, 7):
                pert = eps * np.cos(k * th0)
                v = circle_velocity(th0 + pert, beta, kind)
                measured = float(np.dot(v, pert) / np.dot(pert, pert))
                lam = growth_rate(k, beta, kind)
                worst = max(worst, abs(measured - lam) / abs(lam))
    # The Bessel quadrature against a known value: I_1(5) = 24.33564214245...
    bessel_err = abs(bessel_i(1, 5.0) - 24.33564214245052)
    kmax5 = [int(np.argmax([growth_rate(k, 5.0, kind) for k in range(1, 20)])) + 1 for kind in ("softmax", "usa")]
    print(f"self-test: largest relative error of lambda_k {worst:.2e}; |I_1(5) - 24.3356...| = {bessel_err:.1e}; "
          f"k_max(beta = 5) = {kmax5}")
    ok = worst < 1e-4 and bessel_err < 1e-9 and kmax5 == [3, 3]
    print("self-test " + ("passed" if ok else "FAILED"))
    return 0 if ok else 1


def settings(tiny):
    """(n, trials, {kind: (dt, steps, token_every)}): tiny is for CI, the full run is the figure."""
    if tiny:
        return 1024, 2, {"softmax": (0.05, 300, 5), "usa": (0.005, 100, 5)}
    return 512, 8, {"softmax": (0.05, 1000, 10), "usa": (0.005, 400, 5)}


def fourier(th, kmax):
    """|(1/N) sum_j exp(i k theta_j)| for k = 1..kmax: [..., k]."""
    k = np.arange(1, kmax + 1)
    return np.abs(np.mean(np.exp(1j * th[..., None] * k), axis=-2))


def first_max(F):
    """Per row the index of the largest entry, the smallest index within 1e-12 of it (fourier_k's tie rule)."""
    return np.argmax(F >= F.max(axis=1, keepdims=True) - 1e-12, axis=1)


def fitted_rates(t, F):
    """Slopes of log |c_k(t)| (F[time, k]) over the linear phase: the samples before any |c_k| first reaches
    LINEAR (each Fourier mode of the angles' perturbation grows as exp(lambda_k t) there); NaN with < 3 samples."""
    stop = np.nonzero(F.max(axis=1) >= LINEAR)[0]
    m = stop[0] if len(stop) else len(t)
    if m < 3:
        return np.full(F.shape[1], np.nan)
    return np.polyfit(t[:m], np.log(F[:m]), 1)[0]


def main():
    a = script_args(__doc__, seed=5, outputs_required=False, extra=("--self-test",))
    if a.self_test:
        return self_test()
    if not a.data or not a.out:
        sys.exit("particles_periodic.py: --data and --out are required (or --self-test)")
    n, trials, runs = settings(a.tiny)
    os.makedirs(a.data, exist_ok=True)
    res = {}
    for kind, (dt, steps, every) in runs.items():
        path = os.path.join(a.data, f"particles_periodic_{kind}.h5")
        tok = ",".join(str(k) for k in range(0, steps + 1, every))
        sec = run_rcsim(a.rcsim, path, flow_args(n, 2, BETA, dt, steps, kind=kind),
                        [f"--run.trials={trials}", f"--run.seed={a.seed}", "--init.type=circle", f"--init.noise={SIGMA!r}",
                         f"--output.schedule=every:{every}", f"--output.tokens={tok}",
                         "--output.measures=fourier_mode,fourier_k,clusters_90,clusters_99"])
        with h5py.File(path, "r") as f:
            Xall = f["tokens"][()]
            tt = f["tokens_layer"][()] * dt
            fm_all = f["metrics/fourier_mode"][()]
            fk_all = f["metrics/fourier_k"][()]
            c90_all = f["metrics/clusters_90"][()]
            c99 = f["metrics/clusters_99"][0]
        per_trial = []
        fm_err, fk_bad = 0.0, 0
        for r in range(trials):
            F = fourier(angles(Xall[r]), KMAX_SHOWN)  # [time, k]
            fm_err = max(fm_err, float(np.max(np.abs(fm_all[r] - F[:, :4].max(axis=1)))))
            F8 = fourier(angles(Xall[r]), 8)  # fourier_k's range
            fk_bad += int(np.sum(fk_all[r] != first_max(F8) + 1))
            # the mode that emerges: rcsim's fourier_k (k = 1..8) when some |c_k| first exceeds 0.3 (the end of the
            # linear phase); NaN (never reached) is no mode
            e = int(np.nonzero(fm_all[r] > 0.3)[0][0]) if np.any(fm_all[r] > 0.3) else None
            emerged = int(fk_all[r][e]) if e is not None and np.isfinite(fk_all[r][e]) else -1
            e = len(tt) - 1 if e is None else e
            rates = fitted_rates(tt, F)
            per_trial.append(dict(rate=float(rates[2]), rates=rates, emerged=emerged,
                                  amplified=int(np.argmax(F[e] / F[0])) + 1,
                                  t_emerged=float(tt[e]), init=F[0], c90_final=int(c90_all[r][-1])))
        X = Xall[0]
        th = angles(X)
        F = fourier(th, KMAX_SHOWN)
        sizes = np.bincount(components(X[-1], 0.99))
        res[kind] = dict(dt=dt, steps=steps, t=tt, F=F, th=th, fm_err=fm_err, fk_bad=fk_bad, per_trial=per_trial,
                         rate=per_trial[0]["rate"], lam=[growth_rate(k, BETA, kind) for k in range(1, KMAX_SHOWN + 1)],
                         c99=int(c99[-1]), sizes=np.sort(sizes)[::-1], sec=sec)

    fig, ax = plt.subplots(2, 3, figsize=(14, 8))
    for row, kind in enumerate(runs):
        r = res[kind]
        for k in range(KMAX_SHOWN):
            ax[row, 0].semilogy(r["t"], r["F"][:, k], label=f"k = {k + 1}", lw=2.0 if k == 2 else 1.0)
        ax[row, 0].set_xlabel("time t")
        ax[row, 0].set_ylabel("|(1/N) sum_j exp(i k theta_j)|")
        ax[row, 0].set_title(f"{kind}, trial 0: Fourier modes (k = 3 bold)")
        ax[row, 0].legend(fontsize=7, ncol=2)
        ax[row, 1].bar(np.arange(1, KMAX_SHOWN + 1), r["lam"], color=["C2" if k == 2 else "0.6" for k in range(KMAX_SHOWN)])
        ax[row, 1].set_xlabel("mode k")
        ax[row, 1].set_ylabel("growth rate lambda_k")
        em = [p["emerged"] for p in r["per_trial"]]
        ax[row, 1].set_title(f"{kind}: lambda_k = k^2 I_k(beta) / beta" + (" / I_0(beta)" if kind == "softmax" else "")
                             + f"\nk = 3: measured {np.median([p['rate'] for p in r['per_trial']]):.4g} (median), "
                             f"predicted {r['lam'][2]:.4g}\nemerging mode over {len(em)} trials: "
                             + ", ".join(f"k={k}: {em.count(k)}" for k in sorted(set(em))), fontsize=9)
        th = r["th"]
        step = max(1, len(r["t"]) // 60)
        for s in range(0, len(r["t"]), step):
            ax[row, 2].plot(np.full(th.shape[1], r["t"][s]), th[s], ",", color="k")
        ax[row, 2].set_xlabel("time t")
        ax[row, 2].set_ylabel("token angle theta (rad)")
        ax[row, 2].set_title(f"{kind}, trial 0: angles; at T {r['c99']} clusters (cos > 0.99),\nsizes "
                             f"{list(r['sizes'][:6])}", fontsize=9)
    fig.suptitle(f"circle, N = {n}, beta = {BETA:g}, equally spaced + noise sigma = {SIGMA:g}, Q = K = V = I, RK4"
                 + (" (tiny)" if a.tiny else ""))
    fig.tight_layout()
    save_figure(fig, a.out, dpi=110)

    with atomic_writer(a.out + ".txt") as f:
        f.write(f"# periodic state (Bruno, Pasqualotto, Agazzi, Fig. 4 setting): circle, N = {n}, beta = {BETA:g}, "
                f"init circle + noise {SIGMA:g}, Q = K = V = I, seed {a.seed}{' (tiny)' if a.tiny else ''}\n")
        f.write("# paper: 3-periodic state at beta = 5; k_max = argmax_k k^2 I_k(beta) (this note's linearisation)\n")
        f.write(f"# {trials} trials per kind (seeds of one run); emerged = argmax_k |c_k| when max_k |c_k| first > 0.3\n")
        f.write("kind trial lambda3_predicted lambda3_measured emerged_mode t_emerged clusters_90_at_T "
                "|c_1..c_6|(0)\n")
        for kind, r in res.items():
            for k, p in enumerate(r["per_trial"]):
                f.write(f"{kind} {k} {r['lam'][2]:.5g} {p['rate']:.5g} {p['emerged']} {p['t_emerged']:.4g} "
                        f"{p['c90_final']} " + " ".join(f"{x:.2e}" for x in p["init"]) + "\n")
        for kind, r in res.items():
            em = [p["emerged"] for p in r["per_trial"]]
            f.write(f"summary {kind}: dt {r['dt']:g}, T {r['dt'] * r['steps']:g}, k_max predicted "
                    f"{int(np.argmax(r['lam'])) + 1}, lambda3 measured median "
                    f"{np.median([p['rate'] for p in r['per_trial']]):.5g} vs {r['lam'][2]:.5g}; emerged modes "
                    + ", ".join(f"k={k}: {em.count(k)}/{len(em)}" for k in sorted(set(em)))
                    + f"; fourier_mode measure vs Python max diff {r['fm_err']:.1e}; rcsim {r['sec']:.2f} s\n")
        f.write("lambda_k (k = 1..6): softmax " + " ".join(f"{x:.4g}" for x in res['softmax']['lam'])
                + "; usa " + " ".join(f"{x:.4g}" for x in res['usa']['lam']) + "\n")
        for kind, r in res.items():
            f.write(f"fitted rates (k = 1..6, median over trials) {kind}: "
                    + " ".join(f"{x:.4g}" for x in np.median([p["rates"] for p in r["per_trial"]], axis=0)) + "\n")
        checks = Checks()
        for kind, r in res.items():
            med = np.median([p["rates"] for p in r["per_trial"]], axis=0)
            rel = abs(med[2] - r["lam"][2]) / r["lam"][2]
            checks.add(f"growth_rate_mode3_{kind}", f"{med[2]:.5g} against lambda_3 = {r['lam'][2]:.5g} "
                       f"(relative difference {rel:.2e})", "within 2%", rel < 0.02)
            fastest = int(np.argmax(med[1:5])) + 2 if np.all(np.isfinite(med[1:5])) else -1
            checks.add(f"fastest_mode_{kind}", f"k = {fastest} (fitted rates k = 2..5: "
                       + ", ".join(f"{x:.4g}" for x in med[1:5]) + ")", "k = 3", fastest == 3)
            amp = [p["amplified"] for p in r["per_trial"]]
            checks.add(f"most_amplified_mode_{kind}", f"argmax_k |c_k(t_e)| / |c_k(0)| per trial: {amp}",
                       "3 in every trial", all(k == 3 for k in amp))
            em = [p["emerged"] for p in r["per_trial"]]
            checks.add(f"emerged_3_periodic_{kind}", f"emerged modes (rcsim's fourier_k at t_e) {em}",
                       "3 in more than half of the trials", 2 * em.count(3) > len(em))
            checks.add(f"fourier_mode_measure_{kind}", f"largest difference from the Python value {r['fm_err']:.1e}",
                       "< 1e-12", r["fm_err"] < 1e-12, engine=True)
            checks.add(f"fourier_k_measure_{kind}", f"snapshots where rcsim's k differs from the Python argmax: "
                       f"{r['fk_bad']}", "0", r["fk_bad"] == 0, engine=True)
        f.write(checks.text())
    return checks.finish(a.out + ".txt")


if __name__ == "__main__":
    from particles_common import command
    sys.exit(command.run(main))
