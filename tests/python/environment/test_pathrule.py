"""The one path rule (``vlgrpo.pathrule.check_path``) against the kernel as the reference.

Each case builds a small tree, asks the rule, then lets another user (uid 65534, through ``setpriv``) try to
change what the path names: rename the path or any folder or link on its way, or create an entry in the folder
it names. The rule must refuse exactly the cases where that user succeeds (a canary that fires), and pass the
ones where the kernel stops them. The launching user is uid 1000 (files are chowned to it) so that "owned by
the launching user" and "owned by root" are different cases. Needs root and setpriv; skipped otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from vlgrpo.pathrule import check_path

ME, OTHER = 1000, 65534
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv to act as another user"
)

ATTACK = textwrap.dedent("""
    import os, sys
    hits = []
    path = sys.argv[1]
    # every component on the way (lexical and resolved), the path itself last
    comps = []
    def walk(p, depth=0):
        parts = [x for x in os.path.abspath(p).split('/') if x]
        cur = '/'
        for i, name in enumerate(parts):
            nxt = os.path.join(cur, name)
            comps.append(nxt)
            if os.path.islink(nxt) and depth < 40:
                tgt = os.readlink(nxt)
                rest = '/'.join(parts[i + 1:])
                walk(os.path.join(cur, tgt) + ('/' + rest if rest else ''), depth + 1)
                return
            cur = nxt
    walk(path)
    for c in comps:
        if c in ('/tmp', '/'):
            continue
        try:
            os.rename(c, c + '.moved')
        except OSError:
            continue
        os.rename(c + '.moved', c)
        hits.append('rename ' + c)
    real = os.path.realpath(path)
    if os.path.isdir(real):
        try:
            fd = os.open(os.path.join(real, '.planted'), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.close(fd)
            os.unlink(os.path.join(real, '.planted'))
            hits.append('plant in ' + real)
        except OSError:
            pass
    elif os.path.isfile(real):
        try:
            os.close(os.open(real, os.O_WRONLY | os.O_APPEND))
            hits.append('write ' + real)
        except OSError:
            pass
    print('\\n'.join(hits))
""")


def other_user_can_change(path: str) -> list[str]:
    r = subprocess.run(
        ["setpriv", f"--reuid={OTHER}", f"--regid={OTHER}", "--clear-groups", sys.executable, "-I", "-c", ATTACK, path],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return [ln for ln in r.stdout.splitlines() if ln]


@pytest.fixture
def base(tmp_path_factory):
    # a root-owned 0755 base under /tmp (sticky, root-owned): trusted for both users' entries
    d = tmp_path_factory.mktemp("pathrule")
    os.chmod(d, 0o755)
    for p in d.parents:  # up to /tmp: pytest-xdist adds a folder per worker
        if str(p).startswith("/tmp/") and os.stat(p).st_uid == 0:
            os.chmod(p, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def mk(path, mode=0o700, uid=ME, file=False):
    if file:
        path.write_text("x")
    else:
        path.mkdir()
    os.chown(path, uid, uid)
    os.chmod(path, mode)
    return path


def verdict(path, **kw):
    return check_path(str(path), uid=ME, **kw)


def test_own_private_folder_passes_and_the_other_user_cannot_touch_it(base):
    d = mk(base / "ckpt")
    assert verdict(d, kind="dir") is None
    assert other_user_can_change(str(d)) == []


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757, 0o1777])
def test_writable_by_others_is_refused_and_exploitable(base, mode):
    d = mk(base / "ckpt", mode=mode)
    p = verdict(d, kind="dir")
    assert p is not None and "can be written by" in p.why and p.component == str(d)
    if mode & 0o002:
        assert other_user_can_change(str(d))  # the kernel lets them plant an entry


def test_folder_of_another_uid_is_refused(base):
    d = mk(base / "theirs", mode=0o755, uid=OTHER)
    p = verdict(d, kind="dir")
    assert p is not None and "owned by uid 65534" in p.why
    assert other_user_can_change(str(d))


def test_root_owned_folder_inside_a_world_writable_one(base):
    ww = mk(base / "ww", mode=0o777, uid=0)
    lib = mk(ww / "lib", mode=0o755, uid=0)
    p = verdict(lib, kind="dir")
    assert p is not None and p.component == str(ww)
    assert any(h.startswith("rename " + str(lib)) for h in other_user_can_change(str(lib)))


def test_sticky_shared_folder_entry_of_the_user_passes_entry_of_another_fails(base):
    shared = mk(base / "shared", mode=0o1777, uid=0)
    mine = mk(shared / "mine")
    theirs = mk(shared / "theirs", uid=OTHER)
    assert verdict(mine, kind="dir") is None
    assert other_user_can_change(str(mine)) == []
    p = verdict(theirs, kind="dir")
    assert p is not None and "sticky" in p.why
    assert other_user_can_change(str(theirs))


def test_symlink_to_a_writable_target_is_judged_by_the_target(base):
    ww = mk(base / "ww", mode=0o777, uid=0)
    link = base / "link"
    link.symlink_to(ww)
    p = verdict(link, kind="dir")
    assert p is not None and p.component == str(ww)
    assert other_user_can_change(str(link))


def test_link_planted_in_a_sticky_folder_by_another_user(base):
    shared = mk(base / "shared", mode=0o1777, uid=0)
    mine = mk(base / "mine")
    link = shared / "ckpt"
    link.symlink_to(mine)
    os.lchown(link, OTHER, OTHER)
    p = verdict(link, kind="dir")
    assert p is not None and p.component == str(link)
    assert any(h.startswith("rename " + str(link)) for h in other_user_can_change(str(link)))


def test_nested_links_through_a_writable_folder(base):
    ww = mk(base / "ww", mode=0o777, uid=0)
    mine = mk(base / "mine")
    (ww / "inner").symlink_to(mine)
    outer = base / "outer"
    outer.symlink_to(ww / "inner")
    p = verdict(outer, kind="dir")
    assert p is not None and p.component == str(ww)
    assert other_user_can_change(str(outer))


def test_missing_path_under_a_writable_parent_is_refused(base):
    ww = mk(base / "ww", mode=0o777, uid=0)
    p = verdict(ww / "not-yet")
    assert p is not None and (p.component == str(ww) or "does not exist" in p.why)
    own = mk(base / "own")
    p = verdict(own / "not-yet")
    assert p is not None and "does not exist" in p.why


def test_link_loop_is_refused(base):
    (base / "a").symlink_to(base / "b")
    (base / "b").symlink_to(base / "a")
    p = verdict(base / "a")
    assert p is not None and "symbolic links" in p.why


def test_kinds(base):
    f = mk(base / "f", mode=0o600, file=True)
    d = mk(base / "d")
    assert verdict(f, kind="file") is None and verdict(d, kind="dir") is None
    assert "not a folder" in verdict(f, kind="dir").why
    assert "not a regular file" in verdict(d, kind="file").why


@pytest.mark.parametrize(
    "mode,uid,ok",
    [
        (0o600, ME, True),
        (0o400, ME, True),
        (0o640, ME, False),
        (0o644, ME, False),
        (0o600, 0, False),
        (0o600, OTHER, False),
    ],
)
def test_key_files(base, mode, uid, ok):
    f = mk(base / "key", mode=mode, uid=uid, file=True)
    p = verdict(f, secret=True)
    assert (p is None) == ok, p


def test_bad_arguments():
    with pytest.raises(ValueError):
        check_path("/x", kind="socket")
    with pytest.raises(ValueError):
        check_path("")
    with pytest.raises(ValueError):
        check_path("/a\0b")
