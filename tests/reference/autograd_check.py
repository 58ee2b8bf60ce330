#!/usr/bin/python3
"""rcsim's hand-written reverse mode (sim/kernel/block/backward.cpp) against PyTorch autograd.

For each configuration, tests/backward_dump draws a small stack of blocks and writes its inputs
(mask, X(0), cotangent C, every weight, gain and bias) and rcsim's gradients of
L = sum(C * X(L)). This script builds the same stack in torch float64 from those arrays, written
from the definitions (docs/science/gradients.md, kernel/block/block.hpp) and not from rcsim's code, and
compares every gradient: ||g_rcsim - g_torch||_F <= 1e-10 ||g_torch||_F + 1e-14 G, G the largest
gradient norm of the configuration (gradients that vanish by cancellation, as W_Q's and W_K's in
the last blocks of a stack whose tokens have collapsed, carry rounding errors of the size of the
others; the gains a placement does not use have gradient 0 both ways). The relative figure
printed per family is over the arrays whose norm exceeds 1e-6 G.

Usage: autograd_check.py BACKWARD_DUMP WORKDIR. Exit 77 (skipped) without torch.
"""
import itertools
import math
import os
import subprocess
import sys

try:
    import torch
except ImportError:
    print("autograd_check: torch is not installed (Debian: python3-torch); skipped")
    sys.exit(77)

TOL = 1e-10


def read_arrays(path):
    arrays = {}
    with open(path) as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines) and lines[i]:
        name, r, c = lines[i].split()
        r, c = int(r), int(c)
        rows = [[float(v) for v in lines[i + 1 + k].split()] for k in range(r)]
        arrays[name] = torch.tensor(rows, dtype=torch.float64).reshape(r, c)
        i += 1 + r
    return arrays


def normalise(y, kind, gain, bias, eps=1e-5):
    """docs/science/model-spec.md section 1, step 6, row by row."""
    d = y.shape[1]
    if kind == "none":
        return y
    if kind == "sphere":
        return y / y.norm(dim=1, keepdim=True)
    if kind == "projection":
        return y - y.mean(dim=1, keepdim=True)
    if kind == "layernorm":
        c = y - y.mean(dim=1, keepdim=True)
        return gain * c / torch.sqrt((c * c).sum(dim=1, keepdim=True) / d + eps) + bias
    if kind == "rmsnorm":
        return gain * y / torch.sqrt((y * y).sum(dim=1, keepdim=True) / d + eps)
    raise ValueError(kind)


def activation(z, act):
    if act == "relu":
        return torch.relu(z)
    if act == "gelu":
        return torch.nn.functional.gelu(z)
    if act == "tanh":
        return torch.tanh(z)
    if act == "swiglu":  # silu, times the gate X W_gate (mlp below)
        return torch.nn.functional.silu(z)
    return torch.nn.functional.gelu(z, approximate="tanh")


def shape(a, mask, cfg):
    """Shaped attention (Noci et al. 2023): a A + b I - c C, C the uniform attention over the mask."""
    sa, sb, sc = cfg.get("shape_a", 1.0), cfg.get("shape_b", 0.0), cfg.get("shape_c", 0.0)
    if (sa, sb, sc) == (1.0, 0.0, 0.0):
        return a
    uniform = mask / mask.sum(dim=1, keepdim=True)
    return sa * a + sb * torch.eye(a.shape[0], dtype=a.dtype) - sc * uniform


def logit_bias(n, h, cfg):
    """Additive logit bias B (docs/science/model-spec.md section 6): ALiBi -m_h |i - j| with m_h = 2^(-8h/H), h = 1..H;
    decay |i - j| log gamma (weights proportional to gamma^|i-j|); 0 without."""
    kind = cfg.get("logit_bias", "none")
    if kind == "none":
        return 0.0
    i = torch.arange(n, dtype=torch.float64)
    dist = (i[:, None] - i[None, :]).abs()
    if kind == "alibi":
        return -(2.0 ** (-8.0 * (h + 1) / cfg["H"])) * dist
    return dist * math.log(cfg["decay"])


def softpick(s, mask, eps=1e-8):
    """Softpick (Zuhri, Fuadi, Aji 2025, arXiv 2504.20966), row by row over the allowed entries, in the
    paper's shifted form: m the row maximum, ReLU(e^(s - m) - e^-m) / (sum |e^(s - m) - e^-m| + eps)."""
    s = s.masked_fill(mask == 0, float("-inf"))
    m = s.max(dim=1, keepdim=True).values
    u = torch.exp(s - m) - torch.exp(-m)
    return torch.relu(u) / (torch.where(mask != 0, u.abs(), torch.zeros_like(u)).sum(dim=1, keepdim=True) + eps)


def attention(x, w, t, cfg, mask, arrays=None):
    """Y = sum_h A_h X W_V,h (W_O,h), A_h = masked softmax(X W_Q,h (X W_K,h)^T / sqrt(d_QK)) or USA;
    with attention biases (attention.bias) Q = X W_Q,h + b_Q,h, K, V likewise, and Y + b_O after the
    sum (and the division by H)."""
    y = torch.zeros_like(x)
    n = x.shape[0]

    def b(name):  # a bias [1, n], broadcast over the rows; 0 without attention biases
        return w.get(f"l{t}.{name}", 0.0)
    group = cfg["H"] // cfg.get("kv", cfg["H"])  # model.kv_heads: query head h reads key/value head h // group
    for h in range(cfg["H"]):
        g = h // group
        q, k = x @ w[f"l{t}.q{h}"] + b(f"bq{h}"), x @ w[f"l{t}.k{g}"] + b(f"bk{g}")
        if cfg.get("qk_norm", False):  # nGPT: rows to s q/|q|, s k/|k|, logits sqrt(d_k) q k^T
            sqk = cfg.get("qk_scale", 1.0)
            q = sqk * q / q.norm(dim=1, keepdim=True)
            k = sqk * k / k.norm(dim=1, keepdim=True)
            s = q @ k.T * math.sqrt(q.shape[1])
        else:
            s = q @ k.T / math.sqrt(cfg["dqk"])
        if cfg.get("markov", False):  # random-Markov attention: the drawn logits G_h, independent of X
            s = arrays[f"markov.{t}.{h}"]
        s = s + logit_bias(n, h, cfg)
        if cfg["usa"]:
            a = torch.exp(s) / n * mask
        elif cfg.get("softpick", False):
            a = softpick(s, mask)
        else:
            a = torch.softmax(s.masked_fill(mask == 0, float("-inf")), dim=1)
        a = shape(a, mask, cfg)
        v = x @ w[f"l{t}.v{g}"] + b(f"bv{g}")
        if f"l{t}.o{h}" in w:
            v = v @ w[f"l{t}.o{h}"]
        y = y + a @ v
    if cfg["head_mean"] and cfg["H"] > 1:
        y = y / cfg["H"]
    return y + b("bo")


def mlp(x, w, t, cfg):
    z = x @ w[f"l{t}.w_in"]
    if f"l{t}.b_in" in w:
        z = z + w[f"l{t}.b_in"]
    h = activation(z, cfg["act"])
    if cfg["act"] == "swiglu":  # Llama's gated MLP (Shazeer 2020): silu(X W_in + b_in) * (X W_gate)
        h = h * (x @ w[f"l{t}.w_gate"])
    out = h @ w[f"l{t}.w_out"]
    if f"l{t}.b_out" in w:
        out = out + w[f"l{t}.b_out"]
    return out


def sublayer(x, branch, cfg, w, t, main, out):
    """kernel/block/block.hpp: post N(X + a F(X)); pre X + a F(N(X)); peri X + a N_out(F(N(X)));
    ngpt N(X + a (N_out(F(X)) - X)); a = 0 drops the residual. A skip gain s (post, pre, peri)
    replaces X by s X in the residual."""
    a, pos, kind = cfg["alpha"], cfg["pos"], cfg["norm"]
    s = cfg.get("skip", 1.0)
    n = lambda y: normalise(y, kind, w[f"l{t}.gain{main}"], w[f"l{t}.bias{main}"])
    n_out = lambda y: normalise(y, kind, w[f"l{t}.gain{out}"], w[f"l{t}.bias{out}"])
    if pos == "post":
        if cfg.get("tangent", False):  # residual.project = tangent: X + a P_X(A(X))
            return n(s * x + a * tangent(x, branch(x)))
        return n(s * x + a * branch(x) if a != 0 else branch(x))
    if pos == "pre":  # LayerNorm scaling (ln_scale): the normalisation of layer t + 1 times 1/sqrt(t + 1)
        y = branch(n(x) / math.sqrt(t + 1) if cfg.get("ln_scale", False) else n(x))
        return s * x + a * y if a != 0 else y
    if pos == "peri":
        y = n_out(branch(n(x)))
        return s * x + a * y if a != 0 else y
    return n(x + a * (n_out(branch(x)) - x))


def tangent(x, v):
    """P_x(v) row by row: v - (<v, x> / |x|^2) x (peer dynamics, kernel/ops/tangent_projection.hpp)."""
    return v - ((v * x).sum(dim=1, keepdim=True) / (x * x).sum(dim=1, keepdim=True)) * x


def rk4_block(x, branch, cfg, w, t):
    """dynamics.integrator = rk4: one classical RK4 step of size dt = alpha of the field F(Z) = A(Z)
    (P_Z(A(Z)) with the tangent projection), then the normalisation (slot 0)."""
    dt = cfg["alpha"]
    f = (lambda z: tangent(z, branch(z))) if cfg.get("tangent", False) else branch
    k1 = f(x)
    k2 = f(x + dt / 2 * k1)
    k3 = f(x + dt / 2 * k2)
    k4 = f(x + dt * k3)
    return normalise(x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4), cfg["norm"], w[f"l{t}.gain0"], w[f"l{t}.bias0"])


def torch_gradients(arrays, cfg):
    w = {k: v.clone().requires_grad_(True) for k, v in arrays.items() if k.startswith("l")}
    x0 = arrays["X0"].clone().requires_grad_(True)
    mask = arrays["mask"]
    x = x0
    for t in range(cfg["L"]):
        c = cfg
        if t <= cfg.get("mix_to", -1):  # model.layer_overrides: the first blocks' own settings
            c = dict(cfg, pos=cfg["mix_pos"], alpha=cfg["mix_alpha"], dqk=cfg["mix_dqk"], act=cfg["mix_act"])
        branch = lambda z: attention(z, w, t, c, mask, arrays)
        if cfg.get("rk4", False):
            x = rk4_block(x, branch, c, w, t)
        else:
            x = sublayer(x, branch, c, w, t, 0, 1)
        if cfg["m"] > 0:
            x = sublayer(x, lambda z: mlp(z, w, t, c), c, w, t, 2, 3)
        if cfg.get("noise", 0) > 0:  # dynamics.noise: P(X + sigma sqrt(dt) G_t), the same draws
            x = normalise(x + arrays[f"noise.{t}"], cfg.get("noise_norm", "sphere"), None, None)
    loss = (arrays["C"] * x).sum()
    loss.backward()
    grads = {"grad." + k: (v.grad if v.grad is not None else torch.zeros_like(v)) for k, v in w.items()}
    grads["grad.X0"] = x0.grad
    return x.detach(), grads


def compare(dump, workdir, tag, cfg, perturb=None):
    out = os.path.join(workdir, tag + ".txt")
    args = [f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in cfg.items()]
    subprocess.run([dump, out] + args, check=True)
    arrays = read_arrays(out)
    if perturb:  # the self-check: a gradient off by 1e-8 relative in one entry must be caught
        g = arrays[perturb]
        g[0, 0] += 1e-8 * float(g.norm())
    xl, grads = torch_gradients(arrays, cfg)
    worst, fails = 0.0, []
    fwd = float((arrays["XL"] - xl).norm() / xl.norm())
    if fwd > 1e-12:
        fails.append(f"forward X(L) rel {fwd:.2e}")
    # Gradients that vanish by cancellation (tokens collapsed by pure attention: dS K with equal
    # rows of K and rows of dS summing to 0) carry rounding errors of the size of the run's
    # largest gradients: each array may also differ by 1e-14 times the largest gradient norm.
    scale = max(float(g.norm()) for g in grads.values())
    for name, ref in grads.items():
        got = arrays[name]
        nr = float(ref.norm())
        err = float((got - ref).norm())
        if err > TOL * nr + 1e-14 * scale:
            fails.append(f"{name} rel {err / max(nr, 1e-300):.2e} (norm {nr:.2e}, largest gradient {scale:.2e})")
        if nr > 1e-6 * scale:  # the relative figure reported: arrays not at the rounding level
            worst = max(worst, err / nr)
    return worst, fails


def configurations():
    base = dict(N=5, d=4, dk=3, H=2, dv=0, m=0, L=3, seed=1, norm="layernorm", pos="pre", alpha=0.7, dqk=2.0,
                act="gelu", usa=False, head_mean=False, mask="complete", bias=True)
    for i, (pos, norm, alpha) in enumerate(itertools.product(["post", "pre", "peri", "ngpt"],
                                                             ["none", "sphere", "projection", "layernorm", "rmsnorm"],
                                                             [0.0, 0.6])):
        yield f"stack_{pos}_{norm}_{alpha}", "placement x norm (3 blocks, MLP, W_O)", dict(
            base, pos=pos, norm=norm, alpha=alpha, m=5, dv=3, seed=i + 1)
    for mask, usa in itertools.product(["complete", "causal", "window", "custom"], [False, True]):
        yield f"mask_{mask}_usa{int(usa)}", "masks, USA, head mean, d_QK (3 blocks)", dict(
            base, mask=mask, usa=usa, head_mean=True, dqk=0.25, norm="sphere", pos="post", alpha=0.0)
    for act in ["relu", "gelu", "gelu_tanh", "tanh", "swiglu"]:
        yield f"mlp_{act}", "MLP activations (3 blocks)", dict(base, m=6, act=act, H=1, dk=4)
    # The gated MLP (mlp.activation = swiglu, W_gate): a Llama-like stack (pre-RMSNorm, residual 1, no
    # MLP biases, grouped-query heads) and a post-LN one with biases and W_O.
    yield "swiglu_llama", "gated MLP, swiglu (3 blocks)", dict(
        base, m=6, act="swiglu", pos="pre", norm="rmsnorm", alpha=1.0, bias=False, H=4, kv=2, mask="causal", seed=1000)
    yield "swiglu_post", "gated MLP, swiglu (3 blocks)", dict(
        base, m=5, act="swiglu", pos="post", norm="layernorm", dv=3, seed=1001)
    # Variants (docs/science/gradients.md): skip gains (Cowsik's 0.8 = sqrt(1 - 0.6^2), DeepNorm's
    # (2L)^(1/4) with L = 3 and alpha = 1), shaped attention and gap removal.
    for i, (pos, norm, skip) in enumerate(itertools.product(["post", "pre", "peri"], ["none", "layernorm", "rmsnorm"],
                                                            [0.8, 6.0 ** 0.25, 0.0])):
        yield f"skip_{pos}_{norm}_{skip:.3f}", "skip gain a X + b F(X) (3 blocks, MLP, W_O)", dict(
            base, pos=pos, norm=norm, skip=skip, alpha=1.0 if skip > 1 else 0.6, m=5, dv=3, seed=100 + i)
    for i, (mask, shp, usa) in enumerate(itertools.product(["complete", "causal", "window", "custom"],
                                                          [(1.3, 0.4, 0.7), (1.0, 0.0, 1.0)], [False, True])):
        yield f"shape_{mask}_{shp[2]}_usa{int(usa)}", "shaped attention a A + b I - c C, gap removal", dict(
            base, mask=mask, usa=usa, shape_a=shp[0], shape_b=shp[1], shape_c=shp[2], norm="layernorm",
            pos="peri" if usa else "pre", dqk=8.0 if usa else 2.0, m=4, dv=2, seed=200 + i)
    # Attention biases (attention.bias): b_Q, b_K, b_V, b_O with every mask, W_O or not, head mean,
    # shaped attention (rows not summing to 1), and the GPT-2 block (pre-LN, W_O, gelu_tanh MLP).
    for i, (mask, dv, extra) in enumerate(itertools.product(
            ["complete", "causal", "window", "custom"], [0, 3],
            [dict(), dict(head_mean=True, shape_a=1.3, shape_b=0.4, shape_c=0.7, pos="post", norm="rmsnorm"),
             dict(pos="pre", alpha=1.0, m=6, act="gelu_tanh", dqk=3.0)])):
        yield f"attn_bias_{mask}_dv{dv}_{i % 3}", "attention biases b_Q, b_K, b_V, b_O", dict(
            base, mask=mask, dv=dv, attn_bias=True, seed=300 + i, **extra)

    # Additive logit biases (attention.logit_bias): ALiBi (two heads, two slopes) and decay, every mask,
    # softmax and USA, single blocks and 3-block stacks with an MLP.
    for i, (mask, kind, usa) in enumerate(itertools.product(["complete", "causal", "window", "custom"],
                                                           ["alibi", "decay"], [False, True])):
        yield f"logit_bias_{mask}_{kind}_usa{int(usa)}", "logit biases S + B (ALiBi, decay gamma = 0.6)", dict(
            base, mask=mask, usa=usa, logit_bias=kind, decay=0.6, norm="layernorm", pos="peri" if usa else "pre",
            dqk=8.0 if usa else 2.0, m=4, dv=2, seed=400 + i)

    # QK-normalisation (attention.qk_norm, attention.qk_scale): every mask, with and without attention
    # biases (inside the normalised rows), ALiBi beside, 3-block stacks in every placement.
    for i, (mask, pos, extra) in enumerate(itertools.product(
            ["complete", "causal", "window", "custom"], ["post", "pre", "peri", "ngpt"],
            [dict(qk_scale=1.7), dict(qk_scale=1.3, attn_bias=True, logit_bias="alibi")])):
        yield f"qk_norm_{mask}_{pos}_{i % 2}", "QK-normalisation s q/|q|, logits sqrt(d_k) Q K^T", dict(
            base, mask=mask, pos=pos, qk_norm=True, m=4, dv=2, seed=500 + i, **extra)

    # LayerNorm scaling 1/sqrt(l) (norm.depth_scaling = inv_sqrt_layer, pre-LN): 4-block stacks.
    for i, (norm, alpha) in enumerate(itertools.product(["none", "layernorm", "rmsnorm", "sphere"], [0.7, 0.0])):
        yield f"ln_scale_{norm}_{alpha}", "LayerNorm scaling 1/sqrt(l) (pre, 4 blocks, MLP, W_O)", dict(
            base, pos="pre", norm=norm, alpha=alpha, ln_scale=True, L=4, m=5, dv=3, seed=600 + i)

    # Settings per layer range (model.layer_overrides): Mix-LN (post-LN blocks 0-1, pre-LN after) and
    # other splits of placement, residual weight, temperature and activation, 4-block stacks.
    for i, (pos, mix_pos, norm) in enumerate(itertools.product(["pre", "post"], ["post", "pre", "peri"],
                                                               ["layernorm", "rmsnorm"])):
        if pos == mix_pos:
            continue
        yield f"mix_{mix_pos}_{pos}_{norm}", "settings per layer range (Mix-LN etc., 4 blocks, MLP, W_O)", dict(
            base, pos=pos, norm=norm, alpha=0.7, L=4, m=5, dv=3, seed=700 + i, mix_to=1, mix_pos=mix_pos,
            mix_alpha=0.4 if i % 2 else 1.0, mix_dqk=3.0, mix_act="relu" if i % 2 else "gelu")

    # Grouped-query attention (model.kv_heads): 4 query heads sharing 1 or 2 key/value heads, whose
    # gradients are the sums over the sharing heads (torch sums them by autograd), with attention
    # biases, W_O and an MLP.
    for i, (kv, mask, pos) in enumerate(itertools.product([1, 2], ["complete", "causal"], ["pre", "post"])):
        yield f"kv_heads_{kv}_{mask}_{pos}", "grouped-query attention (model.kv_heads, H = 4)", dict(
            base, H=4, kv=kv, mask=mask, pos=pos, attn_bias=True, dv=3, m=5, seed=900 + i)

    # Softpick (attention.kind = softpick), every mask, pre and post, 3-block stacks with an MLP; W_Q
    # scaled up by a larger d_QK's inverse (dqk = 0.5) so that logits of both signs use the rectifier.
    for i, (mask, pos) in enumerate(itertools.product(["complete", "causal", "window", "custom"], ["pre", "post"])):
        yield f"softpick_{mask}_{pos}", "softpick (rectified softmax, 3 blocks)", dict(
            base, softpick=True, mask=mask, pos=pos, dqk=0.5, m=4, dv=2, seed=950 + i)

    # Particles and peers (the settings the reverse pass refused before): random-Markov attention
    # (W_Q, W_K get 0), the tangent projection, the RK4 step (with the projection), the noise step
    # after each block; every mask, post (tangent and rk4 need it, no MLP), 3-block stacks.
    for i, (mask, extra) in enumerate(itertools.product(
            ["complete", "causal", "window", "custom"],
            [dict(markov=True, pos="pre", m=5, dv=3), dict(markov=True, head_mean=True),
             dict(tangent=True, norm="sphere", alpha=0.6, dv=3), dict(tangent=True, norm="none", alpha=0.4),
             dict(rk4=True, norm="sphere", alpha=0.45, dv=3), dict(rk4=True, tangent=True, norm="sphere", alpha=0.5),
             dict(rk4=True, markov=True, norm="none", alpha=0.3),
             dict(noise=0.3, norm="sphere", alpha=0.5, dv=3), dict(noise=0.3, norm="none", noise_norm="none", alpha=0.5),
             dict(noise=0.25, rk4=True, tangent=True, norm="sphere", alpha=0.5)])):
        cfg = dict(base, mask=mask, pos="post", norm="layernorm", seed=800 + i)
        cfg.update(extra)
        kind = "+".join(k for k in ("markov", "tangent", "rk4", "noise") if cfg.get(k))
        yield f"particles_{mask}_{i % 10}_{kind}", "random_markov, tangent, rk4, dynamics.noise (3 blocks)", cfg


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    dump, workdir = sys.argv[1], sys.argv[2]
    os.makedirs(workdir, exist_ok=True)
    families, failed = {}, False
    _, fails = compare(dump, workdir, "self_check", dict(next(configurations())[2]), perturb="grad.l0.q0")
    if not any("grad.l0.q0" in f for f in fails):
        print("FAIL self-check: a perturbed gradient was not caught")
        return 1
    for tag, family, cfg in configurations():
        worst, fails = compare(dump, workdir, tag, cfg)
        families[family] = max(families.get(family, 0.0), worst)
        if fails:
            failed = True
            print(f"FAIL {tag}: " + "; ".join(fails))
    for family, worst in families.items():
        print(f"{family}: largest relative difference to torch autograd {worst:.2e}")
    print("autograd_check: " + ("FAILED" if failed else f"all gradients agree to {TOL:g} relative"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
