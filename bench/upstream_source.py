"""Read upstream functions out of a transformers wheel (or a directory holding ``transformers/``) and compile just
those functions in this process, so that one benchmark run can put, say, transformers 4.57.6's method next to an
installed transformers 5.17 (the benchmarks of this folder: pos_embed.py, moe_experts.py).

The compiled functions get a namespace holding only ``torch``, ``torch.nn`` (as ``nn``) and
``torch.nn.functional`` (as ``F``): enough for the self-contained tensor methods measured here. Decorators are
dropped.
"""

from __future__ import annotations

import ast
import re
import zipfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn


def read_source(src: Path, member: str) -> str | None:
    """The text of ``member`` (e.g. ``transformers/models/.../modeling_x.py``) in the wheel or directory ``src``,
    or ``None`` when it is not there."""
    src = Path(src)
    if src.is_file() and src.suffix == ".whl":
        with zipfile.ZipFile(src) as zf:
            return zf.read(member).decode() if member in zf.namelist() else None
    path = src / member
    return path.read_text() if path.is_file() else None


def kind(src: Path) -> str:
    """``"from wheel"`` or ``"from dir"`` (for contender labels)."""
    return "from wheel" if Path(src).suffix == ".whl" else "from dir"


def source_version(src: Path) -> str:
    """The ``__version__`` of the transformers in ``src`` (its ``__init__.py``, else the wheel's file name)."""
    src = Path(src)
    init = read_source(src, "transformers/__init__.py") or ""
    match = re.search(r'^__version__\s*=\s*["\']([^"\']+)', init, re.M)
    if match:
        return match.group(1)
    match = re.search(r"transformers-([0-9][^-/]*)", src.name)
    return match.group(1) if match else "?"


def sources(paths, member: str):
    """``(path, version, text of member or None)`` for each ``--transformers-source`` path; ``SystemExit`` naming a
    path that does not exist."""
    for src in map(Path, paths):
        if not src.exists():
            raise SystemExit(f"--transformers-source {src}: no such file or directory")
        yield src, source_version(src), read_source(src, member)


def compile_functions(source: str, names, filename: str) -> dict:
    """Compile the top-level functions / ``Class.method`` named in ``names`` from ``source`` into one namespace
    (see the module docstring). Returns ``{name: function}``; empty if one of them is missing."""
    tree = ast.parse(source)
    ns = {"torch": torch, "nn": nn, "F": F, "__name__": f"bench_upstream:{filename}"}
    out = {}
    for name in names:
        body, node = tree.body, None
        for part in name.split("."):
            found = [n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == part]
            if not found:
                return {}
            node = found[-1]
            body = node.body
        node.decorator_list = []
        module = ast.Module(body=[node], type_ignores=[])
        exec(compile(module, filename, "exec"), ns)  # the upstream file the user pointed at
        out[name] = ns[node.name]
    return out
