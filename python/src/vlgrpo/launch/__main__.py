"""``python3 -I -m vlgrpo.launch``: the launcher.

``entry fully-async-grpo|veomni-grpo|doctor|ray-node ...``: the whole launch of an entrypoint
(:mod:`vlgrpo.launch.entry`, :mod:`vlgrpo.launch.raynode`; the bash shims of entrypoints/ start it).
``docs ...``: the registry's text for ``scripts/gen-docs``.
``image-record FILE``: at image build, write the image's code locations to FILE
(:func:`vlgrpo.launch.entry.write_image_code_env`; the Dockerfiles run it).

Exit status 0 when the step ran, 2 for a usage error or a refusal, 1 for anything else.
"""

from __future__ import annotations

import sys

from vlgrpo import environment
from vlgrpo.launch import settings

USAGE = "usage: python3 -I -m vlgrpo.launch entry ENTRYPOINT ... | docs ... | image-record FILE"


def _docs(args: list[str]) -> int:
    """``docs rows OWNER`` | ``docs env-names OWNER KIND`` | ``docs env-table``: the registry's text for
    ``scripts/gen-docs`` (:mod:`vlgrpo.launch.help`)."""
    from vlgrpo.launch import help as helptext

    if len(args) == 2 and args[0] == "rows" and args[1] in settings.OWNERS:
        sys.stdout.write(helptext.settings_rows(args[1]))
    elif len(args) == 3 and args[0] == "env-names" and args[1] in settings.OWNERS and args[2] in environment.KINDS:
        sys.stdout.write(helptext.env_names(args[1], args[2]))
    elif args == ["env-table"]:
        sys.stdout.write(helptext.env_table())
    else:
        print("usage: python3 -I -m vlgrpo.launch docs rows OWNER | env-names OWNER KIND | env-table", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "entry":
        from vlgrpo.launch import entry, raynode

        return entry.main(args[1:], {"node": raynode.RayNodeLaunch})
    if args and args[0] == "docs":
        return _docs(args[1:])
    if len(args) == 2 and args[0] == "image-record":
        import os

        from vlgrpo.launch import entry

        entry.write_image_code_env(args[1], dict(os.environ))
        return 0
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
