#!/usr/bin/env python3
"""Causal clustering and Renyi centres (Karagodin, Polyanskiy, Rigollet, "Clustering in causal attention
masking", NeurIPS 2024, Figure 2; docs/science/particles.md section 8): K = Q = V = I_2, n = 200, d = 2,
beta = 64, causal mask, the SA flow on the circle integrated by rcsim's RK4. Renyi centres with
delta = 4 beta^(-1/2) (rcsim's measure `renyi_centres`, checked here against an independent Python
implementation on the stored tokens) and the cluster counts against time; the paper reports one Renyi
centre disappearing between t = 75 and t = 150.

usage: particles_causal.py [--tiny] [--rcsim PATH] --data DIR --out PREFIX [--seed S] [--perturb KEY=VALUE ...]

Writes PREFIX.png, PREFIX.pdf and PREFIX.txt (per trial: the counts at t = 0, 75, 150 and T, and whether a
centre vanished between 75 and 150; the checks).

Checks (exit 1 when one fails), the paper's claims for this flow:
- the first token does not move (it attends only to itself; the paper's single cluster forms at x_1(0)):
  max_t |x_1(t) - x_1(0)| < 1e-12 in every trial;
- metastable clustering: at t = 75 every trial has between 2 and n / 10 clusters (cos > 0.99);
- the clusters form around the Renyi centres: at t = 75, clusters - Renyi centres is 0 .. 3 in every
  trial (the paper's Fig. 2 shows the clusters at the centres; the margin 3, for clusters closer than
  delta that share a centre, is this script's);
- strong Renyi centres (docs/science/model-spec.md section 6: a token farther than delta from every
  earlier token, strict, Euclidean or geodesic as metrics.renyi_distance says) stay put: the largest move of
  the strong centres of X(0) up to t = 75 is below delta / 4, in every trial.
Their count is rcsim's measure `strong_renyi_centres` (reported at t = 0, 75, 150, T); the measure is a count,
so which tokens they are (for their move) is found here from X(0) by the same rule, and that count must
equal the measure's at t = 0 (an engine check). And rcsim's measure `renyi_centres` equals the Python
implementation at every snapshot (an engine check).

Settings: the paper's (Fig. 2 caption): causal SA, K = Q = V = I_2, n = 200, d = 2, beta = 64,
delta = 4 beta^(-1/2), the times 75 and 150. rcsim's own choices: X(0) uniform on the circle (the
paper's draw is not known), RK4 dt = 0.05 to T = 300 (tiny: dt = 0.1 to T = 160), 16 trials (tiny 2),
seed 1, the Renyi rule with >= and the Euclidean distance (the paper's strict rule, geodesic in its
appendix, is issue 37's item 2), the thresholds of the checks.
"""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import h5py  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from particles_common import Checks, angles, flow_args, renyi_centres, run_rcsim, script_args  # noqa: E402
from rcsim.figures import atomic_writer, save_figure  # noqa: E402

N, D, BETA = 200, 2, 64.0


def settings(tiny):
    """(dt, steps, token_every, trials): tiny is for CI (seconds), the full run is the figure."""
    return (0.1, 1600, 20, 2) if tiny else (0.05, 6000, 20, 16)


def value_at(t, y, when):
    """y at the last sample with t <= when."""
    return y[np.searchsorted(t, when + 1e-9) - 1]


def strong_renyi_centres(X, delta, geodesic):
    """Which tokens are strong Renyi centres (docs/science/model-spec.md section 6): token k whose distance to
    every earlier token is > delta, Euclidean or geodesic (the angle; rcsim's measure attribute `geodesic`).
    Returns the list of token indices; rcsim's measure `strong_renyi_centres` stores only their count."""
    def dist(k):
        if geodesic:
            u = X / np.linalg.norm(X, axis=1, keepdims=True)
            return np.arccos(np.clip(u[:k] @ u[k], -1.0, 1.0))
        return np.linalg.norm(X[:k] - X[k], axis=1)
    return [k for k in range(len(X)) if k == 0 or np.min(dist(k)) > delta]


def main():
    a = script_args(__doc__, seed=1)
    dt, steps, every, trials = settings(a.tiny)
    delta = 4.0 / np.sqrt(BETA)
    os.makedirs(a.data, exist_ok=True)
    run = os.path.join(a.data, "particles_causal.h5")
    tok_layers = ",".join(str(k) for k in range(0, steps + 1, every))
    seconds = run_rcsim(a.rcsim, run, flow_args(N, D, BETA, dt, steps, mask="causal"),
                        [f"--run.trials={trials}", f"--run.seed={a.seed}", "--init.type=sphere",
                         f"--output.schedule=every:{every}", f"--output.tokens={tok_layers}",
                         "--output.measures=renyi_centres,strong_renyi_centres,clusters_99,clusters_999"])
    with h5py.File(run, "r") as f:
        t = f["time"][()]
        ren = f["metrics/renyi_centres"][()]
        strong_count = f["metrics/strong_renyi_centres"][()]
        geodesic = bool(f["metrics/strong_renyi_centres"].attrs.get("geodesic", 0))
        c99 = f["metrics/clusters_99"][()]
        c999 = f["metrics/clusters_999"][()]
        tokens = f["tokens"][()]
        tok_t = f["tokens_layer"][()] * dt
        delta_attr = float(f["metrics/renyi_centres"].attrs.get("delta", np.nan))
    T = t[-1]
    # rcsim's measure against the independent Python implementation, at every stored snapshot.
    py_ren = np.array([[len(renyi_centres(tokens[r, s], delta)) for s in range(len(tok_t))] for r in range(trials)])
    rc_at_tok = np.array([[value_at(t, ren[r], tt) for tt in tok_t] for r in range(trials)])
    mismatch = int(np.sum(py_ren != rc_at_tok))

    marks = [0.0, 75.0, 150.0, T] if T >= 150 else [0.0, 75.0, T]
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.4), gridspec_kw={"width_ratios": [1.25, 1, 1]})
    th = np.unwrap(angles(tokens[0]), axis=0)  # [snapshot, token]
    ax[0].plot(tok_t, th, color="0.55", lw=0.35)
    for s in range(0, len(tok_t), max(1, len(tok_t) // 30)):
        c = renyi_centres(tokens[0, s], delta)
        ax[0].plot(np.full(len(c), tok_t[s]), th[s, c], "k.", ms=3)
    ax[0].set_xlabel("time t")
    ax[0].set_ylabel("token angle (unwrapped, rad)")
    ax[0].set_title(f"trial 0: token angles; black dots: Renyi centres\n(delta = 4 beta^-1/2 = {delta:.3g})")
    ax[1].step(t, ren[0], where="post", color="k", label="Renyi centres")
    ax[1].step(t, c99[0], where="post", color="C0", ls="--", label="clusters, cos > 0.99")
    ax[1].step(t, c999[0], where="post", color="C1", ls=":", label="clusters, cos > 0.999")
    for m in (75.0, 150.0):
        ax[1].axvline(m, color="C3", lw=0.7, ls="--")
    ax[1].set_xlabel("time t")
    ax[1].set_ylabel("count")
    ax[1].set_ylim(0, max(20, float(np.max(c99[0][t >= 20])) + 3) if np.any(t >= 20) else None)
    ax[1].set_title("trial 0: counts (red: t = 75, 150)")
    ax[1].legend(fontsize=8)
    for r in range(trials):
        ax[2].step(t, ren[r], where="post", lw=0.8, alpha=0.7)
    for m in (75.0, 150.0):
        ax[2].axvline(m, color="C3", lw=0.7, ls="--")
    ax[2].set_xlabel("time t")
    ax[2].set_ylabel("Renyi centres")
    ax[2].set_title(f"all {trials} trials (seeds of one run)")
    fig.suptitle(f"causal SA flow, K = Q = V = I_2, n = {N}, d = {D}, beta = {BETA:g}, RK4 dt = {dt:g}"
                 + (" (tiny)" if a.tiny else ""))
    fig.tight_layout()
    save_figure(fig, a.out, dpi=110)

    checks = Checks()
    first_move = float(np.max(np.linalg.norm(tokens[:, :, 0] - tokens[:, :1, 0], axis=-1)))
    checks.add("first_token_stationary", f"max_t |x_1(t) - x_1(0)| = {first_move:.2e}", "< 1e-12", first_move < 1e-12)
    c75 = np.array([int(value_at(t, c99[r], 75.0)) for r in range(trials)])
    r75 = np.array([int(value_at(t, ren[r], 75.0)) for r in range(trials)])
    checks.add("metastable_clusters_at_75", f"clusters (cos > 0.99) at t = 75: {c75.tolist()}", f"2 .. {N // 10}",
               np.all((c75 >= 2) & (c75 <= N // 10)))
    checks.add("clusters_at_renyi_centres_75", f"clusters - Renyi centres at t = 75: {(c75 - r75).tolist()}", "0 .. 3",
               np.all((c75 - r75 >= 0) & (c75 - r75 <= 3)))
    s75 = int(np.searchsorted(tok_t, 75.0 + 1e-9))  # snapshots up to t = 75
    strong = [strong_renyi_centres(tokens[r, 0], delta, geodesic) for r in range(trials)]
    strong_move = [float(np.max(np.linalg.norm(tokens[r, :s75][:, c] - tokens[r, 0, c], axis=-1))) for r, c in
                   enumerate(strong)]
    strong_at = {m: [int(value_at(t, strong_count[r], m)) for r in range(trials)] for m in marks}
    checks.add("strong_renyi_centres_stay", "strong centres (rcsim's measure) per trial at t = "
               + "; ".join(f"{m:g}: {v}" for m, v in strong_at.items())
               + "; the largest move of those of X(0) up to t = 75: " + ", ".join(f"{m:.3g}" for m in strong_move),
               f"< delta / 4 = {delta / 4:.3g}", max(strong_move) < delta / 4)
    checks.add("strong_renyi_measure_equals_python", f"strong centres of X(0): measure {strong_at[0.0]}, found here "
               f"{[len(c) for c in strong]}", "equal", strong_at[0.0] == [len(c) for c in strong], engine=True)
    checks.add("renyi_measure_equals_python", f"{mismatch} of {py_ren.size} snapshots differ", "0", mismatch == 0,
               engine=True)
    lost = []
    with atomic_writer(a.out + ".txt") as f:
        f.write(f"# causal clustering (Karagodin et al. 2024, Fig. 2 setting): n = {N}, d = {D}, beta = {BETA:g}, "
                f"K = Q = V = I_2, causal SA, RK4 dt = {dt:g}, {steps} steps (T = {T:g}), {trials} trials, "
                f"seed {a.seed}, X(0) uniform on the circle{' (tiny)' if a.tiny else ''}\n")
        f.write(f"# delta = 4 beta^-1/2 = {delta:.6g} (stored attribute {delta_attr:.6g})\n")
        f.write(f"renyi_measure_vs_python_mismatches {mismatch} of {py_ren.size} snapshots\n")
        f.write("trial " + " ".join(f"renyi@{m:g}" for m in marks) + " " + " ".join(f"c99@{m:g}" for m in marks)
                + " " + " ".join(f"c999@{m:g}" for m in marks) + " renyi_lost_75_150\n")
        for r in range(trials):
            rv = [int(value_at(t, ren[r], m)) for m in marks]
            l75 = int(value_at(t, ren[r], 75.0))
            l150 = int(value_at(t, ren[r], min(150.0, T)))
            lost.append(l75 - l150)
            f.write(f"{r} " + " ".join(str(v) for v in rv) + " "
                    + " ".join(str(int(value_at(t, c99[r], m))) for m in marks) + " "
                    + " ".join(str(int(value_at(t, c999[r], m))) for m in marks) + f" {l75 - l150}\n")
        lost = np.array(lost)
        f.write(f"trials_with_a_centre_lost_between_75_and_150 {int(np.sum(lost > 0))} of {trials} "
                f"(mean lost {lost.mean():.3g})\n")
        f.write(f"rcsim_seconds {seconds:.3f}\n")
        f.write(checks.text())
    return checks.finish(a.out + ".txt")


if __name__ == "__main__":
    from particles_common import command
    sys.exit(command.run(main))
