#!/usr/bin/env python3
"""The include rule of sim/: a file includes only files of its own folder or of folders below it.

Usage: check_layers.py [--prefix P] [--known FILE] SIM_DIR LAYER [LAYER ...]   (layers bottom to top)
       check_layers.py --self-test LAYER [LAYER ...]

sim/ is checked with its folders (sim/CMakeLists.txt's RCSIM_LAYERS); the kernel with its own
folders and --prefix kernel/ (an include "kernel/ops/x.hpp" then names the folder ops). --known FILE
lists upward includes that are known and not yet removed, one "FILE -> TARGET" per line (# comments):
they do not fail the check, but one that no longer exists does (so the list only shrinks), and
any other fails as before.

Every project include must name its folder ("model/attention.hpp"), every source file must sit in
a listed folder, and no include may point to a folder listed after the including file's own.
Exit 0 when the tree follows the rule, 1 with one line per violation otherwise. --self-test
builds small trees that break each part of the rule and checks that each is caught.
"""
import os
import re
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
SOURCE_ENDINGS = (".cpp", ".hpp", ".h", ".cc", ".in")


def violations(sim_dir, layers, prefix=""):
    rank = {name: i for i, name in enumerate(layers)}
    found = []
    for root, dirs, files in os.walk(sim_dir):
        dirs.sort()
        for name in sorted(files):
            if not name.endswith(SOURCE_ENDINGS):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, sim_dir)
            folder = rel.split(os.sep)[0] if os.sep in rel else ""
            if folder not in rank:
                found.append(f"{rel}: not in a layer folder (allowed: {', '.join(layers)})")
                continue
            with open(path, encoding="utf-8") as f:
                text = f.read()
            for target in INCLUDE.findall(text):
                if prefix:
                    if not target.startswith(prefix):
                        continue
                    target = target[len(prefix):]
                if "/" not in target:
                    if os.path.exists(os.path.join(root, target)):
                        found.append(f'{rel}: #include "{target}" must name its folder '
                                     f'("{folder}/{target}")')
                    continue  # not a project file (a test helper, a system header in quotes)
                to = target.split("/")[0]
                if to not in rank:
                    continue
                if rank[to] > rank[folder]:
                    found.append(f'{rel}: #include "{prefix}{target}" points upward '
                                 f"({folder} may use only {', '.join(layers[:rank[folder] + 1])})")
    return found


def self_test(layers):
    low, high = layers[0], layers[-1]
    cases = {
        "upward include": {f"{low}/a.cpp": f'#include "{high}/b.hpp"\n', f"{high}/b.hpp": ""},
        "include without folder": {f"{low}/a.cpp": '#include "b.hpp"\n', f"{low}/b.hpp": ""},
        "file outside the layers": {"stray/a.cpp": "", f"{low}/b.hpp": ""},
    }
    good = {f"{high}/a.cpp": f'#include "{low}/b.hpp"\n#include "{high}/c.hpp"\n',
            f"{low}/b.hpp": "", f"{high}/c.hpp": ""}
    failed = 0
    for label, tree in list(cases.items()) + [("clean tree", good)]:
        with tempfile.TemporaryDirectory() as tmp:
            for rel, text in tree.items():
                os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
                with open(os.path.join(tmp, rel), "w", encoding="utf-8") as f:
                    f.write(text)
            got = violations(tmp, layers)
        expect_violation = label != "clean tree"
        if bool(got) != expect_violation:
            print(f"self-test: {label}: {'not caught' if expect_violation else 'false alarm: ' + '; '.join(got)}")
            failed += 1
    print(f"self-test: {len(cases) + 1 - failed} of {len(cases) + 1} cases right")
    return 1 if failed else 0


def read_known(path):
    with open(path, encoding="utf-8") as f:
        lines = [line.split("#")[0].strip() for line in f]
    return {tuple(part.strip() for part in line.split("->")) for line in lines if line}


def main(argv):
    if len(argv) >= 3 and argv[1] == "--self-test":
        return self_test(argv[2:])
    prefix, known = "", set()
    args = argv[1:]
    while args and args[0] in ("--prefix", "--known") and len(args) >= 2:
        if args[0] == "--prefix":
            prefix = args[1]
        else:
            known = read_known(args[1])
        args = args[2:]
    if len(args) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    found, seen = [], set()
    for line in violations(args[0], args[1:], prefix):
        m = re.match(r'(\S+): #include "([^"]+)" points upward', line)
        key = (m.group(1), m.group(2)) if m else None
        if key in known:
            seen.add(key)
        else:
            found.append(line)
    for rel, target in sorted(known - seen):
        found.append(f"{rel} -> {target}: listed as known but no longer there: remove it from the list")
    for line in found:
        print(line)
    arrows = {(a.split(os.sep)[0], b.split("/")[-2]) for a, b in seen}
    print(f"include layering: {len(found)} violation(s), {len(seen)} known upward include(s) between "
          f"{len(arrows)} folder pair(s); layers bottom to top: {' < '.join(args[1:])}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
