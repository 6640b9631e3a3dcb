"""The launcher: what the entrypoints run before they exec verl, defined once, in Python.

``python3 -I -m vlgrpo.launch settings OWNER`` (:mod:`vlgrpo.launch.__main__`) is the settings step of every
entrypoint (``entrypoints/lib/settings.sh`` ``vg_read_settings``, ``vg_check_unknown_vars`` and
``vg_resolve_derived`` call it): the registry's rows (``vlgrpo/environment.tsv``, read by
:mod:`vlgrpo.environment`, whose :func:`~vlgrpo.environment.validate` is the one value rule) are applied to the
``VLGRPO_*`` variables of one entrypoint (:mod:`vlgrpo.launch.settings`), and the refusals are worded for the
user. Standard library only.
"""
