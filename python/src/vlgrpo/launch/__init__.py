"""The launcher: what the entrypoints run before they exec verl or start Ray, defined once, in Python.

Every entrypoint is a bash shim (``entrypoints/lib/shim.sh``) over ``python3 -I -m vlgrpo.launch entry NAME``; a
recipe's launch reads top to bottom in :mod:`vlgrpo.launch.entry` (:meth:`~vlgrpo.launch.entry.Launch.run`),
``ray-node.sh``'s in :mod:`vlgrpo.launch.raynode`, the doctor's in :class:`~vlgrpo.launch.entry.DoctorLaunch`.
They call, in order:

- :mod:`vlgrpo.launch.settings`: the registry's rows (``vlgrpo/environment.tsv``, read by :mod:`vlgrpo.environment`,
  whose :func:`~vlgrpo.environment.validate` is the one value rule) applied to the ``VLGRPO_*`` variables of one
  entrypoint, the unknown names and "did you mean";
- :mod:`vlgrpo.launch.childenv`: which inherited variables the children get, which stop the launch, and the typed
  value checks in the built environment;
- :mod:`vlgrpo.launch.recipes`: derived defaults, the recipe's cross-field rules, the topology and the argv, from
  the recipe file (``vlgrpo/recipes/*.argv``); :mod:`vlgrpo.launch.help` its ``--help``.

Standard library only.
"""
