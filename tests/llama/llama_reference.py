"""An independent float64 NumPy Llama forward for the stories260K checks (tests/llama/).

Written from the architecture description (llama2.c's legacy checkpoint layout; pre-norm RMSNorm
with eps 1e-5 and a learned gain; rotary position embedding on q and k with theta 10000 on
adjacent pairs (2j, 2j+1) of each head, angle pos * theta^(-2j / head_size); causal softmax
attention with scale 1/sqrt(head_size), query head h reading key/value head h // (H / H_kv);
SwiGLU MLP w2(silu(w1 x) * w3 x); final RMSNorm; classifier = token embedding when shared), not
from rcsim's code. The whole sequence at once (no key/value cache).
"""
import struct

import numpy as np


def load(path):
    raw = open(path, "rb").read()
    dim, hidden, L, H, Hkv, vocab, seq = struct.unpack("<7i", raw[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    hs = dim // H
    kv = hs * Hkv
    w = np.frombuffer(raw, dtype="<f4", offset=28).astype(np.float64)
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        a = w[pos:pos + n].reshape(shape)
        pos += n
        return a

    m = {"dim": dim, "hidden": hidden, "L": L, "H": H, "Hkv": Hkv, "vocab": vocab, "seq": seq}
    m["emb"] = take(vocab, dim)
    m["rms_att"] = take(L, dim)
    m["wq"] = take(L, dim, dim)
    m["wk"] = take(L, kv, dim)
    m["wv"] = take(L, kv, dim)
    m["wo"] = take(L, dim, dim)
    m["rms_ffn"] = take(L, dim)
    m["w1"] = take(L, hidden, dim)
    m["w2"] = take(L, dim, hidden)
    m["w3"] = take(L, hidden, dim)
    m["rms_final"] = take(dim)
    take(seq, hs // 2)
    take(seq, hs // 2)
    m["cls"] = m["emb"] if shared else take(vocab, dim)
    assert pos == w.size, (pos, w.size)
    return m


def rmsnorm(x, g):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5) * g


def rope(x, hs):
    """x: [T, heads * hs]; rotate each pair (2j, 2j+1) of each head by pos * 10000^(-2j/hs)."""
    T = x.shape[0]
    y = x.reshape(T, -1, hs // 2, 2)
    freq = 10000.0 ** (-np.arange(0, hs, 2) / hs)
    ang = np.arange(T)[:, None] * freq[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = y[..., 0], y[..., 1]
    return np.stack([a * c - b * s, a * s + b * c], axis=-1).reshape(x.shape)


def hidden_states(m, ids):
    """The residual stream after the embedding and after each block: L + 1 arrays [T, dim]."""
    x = m["emb"][np.asarray(ids)]
    T, H, Hkv = len(ids), m["H"], m["Hkv"]
    hs = m["dim"] // H
    causal = np.tril(np.ones((T, T), dtype=bool))
    out = [x.copy()]
    for l in range(m["L"]):
        h = rmsnorm(x, m["rms_att"][l])
        q = rope(h @ m["wq"][l].T, hs).reshape(T, H, hs)
        k = rope(h @ m["wk"][l].T, hs).reshape(T, Hkv, hs)
        v = (h @ m["wv"][l].T).reshape(T, Hkv, hs)
        heads = []
        for j in range(H):
            g = j // (H // Hkv)
            s = q[:, j] @ k[:, g].T / np.sqrt(hs)
            s = np.where(causal, s, -np.inf)
            p = np.exp(s - s.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            heads.append(p @ v[:, g])
        x = x + np.concatenate(heads, axis=1) @ m["wo"][l].T
        h = rmsnorm(x, m["rms_ffn"][l])
        a = h @ m["w1"][l].T
        x = x + ((a / (1 + np.exp(-a))) * (h @ m["w3"][l].T)) @ m["w2"][l].T
        out.append(x.copy())
    return out


def logits(m, ids):
    """[T, vocab]: row t predicts the token after ids[t]."""
    return rmsnorm(hidden_states(m, ids)[-1], m["rms_final"]) @ m["cls"].T


def greedy(m, steps, bos=1):
    ids = [bos]
    for _ in range(steps):
        ids.append(int(np.argmax(logits(m, ids)[-1])))
    return ids[1:]


if __name__ == "__main__":
    import sys
    print(" ".join(map(str, greedy(load(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 40))))
