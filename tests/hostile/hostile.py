#!/usr/bin/python3
"""Hostile inputs and write safety of the rcsim CLI, table-driven.

    hostile.py RCSIM WORKDIR [-k SUBSTRING]

Each case gets an empty directory, prepares files in it (a good run file, a foreign file, a
symlink...), runs one rcsim command (optionally under a file-size limit, RLIMIT_FSIZE, which
makes writes fail with EFBIG like a full disk) and asserts:
  - the exit code;
  - stderr holds a line with the expected text (and at most one 'error:' line);
  - every file that existed before is bitwise unchanged (SHA-256), unless the case says it may change;
  - nothing is left behind: no *.tmp, *.lock or *.partial, and no new files besides the expected ones.
Then the two-process cases: a second run on an output (or sweep directory) in use stops at once
with "in use by process N" while the first finishes; a run killed (SIGKILL) after a checkpoint
flush by the cap freed its token snapshots resumes to a /tokens bitwise equal to an uninterrupted
run's (kill_after_cap_flush). Exit 0 iff every case passes.
"""
import argparse
import hashlib
import os
import resource
import shutil
import subprocess
import sys
import time

SANITIZED = False  # set in main: rcsim built with AddressSanitizer
SMALL = ["--config", "small.ini"]
SWEEP = ["--config", "sweep.ini"]
EQ = ["--config", "eq.ini"]
CONFIGS = {
    "small.ini": "[model]\ntokens = 6\ndim = 4\nlayers = 20\n[run]\ntrials = 4\nthreads = 1\n",
    "sweep.ini": "[model]\ntokens = 6\ndim = 4\nlayers = 20\n[run]\ntrials = 4\nthreads = 1\n"
                 "[output]\nfile = sw/p.h5\n[sweep]\nmask.type = complete, causal\n",
    "eq.ini": "[model]\ntokens = 3\ndim = 2\nlayers = 200\n[norm]\ntype = sphere\n[weights]\nq = zero\nk = zero\n"
              "v = identity\n[init]\ntype = sphere\n[run]\ntrials = 4\n[output]\nfile = eq.h5\n",
}


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def snapshot(d):
    """{relative path: hash or 'dir'/'link'/'other'} of everything under d (links not followed)."""
    out = {}
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            p = os.path.join(root, n)
            rel = os.path.relpath(p, d)
            if os.path.islink(p):
                out[rel] = "link:" + os.readlink(p)
            elif os.path.isdir(p):
                out[rel] = "dir"
            elif os.path.isfile(p):
                out[rel] = sha(p)
            else:
                out[rel] = "other"
    return out


class Ctx:
    def __init__(self, rcsim, d):
        self.rcsim, self.d = rcsim, d
        for name, text in CONFIGS.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)

    def p(self, name):
        return os.path.join(self.d, name)

    def run(self, args, fsize=None, check=True):
        def limit():
            if isinstance(fsize, tuple):  # ("AS", bytes): an address-space limit (out of memory)
                resource.setrlimit(resource.RLIMIT_AS, (fsize[1], fsize[1]))
            elif fsize is not None:
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        r = subprocess.run([self.rcsim] + args, cwd=self.d, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, errors="surrogateescape", preexec_fn=limit, timeout=120)
        if check and r.returncode != 0:
            raise RuntimeError(f"setup command failed ({r.returncode}): {args}\n{r.stderr}")
        return r

    def good_run(self, name="run.h5", extra=()):
        self.run(["run", "--quiet", f"--output.file={name}"] + SMALL + list(extra))

    def text(self, name, content="not an rcsim file\n"):
        with open(self.p(name), "w") as f:
            f.write(content)


def external_file(ctx, name, dataset, shape, virtual=False, group=False):
    """An HDF5 file whose `dataset` keeps its values outside the file: external raw storage
    (the bytes of secret.bin) or a virtual dataset (a view of src.h5); or a group of that name."""
    import h5py
    import numpy as np
    count = int(np.prod(shape))
    with open(ctx.p("secret.bin"), "wb") as f:
        f.write(np.linspace(0.1, 1.0, count).astype("<f8").tobytes())
    with h5py.File(ctx.p("src.h5"), "w") as f:
        f["data"] = np.linspace(0.1, 1.0, count).reshape(shape)
    with h5py.File(ctx.p(name), "w") as f:
        if group:
            f.create_group(dataset)
        elif virtual:
            layout = h5py.VirtualLayout(shape=shape, dtype="f8")
            layout[...] = h5py.VirtualSource("src.h5", "data", shape=shape)
            f.create_virtual_dataset(dataset, layout)
        else:
            f.create_dataset(dataset, shape=shape, dtype="<f8", external=[("secret.bin", 0, 8 * count)])


def edit_run(ctx, name, edit):
    """Apply edit(h5py.File) to the run file `name` (made by good_run) in place."""
    import h5py
    with h5py.File(ctx.p(name), "r+") as f:
        edit(f)


def replace_dataset(f, name, data=None, external=None):
    import numpy as np
    attrs = dict(f[name].attrs) if name in f else {}
    del f[name]
    if external:
        n = int(np.prod(external))
        with open(os.path.join(os.path.dirname(f.filename), "secret.bin"), "wb") as out:
            out.write(np.arange(n, dtype="<f8").tobytes())
        f.create_dataset(name, shape=external, dtype="<f8", external=[("secret.bin", 0, 8 * n)])
    else:
        f[name] = data
    for k, v in attrs.items():
        if k not in ("DIMENSION_LIST", "REFERENCE_LIST", "CLASS", "NAME"):
            f[name].attrs[k] = v


def keys_file(ctx, name, scale):
    import h5py
    import numpy as np
    keys = np.random.default_rng(3).standard_normal((8, 3)) * scale
    with h5py.File(ctx.p(name), "w") as f:
        f["keys"] = keys


def keys_file_with(ctx, name, index, value):
    """keys_file's keys with one entry replaced (a NaN or an infinity)."""
    import h5py
    keys_file(ctx, name, 1.0)
    with h5py.File(ctx.p(name), "r+") as f:
        f["keys"][index] = value


def tokens_run(ctx, edit=None):
    """A run file with /tokens (final layer), optionally edited."""
    ctx.run(["run", "--quiet", "--output.file=tok.h5", "--output.tokens=final"] + SMALL)
    if edit:
        edit_run(ctx, "tok.h5", edit)


def write(ctx, name, data):
    with open(ctx.p(name), "wb") as f:
        f.write(data)


def foreign_hdf5(ctx, name):
    import h5py
    with h5py.File(ctx.p(name), "w") as f:
        f["data"] = [1.0, 2.0, 3.0]
        f.attrs["filetype"] = "someone-else"


def eye_mask(ctx):
    import h5py
    import numpy as np
    with h5py.File(ctx.p("eye_mask.h5"), "w") as f:
        f["mask"] = np.eye(3, dtype="u1")  # every token attends only to itself: no centre


def bool_mask(ctx):
    import h5py
    import numpy as np
    with h5py.File(ctx.p("bool_mask.h5"), "w") as f:
        f["mask"] = np.tril(np.ones((4, 4), dtype=bool))  # h5py stores bool as an HDF5 enum (FALSE, TRUE)


def check_bool_mask_run(d):
    import h5py
    import numpy as np
    with h5py.File(os.path.join(d, "bool.h5"), "r") as f:
        return np.array_equal(f["mask"][()] != 0, np.tril(np.ones((4, 4), dtype=bool)))


def check_eye_run(d):
    import h5py
    with h5py.File(os.path.join(d, "eye.h5"), "r") as f:
        m = f["mask"].attrs
        return list(m["centres"]) == [] and m["radius"] == -1 and m["quasi_strongly_connected"] == 0 \
            and f.attrs["complete"] == 1


# Each case: (name, setup(ctx), args, expected exit, expected text in stderr, files that may change,
#             files expected to be created, fsize limit or None)
def cases():
    big = ["--model.layers=200", "--run.trials=8", "--output.spectrum=true", "--output.tokens=all"]
    return [
        # 1. disk full (file-size limit) over a good output: old file intact, no temporary, OS error named
        ("disk_full_run_keeps_old_file", lambda c: c.good_run(),
         ["run", "--output.file=run.h5", "--force", "--run.seed=7"] + SMALL + big, 1, "File too large", [], [], 40000),
        ("disk_full_new_output_leaves_nothing", lambda c: None,
         ["run", "--output.file=new.h5"] + SMALL + big, 1, "File too large", [], [], 40000),
        ("disk_full_analyze_keeps_run_file", lambda c: c.good_run(),
         ["analyze", "run.h5"], 1, "File too large", [], [], "run.h5+2000"),
        ("disk_full_sweep_point", lambda c: None,
         ["sweep"] + SWEEP + big, 1, "File too large",
         [], ["sw", "sw/p", "sw/p/index.h5"], 40000),
        ("disk_full_equilibria", lambda c: None, ["equilibria"] + EQ, 1, "File too large", [], [], 3000),
        # 2. foreign files are refused (exit 2, named), never replaced
        ("run_refuses_text_file", lambda c: c.text("run.h5"), ["run", "--output.file=run.h5"] + SMALL, 2,
         "'run.h5' exists and is not a complete rcsim-run file", [], [], None),
        ("run_refuses_foreign_hdf5", lambda c: foreign_hdf5(c, "run.h5"), ["run", "--output.file=run.h5"] + SMALL, 2,
         "is not a complete rcsim-run file", [], [], None),
        ("run_refuses_equilibria_file", lambda c: c.run(["equilibria", "--output.file=run.h5", "--quiet"] + EQ),
         ["run", "--output.file=run.h5"] + SMALL, 2, "is not a complete rcsim-run file", [], [], None),
        ("run_force_replaces_text_file", lambda c: c.text("run.h5"), ["run", "--force", "--output.file=run.h5"] + SMALL,
         0, "", ["run.h5"], [], None),
        ("run_refuses_directory", lambda c: os.mkdir(c.p("out.h5")), ["run", "--force", "--output.file=out.h5"] + SMALL,
         2, "'out.h5' exists and is a directory", [], [], None),
        # 10. absurd sizes refused before allocating, with the memory they would need
        ("run_refuses_absurd_layers", lambda c: None, ["run", "--output.file=big.h5", "--model.layers=2000000000", "--run.trials=1000000"] + SMALL,
         2, "would need about", [], [], None),
        ("dry_run_refuses_absurd_layers", lambda c: None,
         ["run", "--dry-run", "--output.file=big.h5", "--model.layers=2000000000", "--run.trials=1000000"] + SMALL, 2, "would need about", [], [],
         None),
        ("dry_run_prints_memory_estimate", lambda c: None, ["run", "--dry-run", "--output.file=x.h5"] + SMALL, 0, "", [],
         [], None),
        ("run_huge_log_schedule_is_quick", lambda c: None,
         ["run", "--output.file=log.h5", "--output.schedule=log:2147483647"] + SMALL, 0, "", [], ["log.h5"], None),
        ("run_refuses_trailing_slash", lambda c: None, ["run", "--output.file=out/"] + SMALL, 2,
         "'out/' names a directory", [], [], None),
        ("keys_refuses_trailing_slash", lambda c: None, ["keys", "--output.file=k/"], 2,
         "'k/' names a directory", [], [], None),
        ("run_refuses_symlink", lambda c: (c.text("victim.txt"), os.symlink("victim.txt", c.p("out.h5"))),
         ["run", "--force", "--output.file=out.h5"] + SMALL, 2, "'out.h5' exists and is a symbolic link", [], [], None),
        ("run_refuses_device", lambda c: None, ["run", "--force", "--output.file=/dev/null"] + SMALL, 2,
         "'/dev/null' exists and is a device", [], [], None),
        ("sweep_refuses_text_point", lambda c: (os.makedirs(c.p("sw/p")), c.text("sw/p/mask.type=causal.h5")),
         ["sweep"] + SWEEP, 2,
         "is not a complete rcsim-run file", [], [], None),
        ("keys_refuses_text_file", lambda c: c.text("keys.h5"), ["keys", "--output.file=keys.h5"], 2,
         "'keys.h5' exists and is not a complete rcsim-keys file", [], [], None),
        ("keys_refuses_symlink", lambda c: (c.text("victim.txt"), os.symlink("victim.txt", c.p("keys.h5"))),
         ["keys", "--force", "--output.file=keys.h5"], 2, "is a symbolic link", [], [], None),
        ("brody_example_refuses_text_file", lambda c: c.text("ex.h5"), ["brody-example", "--output.file=ex.h5"], 2,
         "is not a complete rcsim-brody-example file", [], [], None),
        ("equilibria_refuses_text_file", lambda c: c.text("eq.h5"),
         ["equilibria"] + EQ, 2,
         "'eq.h5' exists and is not a complete rcsim-equilibria file", [], [], None),
        ("equilibria_refuses_run_file", lambda c: c.good_run("eq.h5"),
         ["equilibria"] + EQ, 2,
         "is not a complete rcsim-equilibria file", [], [], None),
        ("analyze_refuses_symlink", lambda c: (c.good_run(), os.symlink("run.h5", c.p("link.h5"))),
         ["analyze", "link.h5"], 2, "'link.h5' exists and is a symbolic link", [], [], None),
        # 6. temporaries are never followed through symlinks planted at the old predictable names
        ("run_ignores_planted_tmp_symlink",
         lambda c: (c.good_run(), c.text("victim.txt"), os.symlink("victim.txt", c.p("run.h5.tmp")),
                    os.symlink("victim.txt", c.p(".run.h5.tmp"))),
         ["run", "--force", "--output.file=run.h5", "--run.seed=5"] + SMALL, 0, "", ["run.h5"], [], None),
        ("analyze_ignores_planted_tmp_symlink",
         lambda c: (c.good_run(), c.text("victim.txt"), os.symlink("victim.txt", c.p("run.h5.analysis.tmp"))),
         ["analyze", "run.h5"], 0, "", ["run.h5"], [], None),
        ("run_removes_stale_temporary_of_killed_run",
         lambda c: (c.text(".run.h5.AbC123.tmp", "half a file"), c.text(".run.h5.partial.XyZ789.tmp", "half")),
         ["run", "--output.file=run.h5"] + SMALL, 0, "", [".run.h5.AbC123.tmp", ".run.h5.partial.XyZ789.tmp"],
         ["run.h5"], None),
        # 11. a custom mask that is not quasi-strongly connected is legal: written, empty centres, radius -1
        ("run_custom_mask_not_quasi_strongly_connected", eye_mask,
         ["run", "--output.file=eye.h5", "--model.tokens=3", "--mask.type=custom", "--mask.file=eye_mask.h5"] + SMALL,
         0, "not quasi-strongly connected", [], ["eye.h5"], None),
        # issue 22: a bool mask dataset (h5py: an HDF5 enum) is read as its 0/1 values
        ("run_reads_bool_mask_dataset", bool_mask,
         ["run", "--output.file=bool.h5", "--model.tokens=4", "--mask.type=custom", "--mask.file=bool_mask.h5"] + SMALL,
         0, "", [], ["bool.h5"], None),
        ("sweep_ignores_planted_index_symlink",
         lambda c: (os.makedirs(c.p("sw/p")), c.text("victim.txt"), os.symlink("../../victim.txt", c.p("sw/p/index.h5.tmp"))),
         ["sweep"] + SWEEP, 0, "", [],
         ["sw/p/mask.type=complete.h5", "sw/p/mask.type=causal.h5", "sw/p/index.h5"], None),
        # ---- issue 10, second part ----
        # 7. datasets stored outside their file (external raw storage, virtual layout) refused in every input
        ("run_refuses_external_init_file", lambda c: external_file(c, "x0.h5", "X0", (6, 4)),
         ["run", "--output.file=o.h5", "--init.type=file", "--init.file=x0.h5"] + SMALL, 2,
         "values are stored outside the file (external storage in 'secret.bin')", [], [], None),
        ("run_refuses_virtual_init_file", lambda c: external_file(c, "x0.h5", "X0", (6, 4), virtual=True),
         ["run", "--output.file=o.h5", "--init.type=file", "--init.file=x0.h5"] + SMALL, 2,
         "the dataset is virtual", [], [], None),
        ("run_refuses_external_weights_file", lambda c: external_file(c, "w.h5", "W_Q", (4, 4)),
         ["run", "--output.file=o.h5", "--weights.q=file", "--weights.file=w.h5"] + SMALL, 2,
         "stored outside the file", [], [], None),
        ("run_refuses_virtual_weights_file", lambda c: external_file(c, "w.h5", "W_V", (4, 4), virtual=True),
         ["run", "--output.file=o.h5", "--weights.v=file", "--weights.file=w.h5"] + SMALL, 2,
         "the dataset is virtual", [], [], None),
        ("run_refuses_external_mask_file", lambda c: external_file(c, "m.h5", "mask", (6, 6)),
         ["run", "--output.file=o.h5", "--mask.type=custom", "--mask.file=m.h5"] + SMALL, 2,
         "stored outside the file", [], [], None),
        ("keys_refuses_external_keys_file", lambda c: external_file(c, "k.h5", "keys", (5, 3)),
         ["keys", "--keys.source=file", "--keys.file=k.h5"], 2, "stored outside the file", [], [], None),
        ("keys_refuses_external_run_tokens",
         lambda c: tokens_run(c, lambda f: (replace_dataset(f, "tokens", external=(4, 1, 6, 4)))),
         ["keys", "--keys.source=run", "--keys.file=tok.h5"], 2, "stored outside the file", [], [], None),
        ("analyze_refuses_external_layer",
         lambda c: (c.good_run(), edit_run(c, "run.h5", lambda f: replace_dataset(f, "layer", external=(21,)))),
         ["analyze", "run.h5"], 2, "stored outside the file", [], [], None),
        ("sweep_refuses_external_init_once", lambda c: external_file(c, "x0.h5", "X0", (6, 4)),
         ["sweep", "--init.type=file", "--init.file=x0.h5"] + SWEEP, 2, "stored outside the file", [], [], None),
        # 8. control characters and invalid UTF-8 escaped; long values cut
        ("config_control_characters_escaped",
         lambda c: write(c, "ctl.ini", b"[model]\ntokens = 3\x1b[2J\x07\xff\n"),
         ["run", "--config", "ctl.ini"], 2, "invalid value '3\\e[2J\\x07\\xFF' for key 'model.tokens'", [], [], None),
        ("config_unknown_key_control_characters",
         lambda c: write(c, "ctl.ini", b"[model]\ntok\x1b]0;pwned\x07ens = 3\n"),
         ["run", "--config", "ctl.ini"], 2, "unknown key 'model.tok\\e]0;pwned\\x07ens'", [], [], None),
        ("command_line_long_value_cut", lambda c: None,
         ["run", "--model.tokens=" + "9" * 100000], 2, "... (100000 bytes)' for key 'model.tokens'", [], [], None),
        ("config_long_line_cut", lambda c: write(c, "long.ini", b"[model]\n" + b"x" * 1000000 + b"\n"),
         ["run", "--config", "long.ini"], 2, "bytes)", [], [], None),
        ("stored_configuration_escaped",
         lambda c: (c.good_run(), edit_run(c, "run.h5", lambda f: replace_dataset(
             f, "config", f["config"][()].decode().replace("tokens = 6", "tokens = 6\x1b]0;pwned\x07")))),
         ["run", "--output.file=run.h5"] + SMALL, 2, "6\\e]0;pwned\\x07 -> 6", [], [], None),
        # 9. crashes: empty /layer, short /tokens_layer, keys beyond GLPK's range
        ("analyze_empty_layer",
         lambda c: (c.good_run(), edit_run(c, "run.h5", lambda f: replace_dataset(f, "layer", data=[])) ),
         ["analyze", "run.h5"], 2, "/layer has shape [0], expected a non-empty list of layers", [], [], None),
        ("analyze_non_integer_layer",
         lambda c: (c.good_run(), edit_run(c, "run.h5", lambda f: replace_dataset(
             f, "layer", data=[float("nan")] * 21))),
         ["analyze", "run.h5"], 2, "expected whole layer numbers", [], [], None),
        ("analyze_truncated_run_file", lambda c: (c.good_run(), open(c.p("run.h5"), "r+b").truncate(3000)),
         ["analyze", "run.h5"], 2, "is not a readable HDF5 file (truncated or corrupted)", [], [], None),
        ("analyze_text_file", lambda c: c.text("run.h5"), ["analyze", "run.h5"], 2,
         "is not an HDF5 file", [], [], None),
        ("analyze_missing_file", lambda c: None, ["analyze", "nothing.h5"], 2, "no such file", [], [], None),
        ("analyze_directory", lambda c: os.mkdir(c.p("d.h5")), ["analyze", "d.h5"], 2, "a directory without a sweep index", [], [], None),
        ("keys_run_short_tokens_layer",
         lambda c: tokens_run(c, lambda f: replace_dataset(f, "tokens_layer", data=[])),
         ["keys", "--keys.source=run", "--keys.file=tok.h5"], 2,
         "/tokens_layer has shape [0], expected [1]", [], [], None),
        ("keys_run_tokens_is_a_group",
         lambda c: tokens_run(c, lambda f: (f.__delitem__("tokens"), f.create_group("tokens"))),
         ["keys", "--keys.source=run", "--keys.file=tok.h5"], 2, "is a group, expected a dataset", [], [], None),
        ("keys_above_1e155", lambda c: keys_file(c, "k.h5", 1e160),
         ["keys", "--keys.source=file", "--keys.file=k.h5", "--norm.type=none"], 0, "", [], [], None),
        ("keys_near_max_double", lambda c: keys_file(c, "k.h5", 1e306),
         ["keys", "--keys.source=file", "--keys.file=k.h5", "--norm.type=none"], 0, "", [], [], None),
        ("keys_below_1e-165", lambda c: keys_file(c, "k.h5", 1e-170),
         ["keys", "--keys.source=file", "--keys.file=k.h5", "--norm.type=none", "--output.file=tiny.h5"],
         0, "", [], ["tiny.h5"], None),
        # issue 47: a keys file or run tokens with a NaN or infinity named: the file, the dataset (or the run's
        # trial and layer) and the entry
        ("keys_file_nan_named", lambda c: keys_file_with(c, "k.h5", (2, 1), float("nan")),
         ["keys", "--keys.source=file", "--keys.file=k.h5"], 2,
         "keys.file 'k.h5': dataset 'keys' holds the non-finite value nan at key 2, component 1 (of [8, 3])",
         [], [], None),
        ("keys_file_inf_named", lambda c: keys_file_with(c, "k.h5", (7, 0), -float("inf")),
         ["keys", "--keys.source=file", "--keys.file=k.h5"], 2,
         "keys.file 'k.h5': dataset 'keys' holds the non-finite value -inf at key 7, component 0", [], [], None),
        ("keys_run_tokens_nan_named",
         lambda c: tokens_run(c, lambda f: f["tokens"].__setitem__((0, 0, 3, 2), float("nan"))),
         ["keys", "--keys.source=run", "--keys.file=tok.h5"], 2,
         "keys.file 'tok.h5': /tokens trial 0 layer 20 holds the non-finite value nan at key 3, component 2",
         [], [], None),
        # issue 47: what a key derives within the precision's range, refused up front naming the key and the
        # limit (was: trials stopped as non-finite). beta = model.beta (ln N)^p: at N = 6, p = 700 gives 1e177
        # (float64's limit 6.7e153: d_qk = 1/beta^2 a positive double), p = 200 gives 4e50 (float32's 1.7e38)
        ("beta_log_power_beyond_float64", lambda c: None,
         ["run", "--output.file=o.h5", "--model.beta_log_power=700"] + SMALL, 2,
         "key 'model.beta_log_power' = 700: the logit scale beta = ", [], [], None),
        ("beta_log_power_beyond_float32", lambda c: None,
         ["run", "--output.file=o.h5", "--model.beta_log_power=200", "--run.precision=float32"] + SMALL, 2,
         "is beyond the limit [5.87747e-39, 1.70141e+38] of float32", [], [], None),
        ("beta_log_power_negative_underflow", lambda c: None,
         ["run", "--output.file=o.h5", "--model.beta_log_power=-1e6"] + SMALL, 2,
         "the logit scale beta = 0 is beyond the limit", [], [], None),
        ("beta_log_power_within_float64_runs", lambda c: None,
         ["run", "--output.file=o.h5", "--model.beta_log_power=400"] + SMALL, 0, "", [], ["o.h5"], None),
        ("diff_lambda_beyond_float64", lambda c: None,
         ["run", "--output.file=o.h5", "--attention.differential=true", "--attention.diff_lambda=1e160"] + SMALL, 2,
         "key 'attention.diff_lambda' = 1e160: |lambda| is beyond the limit 1.34078e+154 of float64", [], [], None),
        ("diff_lambda_beyond_float32", lambda c: None,
         ["run", "--output.file=o.h5", "--attention.differential=true", "--attention.diff_lambda=-1e20",
          "--run.precision=float32"] + SMALL, 2, "give |lambda| <= 1.84467e+19", [], [], None),
        ("diff_lambda_within_float32_runs", lambda c: None,
         ["run", "--output.file=o.h5", "--attention.differential=true", "--attention.diff_lambda=1e17",
          "--run.precision=float32", "--norm.type=sphere"] + SMALL, 0, "", [], ["o.h5"], None),
        # 13. clear errors
        ("config_utf8_bom_accepted", lambda c: write(c, "bom.ini", b"\xef\xbb\xbf[model]\ntokens = 5\n"),
         ["run", "--config", "bom.ini", "--dry-run"], 0, "", [], [], None),
        ("config_duplicate_key_names_both_lines",
         lambda c: c.text("dup.ini", "[model]\ntokens = 3\ndim = 2\n[run]\ntrials = 2\n[model]\ntokens = 4\n"),
         ["run", "--config", "dup.ini"], 2, "key 'model.tokens' is given twice (dup.ini:2 and dup.ini:7)", [], [], None),
        ("config_duplicate_sweep_axis",
         lambda c: c.text("dup.ini", "[sweep]\nmodel.tokens = 3, 4\nmodel.tokens = 5\n"),
         ["sweep", "--config", "dup.ini"], 2, "key 'sweep.model.tokens' is given twice (dup.ini:2 and dup.ini:3)",
         [], [], None),
        ("config_is_a_directory", lambda c: os.mkdir(c.p("cfg")), ["run", "--config", "cfg"], 2,
         "configuration file 'cfg' is a directory", [], [], None),
        ("init_file_group_where_dataset_expected", lambda c: external_file(c, "x0.h5", "X0", (6, 4), group=True),
         ["run", "--output.file=o.h5", "--init.type=file", "--init.file=x0.h5"] + SMALL, 2,
         "x0.h5:/X0 is a group, expected a dataset", [], [], None),
        ("weights_file_truncated",
         lambda c: (c.good_run("w.h5"), open(c.p("w.h5"), "r+b").truncate(2000)),
         ["run", "--output.file=o.h5", "--weights.q=file", "--weights.file=w.h5"] + SMALL, 2,
         "is not a readable HDF5 file", [], [], None),
        ("mask_file_missing", lambda c: None,
         ["run", "--output.file=o.h5", "--mask.type=custom", "--mask.file=none.h5"] + SMALL, 2,
         "mask.file 'none.h5': no such file", [], [], None),
        ("sweep_bad_weights_file_reported_once_before_computing", lambda c: c.text("w.h5", "not hdf5"),
         ["sweep", "--weights.q=file", "--weights.file=w.h5"] + SWEEP, 2,
         "weights.file 'w.h5' is not an HDF5 file", [], [], None),
        ("sweep_refuses_foreign_index",
         lambda c: (os.makedirs(c.p("sw/p")), foreign_hdf5(c, "sw/p/index.h5")),
         ["sweep"] + SWEEP, 2, "sw/p/index.h5' exists and is not an rcsim sweep index", [], [], None),
        ("sweep_refuses_text_index",
         lambda c: (os.makedirs(c.p("sw/p")), c.text("sw/p/index.h5")),
         ["sweep"] + SWEEP, 2, "is not an rcsim sweep index", [], [], None),
        ("equilibria_probes_too_large", lambda c: None, ["equilibria", "--probes=1e10"] + EQ, 2,
         "--probes=1e10: expected a whole number from 1 to 1000000", [], [], None),
        ("equilibria_probes_fraction", lambda c: None, ["equilibria", "--probes", "2.5"] + EQ, 2,
         "--probes=2.5: expected a whole number", [], [], None),
        ("equilibria_probes_nan", lambda c: None, ["equilibria", "--probes=nan"] + EQ, 2,
         "--probes=nan: expected a whole number", [], [], None),
        ("equilibria_refuses_foreign_hdf5", lambda c: foreign_hdf5(c, "eq.h5"), ["equilibria"] + EQ, 2,
         "is not a complete rcsim-equilibria file", [], [], None),
        ("mask_info_window_near_int_max", lambda c: None,
         ["mask-info", "--mask.type=unidirectional_sliding_window", "--mask.window=2147483647",
          "--model.tokens=5"], 0, "", [], [], None),
        ("mask_info_sliding_window_int_max", lambda c: None,
         ["mask-info", "--mask.type=sliding_window", "--mask.window=2147483647", "--model.tokens=7"], 0, "", [], [],
         None),
        ("mask_info_absurd_tokens", lambda c: None, ["mask-info", "--model.tokens=2000000000"], 2,
         "would need about", [], [], None),
        # geometry commands never replace a foreign output without --force
        ("keys_refuses_foreign_hdf5", lambda c: foreign_hdf5(c, "keys.h5"), ["keys", "--output.file=keys.h5"], 2,
         "is not a complete rcsim-keys file", [], [], None),
        ("keys_refuses_run_file", lambda c: c.good_run("keys.h5"), ["keys", "--output.file=keys.h5"], 2,
         "is not a complete rcsim-keys file", [], [], None),
        ("brody_map_refuses_text_file", lambda c: c.text("map.h5"),
         ["brody-map", "--output.file=map.h5", "--map.count_max=4", "--map.dim_max=3", "--map.draws=1"], 2,
         "'map.h5' exists and is not a complete rcsim-brody-map file", [], [], None),
        ("brody_map_refuses_foreign_hdf5", lambda c: foreign_hdf5(c, "map.h5"),
         ["brody-map", "--output.file=map.h5", "--map.count_max=4", "--map.dim_max=3", "--map.draws=1"], 2,
         "is not a complete rcsim-brody-map file", [], [], None),
        ("brody_example_refuses_foreign_hdf5", lambda c: foreign_hdf5(c, "ex.h5"),
         ["brody-example", "--output.file=ex.h5"], 2, "is not a complete rcsim-brody-example file", [], [], None),
        ("ln_geometry_refuses_text_file", lambda c: c.text("ln.h5"),
         ["ln-geometry", "--output.file=ln.h5", "--ln.samples=10"], 2,
         "'ln.h5' exists and is not a complete rcsim-ln-geometry file", [], [], None),
        ("ln_geometry_refuses_foreign_hdf5", lambda c: foreign_hdf5(c, "ln.h5"),
         ["ln-geometry", "--output.file=ln.h5", "--ln.samples=10"], 2, "is not a complete rcsim-ln-geometry file",
         [], [], None),
        # out of memory (an address-space limit): one line naming the failure, exit 1, nothing written
        ("run_out_of_memory_is_one_line", lambda c: None,
         ["run", "--output.file=o.h5", "--model.tokens=4000", "--model.dim=4000", "--model.layers=2", "--run.trials=1"],
         1, "out of memory", [], [], ("AS", 400 * 1000 * 1000)),
        ("ln_geometry_force_replaces_text_file", lambda c: c.text("ln.h5"),
         ["ln-geometry", "--force", "--output.file=ln.h5", "--ln.samples=10"], 0, "", ["ln.h5"], [], None),
    ]


def check_case(rcsim, work, case):
    name, setup, args, code, text, may_change, created, fsize = case
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    c = Ctx(rcsim, d)
    setup(c)
    if isinstance(fsize, tuple) and SANITIZED:
        print(f"[skip] {name}: an address-space limit does not work under AddressSanitizer")
        return True
    if isinstance(fsize, str):  # "FILE+N": the size of FILE plus N bytes
        f, extra = fsize.split("+")
        fsize = os.path.getsize(c.p(f)) + int(extra)
    before = snapshot(d)
    r = c.run(args, fsize=fsize, check=False)
    after = snapshot(d)
    problems = []
    if r.returncode != code:
        problems.append(f"exit {r.returncode}, expected {code}")
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    if text and not any(text in ln for ln in lines):
        problems.append(f"no stderr line contains {text!r}")
    errors = sum("error" in ln for ln in lines)
    if code != 0 and (args[0] != "sweep" or code == 2) and errors != 1:
        problems.append(f"expected exactly one error line, got {errors}")
    raw = [ch for ch in r.stderr if (ord(ch) < 0x20 and ch != "\n") or ord(ch) == 0x7F or 0x80 <= ord(ch) <= 0x9F
           or 0xDC80 <= ord(ch) <= 0xDCFF]  # the last: bytes that are not UTF-8 (surrogateescape)
    if raw:
        problems.append(f"stderr holds raw control characters: {sorted(set(raw))!r}")
    if any(len(ln) > 2500 for ln in lines):
        problems.append(f"stderr line of {max(len(ln) for ln in lines)} characters (echoed values must be cut)")
    for rel, h in before.items():
        if rel in may_change:
            continue
        if after.get(rel) != h:
            problems.append(f"pre-existing '{rel}' changed or removed")
    for rel in after:
        if rel not in before and rel not in created:
            problems.append(f"left behind: '{rel}'")
    if name == "run_custom_mask_not_quasi_strongly_connected" and r.returncode == 0 and not check_eye_run(d):
        problems.append("eye.h5: expected centres = [], radius = -1, quasi_strongly_connected = 0, complete = 1")
    if name == "run_reads_bool_mask_dataset" and r.returncode == 0 and not check_bool_mask_run(d):
        problems.append("bool.h5: /mask is not the causal mask of the bool dataset")
    if name == "dry_run_prints_memory_estimate" and "memory: about" not in r.stdout:
        problems.append("the dry run prints no memory estimate")
    status = "ok" if not problems else "FAIL"
    print(f"[{status}] {name}: exit {r.returncode}" + ("" if not problems else "\n    " + "\n    ".join(problems) +
                                                        "\n    stderr: " + r.stderr.strip().replace("\n", "\n            ")))
    return not problems


def wait_for(path, timeout=60):
    t0 = time.time()
    while not os.path.exists(path):
        if time.time() - t0 > timeout:
            return False
        time.sleep(0.02)
    return True


def concurrency(rcsim, work, sweep):
    """Two processes on one output (or one sweep directory): the second stops at once."""
    name = "two_sweeps_one_directory" if sweep else "two_runs_one_output"
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for file, text in CONFIGS.items():
        with open(os.path.join(d, file), "w") as f:
            f.write(text)
    with open(os.path.join(d, "sweep2.ini"), "w") as f:
        f.write(CONFIGS["sweep.ini"].replace("mask.type = complete, causal", "run.seed = 1, 2"))
    slow = ["--model.tokens=16", "--model.dim=8", "--model.layers=400", "--run.trials=64", "--run.threads=1", "--quiet"]
    if sweep:
        first = [rcsim, "sweep"] + SWEEP + slow
        second = [rcsim, "sweep", "--config", "sweep2.ini"] + slow
        lock = os.path.join(d, "sw", "p", "index.h5.lock")
    else:
        first = [rcsim, "run", "--output.file=run.h5"] + SMALL + slow
        second = [rcsim, "run", "--output.file=run.h5", "--run.seed=9"] + SMALL + slow
        lock = os.path.join(d, "run.h5.lock")
    a = subprocess.Popen(first, cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    problems = []
    if not wait_for(lock):
        problems.append("the first process never took its lock")
    t0 = time.time()
    b = subprocess.run(second, cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
    secs = time.time() - t0
    a_running = a.poll() is None
    _, a_err = a.communicate(timeout=600)
    if b.returncode != 1:
        problems.append(f"second process: exit {b.returncode}, expected 1")
    if f"in use by process {a.pid}" not in b.stderr:
        problems.append(f"second process does not name process {a.pid}: {b.stderr.strip()}")
    if not a_running:
        problems.append("the first process ended before the second was refused: the case is too quick")
    if a.returncode != 0:
        problems.append(f"first process: exit {a.returncode}: {a_err.strip()}")
    left = [n for n in snapshot(d) if n.endswith((".tmp", ".lock", ".partial"))]
    if left:
        problems.append(f"left behind: {left}")
    print(f"[{'ok' if not problems else 'FAIL'}] {name}: second refused in {secs:.2f} s"
          + ("" if not problems else "\n    " + "\n    ".join(problems)))
    return not problems


def checkpoint_of_another_configuration(rcsim, work):
    """A run interrupted (SIGINT: completed trials checkpointed), then rerun with another seed
    (checkpoint discarded with a warning) or other threads (resumed); both results equal an
    uninterrupted run of their configuration value by value."""
    import signal
    import h5py
    import numpy as np
    d = os.path.join(work, "checkpoint_of_another_configuration")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    cfg = "[model]\ntokens = 12\ndim = 6\nlayers = 300\n[run]\ntrials = 400\nthreads = 1\n[output]\nfile = run.h5\n"
    with open(os.path.join(d, "c.ini"), "w") as f:
        f.write(cfg)
    problems = []

    def interrupted_run(seed):
        # SIGINT once some trial has completed: after 0.4 s, and longer on a loaded or sanitized
        # build (no checkpoint yet means no trial was done), until one exists or the run ends.
        for delay in (0.4, 0.8, 1.6, 3.2):
            a = subprocess.Popen([rcsim, "run", "--config", "c.ini", "-q", f"--run.seed={seed}"], cwd=d,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            time.sleep(delay)
            a.send_signal(signal.SIGINT)
            a.communicate(timeout=120)
            # 130: interrupted (checkpointed if a trial was done); -SIGINT: the signal came before
            # rcsim installed its handler (a slow start, e.g. under the sanitizers): try later.
            if a.returncode not in (130, -signal.SIGINT) or os.path.exists(os.path.join(d, "run.h5.partial")):
                break
        if not os.path.exists(os.path.join(d, "run.h5.partial")):
            problems.append(f"no checkpoint after SIGINT (exit {a.returncode})")

    def mu(name):
        with h5py.File(os.path.join(d, name), "r") as f:
            return np.array(f["metrics/mu"])

    for seed_again, threads, expect in ((8, 1, "checkpoint of another configuration"), (7, 2, "resuming")):
        for n in ("run.h5", "ref.h5"):
            if os.path.exists(os.path.join(d, n)):
                os.remove(os.path.join(d, n))
        interrupted_run(7)
        r = subprocess.run([rcsim, "run", "--config", "c.ini", f"--run.seed={seed_again}", f"--run.threads={threads}"],
                           cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300)
        if r.returncode != 0 or expect not in r.stderr:
            problems.append(f"seed {seed_again}, threads {threads}: exit {r.returncode}, no '{expect}': {r.stderr.strip()}")
        subprocess.run([rcsim, "run", "--config", "c.ini", "-q", f"--run.seed={seed_again}", "--output.file=ref.h5"],
                       cwd=d, check=True, timeout=300, stderr=subprocess.DEVNULL)
        if not np.array_equal(mu("run.h5"), mu("ref.h5")):
            problems.append(f"seed {seed_again}, threads {threads}: result differs from an uninterrupted run")
        left = [n for n in os.listdir(d) if n.endswith((".tmp", ".lock", ".partial"))]
        if left:
            problems.append(f"left behind: {left}")
    print(f"[{'ok' if not problems else 'FAIL'}] checkpoint_of_another_configuration"
          + ("" if not problems else "\n    " + "\n    ".join(problems)))
    return not problems


def kill_after_cap_flush(rcsim, work):
    """A run whose token snapshots exceed the checkpoint's cap (kPendingLargeBytes, 64 MB: about
    31 trials of 2.1 MB here) is killed (SIGKILL) once a flush triggered by the cap has written
    and freed them (the checkpoint holds at least 31 trials), then rerun: it resumes, its large
    data come from the checkpoint, and its /tokens and /metrics/mu are bitwise those of an
    uninterrupted run; nothing is left behind."""
    import signal
    import h5py
    d = os.path.join(work, "kill_after_cap_flush")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    cfg = ("[model]\ntokens = 64\ndim = 64\nlayers = 64\n[run]\ntrials = 72\nthreads = 2\n"
           "[output]\nfile = run.h5\ntokens = all\n")
    with open(os.path.join(d, "c.ini"), "w") as f:
        f.write(cfg)
    partial = os.path.join(d, "run.h5.partial")
    problems = []

    def trials_in_checkpoint():
        try:
            with h5py.File(partial, "r") as f:
                return sum(1 for k in f if k.startswith("trial_") and "diagnostics" in f[k])
        except (OSError, KeyError):
            return 0

    a = subprocess.Popen([rcsim, "run", "--config", "c.ini", "-q"], cwd=d, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    stored = 0
    while a.poll() is None:
        stored = trials_in_checkpoint() if os.path.exists(partial) else 0
        if stored >= 31:
            break
        time.sleep(0.02)
    a.send_signal(signal.SIGKILL)
    a.communicate(timeout=120)
    if a.returncode != -signal.SIGKILL:
        problems.append(f"the run ended before it was killed (exit {a.returncode}): make it longer")
    elif stored < 31:
        problems.append(f"killed with {stored} trials checkpointed, expected a flush by the cap (>= 31)")
    r = subprocess.run([rcsim, "run", "--config", "c.ini"], cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True, timeout=300)
    if r.returncode != 0 or "resuming" not in r.stderr:
        problems.append(f"rerun: exit {r.returncode}, no 'resuming': {r.stderr.strip()}")
    subprocess.run([rcsim, "run", "--config", "c.ini", "-q", "--run.threads=1", "--output.file=ref.h5"], cwd=d,
                   check=True, timeout=300, stderr=subprocess.DEVNULL)
    if r.returncode == 0:
        with h5py.File(os.path.join(d, "run.h5"), "r") as f, h5py.File(os.path.join(d, "ref.h5"), "r") as g:
            for name in ("tokens", "metrics/mu"):
                x, y = f[name][()], g[name][()]
                if x.shape != y.shape or x.dtype != y.dtype or x.tobytes() != y.tobytes():
                    problems.append(f"/{name} of the resumed run differs from an uninterrupted run's")
    left = [n for n in os.listdir(d) if n.endswith((".tmp", ".lock", ".partial"))]
    if left:
        problems.append(f"left behind: {left}")
    print(f"[{'ok' if not problems else 'FAIL'}] kill_after_cap_flush: killed with {stored} trials checkpointed"
          + ("" if not problems else "\n    " + "\n    ".join(problems)))
    if not problems:
        shutil.rmtree(d, ignore_errors=True)
    return not problems


def corrupted_run_files(rcsim, work, count):
    """`rcsim analyze` on `count` byte-corrupted copies of a small run file (1 byte, 8 bytes or
    20 scattered bytes changed at random offsets, seeded): exit 0, 1 or 2, never a signal; on
    failure exactly one error line, the corrupted file unchanged and nothing left behind."""
    import random
    d = os.path.join(work, "corrupted_run_files")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    c = Ctx(rcsim, d)
    c.good_run("good.h5")
    with open(c.p("good.h5"), "rb") as f:
        good = f.read()
    rng = random.Random(20240527)
    codes, problems = {}, []
    for k in range(count):
        b = bytearray(good)
        off = rng.randrange(len(b))
        if k % 3 == 0:
            b[off] ^= rng.randrange(1, 256)
        elif k % 3 == 1:
            for j in range(off, min(off + 8, len(b))):
                b[j] = rng.choice([0, 0xFF, rng.randrange(256)])
        else:
            for _ in range(20):
                b[rng.randrange(len(b))] ^= rng.randrange(1, 256)
        with open(c.p("bad.h5"), "wb") as f:
            f.write(b)
        before = hashlib.sha256(bytes(b)).hexdigest()
        r = c.run(["analyze", "bad.h5"], check=False)
        codes[r.returncode] = codes.get(r.returncode, 0) + 1
        errors = [ln for ln in r.stderr.splitlines() if "error" in ln]
        if r.returncode not in (0, 1, 2):
            problems.append(f"case {k} (offset {off}): exit {r.returncode}")
        elif r.returncode != 0 and (len(errors) != 1 or sha(c.p("bad.h5")) != before):
            problems.append(f"case {k} (offset {off}): {len(errors)} error lines or the file changed: {r.stderr.strip()}")
        left = [n for n in os.listdir(d) if n.endswith((".tmp", ".lock", ".partial"))]
        if left:
            problems.append(f"case {k}: left behind {left}")
            break
    print(f"[{'ok' if not problems else 'FAIL'}] corrupted_run_files: {count} files, exit codes {dict(sorted(codes.items()))}"
          + ("" if not problems else "\n    " + "\n    ".join(problems[:10])))
    return not problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rcsim")
    ap.add_argument("work")
    ap.add_argument("-k", default="", help="run only cases whose name contains this")
    ap.add_argument("--corruptions", type=int, default=300, help="byte-corrupted run files given to analyze")
    a = ap.parse_args()
    rcsim = os.path.abspath(a.rcsim)
    global SANITIZED
    SANITIZED = b"libasan" in subprocess.run(["ldd", rcsim], stdout=subprocess.PIPE).stdout
    os.makedirs(a.work, exist_ok=True)
    ok = True
    n = 0
    # Built without GLPK (RCSIM_GLPK=0, set by tests/CMakeLists.txt): the cases that need the
    # selectability LP to succeed are skipped (the refusals before it still run).
    no_glpk = os.environ.get("RCSIM_GLPK") == "0"
    for case in cases():
        if no_glpk and case[3] == 0 and case[2][0] in ("keys", "brody-map", "brody-example"):
            print(f"hostile: {case[0]}: skipped (built without GLPK)")
            continue
        if a.k in case[0]:
            n += 1
            ok &= check_case(rcsim, a.work, case)
    for sweep in (False, True):
        if a.k in ("two_sweeps_one_directory" if sweep else "two_runs_one_output"):
            n += 1
            ok &= concurrency(rcsim, a.work, sweep)
    if a.k in "checkpoint_of_another_configuration":
        n += 1
        ok &= checkpoint_of_another_configuration(rcsim, a.work)
    if a.k in "kill_after_cap_flush":
        n += 1
        ok &= kill_after_cap_flush(rcsim, a.work)
    if a.k in "corrupted_run_files" and a.corruptions > 0:
        n += 1
        ok &= corrupted_run_files(rcsim, a.work, a.corruptions)
    print(f"hostile: {n} cases, {'all passed' if ok else 'FAILURES'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
