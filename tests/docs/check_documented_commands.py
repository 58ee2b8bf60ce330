#!/usr/bin/env python3
"""Run the commands that README.md and docs/**/*.md document, so that a documented command cannot rot.

Usage: check_documented_commands.py [--repo DIR] [--build DIR] [--only FILE] [--list] [--self-test]

The rule (docs/dev/testing.md, "Documented commands"): every code block (indented by 4 spaces or fenced
with ```) that contains a command (a line starting with ./build/, rcsim, bash, cmake, mpirun,
/usr/bin/python3 or python3) carries an HTML comment on the line before it (blank lines
between are allowed):

    <!-- ci: run -->           run the block as one bash script (set -e -o pipefail)
    <!-- ci: run tiny -->      the same at a tiny size: rcsim run/sweep/equilibria lines get
                               --model.layers=4 --run.trials=2 (replacing the values given),
                               brody-map lines a 6 x 4 map of 2 draws, the figure
                               scripts (analysis/figure*.py, layernorm_search.py) --tiny,
                               and a bare `bash scripts/geometry-figures.sh` its tiny size
    <!-- ci: python -->        run the block as one Python program (/usr/bin/python3)
    <!-- ci: skip REASON -->   documented but not run (a synopsis with placeholders, an MPI
                               cluster, hours of computing); the reason is required

A block without any of these that contains a command is an error, so a new command cannot be
added without being run or explicitly excused. Blocks run in a temporary copy of the repository
(the files git tracks, as they are in the working tree) whose `build` is a link to the build
directory, with `build/sim` first on PATH (so a bare `rcsim` is the built one) and the build
tree's Python package on PYTHONPATH (build/python: the package with its engine): `data/...`
outputs go into the copy. All blocks of one file share the copy, in document order (a later
block may read what an earlier one wrote). A failing command fails the check with the file, its
line and the command. The copy is a git repository: a documented command must write only to
temporary or git-ignored places (data/, build*/, /tmp), so the check also fails when `git status
--porcelain` in the copy shows any change after a file's blocks (a committed figure
overwritten, a file dropped in the repository root). Exit 0 when every command ran, 1 otherwise.
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

COMMAND = re.compile(r"^\s*(\./build/|build/|build-mpi/|rcsim\b|bash\b|cmake\b|mpirun\b|srun\b|"
                     r"/usr/bin/python3\b|python3\b|apt-get\b|xdg-open\b|ctest\b|MPLBACKEND=)")
ANNOTATION = re.compile(r"^\s*<!--\s*ci:\s*(run tiny|run|python|skip)\b\s*(.*?)\s*-->\s*$")
TINY_RUN = ["--model.layers=4", "--run.trials=2"]
TINY_SCRIPT = re.compile(r"^analysis/(figure\w*|layernorm_search)\.py$")  # the scripts with --tiny
TINY_MAP = ["--map.count_max=6", "--map.dim_max=4", "--map.draws=2"]


def code_blocks(text):
    """(line number of the first body line, annotation groups or None, body lines) of every code
    block of a Markdown text: fenced (```) or indented by 4 spaces after a blank line."""
    lines = text.split("\n")
    blocks, i = [], 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            body, first, after = lines[i + 1:j], i + 2, j + 1
        elif line.startswith("    ") and line.strip() and (i == 0 or not lines[i - 1].strip()):
            j, body = i, []
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                body.append(lines[j][4:])
                j += 1
            while body and not body[-1].strip():
                body.pop()
            first, after = i + 1, j
        else:
            i += 1
            continue
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        m = ANNOTATION.match(lines[k]) if k >= 0 else None
        blocks.append((first, m.groups() if m else None, body))
        i = after
    return blocks


def commands_of(body):
    """The shell commands of a block: continuation lines joined, (line offset, text)."""
    out, current, first = [], "", 0
    for n, line in enumerate(body):
        if not current:
            first = n
        stripped = line.rstrip()
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        if current.strip():
            out.append((first, current.strip()))
        current = ""
    if current.strip():
        out.append((first, current.strip()))
    return out


def strip_comment(command):
    """The command without its trailing `# comment` (outside quotes)."""
    quote = None
    for i, c in enumerate(command):
        if quote:
            if c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "#" and (i == 0 or command[i - 1].isspace()):
            return command[:i].rstrip()
    return command


def quote(word):
    """A word for bash: as it is when it holds only safe characters or a $variable, else quoted."""
    return word if re.fullmatch(r"[\w@%+=:,./$-]+", word) else shlex.quote(word)


def tiny(command):
    """The command at a tiny size (the `ci: run tiny` rule)."""
    command = strip_comment(command)
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    rcsim = [i for i, w in enumerate(words) if w.endswith("rcsim") or w.endswith("/rcsim")]
    if rcsim and len(words) > rcsim[0] + 1:
        verb = words[rcsim[0] + 1]
        if verb in ("run", "sweep", "equilibria"):
            return " ".join(quote(w) for w in words
                            if not w.startswith(("--model.layers=", "--run.trials="))) + " " + " ".join(TINY_RUN)
        if verb == "brody-map":
            return command + " " + " ".join(TINY_MAP)
    if any(w.endswith("python3") for w in words[:2]) and any(TINY_SCRIPT.match(w) for w in words):
        return command + " --tiny"
    if words[:2] == ["bash", "scripts/geometry-figures.sh"] and len(words) == 2:
        return command + " data/geometry-tiny tiny"
    return command


def prepare_copy(repo, build, where):
    files = subprocess.run(["git", "-C", repo, "ls-files", "-z"], capture_output=True, check=True).stdout
    for rel in files.decode().split("\0"):
        if not rel:
            continue
        src = os.path.join(repo, rel)
        dst = os.path.join(where, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        elif os.path.isfile(src):
            shutil.copy2(src, dst)
    os.symlink(os.path.abspath(build), os.path.join(where, "build"))
    # A repository of its own, so that what the commands change shows in `git status`.
    git = ["git", "-C", where, "-c", "user.name=check", "-c", "user.email=check@localhost"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-q", "--no-verify", "-m", "documented commands: before"], check=True)


def changed_files(where):
    """`git status --porcelain` of the copy: the files the commands changed or left behind
    outside git-ignored places."""
    out = subprocess.run(["git", "-C", where, "status", "--porcelain", "--untracked-files=all"],
                         capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line.strip()]


def run_file(md, repo, build, only_list=False):
    """Run the annotated blocks of one Markdown file (each block as one bash script, so loops
    and variables may span lines); return a list of failure lines."""
    rel = os.path.relpath(md, repo)
    failures = []
    blocks = code_blocks(open(md, encoding="utf-8").read())
    work = tempfile.mkdtemp(prefix="rcsim-docs-")
    try:
        if not only_list:
            prepare_copy(repo, build, work)
        env = dict(os.environ, MPLBACKEND="Agg", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   PATH=os.path.join(work, "build", "sim") + os.pathsep + os.environ.get("PATH", ""),
                   PYTHONPATH=os.path.join(work, "build", "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
        for line_no, note, body in blocks:
            has_command = any(COMMAND.match(line) for line in body)
            if note is None:
                if has_command:
                    failures.append(f"{rel}:{line_no}: a code block with commands but no <!-- ci: run | run tiny | "
                                    f"python | skip REASON --> before it: {body[0].strip()}")
                continue
            kind, reason = note
            if kind == "skip":
                if not reason:
                    failures.append(f"{rel}:{line_no}: <!-- ci: skip --> needs a reason")
                if only_list:
                    print(f"{rel}:{line_no}: skipped ({reason})")
                continue
            if kind == "python":
                if only_list:
                    print(f"{rel}:{line_no}: python block")
                    continue
                r = subprocess.run(["/usr/bin/python3", "-c", "\n".join(body)], cwd=work, env=env,
                                   capture_output=True, text=True)
                print(f"{rel}:{line_no}: {'ok' if r.returncode == 0 else 'FAILED'}: the Python block", flush=True)
                if r.returncode != 0:
                    failures.append(f"{rel}:{line_no}: the Python block failed (exit {r.returncode}):\n"
                                    + "\n".join("    " + x for x in (r.stdout + r.stderr).strip().splitlines()[-12:]))
                continue
            commands = [tiny(c) if kind == "run tiny" else c for _, c in commands_of(body)]
            if only_list:
                for c in commands:
                    print(f"{rel}:{line_no}: {c}")
                continue
            # One bash script per block (loops and variables span lines); the ERR trap names the
            # command that failed.
            script = ("set -eo pipefail\ntrap 'echo \"CHECK-DOCS-FAILED: $BASH_COMMAND (exit $?)\" >&2' ERR\n"
                      + "\n".join(commands) + "\n")
            r = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True,
                               stdin=subprocess.DEVNULL)
            print(f"{rel}:{line_no}: {'ok' if r.returncode == 0 else 'FAILED'}: " + "; ".join(commands), flush=True)
            if r.returncode != 0:
                failed = re.findall(r"CHECK-DOCS-FAILED: (.*)", r.stderr)
                what = failed[0] if failed else f"the block (exit {r.returncode})"
                failures.append(f"{rel}:{line_no}: `{what}` failed:\n"
                                + "\n".join("    " + x for x in (r.stdout + r.stderr).strip().splitlines()[-12:]))
        if not only_list:
            changed = changed_files(work)
            if changed:
                failures.append(f"{rel}: the documented commands changed the repository (write to data/ or a "
                                f"temporary directory instead; `git status --porcelain`):\n"
                                + "\n".join("    " + x for x in changed[:20]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return failures


def self_test():
    """The parts of the rule: annotations found, a bare command block caught, tiny rewriting."""
    text = ("text\n\n<!-- ci: run tiny -->\n\n    ./build/sim/rcsim run --model.layers=200 \\\n"
            "        --output.file=x.h5   # comment\n\nmore\n\n    ./build/sim/rcsim mask-info\n\n"
            "<!-- ci: skip a synopsis -->\n```\nrcsim analyze RUN.h5 [...]\n```\n")
    blocks = code_blocks(text)
    assert [b[1][0] if b[1] else None for b in blocks] == ["run tiny", None, "skip"], blocks
    (offset, cmd), = commands_of(blocks[0][2])
    assert tiny(cmd) == "./build/sim/rcsim run --output.file=x.h5 --model.layers=4 --run.trials=2", tiny(cmd)
    assert tiny("/usr/bin/python3 analysis/figure2.py   # mu") == "/usr/bin/python3 analysis/figure2.py --tiny"
    assert strip_comment("echo 'a # b' # c") == "echo 'a # b'"
    # docs/**/*.md is scanned recursively, and a command that writes into the repository fails.
    with tempfile.TemporaryDirectory() as repo:
        for rel in ("README.md", "docs/a.md", "docs/user/b.md", "docs/dev/deep/c.md", "docs/x.txt"):
            os.makedirs(os.path.dirname(os.path.join(repo, rel)), exist_ok=True)
            with open(os.path.join(repo, rel), "w") as f:
                f.write("# t\n")
        with open(os.path.join(repo, ".gitignore"), "w") as f:
            f.write("/data/\n/build\n")
        assert markdown_files(repo, "docs") == ["docs/a.md", "docs/dev/deep/c.md", "docs/user/b.md"], \
            markdown_files(repo, "docs")
        subprocess.run(["git", "-C", repo, "init", "-q"], check=True)
        subprocess.run(["git", "-C", repo, "add", "-A"], check=True)
        with open(os.path.join(repo, "docs", "bad.md"), "w") as f:
            f.write("<!-- ci: run -->\n\n    bash -c 'mkdir -p data && echo ok > data/fine.txt'\n\n"
                    "<!-- ci: run -->\n\n    bash -c 'echo x > my.h5; echo changed > README.md'\n")
        os.makedirs(os.path.join(repo, "build"))
        problems = run_file(os.path.join(repo, "docs", "bad.md"), repo, os.path.join(repo, "build"))
        assert len(problems) == 1 and "changed the repository" in problems[0], problems
        assert "my.h5" in problems[0] and "README.md" in problems[0] and "fine.txt" not in problems[0], problems[0]
    print("self-test: annotations, continuation lines, comments, the tiny rule, the recursive scan and "
          "the git-status rule behave")


def markdown_files(repo, folder):
    """Every .md file under REPO/FOLDER, recursively, as paths relative to REPO, sorted."""
    found = []
    for d, dirs, names in os.walk(os.path.join(repo, folder)):
        dirs.sort()
        found += [os.path.relpath(os.path.join(d, n), repo) for n in names if n.endswith(".md")]
    return sorted(found)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--repo", default=os.path.normpath(os.path.join(here, "..", "..")))
    ap.add_argument("--build", default=None, help="build directory (default REPO/build)")
    ap.add_argument("--only", action="append", default=[], help="check only this Markdown file (repeatable)")
    ap.add_argument("--list", action="store_true", help="print what would run; run nothing")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        self_test()
        return 0
    build = args.build or os.path.join(args.repo, "build")
    docs = args.only or (["README.md"] + markdown_files(args.repo, "docs"))
    failures = []
    for md in docs:
        failures += run_file(os.path.join(args.repo, md), args.repo, build, args.list)
    if failures:
        print("\n".join(["", "documented commands that fail:"] + failures), file=sys.stderr)
        return 1
    if not args.list:
        print(f"every documented command of {len(docs)} files ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
