#!/usr/bin/python3
"""The golden set: every configs/*.ini and the documented commands at a tiny size, reduced to one
SHA-256 per dataset and per attribute (provenance attributes excepted), so that a restructuring of
the code can be shown to leave every output bitwise unchanged.

    golden.py record  RCSIM MANIFEST.json    # run the set, write the digests
    golden.py check   RCSIM MANIFEST.json    # run the set, compare with the digests (exit 1 if any differ,
                                             # 77 = skipped: the build's instruction set is not the manifest's)
    golden.py relabel RCSIM MANIFEST.json    # re-record only the digests of the text attributes for
                                             # readers (LABELS: long_name, description), keep every other

The digests depend on the instruction set of the build (a -march=native build and a portable one
differ in the last bits), so the manifest records the build's instruction set (`isa=` in
`rcsim --version`) and `check` compares only against a manifest of the same instruction set. The
committed manifest-portable.json was recorded by a portable build (-DRCSIM_NATIVE=OFF) of commit
fec13d0, before the kernel restructuring; CI builds the portable variant and checks it (.ci/run).
One digest was replaced since, on purpose: equilibria/equilibria_2x2's /config (2026-11-27, issue 34:
`rcsim equilibria` drops the keys it does not use from a configuration file instead of recording
them; configs/equilibria_2x2.ini has `output.tokens = final`, which /config now holds at its
default). Every other digest is still fec13d0's.
The measures' long_name and description attributes were re-recorded with `relabel` on 2026-11-29
(issue 39: the registry's long_names became short axis labels, their sentences moved to a new
attribute description). Text does not depend on the instruction set, so any build may record
them; `relabel` changes no other digest (the numbers, every other attribute: still fec13d0's).
A native build is checked the same way against a manifest recorded by the native build of that
commit on the same machine (the kernel issue's note gives the result).

Provenance attributes (version, git SHA, creation time, command line, instruction set, compiler,
build type, HDF5 version, source-tree state) are the only things ignored.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

PROVENANCE = {"rcsim_version", "git_sha", "created_utc", "command_line", "instruction_set", "compiler",
              "build_type", "hdf5_version", "source_tree", "threads", "updated_utc",
              # the OpenCL device that ran (run.platform = opencl only; none in the golden set)
              "opencl_device", "opencl_vendor", "opencl_driver_version", "opencl_compute_units", "opencl_kernel",
              "opencl_batch"}

# Identity attributes added after a manifest may have been recorded: `input_sha256` of /config
# (the SHA-256 of the input files a run reads, issue 22; only in runs that read a file, here the
# configs with a custom mask). Not provenance: it is compared whenever the manifest has it; a
# manifest recorded before it existed (manifest-portable.json, fec13d0; none of its keys has it)
# lacks it, and there it is reported as new but not counted as a difference. The same for the root
# attribute `platform` (run.platform as resolved, issue 35: "reference" for every run of the set,
# whose sizes are below the cpu platform's automatic threshold), and `threads_per_trial` (the
# threads inside one trial: 1 for every run of the set, reference platform with run.threads = 1).
# Every other extra key still fails.
ADDED_LATER = {"input_sha256", "platform", "threads_per_trial"}

# The text attributes written for readers (axis labels, sentences): what `relabel` may re-record.
LABELS = {"long_name", "description"}

TINY = ["--quiet", "--run.trials=2", "--model.layers=3", "--run.threads=1"]


def cases():
    """(name, argv after `rcsim`, output path or None); outputs are relative to the work folder."""
    out = []
    for cfg in sorted(os.listdir(os.path.join(REPO, "configs"))):
        if not cfg.endswith(".ini"):
            continue
        name = cfg[:-4]
        path = os.path.join("configs", cfg)  # relative: configs/ is linked into the work folder
        out.append((f"config/{name}", ["run", "--config", path, *TINY, "--output.tokens=none",
                                      f"--output.file=out/{name}.h5"], f"out/{name}"))
    # The default configuration with everything it can store.
    out.append(("run/everything", ["run", *TINY, "--output.tokens=all", "--output.spectrum=true",
                                   "--output.attention=true", "--output.file=out/everything.h5"], "out/everything"))
    out.append(("run/causal_ln_mlp", ["run", *TINY, "--mask.type=causal", "--norm.type=layernorm",
                                      "--norm.position=pre", "--mlp.width=8", "--model.heads=2",
                                      "--dropout.attention=0.1", "--output.tokens=final",
                                      "--output.file=out/causal_ln_mlp.h5"], "out/causal_ln_mlp"))
    out.append(("run/float32", ["run", *TINY, "--run.precision=float32", "--mask.type=sliding_window",
                                "--mask.window=2", "--norm.type=rmsnorm", "--residual.alpha=0.5",
                                "--output.file=out/float32.h5"], "out/float32"))
    out.append(("analyze/run", ["analyze", "out/everything.h5", "--quiet"], "out/everything"))
    out.append(("analyze/sweep", ["analyze", "out/default", "--quiet"], "out/default"))
    for eq in ("equilibria_2x2", "equilibria_rank3"):
        out.append((f"equilibria/{eq}", ["equilibria", "--config", os.path.join("configs", eq + ".ini"),
                                         "--quiet", f"--output.file=out/eq_{eq}.h5"], f"out/eq_{eq}"))
    out.append(("mask-info", ["mask-info", "--mask.type=sliding_window", "--mask.window=2",
                              "--model.tokens=9"], None))
    out.append(("keys", ["keys", "--keys.count=30", "--keys.dim=3", "--norm.type=layernorm", "--quiet",
                         "--output.file=out/keys.h5"], "out/keys"))
    out.append(("brody-example", ["brody-example", "--quiet", "--output.file=out/brody_example.h5"],
                "out/brody_example"))
    out.append(("ln-geometry", ["ln-geometry", "--ln.dim=3", "--norm.gain=1 2 0.5", "--quiet",
                                "--output.file=out/ln.h5"], "out/ln"))
    return out


def digest(data):
    return hashlib.sha256(data).hexdigest()


def value_bytes(v):
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    a = np.asarray(v)
    if a.dtype.kind == "O":
        return repr([x.decode() if isinstance(x, bytes) else x for x in a.ravel().tolist()]).encode()
    return a.dtype.str.encode() + repr(a.shape).encode() + a.tobytes()


def h5_digests(path, prefix, into):
    def attrs(obj, where):
        for k in sorted(obj.attrs.keys()):
            if k in PROVENANCE or k in ("DIMENSION_LIST", "REFERENCE_LIST"):
                continue
            into[f"{prefix}{where}@{k}"] = digest(value_bytes(obj.attrs[k]))

    with h5py.File(path, "r") as f:
        attrs(f, "/")

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                into[f"{prefix}/{name}"] = digest(value_bytes(obj[()]))
            attrs(obj, "/" + name)
        f.visititems(visit)


def outputs_of(base):
    """The files a case wrote: base.h5, base.csv, and everything under the folder base/."""
    found = []
    for ext in (".h5", ".csv"):
        if os.path.isfile(base + ext):
            found.append(base + ext)
    if os.path.isdir(base):
        for root, _, files in os.walk(base):
            found += [os.path.join(root, f) for f in files]
    return sorted(found)


def run_set(rcsim):
    work = tempfile.mkdtemp(prefix="rcsim-golden-")
    result = {}
    try:
        os.makedirs(os.path.join(work, "out"))
        os.symlink(os.path.join(REPO, "configs"), os.path.join(work, "configs"))  # masks named relative to it
        for name, argv, base in cases():
            proc = subprocess.run([rcsim, *argv], cwd=work, capture_output=True, text=True, timeout=600)
            entry = {"exit": proc.returncode}
            if base is None or proc.returncode != 0:
                entry["stdout"] = digest(proc.stdout.encode())
            if base is not None:
                for path in outputs_of(os.path.join(work, base)):
                    rel = os.path.relpath(path, work)
                    if path.endswith(".h5"):
                        h5_digests(path, rel, entry)
                    else:
                        entry[rel] = digest(open(path, "rb").read())
            result[name] = entry
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result


def isa_of(rcsim):
    """The instruction set the build was made for (printed by `rcsim --version`), 'unknown' if not."""
    out = subprocess.run([rcsim, "--version"], capture_output=True, text=True).stdout
    for part in out.replace("(", " ").replace(")", " ").replace(",", " ").split():
        if part.startswith("isa="):
            return part[4:]
    return os.environ.get("RCSIM_GOLDEN_ISA", "unknown")


def is_label(key):
    return "@" in key and key.rsplit("@", 1)[-1] in LABELS


def relabel(rcsim, manifest):
    """Replace the manifest's digests of the LABELS attributes by those of this build's run of the
    set (added, changed, dropped); every other digest and the instruction set are left as they are."""
    with open(manifest) as f:
        want = json.load(f)
    got = run_set(rcsim)
    changed = 0
    for case, digests in want["cases"].items():
        mine = {k: v for k, v in got.get(case, {}).items() if is_label(k)}
        old = {k: v for k, v in digests.items() if is_label(k)}
        changed += sum(old.get(k) != mine.get(k) for k in set(old) | set(mine))
        want["cases"][case] = dict({k: v for k, v in digests.items() if not is_label(k)}, **mine)
    with open(manifest + ".tmp", "w") as f:
        json.dump(want, f, indent=1, sort_keys=True)
    os.replace(manifest + ".tmp", manifest)
    print(f"golden: {changed} digests of text attributes ({', '.join(sorted(LABELS))}) re-recorded; no other changed")
    return 0


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("record", "check", "relabel"):
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        print("usage: golden.py record|check|relabel RCSIM MANIFEST.json", file=sys.stderr)
        return 2
    mode, rcsim, manifest = sys.argv[1:]
    rcsim = os.path.abspath(rcsim)
    if mode == "relabel":
        return relabel(rcsim, manifest)
    isa = isa_of(rcsim)
    if mode == "check":  # the instruction set first: a mismatch skips before running anything
        with open(manifest) as f:
            want = json.load(f)
        if want["instruction_set"] != isa:
            print(f"golden: the manifest is for instruction set {want['instruction_set']}, this build is {isa}: "
                  "build with -DRCSIM_NATIVE=OFF to check (skipped)", file=sys.stderr)
            return 77
    got = run_set(rcsim)
    if mode == "record":
        with open(manifest + ".tmp", "w") as f:
            json.dump({"instruction_set": isa, "cases": got}, f, indent=1, sort_keys=True)
        os.replace(manifest + ".tmp", manifest)
        print(f"golden: recorded {sum(len(v) for v in got.values())} digests of {len(got)} cases ({isa})")
        return 0
    bad, added = [], []
    # Only a manifest older than the attributes (none of its keys has them) may lack them.
    older = {a for a in ADDED_LATER if not any(k.endswith("@" + a) for c in want["cases"].values() for k in c)}
    for case, digests in want["cases"].items():
        digests = {k: v for k, v in digests.items() if k.rsplit("@", 1)[-1] not in PROVENANCE or "@" not in k}
        mine = got.get(case, {})
        for key in sorted(set(digests) | set(mine)):
            if key not in digests and "@" in key and key.rsplit("@", 1)[-1] in older:
                added.append(f"{case}: {key}")
                continue
            if digests.get(key) != mine.get(key):
                bad.append(f"{case}: {key}: {'missing' if key not in mine else 'extra' if key not in digests else 'differs'}")
    for case in sorted(set(got) - set(want["cases"])):
        bad.append(f"{case}: not in the manifest")
    n = sum(len(v) for v in want["cases"].values())
    if added:
        print(f"golden: {len(added)} identity attributes newer than the manifest (not compared):", *added, sep="\n  ")
    if bad:
        print(f"golden: {len(bad)} of {n} digests differ:", *bad[:40], sep="\n  ")
        return 1
    print(f"golden: all {n} digests of {len(want['cases'])} cases equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
