#!/usr/bin/python3
"""Writes docs/reference/python-api.md, the Python API reference, from the docstrings of what
`rcsim.__all__` names, of the plotting functions of rcsim.plot and of rcsim.torch.stack (inspect: signature and
docstring of each; a class with its public methods). Run it after changing a public function
or its docstring; the test python_api_reference (--check) fails while the file is stale.

    PYTHONPATH=build/python /usr/bin/python3 scripts/python-api-reference.py           # write it
    PYTHONPATH=build/python /usr/bin/python3 scripts/python-api-reference.py --check   # exit 1 if stale

A public function, class or method without a docstring stops it (exit 1, naming it): the
reference would have a hole. It needs the package with its engine (rcsim.ConfigError comes from
the engine): the build tree's build/python, or an installed package.
"""
import inspect
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "docs", "reference", "python-api.md")
PLOT = ("curves", "final", "heatmap")
HEADER = """# Python API reference

Generated from the docstrings by `scripts/python-api-reference.py` (do not edit by hand; the test
`python_api_reference` fails when this file is stale). What is here is `rcsim.__all__`, the
plotting functions of `rcsim.plot` and `rcsim.torch.stack`; the guide with examples is
[../user/python.md](../user/python.md), plotting in [../user/plotting.md](../user/plotting.md).
"""


class MissingDocstring(Exception):
    pass


def docstring(obj, name):
    doc = inspect.getdoc(obj)
    if not doc or not doc.strip():
        raise MissingDocstring(f"python-api-reference: {name} has no docstring; write one (the reference needs it)")
    return doc


def signature(obj):
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"


def block(doc):
    """A docstring as a fenced text block (its indentation kept), marked for the documented-commands
    check as text, not commands."""
    return f"<!-- ci: skip docstring text, not commands -->\n\n```text\n{doc}\n```\n"


def entry(obj, name):
    if inspect.isclass(obj):
        base = ", ".join(b.__name__ for b in obj.__bases__ if b is not object)
        out = [f"### class `{name}`" + (f" ({base})" if base else ""), "", block(docstring(obj, name))]
        for meth_name, meth in sorted(vars(obj).items()):
            if meth_name.startswith("_") or not callable(meth):
                continue
            out += [f"#### `{name}.{meth_name}{signature(meth)}`", "", block(docstring(meth, f"{name}.{meth_name}"))]
        return out
    if callable(obj):
        return [f"### `{name}{signature(obj)}`", "", block(docstring(obj, name))]
    return [f"### `{name}`", "", f"A {type(obj).__name__}: `{name} = {obj!r}`." if name != "rcsim.__version__"
            else "The package's version (the file VERSION of the source tree), a string.", ""]


def torch_function(path):
    """rcsim.torch (rcsim/torch_function.py) and its `stack`, read from the source with ast: the
    same text with or without torch installed (importing it would need torch)."""
    import ast
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    module_doc = ast.get_docstring(tree)
    if not module_doc:
        raise MissingDocstring("python-api-reference: rcsim.torch has no docstring; write one")
    lines = ["## rcsim.torch", "", block(module_doc)]
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "stack":
            doc = ast.get_docstring(node)
            if not doc:
                raise MissingDocstring("python-api-reference: rcsim.torch.stack has no docstring; write one")
            lines += [f"### `rcsim.torch.stack({ast.unparse(node.args)})`", "", block(doc)]
    return lines


def render():
    import rcsim
    import rcsim.plot
    lines = [HEADER]
    lines += ["## rcsim", "", block(docstring(rcsim, "rcsim"))]
    for name in rcsim.__all__:
        lines += entry(getattr(rcsim, name), f"rcsim.{name}")
    lines += ["## rcsim.plot", "", block(docstring(rcsim.plot, "rcsim.plot"))]
    for name in PLOT:
        lines += entry(getattr(rcsim.plot, name), f"rcsim.plot.{name}")
    lines += torch_function(os.path.join(os.path.dirname(os.path.abspath(rcsim.__file__)), "torch_function.py"))
    return "\n".join(lines).rstrip("\n") + "\n"


def main():
    check = sys.argv[1:] == ["--check"]
    if sys.argv[1:] not in ([], ["--check"]):
        print("usage: python-api-reference.py [--check]", file=sys.stderr)
        return 2
    try:
        text = render()
    except MissingDocstring as e:
        print(e, file=sys.stderr)
        return 1
    if check:
        old = open(OUT, encoding="utf-8").read() if os.path.exists(OUT) else ""
        if old != text:
            print(f"python-api-reference: {os.path.relpath(OUT, ROOT)} is stale (a docstring or signature changed): "
                  "rerun PYTHONPATH=build/python /usr/bin/python3 scripts/python-api-reference.py", file=sys.stderr)
            return 1
        print(f"python-api-reference: {os.path.relpath(OUT, ROOT)} is up to date")
        return 0
    tmp = OUT + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, OUT)
    print(f"python-api-reference: wrote {os.path.relpath(OUT, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
