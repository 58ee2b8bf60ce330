#!/usr/bin/env python3
"""beta x t phase diagram of the cluster count (in the manner of Geshkovski, Letrouit, Polyanskiy, Rigollet,
"A mathematical perspective on Transformers"; docs/science/particles.md section 11): the SA flow on the sphere,
Q = K = V = I, X(0) uniform, integrated by rcsim's RK4 in one `[sweep]` over model.beta; the median over trials
of the number of clusters (connected components of cos(x_i, x_j) > 0.999, measure clusters_999) as a heat map
over beta and (log) time.

usage: particles_phase.py [--tiny] [--rcsim PATH] --data DIR --out PREFIX [--seed S] [--perturb KEY=VALUE ...]

Checks (exit 1 when one fails), GLPR's qualitative claims for this flow:
- clustering: at every beta the median number of clusters at T is at most n / 4;
- the smallest beta reaches a single cluster by T (median), as GLPR prove for small beta;
- the number of metastable clusters grows with beta: the median at T does not decrease from one beta to
  the next by more than one cluster, and the largest beta has at least 3 more clusters than the smallest.
The thresholds (n / 4, one cluster, 3) are this script's, not the paper's.

Settings: all rcsim's own choices (GLPR's own phase-diagram setting was not found): SA on the circle
(d = 2), n = 32, Q = K = V = I, X(0) uniform, beta from 0.5 to 128 (tiny: 1 to 64), RK4 dt = 0.1 (tiny
0.2), T = 1000 (tiny 100), the cluster threshold cos > 0.999.
"""
import glob
import os
import re
import subprocess
import sys
import time

os.environ.setdefault("MPLBACKEND", "Agg")
import h5py  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from particles_common import Checks, perturbed, script_args  # noqa: E402
from rcsim.figures import atomic_writer, save_figure  # noqa: E402


def settings(tiny):
    """(n, d, betas, dt, steps, trials, per_decade)."""
    if tiny:
        return 32, 2, [1, 4, 16, 64], 0.2, 500, 2, 8
    return 32, 2, [0.5, 1, 2, 4, 8, 16, 32, 64, 128], 0.1, 10000, 8, 16


def main():
    a = script_args(__doc__, seed=11)
    n, d, betas, dt, steps, trials, per_decade = settings(a.tiny)
    os.makedirs(a.data, exist_ok=True)
    ini = os.path.join(a.data, "particles_phase.ini")
    sweep_dir = os.path.join(a.data, "particles_phase")
    with atomic_writer(ini) as f:
        f.write(f"""[model]
tokens = {n}
dim = {d}
layers = {steps}
[run]
trials = {trials}
seed = {a.seed}
threads = 1
[weights]
q = identity
k = identity
v = identity
shared = true
[norm]
type = sphere
[residual]
alpha = {dt!r}
project = tangent
[dynamics]
integrator = rk4
[init]
type = sphere
[output]
file = {sweep_dir}.h5
schedule = log:{per_decade}
measures = clusters_99,clusters_999
[sweep]
model.beta = {', '.join(repr(float(b)) for b in betas)}
""")
    t0 = time.perf_counter()
    subprocess.run([a.rcsim, "sweep", *perturbed(["--quiet", "--force", "--config", ini])], check=True)
    sec = time.perf_counter() - t0
    found = {}
    for path in glob.glob(os.path.join(sweep_dir, "model.beta=*.h5")):
        beta = float(re.search(r"model\.beta=([^_/]+)\.h5$", path).group(1))
        with h5py.File(path, "r") as f:
            found[beta] = (f["time"][()], f["metrics/clusters_999"][()], f["metrics/clusters_99"][()])
    bs = sorted(found)
    if [float(b) for b in betas] != bs:
        print(f"sweep points {bs} differ from {betas}", file=sys.stderr)
        return 1
    t = found[bs[0]][0]
    med = np.array([np.median(found[b][1], axis=0) for b in bs])  # [beta, time]
    med99 = np.array([np.median(found[b][2], axis=0) for b in bs])

    fig, ax = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1.4, 1]})
    tt = np.maximum(t, dt)  # t = 0 drawn at the first step on the log axis
    edges_t = np.concatenate([[tt[0] / 1.2], np.sqrt(tt[1:] * tt[:-1]), [tt[-1] * 1.2]])
    lb = np.log2(bs)
    edges_b = 2 ** np.concatenate([[lb[0] - 0.5], 0.5 * (lb[1:] + lb[:-1]), [lb[-1] + 0.5]])
    pc = ax[0].pcolormesh(edges_t, edges_b, np.log2(med), cmap="viridis", shading="flat", vmin=0, vmax=np.log2(n))
    cb = fig.colorbar(pc, ax=ax[0], ticks=np.arange(0, np.log2(n) + 1))
    cb.ax.set_yticklabels([str(2 ** k) for k in range(int(np.log2(n)) + 1)])
    cb.set_label("median number of clusters (cos > 0.999)")
    ax[0].set_xscale("log")
    ax[0].set_yscale("log", base=2)
    ax[0].set_xlabel("time t (t = 0 drawn at t = dt)")
    ax[0].set_ylabel("beta")
    ax[0].set_title(f"SA flow on S^{d - 1}, n = {n}, {trials} trials per beta, RK4 dt = {dt:g}", fontsize=10)
    for k, b in enumerate(bs):
        ax[1].step(tt, med[k], where="post", label=f"beta = {b:g}")
    ax[1].set_xscale("log")
    ax[1].set_yscale("log", base=2)
    ax[1].set_xlabel("time t")
    ax[1].set_ylabel("median clusters (cos > 0.999)")
    ax[1].legend(fontsize=7, ncol=2)
    fig.suptitle("beta x t phase diagram of the cluster count" + (" (tiny)" if a.tiny else ""))
    fig.tight_layout()
    save_figure(fig, a.out, dpi=110)

    marks = [m for m in (1, 10, 100, 1000, 2000) if m <= t[-1] + 1e-9]
    idx = [int(np.searchsorted(t, m + 1e-9) - 1) for m in marks]
    final = med[:, -1]
    at_T = ", ".join(f"beta {b:g}: {c:g}" for b, c in zip(bs, final))
    checks = Checks()
    checks.add("clusters_form_at_every_beta", f"median clusters at T = {t[-1]:g}: {at_T}", f"<= n / 4 = {n / 4:g}",
               np.all(final <= n / 4))
    checks.add("smallest_beta_one_cluster", f"beta {bs[0]:g}: {final[0]:g} at T", "1", final[0] == 1)
    steps_down = np.diff(final)
    checks.add("clusters_grow_with_beta", f"{at_T}; largest decrease from one beta to the next "
               f"{max(0.0, -float(np.min(steps_down))):g}", "no decrease > 1, and beta_max >= beta_min + 3",
               np.all(steps_down >= -1) and final[-1] >= final[0] + 3)
    with atomic_writer(a.out + ".txt") as f:
        f.write(f"# phase diagram: SA, Q = K = V = I, n = {n}, d = {d}, X(0) uniform on the sphere, RK4 dt = {dt:g}, "
                f"{steps} steps (T = {t[-1]:g}), {trials} trials per beta, seed {a.seed}{' (tiny)' if a.tiny else ''}\n")
        f.write("# median over trials of clusters_999 (clusters_99 in brackets) at t = " + ", ".join(map(str, marks)) + "\n")
        f.write("beta " + " ".join(f"t={m:g}" for m in marks) + " first_t_single_cluster(median)\n")
        for k, b in enumerate(bs):
            one = np.nonzero(med[k] <= 1)[0]
            first = f"{t[one[0]]:.4g}" if len(one) else "never"
            f.write(f"{b:g} " + " ".join(f"{med[k, i]:g}[{med99[k, i]:g}]" for i in idx) + f" {first}\n")
        f.write(f"rcsim_sweep_seconds {sec:.2f}\n")
        f.write(checks.text())
    return checks.finish(a.out + ".txt")


if __name__ == "__main__":
    from particles_common import command
    sys.exit(command.run(main))
