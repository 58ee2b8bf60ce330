#!/usr/bin/python3
"""The Llama family as a configuration of the main block (issue 45), end to end:

1. A random-weight Llama-style stack (pre-LN RMSNorm, residual 1, causal, 4 query heads on 2
   key/value heads of size 4 with W_O, rotary embedding, gated MLP) runs through `rcsim run` with
   every optional measure (all of `rcsim --help-keys`' list), and every stored measure is finite
   (but fourier_mode and fourier_k, NaN by definition for d != 2).
2. The pretrained stories260K's blocks given as weight arrays to the array API (rcsim.layer: the
   run's own weight source, the same path as weights.file) give the same residual stream X(0) ..
   X(L) as Model.states (kernel/llama/llama_forward.hpp), within 1e-12 of its largest entry: the
   checkpoint's [out, in] matrices mapped onto the main block's [in, out] by this script alone,
   from the architecture description (docs/science/pretrained.md), not from rcsim's mapping.

usage: check_llama_run.py RCSIM BUILD_DIR WORK_DIR
"""
import os
import subprocess
import sys

import numpy as np

RCSIM, BUILD, WORK = sys.argv[1:4]
sys.path.insert(0, os.path.join(BUILD, "python"))
import rcsim  # noqa: E402
import h5py  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MODEL = os.path.join(REPO, "configs", "models", "stories260K", "stories260K.bin")
failed = False


def check(ok, what):
    global failed
    print(("ok   " if ok else "FAIL ") + what)
    failed |= not ok


# 1. A random Llama-style stack through rcsim run with every measure.
help_text = subprocess.run([RCSIM, "--help-keys"], capture_output=True, text=True, check=True).stdout
allowed = help_text.split("--output.measures", 1)[1].split("allowed: none | comma list of:", 1)[1].split("\n", 1)[0]
measures = [m.strip() for m in allowed.split("|")]
os.makedirs(WORK, exist_ok=True)
out = os.path.join(WORK, "llama_random.h5")
keys = {"model.tokens": 12, "model.dim": 16, "model.layers": 4, "model.heads": 4, "model.kv_heads": 2,
        "model.key_dim": 4, "model.value_dim": 4, "mask.type": "causal", "norm.type": "rmsnorm",
        "norm.position": "pre", "residual.alpha": 1, "attention.rope": "true", "mlp.width": 24,
        "mlp.activation": "swiglu", "run.trials": 2, "output.measures": ",".join(measures),
        "output.file": out, "output.spectrum": "true"}
r = subprocess.run([RCSIM, "run", "--force"] + [f"--{k}={v}" for k, v in keys.items()], capture_output=True, text=True)
check(r.returncode == 0, f"rcsim run of a random Llama-style stack with {len(measures)} measures "
      f"(exit {r.returncode}{': ' + r.stderr.strip().splitlines()[-1] if r.returncode else ''})")
if r.returncode == 0:
    with h5py.File(out, "r") as f:
        metrics = f["metrics"]
        names = [n for n in metrics if isinstance(metrics[n], h5py.Dataset)]
        # fourier_mode and fourier_k are defined for d = 2 only (token angles), NaN otherwise by design.
        bad = [n for n in names if not n.startswith("fourier_") and not np.isfinite(metrics[n][()]).all()]
        missing = [m for m in ("mu", "attn_sink", "attn_max_weight", "grad_x_norm") if m not in names]
        check(not bad and not missing, f"{len(names)} stored measures, all finite (non-finite: {bad}, "
              f"missing: {missing})")

# 2. stories260K's blocks through the run's weight source equal Model.states.
m = rcsim.load_model(MODEL)
c = m.config
w = m.weights()
d, H, Hkv, L = c["dim"], c["n_heads"], c["n_kv_heads"], c["n_layers"]
s = d // H
ids = [int(i) for i in rcsim.generate(m, steps=23)[0]]  # BOS + 23 greedy ids
want = m.states(ids)  # [L + 1, T, d]
heads = lambda W, n: np.stack([W[:, h * s:(h + 1) * s, :].transpose(0, 2, 1) for h in range(n)], axis=1)
arrays = {
    "W_Q": heads(w["wq"], H), "W_K": heads(w["wk"], Hkv), "W_V": heads(w["wv"], Hkv),  # [L, heads, d, s]
    "W_O": np.stack([w["wo"][:, :, h * s:(h + 1) * s].transpose(0, 2, 1) for h in range(H)], axis=1),  # [L, H, s, d]
    "W_in": w["w1"].transpose(0, 2, 1), "W_gate": w["w3"].transpose(0, 2, 1), "W_out": w["w2"].transpose(0, 2, 1),
    "norm_attn_gain": w["rms_att_weight"], "norm_mlp_gain": w["rms_ffn_weight"],
}
X0 = w["token_embedding"][ids]
got = rcsim.layer(X0, arrays, layers=L, all_layers=True, mask={"type": "causal"},
                  model={"heads": H, "kv_heads": Hkv, "key_dim": s, "value_dim": s},
                  norm={"type": "rmsnorm", "position": "pre"}, residual={"alpha": 1},
                  attention={"rope": "true"}, mlp={"width": c["hidden_dim"], "activation": "swiglu"})
err = np.abs(got - want).max() / np.abs(want).max()
check(got.shape == want.shape and err <= 1e-12,
      f"stories260K's blocks as weight arrays through rcsim.layer = Model.states ({err:.1e} of the largest entry)")
sys.exit(1 if failed else 0)
