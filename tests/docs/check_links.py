#!/usr/bin/env python3
"""Every relative link of README.md and docs/**/*.md points at a file or folder of the repository,
and every `#anchor` at a heading of the file it names (GitHub's anchors: lower case, punctuation
dropped, spaces as '-'). External links (http:, https:, mailto:) are not followed.

Also checks that the user docs (docs/user/, README.md) mention no file that is not in the
repository as a plain path in backticks ending in .md (such as a `SCIENCE.md` that only exists
elsewhere).

Usage: check_links.py [REPO]    exit 0 when every link resolves, 1 otherwise (one line per dangling link)
"""
import os
import re
import sys

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
MD_NAME = re.compile(r"`([\w./-]+\.md)`")
FENCE = re.compile(r"^\s*```")


def anchors(path):
    """GitHub's anchors of the headings of a Markdown file."""
    out = set()
    in_fence = False
    for line in open(path, encoding="utf-8"):
        if FENCE.match(line):
            in_fence = not in_fence
        if in_fence or not line.startswith("#"):
            continue
        text = line.lstrip("#").strip().lower()
        text = re.sub(r"[^\w\- ]", "", text)
        out.add(text.replace(" ", "-"))
    return out


def markdown_files(repo):
    files = [os.path.join(repo, "README.md")]
    for root, _, names in os.walk(os.path.join(repo, "docs")):
        files += [os.path.join(root, n) for n in sorted(names) if n.endswith(".md")]
    return files


def check_file(md, repo):
    bad = []
    rel = os.path.relpath(md, repo)
    text = open(md, encoding="utf-8").read()
    body = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)  # not inside code
    for n, line in enumerate(body.split("\n"), 1):
        for m in LINK.finditer(line):
            target = m.group(1) or m.group(2)
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            where = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
            if not os.path.exists(where):
                bad.append(f"{rel}:{n}: link to {target}: no such file")
            elif anchor and where.endswith(".md") and anchor.lower() not in anchors(where):
                bad.append(f"{rel}:{n}: link to {target}: no heading with that anchor in "
                           f"{os.path.relpath(where, repo)}")
        user_doc = rel == "README.md" or rel.startswith(os.path.join("docs", "user"))
        for m in MD_NAME.finditer(line) if user_doc else ():
            name = m.group(1)
            candidates = [os.path.join(os.path.dirname(md), name), os.path.join(repo, name)]
            if not any(os.path.exists(c) for c in candidates) and not any(
                    f.endswith(os.sep + os.path.basename(name)) for f in ALL_MD):
                bad.append(f"{rel}:{n}: mentions `{name}`, which is not in the repository")
    return bad


ALL_MD = []


def main():
    repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    files = markdown_files(repo)
    ALL_MD.extend(files)
    bad = [b for md in files for b in check_file(md, repo)]
    for b in bad:
        print(b)
    print(f"check_links: {len(files)} files, {len(bad)} dangling links")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
