#!/usr/bin/env python3
"""rcsim.from_torch and rcsim.capture against torch itself (issue 39, "torch in one call").

Usage: check_torch_bridge.py BUILD_DIR. Exit 77 (skipped) without torch.
Every module is float64 with random weights (and random LayerNorm gains and biases), in eval mode:
  nn.MultiheadAttention (2 heads with biases; 1 head without): rcsim.layer(X, **from_torch(mha))
    equals mha(X, X, X) to 1e-12 relative;
  nn.TransformerEncoder of 2 post-LN relu layers, and one pre-LN gelu nn.TransformerEncoderLayer:
    rcsim.layer(X, **from_torch(...)) equals torch's output to 1e-12;
  a GPT-2-style model (HF names: .h[i].ln_1, .attn.c_attn, .attn.c_proj, .ln_2, .mlp.c_fc,
    .mlp.c_proj; Conv1D [in, out]; causal): rcsim.capture(model, x) is torch's hidden state after
    every block (compared with torch's own loop) and equals rcsim.layer(all_layers=True)'s tokens
    to 1e-12; rcsim.measures of it equals the measures of rcsim's tokens; rcsim.simulate with the
    bridge's keys and weights gives the same tokens;
  rcsim.gradients(X, C, **from_torch(model)) (the keys simulate needs, model.dim and model.layers
    included, are accepted): dLoss/dX(0) equals torch autograd of sum(model(X) * C) to 1e-10;
  capture of a seq-first nn.TransformerEncoder and of a Llama-style model (.model.layers, keyword
    arguments, tuple outputs) gives [batch, layers + 1, N, d];
  a key that disagrees with X (model.tokens) raises ConfigError naming it and both values; a module
  that is no block (nn.Linear) raises TypeError naming it. About 3 s.
"""
import math
import os
import sys

import numpy as np

try:
    import torch
except ImportError:
    print("check_torch_bridge: torch is not installed (Debian: python3-torch); skipped")
    sys.exit(77)

sys.path.insert(0, os.path.join(sys.argv[1], "python"))
import rcsim  # noqa: E402

torch.manual_seed(39)
f64 = torch.float64
failures = []


def check(cond, what):
    print("ok  " if cond else "FAIL", what)
    if not cond:
        failures.append(what)


def rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def randomise_norms(module):
    for m in module.modules():
        if isinstance(m, torch.nn.LayerNorm):
            torch.nn.init.normal_(m.weight, 1.0, 0.2)
            torch.nn.init.normal_(m.bias, 0.0, 0.2)


N, d = 7, 8
x = torch.randn(N, d, dtype=f64)

# nn.MultiheadAttention, two heads with biases, and one head without.
for heads, bias in ((2, True), (1, False)):
    mha = torch.nn.MultiheadAttention(d, heads, bias=bias, dtype=f64).eval()
    if bias:
        torch.nn.init.normal_(mha.in_proj_bias, 0.0, 0.5)
        torch.nn.init.normal_(mha.out_proj.bias, 0.0, 0.5)
    with torch.no_grad():
        want = mha(x[:, None], x[:, None], x[:, None], need_weights=False)[0][:, 0].numpy()
    got = rcsim.layer(x, **rcsim.from_torch(mha))
    err = rel(got, want)
    check(err < 1e-12, f"MultiheadAttention heads={heads} bias={bias}: rcsim.layer = torch ({err:.1e})")

# nn.TransformerEncoder of two post-LN relu layers; one pre-LN gelu layer.
layer = torch.nn.TransformerEncoderLayer(d, 2, dim_feedforward=16, dropout=0.0, dtype=f64)
encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
randomise_norms(encoder)
with torch.no_grad():
    want = encoder(x[:, None])[:, 0].numpy()
bridge = rcsim.from_torch(encoder)
check(bridge["keys"]["norm.position"] == "post" and bridge["keys"]["model.layers"] == 2
      and bridge["weights"]["W_Q"].shape == (2, 2, d, d // 2), f"TransformerEncoder: keys {bridge['keys']}")
err = rel(rcsim.layer(x, **bridge), want)
check(err < 1e-12, f"TransformerEncoder (2 post-LN relu layers): rcsim.layer = torch ({err:.1e})")
pre = torch.nn.TransformerEncoderLayer(d, 4, dim_feedforward=12, dropout=0.0, activation="gelu", norm_first=True,
                                       batch_first=True, dtype=f64).eval()
randomise_norms(pre)
with torch.no_grad():
    want = pre(x[None])[0].numpy()
err = rel(rcsim.layer(x, **rcsim.from_torch(pre)), want)
check(err < 1e-12, f"TransformerEncoderLayer (pre-LN, gelu, 4 heads): rcsim.layer = torch ({err:.1e})")


class Conv1D(torch.nn.Module):
    """GPT-2's Conv1D: y = x W + b, W [in, out]."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n_in, n_out, dtype=f64) / math.sqrt(n_in))
        self.bias = torch.nn.Parameter(0.3 * torch.randn(n_out, dtype=f64))

    def forward(self, z):
        return z @ self.weight + self.bias


class Attention(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.num_heads, self.c_attn, self.c_proj = heads, Conv1D(d, 3 * d), Conv1D(d, d)

    def forward(self, z):  # z [batch, N, d]
        b, n, dd = z.shape
        q, k, v = (t.reshape(b, n, self.num_heads, -1).transpose(1, 2) for t in self.c_attn(z).split(dd, dim=-1))
        s = q @ k.transpose(-1, -2) / math.sqrt(dd // self.num_heads)
        s = s.masked_fill(~torch.tril(torch.ones(n, n, dtype=torch.bool)), float("-inf"))
        return self.c_proj((torch.softmax(s, -1) @ v).transpose(1, 2).reshape(b, n, dd))


class MLP(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc, self.c_proj = Conv1D(d, 4 * d), Conv1D(4 * d, d)

    def forward(self, z):
        return self.c_proj(torch.nn.functional.gelu(self.c_fc(z), approximate="tanh"))


class Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln_1, self.ln_2 = torch.nn.LayerNorm(d, dtype=f64), torch.nn.LayerNorm(d, dtype=f64)
        self.attn, self.mlp = Attention(d, heads), MLP(d)

    def forward(self, h):  # returns a tuple, as HF blocks do
        h = h + self.attn(self.ln_1(h))
        return (h + self.mlp(self.ln_2(h)),)


class Model(torch.nn.Module):
    def __init__(self, d, heads, layers):
        super().__init__()
        self.h = torch.nn.ModuleList([Block(d, heads) for _ in range(layers)])
        randomise_norms(self)

    def forward(self, h, keep=None):
        for block in self.h:
            h = block(h)[0]
            if keep is not None:
                keep.append(h)
        return h


L = 3
model = Model(d, 2, L).eval()
batch = torch.randn(2, N, d, dtype=f64)
hidden = rcsim.capture(model, batch)
kept = []
with torch.no_grad():
    model(batch, kept)
check(hidden.shape == (2, L + 1, N, d) and np.array_equal(hidden[:, 0], batch.numpy())
      and all(np.array_equal(hidden[:, i + 1], kept[i].numpy()) for i in range(L)),
      f"capture: [batch, L + 1, N, d] = the input and torch's state after each block {hidden.shape}")
bridge = rcsim.from_torch(model)
check(bridge["keys"]["mask.type"] == "causal" and bridge["keys"]["model.heads"] == 2,
      f"GPT-2-style model: keys {bridge['keys']}")
tokens = rcsim.layer(batch[1], all_layers=True, **bridge)
err = rel(tokens, hidden[1])
check(err < 1e-12, f"GPT-2-style model: rcsim.layer's every layer = captured hidden states ({err:.1e})")
m_torch, m_rcsim = rcsim.measures(hidden), rcsim.measures(tokens)
check(m_torch["mu"].shape == (2, L + 1) and np.allclose(m_torch["mu"][1], m_rcsim["mu"], rtol=1e-10)
      and np.allclose(m_torch["rank"][1], m_rcsim["rank"]), "measures of the capture = measures of rcsim's tokens")
run = rcsim.simulate(keys=dict(bridge["keys"], **{"model.tokens": N, "output.tokens": "all", "run.trials": 1}),
                     weights=bridge["weights"], x0=batch[1].numpy(), group="/")
err = rel(run.tokens.values[0], hidden[1])
check(err < 1e-12, f"simulate with the bridge's keys and weights = torch ({err:.1e})")

# Gradients with the same keys (model.dim, model.layers given, as simulate needs them).
C = torch.randn(N, d, dtype=f64)
xg = batch[0].clone().requires_grad_(True)
(model(xg[None])[0] * C).sum().backward()
g = rcsim.gradients(batch[0], C, **bridge)
err = rel(g["dX"][0], xg.grad.numpy())
check(err < 1e-10, f"gradients(X, C, **from_torch(model)): dLoss/dX(0) = torch autograd ({err:.1e})")

# capture's other layouts: an nn.TransformerEncoder without batch_first ([N, batch, d] states,
# transposed to [batch, ...]), and a Llama-style model (embedding, then .model.layers called with the
# hidden states and keyword arguments, each returning a tuple).
seq_first = rcsim.capture(encoder, x[:, None])
err = rel(seq_first[0], rcsim.layer(x, all_layers=True, **rcsim.from_torch(encoder)))
check(seq_first.shape == (1, 3, N, d) and err < 1e-12,
      f"capture of a seq-first TransformerEncoder: [1, 3, N, d], equal to rcsim's layers ({err:.1e})")


class Decoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(d, d, dtype=f64)

    def forward(self, h, attention_mask=None):
        return (h + torch.tanh(self.lin(h)), None)


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(11, d, dtype=f64)
        self.layers = torch.nn.ModuleList([Decoder() for _ in range(2)])

    def forward(self, ids, attention_mask=None):
        h = self.embed(ids)
        for layer in self.layers:
            h = layer(h, attention_mask=attention_mask)[0]
        return h


class Llama(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = Inner()

    def forward(self, ids, attention_mask=None):
        return self.model(ids, attention_mask=attention_mask)


llama = Llama().eval()
ids = torch.randint(0, 11, (2, 5))
states = rcsim.capture(llama, ids, attention_mask=None)
with torch.no_grad():
    h0 = llama.model.embed(ids)
    h1 = llama.model.layers[0](h0)[0]
check(states.shape == (2, 3, 5, d) and np.array_equal(states[:, 0], h0.numpy()) and np.array_equal(states[:, 1], h1.numpy()),
      f"capture of a Llama-style model (.model.layers, keyword arguments, tuples): {states.shape}")

# Errors.
try:
    rcsim.layer(torch.randn(N + 1, d, dtype=f64), **rcsim.from_torch(model, tokens=N))
    check(False, "a model.tokens that disagrees with X: nothing raised")
except rcsim.ConfigError as e:
    check("model.tokens" in str(e) and str(N) in str(e) and str(N + 1) in str(e), f"model.tokens disagreeing: {e}")
try:
    rcsim.from_torch(torch.nn.Linear(d, d))
    check(False, "nn.Linear: nothing raised")
except TypeError as e:
    check("Linear" in str(e) and "MultiheadAttention" in str(e), f"nn.Linear refused: {e}")

if failures:
    sys.exit(f"check_torch_bridge: {len(failures)} failure(s)")
print("check_torch_bridge: all passed")
