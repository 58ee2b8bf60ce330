#!/usr/bin/env python3
"""rcsim.from_torch on torch models as they are written (issue 48): nanoGPT's Block, HF GPT-2's
Conv1D layout, exact and tanh GELU read from the module, clear errors, capture's training-mode warning.

Usage: check_torch_nanogpt.py BUILD_DIR. Exit 77 (skipped) without torch.
The classes below are karpathy/nanoGPT model.py's LayerNorm(ndim, bias) (F.layer_norm with eps 1e-5,
no eps attribute), CausalSelfAttention (c_attn = nn.Linear(d, 3d, bias), c_proj), MLP (c_fc,
nn.GELU(), c_proj, dropout) and Block (pre-LN, residuals), in a GPT holding them as .transformer.h.
In float64 with random weights, LayerNorm gains and biases, dropout 0.1 and eval mode:
  bias True and False: rcsim.layer(x, all_layers=True, **from_torch(gpt)) equals torch's state
    after every block to 1e-12 relative; the keys say gelu (exact), mlp.bias, norm.eps 1e-5;
  nn.GELU(approximate='tanh') gives gelu_tanh, also to 1e-12 (exact and tanh GELU differ by about
    1e-6 here, so a GELU read as the other fails the 1e-12 check);
  HF GPT-2's layout (Conv1D weight [in, out], mlp.act = NewGELUActivation): to 1e-12;
  a TransformerEncoderLayer (post-LN, exact gelu, with dropout 0.1, eval): to 1e-12;
  a float32 nanoGPT block: the same keys (eps measured as 1e-5, gelu) and agreement to 1e-5;
  errors, each one ValueError naming the module and what is supported: nn.SiLU in the MLP, a
  c_attn of the wrong width, a norm that is no LayerNorm (RMSNorm), an unknown activation=;
  capture of a model in training mode with dropout warns (RuntimeWarning naming dropout), in eval
  mode does not. About 2 s.
"""
import math
import os
import sys
import warnings

import numpy as np

try:
    import torch
    import torch.nn as nn
    from torch.nn import functional as F
except ImportError:
    print("check_torch_nanogpt: torch is not installed (Debian: python3-torch); skipped")
    sys.exit(77)

sys.path.insert(0, os.path.join(sys.argv[1], "python"))
import rcsim  # noqa: E402

failures = []


def check(cond, what):
    print("ok  " if cond else "FAIL", what)
    if not cond:
        failures.append(what)


def rel(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


# ---- karpathy/nanoGPT model.py (the parts a block needs), as written there -------------------------
class LayerNorm(nn.Module):
    """ LayerNorm but with an optional bias. PyTorch doesn't support simply bias=False """

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.flash = hasattr(torch.nn.functional, 'scaled_dot_product_attention')
        if not self.flash:
            self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                                 .view(1, 1, config.block_size, config.block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.flash:
            y = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        y = self.resid_dropout(self.c_proj(y))
        return y


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        x = self.c_fc(x)
        x = self.gelu(x)
        x = self.c_proj(x)
        x = self.dropout(x)
        return x


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x
# ---- end of nanoGPT ---------------------------------------------------------------------------------


class Config:
    def __init__(self, bias, n_embd=16, n_head=4, dropout=0.1, block_size=32):
        self.bias, self.n_embd, self.n_head, self.dropout, self.block_size = bias, n_embd, n_head, dropout, block_size


class GPT(nn.Module):
    """nanoGPT's GPT as far as the blocks: .transformer.h (embeddings and ln_f left out)."""

    def __init__(self, config, layers=3):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(h=nn.ModuleList([Block(config) for _ in range(layers)])))
        for name, p in self.named_parameters():  # random weights, LayerNorm gains and biases included
            with torch.no_grad():
                p.copy_(torch.randn_like(p) * (0.3 if p.ndim == 1 else 1 / math.sqrt(p.shape[-1])) +
                        (1.0 if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") else 0.0))

    def forward(self, x, keep=None):
        for block in self.transformer.h:
            x = block(x)
            if keep is not None:
                keep.append(x)
        return x


def torch_states(model, x):
    kept = []
    with torch.no_grad():
        model(x[None], kept)
    return np.stack([x.double().numpy()] + [k[0].double().numpy() for k in kept])


torch.manual_seed(48)
torch.set_default_dtype(torch.float64)
N, d = 9, 16
x = torch.randn(N, d)

for bias in (True, False):
    gpt = GPT(Config(bias)).eval()
    bridge = rcsim.from_torch(gpt)
    k = bridge["keys"]
    check(k["mlp.activation"] == "gelu" and k["mlp.bias"] is bias and k["norm.eps"] == 1e-5 and k["model.heads"] == 4
          and k["model.layers"] == 3 and ("b_Q" in bridge["weights"]) is bias,
          f"nanoGPT bias={bias}: keys {k}")
    err = rel(rcsim.layer(x, all_layers=True, **bridge), torch_states(gpt, x))
    check(err < 1e-12, f"nanoGPT bias={bias}: rcsim's X(0..3) = torch's states ({err:.1e})")

tanh = GPT(Config(True)).eval()
for block in tanh.transformer.h:
    block.mlp.gelu = nn.GELU(approximate="tanh")
bridge = rcsim.from_torch(tanh)
err = rel(rcsim.layer(x, all_layers=True, **bridge), torch_states(tanh, x))
check(bridge["keys"]["mlp.activation"] == "gelu_tanh" and err < 1e-12,
      f"nanoGPT with nn.GELU(approximate='tanh'): gelu_tanh, rcsim = torch ({err:.1e})")
misread = rcsim.layer(x, all_layers=True, **dict(bridge, keys=dict(bridge["keys"], **{"mlp.activation": "gelu"})))
gap = rel(misread, torch_states(tanh, x))
check(gap > 1e-9, f"the other GELU is measurably off ({gap:.1e}): the 1e-12 checks can tell them apart")


class Conv1D(nn.Module):
    """HF transformers' Conv1D (pytorch_utils.py): weight [nx, nf] = [in, out], y = x W + b."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) / math.sqrt(nx))
        self.bias = nn.Parameter(0.3 * torch.randn(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size_out)


class NewGELUActivation(nn.Module):
    """HF transformers' gelu_new (GPT-2's): the tanh approximation."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def hf_style(gpt):
    """The same GPT with HF GPT-2's layout: Conv1D projections, mlp.act = NewGELUActivation."""
    for block in gpt.transformer.h:
        block.attn.c_attn, block.attn.c_proj = Conv1D(3 * d, d), Conv1D(d, d)
        block.mlp.c_fc, block.mlp.c_proj = Conv1D(4 * d, d), Conv1D(d, 4 * d)
        del block.mlp.gelu
        block.mlp.act = NewGELUActivation()
        block.mlp.forward = lambda z, m=block.mlp: m.dropout(m.c_proj(m.act(m.c_fc(z))))
    return gpt


hf = hf_style(GPT(Config(True))).eval()
bridge = rcsim.from_torch(hf)
err = rel(rcsim.layer(x, all_layers=True, **bridge), torch_states(hf, x))
check(bridge["keys"]["mlp.activation"] == "gelu_tanh" and err < 1e-12,
      f"HF GPT-2 layout (Conv1D [in, out], NewGELUActivation): rcsim = torch ({err:.1e})")

encoder = nn.TransformerEncoderLayer(d, 4, dim_feedforward=24, dropout=0.1, activation="gelu", batch_first=True).eval()
with torch.no_grad():
    for m in (encoder.norm1, encoder.norm2):
        m.weight.normal_(1.0, 0.2)
        m.bias.normal_(0.0, 0.2)
    want = encoder(x[None])[0].numpy()
err = rel(rcsim.layer(x, **rcsim.from_torch(encoder)), want)
check(err < 1e-12, f"TransformerEncoderLayer (post-LN, exact gelu, dropout 0.1, eval): rcsim = torch ({err:.1e})")

torch.set_default_dtype(torch.float32)
single = GPT(Config(True), layers=1).eval()
bridge = rcsim.from_torch(single)
err = rel(rcsim.layer(x, all_layers=True, **bridge), torch_states(single, x.float()))
check(bridge["keys"]["norm.eps"] == 1e-5 and bridge["keys"]["mlp.activation"] == "gelu" and err < 1e-5,
      f"float32 nanoGPT block: eps {bridge['keys']['norm.eps']}, {bridge['keys']['mlp.activation']}, rcsim = torch "
      f"to float32 ({err:.1e})")
torch.set_default_dtype(torch.float64)


def refused(make, words, what):
    try:
        make()
        check(False, f"{what}: nothing raised")
    except ValueError as e:
        check(all(w in str(e) for w in words), f"{what}: {e}")


silu = GPT(Config(True), layers=1).eval()
silu.transformer.h[0].mlp.gelu = nn.SiLU()
refused(lambda: rcsim.from_torch(silu), ["mlp.gelu", "SiLU", "nn.GELU"], "nn.SiLU in the MLP")
narrow = GPT(Config(True), layers=1).eval()
narrow.transformer.h[0].attn.c_attn = nn.Linear(d, 2 * d)
refused(lambda: rcsim.from_torch(narrow), ["attn.c_attn", "Linear", str(3 * d)], "a c_attn of width 2d")


class RMSNorm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, z):
        return z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight


rms = GPT(Config(False), layers=1).eval()
rms.transformer.h[0].ln_1 = RMSNorm(d)
refused(lambda: rcsim.from_torch(rms), ["ln_1", "RMSNorm", "LayerNorm"], "an RMSNorm as ln_1")
refused(lambda: rcsim.from_torch(gpt, activation="swish"), ["activation", "gelu_tanh"], "activation='swish'")

gpt.train()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    rcsim.capture(gpt, x[None])
check(len(caught) == 1 and issubclass(caught[0].category, RuntimeWarning) and "dropout" in str(caught[0].message)
      and "eval()" in str(caught[0].message), f"capture in training mode warns: {[str(w.message) for w in caught]}")
gpt.eval()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    rcsim.capture(gpt, x[None])
check(not caught, f"capture in eval mode: no warning {[str(w.message) for w in caught]}")

if failures:
    sys.exit(f"check_torch_nanogpt: {len(failures)} failure(s)")
print("check_torch_nanogpt: all passed")
