"""One module per runtime patch, named after its id (dots as underscores: ``qwen3_vl.vision_pos_embed`` ->
``qwen3_vl_vision_pos_embed.py``), each with the same parts:

``RECORD``      the patch's record, plain data (fields: :mod:`vlgrpo.patches.registry`); it names the parts below
                as ``"module:attribute"`` strings, which :mod:`vlgrpo.patches.engine` imports only when a target
                module is imported;
``is_faulty``   the detector: ``is_faulty(func) -> (faulty, reason)`` reads the installed code itself (its source,
                through :mod:`vlgrpo.patches.source`), never a version number;
the replacement installed where the detector says faulty (a function, or with ``"wraps": True`` a factory
                ``replacement(original) -> function``). The engine installs it through
                :func:`vlgrpo.patches.contract.wrap` (the original's name, qualified name and docstring,
                ``__wrapped__``, the markers; :func:`vlgrpo.patches.unpatch` undoes it): a fix module sets none of
                these and assigns no upstream attribute itself (what it installs later, such as
                ``checkpoint.manifest``'s ``torch.load`` guard, goes through ``wrap`` too). Torch code that must be
                built at import time (a decorator, an autograd function, a Triton kernel) lives in a module of its
                own next to this package (:mod:`vlgrpo.patches.qwen3_vl_pos_embed`, :mod:`vlgrpo.patches.text_rotary`,
                :mod:`vlgrpo.patches.moe_routing`) and the record names it there;
``verify``      ``verify() -> None``: the fix on tiny CPU inputs against an independent reference
                (``python -m vlgrpo patches status --verify``); raises ``AssertionError``.

The registry imports every fix module (the engine on the first hook, the preflight, ``patches status``), so a fix
module's top level imports only the standard library; torch, transformers and verl are imported inside the functions
that use them. Interpreter start imports none of them: it reads :mod:`vlgrpo.patches.index`, which
``make docs-patches`` regenerates from the registry.
"""
