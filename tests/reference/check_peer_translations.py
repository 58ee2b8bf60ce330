#!/usr/bin/env python3
"""The public peer codes' update rules, transcribed in their own conventions, against rcsim.

Each transcription below is written for this test from the update rule of a public research code
as documented in docs/peers.md (column or row vectors, step eta, inverse temperature beta,
bilinear form B, value matrix V); it is not the peers' code. The same initial tokens and weights
are given to rcsim through HDF5 files with the translated configuration of docs/peers.md, and
the token trajectories (output.tokens = all) are compared layer by layer: largest relative
Frobenius difference ||X_rcsim(t) - X_peer(t)||_F / ||X_peer(t)||_F over layers and trials must be
below 1e-12. The peers' measures (pair density, "dim", cluster count, Dong's residual) are
compared with rcsim's output.measures / rank on the same trajectories.

usage: check_peer_translations.py PATH/TO/rcsim WORKDIR
"""
import os
import subprocess
import sys

import h5py
import numpy as np

TOL = 1e-12


def softmax_rows(s):
    a = np.exp(s - s.max(axis=1, keepdims=True))
    return a / a.sum(axis=1, keepdims=True)


# --- Geshkovski et al., phase-diagram engine: row vectors M [n, d], one system ---------------
def geshkovski_step(M, B, V, beta, eta, softmax):
    S = beta * (M @ B) @ M.T
    A = softmax_rows(S) if softmax else np.exp(S) / M.shape[0]
    M2 = (eta * (A @ M)) @ V + M
    return M2 / np.linalg.norm(M2, axis=1, keepdims=True)


# --- Geshkovski et al., unnormalised Euler dynamics (leaders.py style): column vectors x_i ---
def euler_step(x, Amat, V, dt):
    n = len(x)
    out = np.empty_like(x)
    for i in range(n):
        logits = np.array([np.dot(Amat @ x[i], x[j]) for j in range(n)])
        a = softmax_rows(logits[None, :])[0]
        out[i] = x[i] + dt * sum(a[j] * (V @ x[j]) for j in range(n))
    return out


# --- Karagodin et al., causal attention on the sphere (post-LN): column vectors ---------------
def karagodin_step(x, WQ, WK, WV, beta, dt):
    n = len(x)
    out = np.empty_like(x)
    for k in range(n):
        logits = np.array([beta * np.dot(WQ @ x[k], WK @ x[j]) for j in range(k + 1)])
        a = softmax_rows(logits[None, :])[0]
        v = sum(a[j] * (WV @ x[j]) for j in range(k + 1))
        v = v - np.dot(v, x[k]) * x[k]  # P_x(v) = v - <v, x> x
        y = x[k] + dt * v
        out[k] = y / np.linalg.norm(y)
    return out


def run_rcsim(rcsim, args, out):
    subprocess.run([rcsim, "run", "--config", "/dev/null", "--quiet", "--force", f"--output.file={out}",
                    "--output.tokens=all"] + args, check=True)
    with h5py.File(out, "r") as f:
        return f["tokens"][()], {k: f["metrics"][k][()] for k in f["metrics"]}


def rel_traj(got, ref):
    return max(np.linalg.norm(got[t] - ref[t]) / np.linalg.norm(ref[t]) for t in range(len(ref)))


def main():
    rcsim, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(5)
    worst, failures, lines = 0.0, 0, []
    n, d, L = 16, 3, 60

    # 1. Phase-diagram engine: B = G1 G2 / sqrt(d) (randomKQ = 1), V = +-B / sqrt(d) (randomV = 2, 3),
    #    or V = G G^T / sqrt(d) (randomV = 1); softmax and USA; same B and V at every step.
    for softmax, vkind, beta, eta in ((True, "+", 4.0, 0.1), (False, "-", 1.0, 0.05), (True, "wishart", 9.0, 0.2),
                                      (False, "+", 0.5, 0.1)):
        M0 = rng.standard_normal((n, d))
        M0 /= np.linalg.norm(M0, axis=1, keepdims=True)
        B = rng.standard_normal((d, d)) @ rng.standard_normal((d, d)) / np.sqrt(d)
        if vkind == "wishart":
            G = rng.standard_normal((d, d))
            V = G @ G.T / np.sqrt(d)
        else:
            V = (1 if vkind == "+" else -1) * B / np.sqrt(d)
        ref = [M0]
        for _ in range(L):
            ref.append(geshkovski_step(ref[-1], B, V, beta, eta, softmax))
        path = os.path.join(work, "geshkovski.h5")
        with h5py.File(path, "w") as f:
            f["X0"], f["W_Q"] = M0, B
            if vkind == "wishart":
                f["W_V"] = V
        args = [f"--model.tokens={n}", f"--model.dim={d}", f"--model.layers={L}", "--run.trials=1",
                f"--model.beta={beta!r}", f"--attention.kind={'softmax' if softmax else 'usa'}", "--norm.type=sphere",
                "--init.type=file", f"--init.file={path}", "--weights.q=file", "--weights.k=identity",
                f"--weights.file={path}",
                "--output.measures=pair_density,clusters", "--metrics.pair_threshold=0.999",
                "--metrics.cluster_tau=0.9999", "--metrics.rank_rtol=0", f"--metrics.rank_atol={np.sqrt(1e-3)!r}"]
        if vkind == "wishart":
            args += ["--weights.v=file", f"--residual.alpha={eta!r}"]
        else:
            # V = s B / sqrt(d): W_V = s W_Q W_K^T with the 1/sqrt(d) folded into the step.
            args += ["--weights.v=tied_qk", f"--weights.v_sign={1 if vkind == '+' else -1}",
                     f"--residual.alpha={eta / np.sqrt(d)!r}"]
        tokens, metrics = run_rcsim(rcsim, args, os.path.join(work, "geshkovski_run.h5"))
        diff = rel_traj(tokens[0], ref)
        # The peer's measures on its own trajectory.
        off = ~np.eye(n, dtype=bool)
        dens = np.array([np.mean((m @ m.T)[off] > 0.999) for m in ref])
        dim = np.array([np.sum(np.linalg.eigvalsh(m @ m.T) > 1e-3) for m in ref])
        clus = np.array([np.linalg.matrix_rank(((m @ m.T) > 0.9999).astype(float)) for m in ref])
        dens_ok = np.array_equal(dens, metrics["pair_density"][0])
        dim_ok = np.array_equal(dim, metrics["rank"][0])
        clus_same = int(np.sum(clus == metrics["clusters"][0]))
        lines.append(f"geshkovski softmax={softmax} V={vkind} beta={beta} eta={eta}: trajectory {diff:.2e}; "
                     f"pair density equal: {dens_ok}; dim = rank(atol sqrt(1e-3)): {dim_ok}; "
                     f"cluster count (rank of the 0/1 matrix vs components) equal at {clus_same}/{L + 1} layers")
        worst = max(worst, diff)
        failures += (diff > TOL) + (not dens_ok) + (not dim_ok)

    # 2. Unnormalised Euler dynamics, column vectors: x_i += dt sum_j softmax_j(<A x_i, x_j>) V x_j,
    #    uniform-cube start. rcsim (rows): W_Q = A^T, W_K = I, W_V = V^T, residual.alpha = dt.
    for dt in (0.1, 0.05):
        x0 = rng.uniform(-1, 1, size=(8, 2))
        Amat = rng.uniform(-1, 1, size=(2, 2))
        Vr = rng.uniform(-1, 1, size=(2, 2))
        V = Vr @ Vr.T
        ref = [x0]
        for _ in range(30):
            ref.append(euler_step(ref[-1], Amat, V, dt))
        path = os.path.join(work, "euler.h5")
        with h5py.File(path, "w") as f:
            f["X0"], f["W_Q"], f["W_V"] = x0, Amat.T, V.T
        args = ["--model.tokens=8", "--model.dim=2", "--model.layers=30", "--run.trials=1", "--model.beta=1",
                "--norm.type=none", f"--residual.alpha={dt!r}", "--init.type=file", f"--init.file={path}",
                "--weights.q=file", "--weights.k=identity", "--weights.v=file", f"--weights.file={path}",
                "--output.measures=dong_residual,dong_residual_rel"]
        tokens, metrics = run_rcsim(rcsim, args, os.path.join(work, "euler_run.h5"))
        diff = rel_traj(tokens[0], ref)
        # Dong et al.'s l1 * l_inf norm as in their plotting utilities (column sums, then row sums).
        def composite(m):
            return np.sqrt(np.abs(m).sum(axis=0).max() * np.abs(m).sum(axis=1).max())
        dong = np.array([composite(x - x.mean(axis=0, keepdims=True)) for x in ref])
        ratio = dong / np.array([composite(x) for x in ref])  # the ratio of their figures
        dong_diff = max(np.max(np.abs(metrics["dong_residual"][0] - dong) / dong),
                        np.max(np.abs(metrics["dong_residual_rel"][0] - ratio) / ratio))
        lines.append(f"euler dt={dt}: trajectory {diff:.2e}; Dong residual and ratio {dong_diff:.2e}")
        worst = max(worst, diff, dong_diff)
        failures += (diff > TOL) + (dong_diff > TOL)

    # 3. Causal attention on the sphere, column vectors, tangent projection then renormalisation.
    #    rcsim (rows): W_Q^T, W_K^T, W_V^T, mask causal, residual.project = tangent, norm sphere.
    for beta, dt in ((1.0, 0.1), (4.0, 0.05)):
        x0 = rng.standard_normal((10, 3))
        x0 /= np.linalg.norm(x0, axis=1, keepdims=True)
        WQ, WK, WV = (rng.standard_normal((3, 3)) for _ in range(3))
        ref = [x0]
        for _ in range(40):
            ref.append(karagodin_step(ref[-1], WQ, WK, WV, beta, dt))
        path = os.path.join(work, "karagodin.h5")
        with h5py.File(path, "w") as f:
            f["X0"], f["W_Q"], f["W_K"], f["W_V"] = x0, WQ.T, WK.T, WV.T
        args = ["--model.tokens=10", "--model.dim=3", "--model.layers=40", "--run.trials=1", f"--model.beta={beta!r}",
                "--mask.type=causal", "--norm.type=sphere", f"--residual.alpha={dt!r}", "--residual.project=tangent",
                "--init.type=file", f"--init.file={path}", "--weights.q=file", "--weights.k=file",
                "--weights.v=file", f"--weights.file={path}"]
        tokens, _ = run_rcsim(rcsim, args, os.path.join(work, "karagodin_run.h5"))
        diff = rel_traj(tokens[0], ref)
        lines.append(f"karagodin beta={beta} dt={dt}: trajectory {diff:.2e}")
        worst = max(worst, diff)
        failures += diff > TOL

    print("\n".join(lines))
    print(f"largest relative difference {worst:.2e} (tolerance {TOL:g})")
    print(f"{0 if failures else 1} passed, {1 if failures else 0} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
