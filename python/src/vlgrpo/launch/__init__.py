"""The launcher: what the entrypoints run before they exec verl, defined once, in Python.

``python3 -I -m vlgrpo.launch serve OWNER`` (:mod:`vlgrpo.launch.__main__`), one coprocess per launch of
``entrypoints/lib/settings.sh``, answers the entrypoint's steps in order:

- settings (:mod:`vlgrpo.launch.settings`): the registry's rows (``vlgrpo/environment.tsv``, read by
  :mod:`vlgrpo.environment`, whose :func:`~vlgrpo.environment.validate` is the one value rule) applied to the
  ``VLGRPO_*`` variables of one entrypoint, the unknown names and "did you mean";
- environment and values (:mod:`vlgrpo.launch.childenv`): which inherited variables the children get, which stop
  the launch, and the typed value checks once bash has built the environment;
- recipe (:mod:`vlgrpo.launch.recipes`; fa and vo): derived defaults, the recipe's cross-field rules, the topology
  and the argv, from the recipe file (``vlgrpo/recipes/*.argv``).

Bash applies what they decide (exports, exit status 2 with the problems, the exec). Standard library only.
"""
