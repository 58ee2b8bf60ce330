#!/usr/bin/env python3
"""No function in sim/ longer than a limit (issue 20: 100 lines; issue 34: 80).

Usage: function_lengths.py SIM_DIR [--limit N] [--exclude REL_PATH ...]
       function_lengths.py --self-test

A brace-matching scan of SIM_DIR/**/*.cpp, good enough for this codebase's style: comments,
string, character and raw-string literals are blanked first; a '{' outside any function whose
header (the text since the previous ';', '{' or '}') holds a '(' and is not a namespace, class,
struct, enum, union or an initialiser ('=' before the first '(') opens a function; it ends at its
matching '}'. A function's length counts its lines from the header's first line to the closing
brace. Exit 0 when every function is within the limit; 1 with one line per longer function
(file:line: name: N lines); 2 for a usage error. --exclude REL_PATH (relative to SIM_DIR, may be
repeated) leaves a file out of the check.
"""
import os
import re
import sys
import tempfile

LIMIT = 80
NOT_FUNCTION = re.compile(r"^\s*(?:template\s*<.*>\s*)?(namespace|class|struct|enum|union)\b", re.S)
NAME = re.compile(r"((?:~|operator\s*\S+?\s*|[A-Za-z_]\w*)(?:\s*::\s*~?[A-Za-z_]\w*)*)\s*$")


def blank_literals(text):
    """The text with comments and literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)

    def blank(s):
        return "".join(c if c == "\n" else " " for c in s)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(text[i:j]))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(blank(text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^()\\\s]{0,16})\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + blank(text[i + 2:j - 2]) + '  ' if j - i >= 4 else blank(text[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # digit separator 1'000
                out.append(c)
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + blank(text[i + 1:j - 1]) + c)
            i = j
        elif c == "#" and (i == 0 or text[i - 1] == "\n"):  # preprocessor line (with continuations)
            j = i
            while True:
                k = text.find("\n", j)
                if k < 0:
                    k = n
                    break
                if text[k - 1] != "\\":
                    break
                j = k + 1
            out.append(blank(text[i:k]))
            i = k
        else:
            out.append(c)
            i += 1
    return "".join(out)


def function_name(header):
    head = header.split("(", 1)[0]
    m = NAME.search(head)
    return re.sub(r"\s+", "", m.group(1)) if m else head.strip() or "?"


def functions(text):
    """(name, first line, length in lines) of every function defined in the text."""
    code = blank_literals(text)
    found = []
    stack = []  # per open brace: True when it opened a function
    header_start = 0
    in_function = 0
    for i, c in enumerate(code):
        if c == "{":
            header = code[header_start:i]
            is_function = False
            if not in_function and "(" in header and not NOT_FUNCTION.match(header):
                before_paren = header.split("(", 1)[0]
                if "=" not in before_paren or "operator" in before_paren:
                    is_function = True
            if is_function:
                offset = len(header) - len(header.lstrip())
                first = code.count("\n", 0, header_start + offset) + 1
                stack.append((True, first, function_name(header.strip())))
                in_function += 1
            else:
                stack.append((False, 0, ""))
            header_start = i + 1
        elif c == "}":
            if stack:
                opened, first, name = stack.pop()
                if opened:
                    in_function -= 1
                    last = code.count("\n", 0, i) + 1
                    found.append((name, first, last - first + 1))
            header_start = i + 1
        elif c == ";":
            header_start = i + 1
    return found


def long_functions(sim_dir, limit, exclude):
    found = []
    for root, dirs, files in os.walk(sim_dir):
        dirs.sort()
        for name in sorted(files):
            if not name.endswith(".cpp"):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, sim_dir)
            if rel in exclude:
                continue
            with open(path, encoding="utf-8") as f:
                text = f.read()
            for fn, line, length in functions(text):
                if length > limit:
                    found.append(f"{rel}:{line}: {fn}: {length} lines (limit {limit})")
    return found


def self_test():
    body = "\n".join(f"  x += {k};" for k in range(120))
    sample = (
        '#include "a.hpp"\nnamespace rcsim {\nnamespace {\nconst char* kText = R"(\n}\n{)";\n'
        "struct S {\n  int f() const { return 1; }\n};\n}  // namespace\n"
        f"int long_one(int x) {{\n  // a }} in a comment\n  const char c = '}}';\n{body}\n  return x;\n}}\n"
        'int short_one() {\n  auto l = [] { return "{"; };\n  return l()[0];\n}\n}  // namespace rcsim\n'
    )
    found = functions(sample)
    names = {n: (line, length) for n, line, length in found}
    ok = True
    if "long_one" not in names or names["long_one"][1] != 125:
        print(f"self-test: long_one not measured right: {found}")
        ok = False
    if names.get("short_one", (0, 0))[1] != 4:
        print(f"self-test: short_one not measured right: {found}")
        ok = False
    if names.get("f", (0, 0))[1] != 1:
        print(f"self-test: member f not found: {found}")
        ok = False
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "app"))
        with open(os.path.join(d, "app", "x.cpp"), "w", encoding="utf-8") as f:
            f.write(sample)
        listed = long_functions(d, LIMIT, set())
        if len(listed) != 1 or not listed[0].startswith(os.path.join("app", "x.cpp") + ":11: long_one: 125 lines"):
            print(f"self-test: the long function is not listed right: {listed}")
            ok = False
        if long_functions(d, LIMIT, {os.path.join("app", "x.cpp")}):
            print("self-test: --exclude does not leave the file out")
            ok = False
    print("self-test: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def main(argv):
    if argv == ["--self-test"]:
        return self_test()
    sim_dir, limit, exclude = None, LIMIT, set()
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--limit", "--exclude"):
            if i + 1 >= len(argv):
                print(f"function_lengths.py: {a} needs a value", file=sys.stderr)
                return 2
            if a == "--limit":
                try:
                    limit = int(argv[i + 1])
                except ValueError:
                    print(f"function_lengths.py: --limit={argv[i + 1]}: expected an integer", file=sys.stderr)
                    return 2
            else:
                exclude.add(os.path.normpath(argv[i + 1]))
            i += 2
        elif sim_dir is None and not a.startswith("-"):
            sim_dir = a
            i += 1
        else:
            print(f"function_lengths.py: unexpected argument '{a}' (usage: SIM_DIR [--limit N] [--exclude PATH ...])",
                  file=sys.stderr)
            return 2
    if sim_dir is None or not os.path.isdir(sim_dir):
        print("function_lengths.py: give the sim/ directory (usage: SIM_DIR [--limit N] [--exclude PATH ...])",
              file=sys.stderr)
        return 2
    found = long_functions(sim_dir, limit, exclude)
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
