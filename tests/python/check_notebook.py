#!/usr/bin/env python3
"""Executes the tutorial notebook docs/user/tutorial.ipynb as a user's Jupyter would, by the
command docs/user/python.md documents (jupyter nbconvert --execute, no kernel named: the
notebook's own kernel `rcsim`, the name the docs register). Here that kernel is registered in a
temporary Jupyter data folder as this Python with the package of PYTHONPATH (build/python, as
.ci/run gives it), so the kernelspec's name is checked too: a notebook that asks for another
kernel fails. It checks what the notebook shows: every code cell ran without an error, the
figures are inline (image/png outputs, at least 5), progress=True printed no "IProgress not
found" warning, and it took less than 60 s (the docs say about 20 s).

Usage: check_notebook.py OUT_DIR    (.ci/run runs it; it writes OUT_DIR/tutorial.ipynb, executed)
"""
import json
import os
import subprocess
import sys
import time

out_dir = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))
notebook = os.path.join(here, "..", "..", "docs", "user", "tutorial.ipynb")
os.makedirs(out_dir, exist_ok=True)
kernel_name = json.load(open(notebook))["metadata"]["kernelspec"]["name"]
if kernel_name != "rcsim":
    sys.exit(f"check_notebook: the notebook's kernel is {kernel_name!r}, not 'rcsim', the kernel docs/user/python.md "
             "registers")
# The kernel `rcsim` as `ipykernel install --name rcsim` writes it, with this run's PYTHONPATH.
data_dir = os.path.join(os.path.abspath(out_dir), "jupyter-data")
spec_dir = os.path.join(data_dir, "kernels", "rcsim")
os.makedirs(spec_dir, exist_ok=True)
with open(os.path.join(spec_dir, "kernel.json"), "w") as f:
    json.dump({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
               "display_name": "rcsim (check_notebook)", "language": "python",
               "env": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}}, f)
env = dict(os.environ, JUPYTER_PATH=data_dir)
start = time.monotonic()
r = subprocess.run(["jupyter-nbconvert", "--to", "notebook", "--execute", notebook, "--output-dir", out_dir,
                    "--ExecutePreprocessor.timeout=120"], capture_output=True, text=True, env=env)
seconds = time.monotonic() - start
if r.returncode != 0:
    sys.exit(f"check_notebook: nbconvert --execute failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
cells = json.load(open(os.path.join(out_dir, "tutorial.ipynb")))["cells"]
outputs = [o for c in cells if c["cell_type"] == "code" for o in c.get("outputs", [])]
images = sum("image/png" in o.get("data", {}) for o in outputs)
stderr = "".join("".join(o.get("text", "")) for o in outputs if o.get("name") == "stderr")
progress_cell = next(c for c in cells if "progress=True" in "".join(c["source"]) and c["cell_type"] == "code")
progress_err = "".join("".join(o.get("text", "")) for o in progress_cell["outputs"] if o.get("name") == "stderr")
failures = []
for ok, what in ((not any(o.get("output_type") == "error" for o in outputs), "no cell raised"),
                 (images >= 5, f"{images} inline figures (>= 5)"),
                 ("IProgress" not in stderr, "no 'IProgress not found' warning in any cell"),
                 ("rcsim" in progress_err and "layer" in progress_err, "progress=True printed a text bar of layers"),
                 (seconds < 60, f"executed in {seconds:.1f} s (< 60 s)")):
    print("ok  " if ok else "FAIL", what)
    if not ok:
        failures.append(what)
if failures:
    sys.exit(f"check_notebook: {len(failures)} failure(s)")
print("check_notebook: all passed")
