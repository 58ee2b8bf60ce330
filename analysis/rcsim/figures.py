"""Shared by the figure scripts (analysis/figure*.py): command line, running rcsim, saving."""


def figure_arguments(description, default_name):
    """The command line every figure script takes."""
    import argparse
    import os
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--rcsim", default=os.path.join(root, "build", "sim", "rcsim"), help="rcsim executable")
    p.add_argument("--data", default=os.path.join(root, "data", default_name), help="directory for run files")
    p.add_argument("--out", default=os.path.join(root, "figures", default_name),
                   help="output image, without extension (PNG and PDF are written)")
    p.add_argument("--tiny", action="store_true", help="a tiny version (CI): few trials and layers")
    p.add_argument("--force", action="store_true", help="recompute runs that are already complete")
    return p


def rcsim(args, exe, *rest):
    """Run rcsim with arguments; stop with its message on failure."""
    import subprocess
    cmd = [exe, *rest] + (["--force"] if args.force else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}\nfailed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def save_figure(fig, out):
    import os
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    for ext in ("png", "pdf"):
        fig.savefig(f"{out}.{ext}", dpi=120)
    print(f"wrote {out}.png and {out}.pdf")
