# vlgrpo-sitecustomize-shim: installed by `python -m vlgrpo patches install-sitecustomize`.
# Loads vlgrpo's runtime patches (stdlib-only post-import hooks), then runs the sitecustomize that this
# file shadows, if any. Never raises into the interpreter (VLGRPO_PATCHES_STRICT=1 re-raises).
try:
    from vlgrpo.patches import bootstrap as _vlgrpo_bootstrap
except ImportError:
    _vlgrpo_bootstrap = None
if _vlgrpo_bootstrap is not None:
    try:
        _vlgrpo_bootstrap.install(via='sitecustomize')
    finally:  # the shadowed sitecustomize runs even when strict mode re-raised an install error
        _vlgrpo_bootstrap.chain_sitecustomize(__file__)
