"""Runtime patches for known Qwen3-VL bugs in the pinned transformers/verl, loaded in every interpreter.

Start-up path (standard library only): ``sitecustomize`` -> :func:`vlgrpo.patches.bootstrap.install`, which
reads the switches (:mod:`~vlgrpo.patches.state`) and the records (:mod:`~vlgrpo.patches.registry`, one module per
fix in :mod:`~vlgrpo.patches.fixes`) and registers post-import hooks (:mod:`~vlgrpo.patches.hooks`) for the target
modules; then :func:`vlgrpo.patches.chain.chain_sitecustomize` runs the ``sitecustomize`` ours shadows. The checks
(:mod:`~vlgrpo.patches.engine`) and the fixes' detectors and replacements run only when a target module is imported.

Public API (what doctor/preflight/tests call)::

    import vlgrpo.patches
    vlgrpo.patches.install()                 # idempotent; sitecustomize already did it in the images
    rows = vlgrpo.patches.status(verify=True)  # list of dicts, see status()
    vlgrpo.patches.bootstrap_state()["via"]  # "sitecustomize"/"pth" when loaded at start-up
    vlgrpo.patches.unpatch("qwen3_vl.vision_pos_embed")  # undo one fix in this interpreter (tests)
    vlgrpo.patches.apply("qwen3_vl.vision_pos_embed")    # and apply it again
    vlgrpo.patches.original("module:Class.method")       # the object a fix replaced there

CLI: ``python -m vlgrpo patches status [--verify] [--json]``, ``python -m vlgrpo patches table``,
``python -m vlgrpo patches install-sitecustomize [--site-packages DIR]``.
"""

from vlgrpo.patches.state import STATUSES as STATUSES  # public: the statuses status() reports


def bootstrap_state() -> dict:
    """How the patch loader got into this interpreter: ``{"installed": bool, "via": "sitecustomize" | "pth" | "api"
    | "status" | None, "enabled": bool, "disabled_ids": tuple, "strict": bool, "chained_sitecustomize": path | None,
    ...}``. ``via`` is ``None`` when nothing loaded it (no sitecustomize/.pth in this interpreter)."""
    from vlgrpo.patches import state

    return state.snapshot()


def install(via: str = "api"):
    """Install the post-import hooks (see :func:`vlgrpo.patches.bootstrap.install`); returns the state dict."""
    from vlgrpo.patches import bootstrap

    return bootstrap.install(via=via)


def status(verify: bool = False, import_targets: bool = True) -> list:
    """Status of every registered patch in this interpreter.

    Args:
        verify: also run each patch's ``verify()`` (tiny CPU inputs against a reference; imports torch).
        import_targets: import each target module first (so the answer covers the installed code, not only what
            this process happened to import). Import errors are reported as ``target absent`` with the error.

    Returns:
        One dict per patch, in registry order, with keys ``id``, ``status`` (one of :data:`STATUSES`, or
        ``"pending"`` when ``import_targets=False`` and no target module is imported yet), ``reason``,
        ``summary``, ``upstream``, ``targets`` (list of dicts: ``target``, ``status``, ``reason``, ``original``)
        and ``verify`` (``None`` if not asked; else ``"ok"`` or ``"failed: <error>"``).

    Never raises for a patch failure (it is reported); raises only in strict mode (``VLGRPO_PATCHES_STRICT=1``).
    """
    from vlgrpo.patches import report

    return report.status(verify=verify, import_targets=import_targets)


def unpatch(patch_id: str) -> list:
    """Undo patch ``patch_id`` in this interpreter: every attribute it replaced is bound to what was there before
    (the same object; an attribute that came from a base class is removed again), the re-check wrappers it
    installed are removed when no other enabled patch uses them, and the patch is not applied again here (its
    status is ``disabled``, reason "undone in this process") until :func:`apply`. Idempotent.

    Only an attribute still bound to the replacement is restored: one rebound since (verl's monkey patch, a test)
    is left alone. A name another module bound from the target while patched (``from m import f``) keeps the
    replacement.

    Returns:
        ``"module:path"`` of every attribute restored by this call (empty when nothing was patched).

    Raises:
        ValueError: ``patch_id`` is not a registered patch id (the message lists the known ones).
    """
    from vlgrpo.patches import engine

    return engine.unpatch(patch_id)


def apply(patch_id: str) -> dict:
    """Apply patch ``patch_id`` now (again after :func:`unpatch`): each target whose module is imported is checked
    and replaced where its detector finds the fault, as the post-import hooks do. The switches
    (``VLGRPO_PATCHES``, ``VLGRPO_PATCHES_DISABLED``) still rule: a switched-off patch stays off.

    Returns:
        ``{"module.path": status}`` for each target (one of :data:`STATUSES`, or ``"pending"`` when its module is
        not imported in this process).

    Raises:
        ValueError: ``patch_id`` is not a registered patch id.
    """
    from vlgrpo.patches import engine

    return engine.apply(patch_id)


def original(target: str):
    """The object a patch of this interpreter replaced at ``target`` (``"module:attribute.path"``, e.g.
    ``"transformers.models.qwen3_vl.modeling_qwen3_vl:Qwen3VLVisionModel.fast_pos_embed_interpolate"``), or the
    object bound there now when no patch replaced it (the module is imported for that).

    Raises:
        ValueError: ``target`` has no ``:``.
        ImportError, AttributeError: the target does not exist (only when no patch replaced it).
    """
    from vlgrpo.patches import engine

    return engine.original(target)
