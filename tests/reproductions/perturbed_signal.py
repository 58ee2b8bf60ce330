#!/usr/bin/env python3
"""The signal-propagation reproductions (analysis/signal_*.py, docs/science/gradients.md, "Reproductions") can
fail: each runs at --tiny size as it is (exit status 0 required) and with --perturb, a deliberately wrong setting
that changes the physics its claim is about (exit status 1 with a line "<what> failed: ..." naming the claim
required; a crash, a usage error or a pass is a failure of this test).

usage: perturbed_signal.py RCSIM WORKDIR [--only CASE ...]
  RCSIM    the rcsim executable (signal_kedia.py imports the package of the build beside it, BUILD/python)
  WORKDIR  a folder for the scripts' data and figures (created)
  CASE     noci, periln, gap, cowsik, cowsik_authors (signal_cowsik.py --authors), alekseev, differential,
           kedia, kedia_dropout;
           default: all
Exit status 0 when every expectation holds, 1 naming the ones that do not, 2 for a usage error.
"""
import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# case -> (script, its options, the wrong setting (KEY=VALUE pairs), what it breaks). Each changes what the claim is
# about.
CASES = {
    "noci": ("signal_noci", [], ["residual.alpha=1"],
             "the branch scale ignored: both arms unscaled, so 1/sqrt(L) cannot prevent the alignment"),
    "periln": ("signal_periln", [], ["norm.position=pre"],
               "the placement ignored: post and peri run as pre-LN (post unbounded, peri follows the scale)"),
    "gap": ("signal_gap", [], ["attention.shape_c=0"], "the spectral gap left in: 'gap removed' is random-Markov A"),
    "cowsik": ("signal_cowsik", [], ["mlp.activation=gelu"],
               "a gelu MLP in place of tanh: it contracts correlations, no chaotic phase"),
    "cowsik_authors": ("signal_cowsik", ["--authors"], ["mlp.activation=gelu"],
                       "the authors' setting with a gelu MLP in place of tanh: no chaotic phase"),
    "alekseev": ("signal_alekseev", [], ["norm.alpha=0"],
                 "DyT and Derf with a = 0: the maps are constant, the branches see no signal, no amplification"),
    "differential": ("signal_differential", [], ["attention.differential=true"],
                     "every arm run as differential attention: the softmax baseline is lost"),
    "kedia": ("signal_kedia", [], ["model.beta=1"],
              "attention logits sqrt(d) times the paper's 1/sqrt(d_k) scale: the closed forms no longer hold"),
    "kedia_dropout": ("signal_kedia", [], ["dropout.attention=0"],
                      "the authors' grid without its attention dropout: their closed forms' 1/(1-p) misses"),
}

def run(case, script, options, rcsim, work, perturb):
    out = os.path.join(work, case, "perturbed" if perturb else "as_is")
    cmd = [sys.executable, script, "--tiny", *options, "--rcsim", rcsim, "--data", out,
           "--out", os.path.join(out, "figure")]
    for p in perturb:
        cmd += ["--perturb", p]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, MPLBACKEND="Agg"))
    return r.returncode, r.stderr, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rcsim")
    ap.add_argument("work")
    ap.add_argument("--only", nargs="+", choices=sorted(CASES), default=sorted(CASES))
    a = ap.parse_args()
    if not os.access(a.rcsim, os.X_OK):
        print(f"perturbed_signal.py: RCSIM '{a.rcsim}' is not an executable file", file=sys.stderr)
        return 2
    rcsim = os.path.abspath(a.rcsim)
    problems = []
    for case in a.only:
        name, options, perturb, what = CASES[case]
        script = os.path.join(ROOT, "analysis", name + ".py")
        for wrong in (False, True):
            rc, err, secs = run(case, script, options, rcsim, a.work, perturb if wrong else [])
            named = [ln for ln in err.splitlines() if " failed: " in ln]
            setting = " ".join(options + [f"--perturb {p}" for p in perturb if wrong]) or "as it is"
            print(f"{name} {setting}: exit {rc} in {secs:.1f} s" + "".join("\n  " + ln for ln in named))
            if not wrong and rc != 0:
                problems.append(f"{name} {setting}: exit {rc}, expected 0\n{err.strip()[-2000:]}")
            if wrong and not (rc == 1 and named):
                problems.append(f"{name} {setting} ({what}): exit {rc}"
                                f"{'' if named else ' and no failed claim named'}, expected 1 naming the claim"
                                f"\n{err.strip()[-2000:]}")
    for p in problems:
        print("perturbed_signal.py: " + p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
