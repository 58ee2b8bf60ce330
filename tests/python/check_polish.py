#!/usr/bin/python3
"""The polish items of issue 39, each checked where a user meets it (about 3 s):
  -V               `rcsim -V` prints what `rcsim --version` prints, exit 0
  help             `rcsim --help` shows every command's summary whole (none cut with "...")
  script help      `convert_checkpoint.py --help` (and other scripts) describe themselves in whole sentences
  dry-run          `rcsim run --dry-run` says what an `auto` key resolves to (a comment beside it), the
                   printed text reads back as the same configuration, and the stored /config has no comment
  analyze          on a default run file, one warning per doubtful measure, with its reason
  api              rcsim.__all__ is the public API: each name resolves, the figure scripts' helpers are
                   not at the top level (they stay importable from rcsim.figures)
  python errors    (--with-engine) a bad key given to rcsim.simulate/layer/gradients/resolved_config
                   names the key and the function, never "the command line"

    check_polish.py RCSIM BUILD_DIR WORK_DIR [--with-engine]
"""
import math
import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np

RCSIM, BUILD, WORK = (os.path.abspath(a) for a in sys.argv[1:4])
WITH_ENGINE = "--with-engine" in sys.argv[4:]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
failures = []


def check(name, ok, detail=""):
    print(f"{'ok' if ok else 'FAILED'}: {name}" + (f" ({detail})" if detail and not ok else ""))
    if not ok:
        failures.append(name)


def run(*args, cwd=None):
    return subprocess.run([RCSIM, *args], capture_output=True, text=True, cwd=cwd or WORK)


def words(text):
    return " ".join(text.split())


def check_version():
    long, short = run("--version"), run("-V")
    check("-V: exit 0", short.returncode == 0, f"exit {short.returncode}: {short.stderr.strip()}")
    check("-V: the --version line", short.stdout == long.stdout and long.stdout.startswith("rcsim "),
          f"{short.stdout!r} vs {long.stdout!r}")


def check_help():
    overview = run("--help").stdout
    check("--help: no summary cut with '...'", not any(x.endswith(" ...") for x in overview.splitlines()), overview)
    check("--help: lines of at most 96 columns", all(len(line) <= 96 for line in overview.splitlines()))
    for command in ("keys", "brody-map", "brody-example", "ln-geometry"):
        # The command's own help holds its summary whole: "  SUMMARY (docs/user/geometry.md)".
        own = run(command, "--help").stdout.split("\n\n")[1]
        summary = words(own).rsplit(" (docs/user/geometry.md)", 1)[0]
        check(f"--help: the whole summary of {command}", words(overview).find(f"{command} {summary}") >= 0, summary)


def script_description(script):
    """The description paragraph of a script's --help (the one after the usage lines)."""
    out = subprocess.run([sys.executable, os.path.join(ROOT, "analysis", script), "--help"], capture_output=True,
                         text=True, cwd=WORK)
    return words(out.stdout.split("\n\n")[1]) if out.returncode == 0 else f"exit {out.returncode}: {out.stderr}"


def check_script_help():
    text = script_description("convert_checkpoint.py")
    check("convert_checkpoint.py --help: starts with its first sentence", text.startswith("Convert the "), text)
    for script in ("convert_checkpoint.py", "figure2.py", "metastability.py"):
        text = script_description(script)
        check(f"{script} --help: the description ends a sentence", text.endswith("."), text)


def ini_values(text):
    """key -> value of INI text, comments removed as rcsim's reader removes them."""
    out, section = {}, ""
    for line in text.splitlines():
        body = line.split("#", 1)[0].strip()
        if body.startswith("["):
            section = body.strip("[]")
        elif "=" in body:
            k, v = body.split("=", 1)
            out[f"{section}.{k.strip()}"] = v.strip()
    return out


def check_dry_run():
    for d_qk in ("4", "16", "1/64"):
        dry = run("run", "--dry-run", f"--model.d_qk={d_qk}", "--output.file=dry.h5")
        line = next((x for x in dry.stdout.splitlines() if x.startswith("beta = ")), "")
        m = re.fullmatch(r"beta = auto  # (\S+) = 1/sqrt\(d_qk\)", line)
        stored = float(ini_values(dry.stdout)["model.d_qk"])
        check(f"dry-run: beta = auto resolved beside it (d_qk = {d_qk})",
              m is not None and math.isclose(float(m.group(1)), 1 / math.sqrt(stored), rel_tol=1e-12), line)
    dry = run("run", "--dry-run", "--output.file=dry.h5").stdout
    for key, why in (("o_std", "model.value_dim = 0"), ("mlp_in_std", "mlp.width = 0"), ("mlp_out_std", "mlp.width = 0")):
        line = next((x for x in dry.splitlines() if x.startswith(f"{key} = ")), "")
        check(f"dry-run: {key} = auto says why it is unused", line.startswith(f"{key} = auto  # unused") and why in line,
              line)
    with_mlp = run("run", "--dry-run", "--mlp.width=8", "--model.value_dim=2", "--output.file=dry.h5").stdout
    check("dry-run: a used std is a number, not auto",
          all(ini_values(with_mlp)[k] != "auto" for k in ("weights.o_std", "weights.mlp_in_std", "weights.mlp_out_std")))
    # The printed configuration, given back as a file, is the same configuration.
    with open(os.path.join(WORK, "dry.ini"), "w") as f:
        f.write(dry.split("\n# output:")[0])
    again = run("run", "--config", "dry.ini", "--dry-run")
    check("dry-run: the printed text reads back as the same configuration", again.stdout == dry,
          again.stderr.strip() or "different text")
    # The run file's /config is the configuration without the comments (the golden set's text).
    tiny = run("run", "--model.layers=2", "--run.trials=1", "--output.file=tiny.h5", "--quiet", "--force")
    with h5py.File(os.path.join(WORK, "tiny.h5"), "r") as f:
        stored = f["config"][()].decode() if "config" in f else f.attrs["config"]
    check("run: /config keeps 'beta = auto' without a comment",
          tiny.returncode == 0 and "\nbeta = auto\n" in stored and "#" not in stored.split("\n", 1)[1], stored[:300])


def check_analyze():
    made = run("run", "--output.file=default.h5", "--quiet", "--force")
    out = run("analyze", "--no-write", "default.h5")
    warnings = [x for x in out.stderr.splitlines() if "warning" in x]
    check("analyze: the default run file analysed", made.returncode == 0 and out.returncode == 0, out.stderr)
    check("analyze: one warning per measure at most", 1 <= len(warnings) <= 2, "\n".join(warnings))
    for measure in ("mu", "rank_one_residual"):
        mine = [x for x in warnings if f": {measure}: " in x]
        check(f"analyze: {measure}'s warning gives its reason once",
              len(mine) == 1 and mine[0].count("no exponential phase") == 1 and "usable on layers 0.." in mine[0],
              "\n".join(mine))


def import_package():
    sys.path.insert(0, os.path.join(BUILD, "python"))
    import rcsim
    return rcsim


def check_api(rcsim):
    public = getattr(rcsim, "__all__", None)
    check("api: rcsim.__all__ exists", public is not None)
    public = public or []
    missing = [n for n in public if not hasattr(rcsim, n)]
    check("api: every name of __all__ resolves", not missing, str(missing))
    internals = ("figure_arguments", "save_figure", "run_config", "write_summary", "atomic_writer", "measure_grid",
                 "MEASURES", "stored_config", "plot_curves", "first_layer_below", "write_text", "band", "label")
    shown = [n for n in internals if n in dir(rcsim) or n in public]
    check("api: the figure scripts' helpers are not at the top level", not shown, str(shown))
    import rcsim.figures
    check("api: the helpers stay importable from rcsim.figures",
          all(hasattr(rcsim.figures, n) for n in internals if n not in ("band", "label")))
    for name in ("simulate", "layer", "gradients", "measures", "open_run", "load_run", "ConfigError", "__version__"):
        check(f"api: {name} in __all__", name in public)


def check_python_errors(rcsim):
    X = np.eye(3)
    calls = {"rcsim.simulate": lambda: rcsim.simulate(model={"dimm": 3}),
             "rcsim.layer": lambda: rcsim.layer(X, keys={"model.dimm": 3}),
             "rcsim.gradients": lambda: rcsim.gradients(X, X, keys={"model.dimm": 3}),
             "rcsim.resolved_config": lambda: rcsim.resolved_config(keys={"model.dimm": 3})}
    for who, call in calls.items():
        try:
            call()
            message = "no error"
        except rcsim.ConfigError as e:
            message = str(e)
        check(f"python errors: {who} names the key and itself, not a command line",
              "'model.dimm'" in message and f"given to {who}" in message and "command line" not in message, message)
    text = rcsim.resolved_config(model={"d_qk": 16})
    check("python: resolved_config explains beta = auto like --dry-run", "beta = auto  # 0.25 = 1/sqrt(d_qk)" in text,
          text)


def check_weight_shape():
    """A W_Q of the wrong shape in weights.file: the message names the keys that set the shape."""
    import h5py
    import numpy as np
    path = os.path.join(WORK, "wq.h5")
    with h5py.File(path, "w") as f:
        f["W_Q"] = np.zeros((4, 3))
    r = run("run", "--dry-run", "--model.dim=4", "--model.key_dim=4", "--weights.q=file", f"--weights.file={path}",
            "--output.file=" + os.path.join(WORK, "wq_run.h5"))
    check("W_Q shape: exit 2", r.returncode == 2, f"exit {r.returncode}")
    check("W_Q shape: names model.key_dim", "model.key_dim = 4" in r.stderr and "[4, 3]" in r.stderr, r.stderr.strip())


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    check_version()
    check_help()
    check_script_help()
    check_dry_run()
    check_analyze()
    check_weight_shape()
    rcsim = import_package()
    check_api(rcsim)
    if WITH_ENGINE:
        check_python_errors(rcsim)
    print(f"check_polish: {'ok' if not failures else str(len(failures)) + ' failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
