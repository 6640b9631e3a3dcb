"""vlgrpo: runtime patches and launch tooling for GRPO on Qwen3-VL-30B-A3B with verl.

Importing this package is cheap on purpose: it imports nothing beyond the standard library, because the
patch bootstrap (:mod:`vlgrpo.patches.bootstrap`) runs in every interpreter through ``sitecustomize``.
"""

__version__ = "0.1.0"
