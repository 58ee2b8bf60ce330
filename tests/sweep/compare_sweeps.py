#!/usr/bin/python3
"""Compare two sweep directories value by value (h5py + NumPy).

    compare_sweeps.py DIR_A DIR_B

Every .h5 file of either directory must exist in both; every dataset must have the same shape,
type and values (NaN equal to NaN; bitwise for floats), every attribute the same value, except
the provenance attributes that record when and how a file was made (created_utc, updated_utc,
command_line); text that names the file's own directory (output.file in /config) is compared
with that directory replaced by DIR/. No NAME.tmp or NAME.partial may be left in DIR_B. Exit 0 if identical, 1 if not.
"""
import os
import sys

import h5py
import numpy as np

VOLATILE = {"created_utc", "updated_utc", "command_line"}


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind == "f" and b.dtype.kind == "f":
        return a.tobytes() == b.tobytes() or np.array_equal(a, b, equal_nan=True)
    return np.array_equal(a, b)


def strip_dir(value, directory):
    """Text values mention their own directory (the output.file line of /config): neutralise it."""
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str):
        for d in {directory, os.path.abspath(directory)}:
            value = value.replace(d.rstrip("/") + "/", "DIR/")
    return value


def compare_files(pa, pb):
    problems = []
    with h5py.File(pa, "r") as fa, h5py.File(pb, "r") as fb:
        objects_a, objects_b = {}, {}
        fa.visititems(lambda n, o: objects_a.__setitem__(n, o))
        fb.visititems(lambda n, o: objects_b.__setitem__(n, o))
        objects_a[""], objects_b[""] = fa, fb
        if set(objects_a) != set(objects_b):
            problems.append(f"objects differ: {sorted(set(objects_a) ^ set(objects_b))}")
        values = 0
        for name in sorted(set(objects_a) & set(objects_b)):
            oa, ob = objects_a[name], objects_b[name]
            for key in set(oa.attrs) | set(ob.attrs):
                if key in VOLATILE or key in ("DIMENSION_LIST", "REFERENCE_LIST"):
                    continue
                if key not in oa.attrs or key not in ob.attrs or not same(oa.attrs[key], ob.attrs[key]):
                    problems.append(f"/{name} attribute {key} differs")
            if isinstance(oa, h5py.Dataset):
                da = strip_dir(oa[()], os.path.dirname(pa))
                db = strip_dir(ob[()], os.path.dirname(pb))
                values += np.asarray(da).size
                if not same(da, db):
                    problems.append(f"/{name} differs")
    return problems, values


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    return main_dirs(sys.argv[1], sys.argv[2])


def main_dirs(a, b):
    files_a = sorted(f for f in os.listdir(a) if f.endswith(".h5"))
    files_b = sorted(f for f in os.listdir(b) if f.endswith(".h5"))
    leftovers = [f for f in os.listdir(b) if f.endswith(".tmp") or f.endswith(".partial")]
    problems = []
    if files_a != files_b:
        problems.append(f"file lists differ: {sorted(set(files_a) ^ set(files_b))}")
    if leftovers:
        problems.append(f"left over in {b}: {leftovers}")
    total = 0
    for f in sorted(set(files_a) & set(files_b)):
        p, n = compare_files(os.path.join(a, f), os.path.join(b, f))
        total += n
        problems += [f"{f}: {x}" for x in p]
    for p in problems:
        print("compare_sweeps:", p)
    print(f"compare_sweeps: {len(files_a)} files, {total} values compared: "
          + ("identical" if not problems else f"{len(problems)} differences"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
