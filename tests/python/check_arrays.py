#!/usr/bin/env python3
"""NumPy in and out of rcsim.simulate, and rcsim.measures on arrays (issue 21).

Usage: check_arrays.py BUILD_DIR WORK_DIR

- x0, weights and mask given as arrays give the same run, value for value, as the same arrays
  written to the HDF5 files of init.file, weights.file and mask.file (the file route is the
  reference: it is the one the CLI and the existing tests pin);
- a torch tensor and a bool mask are taken; a wrong shape, an unused array, a non-finite value
  and a mask that is not 0/1 raise ConfigError naming the array and what is allowed;
- rcsim.measures on the stored token snapshots equals the run's /metrics (the same functions),
  and on hand-worked matrices gives the textbook values (identical rows: mu = 0, rank 1;
  diag(3, 2, 1): singular values 3, 2, 1, stable rank 14/9);
- progress callbacks see (done, total) ending at (T, T); progress=True counts T x (L + 1) layers;
  group="all" returns every group;
- one multi-head attention layer with torch.nn.MultiheadAttention's weights (value and output
  projections; without and with biases) gives torch's output (float64, 1e-12), if torch is installed;
- rcsim.gradients agrees with central finite differences of rcsim.layer along random directions
  (1e-7; a gradient with one entry wrong fails) and with torch autograd through
  nn.MultiheadAttention applied three times (1e-10, if torch is installed);
- an additive logit bias matrix (weights={"logit_bias": B}) equals torch's float attn_mask, forward
  (1e-12) and autograd (1e-10).
"""
import os
import sys

import h5py
import numpy as np

build, work = sys.argv[1:3]
sys.path.insert(0, os.path.join(build, "python"))
import rcsim  # noqa: E402

os.makedirs(work, exist_ok=True)
failures = []


def check(cond, what):
    print("ok  " if cond else "FAIL", what)
    if not cond:
        failures.append(what)


def raises(fn, *needles):
    try:
        fn()
    except rcsim.ConfigError as e:
        return all(n in str(e) for n in needles) or print("    message:", e)
    return False


def equal(x, y):
    x, y = np.asarray(x), np.asarray(y)
    return np.array_equal(x, y, equal_nan=x.dtype.kind == "f" and y.dtype.kind == "f")


def same(a, b):
    """Every variable equal (NaN where NaN); the stored configuration's file names aside."""
    return set(a.data_vars) == set(b.data_vars) and all(equal(a[v].values, b[v].values) for v in a.data_vars
                                                        if v != "config")


N, d, L, T = 6, 4, 5, 3
rng = np.random.default_rng(7)
base = {"model.tokens": N, "model.dim": d, "model.layers": L, "run.trials": T, "norm.type": "layernorm",
        "residual.alpha": 0.5, "output.tokens": "all", "output.file": os.path.join(work, "unused.h5")}

# 1. X(0) per trial, weights per layer, a custom mask: arrays against files.
x0 = rng.standard_normal((T, N, d))
w = {"W_Q": rng.standard_normal((L, d, d)) / 2, "W_K": rng.standard_normal((L, d, d)) / 2,
     "W_V": rng.standard_normal((d, d)) / 2}
mask = np.tril(np.ones((N, N), dtype=bool)) | np.eye(N, k=1, dtype=bool)
files = os.path.join(work, "inputs.h5")
with h5py.File(files, "w") as f:
    f["X0"] = x0
    for k, v in w.items():
        f[k] = v
    f["mask"] = mask.astype(np.uint8)
by_file = dict(base, **{"init.type": "file", "init.file": files, "weights.file": files, "weights.q": "file",
                        "weights.k": "file", "weights.v": "file", "mask.type": "custom", "mask.file": files})
ref = rcsim.simulate(keys=by_file, group="all")
got = rcsim.simulate(keys=base, x0=x0, weights=w, mask=mask, group="all")
check(set(got) == {"metrics", "summary", "diagnostics", "/"}, "group='all' returns every group")
for g in ref:
    check(same(ref[g], got[g]), f"arrays = files, group {g}")

# 2. A shared X(0) [N, d] as a torch tensor, a 0/1 integer mask.
try:
    import torch
except ImportError:
    torch = None
x_shared = rng.standard_normal((N, d))
with h5py.File(files, "a") as f:
    f["X0_shared"] = x_shared
    f.move("X0", "X0_trials")
    f.move("X0_shared", "X0")
ref = rcsim.simulate(keys=dict(by_file), group="/")
x_in = torch.tensor(x_shared) if torch is not None else x_shared
got = rcsim.simulate(keys=base, x0=x_in, weights=w, mask=mask.astype(np.int64), group="/")
check(np.array_equal(ref.tokens.values, got.tokens.values), "shared X(0) (torch tensor if torch), 0/1 int mask")

# 3. Errors name the array and what is allowed.
check(raises(lambda: rcsim.simulate(keys=base, weights={"W_Q": np.ones((d, d + 1)), "W_K": w["W_K"],
                                                        "W_V": w["W_V"]}),
             "W_Q", "[4, 5]", "expected [4, 4] or [5, 4, 4]"), "wrong shape names W_Q, its shape and the allowed ones")
check(raises(lambda: rcsim.simulate(keys=dict(base, **{"weights.q": "gaussian"}), weights=w), "W_Q", "not used"),
      "an array the configuration does not use is refused")
check(raises(lambda: rcsim.simulate(keys=base, x0=np.full((N, d), np.nan)), "X0", "non-finite"),
      "a non-finite X(0) is refused")
check(raises(lambda: rcsim.simulate(keys=base, mask=np.full((N, N), 2)), "mask", "0/1"), "mask of 2s is refused")
check(raises(lambda: rcsim.simulate(keys=base, mask=np.ones((N - 1, N - 1))), "mask", "expected 6 x 6"),
      "mask of the wrong size names both sizes")
check(raises(lambda: rcsim.simulate(keys=base, weights={"W_X": np.ones((d, d))}), "weights.W_X"),
      "an unknown name in weights= is an unknown key, named")
ref = rcsim.simulate(keys=dict(by_file, **{"weights.v": "orthogonal"}))
got = rcsim.simulate(keys=base, x0=x_shared, weights={"W_Q": w["W_Q"], "W_K": w["W_K"], "v": "orthogonal"},
                     mask=mask)
check(same(ref, got),
      "weights= mixes arrays and [weights] keys (v = orthogonal); mask= as a section still works")
check(rcsim.simulate(keys=base, mask={"type": "causal"}).attrs["mask_type"] == "causal",
      "mask={'type': 'causal'} is the [mask] section")

# 4. measures on arrays: the run's own numbers, and hand-worked cases.
run = rcsim.simulate(keys=base, group="all")
tokens = run["/"].tokens.values  # [trial, layer, N, d]
m = rcsim.measures(tokens)
for name in ("mu", "mu_rel", "fro_norm", "sigma_min", "sigma_max", "rank", "rank_one_residual", "stable_rank",
             "cos_abs_mean"):
    check(m[name].shape == (T, L + 1) and np.array_equal(m[name], run["metrics"][name].values, equal_nan=True),
          f"measures(tokens).{name} = the run's /metrics/{name}")
rows = np.tile(rng.standard_normal(d), (N, 1))
m1 = rcsim.measures(rows)
check(m1["mu"] < 1e-12 * np.linalg.norm(rows) and m1["rank"] == 1, "identical rows: mu = 0, rank 1")
m2 = rcsim.measures(np.diag([3.0, 2.0, 1.0]))
check(np.allclose(m2["sigma"], [3, 2, 1], rtol=1e-14) and abs(m2["stable_rank"] - 14 / 9) < 1e-14,
      "diag(3, 2, 1): sigma = (3, 2, 1), stable rank 14/9")
check(m["sigma"].shape == (T, L + 1, min(N, d)), "sigma has shape (..., min(N, d))")

# rcsim.clusters: the partition the cluster measures count, with sizes and centres. Against an
# independent breadth-first search on the cosine graph (numbers in order of first token) on the
# stored snapshots, and the count against the run's own clusters measure.
def components(X, tau):
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    adj = (U @ U.T) > tau
    label = -np.ones(len(X), dtype=int)
    k = 0
    for s in range(len(X)):
        if label[s] < 0:
            label[s], stack = k, [s]
            while stack:
                i = stack.pop()
                for j in np.nonzero(adj[i] & (label < 0))[0]:
                    label[j] = k
                    stack.append(j)
            k += 1
    return label


crun = rcsim.simulate(keys=dict(base, **{"output.tokens": "all", "output.measures": "clusters", "metrics.cluster_tau": "0.9"}),
                      group="all")
ok = True
for t in range(T):
    for layer_index in range(L + 1):
        X = crun["/"].tokens.values[t, layer_index]
        c = rcsim.clusters(X, 0.9)
        lab = components(X, 0.9)
        k = lab.max() + 1
        ok &= np.array_equal(c["label"], lab) and np.array_equal(c["size"], np.bincount(lab))
        ok &= len(c["size"]) == crun["metrics"]["clusters"].values[t, layer_index]
        U = X / np.linalg.norm(X, axis=1, keepdims=True)
        centres = np.array([U[lab == j].sum(0) / np.linalg.norm(U[lab == j].sum(0)) for j in range(k)])
        ok &= c["centre"].shape == (k, d) and np.abs(c["centre"] - centres).max() < 1e-14
check(ok, "rcsim.clusters: labels, sizes and centres equal an independent search, counts the run's clusters")
try:
    rcsim.clusters(np.ones((2, 3, 4)), 0.5)
    refused = False
except ValueError as e:
    refused = "(N, d)" in str(e)
check(refused, "rcsim.clusters refuses a 3-d array, naming the shape (N, d)")

# 5. Progress.
seen = []
rcsim.simulate(keys=dict(base, **{"run.trials": 5}), progress=lambda k, n: seen.append((k, n)))
check(seen and seen[-1] == (5, 5) and all(b == 5 for _, b in seen), f"progress callback ends at (5, 5): {seen}")
# progress=True counts layers: trials x (L + 1) (issue 39), in tqdm's text bar (no ipywidgets here)
# or the stderr line; the engine's layer count itself ends at (5 x 8, 40).
import contextlib  # noqa: E402
import io  # noqa: E402
layer_keys = dict(base, **{"run.trials": 5, "model.layers": 7})
layers_seen = []
rcsim.engine._engine().run_image([f"--{k}={v}" for k, v in layer_keys.items()], None, "check", True, {}, None, None,
                                 "check", lambda k, n: layers_seen.append((k, n)))
check(layers_seen and layers_seen[-1] == (40, 40), f"the engine's layer progress ends at (40, 40): {layers_seen[-3:]}")
err = io.StringIO()
with contextlib.redirect_stderr(err):
    rcsim.simulate(keys=layer_keys, progress=True)
check("40/40" in err.getvalue() and "layer" in err.getvalue() and "IProgress" not in err.getvalue(),
      f"progress=True: a bar of 40 layers: {err.getvalue().strip()[-120:]!r}")

# 5b. Concurrent calls from Python threads give what serial calls give (each call's in-memory file
# has its own name; HDF5 is Debian's thread-safe build).
import threading  # noqa: E402
seeds = list(range(1, 9))
serial = {s: rcsim.simulate(keys=dict(base, **{"run.seed": s})).mu.values for s in seeds}
parallel, errors = {}, []


def worker(s):
    try:
        parallel[s] = rcsim.simulate(keys=dict(base, **{"run.seed": s, "run.threads": 1})).mu.values
    except Exception as e:  # noqa: BLE001
        errors.append(repr(e))


threads = [threading.Thread(target=worker, args=(s,)) for s in seeds]
for t in threads:
    t.start()
for t in threads:
    t.join()
check(not errors and all(np.array_equal(serial[s], parallel[s]) for s in seeds),
      f"8 concurrent simulate() calls = serial ones {errors[:1]}")

# 5c. The main thread ends (or gets Ctrl-C) while a daemon thread is inside simulate(): the
# interpreter finalizes and exits as Python does (before: abort, "terminate called without an active
# exception", when the daemon thread took the GIL back during finalization).
import subprocess  # noqa: E402
script = f"""
import sys, threading, time, os, signal
sys.path.insert(0, {os.path.join(build, "python")!r})
import rcsim
def work():
    rcsim.simulate(model={{"tokens": 96, "dim": 48, "layers": 400}}, run={{"trials": 64}})
threading.Thread(target=work, daemon=True).start()
time.sleep(0.5)
if sys.argv[1] == "sigint":
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
sys.exit(0)
"""
for how, code in (("exit", 0), ("sigint", -2)):  # an uncaught KeyboardInterrupt ends Python by SIGINT
    r = subprocess.run([sys.executable, "-c", script, how], capture_output=True, text=True, timeout=300)
    check(r.returncode == code and "terminate" not in r.stderr,
          f"daemon thread in simulate() when the main thread ends by {how}: exit {r.returncode} (want {code})")

# 5d. Signals in any thread while a non-daemon worker thread is inside simulate(): Ctrl-C to the
# process (the main thread waits for the worker), SIGINT sent to the worker thread itself
# (pthread_kill: Python runs its handler in the main thread), and SIGTERM (Python's default: the
# process ends by SIGTERM). Python's own outcome every time; never an abort or a crash.
script = f"""
import sys, threading, time, os, signal
sys.path.insert(0, {os.path.join(build, "python")!r})
import rcsim
def work():
    rcsim.simulate(model={{"tokens": 96, "dim": 48, "layers": 400}}, run={{"trials": 64}})
t = threading.Thread(target=work)
t.start()
time.sleep(0.5)
if sys.argv[1] == "sigint":
    os.kill(os.getpid(), signal.SIGINT)
elif sys.argv[1] == "sigint_to_worker":
    signal.pthread_kill(t.ident, signal.SIGINT)
else:
    os.kill(os.getpid(), signal.SIGTERM)
t.join()
"""
# An uncaught KeyboardInterrupt in the main thread ends Python by SIGINT (-2) once the worker is
# done, or with exit 1 if it came while the main thread was already shutting down.
for how, codes in (("sigint", (-2, 1)), ("sigint_to_worker", (-2, 1)), ("sigterm", (-15,))):
    r = subprocess.run([sys.executable, "-c", script, how], capture_output=True, text=True, timeout=300)
    check(r.returncode in codes and "terminate" not in r.stderr and "Fatal Python error" not in r.stderr,
          f"{how} while a worker thread is in simulate(): exit {r.returncode} (want one of {codes})")

# 6. torch.nn.MultiheadAttention's weights in rcsim: the same layer output.
if torch is None:
    print("skip torch.nn.MultiheadAttention comparison: torch not installed")
else:
    H, dm, n = 2, 8, 5
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(dm, H, bias=False, batch_first=True).double()
    x = torch.randn(1, n, dm, dtype=torch.float64)
    y_torch = mha(x, x, x, need_weights=False)[0][0].detach().numpy()
    wq, wk, wv = mha.in_proj_weight.detach().numpy().reshape(3, dm, dm)  # y = x W^T, rows = output features
    wo = mha.out_proj.weight.detach().numpy()
    dh = dm // H
    heads = lambda W: np.stack([W[h * dh:(h + 1) * dh].T for h in range(H)])  # [H, d, d_h]
    weights = {"W_Q": heads(wq), "W_K": heads(wk), "W_V": heads(wv),
               "W_O": np.stack([wo[:, h * dh:(h + 1) * dh].T for h in range(H)])}  # [H, d_h, d]
    keys = {"model.tokens": n, "model.dim": dm, "model.heads": H, "model.key_dim": dh, "model.value_dim": dh,
            "model.layers": 1, "run.trials": 1, "norm.type": "none", "output.tokens": "final"}
    y = rcsim.simulate(keys=keys, x0=x[0].numpy(), weights=weights, group="/").tokens.values[0, -1]
    err = np.abs(y - y_torch).max() / np.abs(y_torch).max()
    check(err < 1e-12, f"torch.nn.MultiheadAttention (H = 2, d = 8) = rcsim's layer: max rel. difference {err:.1e}")
    y2 = rcsim.layer(x[0], weights, model={"heads": H, "key_dim": dh, "value_dim": dh}, norm={"type": "none"})
    check(np.array_equal(y, y2), "rcsim.layer gives the same X(1) as simulate")
    stack = rcsim.layer(x[0], weights, layers=3, all_layers=True,
                        model={"heads": H, "key_dim": dh, "value_dim": dh}, norm={"type": "none"})
    y3 = x[0]
    for _ in range(3):  # the same module applied three times (one array serves every layer)
        y3 = mha(y3[None], y3[None], y3[None], need_weights=False)[0][0]
    err3 = np.abs(stack[-1] - y3.detach().numpy()).max() / np.abs(y3.detach().numpy()).max()
    check(stack.shape == (4, n, dm) and np.array_equal(stack[0], x[0].numpy()) and err3 < 1e-11,
          f"rcsim.layer(layers=3, all_layers=True): [4, N, d], X(0) first, X(3) = torch's three layers ({err3:.1e})")
    # With biases (nn.MultiheadAttention's default bias=True): in_proj_bias -> b_Q, b_K, b_V per head,
    # out_proj.bias -> b_O (attention.bias = true, implied by the arrays).
    mhb = torch.nn.MultiheadAttention(dm, H, bias=True, batch_first=True).double()
    torch.nn.init.normal_(mhb.in_proj_bias, 0.0, 0.5)
    torch.nn.init.normal_(mhb.out_proj.bias, 0.0, 0.5)
    yb_torch = mhb(x, x, x, need_weights=False)[0][0].detach().numpy()
    wq, wk, wv = mhb.in_proj_weight.detach().numpy().reshape(3, dm, dm)
    bq, bk, bv = mhb.in_proj_bias.detach().numpy().reshape(3, H, dh)
    wo = mhb.out_proj.weight.detach().numpy()
    weights_b = {"W_Q": heads(wq), "W_K": heads(wk), "W_V": heads(wv),
                 "W_O": np.stack([wo[:, h * dh:(h + 1) * dh].T for h in range(H)]),
                 "b_Q": bq, "b_K": bk, "b_V": bv, "b_O": mhb.out_proj.bias.detach().numpy()}
    yb = rcsim.simulate(keys=keys, x0=x[0].numpy(), weights=weights_b, group="/").tokens.values[0, -1]
    errb = np.abs(yb - yb_torch).max() / np.abs(yb_torch).max()
    check(errb < 1e-12, f"torch.nn.MultiheadAttention with biases = rcsim's layer (attention.bias): {errb:.1e}")

# 7. rcsim.gradients: the reverse pass of rcsim.layer's model, against central finite differences
# of rcsim.layer itself and (if installed) torch autograd through nn.MultiheadAttention.
Xg, Cg = rng.standard_normal((5, 4)), rng.standard_normal((5, 4))
wg = {name: 0.6 * rng.standard_normal((4, 4)) for name in ("W_Q", "W_K", "W_V")}  # one array: every layer
kw = dict(layers=2, norm={"type": "layernorm", "position": "pre"}, residual={"alpha": 1}, mask={"type": "causal"})
g = rcsim.gradients(Xg, Cg, wg, **kw)
check(g["dX"].shape == (3, 5, 4) and g["W_Q"].shape == (2, 1, 4, 4) and g["norm_gain"].shape == (2, 4, 1, 4)
      and np.array_equal(g["dX"][-1], Cg) and np.array_equal(g["X"], rcsim.layer(Xg, wg, **kw)),
      "rcsim.gradients: dX [L+1, N, d] ending in the cotangent, W_Q [L, H, d, d_k], X = rcsim.layer's output")


# Directional central differences (the C++ tests check every entry): along a few random unit
# directions V of one array, <gradient, V> against (loss(x + hV) - loss(x - hV)) / 2h, the error
# ||<g, V_k> - FD_k|| / ||FD_k|| over the directions k. Two engine calls per direction, where every entry
# took two: the same settings and arrays at a tenth of the calls. The same comparison on the gradient
# with one entry (its largest) off by 1e-5 of its norm must fail: the directions see every entry.
directions = np.random.default_rng(11)


def directional_fd(array, loss, count=3, h=1e-5):
    """The directions V [count, *array.shape] and the central differences of `loss` along them
    (`array` is modified and restored bitwise)."""
    keep = array.copy()
    V = directions.standard_normal((count,) + array.shape)
    V /= np.linalg.norm(V.reshape(count, -1), axis=1).reshape((count,) + (1,) * array.ndim)
    diffs = []
    for v in V:
        array[...] = keep + h * v
        up = loss()
        array[...] = keep - h * v
        down = loss()
        array[...] = keep
        diffs.append((up - down) / (2 * h))
    return V, np.array(diffs)


def check_directional(what, grad, array, loss, tol=1e-7):
    V, ref = directional_fd(array, loss)
    error = lambda g: np.linalg.norm(np.tensordot(V, g, axes=g.ndim) - ref) / np.linalg.norm(ref)
    wrong = grad.copy()
    wrong.flat[np.argmax(np.abs(grad))] += 1e-5 * np.linalg.norm(grad)
    err, caught = error(grad), error(wrong)
    check(err < tol and caught > tol, f"rcsim.gradients {what} = directional finite differences of rcsim.layer: "
                                      f"{err:.1e} (one entry off by 1e-5 |g|: {caught:.1e})")


def layer_loss():
    return float((rcsim.layer(Xg, wg, **kw) * Cg).sum())


for name, mine, array in (("X(0)", g["dX"][0], Xg),
                          ("W_Q (summed over the layers sharing it)", g["W_Q"].sum(axis=0)[0], wg["W_Q"]),
                          ("W_V", g["W_V"].sum(axis=0)[0], wg["W_V"])):
    check_directional(f"with respect to {name}", mine, array, layer_loss)
check(raises(lambda: rcsim.gradients(Xg, Cg, wg, dynamics={"integrator": "rk4"}, **kw), "rk4"),
      "rcsim.gradients with dynamics.integrator = rk4 and pre-LN: ConfigError naming rk4")
# The particle settings (issue 23, item 1): RK4 with the tangent projection and noise, random-Markov
# attention; post, sphere. rcsim.gradients against finite differences of rcsim.layer (the same draws).
for extra in (dict(residual={"alpha": 0.5, "project": "tangent"}, dynamics={"integrator": "rk4", "noise": 0.2}),
              dict(residual={"alpha": 0.5}, attention={"kind": "random_markov"})):
    kwp = dict(layers=2, norm={"type": "sphere", "position": "post"}, mask={"type": "causal"}, **extra)
    gp = rcsim.gradients(Xg, Cg, wg, **kwp)
    loss_p = lambda: float((rcsim.layer(Xg, wg, **kwp) * Cg).sum())
    markov = "attention" in extra
    for name, mine, array in (("X(0)", gp["dX"][0], Xg), ("W_Q", gp["W_Q"].sum(axis=0)[0], wg["W_Q"]),
                              ("W_V", gp["W_V"].sum(axis=0)[0], wg["W_V"])):
        if markov and name == "W_Q":
            check(np.all(mine == 0) and np.all(directional_fd(array, loss_p)[1] == 0),
                  "rcsim.gradients random_markov: W_Q's gradient exactly 0, as FD's")
            continue
        check_directional(f"({'random_markov' if markov else 'rk4 + tangent + noise'}) with respect to {name}", mine,
                          array, loss_p)
if torch is not None:
    xt = x[0].clone().requires_grad_()
    y3 = xt
    for _ in range(3):
        y3 = mhb(y3[None], y3[None], y3[None], need_weights=False)[0][0]
    ct = torch.randn(n, dm, dtype=torch.float64)
    mhb.zero_grad()
    (y3 * ct).sum().backward()
    gt = rcsim.gradients(x[0].numpy(), ct.numpy(), weights_b, layers=3, model={"heads": H, "key_dim": dh, "value_dim": dh},
                         norm={"type": "none"})
    gw = mhb.in_proj_weight.grad.numpy()
    wq_ref = np.stack([gw[h * dh:(h + 1) * dh].T for h in range(H)])  # dL/dW_Q per head, summed over layers
    pairs = (("X(0)", gt["dX"][0], xt.grad.numpy()), ("W_Q", gt["W_Q"].sum(axis=0), wq_ref),
             ("b_O", gt["b_O"].sum(axis=0).ravel(), mhb.out_proj.bias.grad.numpy()))
    for name, mine, ref in pairs:
        err = np.linalg.norm(mine - ref) / np.linalg.norm(ref)
        check(err < 1e-10, f"rcsim.gradients = torch autograd through nn.MultiheadAttention x 3 ({name}): {err:.1e}")
    # run.precision = float32: rcsim's float reverse pass against torch autograd in float32 (the same
    # weights rounded to float), and not equal to rcsim's float64 gradients (float arithmetic was used).
    import copy
    mhf = copy.deepcopy(mhb).float()
    xf = x[0].float().clone().requires_grad_()
    yf = xf
    for _ in range(3):
        yf = mhf(yf[None], yf[None], yf[None], need_weights=False)[0][0]
    (yf * ct.float()).sum().backward()
    gf = rcsim.gradients(x[0].float().double().numpy(), ct.float().double().numpy(), weights_b, layers=3,
                         model={"heads": H, "key_dim": dh, "value_dim": dh}, norm={"type": "none"},
                         run={"precision": "float32"})
    gwf = mhf.in_proj_weight.grad.double().numpy()
    pairs = (("X(0)", gf["dX"][0], xf.grad.double().numpy(), gt["dX"][0]),
             ("W_Q", gf["W_Q"].sum(axis=0), np.stack([gwf[h * dh:(h + 1) * dh].T for h in range(H)]), gt["W_Q"].sum(axis=0)))
    for name, mine, ref, f64 in pairs:
        err = np.linalg.norm(mine - ref) / np.linalg.norm(ref)
        gap = np.linalg.norm(mine - f64) / np.linalg.norm(f64)
        check(err < 1e-4 and gap > 1e-12,
              f"rcsim.gradients in float32 = torch float32 autograd x 3 ({name}): {err:.1e}; from float64: {gap:.1e}")

# 8. An additive logit bias matrix (weights={"logit_bias": B} -> attention.logit_bias = file) against
# torch's float attn_mask, which nn.MultiheadAttention adds to each head's logits: forward and autograd.
if torch is not None:
    B = 1.5 * rng.standard_normal((H, n, n))
    Bt = torch.from_numpy(B)
    weights_B = dict(weights_b, logit_bias=B)
    yB_torch = mhb(x, x, x, attn_mask=Bt, need_weights=False)[0][0].detach().numpy()
    yB = rcsim.simulate(keys=keys, x0=x[0].numpy(), weights=weights_B, group="/").tokens.values[0, -1]
    errB = np.abs(yB - yB_torch).max() / np.abs(yB_torch).max()
    gapB = np.abs(yb - yB_torch).max() / np.abs(yB_torch).max()  # the unbiased layer differs
    check(errB < 1e-12 and gapB > 1e-3,
          f"logit_bias B = torch's float attn_mask (per head): {errB:.1e}; without B: {gapB:.1e}")
    xt = x[0].clone().requires_grad_()
    y3 = xt
    for _ in range(3):
        y3 = mhb(y3[None], y3[None], y3[None], attn_mask=Bt, need_weights=False)[0][0]
    mhb.zero_grad()
    (y3 * ct).sum().backward()
    gB = rcsim.gradients(x[0].numpy(), ct.numpy(), weights_B, layers=3,
                         model={"heads": H, "key_dim": dh, "value_dim": dh}, norm={"type": "none"})
    gw = mhb.in_proj_weight.grad.numpy()
    for name, mine, ref in (("X(0)", gB["dX"][0], xt.grad.numpy()),
                            ("W_K", gB["W_K"].sum(axis=0), np.stack([gw[dm + h * dh:dm + (h + 1) * dh].T for h in range(H)]))):
        err = np.linalg.norm(mine - ref) / np.linalg.norm(ref)
        check(err < 1e-10, f"rcsim.gradients with logit_bias = torch autograd with attn_mask x 3 ({name}): {err:.1e}")

# Grouped-query attention (model.kv_heads = 2 of 4 heads) with attention biases: W_K, W_V, b_K, b_V
# per key/value head, their gradients summed over the query heads sharing them.
wq = {"W_Q": 0.6 * rng.standard_normal((4, 4, 4)), "W_K": 0.6 * rng.standard_normal((2, 4, 4)),
      "W_V": 0.6 * rng.standard_normal((2, 4, 4)), "b_Q": 0.5 * rng.standard_normal((4, 4)),
      "b_K": 0.5 * rng.standard_normal((2, 4)), "b_V": 0.5 * rng.standard_normal((2, 4)),
      "b_O": 0.5 * rng.standard_normal(4)}
kwq = dict(kw, model={"heads": 4, "kv_heads": 2}, attention={"bias": True})
gq = rcsim.gradients(Xg, Cg, wq, **kwq)
check(gq["W_Q"].shape == (2, 4, 4, 4) and gq["W_K"].shape == (2, 2, 4, 4) and gq["b_V"].shape == (2, 2, 1, 4),
      "rcsim.gradients with model.kv_heads = 2: W_Q [L, 4, ...], W_K [L, 2, ...], b_V [L, 2, 1, d]")
for name in ("W_K", "W_V", "b_V"):
    check_directional(f"with model.kv_heads = 2 with respect to {name}",
                      gq[name].sum(axis=0).reshape(wq[name].shape), wq[name],
                      lambda: float((rcsim.layer(Xg, wq, **kwq) * Cg).sum()))

# The gated MLP (mlp.activation = swiglu, issue 45): weights={"W_in", "W_gate", "W_out"} (-> weights.mlp =
# file). With W_V = 0, no normalisation and pre placement one block is X + (silu(X W_in) * (X W_gate)) W_out.
ws_ = {"W_Q": 0.6 * rng.standard_normal((4, 4)), "W_K": 0.6 * rng.standard_normal((4, 4)), "W_V": np.zeros((4, 4)),
       "W_in": 0.5 * rng.standard_normal((4, 6)), "W_gate": 0.5 * rng.standard_normal((4, 6)),
       "W_out": 0.5 * rng.standard_normal((6, 4))}
kws = dict(norm={"type": "none", "position": "pre"}, residual={"alpha": 1}, mlp={"width": 6, "activation": "swiglu"})
Z = Xg @ ws_["W_in"]
want = Xg + (Z / (1 + np.exp(-Z)) * (Xg @ ws_["W_gate"])) @ ws_["W_out"]
errs = np.abs(rcsim.layer(Xg, ws_, layers=1, **kws) - want).max() / np.abs(want).max()
check(errs < 1e-14, f"rcsim.layer with mlp.activation = swiglu and W_gate = NumPy's gated MLP: {errs:.1e}")
ws_["W_V"] = 0.6 * rng.standard_normal((4, 4))
kws = dict(kw, mlp={"width": 6, "activation": "swiglu"})
gs = rcsim.gradients(Xg, Cg, ws_, **kws)
check(gs["W_gate"].shape == (2, 1, 4, 6), "rcsim.gradients with swiglu: W_gate [L, 1, d, m]")
check_directional("with mlp.activation = swiglu with respect to W_gate", gs["W_gate"].sum(axis=0)[0], ws_["W_gate"],
                  lambda: float((rcsim.layer(Xg, ws_, **kws) * Cg).sum()))

if failures:
    sys.exit(f"check_arrays: {len(failures)} failure(s)")
print("check_arrays: all passed")
