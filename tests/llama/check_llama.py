#!/usr/bin/env python3
"""rcsim's Llama forward against an independent float64 NumPy implementation
(llama_reference.py, written from the architecture description) on the shipped stories260K model:
logits within 1e-10 (float64) and 1e-4 (float32) on a greedy 200-token sequence and a sampled
one; the 200 greedy ids are the NumPy model's greedy ids too (each id the argmax of the NumPy
logits at the position before, so NumPy's own greedy decoding gives the same sequence);
`rcsim generate` prints the README's 40 ids; --measure writes the measures of the states;
argument and file errors are one line.

usage: check_llama.py RCSIM BUILD_DIR WORK_DIR
"""
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MODEL = os.path.join(REPO, "configs", "models", "stories260K", "stories260K.bin")
GREEDY40 = ("461 461 401 401 401 461 378 455 473 456 435 299 362 409 283 264 283 452 288 13 "
            "431 431 431 431 431 431 431 431 431 431 431 431 431 293 430 417 363 416 315 342")


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        check.failed = True


check.failed = False


def logits_agree(rcsim, ref, m, r, ids, label):
    want = ref.logits(r, list(ids))
    d64 = np.abs(m.logits(ids) - want).max()
    d32 = np.abs(m.logits(ids, precision="float32") - want).max()
    check(d64 <= 1e-10, f"{label}: float64 logits within 1e-10 of NumPy ({d64:.2e}, largest |logit| {np.abs(want).max():.1f})")
    check(d32 <= 1e-4, f"{label}: float32 logits within 1e-4 of NumPy ({d32:.2e})")
    return want


def cli_checks(exe, work):
    out = subprocess.run([exe, "generate", MODEL], capture_output=True, text=True)
    check(out.returncode == 0 and out.stdout.strip() == "1 " + GREEDY40, "rcsim generate: the README's 40 greedy ids")
    bad = os.path.join(work, "truncated.bin")
    with open(MODEL, "rb") as f, open(bad, "wb") as g:
        g.write(f.read(1000))
    out = subprocess.run([exe, "generate", bad], capture_output=True, text=True)
    check(out.returncode == 2 and out.stderr.count("\n") == 1 and "truncated.bin" in out.stderr
          and "truncated" in out.stderr, f"truncated checkpoint: exit 2, one line ({out.stderr.strip()})")
    out = subprocess.run([exe, "generate", MODEL, "--ids=1 600"], capture_output=True, text=True)
    check(out.returncode == 2 and "token id 600" in out.stderr, f"id outside the vocabulary: exit 2 ({out.stderr.strip()})")


def measure_checks(rcsim, exe, m, work):
    import h5py
    run = os.path.join(work, "run.h5")
    ids = os.path.join(work, "ids.txt")
    cmd = [exe, "generate", MODEL, "--steps=31", "--sequences=3", "--temperature=1", "--seed=4", "--ids-out", ids,
           "--measure", run, "--force", "--quiet"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    check(out.returncode == 0, f"rcsim generate --measure ({out.stderr.strip()})")
    seqs = np.loadtxt(ids, dtype=np.int64)
    check((seqs == rcsim.generate(m, steps=31, sequences=3, temperature=1.0, seed=4)).all(),
          "rcsim.generate equals rcsim generate (sampled, seed 4)")
    with h5py.File(run, "r") as f:
        check((f["token_ids"][()] == seqs).all(), "/token_ids holds the sequences")
        mu = f["metrics/mu"][()]
        cos = f["metrics/cos_abs_mean"][()]
        sigma = f["metrics/spectrum"][()]
    want = [rcsim.measures(m.states(s)) for s in seqs]
    check(np.allclose(mu, [w["mu"] for w in want], rtol=1e-12, atol=0),
          "run file's mu equals rcsim.measures of Model.states")
    check(np.allclose(cos, [w["cos_abs_mean"] for w in want], rtol=1e-12), "and cos_abs_mean")
    states = m.states(seqs[0])
    sv = np.linalg.svd(states, compute_uv=False)
    check(np.allclose(sigma[0], sv, rtol=1e-10, atol=1e-12 * sv.max()), "spectrum equals NumPy's singular values")


def api_checks(rcsim, m):
    for call, what in [(lambda: rcsim.load_model(3), "load_model(3)"),
                       (lambda: rcsim.generate(m, steps=-1), "generate(steps=-1)"),
                       (lambda: rcsim.generate(m, temperature=float("nan")), "generate(temperature=nan)"),
                       (lambda: m.logits([1.5, 2]), "logits of floats"),
                       (lambda: m.logits([1, 512]), "logits of id 512"),
                       (lambda: rcsim.load_model(os.path.join(REPO, "VERSION")), "load_model of a text file"),
                       (lambda: m.gradients([1, 2, 3], targets=[2, 3]), "gradients with 2 targets for 3 ids"),
                       (lambda: m.gradients([1, 2], targets=[2, 512]), "gradients with target 512"),
                       (lambda: m.gradients([1, 2], cotangent=np.ones((2, 3))), "gradients with a [2, 3] cotangent"),
                       (lambda: m.gradients([1, 2], targets=[2, -1], cotangent=np.ones((2, 64))),
                        "gradients with targets and a cotangent"),
                       (lambda: m.gradients([1] * 512, depth=100000), "gradients keeping 24 GiB of activations")]:
        try:
            call()
            check(False, f"{what} refused")
        except rcsim.ConfigError as e:
            check("\n" not in str(e), f"{what} refused: {e}")


def main():
    exe, build, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    sys.path.insert(0, os.path.join(build, "python"))
    sys.path.insert(0, HERE)
    import rcsim
    import llama_reference as ref
    m = rcsim.load_model(MODEL)
    r = ref.load(MODEL)
    greedy = rcsim.generate(m, steps=200)[0]
    check(" ".join(map(str, greedy[1:41])) == GREEDY40, "rcsim.generate: the README's 40 greedy ids")
    want = logits_agree(rcsim, ref, m, r, greedy, "greedy 200")
    top2 = np.sort(want[:-1], axis=1)[:, -2:]
    check((np.argmax(want[:-1], axis=1) == greedy[1:]).all(),
          f"the 200 greedy ids are NumPy's greedy ids (smallest top-two gap {np.min(top2[:, 1] - top2[:, 0]):.2e})")
    check((rcsim.generate(m, steps=200, precision="float32")[0] == greedy).all(), "float32 greedy: the same 200 ids")
    logits_agree(rcsim, ref, m, r, rcsim.generate(m, steps=120, temperature=1.0, seed=11)[0], "sampled 120")
    cli_checks(exe, work)
    measure_checks(rcsim, exe, m, work)
    api_checks(rcsim, m)
    z = ref.logits(r, list(greedy[:50]))
    z = z - z.max(axis=1, keepdims=True)
    nll = -(z[np.arange(49), greedy[1:50]] - np.log(np.exp(z[:49]).sum(axis=1))).sum()
    try:
        m.with_random_blocks(1).gradients(greedy[:64], norm=False, depth=20)
        check(False, "a forward pass that overflows raises FloatingPointError")
    except FloatingPointError as e:
        check("forward pass turned non-finite" in str(e), f"an overflow raises FloatingPointError: {e}")
    loss = m.gradients(greedy[:50])["loss"]
    check(abs(loss - nll) <= 1e-12 * nll, f"Model.gradients' loss is NumPy's cross-entropy of the next ids ({loss:.6f})")
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
