"""The launcher: what the entrypoints run before they exec verl, defined once, in Python.

The recipe entrypoints are bash shims (``entrypoints/lib/shim.sh``) over ``python3 -I -m vlgrpo.launch entry
RECIPE``; the launch reads top to bottom in :mod:`vlgrpo.launch.entry` (:meth:`~vlgrpo.launch.entry.Launch.run`),
which calls, in order:

- :mod:`vlgrpo.launch.settings`: the registry's rows (``vlgrpo/environment.tsv``, read by :mod:`vlgrpo.environment`,
  whose :func:`~vlgrpo.environment.validate` is the one value rule) applied to the ``VLGRPO_*`` variables of one
  entrypoint, the unknown names and "did you mean";
- :mod:`vlgrpo.launch.childenv`: which inherited variables the children get, which stop the launch, and the typed
  value checks in the built environment;
- :mod:`vlgrpo.launch.recipes`: derived defaults, the recipe's cross-field rules, the topology and the argv, from
  the recipe file (``vlgrpo/recipes/*.argv``); :mod:`vlgrpo.launch.help` its ``--help``.

``ray-node.sh`` and ``doctor.sh`` are still bash; they ask the same modules through one ``python3 -I -m
vlgrpo.launch serve OWNER`` coprocess (:mod:`vlgrpo.launch.__main__`). Standard library only.
"""
