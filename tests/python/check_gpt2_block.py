#!/usr/bin/env python3
"""A GPT-2 block stack written in plain torch (random weights, no download, no `transformers`)
runs in rcsim with its weights as arrays, and every layer's tokens agree (float64, 1e-12
relative) (issue 21; attention.bias).

The block is GPT-2's (openai/gpt-2 model.py, HF GPT2Block) in float64, pre-LN, residual weight 1:
    h = x + c_proj(attn(ln_1(x))),   x' = h + mlp(ln_2(h)),   mlp(z) = c_proj(gelu_tanh(c_fc(z)))
with Conv1D layers y = z W + b (W [in, out], biases on c_attn, c_proj, c_fc and the MLP's c_proj),
c_attn [d, 3d] = [W_q | W_k | W_v] producing Q, K, V for H heads (head h owns columns
h d_h .. (h+1) d_h - 1), causal softmax attention with scale 1/sqrt(d_h), LayerNorm eps 1e-5 with
random gains and biases. rcsim runs the same stack with
    model.heads = H, model.key_dim = model.value_dim = d_h, attention.bias = true,
    mask.type = causal, norm.type = layernorm, norm.position = pre, residual.alpha = 1,
    mlp.width = 4d, mlp.activation = gelu_tanh, mlp.bias = true
and the arrays W_Q, W_K, W_V [L, H, d, d_h], W_O [L, H, d_h, d], b_Q, b_K, b_V [L, H, d_h],
b_O [L, d], W_in, b_in, W_out, b_out, norm_attn_gain/bias, norm_mlp_gain/bias (gpt2_arrays below).
Also: the same weights without the attention biases in torch differ from rcsim's run by far more
than the tolerance (the biases matter), and a GPT-2 block whose biases are zero equals rcsim's run
without attention.bias.

Usage: check_gpt2_block.py BUILD_DIR. Exit 77 (skipped) without torch.
"""
import math
import os
import sys

import numpy as np

try:
    import torch
except ImportError:
    print("check_gpt2_block: torch is not installed (Debian: python3-torch); skipped")
    sys.exit(77)

sys.path.insert(0, os.path.join(sys.argv[1], "python"))
import rcsim  # noqa: E402

TOL = 1e-12


class Conv1D(torch.nn.Module):
    """GPT-2's Conv1D: y = x W + b with W [in, out]."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n_in, n_out, dtype=torch.float64) / math.sqrt(n_in))
        self.bias = torch.nn.Parameter(0.3 * torch.randn(n_out, dtype=torch.float64))

    def forward(self, x):
        return x @ self.weight + self.bias


class Block(torch.nn.Module):
    """One GPT-2 block (pre-LN), x [N, d]."""

    def __init__(self, d, heads):
        super().__init__()
        self.d, self.heads = d, heads
        self.ln_1 = torch.nn.LayerNorm(d, eps=1e-5, dtype=torch.float64)
        self.ln_2 = torch.nn.LayerNorm(d, eps=1e-5, dtype=torch.float64)
        for ln in (self.ln_1, self.ln_2):  # random gains and biases (torch starts at 1 and 0)
            torch.nn.init.normal_(ln.weight, 1.0, 0.2)
            torch.nn.init.normal_(ln.bias, 0.0, 0.2)
        self.c_attn, self.c_proj = Conv1D(d, 3 * d), Conv1D(d, d)
        self.c_fc, self.mlp_proj = Conv1D(d, 4 * d), Conv1D(4 * d, d)

    def attn(self, z):
        n, d, H = z.shape[0], self.d, self.heads
        q, k, v = self.c_attn(z).split(d, dim=1)
        q, k, v = (t.reshape(n, H, d // H).transpose(0, 1) for t in (q, k, v))  # [H, N, d_h]
        s = q @ k.transpose(1, 2) / math.sqrt(d // H)
        causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
        a = torch.softmax(s.masked_fill(~causal, float("-inf")), dim=-1)
        return self.c_proj((a @ v).transpose(0, 1).reshape(n, d))  # heads merged, then c_proj

    def forward(self, x):
        h = x + self.attn(self.ln_1(x))
        return h + self.mlp_proj(torch.nn.functional.gelu(self.c_fc(self.ln_2(h)), approximate="tanh"))


def gpt2_arrays(blocks, heads):
    """rcsim's weight arrays (rcsim.simulate(weights=...)) of a list of GPT-2 blocks."""
    d = blocks[0].d
    dh = d // heads
    per_head_cols = lambda w: np.stack([w[:, h * dh:(h + 1) * dh] for h in range(heads)])  # [H, d, d_h]
    per_head = lambda b: b.reshape(heads, dh)                                               # [H, d_h]
    out = {k: [] for k in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O", "W_in", "b_in", "W_out",
                           "b_out", "norm_attn_gain", "norm_attn_bias", "norm_mlp_gain", "norm_mlp_bias")}
    for b in blocks:
        w, bias = b.c_attn.weight.detach().numpy(), b.c_attn.bias.detach().numpy()
        for i, name in enumerate("QKV"):
            out["W_" + name].append(per_head_cols(w[:, i * d:(i + 1) * d]))
            out["b_" + name].append(per_head(bias[i * d:(i + 1) * d]))
        proj = b.c_proj.weight.detach().numpy()
        out["W_O"].append(np.stack([proj[h * dh:(h + 1) * dh] for h in range(heads)]))  # [H, d_h, d]: rows of head h
        out["b_O"].append(b.c_proj.bias.detach().numpy())
        out["W_in"].append(b.c_fc.weight.detach().numpy())
        out["b_in"].append(b.c_fc.bias.detach().numpy())
        out["W_out"].append(b.mlp_proj.weight.detach().numpy())
        out["b_out"].append(b.mlp_proj.bias.detach().numpy())
        for stem, ln in (("norm_attn", b.ln_1), ("norm_mlp", b.ln_2)):
            out[stem + "_gain"].append(ln.weight.detach().numpy())
            out[stem + "_bias"].append(ln.bias.detach().numpy())
    return {k: np.array(v) for k, v in out.items()}


def gpt2_keys(n, d, heads, layers):
    return {"model.tokens": n, "model.dim": d, "model.layers": layers, "model.heads": heads,
            "model.key_dim": d // heads, "model.value_dim": d // heads, "mask.type": "causal",
            "norm.type": "layernorm", "norm.position": "pre", "norm.eps": 1e-5, "residual.alpha": 1,
            "mlp.width": 4 * d, "mlp.activation": "gelu_tanh", "mlp.bias": "true", "run.trials": 1,
            "output.tokens": "all"}


def main():
    torch.manual_seed(21)
    N, d, H, L = 9, 16, 4, 4
    blocks = [Block(d, H) for _ in range(L)]
    x0 = torch.randn(N, d, dtype=torch.float64)
    with torch.no_grad():
        ref = [x0]
        for b in blocks:
            ref.append(b(ref[-1]))
        ref = torch.stack(ref).numpy()  # [L + 1, N, d]
    arrays = gpt2_arrays(blocks, H)
    keys = gpt2_keys(N, d, H, L)
    got = rcsim.simulate(keys=keys, x0=x0.numpy(), weights=arrays, group="/").tokens.values[0]
    failures = 0
    per_layer = [float(np.abs(got[t] - ref[t]).max() / np.abs(ref[t]).max()) for t in range(L + 1)]
    worst = max(per_layer)
    ok = got.shape == ref.shape and worst <= TOL
    failures += not ok
    print(f"{'ok' if ok else 'FAIL'} GPT-2 block stack (N = {N}, d = {d}, H = {H}, L = {L}, biases on c_attn, c_proj, "
          f"MLP and LayerNorms): largest relative token difference per layer "
          f"{', '.join(f'{e:.1e}' for e in per_layer)} (tolerance {TOL:g})")
    # Without the attention biases (rcsim refuses b_* arrays then: drop them and attention.bias
    # stays false) the run is another one: the biases are not a no-op.
    plain = {k: v for k, v in arrays.items() if k not in ("b_Q", "b_K", "b_V", "b_O")}
    other = rcsim.simulate(keys=keys, x0=x0.numpy(), weights=plain, group="/").tokens.values[0]
    diff = float(np.abs(other[-1] - ref[-1]).max() / np.abs(ref[-1]).max())
    ok = diff > 1e-3
    failures += not ok
    print(f"{'ok' if ok else 'FAIL'} the same weights without the attention biases differ from torch by {diff:.2e}")
    # Zero attention biases: rcsim with attention.bias = true and zero arrays equals rcsim without them
    # up to the rounding of the general path (rcsim's fast path takes the causal triangle).
    zero = dict(arrays, **{k: np.zeros_like(arrays[k]) for k in ("b_Q", "b_K", "b_V", "b_O")})
    with_zero = rcsim.simulate(keys=keys, x0=x0.numpy(), weights=zero, group="/").tokens.values[0]
    diff = float(np.abs(with_zero - other).max() / np.abs(other).max())
    ok = diff <= TOL
    failures += not ok
    print(f"{'ok' if ok else 'FAIL'} zero attention biases against none: {diff:.1e} (tolerance {TOL:g})")
    print(f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
