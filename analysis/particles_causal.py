#!/usr/bin/env python3
"""Causal clustering and Renyi centres (Karagodin, Polyanskiy, Rigollet, "Clustering in causal attention
masking", NeurIPS 2024, Figure 2; docs/science/particles.md section 8): K = Q = V = I_2, n = 200, d = 2,
beta = 64, causal mask, the SA flow on the circle integrated by rcsim's RK4. Renyi centres with
delta = 4 beta^(-1/2) (rcsim's measure `renyi_centres`, checked here against an independent Python
implementation on the stored tokens) and the cluster counts against time; the paper reports one Renyi
centre disappearing between t = 75 and t = 150.

usage: particles_causal.py [--tiny] [--rcsim PATH] --data DIR --out PREFIX

Writes PREFIX.png, PREFIX.pdf and PREFIX.txt (per trial: the counts at t = 0, 75, 150 and T, and whether a
centre vanished between 75 and 150).
"""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import h5py  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from particles_common import angles, flow_args, renyi_centres, run_rcsim, script_args  # noqa: E402
from rcsim.figures import atomic_writer, save_figure  # noqa: E402

N, D, BETA = 200, 2, 64.0


def settings(tiny):
    """(dt, steps, token_every, trials): tiny is for CI (seconds), the full run is the figure."""
    return (0.1, 1600, 20, 2) if tiny else (0.05, 6000, 20, 16)


def value_at(t, y, when):
    """y at the last sample with t <= when."""
    return y[np.searchsorted(t, when + 1e-9) - 1]


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
                         "--output.measures=renyi_centres,clusters_99,clusters_999"])
    with h5py.File(run, "r") as f:
        t = f["time"][()]
        ren = f["metrics/renyi_centres"][()]
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
    print(open(a.out + ".txt").read(), end="")
    if mismatch:
        print("renyi_centres measure disagrees with the Python implementation", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
