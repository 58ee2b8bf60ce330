#!/usr/bin/env python3
"""The public peer codes' update rules, transcribed in their own conventions, against rcsim.

Each transcription below is written for this test from the update rule of a public research code
as documented in docs/science/peers.md (column or row vectors, step eta, inverse temperature beta,
bilinear form B, value matrix V); it is not the peers' code. The same initial tokens and weights
are given to rcsim through HDF5 files with the translated configuration of docs/science/peers.md, and
the token trajectories (output.tokens = all) are compared layer by layer: largest relative
Frobenius difference ||X_rcsim(t) - X_peer(t)||_F / ||X_peer(t)||_F over layers and trials must be
below 1e-12. The peers' measures (pair density, "dim", cluster count, Dong's residual) are
compared with rcsim's output.measures / rank on the same trajectories. The pre-LN (GPT-2) and
peri-LN blocks are also run with a deliberately wrong translation, which must differ by more than
1e-6, so the check can fail.

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


# --- GPT-2 style pre-LN block, attention only (HF transformers' GPT2Block at initialisation, ----
#     biases zero, eval mode): row vectors, Conv1D weights [in, out] (y = x @ W), the fused c_attn
#     [d, 3d] split into q | k | v, heads of d/H columns, scores / sqrt(d/H), causal mask, merged
#     heads through c_proj [d, d]; x <- x + c_proj(attn(ln_1(x))).
def torch_layer_norm(x, g, b, eps):
    m = x.mean(axis=-1, keepdims=True)
    var = ((x - m) ** 2).mean(axis=-1, keepdims=True)  # biased, as torch.nn.LayerNorm
    return (x - m) / np.sqrt(var + eps) * g + b


def gpt2_pre_ln_block(x, c_attn, c_proj, g, b, heads, eps):
    n, d = x.shape
    dh = d // heads
    q, k, v = np.split(torch_layer_norm(x, g, b, eps) @ c_attn, 3, axis=1)
    split = lambda t: t.reshape(n, heads, dh).transpose(1, 0, 2)  # [H, n, d/H]
    w = split(q) @ split(k).transpose(0, 2, 1) / np.sqrt(dh)
    w = np.where(np.tril(np.ones((n, n), dtype=bool)), w, -np.inf)
    a = np.exp(w - w.max(axis=-1, keepdims=True))
    a /= a.sum(axis=-1, keepdims=True)
    merged = (a @ split(v)).transpose(1, 0, 2).reshape(n, d)
    return x + merged @ c_proj


# --- Peri-LN block, attention only (Kim et al. 2025: x <- x + Norm_out(Attn(Norm_in(x)))), written
#     in torch.nn.Linear / nn.MultiheadAttention conventions: column vectors, weights [out, in]
#     (q_i = W_q x_i from in_proj_weight [3d, d]), head h uses rows h*dh..(h+1)*dh, out_proj.weight
#     [d, d] applied to the concatenated heads, token by token. `norm` is the peer's LayerNorm or
#     Gemma-style RMSNorm x / sqrt(mean(x^2) + eps) * (1 + w); `scale` is the score scale.
def rms_norm_one_plus(x, w, eps):
    return x / np.sqrt(np.mean(x * x) + eps) * (1.0 + w)


def peri_ln_block(xs, in_proj, out_proj, heads, scale, causal, norm_in, norm_out):
    n, d = len(xs), len(xs[0])
    dh = d // heads
    Wq, Wk, Wv = in_proj[:d], in_proj[d:2 * d], in_proj[2 * d:]
    h = [norm_in(x) for x in xs]
    q, k, v = [Wq @ y for y in h], [Wk @ y for y in h], [Wv @ y for y in h]
    out = []
    for i in range(n):
        concat = np.zeros(d)
        for hd in range(heads):
            r = slice(hd * dh, (hd + 1) * dh)
            js = range(i + 1) if causal else range(n)
            logits = np.array([scale * np.dot(q[i][r], k[j][r]) for j in js])
            a = softmax_rows(logits[None, :])[0]
            concat[r] = sum(a[m] * v[j][r] for m, j in enumerate(js))
        out.append(xs[i] + norm_out(out_proj @ concat))
    return np.array(out)


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

    # 4. Pre-LN (GPT-2) and 5. peri-LN blocks, attention only. Per-layer weights [L, H, d, ...] in a
    #    file; W_V,h = (head h's value columns) @ (head h's rows of the output projection), folded,
    #    since rcsim has no separate W_O. The LayerNorm gain and bias are the same in every layer
    #    (and, for peri-LN, in the input and output norms): rcsim has one norm.gain, norm.bias.
    #    Every case is also run with a deliberately wrong translation, which must NOT agree: the
    #    comparison can fail.
    n, d, H, L = 10, 12, 3, 8
    dh = d // H
    g = 1.0 + 0.3 * rng.standard_normal(d)
    b = 0.1 * rng.standard_normal(d)

    def block_case(label, ref, files, args, wrong):
        path = os.path.join(work, "blocks.h5")
        with h5py.File(path, "w") as f:
            for k, v in files.items():
                f[k] = v
        common = [f"--model.tokens={n}", f"--model.dim={d}", f"--model.layers={L}", f"--model.heads={H}",
                  f"--model.key_dim={dh}", "--run.trials=1", "--init.type=file", f"--init.file={path}",
                  "--weights.q=file", "--weights.k=file", "--weights.v=file", f"--weights.file={path}",
                  "--residual.alpha=1"]
        tokens, _ = run_rcsim(rcsim, common + args, os.path.join(work, "blocks_run.h5"))
        diff = rel_traj(tokens[0], ref)
        wrong_desc, wrong_args, wrong_files = wrong
        if wrong_files:
            with h5py.File(path, "a") as f:
                for k, v in wrong_files.items():
                    del f[k]
                    f[k] = v
        wtokens, _ = run_rcsim(rcsim, common + [a for a in args if a.split("=")[0] not in
                                                 {w.split("=")[0] for w in wrong_args}] + wrong_args,
                               os.path.join(work, "blocks_wrong.h5"))
        wdiff = rel_traj(wtokens[0], ref)
        lines.append(f"{label}: trajectory {diff:.2e}; wrong translation ({wrong_desc}) {wdiff:.2e}")
        return diff, wdiff

    for std in (0.02, 1 / np.sqrt(d)):
        # GPT-2 initialisation: c_attn N(0, 0.02^2), c_proj N(0, (0.02 / sqrt(2 L))^2); also a larger
        # std so that the attention branch moves the tokens by O(1) per layer.
        x0 = rng.standard_normal((n, d))
        c_attn = std * rng.standard_normal((L, d, 3 * d))
        c_proj = std / np.sqrt(2 * L) * rng.standard_normal((L, d, d))
        ref = [x0]
        for layer in range(L):
            ref.append(gpt2_pre_ln_block(ref[-1], c_attn[layer], c_proj[layer], g, b, H, 1e-5))
        cols = lambda part, h: slice(part * d + h * dh, part * d + (h + 1) * dh)
        wq = np.array([[c_attn[layer][:, cols(0, h)] for h in range(H)] for layer in range(L)])
        wk = np.array([[c_attn[layer][:, cols(1, h)] for h in range(H)] for layer in range(L)])
        wv = np.array([[c_attn[layer][:, cols(2, h)] @ c_proj[layer][h * dh:(h + 1) * dh] for h in range(H)]
                       for layer in range(L)])
        args = ["--mask.type=causal", "--norm.type=layernorm", "--norm.position=pre", "--norm.eps=1e-05",
                "--norm.gain=" + ",".join(repr(v) for v in g), "--norm.bias=" + ",".join(repr(v) for v in b)]
        diff, wdiff = block_case(f"GPT-2 pre-LN, H={H}, weight std {std:.3g}", ref,
                                 {"X0": x0, "W_Q": wq, "W_K": wk, "W_V": wv}, args,
                                 ("norm.position = post", ["--norm.position=post"], None))
        worst = max(worst, diff)
        failures += (diff > TOL) + (wdiff < 1e-6)

    # 5. Peri-LN, column vectors (nn.Linear weights [out, in]): torch LayerNorm, complete mask, scale
    #    1/sqrt(d/H); and Gemma-2-style RMSNorm with (1 + w) gains, causal, scale query_pre_attn_scalar^-1/2
    #    (no RoPE, no logit soft-capping: rcsim has neither).
    for kind in ("layernorm", "rmsnorm"):
        x0 = rng.standard_normal((n, d))
        in_proj = rng.standard_normal((L, 3 * d, d)) / np.sqrt(d)
        out_proj = rng.standard_normal((L, d, d)) / np.sqrt(d)
        if kind == "layernorm":
            norm = lambda x: torch_layer_norm(x, g, b, 1e-5)
            scale, causal, qscalar = 1 / np.sqrt(dh), False, dh
            args = ["--mask.type=complete", "--norm.type=layernorm", "--norm.eps=1e-05",
                    "--norm.gain=" + ",".join(repr(v) for v in g), "--norm.bias=" + ",".join(repr(v) for v in b)]
        else:
            w_rms = 0.3 * rng.standard_normal(d)  # Gemma stores w and multiplies by (1 + w)
            norm = lambda x: rms_norm_one_plus(x, w_rms, 1e-6)
            qscalar = 7.0
            scale, causal = qscalar ** -0.5, True
            args = ["--mask.type=causal", "--norm.type=rmsnorm", "--norm.eps=1e-06",
                    "--norm.gain=" + ",".join(repr(1.0 + v) for v in w_rms), f"--model.d_qk={qscalar!r}"]
        args.append("--norm.position=peri")
        ref = [x0]
        for layer in range(L):
            ref.append(peri_ln_block(ref[-1], in_proj[layer], out_proj[layer], H, scale, causal, norm, norm))
        rows = lambda part, h: slice(part * d + h * dh, part * d + (h + 1) * dh)
        wq = np.array([[in_proj[layer][rows(0, h)].T for h in range(H)] for layer in range(L)])
        wk = np.array([[in_proj[layer][rows(1, h)].T for h in range(H)] for layer in range(L)])
        wv = np.array([[(out_proj[layer][:, h * dh:(h + 1) * dh] @ in_proj[layer][rows(2, h)]).T for h in range(H)]
                       for layer in range(L)])
        wv_untransposed = np.array([[wv[layer, h].T for h in range(H)] for layer in range(L)])
        diff, wdiff = block_case(f"peri-LN ({kind}, {'causal' if causal else 'complete'}), H={H}", ref,
                                 {"X0": x0, "W_Q": wq, "W_K": wk, "W_V": wv}, args,
                                 ("W_V not transposed", [], {"W_V": wv_untransposed}))
        worst = max(worst, diff)
        failures += (diff > TOL) + (wdiff < 1e-6)

    print("\n".join(lines))
    print(f"largest relative difference {worst:.2e} (tolerance {TOL:g})")
    print(f"{0 if failures else 1} passed, {1 if failures else 0} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
