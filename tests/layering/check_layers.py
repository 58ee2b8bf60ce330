#!/usr/bin/env python3
"""The include rule of sim/: a file includes only files of its own folder or of folders below it.

Usage: check_layers.py SIM_DIR LAYER [LAYER ...]   (layers bottom to top, as in sim/CMakeLists.txt)
       check_layers.py --self-test LAYER [LAYER ...]

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


def violations(sim_dir, layers):
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
                if "/" not in target:
                    if os.path.exists(os.path.join(root, target)):
                        found.append(f'{rel}: #include "{target}" must name its folder '
                                     f'("{folder}/{target}")')
                    continue  # not a project file (a test helper, a system header in quotes)
                to = target.split("/")[0]
                if to not in rank:
                    continue
                if rank[to] > rank[folder]:
                    found.append(f'{rel}: #include "{target}" points upward '
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


def main(argv):
    if len(argv) >= 3 and argv[1] == "--self-test":
        return self_test(argv[2:])
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    found = violations(argv[1], argv[2:])
    for line in found:
        print(line)
    print(f"include layering: {len(found)} violation(s); layers bottom to top: {' < '.join(argv[2:])}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
