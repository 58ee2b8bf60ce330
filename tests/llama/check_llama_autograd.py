#!/usr/bin/python3
"""rcsim's Llama reverse pass (Model.gradients: kernel/llama/llama_backward.cpp) against PyTorch
autograd of an independent float64 torch Llama written here from the architecture description
(as tests/llama/llama_reference.py: pre-norm RMSNorm x / sqrt(mean(x^2) + eps) * g with eps 1e-5;
rotary position embedding on q and k, adjacent pairs (2j, 2j+1) of each head rotated by
pos * 10000^(-2j / head_size); causal softmax attention with scale 1/sqrt(head_size), query head h
reading key/value head h // (H / H_kv); SwiGLU w2(silu(w1 x) * w3 x); final RMSNorm; classifier),
not from rcsim's code. The stories260K weights are read by llama_reference.load (not rcsim's reader).

For each case, the gradients of the same scalar with respect to X(0) .. X(depth), every block
weight and gain, the final gain, the classifier and the token embedding agree within
||g_rcsim - g_torch||_F <= 1e-11 ||g_torch||_F (the worst ratio printed per case). Cases: the
pretrained model with the cross-entropy of the next ids; the same with a cotangent loss
sum(C * X(L)); the blocks repeated to depth 8 (the cyclic probe); RMSNorm removed on random blocks;
and the float32 reverse pass (precision="float32") on both losses, within 1e-4 of the float64 torch.

usage: check_llama_autograd.py BUILD_DIR. Exit 77 (skipped) without torch.
"""
import os
import sys

try:
    import torch
except ImportError:
    print("check_llama_autograd: torch is not installed (Debian: python3-torch); skipped")
    sys.exit(77)

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MODEL = os.path.join(REPO, "configs", "models", "stories260K", "stories260K.bin")
TOL = 1e-11
BLOCK_KEYS = {"rms_att": "rms_att_weight", "wq": "wq", "wk": "wk", "wv": "wv", "wo": "wo",
              "rms_ffn": "rms_ffn_weight", "w1": "w1", "w2": "w2", "w3": "w3"}


def rmsnorm(x, g, on):
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + 1e-5) * g if on else x


def rope(x, hs):
    T = x.shape[0]
    y = x.reshape(T, -1, hs // 2, 2)
    freq = 10000.0 ** (-torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * freq[None, :]
    c, s = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
    a, b = y[..., 0], y[..., 1]
    return torch.stack([a * c - b * s, a * s + b * c], dim=-1).reshape(x.shape)


def block(p, l, x, H, Hkv, norm):
    T, dim = x.shape
    hs = dim // H
    h = rmsnorm(x, p["rms_att"][l], norm)
    q = rope(h @ p["wq"][l].T, hs)
    k = rope(h @ p["wk"][l].T, hs)
    v = h @ p["wv"][l].T
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    heads = []
    for j in range(H):
        g = j // (H // Hkv)
        s = q[:, j * hs:(j + 1) * hs] @ k[:, g * hs:(g + 1) * hs].T / np.sqrt(hs)
        a = torch.softmax(s.masked_fill(~causal, float("-inf")), dim=1)
        heads.append(a @ v[:, g * hs:(g + 1) * hs])
    x = x + torch.cat(heads, dim=1) @ p["wo"][l].T
    h = rmsnorm(x, p["rms_ffn"][l], norm)
    return x + (torch.nn.functional.silu(h @ p["w1"][l].T) * (h @ p["w3"][l].T)) @ p["w2"][l].T


def torch_gradients(w, cfg, ids, targets, C, norm, depth):
    """The loss and its gradients by autograd: w the arrays (llama_reference's names), leaves each."""
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in w.items()}
    L = cfg["L"]
    x = p["emb"][torch.tensor(ids)]
    states = [x]
    for t in range(depth or L):
        x = block(p, t % L, x, cfg["H"], cfg["Hkv"], norm)
        states.append(x)
    for s in states:
        s.retain_grad()
    if C is not None:
        loss = (torch.tensor(C) * x).sum()
    else:
        logits = rmsnorm(x, p["rms_final"], norm) @ p["cls"].T
        rows = [t for t, y in enumerate(targets) if y >= 0]
        logp = torch.log_softmax(logits, dim=1)
        loss = -logp[rows, [targets[t] for t in rows]].sum()
    loss.backward()
    grads = {k: (v.grad.numpy() if v.grad is not None else np.zeros(v.shape)) for k, v in p.items()}
    grads["dX"] = np.stack([s.grad.numpy() for s in states])
    return loss.item(), grads


def compare(label, mine, loss_t, theirs, shared, tol=TOL):
    """Worst relative Frobenius error over the arrays; prints and returns it."""
    pairs = [("dX", mine["dX"], theirs["dX"]), ("rms_final_weight", mine["rms_final_weight"], theirs["rms_final"])]
    pairs += [(k, mine[v], theirs[k]) for k, v in BLOCK_KEYS.items()]
    emb = theirs["emb"] + (theirs["cls"] if shared else 0)  # one array for both uses in the checkpoint
    pairs += [("classifier", mine["classifier"], theirs["cls"]), ("token_embedding", mine["token_embedding"], emb)]
    pairs.append(("loss", np.array(mine["loss"]), np.array(loss_t)))
    worst, name = 0.0, ""
    for key, a, b in pairs:
        scale = np.linalg.norm(b)
        err = np.linalg.norm(a - b) / scale if scale > 0 else np.linalg.norm(a)
        if a.shape != b.shape:
            err = np.inf
        if err > worst:
            worst, name = err, key
    ok = worst <= tol
    print(("ok   " if ok else "FAIL ") + f"{label}: worst relative error {worst:.1e} ({name})")
    return ok


def as_reference(weights, cfg):
    """rcsim's Model.weights() in llama_reference's names (the random-blocks model's weights)."""
    names = {"emb": "token_embedding", "rms_final": "rms_final_weight", "cls": "classifier"}
    names.update({k: v for k, v in BLOCK_KEYS.items()})
    return {k: np.array(weights[v]) for k, v in names.items()}


def main():
    sys.path.insert(0, os.path.join(sys.argv[1], "python"))
    sys.path.insert(0, HERE)
    import rcsim
    import llama_reference as ref
    torch.set_num_threads(1)
    m = rcsim.load_model(MODEL)
    r = ref.load(MODEL)
    cfg = {k: r[k] for k in ("L", "H", "Hkv")}
    w = {k: r[k] for k in ["emb", "rms_final", "cls"] + list(BLOCK_KEYS)}
    w["cls"] = r["cls"].copy()  # a leaf of its own: its gradient apart from the lookup's
    ids = [int(i) for i in rcsim.generate(m, steps=47, temperature=1.0, seed=5)[0]]
    targets = ids[1:] + [-1]
    C = np.random.default_rng(7).standard_normal((len(ids), m.config["dim"]))
    shared = m.config["shared_classifier"]
    ok = True
    # The float32 reverse pass (precision="float32") against the same float64 torch autograd: 1e-4.
    for label, model, weights, kw in [
            ("stories260K, cross-entropy of the next ids", m, w, {}),
            ("stories260K, sum(C * X(5))", m, w, {"cotangent": C}),
            ("stories260K, blocks repeated to depth 8, cross-entropy", m, w, {"depth": 8}),
            ("random blocks, RMSNorm removed, cross-entropy", m.with_random_blocks(3), None, {"norm": False}),
            ("stories260K, float32, cross-entropy of the next ids", m, w, {"precision": "float32"}),
            ("stories260K, float32, sum(C * X(5))", m, w, {"cotangent": C, "precision": "float32"})]:
        if weights is None:
            weights = as_reference(model.weights(), cfg)
        mine = model.gradients(ids, **kw)
        tgt = None if "cotangent" in kw else targets
        loss_t, theirs = torch_gradients(weights, cfg, ids, tgt, kw.get("cotangent"), kw.get("norm", True),
                                         kw.get("depth", 0))
        ok &= compare(label, mine, loss_t, theirs, shared, 1e-4 if "precision" in kw else TOL)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
