"""rcsim's PEP 517 / PEP 660 build backend (pyproject.toml: build-backend = "rcsim_build",
backend-path = ["packaging"]), written with the standard library only, so that `pip install .`
and `pip install -e .` work offline with Debian's packages (no setuptools or scikit-build-core
to download into pip's isolated build environment: `requires = []`).

It drives the project's own CMake build: configure (once) and build the targets `rcsim` (the
executable) and `rcsim_engine` (the pybind11 module rcsim._engine) in a persistent folder inside
the source tree, build/pip by default (git-ignored: a reinstall rebuilds only what changed).
Another folder: `pip install . --config-settings build-dir=PATH` or RCSIM_PIP_BUILD_DIR=PATH.
A read-only source tree (a mounted checkout) builds in TMPDIR/rcsim-pip-HASH (HASH of the tree's
path: a reinstall reuses it); `pip install -e .` needs a writable tree and says so in one line.
Every failure is one line (`rcsim_build: ...`, CMake's own output above it), never a traceback;
extra CMake options: --config-settings cmake-args="-DRCSIM_NATIVE=OFF" or RCSIM_CMAKE_ARGS.

The wheel holds the package python/rcsim (as rcsim/), the compiled rcsim/_engine*.so, the
executable as rcsim/bin/rcsim and VERSION as rcsim/VERSION, with a console script `rcsim`
(rcsim._cli:main, which execs rcsim/bin/rcsim). The editable wheel holds a .pth file naming
python/ and places links to the engine and the executable into python/rcsim/ (git-ignored),
where the package finds them.

The version is the file VERSION at the top of the source tree (also read by CMake and the package).
"""
import base64
import csv
import hashlib
import io
import os
import shlex
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "rcsim"
SUMMARY = "Rank collapse in deep self-attention: a C++ simulator with Python bindings"


def _version():
    with open(os.path.join(ROOT, "VERSION"), encoding="utf-8") as f:
        return f.read().strip()


def _log(msg):
    print(f"rcsim_build: {msg}", file=sys.stderr, flush=True)


# What the first build costs, said before it starts: a user's `pip install .` (issue 39) took 7 CPU-minutes,
# 17 min wall on a busy 2-core machine (docs/dev/python-package.md "Installing").
FIRST_BUILD = ("the first time several minutes (about 7 CPU-minutes; 17 min wall were seen on a busy 2-core "
               "machine)")


def _note(msg):
    """A line for the user: on stderr (pip shows it with -v), and also on the terminal pip runs
    in, if there is one (pip without -v shows the backend nothing but its spinner; a build of
    minutes must not look hung). No terminal (CI, a pipe): stderr only."""
    _log(msg)
    if sys.stderr.isatty():
        return
    try:
        with open("/dev/tty", "w", encoding="utf-8") as tty:
            tty.write(f"\nrcsim_build: {msg}\n")
    except OSError:
        pass


def _setting(config_settings, key, env):
    value = (config_settings or {}).get(key)
    if isinstance(value, list):
        value = value[-1] if value else None
    return value if value else os.environ.get(env) or None


class BuildFailure(Exception):
    """A failure the backend reports in one line (the hooks' decorator `_one_line_errors`)."""


def _writable(folder):
    """Whether `folder` can be made and written (a probe file created and removed): False on a
    read-only file system, whatever the user (root included)."""
    try:
        os.makedirs(folder, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".rcsim-write-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
        return True
    except OSError:
        return False


def _cache_entry(cache, name):
    """The value of `name` in a CMakeCache.txt (NAME:TYPE=VALUE), or None."""
    try:
        with open(cache, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.rstrip("\n").partition("=")
                if key.split(":", 1)[0] == name:
                    return value
    except OSError:
        return None
    return None


def _shared_build(config_settings):
    """./build, the folder of the README's commands (scripts/setup.sh), when pip can share it: it
    was configured from this tree as a Release build without sanitizers, it can be written, and no
    CMake options are given (they would change the user's build). Else None."""
    d = os.path.join(ROOT, "build")
    cache = os.path.join(d, "CMakeCache.txt")
    if _setting(config_settings, "cmake-args", "RCSIM_CMAKE_ARGS") or not os.path.isfile(cache):
        return None
    home = _cache_entry(cache, "CMAKE_HOME_DIRECTORY")
    same_tree = home is not None and os.path.realpath(home) == os.path.realpath(ROOT)
    release = _cache_entry(cache, "CMAKE_BUILD_TYPE") == "Release"
    plain = (_cache_entry(cache, "RCSIM_SANITIZE") or "OFF").upper() in ("OFF", "0", "FALSE", "NO")
    if not same_tree or not release or not plain or not _writable(d):
        return None
    return d


def _build_dir(config_settings):
    """The CMake build folder: build-dir / RCSIM_PIP_BUILD_DIR if given (it must be writable),
    else ./build when it can be shared (_shared_build: the README's build, reused as it is
    configured), else build/pip in the tree, else (a read-only tree) TMPDIR/rcsim-pip-HASH."""
    d = _setting(config_settings, "build-dir", "RCSIM_PIP_BUILD_DIR")
    if d:
        d = d if os.path.isabs(d) else os.path.join(ROOT, d)
        if not _writable(d):
            raise BuildFailure(f"the build folder {d} (build-dir / RCSIM_PIP_BUILD_DIR) cannot be written; "
                               "give a writable folder")
        return d
    shared = _shared_build(config_settings)
    if shared:
        _log(f"reusing the build folder {shared} of `bash scripts/setup.sh` (configured from this tree, Release): "
             "only what changed is compiled")
        return shared
    d = os.path.join(ROOT, "build", "pip")
    if _writable(d):
        return d
    tag = hashlib.sha256(ROOT.encode()).hexdigest()[:12]
    fallback = os.path.join(tempfile.gettempdir(), f"rcsim-pip-{tag}")
    if not _writable(fallback):
        raise BuildFailure(f"the source tree {ROOT} is read-only and {fallback} cannot be written either; "
                           "give a writable build folder: --config-settings build-dir=PATH")
    _log(f"the source tree {ROOT} is read-only: building in {fallback}")
    return fallback


def _cmake_build(config_settings):
    """Configure (if needed) and build rcsim and rcsim_engine; returns (executable, engine .so)."""
    build = _build_dir(config_settings)
    extra = shlex.split(_setting(config_settings, "cmake-args", "RCSIM_CMAKE_ARGS") or "")
    jobs = _setting(config_settings, "jobs", "RCSIM_JOBS") or str(min(2, os.cpu_count() or 1))
    # Configure once; again when CMake options are given or the git commit changed (CMake bakes
    # the commit into the binary, which records it in every file it writes: provenance over speed).
    sha_file = os.path.join(build, "rcsim-configured-commit")
    sha = _git_commit()
    configured = os.path.exists(os.path.join(build, "CMakeCache.txt")) and os.path.exists(sha_file)
    if configured:
        with open(sha_file, encoding="utf-8") as f:
            configured = f.read().strip() == sha
    if not configured or extra:
        _log(f"configuring {build}")
        # The shared ./build keeps its own options (those of scripts/setup.sh: its tests included).
        options = [] if build == _shared_build(config_settings) else ["-DCMAKE_BUILD_TYPE=Release",
                                                                       "-DRCSIM_BUILD_TESTS=OFF"]
        _cmake(["-S", ROOT, "-B", build, *options, *extra])
        with open(sha_file, "w", encoding="utf-8") as f:
            f.write(sha + "\n")
    if os.path.exists(os.path.join(build, "sim", "rcsim")):
        _note(f"updating rcsim and its engine in {build} (-j{jobs}): only what changed is compiled")
    else:
        _note(f"compiling rcsim and its engine in {build} (-j{jobs}): {FIRST_BUILD}; `pip install -v .` shows "
              "CMake's progress")
    t = time.monotonic()
    _cmake(["--build", build, "-j", jobs, "--target", "rcsim", "rcsim_engine"])
    _note(f"build done in {time.monotonic() - t:.0f} s")
    exe = os.path.join(build, "sim", "rcsim")
    engine_dir = os.path.join(build, "python", "rcsim")
    engines = sorted(n for n in os.listdir(engine_dir) if n.startswith("_engine") and n.endswith(".so"))
    if not os.access(exe, os.X_OK) or not engines:
        raise BuildFailure(f"the build in {build} made no {exe} or no {engine_dir}/_engine*.so "
                           "(is pybind11-dev installed? scripts/deps.txt)")
    return exe, os.path.join(engine_dir, engines[0])


def _cmake(args):
    """cmake ARGS, its output on stderr; BuildFailure (one line) if it fails or is missing."""
    try:
        r = subprocess.run(["cmake", *args], stdout=sys.stderr)
    except OSError as e:
        raise BuildFailure(f"cannot run cmake ({e.strerror}); install it (scripts/deps.txt)") from None
    if r.returncode != 0:
        raise BuildFailure(f"cmake {' '.join(args[:2])} ... failed (exit {r.returncode}); its messages are above")


def _one_line_errors(hook):
    """A PEP 517 hook whose failures end the backend with one line and exit 1 (pip then reports
    the failed build): BuildFailure and OSError (a folder that cannot be written, a full disk)."""
    import functools

    @functools.wraps(hook)
    def wrapped(*args, **kwargs):
        try:
            return hook(*args, **kwargs)
        except BuildFailure as e:
            _log(f"error: {e}")
        except OSError as e:
            name = f"{e.filename}: " if e.filename else ""
            _log(f"error: {name}{e.strerror or e}")
        sys.exit(1)
    return wrapped


def _git_commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _tag():
    impl = f"cp{sys.version_info.major}{sys.version_info.minor}"
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{impl}-{impl}-{plat}"


def _dist_info_files(version, tag):
    dist = f"{NAME}-{version}.dist-info"
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    metadata = (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\nSummary: {SUMMARY}\n"
                "License: MIT (a build linked with GLPK is GPL-3.0 as a whole; see README)\n"
                "Requires-Python: >=3.9\nDescription-Content-Type: text/markdown\n\n" + readme)
    wheel = (f"Wheel-Version: 1.0\nGenerator: rcsim_build {version}\nRoot-Is-Purelib: false\nTag: {tag}\n")
    entry = "[console_scripts]\nrcsim = rcsim._cli:main\n"
    with open(os.path.join(ROOT, "LICENSE"), encoding="utf-8") as f:
        licence = f.read()
    return dist, {f"{dist}/METADATA": metadata, f"{dist}/WHEEL": wheel, f"{dist}/entry_points.txt": entry,
                  f"{dist}/LICENSE": licence, f"{dist}/top_level.txt": f"{NAME}\n"}


class _Wheel:
    """A wheel being written: every member is hashed for RECORD."""

    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self.record = []

    def add(self, arcname, data, executable=False):
        if isinstance(data, str):
            data = data.encode("utf-8")
        info = zipfile.ZipInfo(arcname, date_time=(2026, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = ((0o755 if executable else 0o644) | 0o100000) << 16
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.record.append((arcname, f"sha256={digest}", str(len(data))))

    def add_file(self, arcname, path, executable=False):
        with open(path, "rb") as f:
            self.add(arcname, f.read(), executable)

    def close(self, dist):
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        w.writerows(self.record)
        w.writerow((f"{dist}/RECORD", "", ""))
        info = zipfile.ZipInfo(f"{dist}/RECORD", date_time=(2026, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = 0o100644 << 16
        self.zip.writestr(info, out.getvalue())
        self.zip.close()


def _package_files():
    """python/rcsim/*.py (the package's sources; no caches, no build products)."""
    pkg = os.path.join(ROOT, "python", NAME)
    return [(f"{NAME}/{n}", os.path.join(pkg, n)) for n in sorted(os.listdir(pkg)) if n.endswith(".py")]


# PEP 517 hooks ------------------------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []  # CMake and a compiler come from Debian (scripts/deps.txt), not from PyPI


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def _write_metadata(metadata_directory):
    """The .dist-info folder of the wheel, written without building (pip's "Preparing metadata"
    takes no time; the build shows as "Building wheel"). Returns its name."""
    dist, meta = _dist_info_files(_version(), _tag())
    for arc, text in meta.items():
        path = os.path.join(metadata_directory, arc)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return dist


@_one_line_errors
def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    return _write_metadata(metadata_directory)


@_one_line_errors
def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return _write_metadata(metadata_directory)


@_one_line_errors
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version, tag = _version(), _tag()
    exe, engine = _cmake_build(config_settings)
    name = f"{NAME}-{version}-{tag}.whl"
    w = _Wheel(os.path.join(wheel_directory, name))
    for arc, path in _package_files():
        w.add_file(arc, path)
    w.add_file(f"{NAME}/VERSION", os.path.join(ROOT, "VERSION"))
    w.add_file(f"{NAME}/{os.path.basename(engine)}", engine)
    w.add_file(f"{NAME}/bin/rcsim", exe, executable=True)
    dist, meta = _dist_info_files(version, tag)
    for arc, text in meta.items():
        w.add(arc, text)
    w.close(dist)
    _log(f"wrote {name}")
    return name


def _replace_link(target, link):
    if os.path.islink(link) or os.path.isfile(link):
        os.remove(link)
    os.symlink(target, link)


@_one_line_errors
def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """PEP 660: a wheel whose .pth puts python/ on sys.path; the engine and the executable are
    linked into python/rcsim/ (git-ignored), so a rebuild (`pip install -e .` again, or
    cmake --build on the same build folder) is seen at once."""
    version, tag = _version(), _tag()
    pkg = os.path.join(ROOT, "python", NAME)
    if not _writable(pkg):
        raise BuildFailure(f"pip install -e links the engine into {pkg}, which is read-only; use `pip install .` "
                           "(it builds in a temporary folder) or a writable checkout")
    exe, engine = _cmake_build(config_settings)
    for old in os.listdir(pkg):  # an engine of another Python version or an older build
        if old.startswith("_engine") and old.endswith(".so") and old != os.path.basename(engine):
            os.remove(os.path.join(pkg, old))
    _replace_link(engine, os.path.join(pkg, os.path.basename(engine)))
    os.makedirs(os.path.join(pkg, "bin"), exist_ok=True)
    _replace_link(exe, os.path.join(pkg, "bin", "rcsim"))
    name = f"{NAME}-{version}-{tag}.whl"
    w = _Wheel(os.path.join(wheel_directory, name))
    w.add(f"__editable__.{NAME}-{version}.pth", os.path.join(ROOT, "python") + "\n")
    dist, meta = _dist_info_files(version, tag)
    for arc, text in meta.items():
        w.add(arc, text)
    w.close(dist)
    _log(f"wrote editable {name} (python/ on sys.path; engine and executable linked into {pkg})")
    return name


@_one_line_errors
def build_sdist(sdist_directory, config_settings=None):
    """A minimal sdist: the files git tracks (or the tree without build products), plus PKG-INFO."""
    version = _version()
    base = f"{NAME}-{version}"
    try:
        files = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], check=True, capture_output=True
                               ).stdout.decode().split("\0")
        files = [f for f in files if f and os.path.lexists(os.path.join(ROOT, f))]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(ROOT):
            rel = os.path.relpath(d, ROOT)
            dirs[:] = [x for x in dirs if not (rel == "." and (x.startswith("build") or x.startswith(".")))
                       and x not in ("__pycache__", "node_modules")]
            files += [os.path.normpath(os.path.join(rel, n)) for n in names]
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tar:
        for f in sorted(files):
            tar.add(os.path.join(ROOT, f), arcname=f"{base}/{f}", recursive=False)
        dist, meta = _dist_info_files(version, "none")
        data = meta[f"{dist}/METADATA"].encode("utf-8")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
        tar.addfile(info, io.BytesIO(data))
    return name
