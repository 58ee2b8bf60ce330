#!/usr/bin/python3
"""Issue 22, "Trust nothing that is read, and nothing on disk that is not ours", table-driven.

    issue22.py RCSIM WORKDIR [-k SUBSTRING]

Classes: (1) attributes and datasets of the wrong type, rank or shape are clear errors naming the
file and the object; (2) nothing on disk that is not rcsim's is touched (a target that appeared
during the run, a hard link at the lock's name, foreign stale temporaries, sweep point paths
that leave the sweep directory); (3) a key given twice on the command line, and keys that
`equilibria` does not use, are usage errors naming the key; (4) info and warning lines escape
what they quote; (5) worker threads the system refuses are one error naming run.threads; (6) a FIFO given to
`analyze` and a product sweep of 10^8 points are refused at once, naming them; (7) issue 38:
`analyze` on runs with gradient measures ([trial, layer], [trial, attention_layer] and
[trial, layer, token]) whose coordinates' CLASS attribute a tool rewrote writes /analysis (it
touches nothing of the run file but /analysis: libhdf5 left objects open on them), and a run file whose /layer does not increase is
refused, naming the file and /layer.

Each case gets an empty directory, a setup, one rcsim command (optionally with resource limits)
and asserts: the exit code; a stderr line holding the expected text; at most one error line,
and on failure stderr is one line; no raw control characters on stderr; every file that
existed before unchanged (SHA-256) unless listed as may-change; files listed as removed are
gone; nothing new left behind besides the expected files. Exit 0 iff every case passes.
"""
import argparse
import os
import resource
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fuzz_files import make_checkpoint  # noqa: E402
from hostile import CONFIGS, EQ, SMALL, SWEEP, Ctx, edit_run, snapshot  # noqa: E402

CKPT = "[model]\ntokens = 12\ndim = 6\nlayers = 300\n[run]\ntrials = 100\nthreads = 1\n[output]\nfile = cp.h5\n"
OLD = time.time() - 3600  # an hour ago: older than any lock taken now


def attr(name, value, obj="/"):
    """An edit for edit_run: root (or `obj`) attribute `name` set to `value`."""
    def edit(f):
        o = f[obj]
        if name in o.attrs:
            del o.attrs[name]
        o.attrs[name] = value
    return edit


def edited(ctx, rel, edit):
    edit_run(ctx, rel, edit)


def sweep_then(edit):
    """A complete sweep (sw/p, two points), then edit(h5py.File) applied to its index."""
    def setup(c):
        c.run(["sweep", "-q"] + SWEEP)
        edited(c, "sw/p/index.h5", edit)
    return setup


# Issue 38: a run with gradient measures of each shape ([trial, layer], [trial, attention_layer],
# [trial, layer, token]), then edit(h5py.File) applied to it.
GRAD = ["--output.measures=grad_x_norm,grad_wq_norm,grad_wk_norm,grad_wv_norm,grad_wo_norm,jacobian_log_fro2,"
        "jacobian_log_spec2,last_token_sensitivity"]


def grad_run_then(edit):
    def setup(c):
        c.good_run(extra=GRAD)
        edited(c, "run.h5", edit)
    return setup


def reverse_layers(recreate):
    """/layer reversed in place (h5py), or deleted and made anew reversed (as a script would)."""
    def edit(f):
        v = f["layer"][()][::-1].copy()
        if recreate:
            del f["layer"]
            f["layer"] = v
        else:
            f["layer"][...] = v
    return edit


def grad_cases():
    """(7): analyze writes /analysis whatever a tool made of the run's dimension-scale attributes."""
    import numpy as np
    wrote = "wrote /analysis into run.h5"
    out = []
    for scale in ("layer", "attention_layer", "token"):
        for label, value in (("int", np.int64(7)), ("fixed_string", np.bytes_(b"DIMENSION_SCALE"))):
            out.append((f"analyze_grad_{scale}_class_{label}", grad_run_then(attr("CLASS", value, "metrics/" + scale)),
                        ["analyze", "run.h5"], 0, wrote, ["run.h5"], [], [], None))
    for recreate in (False, True):
        out.append((f"analyze_grad_layer_decreasing{'_recreated' if recreate else ''}",
                    grad_run_then(reverse_layers(recreate)), ["analyze", "run.h5"], 2,
                    "run file 'run.h5': /layer holds 19 after 20 (position 1), expected strictly increasing layer "
                    "numbers", [], [], [], None))
    return out


def set_strings(name, values):
    import h5py
    import numpy as np

    def edit(f):
        del f[name]
        f[name] = np.array(values, dtype=h5py.string_dtype())
    return edit


def checkpoint(c, edit=None):
    """cp.h5.partial: a run of ck.ini interrupted (SIGINT) after some trials; then edited."""
    with open(c.p("ck.ini"), "w") as f:
        f.write(CKPT)
    make_checkpoint(c.rcsim, c.d, "ck.ini", "cp.h5")
    if edit:
        edited(c, "cp.h5.partial", edit)


def set_diagnostics(values):
    """An edit: trial 0's /diagnostics (underflow layer, non-finite layer, degenerate rows) set to `values`."""
    import numpy as np

    def edit(f):
        del f["trial_0/diagnostics"]
        f["trial_0/diagnostics"] = np.array(values, dtype="f8")
    return edit


def old_file(c, name, content=b""):
    with open(c.p(name), "wb") as f:
        f.write(content)
    os.utime(c.p(name), (OLD, OLD))


def rcsim_temporary(c, name):
    """An HDF5 file that rcsim wrote (filetype rcsim-run, complete = 0), old: provably rcsim's."""
    import h5py
    with h5py.File(c.p(name), "w") as f:
        f.attrs["filetype"] = "rcsim-run"
        f.attrs["complete"] = 0
    os.utime(c.p(name), (OLD, OLD))


def hardlink(c, target, name, content="precious\n"):
    with open(c.p(target), "w") as f:
        f.write(content)
    os.link(c.p(target), c.p(name))


def h5_arrays(c, name, **arrays):
    """An HDF5 file `name` holding each keyword as a dataset."""
    import h5py
    with h5py.File(c.p(name), "w") as f:
        for k, v in arrays.items():
            f[k] = v


def mixed_keys(kind):
    """Keys [n, 3] of mixed magnitudes (GLPK aborted on their LPs), with the decisions the relative
    tolerance implies (rtol * scale_i, scale_i ~ the largest difference): 'columns': columns scaled by
    1e300, 1, 1e-300 (only the largest and the smallest entry of column 0 stick out by more than
    1e-300 of the scale); 'one_big': the unit keys +-e_i and 1e165 e_1 (only the last)."""
    import numpy as np
    if kind == "columns":
        k = np.random.default_rng(3).standard_normal((8, 3)) * [1e300, 1.0, 1e-300]
        expected = np.zeros(8, bool)
        expected[[np.argmax(k[:, 0]), np.argmin(k[:, 0])]] = True
    else:
        k = np.vstack([np.eye(3), -np.eye(3), [[1e165, 0.0, 0.0]]])
        expected = np.arange(7) == 6
    return k, expected


KEYS_FILE = ["keys", "--keys.source=file", "--keys.file=k.h5", "--output.file=o.h5"]
W_O_FILE = ["--model.value_dim=2", "--weights.o=file", "--weights.file=w.h5"]
STACK = ("STACK", 1 << 42)  # thread stacks of 4 TiB: the system refuses every new thread
BAD_NAME = "a\x1b]0;pwned\x07.h5"
BAD_UTF8 = os.fsdecode(b"b\xff\xfe.h5")


# (name, setup(ctx), args, exit, text in stderr, may change, created, removed, limit)
def cases():
    import numpy as np
    s2 = np.array(["rcsim-run", "rcsim-run"], dtype=object)
    return [
        # ---- 1. every attribute and dataset read is checked: type, rank, shape ----
        ("run_array_filetype", lambda c: (c.good_run(), edited(c, "run.h5", attr("filetype", s2))),
         ["run", "--output.file=run.h5"] + SMALL, 2,
         "attribute 'filetype' is a 1-D array [2] of strings, expected a scalar string", [], [], [], None),
        ("run_array_complete", lambda c: (c.good_run(), edited(c, "run.h5", attr("complete", np.array([1, 1])))),
         ["run", "--output.file=run.h5"] + SMALL, 2,
         "attribute 'complete' is a 1-D array [2] of integers, expected a scalar integer", [], [], [], None),
        ("run_2d_complete", lambda c: (c.good_run(), edited(c, "run.h5", attr("complete", np.ones((2, 2), "i8")))),
         ["run", "--output.file=run.h5"] + SMALL, 2, "2-D array [2, 2] of integers", [], [], [], None),
        ("run_string_complete", lambda c: (c.good_run(), edited(c, "run.h5", attr("complete", "1"))),
         ["run", "--output.file=run.h5"] + SMALL, 2, "attribute 'complete' is a scalar string, expected a scalar integer",
         [], [], [], None),
        ("run_int_filetype", lambda c: (c.good_run(), edited(c, "run.h5", attr("filetype", 7))),
         ["run", "--output.file=run.h5"] + SMALL, 2, "attribute 'filetype' is a scalar integer, expected a scalar string",
         [], [], [], None),
        ("equilibria_array_filetype",
         lambda c: (c.run(["equilibria", "-q"] + EQ),
                    edited(c, "eq.h5", attr("filetype", np.array(["rcsim-equilibria"] * 3, dtype=object)))),
         ["equilibria"] + EQ, 2, "eq.h5:/: attribute 'filetype' is a 1-D array [3] of strings", [], [], [], None),
        ("keys_array_complete",
         lambda c: (c.run(["keys", "-q", "--output.file=keys.h5"]), edited(c, "keys.h5", attr("complete", np.array([1, 1])))),
         ["keys", "--output.file=keys.h5"], 2, "keys.h5:/: attribute 'complete' is a 1-D array [2]", [], [], [], None),
        ("ln_geometry_array_filetype",
         lambda c: (c.run(["ln-geometry", "-q", "--output.file=ln.h5", "--ln.samples=10"]),
                    edited(c, "ln.h5", attr("filetype", np.array(["x", "y"], dtype=object)))),
         ["ln-geometry", "--output.file=ln.h5", "--ln.samples=10"], 2, "attribute 'filetype' is a 1-D array [2]",
         [], [], [], None),
        ("sweep_index_array_filetype",
         sweep_then(attr("filetype", np.array(["rcsim-sweep-index"] * 2, dtype=object))),
         ["sweep"] + SWEEP, 2, "is not an rcsim sweep index", [], [], [], None),
        ("sweep_point_array_complete",
         lambda c: (c.run(["sweep", "-q"] + SWEEP), edited(c, "sw/p/mask.type=causal.h5", attr("complete", np.array([1, 1])))),
         ["sweep"] + SWEEP, 2, "attribute 'complete' is a 1-D array [2]", [], [], [], None),
        ("analyze_string_tokens", lambda c: (c.good_run(), edited(c, "run.h5", attr("tokens", "6"))),
         ["analyze", "--no-write", "run.h5"], 2, "run.h5:/: attribute 'tokens' is a scalar string, expected a scalar integer",
         [], [], [], None),
        ("analyze_array_radius", lambda c: (c.good_run(), edited(c, "run.h5", attr("radius", np.array([1, 2]), "mask"))),
         ["analyze", "--no-write", "run.h5"], 2, "run.h5:/mask: attribute 'radius' is a 1-D array [2]", [], [], [], None),
        ("analyze_empty_mask_type",
         lambda c: (c.good_run(), edited(c, "run.h5", lambda f: attr("mask_type", __import__("h5py").Empty("S10"))(f))),
         ["analyze", "--no-write", "run.h5"], 2, "attribute 'mask_type' is an empty (null) string", [], [], [], None),
        ("analyze_sweep_index_short_status", sweep_then(set_strings("status", ["complete"])),
         ["analyze", "--no-write", "sw/p"], 2, "/status has 1 entries, expected 2", [], [], [], None),
        ("analyze_sweep_index_numeric_names",
         sweep_then(lambda f: (f.__delitem__("name"), f.__setitem__("name", np.arange(2.0)))),
         ["analyze", "--no-write", "sw/p"], 2, "index.h5:/name is a 1-D array [2] of floats, expected a list of "
         "variable-length strings", [], [], [], None),
        ("checkpoint_array_config_hash",
         lambda c: checkpoint(c, attr("config_hash", np.array(["a", "b"], dtype=object))),
         ["run", "--config", "ck.ini", "--run.trials=4"], 0,
         "unreadable checkpoint discarded (cp.h5.partial:/: attribute 'config_hash' is a 1-D array [2] of strings",
         ["cp.h5.partial"], ["cp.h5"], ["cp.h5.partial"], None),
        ("checkpoint_short_token",
         lambda c: checkpoint(c, lambda f: (f.__delitem__("trial_0/token"), f.__setitem__("trial_0/token", np.ones(3)))),
         ["run", "--config", "ck.ini"], 0, "cp.h5.partial:/trial_0/token has shape [3], expected [",
         ["cp.h5.partial"], ["cp.h5"], ["cp.h5.partial"], None),
        # Issue 38: a trial's diagnostics that are not whole numbers in range were resumed without a word
        # (NaN cast to int); the checkpoint is discarded with a warning naming the entry, and recomputed.
        ("checkpoint_nan_diagnostics", lambda c: checkpoint(c, set_diagnostics([-1, float("nan"), 0])),
         ["run", "--config", "ck.ini"], 0, "cp.h5.partial:/trial_0/diagnostics: entry 1 (non-finite layer, -1: none) "
         "is nan, expected a whole number from -1 to 300", ["cp.h5.partial"], ["cp.h5"], ["cp.h5.partial"], None),
        ("checkpoint_fractional_diagnostics", lambda c: checkpoint(c, set_diagnostics([2.5, -1, 0])),
         ["run", "--config", "ck.ini"], 0, "entry 0 (underflow layer, -1: none) is 2.5, expected a whole number",
         ["cp.h5.partial"], ["cp.h5"], ["cp.h5.partial"], None),
        ("checkpoint_diagnostics_layer_out_of_range", lambda c: checkpoint(c, set_diagnostics([-1, 301, 0])),
         ["run", "--config", "ck.ini"], 0, "entry 1 (non-finite layer, -1: none) is 301, expected a whole number from -1 "
         "to 300", ["cp.h5.partial"], ["cp.h5"], ["cp.h5.partial"], None),
        ("checkpoint_negative_degenerate_rows", lambda c: checkpoint(c, set_diagnostics([-1, -1, -float("inf")])),
         ["run", "--config", "ck.ini"], 0, "entry 2 (degenerate rows) is -inf, expected a whole number from 0",
         ["cp.h5.partial"], ["cp.h5"], ["cp.h5.partial"], None),
        # ---- 2. nothing on disk that is not ours is touched ----
        ("run_refuses_hard_link_at_lock", lambda c: hardlink(c, "victim.txt", "run.h5.lock"),
         ["run", "--output.file=run.h5"] + SMALL, 1, "lock file 'run.h5.lock' for output 'run.h5' is not rcsim's (it has 2 hard links)",
         [], [], [], None),
        ("run_keeps_foreign_stale_temporary", lambda c: old_file(c, ".run.h5.AbC123.tmp", b"precious, not rcsim's"),
         ["run", "--output.file=run.h5"] + SMALL, 0, "", [], ["run.h5"], [], None),
        ("run_keeps_hard_linked_stale_temporary", lambda c: hardlink(c, "victim.txt", ".run.h5.AbC123.tmp", ""),
         ["run", "--output.file=run.h5"] + SMALL, 0, "", [], ["run.h5"], [], None),
        ("run_keeps_fresh_foreign_temporary", lambda c: c.text(".run.h5.XyZ789.tmp", "written just now"),
         ["run", "--output.file=run.h5"] + SMALL, 0, "", [], ["run.h5"], [], None),
        ("run_removes_empty_stale_temporary", lambda c: old_file(c, ".run.h5.AbC123.tmp"),
         ["run", "--output.file=run.h5"] + SMALL, 0, "", [".run.h5.AbC123.tmp"], ["run.h5"], [".run.h5.AbC123.tmp"], None),
        ("run_removes_rcsim_stale_temporary", lambda c: rcsim_temporary(c, ".run.h5.AbC123.tmp"),
         ["run", "--output.file=run.h5"] + SMALL, 0, "", [".run.h5.AbC123.tmp"], ["run.h5"], [".run.h5.AbC123.tmp"], None),
        ("analyze_sweep_point_absolute_path", sweep_then(set_strings("file", ["/etc/passwd", "mask.type=causal.h5"])),
         ["analyze", "sw/p"], 2, "sweep index 'sw/p/index.h5': point path '/etc/passwd' leaves the sweep directory",
         [], [], [], None),
        ("analyze_sweep_point_dotdot", sweep_then(set_strings("file", ["mask.type=complete.h5", "../../victim.h5"])),
         ["analyze", "sw/p"], 2, "point path '../../victim.h5' leaves the sweep directory", [], [], [], None),
        ("analyze_sweep_point_inner_dotdot", sweep_then(set_strings("file", ["a/../../x.h5", "mask.type=causal.h5"])),
         ["analyze", "--no-write", "sw/p"], 2, "point path 'a/../../x.h5' leaves the sweep directory", [], [], [], None),
        # ---- 3. duplicate keys on the command line; keys equilibria does not use ----
        ("run_duplicate_command_line_key", lambda c: None,
         ["run", "--dry-run", "--model.tokens=3", "--model.tokens=4"] + SMALL, 2,
         "key 'model.tokens' is given twice on the command line (--model.tokens=3 and --model.tokens=4)", [], [], [], None),
        ("run_duplicate_same_value", lambda c: None, ["run", "--dry-run", "--run.seed=1", "--run.seed", "1"] + SMALL, 2,
         "key 'run.seed' is given twice on the command line", [], [], [], None),
        ("sweep_duplicate_command_line_axis", lambda c: None,
         ["sweep", "--dry-run", "--sweep.model.tokens=3,4", "--sweep.model.tokens=5"] + SWEEP, 2,
         "key 'sweep.model.tokens' is given twice on the command line", [], [], [], None),
        ("equilibria_duplicate_command_line_key", lambda c: None,
         ["equilibria", "--run.trials=2", "--run.trials=3"] + EQ, 2, "key 'run.trials' is given twice", [], [], [], None),
        ("keys_duplicate_command_line_key", lambda c: None,
         ["keys", "--output.file=a.h5", "--output.file=b.h5"], 2,
         "rcsim keys: key 'output.file' is given twice on the command line", [], [], [], None),
        ("equilibria_refuses_output_spectrum", lambda c: None, ["equilibria", "--output.spectrum=true"] + EQ, 2,
         "equilibria: key 'output.spectrum' is not used by rcsim equilibria", [], [], [], None),
        ("equilibria_refuses_mlp_width", lambda c: None, ["equilibria", "--mlp.width=8"] + EQ, 2,
         "key 'mlp.width' is not used by rcsim equilibria", [], [], [], None),
        ("equilibria_refuses_run_threads", lambda c: None, ["equilibria", "--run.threads=4"] + EQ, 2,
         "key 'run.threads' is not used", [], [], [], None),
        # Issue 34: keys of the block and of the derivative measures that equilibria ignored and recorded.
        ("equilibria_refuses_dynamics_noise", lambda c: None, ["equilibria", "--dynamics.noise=0.1"] + EQ, 2,
         "key 'dynamics.noise' is not used by rcsim equilibria", [], [], [], None),
        ("equilibria_refuses_layer_overrides", lambda c: None,
         ["equilibria", "--model.layer_overrides=0-1:residual.alpha=0.5"] + EQ, 2,
         "key 'model.layer_overrides' is not used by rcsim equilibria", [], [], [], None),
        ("equilibria_refuses_metrics_readout", lambda c: None, ["equilibria", "--metrics.readout=last_token"] + EQ, 2,
         "key 'metrics.readout' is not used by rcsim equilibria", [], [], [], None),
        ("equilibria_warns_unused_file_key",
         lambda c: c.text("eq2.ini", CONFIGS["eq.ini"] + "tokens = final\n"),
         ["equilibria", "--config", "eq2.ini"], 0,
         "equilibria: key 'output.tokens' of the configuration file is not used, ignored", [], ["eq.h5"], [], None),
        # ---- 4. every message printable ----
        ("run_info_escapes_output_name", lambda c: None, ["run", "--output.file=" + BAD_NAME] + SMALL, 0,
         "wrote a\\e]0;pwned\\x07.h5", [], [BAD_NAME], [], None),
        ("run_info_escapes_invalid_utf8", lambda c: None, ["run", "--output.file=" + BAD_UTF8] + SMALL, 0,
         "wrote b\\xFF\\xFE.h5", [], [BAD_UTF8], [], None),
        ("equilibria_info_escapes_output_name", lambda c: None, ["equilibria", "--output.file=" + BAD_NAME] + EQ, 0,
         "wrote a\\e]0;pwned\\x07.h5", [], [BAD_NAME], [], None),
        ("analyze_info_escapes_index_name",
         lambda c: (c.run(["sweep", "-q"] + SWEEP), shutil.copy(c.p("sw/p/index.h5"), c.p(BAD_NAME)), c.good_run()),
         ["analyze", "--no-write", BAD_NAME, "run.h5"], 0, "a\\e]0;pwned\\x07.h5: a sweep index, skipped", [], [], [], None),
        # ---- 5. threads the system refuses ----
        ("run_threads_refused", lambda c: None, ["run", "--output.file=o.h5", "--run.threads=4"] + SMALL, 1,
         "key 'run.threads' = 4: the system refused to start worker thread", [], [], [], STACK),
        ("brody_map_threads_refused", lambda c: None,
         ["brody-map", "--output.file=map.h5", "--map.count_max=4", "--map.dim_max=3", "--map.draws=1", "--map.threads=2"],
         1, "key 'map.threads' = 2: the system refused to start worker thread", [], [], [], STACK),
        # ---- 6. special files and absurd sizes, refused before anything is read or expanded ----
        ("analyze_refuses_fifo", lambda c: os.mkfifo(c.p("pipe.h5")), ["analyze", "pipe.h5"], 2,
         "'pipe.h5' is not a regular file", [], [], [], None),
        ("sweep_counted_before_expansion",
         lambda c: c.text("big.ini", "[run]\ntrials = 1\n[output]\nfile = big.h5\n[sweep]\n" + "".join(
             f"{k} = {', '.join(str(i) for i in range(1, 11))}\n" for k in
             ("run.seed", "model.dim", "model.tokens", "model.layers", "run.trials", "mask.window", "model.heads",
              "norm.eps"))),
         ["run", "--config", "big.ini"], 2, "the product sweep has 1e+08 points, 10 (run.seed) x 10 (model.dim)",
         [], [], [], None),
        # ---- 7. issue 38: equilibria read weights.file before drawing the layer (it drew from an empty
        # source: SIGSEGV for weights.o = file) and refuse what is not one fixed layer ----
        ("equilibria_w_o_from_file", lambda c: h5_arrays(c, "w.h5", W_O=np.eye(2)),
         ["equilibria"] + W_O_FILE + EQ, 0, "wrote eq.h5", [], ["eq.h5"], [], None),
        ("equilibria_w_qkv_from_file",
         lambda c: h5_arrays(c, "w.h5", W_Q=np.zeros((2, 2)), W_K=np.zeros((2, 2)), W_V=np.eye(2)),
         ["equilibria", "--weights.q=file", "--weights.k=file", "--weights.v=file", "--weights.file=w.h5"] + EQ, 0,
         "wrote eq.h5", [], ["eq.h5"], [], None),
        ("equilibria_refuses_per_layer_w_o", lambda c: h5_arrays(c, "w.h5", W_O=np.stack([np.eye(2)] * 200)),
         ["equilibria"] + W_O_FILE + EQ, 2, "key 'weights.file' ('w.h5'): dataset /W_O has shape [200, 2, 2] with a "
         "layer axis; rcsim equilibria iterates one layer with fixed weights: give [2, 2]", [], [], [], None),
        ("equilibria_refuses_random_w_o", lambda c: None,
         ["equilibria", "--model.value_dim=2", "--weights.o=orthogonal"] + EQ, 2,
         "key 'weights.o' = orthogonal: rcsim equilibria needs fixed weights", [], [], [], None),
        # ---- 8. issue 38: keys whose LP spans ~300 decades (GLPK aborted: "glp_set_rii: invalid scale factor") ----
        ("keys_entries_1e300_to_1e-300", lambda c: h5_arrays(c, "k.h5", keys=mixed_keys("columns")[0]),
         KEYS_FILE, 0, "wrote o.h5", [], ["o.h5"], [], None),
        ("keys_one_key_1e165_beside_unit_keys", lambda c: h5_arrays(c, "k.h5", keys=mixed_keys("one_big")[0]),
         KEYS_FILE, 0, "wrote o.h5", [], ["o.h5"], [], None),
        ("keys_one_key_1e165_floating_point", lambda c: h5_arrays(c, "k.h5", keys=mixed_keys("one_big")[0]),
         KEYS_FILE + ["--keys.exact=false"], 0, "wrote o.h5", [], ["o.h5"], [], None),
        # ---- 9. model.kv_heads (grouped-query attention): a value not dividing model.heads, a W_K
        # of one head per query head where the key/value heads are asked ----
        ("kv_heads_not_dividing_heads", lambda c: None,
         ["run", "--output.file=o.h5", "--model.heads=4", "--model.kv_heads=3"] + SMALL, 2,
         "invalid value '3' for key 'model.kv_heads': must divide model.heads = 4", [], [], [], None),
        ("kv_heads_w_k_per_query_head", lambda c: h5_arrays(c, "w.h5", W_K=np.zeros((4, 4, 4))),
         ["run", "--output.file=o.h5", "--model.heads=4", "--model.kv_heads=2", "--weights.k=file",
          "--weights.file=w.h5"] + SMALL, 2, "dataset /W_K has shape [4, 4, 4], expected [2, 4, 4] or", [], [], [], None),
    ] + grad_cases()


def check_case(rcsim, work, case):
    name, setup, args, code, text, may_change, created, removed, limit = case
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    c = Ctx(rcsim, d)
    setup(c)
    before = snapshot(d)

    def limits():
        if limit and limit[0] == "STACK":
            resource.setrlimit(resource.RLIMIT_STACK, (limit[1], limit[1]))
    # With Debian's OpenBLAS as the system LAPACK (python3-torch pulls libopenblas0-pthread in and
    # update-alternatives points liblapack.so.3 at it), OpenBLAS starts its own threads when the
    # library loads, before rcsim's main(): under the stack limit that aborts inside OpenBLAS. One
    # OpenBLAS thread (the variable OpenBLAS reads at load) keeps these cases about rcsim's threads.
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1") if limit else None
    r = subprocess.run([rcsim] + args, cwd=d, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       errors="surrogateescape", preexec_fn=limits, timeout=300, env=env)
    after = snapshot(d)
    problems = []
    if r.returncode != code:
        problems.append(f"exit {r.returncode}, expected {code}")
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    if text and not any(text in ln for ln in lines):
        problems.append(f"no stderr line contains {text!r}")
    if sum("error" in ln for ln in lines) > 1:
        problems.append("more than one error line")
    if code != 0 and len(lines) != 1:
        problems.append(f"expected stderr to be one line, got {len(lines)}")
    raw = [ch for ch in r.stderr if (ord(ch) < 0x20 and ch != "\n") or ord(ch) == 0x7F or 0x80 <= ord(ch) <= 0x9F
           or 0xDC80 <= ord(ch) <= 0xDCFF]
    if raw:
        problems.append(f"stderr holds raw control characters or invalid UTF-8: {sorted(set(raw))!r}")
    for rel, h in before.items():
        if rel not in may_change and after.get(rel) != h:
            problems.append(f"pre-existing '{rel}' changed or removed")
    for rel in removed:
        if rel in after:
            problems.append(f"'{rel}' should have been removed")
    for rel in after:
        if rel not in before and rel not in created:
            problems.append(f"left behind: '{rel}'")
    status = "ok" if not problems else "FAIL"
    print(f"[{status}] {name}: exit {r.returncode}" + ("" if not problems else "\n    " + "\n    ".join(problems) +
                                                        "\n    stderr: " + r.stderr.strip().replace("\n", "\n            ")))
    return not problems


def equilibria_drops_unused_file_keys(rcsim, work):
    """A configuration file shared with `rcsim run` holds keys equilibria does not use (dynamics.noise,
    model.layer_overrides): equilibria warns, runs without them and does not record them in /config."""
    import h5py
    d = os.path.join(work, "equilibria_drops_unused_file_keys")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    with open(os.path.join(d, "eq.ini"), "w") as f:
        f.write(CONFIGS["eq.ini"] + "[dynamics]\nnoise = 0.25\n[model]\nlayer_overrides = 0-1:residual.alpha=0.5\n")
    r = subprocess.run([rcsim, "equilibria", "--config", "eq.ini"], cwd=d, capture_output=True, text=True, timeout=300)
    problems = []
    if r.returncode != 0:
        problems.append(f"exit {r.returncode}: {r.stderr.strip()}")
    for key in ("dynamics.noise", "model.layer_overrides"):
        if f"key '{key}' of the configuration file is not used, ignored" not in r.stderr:
            problems.append(f"no warning for {key}")
    if not problems:
        with h5py.File(os.path.join(d, "eq.h5"), "r") as f:
            config = f["config"][()].decode()
        for text in ("noise = 0.25", "0-1:residual.alpha"):
            if text in config:
                problems.append(f"/config records the unused '{text}'")
    print(f"[{'ok' if not problems else 'FAIL'}] equilibria_drops_unused_file_keys" +
          ("" if not problems else "\n    " + "\n    ".join(problems)))
    return not problems


def equilibria_uses_w_o_file(rcsim, work):
    """W_O read from weights.file enters the map: an identity W_O gives the end states of the model
    without W_O; a reflection (with residual.alpha = 0 the map flips the consensus state every layer)
    leaves no start converged where the model without W_O converges."""
    import h5py
    import numpy as np
    d = os.path.join(work, "equilibria_uses_w_o_file")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    c = Ctx(rcsim, d)
    h5_arrays(c, "eye.h5", W_O=np.eye(2))
    h5_arrays(c, "flip.h5", W_O=np.diag([1.0, -1.0]))
    problems = []
    ends = {}
    for label, extra in (("none", []), ("eye", ["--model.value_dim=2", "--weights.o=file", "--weights.file=eye.h5"]),
                         ("flip", ["--model.value_dim=2", "--weights.o=file", "--weights.file=flip.h5"])):
        r = c.run(["equilibria", "-q", f"--output.file=out_{label}.h5"] + extra + EQ, check=False)
        if r.returncode != 0:
            problems.append(f"{label}: exit {r.returncode}: {r.stderr.strip()}")
            continue
        with h5py.File(c.p(f"out_{label}.h5"), "r") as f:
            ends[label] = f["end_states"][()], f["converged"][()]
    if len(ends) == 3:
        if not np.array_equal(ends["eye"][0], ends["none"][0]):
            problems.append("an identity W_O from the file changed the end states")
        if not ends["none"][1].all() or ends["flip"][1].any():
            problems.append(f"converged: {ends['none'][1]} without W_O, {ends['flip'][1]} with a reflection W_O "
                            "(expected all, then none): W_O not read")
    print(f"[{'ok' if not problems else 'FAIL'}] equilibria_uses_w_o_file" +
          ("" if not problems else "\n    " + "\n    ".join(problems)))
    return not problems


def keys_mixed_ranges_decisions(rcsim, work):
    """On keys of mixed magnitudes (mixed_keys) `rcsim keys` makes the decisions the relative
    tolerance implies, with finite margins and certificates in the keys' units."""
    import h5py
    import numpy as np
    d = os.path.join(work, "keys_mixed_ranges_decisions")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    c = Ctx(rcsim, d)
    problems = []
    for kind in ("columns", "one_big"):
        keys, expected = mixed_keys(kind)
        h5_arrays(c, "k.h5", keys=keys)
        r = c.run(["keys", "-q", "--keys.source=file", "--keys.file=k.h5", f"--output.file={kind}.h5"], check=False)
        if r.returncode != 0:
            problems.append(f"{kind}: exit {r.returncode}: {r.stderr.strip()}")
            continue
        with h5py.File(c.p(f"{kind}.h5"), "r") as f:
            got = f["selectable"][()].astype(bool)
            margin, cert = f["margin"][()], f["certificate"][()]
        if not np.array_equal(got, expected):
            problems.append(f"{kind}: selectable {got.astype(int)}, expected {expected.astype(int)}")
        if not (np.isfinite(cert).all() and np.isfinite(margin[got]).all() and (cert[got] > 0).all()):
            problems.append(f"{kind}: margins {margin}, certificates {cert}")
    print(f"[{'ok' if not problems else 'FAIL'}] keys_mixed_ranges_decisions" +
          ("" if not problems else "\n    " + "\n    ".join(problems)))
    return not problems


def target_appears_during_run(rcsim, work, sweep_point=False):
    """While a run computes, someone else creates a file at its output name: the run refuses to
    replace it (exit 1, named), the file is intact, no temporary or lock is left."""
    name = "target_appears_during_run"
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    Ctx(rcsim, d)
    slow = ["--model.tokens=16", "--model.dim=8", "--model.layers=400", "--run.trials=64", "--run.threads=1", "--quiet"]
    a = subprocess.Popen([rcsim, "run", "--output.file=run.h5"] + SMALL + slow, cwd=d, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    problems = []
    t0 = time.time()
    while not os.path.exists(os.path.join(d, "run.h5.lock")) and time.time() - t0 < 60:
        time.sleep(0.01)
    with open(os.path.join(d, "run.h5"), "w") as f:
        f.write("someone else's file\n")
    running = a.poll() is None
    _, err = a.communicate(timeout=600)
    if not running:
        problems.append("the run ended before the file appeared: the case is too quick")
    if a.returncode != 1:
        problems.append(f"exit {a.returncode}, expected 1")
    if "'run.h5' appeared or was replaced while rcsim was writing it" not in err:
        problems.append(f"no message naming run.h5: {err.strip()}")
    with open(os.path.join(d, "run.h5")) as f:
        if f.read() != "someone else's file\n":
            problems.append("the file that appeared was replaced")
    left = [n for n in snapshot(d) if n.endswith((".tmp", ".lock"))]
    if left:
        problems.append(f"left behind: {left}")
    print(f"[{'ok' if not problems else 'FAIL'}] {name}: exit {a.returncode}"
          + ("" if not problems else "\n    " + "\n    ".join(problems)))
    return not problems


def read_while_another_reader(rcsim, work):
    """Another process (h5py here) has the run file open while rcsim reads it: `analyze` (which
    reads it whole and writes a new file) and a rerun of `run` (which checks it) must not fail
    for HDF5's file locks; before the fix `analyze` ended with "cannot open ... for modification"."""
    import h5py
    name = "read_while_another_reader"
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    Ctx(rcsim, d)  # writes small.ini
    problems = []
    args = ["run", "--output.file=run.h5", "--quiet"] + SMALL
    r = subprocess.run([rcsim] + args, cwd=d, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        problems.append(f"setup run failed: {r.stderr.strip()}")
    else:
        with h5py.File(os.path.join(d, "run.h5"), "r") as held:  # a shared lock, held open
            for cmd in (["analyze", "run.h5", "--quiet"], args):
                r = subprocess.run([rcsim] + cmd, cwd=d, capture_output=True, text=True, timeout=300)
                if r.returncode != 0:
                    problems.append(f"rcsim {cmd[0]} exit {r.returncode}: {r.stderr.strip()}")
            if "metrics" not in held:
                problems.append("the held file lost its /metrics")
        with h5py.File(os.path.join(d, "run.h5"), "r") as f:
            if "analysis" not in f:
                problems.append("analyze wrote no /analysis")
    print(f"[{'ok' if not problems else 'FAIL'}] {name}" + ("" if not problems else "\n    " + "\n    ".join(problems)))
    return not problems


def long_commands_stop_on_signals(rcsim, work):
    """Every long-running command ends within seconds of SIGTERM and of SIGINT (keys ignored
    SIGTERM: its handler only set a flag that the LP loop never read), leaving nothing behind."""
    name = "long_commands_stop_on_signals"
    problems = []
    commands = {
        "keys": ["keys", "--keys.count=1500", "--keys.dim=6", "--quiet", "--output.file=k.h5"],
        "run": ["run", "--model.tokens=256", "--model.dim=64", "--model.layers=2000", "--run.trials=64",
                "--run.threads=1", "--quiet", "--output.file=r.h5"],
    }
    for label, args in commands.items():
        for sig in (signal.SIGTERM, signal.SIGINT):
            d = os.path.join(work, f"{name}-{label}-{sig.name}")
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            p = subprocess.Popen([rcsim] + args, cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            time.sleep(1.5)
            if p.poll() is not None:
                problems.append(f"{label}: finished in 1.5 s, before the signal (make it longer)")
                continue
            t0 = time.time()
            p.send_signal(sig)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                problems.append(f"{label}: still running 10 s after {sig.name}")
                continue
            took = time.time() - t0
            left = [f for f in os.listdir(d) if not f.endswith(".partial")]  # run keeps its checkpoint
            if left:
                problems.append(f"{label} after {sig.name}: left {left}")
            print(f"    {label}: {sig.name} -> exit {p.returncode} after {took:.2f} s")
    print(f"[{'ok' if not problems else 'FAIL'}] {name}" + ("" if not problems else "\n    " + "\n    ".join(problems)))
    return not problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rcsim")
    ap.add_argument("work")
    ap.add_argument("-k", default="", help="run only cases whose name contains this")
    a = ap.parse_args()
    rcsim = os.path.abspath(a.rcsim)
    os.makedirs(a.work, exist_ok=True)
    ok, n = True, 0
    for case in cases():
        if a.k in case[0]:
            n += 1
            ok &= check_case(rcsim, a.work, case)
    # The cases that are functions of their own (each one case, selected by its name).
    for check in (equilibria_drops_unused_file_keys, equilibria_uses_w_o_file, keys_mixed_ranges_decisions,
                  target_appears_during_run, read_while_another_reader, long_commands_stop_on_signals):
        if a.k in check.__name__:
            n += 1
            ok &= check(rcsim, a.work)
    print(f"issue22: {n} cases, {'all passed' if ok else 'FAILURES'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
