"""Shared by the figure scripts (analysis/figure*.py): command line, running rcsim, saving."""


import argparse
import os


class _FigureParser(argparse.ArgumentParser):
    """Fills the defaults of --data and --out after parsing: the full figure uses data/NAME and
    figures/NAME; --tiny uses data/NAME-tiny for both, so a tiny run never meets the full run's
    files nor overwrites the committed figures."""

    def __init__(self, default_name, **kw):
        super().__init__(**kw)
        self.default_name = default_name

    def parse_args(self, args=None, namespace=None):
        a = super().parse_args(args, namespace)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
        name = self.default_name + ("-tiny" if a.tiny else "")
        if a.data is None:
            a.data = os.path.join(root, "data", name)
        if a.out is None:
            a.out = os.path.join(root, "data", name, self.default_name) if a.tiny \
                else os.path.join(root, "figures", self.default_name)
        return a


def figure_arguments(description, default_name):
    """The command line every figure script takes."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    p = _FigureParser(default_name, description=description)
    p.add_argument("--rcsim", default=os.path.join(root, "build", "sim", "rcsim"), help="rcsim executable")
    p.add_argument("--data", default=None,
                   help=f"directory for run files (default data/{default_name}, with --tiny data/{default_name}-tiny)")
    p.add_argument("--out", default=None,
                   help=f"output image, without extension (PNG and PDF are written; default figures/{default_name}, "
                        f"with --tiny data/{default_name}-tiny/{default_name})")
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
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    for ext in ("png", "pdf"):
        fig.savefig(f"{out}.{ext}", dpi=120)
    print(f"wrote {out}.png and {out}.pdf")
