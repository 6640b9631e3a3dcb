# vlgrpo-sitecustomize-shim: installed by `python -m vlgrpo patches install-sitecustomize`.
# Loads vlgrpo's runtime patches (stdlib-only post-import hooks), then runs the sitecustomize that this
# file shadows, if any. Never raises into the interpreter (VLGRPO_PATCHES_STRICT=1 re-raises).
try:
    from vlgrpo.patches import bootstrap as _vlgrpo_bootstrap, chain as _vlgrpo_chain
except ImportError:  # vlgrpo gone: still run the sitecustomize install-sitecustomize moved aside
    _vlgrpo_bootstrap = None
    import os as _os
    _kept = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), 'vlgrpo_orig_sitecustomize.py')
    if _os.path.isfile(_kept):
        with open(_kept, 'rb') as _fh:
            _code = compile(_fh.read(), _kept, 'exec')
        exec(_code, {'__name__': 'vlgrpo_chained_sitecustomize', '__file__': _kept})
if _vlgrpo_bootstrap is not None:
    try:
        _vlgrpo_bootstrap.install(via='sitecustomize')
    finally:  # the shadowed sitecustomize runs even when strict mode re-raised an install error
        _vlgrpo_chain.chain_sitecustomize(__file__)
