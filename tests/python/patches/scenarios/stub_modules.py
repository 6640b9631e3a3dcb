"""Automatic stand-ins for packages a scenario's real code imports but the CPU test environment lacks (they come
with vLLM or VeOmni's own needs in the images). Every module of a stubbed top-level package exists, and every
attribute is a class whose constructor takes anything."""

import importlib.abc
import importlib.machinery
import types


class AutoStubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = type(name, (), {"__init__": lambda self, *a, **k: None})
        setattr(self, name, value)
        return value


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves :class:`AutoStubModule` for ``top_level`` packages and their submodules; ``customize(module)`` may
    set attributes on each new module (e.g. ``vllm.SamplingParams``)."""

    def __init__(self, top_level, customize=None):
        self.top_level = tuple(top_level)
        self.customize = customize

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.top_level:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = AutoStubModule(spec.name)
        mod.__path__ = []
        if self.customize is not None:
            self.customize(mod)
        return mod

    def exec_module(self, module):
        pass


def vllm_distribution(tmp_dir, version="0.13.0"):
    """Make ``importlib.metadata.version("vllm")`` answer ``version`` (verl reads it at import) with a
    ``vllm-<version>.dist-info`` in ``tmp_dir``, put on ``sys.path``."""
    import os
    import sys

    meta = os.path.join(str(tmp_dir), f"vllm-{version}.dist-info")
    os.makedirs(meta, exist_ok=True)
    with open(os.path.join(meta, "METADATA"), "w") as fh:
        fh.write(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    sys.path.append(str(tmp_dir))
