#!/usr/bin/env python3
"""Hardmax attention and its Voronoi partition (Alcalde, Geshkovski, Ruiz-Balet, "Attention's forward pass and
Frank-Wolfe", arXiv 2508.09628; docs/science/particles.md section 10): tokens in R^2 (no normalisation),
hardmax attention with the positive semidefinite key-query matrix Q^T K = I, value V = I, and the Frank-Wolfe
step x_i <- (1 - alpha) x_i + alpha v_i, v_i the (tie-averaged) maximiser of <x_i, x_j> over the tokens
(rcsim: attention.kind = hardmax, residual.skip = 1 - alpha, residual.alpha = alpha, norm.type = none).

Leaders are the tokens that maximise their own score (<x_L, x_L> > <x_L, x_j> for j != L): their attention row is
e_L, so they do not move. The cells C_L = {x : <x, x_L> >= <x, x_M> for every leader M} are convex cones that
contain their leader, so a token in C_L that moves straight toward x_L stays in C_L. The script checks, on the
rcsim trajectory: the leaders stay put, every token ends at the leader of its initial cell, the distance to it
decays like (1 - alpha)^step, and how straight the paths are.

usage: particles_hardmax.py [--tiny] [--rcsim PATH] --data DIR --out PREFIX [--seed S] [--perturb KEY=VALUE ...]

Checks (exit 1 when one fails), the abstract's claims:
- stationary vertices: no leader moves by more than 1e-12;
- exponential convergence: the distance to the final leader shrinks by 1 - alpha per step (fit over the
  second half, median over trials, within 1e-6);
- points stay in their initial cells: at least 90% of the tokens end at the leader of their initial cell
  (rcsim's maximiser is over the tokens, not over the hull: docs/science/particles.md section 10; the 90%
  is this script's threshold).

Settings: the paper's (abstract): hardmax attention, a positive semidefinite key-query matrix, the
Frank-Wolfe step. rcsim's own choices: Q^T K = I, V = I, X(0) Gaussian in R^2, n = 60 (tiny 24),
alpha = 0.1 (tiny 0.2), 200 steps (tiny 60), 32 trials (tiny 4), seed 2, the maximiser over the tokens.
"""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import h5py  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from particles_common import Checks, run_rcsim, script_args  # noqa: E402
from rcsim.figures import atomic_writer, save_figure  # noqa: E402


def settings(tiny):
    """(n, alpha, steps, trials)."""
    return (24, 0.2, 60, 4) if tiny else (60, 0.1, 200, 32)


def leaders_of(X):
    """Indices L with <x_L, x_L> > <x_L, x_j> for every j != L (a strict, unique self-maximiser)."""
    G = X @ X.T
    out = []
    for i in range(len(X)):
        others = np.delete(G[i], i)
        if G[i, i] > others.max() * (1 + 1e-12) + 1e-15:
            out.append(i)
    return np.array(out, dtype=int)


def chain_leader(X):
    """For each token, follow j -> argmax_k <x_j, x_k> from it until a token that maximises its own score."""
    nxt = np.argmax(X @ X.T, axis=1)
    out = np.empty(len(X), dtype=int)
    for i in range(len(X)):
        j, seen = i, set()
        while nxt[j] != j and j not in seen:
            seen.add(j)
            j = nxt[j]
        out[i] = j
    return out


def cells(P, XL):
    """Cell index of each point of P: argmax over leaders of <p, x_L>."""
    return np.argmax(P @ XL.T, axis=1)


def main():
    a = script_args(__doc__, seed=2)
    n, alpha, steps, trials = settings(a.tiny)
    os.makedirs(a.data, exist_ok=True)
    run = os.path.join(a.data, "particles_hardmax.h5")
    sec = run_rcsim(a.rcsim, run, [
        f"--model.tokens={n}", "--model.dim=2", f"--model.layers={steps}", f"--run.trials={trials}",
        f"--run.seed={a.seed}", "--weights.q=identity", "--weights.k=identity", "--weights.v=identity",
        "--weights.shared=true", "--attention.kind=hardmax", "--norm.type=none", f"--residual.alpha={alpha!r}",
        f"--residual.skip={1 - alpha!r}", "--init.type=gaussian", "--output.tokens=all"])
    with h5py.File(run, "r") as f:
        tokens = f["tokens"][()]  # [trial, layer, token, 2]
        layers = f["tokens_layer"][()]
    rows = []
    for r in range(trials):
        X = tokens[r]
        L = leaders_of(X[0])
        cell0 = L[cells(X[0], X[0][L])]  # the leader of each token's initial cell
        moved = float(np.max(np.linalg.norm(X[:, L] - X[0][L][None], axis=-1)))
        final_leader = L[np.argmin(np.linalg.norm(X[-1][:, None, :] - X[0][L][None], axis=-1), axis=1)]
        # straightness: distance of x_i(t) from the line through x_i(0) and its leader, over the path length
        e = X[0][cell0] - X[0]
        norm_e = np.linalg.norm(e, axis=1)
        u = np.divide(e, norm_e[:, None], out=np.zeros_like(e), where=norm_e[:, None] > 0)
        rel = X - X[0][None]
        off = np.abs(rel[..., 0] * u[None, :, 1] - rel[..., 1] * u[None, :, 0])
        off_rel = np.max(off, axis=0) / np.maximum(norm_e, 1e-300)
        straight = float(np.mean(off_rel[norm_e > 0] < 1e-9)) if np.any(norm_e > 0) else 1.0
        same_cell_path = all(np.all(cells(X[k], X[0][L]) == cells(X[0], X[0][L])) for k in range(len(X)))
        chain = chain_leader(X[0])
        dmax = np.linalg.norm(X - X[0][chain][None], axis=-1).max(axis=1)  # to the argmax-chain leader
        rows.append(dict(n_leaders=len(L), moved=moved, correct=float(np.mean(final_leader == cell0)),
                         chain=float(np.mean(final_leader == chain)),
                         final_dist=float(dmax[-1]), straight=straight, same_cell=same_cell_path, dmax=dmax,
                         max_off=float(np.max(off_rel))))
    # observed contraction per step over the second half (where the targets no longer change), median over trials
    d0 = rows[0]["dmax"]
    half = len(d0) // 2
    rates = [float(np.exp(np.polyfit(layers[half:], np.log(np.maximum(r["dmax"][half:], 1e-300)), 1)[0])) for r in rows]
    rate0 = float(np.median(rates))

    X = tokens[0]
    L = leaders_of(X[0])
    fig, ax = plt.subplots(1, 2, figsize=(12, 5.4))
    lim = 1.15 * np.max(np.abs(X[0]))
    g = np.linspace(-lim, lim, 400)
    GX, GY = np.meshgrid(g, g)
    cid = cells(np.stack([GX.ravel(), GY.ravel()], 1), X[0][L]).reshape(GX.shape)
    ax[0].imshow(cid, extent=(-lim, lim, -lim, lim), origin="lower", cmap="tab20", alpha=0.35, interpolation="nearest")
    for i in range(n):
        ax[0].plot(X[:, i, 0], X[:, i, 1], "-", color="0.3", lw=0.7)
    ax[0].plot(X[0, :, 0], X[0, :, 1], "o", mfc="white", mec="k", ms=4, label="x_i(0)")
    ax[0].plot(X[-1, :, 0], X[-1, :, 1], "k.", ms=4, label=f"x_i(step {steps})")
    ax[0].plot(X[0, L, 0], X[0, L, 1], "r*", ms=12, label="leaders")
    ax[0].set_xlim(-lim, lim)
    ax[0].set_ylim(-lim, lim)
    ax[0].set_aspect("equal")
    ax[0].legend(fontsize=8, loc="lower right")
    ax[0].set_title(f"trial 0: cells C_L = argmax_L <x, x_L> (colours), paths (grey)\n{len(L)} leaders, "
                    f"{rows[0]['correct'] * 100:.0f}% of tokens end at their initial cell's leader", fontsize=9)
    for r in rows:
        ax[1].semilogy(layers, np.maximum(r["dmax"], 1e-17), lw=0.8, alpha=0.7)
    ax[1].semilogy(layers, d0[0] * (1 - alpha) ** layers, "k--", lw=1.5, label=f"(1 - alpha)^step, alpha = {alpha:g}")
    ax[1].set_xlabel("step (Frank-Wolfe iteration)")
    ax[1].set_ylabel("max_i |x_i - x_L(i)|, L(i) its argmax-chain leader")
    ax[1].set_title(f"all {trials} trials: distance to the argmax-chain leader (L(i): follow i -> argmax_j <x_i, x_j>)",
                    fontsize=9)
    ax[1].legend(fontsize=8)
    fig.suptitle(f"hardmax attention, Q^T K = I (PSD), V = I, n = {n}, d = 2, x <- (1 - alpha) x + alpha A x"
                 + (" (tiny)" if a.tiny else ""))
    fig.tight_layout()
    save_figure(fig, a.out, dpi=110)

    with atomic_writer(a.out + ".txt") as f:
        f.write(f"# hardmax Voronoi partition: n = {n}, d = 2, X(0) Gaussian, Q = K = V = I, alpha = {alpha:g}, "
                f"{steps} steps, {trials} trials, seed {a.seed}{' (tiny)' if a.tiny else ''}\n")
        f.write("trial leaders leader_max_move frac_tokens_at_initial_cell_leader final_max_dist "
                "frac_paths_straight(1e-9) max_rel_offline never_left_initial_cell frac_at_argmax_chain_leader\n")
        for k, r in enumerate(rows):
            f.write(f"{k} {r['n_leaders']} {r['moved']:.2e} {r['correct']:.4f} {r['final_dist']:.2e} "
                    f"{r['straight']:.4f} {r['max_off']:.2e} {int(r['same_cell'])} {r['chain']:.4f}\n")
        f.write(f"all_trials_frac_at_initial_cell_leader {np.mean([r['correct'] for r in rows]):.4f}\n")
        f.write(f"all_trials_frac_at_argmax_chain_leader {np.mean([r['chain'] for r in rows]):.4f}\n")
        f.write(f"all_trials_leader_max_move {max(r['moved'] for r in rows):.2e}\n")
        f.write(f"contraction_per_step_second_half_median_over_trials {rate0:.6f} (range {min(rates):.6f} .. {max(rates):.6f}) (1 - alpha = {1 - alpha:g})\n")
        f.write(f"rcsim_seconds {sec:.3f}\n")
        # Leaders attend only to themselves (their row of A is e_L), so the step leaves them exactly in place; the
        # distances to the final leaders contract by exactly 1 - alpha once every token's target is a leader.
        checks = Checks()
        moved = max(r["moved"] for r in rows)
        checks.add("leaders_stationary", f"largest move of a leader {moved:.2e}", "< 1e-12", moved < 1e-12)
        checks.add("exponential_convergence", f"contraction per step {rate0:.8f} (median over trials)",
                   f"1 - alpha = {1 - alpha:g} within 1e-6", abs(rate0 - (1 - alpha)) < 1e-6)
        frac = float(np.mean([r["correct"] for r in rows]))
        checks.add("tokens_end_at_initial_cell_leader", f"{frac:.4f} of the tokens", ">= 0.9", frac >= 0.9)
        f.write(checks.text())
    return checks.finish(a.out + ".txt")


if __name__ == "__main__":
    from particles_common import command
    sys.exit(command.run(main))
