"""The one wrapper of every command-line entry point in analysis/ (python3 -m rcsim.plot, the
checkpoint converter, metastability.py, the figure and reproduction scripts): the rcsim
executable's contract in Python.

    if __name__ == "__main__":
        sys.exit(command.run(main))

- Bad input (a file, option, measure or value that is not allowed) ends with one line on stderr,
  "PROG: what is wrong, naming the file/option and what is allowed", and exit status 2: raise
  UsageError (or any exception with the class attribute exit_status = 2, such as
  rcsim.RcsimFileError); Parser (an argparse.ArgumentParser) reports its errors the same way.
- A failure while running (a full disk, a write refused by the system) is one line and exit 1.
- Anything else (a bug) is one line naming the exception and where it was raised, exit 1; the
  traceback only with RCSIM_TRACEBACK=1. Ctrl-C is "PROG: interrupted", exit 130.
- Outputs go through rcsim.figures.atomic_writer (an exclusive temporary in the output's folder,
  flushed, fsynced, closed with its errors checked, then renamed), which refuses to replace a file
  this process read as input (note_input: every reader of rcsim.files records its file) or
  anything that is not a regular file.

This module imports nothing of the package (signal_kedia.py loads it by its path before it picks
the package rcsim of a build), so its exceptions are recognised by their exit_status attribute.
"""
import argparse
import math
import os
import sys
import traceback


class UsageError(Exception):
    """Bad input: a file, option, measure or value that is not allowed (exit 2)."""
    exit_status = 2


class OutputRefused(FileExistsError):
    """An output path that must not be replaced: an input of this command, a link, a directory
    (exit 2; a FileExistsError, so callers catching OSError still report it)."""
    exit_status = 2


_INPUTS = set()  # (st_dev, st_ino) of every file this process read as input


def note_input(path):
    """Record `path` (a file name; bytes and file objects are ignored) as an input of this
    process: atomic_writer refuses to replace it."""
    if isinstance(path, (str, os.PathLike)):
        try:
            st = os.stat(path)
        except OSError:
            return
        _INPUTS.add((st.st_dev, st.st_ino))


def is_input(path):
    """Whether `path` (following links) is a file this process recorded with note_input."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) in _INPUTS


def check_output(path):
    """OutputRefused unless `path` may be replaced by an output: it does not exist, or it is a
    regular file (not a link, directory, FIFO or device) that this process did not read as input.
    atomic_writer calls it; a command with several outputs calls it on each before writing any."""
    import errno
    import stat
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise OutputRefused(errno.EEXIST, "exists and is not a regular file: not replaced", os.fspath(path))
    if is_input(path):
        raise OutputRefused(errno.EEXIST, "is an input of this command: not replaced; choose another output file",
                            os.fspath(path))


class Parser(argparse.ArgumentParser):
    """argparse with the executable's contract: an error is one line, "PROG: argument --x: what is
    wrong (see --help)", exit 2 (argparse prints the usage block first)."""

    def error(self, message):
        sys.stderr.write(f"{self.prog}: {message} (see --help)\n")
        sys.exit(2)


def finite_float(lo=None, hi=None, lo_open=False):
    """An argparse type: a finite number in [lo, hi] (lo excluded with lo_open)."""
    def parse(text):
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
        low = lo is not None and (x <= lo if lo_open else x < lo)
        if not math.isfinite(x) or low or (hi is not None and x > hi):
            allowed = "a finite number" + (f" {'>' if lo_open else '>='} {lo:g}" if lo is not None else "") + \
                (f" and <= {hi:g}" if hi is not None else "")
            raise argparse.ArgumentTypeError(f"'{text}' is not allowed: {allowed}")
        return x
    return parse


def whole_number(lo=0):
    """An argparse type: an integer >= lo."""
    def parse(text):
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
        if n < lo:
            raise argparse.ArgumentTypeError(f"'{text}' is not allowed: a whole number >= {lo}")
        return n
    return parse


def existing_file(text):
    """An argparse type: a path to an existing, readable regular file (not a directory)."""
    if not os.path.exists(text):
        raise argparse.ArgumentTypeError(f"'{text}': no such file")
    if not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"'{text}': not a regular file")
    if not os.access(text, os.R_OK):
        raise argparse.ArgumentTypeError(f"'{text}': not readable (permission denied)")
    return text


# What to do when no rcsim executable is found: the one line every script prints (exit 2).
HOW_TO_GET_RCSIM = ("no rcsim executable: neither ./build/sim/rcsim (`bash scripts/setup.sh` builds it) nor `rcsim` "
                    "on PATH (`pip install .` from the repository puts it there, in the venv's bin/); or give "
                    "--rcsim PATH")


def rcsim_executable(given=None):
    """The rcsim executable a script runs, as a path: `given` (the script's --rcsim: a path, or a
    name looked up on PATH) if set; else, in this order, the build tree's ./build/sim/rcsim of the
    source tree this file sits in (python/rcsim/../../build), the executable inside this
    package (rcsim/bin/rcsim: `pip install -e .`, the build tree's build/python), `rcsim` on PATH
    (the console script `pip install .` writes, or `cmake --install`'s executable), the console
    script beside this Python (a venv's bin/ not on PATH). None of them: UsageError (exit 2)
    with the one line HOW_TO_GET_RCSIM."""
    import shutil
    if given:
        found = shutil.which(given) if os.sep not in given else (given if _is_executable(given) else None)
        if not found:
            why = "not on PATH" if os.sep not in given else "not an executable file"
            raise UsageError(f"--rcsim {given}: no such executable ({why})")
        return found
    here = os.path.dirname(os.path.realpath(__file__))
    for candidate in (os.path.join(os.path.dirname(os.path.dirname(here)), "build", "sim", "rcsim"),
                      os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "rcsim")):
        if _is_executable(candidate):
            return candidate
    found = shutil.which("rcsim") or shutil.which("rcsim", path=os.path.dirname(sys.executable))
    if found:
        return found
    raise UsageError(HOW_TO_GET_RCSIM)


def _is_executable(path):
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _where(e):
    """file:line of the innermost frame of e's traceback."""
    tb = traceback.extract_tb(e.__traceback__)
    return f"{os.path.basename(tb[-1].filename)}:{tb[-1].lineno}" if tb else "?"


def _one_line(text):
    return " ".join(str(text).split())


def run(main, prog=None, argv=None):
    """Call main() (main(argv) when argv is given) under the contract above; returns the exit
    status for sys.exit. main returns its status (None = 0) or raises."""
    prog = prog or os.path.basename(sys.argv[0] or "python3")
    if prog == "__main__.py":
        prog = "python3 -m " + (sys.modules["__main__"].__spec__.name if sys.modules["__main__"].__spec__ else "")
    try:
        status = main() if argv is None else main(argv)
        return 0 if status is None else status
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        return 130
    except BrokenPipeError:  # stdout closed by the reader (| head): nothing left to say
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), sys.stdout.fileno())
        return 1
    except Exception as e:  # noqa: BLE001 - the point of the wrapper
        if os.environ.get("RCSIM_TRACEBACK") == "1":
            traceback.print_exc()
        status = getattr(e, "exit_status", None)
        if isinstance(e, OSError):
            status = status or 1
            name = f"'{e.filename}': " if e.filename else ""
            message = f"{name}{e.strerror or _one_line(e)}"
        elif status is not None:
            message = _one_line(e)
        else:
            status = 1
            message = (f"internal error ({type(e).__name__}: {_one_line(e)}) at {_where(e)}; "
                       "RCSIM_TRACEBACK=1 prints the traceback")
        sys.stderr.write(f"{prog}: {message}\n")
        return status
