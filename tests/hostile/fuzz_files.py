#!/usr/bin/python3
"""Mutated rcsim files (issue 22, class 1): every attribute and dataset rcsim reads is checked
(type, rank, shape) before use.

    fuzz_files.py RCSIM WORKDIR [-k KIND] [--max-datasets N] [--max-inner-attrs N] [--stride K]

Makes one file of every kind rcsim writes (run file, analysed run file, sweep index, sweep
analysis table, sweep point, checkpoint, equilibria file, keys file, ln-geometry file), then for
every root attribute, up to N attributes of other objects and up to N datasets of each file
(those rcsim reads first) applies the mutations that fit its type (ctest: every third pair):
scalar -> 1-D array, scalar -> 2-D array, string -> int, int -> string, float -> string,
int -> float, variable -> fixed-length string, empty (null dataspace); datasets: scalar,
2-D, string, empty, one entry short. Runs the commands that read that kind of file on a fresh copy
and asserts, per run:
  - the exit code is 0, 1 or 2 (never a signal, 134 or 139);
  - on failure, stderr is one line and it names the file (how many also name the mutated object
    is counted and printed: a file whose `complete` is mutated may be refused as "not complete").
Exit 0 iff every run passes; prints the number of mutated files and runs and the exit codes seen.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

SMALL = "[model]\ntokens = 6\ndim = 4\nlayers = 20\n[run]\ntrials = 4\nthreads = 1\n"
SWEEP = SMALL + "[output]\nfile = sw/p.h5\n[sweep]\nmask.type = complete, causal\n"
EQ = ("[model]\ntokens = 3\ndim = 2\nlayers = 200\n[norm]\ntype = sphere\n[weights]\nq = zero\nk = zero\n"
      "v = identity\n[init]\ntype = sphere\n[run]\ntrials = 4\n[output]\nfile = eq.h5\n")
CKPT = "[model]\ntokens = 12\ndim = 6\nlayers = 300\n[run]\ntrials = 100\nthreads = 1\n[output]\nfile = cp.h5\n"


def run(rcsim, d, args, timeout=120):
    return subprocess.run([rcsim] + args, cwd=d, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          errors="surrogateescape", timeout=timeout)


def make_checkpoint(rcsim, d, config, output):
    """OUTPUT.partial in `d`: `rcsim run --config CONFIG` interrupted (SIGINT) after some trials,
    before the last. The moment is found by trial: later if nothing was done yet, earlier if the
    run had finished (the machine may be loaded)."""
    delay = 0.15
    for _ in range(20):
        a = subprocess.Popen([rcsim, "run", "-q", "--config", config], cwd=d, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        time.sleep(delay)
        a.send_signal(signal.SIGINT)
        a.wait(timeout=300)
        if os.path.exists(os.path.join(d, output + ".partial")):
            return
        if os.path.exists(os.path.join(d, output)):  # finished first
            os.remove(os.path.join(d, output))
            delay *= 0.6
        else:  # interrupted before any trial was done
            delay *= 1.6
    raise RuntimeError(f"no checkpoint {output}.partial after 20 interrupted runs")


def make_base(rcsim, base):
    """The files of every kind, in `base`. Returns {kind: (file, [commands that read it])}."""
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    for name, text in (("small.ini", SMALL), ("sweep.ini", SWEEP), ("eq.ini", EQ), ("ck.ini", CKPT)):
        with open(os.path.join(base, name), "w") as f:
            f.write(text)

    def ok(args):
        r = run(rcsim, base, args)
        if r.returncode != 0:
            raise RuntimeError(f"setup failed ({r.returncode}): {args}\n{r.stderr}")

    ok(["run", "-q", "--config", "small.ini", "--output.file=run.h5"])
    ok(["run", "-q", "--config", "small.ini", "--output.file=analysed.h5"])
    ok(["analyze", "analysed.h5"])
    ok(["sweep", "-q", "--config", "sweep.ini"])
    ok(["analyze", "sw/p"])
    ok(["equilibria", "-q", "--config", "eq.ini"])
    ok(["keys", "-q", "--output.file=keys.h5"])
    ok(["ln-geometry", "-q", "--output.file=ln.h5", "--ln.samples=10"])
    # A checkpoint: a run interrupted (SIGINT) after some trials.
    make_checkpoint(rcsim, base, "ck.ini", "cp.h5")
    tables = [n for n in os.listdir(os.path.join(base, "sw", "p")) if n.endswith(".h5") and
              n != "index.h5" and not n.startswith("mask.type=")]
    if not tables:
        raise RuntimeError(f"no sweep analysis table in sw/p: {os.listdir(os.path.join(base, 'sw', 'p'))}")
    small = ["--config", "small.ini"]
    return {
        "run": ("run.h5", [["run", "--output.file=run.h5"] + small, ["analyze", "--no-write", "run.h5"]]),
        "analysed_run": ("analysed.h5", [["run", "--output.file=analysed.h5"] + small,
                                         ["analyze", "analysed.h5"]]),
        "sweep_index": ("sw/p/index.h5", [["sweep", "--config", "sweep.ini"], ["analyze", "--no-write", "sw/p"]]),
        "sweep_table": ("sw/p/" + tables[0], [["analyze", "--no-write", "sw/p/" + tables[0]]]),
        "sweep_point": ("sw/p/mask.type=causal.h5", [["sweep", "--config", "sweep.ini"], ["analyze", "sw/p"]]),
        "checkpoint": ("cp.h5.partial", [["run", "--config", "ck.ini"]]),
        "equilibria": ("eq.h5", [["equilibria", "--config", "eq.ini"]]),
        "keys": ("keys.h5", [["keys", "--output.file=keys.h5"]]),
        "ln_geometry": ("ln.h5", [["ln-geometry", "--output.file=ln.h5", "--ln.samples=10"]]),
    }


def value_mutations(value):
    """(label, new value) pairs for an attribute value of this type."""
    v = np.asarray(value) if not isinstance(value, (str, bytes)) else value
    out = []
    if isinstance(v, (str, bytes)) or (isinstance(v, np.ndarray) and v.dtype.kind in "OSU"):
        s = v if isinstance(v, str) else (v.decode() if isinstance(v, bytes) else str(v))
        # 64 entries: read as one value (no check), they overrun the reader's buffer by 504 bytes
        out += [("string->1-D array", np.array([s] * 64, dtype=h5py.string_dtype())),
                ("string->2-D array", np.array([[s, s], [s, s]], dtype=h5py.string_dtype())),
                ("string->int", np.int64(7)),
                ("string->fixed-length string", np.bytes_(s.encode()[:50] or b"x")),
                ("string->empty", h5py.Empty(h5py.string_dtype())),
                ("string->empty array", np.array([], dtype=h5py.string_dtype()))]
    elif v.dtype.kind in "iu":
        x = v.ravel()[0] if v.size else 1
        if v.ndim == 0:
            out += [("int->1-D array", np.full(64, x, v.dtype)), ("int->2-D array", np.full((2, 2), x, v.dtype))]
        else:
            out += [("int array->scalar", np.int64(x)), ("int array->2-D", np.full((2, 2), x, v.dtype))]
        out += [("int->string", str(x)), ("int->float", np.float64(x) + 0.5), ("int->empty", h5py.Empty("i8"))]
    elif v.dtype.kind == "f":
        x = v.ravel()[0] if v.size else 1.0
        out += [("float->1-D array", np.full(64, x)), ("float->2-D array", np.full((2, 2), x)),
                ("float->string", str(x)), ("float->empty", h5py.Empty("f8"))]
    else:
        out += [("other->string", "x"), ("other->empty", h5py.Empty("f8"))]
    return out


def dataset_mutations(ds):
    out = [("dataset->scalar", np.float64(1.0)), ("dataset->2-D", np.ones((2, 3))),
           ("dataset->string", "x"), ("dataset->empty", h5py.Empty("f8"))]
    if ds.shape and ds.shape[0] > 0:
        data = ds[()]
        out.append(("dataset->one entry short", data[:-1]))
        if ds.ndim >= 2:
            out.append(("dataset->1-D", data.ravel()[:3]))
    if ds.dtype.kind in "OSU":
        out.append(("strings->numbers", np.arange(max(int(np.prod(ds.shape)) if ds.shape else 1, 1), dtype="f8")))
        out.append(("strings->fixed-length", np.array([b"x"] * (ds.shape[0] if ds.shape else 1), dtype="S4")))
    else:
        out.append(("numbers->strings", np.array(["x"] * max(ds.shape[0] if ds.shape else 1, 1),
                                                 dtype=h5py.string_dtype())))
    return out


# What rcsim reads first: these datasets and attributes are mutated before the rest.
READ_FIRST = ("config", "layer", "metrics/mu", "metrics/mu_rel", "metrics/rank_one_residual", "metrics/attn_min",
              "mask", "tokens", "tokens_layer", "definition", "keys", "name", "file", "status", "trial_0/token",
              "trial_0/attention", "trial_0/diagnostics", "radius")


def targets(path, max_datasets, max_inner_attrs):
    """(kind, object path, name): every attribute of the root, up to max_inner_attrs attributes of
    other objects and up to max_datasets datasets (those rcsim reads first; None: all)."""
    root, inner, datasets = [], [], []
    with h5py.File(path, "r") as f:
        objs = [("/", f)]
        f.visititems(lambda n, o: objs.append(("/" + n, o)))
        for p, o in objs:
            for a in o.attrs:
                if a in ("DIMENSION_LIST", "REFERENCE_LIST", "CLASS", "NAME", "_Netcdf4Dimid"):
                    continue
                (root if p == "/" else inner).append(("attr", p, a))
            if isinstance(o, h5py.Dataset) and o.attrs.get("CLASS") != b"DIMENSION_SCALE":
                datasets.append(("dataset", p, None))

    def first(t):
        key = t[2] if t[0] == "attr" else t[1].lstrip("/")
        return (0 if key in READ_FIRST or t[1].lstrip("/") in READ_FIRST else 1, t[1], t[2] or "")
    inner.sort(key=first)
    datasets.sort(key=first)
    return root + inner[:max_inner_attrs] + datasets[:max_datasets]


def mutate(path, target, label_value):
    kind, obj, name = target
    _, value = label_value
    with h5py.File(path, "r+") as f:
        if kind == "attr":
            o = f[obj]
            del o.attrs[name]
            o.attrs[name] = value
        else:
            attrs = {k: v for k, v in f[obj].attrs.items() if k not in ("DIMENSION_LIST", "REFERENCE_LIST")}
            del f[obj]
            f[obj] = value
            for k, v in attrs.items():
                try:
                    f[obj].attrs[k] = v
                except Exception:
                    pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rcsim")
    ap.add_argument("work")
    ap.add_argument("-k", default="", help="only file kinds whose name contains this")
    ap.add_argument("--max-datasets", type=int, default=6, help="datasets mutated per file")
    ap.add_argument("--max-inner-attrs", type=int, default=4, help="attributes below the root mutated per file")
    ap.add_argument("--stride", type=int, default=1, help="apply every stride-th (target, mutation) pair only")
    a = ap.parse_args()
    rcsim = os.path.abspath(a.rcsim)
    base = os.path.join(a.work, "base")
    kinds = make_base(rcsim, base)
    files = runs = failures = named = counter = 0
    codes, problems = {}, []
    for kind, (rel, commands) in kinds.items():
        if a.k not in kind:
            continue
        print(f"{kind}: {rel}, commands: {'; '.join(' '.join(c) for c in commands)}", flush=True)
        for target in targets(os.path.join(base, rel), 5 if kind == "checkpoint" else a.max_datasets, a.max_inner_attrs):
            if target[0] == "attr":
                with h5py.File(os.path.join(base, rel), "r") as f:
                    muts = value_mutations(f[target[1]].attrs[target[2]])
            else:
                with h5py.File(os.path.join(base, rel), "r") as f:
                    muts = dataset_mutations(f[target[1]])
            for m in muts:
                counter += 1
                if counter % a.stride:  # every stride-th (target, mutation) pair: each kind of mutation still met
                    continue
                d = os.path.join(a.work, "case")
                shutil.rmtree(d, ignore_errors=True)
                shutil.copytree(base, d, symlinks=True)
                try:
                    mutate(os.path.join(d, rel), target, m)
                except Exception as e:  # h5py cannot store this mutation: nothing to test
                    continue
                files += 1
                what = f"{kind} {rel}:{target[1]}" + (f" attribute '{target[2]}'" if target[2] else "") + f" ({m[0]})"
                object_name = target[2] if target[2] else target[1].rsplit("/", 1)[-1]
                for cmd in commands:
                    runs += 1
                    r = run(rcsim, d, cmd)
                    codes[r.returncode] = codes.get(r.returncode, 0) + 1
                    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
                    bad = []
                    if r.returncode not in (0, 1, 2):
                        bad.append(f"exit {r.returncode}")
                    elif r.returncode != 0:
                        if len(lines) != 1:
                            bad.append(f"{len(lines)} stderr lines")
                        elif os.path.basename(rel) not in lines[0] and "sw/p" not in lines[0]:
                            bad.append("the error does not name the file")
                        else:
                            failures += 1
                            named += object_name in lines[0]
                    if bad:
                        problems.append(f"{what}: rcsim {' '.join(cmd)}: {', '.join(bad)}\n      "
                                        + r.stderr.strip().replace("\n", "\n      ")[:800])
    signals = sum(n for c, n in codes.items() if c not in (0, 1, 2))
    for p in problems[:40]:
        print("[FAIL]", p)
    if len(problems) > 40:
        print(f"... and {len(problems) - 40} more")
    print(f"fuzz_files: {files} mutated files, {runs} runs, exit codes {dict(sorted(codes.items()))}, "
          f"{signals} signals/aborts, {len(problems)} failures; of the {failures} refusals (exit 1 or 2, one line "
          f"naming the file) {named} also name the mutated attribute or dataset (the others are refused for what "
          f"the mutation made of the file, e.g. 'not an rcsim run file')")
    return 0 if not problems and files > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
