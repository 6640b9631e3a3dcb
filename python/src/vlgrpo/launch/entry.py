"""``python3 -I -m vlgrpo.launch entry RECIPE``: the whole launch of a recipe entrypoint, top to bottom.

The recipe entrypoints (``entrypoints/fully-async-grpo.sh``, ``entrypoints/veomni-grpo.sh``) are bash shims
(``entrypoints/lib/shim.sh``): they read their own environment as it was at exec (``/proc/$$/environ``, names bash
cannot hold included), start this module with an empty environment (``exec -c``: no inherited variable acts on
the interpreter) and hand the entries over on a file descriptor. Everything else is here, in the order a launch
runs it (:meth:`Launch.run`):

1. the command-line words (``--help``, ``--dry-run``; anything else is refused), ``--help`` (:mod:`.help`);
2. the stop signals (:class:`Children`: a signal stops the running check with its process group and ends the
   launch with 128+signal, nothing started);
3. the settings (:mod:`.settings`), the unknown ``VLGRPO_*`` names, the children's environment built from the
   registry (:mod:`.childenv`) and the typed values checked in it;
4. the children's private working folder (fresh, 0700) and in it their home, XDG folders and caches (or the caches
   in ``VLGRPO_CACHE_DIR``): the environment's HOME and caches are never used; the image's CANN environment file;
   ``RAY_ADDRESS``;
5. this node: the platform and its accelerators, from the one device counter (``python3 -m vlgrpo devices``, run
   as a child in the built environment);
6. the recipe (:mod:`.recipes`): derived defaults, cross-field rules, the checkpoint folder, the argv; the
   experiment trackers (:func:`vlgrpo.trackers.plan`); the overrides file (``python3 -m vlgrpo.preflight.overrides``,
   a child); the merged argv and its keys set twice;
7. in cluster mode the node wait and the device probe with the rehearsal of verl's worker groups of this argv
   (``python3 -m vlgrpo cluster wait|probe --argv-file``); the preflight (``python3 -m vlgrpo preflight``);
8. the dry-run plan, or ``execve`` of verl in the built environment (same PID: the signals are then verl's).

Problems are collected and reported together, one ``PROG: error: VAR: FAULT; fix: FIX`` line each, then exit 2.
Exit status: 0 planned or started, 2 refused, 1 anything else (a failed check, a bug: ``internal error``).

The test hooks (``--dev-dir``, ``--driver-root``, ``--mountinfo``, ``--container-marker``, ``--environ-file``) are
options of this module only: the shims never pass them, so a launch always reads the real ``/dev``, mount table
and container markers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Iterator

from vlgrpo import environment
from vlgrpo.launch import childenv, help as helptext, recipes, settings

EXIT_CONFIG, EXIT_FAILURE = 2, 1
#: seconds the device counter (a sysfs and /dev walk, the driver's tool) and the overrides check (imports verl, composes
#: its config) may take before they count as hung: a few seconds each on the 2-core machine
DEVICE_COUNT_LIMIT_S = 120.0
OVERRIDES_LIMIT_S = 600.0
#: the entrypoints this module launches: the shim's name -> registry owner (the two recipes, the doctor, the Ray
#: node: :mod:`vlgrpo.launch.raynode`)
RECIPES = {"fully-async-grpo": "fa", "veomni-grpo": "vo", "doctor": "doctor", "ray-node": "node"}
#: name and number of each signal that stops the launch during the checks (Linux x86-64 and arm64 numbers)
STOP_SIGNALS = (("INT", 2), ("TERM", 15), ("HUP", 1), ("QUIT", 3), ("USR1", 10), ("USR2", 12), ("PIPE", 13))
#: the image's own CANN environment file: sourced for the children when the image's BASH_ENV names it
IMAGE_BASH_ENV = "/opt/vlgrpo/image/cann-env.sh"
#: the folders the launch builds for every child, fresh and 0700: variable -> (under the built home or the cache
#: folder, path below it). The cache folder is VLGRPO_CACHE_DIR (kept across launches) or .cache in the launch's
#: private working folder; the home is always .home there. The inherited values are never used (registry: set rows).
PRIVATE = (
    ("HOME", "home", ""),
    ("XDG_CONFIG_HOME", "home", ".config"),
    ("XDG_DATA_HOME", "home", ".local/share"),
    ("XDG_STATE_HOME", "home", ".local/state"),
    ("WANDB_CONFIG_DIR", "home", ".config/wandb"),
    ("XDG_CACHE_HOME", "cache", ""),
    ("TRITON_CACHE_DIR", "cache", "triton"),
    ("TORCHINDUCTOR_CACHE_DIR", "cache", "torchinductor"),
    ("TORCH_EXTENSIONS_DIR", "cache", "torch_extensions"),
    ("VLLM_CACHE_ROOT", "cache", "vllm"),
    ("HF_DATASETS_CACHE", "cache", "huggingface/datasets"),
    ("HF_MODULES_CACHE", "cache", "huggingface/modules"),
    ("WANDB_CACHE_DIR", "cache", "wandb"),
    ("WANDB_DATA_DIR", "cache", "wandb-data"),
    ("RAY_TMPDIR", "work", ".ray"),
)
#: the longest AF_UNIX path Ray 2.48.0 makes under RAY_TMPDIR, less the folder itself:
#: ``/ray/session_<YYYY-MM-DD_HH-MM-SS_ffffff>_<pid, 7 digits>/sockets/plasma_store`` (68 bytes; sun_path holds 107)
_RAY_SOCKET_TAIL = 68
_SUN_PATH_MAX = 107
#: names a shell sets for itself; the children get them only as inherited (PWD: the child's working folder)
_SHELL_OWN = ("_", "SHLVL", "PWD", "OLDPWD")


class Hooks:
    """Where the launch looks: the device files (``dev_dir``), the driver tree (``driver_root``), the mount table
    and the container marker files. Test hooks, set only by this module's options."""

    def __init__(self) -> None:
        self.dev_dir = "/dev"
        self.driver_root = "/"
        self.mountinfo = "/proc/self/mountinfo"
        self.markers = ["/.dockerenv", "/run/.containerenv"]
        self.lib = ""  # the entrypoints' lib folder (--lib), checked with the interpreter


class Exit(Exception):
    """End the launch with exit status ``code`` (what it had to say is printed)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _alive(pid: int) -> bool:
    """``pid`` exists and is not a zombie (its /proc stat)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    rest = stat.rpartition(b") ")[2]
    return bool(rest) and not rest.startswith(b"Z")


class Children:
    """The children of the checks and the stop signals. Each child runs in a process group of its own, stdin from
    /dev/null; a stop signal sent to the launch meanwhile goes to that group (INT, TERM and HUP as they came, the
    others as TERM: SIGQUIT would make every process of the group dump core first), the child gets up to 1 s, what
    is left of the group is SIGKILLed, the launch's temporary files go, and the launch ends with 128+signal."""

    def __init__(self, prog: str) -> None:
        self.prog = prog
        self.pid = 0
        self.cleanups: list[str] = []  # files, and the working folder last: removed at every end but the exec
        self.workdir = ""
        self.pwd = ""  # the children's working folder as named (their PWD)

    def install(self) -> None:
        for name, _num in STOP_SIGNALS:
            signal.signal(getattr(signal, "SIG" + name), self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        for name, _num in STOP_SIGNALS:
            signal.signal(getattr(signal, "SIG" + name), signal.SIG_IGN)  # a second signal does not restart this
        name = next(n for n, num in STOP_SIGNALS if num == signum)
        fwd = signum if name in ("INT", "TERM", "HUP") else signal.SIGTERM
        pid = self.pid
        if pid:
            try:
                os.killpg(pid, fwd)
            except OSError:
                try:
                    os.kill(pid, fwd)
                except OSError:
                    pass
            for _ in range(20):
                if not _alive(pid):
                    break
                time.sleep(0.05)
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass
        self.cleanup()
        try:  # stderr may be the closed pipe that sent SIGPIPE
            os.write(2, f"{self.prog}: stopped by SIG{name} during the checks; nothing was started\n".encode())
        except OSError:
            pass
        os._exit(128 + signum)

    def run(
        self,
        argv: list[str],
        env: dict[str, str],
        stdout: int | None = None,
        capture: bool = False,
        stderr: int | None = None,
        limit: float | None = None,
    ) -> tuple[int, bytes]:
        """Run ``argv`` (its program found on ``env``'s PATH) as a child of the checks and wait for it. ``stdout``:
        a file descriptor for its output (default: this process's stdout); ``capture``: return its output;
        ``stderr``: where its errors go (default: this process's stderr; ``subprocess.STDOUT``: with its output);
        ``limit``: seconds after which the child's process group is killed and said so (exit status 124, as
        timeout(1) gives), so that no check hangs silently.
        Returns (exit status, output; a signal ``n`` that ended the child gives 128+n)."""
        env = dict(env)
        env["PWD"] = self.pwd or os.getcwd()
        try:
            proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if capture else stdout,
                stderr=stderr,
                preexec_fn=os.setpgrp,  # a group of its own (Python 3.10 has no process_group)
            )
        except OSError as exc:
            self.say(f"cannot start {argv[0]}: {exc.strerror or exc}")
            return 127, b""
        self.pid = proc.pid
        out = b""
        try:
            try:
                if capture:
                    out, _ = proc.communicate(timeout=limit)
                    rc = proc.returncode
                else:
                    rc = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                shown = " ".join(argv[:6]) + (" ..." if len(argv) > 6 else "")
                self.say(f"{shown} did not finish within {limit:g} s (a hang?) and was stopped")
                return 124, b""
        finally:
            self.pid = 0
        return (128 - rc if rc < 0 else rc), out

    def say(self, text: str) -> None:
        print(f"{self.prog}: {text}", file=sys.stderr, flush=True)

    def cleanup(self) -> None:
        for f in self.cleanups:
            try:
                os.unlink(f)
            except OSError:
                pass
        self.cleanups = []
        if self.workdir:
            try:
                os.chdir("/")
                _rmtree(self.workdir)
            except OSError:
                pass
            self.workdir = ""


def _rmtree(top: str) -> None:
    """``rm -rf`` of the launch's own working folder (no symlink followed)."""
    for root, dirs, files in os.walk(top, topdown=False):
        for f in files:
            os.unlink(os.path.join(root, f))
        for d in dirs:
            p = os.path.join(root, d)
            if os.path.islink(p):
                os.unlink(p)
            else:
                os.rmdir(p)
    os.rmdir(top)


def read_environ(data: bytes) -> list[tuple[str, str]]:
    """The environ entries ``NAME=VALUE`` (NUL-ended, in order; empty ones skipped) as ``(name, value)`` pairs; an
    entry without ``=`` has its whole text as name and value, as bash's ``${e%%=*}`` / ``${e#*=}`` give."""
    out: list[tuple[str, str]] = []
    for raw in data.split(b"\0"):
        if not raw:
            continue
        text = raw.decode("utf-8", "surrogateescape")
        name, sep, value = text.partition("=")
        out.append((name, value if sep else text))
    return out


def logical_cwd(pwd: str) -> str:
    """The working folder as a shell names it: an inherited ``PWD`` that is absolute, has no ``.`` or ``..`` part
    and is the same folder as the real one (symlinks not resolved), else the real path."""
    real = os.getcwd()
    if pwd.startswith("/") and not any(p in (".", "..") for p in pwd.split("/")):
        try:
            a, b = os.stat(pwd), os.stat(real)
            if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino):
                return pwd
        except OSError:
            pass
    return real


def _set_rows(owner: str) -> list[tuple[str, str]]:
    """This entrypoint's ``set`` rows in file order: (name, value; ``""`` when the code computes it)."""
    return [(r.name, r.default) for r in environment.rows() if r.kind == "set" and owner in r.owners]


#: the variables Python's urllib and requests read for a proxy, lower case first (urllib.request.getproxies_environment
#: lets a lower-case name win over its upper-case twin), then the trust anchors requests and OpenSSL read
_PROXY_NAMES = ("{s}_proxy", "{S}_PROXY", "all_proxy", "ALL_PROXY")
_CA_NAMES = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR")


def _route(env: dict[str, str], server: str) -> str:
    """How the W&B client would reach ``server`` with the children's ``env``: ``, through proxy SCHEME://HOST:PORT
    (NAME; credentials not shown)`` when a proxy variable for the server's scheme (or ``all``) is set, and ``, TLS
    trust anchors from NAME=PATH`` when a trust-anchor variable replaces the system's (whoever holds that CA's key
    and sits on the way, the proxy included, reads the API key). ``""`` for neither. ``NO_PROXY`` is named when
    set (it may exempt the server)."""
    scheme = "http" if server.startswith("http://") else "https"
    out = ""
    for pattern in _PROXY_NAMES:
        name = pattern.format(s=scheme, S=scheme.upper())
        parts = environment.proxy_parts(env[name]) if env.get(name) else None
        if parts:
            creds = "; credentials not shown" if parts[2] else ""
            exempt = ", unless NO_PROXY exempts the server" if env.get("NO_PROXY") or env.get("no_proxy") else ""
            out += f", through proxy {parts[0]}://{parts[1]} ({name}{creds}{exempt})"
            break
    for name in _CA_NAMES:
        if env.get(name):
            out += f", TLS trust anchors from {name}={env[name]} (not the system's)"
            break
    return out


def image_record(lib: str, name: str) -> str:
    """The one line the image build wrote to ``lib/name`` (``image-path``: the image's PATH, which the children get
    in place of the environment's), or ``""`` when there is no such file (a checkout) or it is not one line of
    text."""
    if not lib:
        return ""
    try:
        with open(os.path.join(lib, name), "rb") as fh:
            data = fh.read(65536)
    except OSError:
        return ""
    text = data.decode("utf-8", "replace").removesuffix("\n")
    return "" if not text or "\n" in text or "\0" in text or "\ufffd" in text else text


#: the code locations an image fixes besides PATH: the children get the image's value of each (the build records
#: them in ``lib/image-code-env``), never the environment's; CANN's own folders are added by its set_env file
IMAGE_CODE_NAMES = (
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "CUDA_HOME",
    "ASCEND_TOOLKIT_HOME",
    "ASCEND_HOME_PATH",
    "ASCEND_OPP_PATH",
    "ASCEND_AICPU_PATH",
    "ASCEND_CUSTOM_OPP_PATH",
    "ATB_HOME_PATH",
)
IMAGE_CODE_FILE = "image-code-env"


def write_image_code_env(path: str, environ: dict[str, str]) -> None:
    """Write the image's code locations (:data:`IMAGE_CODE_NAMES`) from ``environ`` to ``path``, one line each:
    ``NAME=VALUE``, or ``NAME`` alone where the image leaves it unset. Run at image build
    (``python3 -I -m vlgrpo.launch image-record``), where the environment is the image's ``ENV``.

    Raises:
        ValueError: a value holds a newline or a NUL (it could not be read back as one line).
    """
    lines = []
    for name in IMAGE_CODE_NAMES:
        value = environ.get(name)
        if value is not None and ("\n" in value or "\0" in value):
            raise ValueError(f"{name}: the image's value holds a newline or a NUL")
        lines.append(name if value is None else f"{name}={value}")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


def image_code_env(lib: str) -> dict[str, str | None] | None:
    """The image's code locations as the build recorded them (:func:`write_image_code_env`): name -> value, or
    ``None`` for a name the image leaves unset (every name of :data:`IMAGE_CODE_NAMES` is in the result); ``None``
    when there is no record (a checkout, bare metal).

    Raises:
        ValueError: the record exists but is not what the build writes (an unknown name, a line that is not
            ``NAME`` or ``NAME=VALUE``, not UTF-8): the image is damaged.
    """
    if not lib:
        return None
    try:
        with open(os.path.join(lib, IMAGE_CODE_FILE), "rb") as fh:
            data = fh.read(1 << 20)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError(f"cannot be read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("is not UTF-8") from None
    got: dict[str, str | None] = dict.fromkeys(IMAGE_CODE_NAMES)
    for line in text.removesuffix("\n").split("\n"):
        name, sep, value = line.partition("=")
        if name not in IMAGE_CODE_NAMES or "\0" in value:
            raise ValueError(f"holds a line that is not NAME or NAME=VALUE of a code location: {line[:80]!r}")
        got[name] = value if sep else None
    return got


def _set_search_path(env: dict[str, str], name: str, value: str | None) -> None:
    """``env[name] = value`` without empty entries (the loader, Python and PATH read one as the working directory)
    or repeated ones (the first is where a search stops); unset when nothing is left or ``value`` is None."""
    kept = [e for e in (value or "").split(":") if e]
    if kept:
        env[name] = ":".join(dict.fromkeys(kept))
    else:
        env.pop(name, None)


def default_signals() -> None:
    """Give the stop signals, SIGPIPE and SIGXFSZ (which Python ignores for itself) their default actions, for
    the program this process is about to become (``execve`` keeps ignored signals ignored)."""
    for name in [n for n, _ in STOP_SIGNALS] + ["XFSZ"]:
        signal.signal(getattr(signal, "SIG" + name), signal.SIG_DFL)


def setting_names(entries: list[tuple[str, str]]) -> list[str]:
    """The ``VLGRPO_*`` names among the environ ``entries`` that a shell can hold, once each, in the C locale's
    order (a shell's)."""
    return sorted(
        {n for n, _ in entries if n.startswith("VLGRPO_") and childenv.identifier(n)},
        key=lambda n: n.encode("utf-8", "surrogateescape"),
    )


class Launch:
    """One launch of recipe entrypoint ``owner`` (``fa``, ``vo``) from the inherited environ ``entries``."""

    def __init__(self, owner: str, entries: list[tuple[str, str]], environ_path: str, readable: bool, hooks: Hooks):
        self.owner, self.prog, self.hooks = owner, settings.PROGS[owner], hooks
        self.entries, self.environ_path, self.readable = entries, environ_path, readable
        self.held: dict[str, str] = {}  # the inherited value of each name (the last copy, as a shell keeps it)
        for name, value in entries:
            if name and "=" not in name:
                self.held[name] = value
        self.cwd = logical_cwd(self.held.get("PWD", ""))
        self.children = Children(self.prog)
        self.children.pwd = self.cwd
        self.problems: list[str] = []
        self.notes: list[str] = []
        self.dry_run = False
        self.st = recipes.State()
        self.cls = childenv.Classified()
        self.env: dict[str, str] = {}  # the children's environment
        self.argv: list[str] = []
        self.program: list[str] = []
        self.recipe_file = recipes.Recipe()
        self.node_kind = "node"
        self.preflight_result = "not run"
        self.image_path = ""  # the image's PATH the children get in place of the environment's ("" outside an image)
        self.code_env: dict[str, str | None] | None = None  # the image's code locations (None outside an image)

    # ---- problems -----------------------------------------------------------------------------------------------

    def flush(self) -> None:
        """Print every collected problem and exit 2, if there is one."""
        if not self.problems:
            return
        for p in self.problems:
            print(f"{self.prog}: error: {p}", file=sys.stderr)
        print(
            f"{self.prog}: {len(self.problems)} configuration problem(s); nothing was started (see --help)",
            file=sys.stderr,
            flush=True,
        )
        raise Exit(EXIT_CONFIG)

    def internal(self, text: str) -> Exit:
        print(f"{self.prog}: internal error: {text} (this is a bug in the entrypoint)", file=sys.stderr, flush=True)
        return Exit(EXIT_FAILURE)

    def fail(self, text: str, code: int = EXIT_FAILURE) -> Exit:
        """``PROG: TEXT`` on stderr; the Exit to raise."""
        self.children.say(text)
        return Exit(code)

    # ---- the steps ----------------------------------------------------------------------------------------------

    def words(self, words: list[str]) -> bool:
        """The command-line words; True for --help. Anything but --help/-h and --dry-run is a problem."""
        want_help = False
        for w in words:
            if w in ("-h", "--help"):
                want_help = True
            elif w == "--dry-run":
                self.dry_run = True
            else:
                self.problems.append(
                    settings.problem(
                        f"argument {settings.show(w)}",
                        "this entrypoint takes no arguments or Hydra overrides",
                        f"use only --help or --dry-run, and set VLGRPO_* variables for settings ({self.prog} --help "
                        "lists them)",
                    )
                )
        self.flush()
        return want_help

    def read_settings(self) -> None:
        """The settings (values, raw values, sources; problems), then the names of every ``VLGRPO_*`` variable."""
        # the names a shell holds, in its (C locale) order
        names = setting_names(self.entries)
        exported = {n: self.held[n] for n in names}
        got = settings.read_settings(self.owner, exported, self.cwd)
        for row in settings.owner_settings(self.owner):
            short = row.name[len("VLGRPO_") :]
            self.st.values[short] = got.values.get(short, "")
            if short in got.raw:
                self.st.raw[short] = got.raw[short]
            self.st.source[short] = got.source.get(short, "")
        self.problems += got.problems
        self.problems += settings.interpreter_problems(self.hooks.lib, self.held.get("VLGRPO_PYTHON", ""))
        if self.st.values.get("DRY_RUN") == "True":
            self.dry_run = True
        self.problems += settings.unknown_vars(self.owner, names)

    def build_environment(self) -> None:
        """Classify the inherited variables, build the children's environment from the passed ones and this
        entrypoint's fixed ``set`` rows, then check the typed values in it (:mod:`.childenv`)."""
        v = self.st.values
        first = childenv.ray_address_problem(self.owner, self.held.get("RAY_ADDRESS", ""), v.get("RAY_ADDRESS", ""))
        lead = [] if first is None else [first]
        if not self.readable:
            self.problems += lead
            self.problems.append(
                settings.problem(
                    "environment",
                    f"{self.environ_path} is unreadable, so the inherited environment cannot be checked",
                    "run with /proc mounted (the default for docker and podman)",
                )
            )
            return
        self.cls = childenv.classify(self.owner, self.entries, self.held, v.get("PASS_ENV", ""))
        self.problems += lead + self.cls.problems
        self.env = {n: self.held[n] for n in self.cls.passed if n in self.held}
        for name, value in _set_rows(self.owner):
            if value:
                self.env[name] = value
        image_path = image_record(self.hooks.lib, "image-path")
        if image_path:
            self.env["PATH"] = self.image_path = image_path
        self.code_locations()
        # a code location the image leaves unset is not checked here: the children never get the environment's
        # value of it (foreign_code_locations refuses that value)
        image_unset = {n for n, val in (self.code_env or {}).items() if val is None}
        typed = [f"{n}={self.env.get(n, '')}" for n in self.cls.typed if n not in image_unset]
        if typed or self.cls.nonascii:
            protect = (
                childenv.protected(v.get("CHECKPOINT_DIR", ""), self.hooks.markers, self.hooks.mountinfo)
                if typed
                else ()
            )
            self.problems += childenv.value_problems(
                self.owner, typed, v.get("PASS_ENV", ""), protect, self.cls.nonascii
            )

    def code_locations(self) -> None:
        """In an image (``lib/image-code-env``): the children get the image's value of every code location
        (:data:`IMAGE_CODE_NAMES`) in place of the environment's; whether the environment asked for more is
        judged once CANN's file has run (:meth:`foreign_code_locations`)."""
        try:
            self.code_env = image_code_env(self.hooks.lib)
        except ValueError as exc:
            self.problems.append(
                settings.problem(
                    "image",
                    f"{os.path.join(self.hooks.lib, IMAGE_CODE_FILE)} {exc}",
                    "rebuild the image (make image-gpu / make image-npu); the build writes this file",
                )
            )
            return
        if self.code_env is None:
            return
        for name, value in self.code_env.items():
            _set_search_path(self.env, name, value)

    def foreign_code_locations(self) -> None:
        """Refuse an environment value of a code location that names an entry the children's value (the image's,
        CANN's set_env applied) does not have: in an image only the image's code is loaded. An interactive shell of
        the image that sourced CANN's file itself names nothing foreign and passes."""
        if self.code_env is None:
            return
        for name in IMAGE_CODE_NAMES:
            held = self.held.get(name)
            if held is None:
                continue
            have = self.env.get(name)
            entries = [] if have is None else have.split(":")
            # an empty entry (the working directory) is dropped from every child's value (cann_env), so it is no
            # code location the children would get: an interactive shell that sourced CANN's file has one
            foreign = [e for e in held.split(":") if e and e not in entries]
            if not foreign:
                continue
            shown = ", ".join(repr(e) for e in foreign)
            image = f"the image's is {have}" if have else "the image sets none"
            self.problems.append(
                settings.problem(
                    name,
                    f"names {shown}, which this image's code locations do not ({image}; "
                    f"{os.path.join(self.hooks.lib, IMAGE_CODE_FILE)}): in the image the children load only the "
                    "image's code",
                    f"unset {name} (the children get the image's value); to add a library or a module, build an "
                    "image FROM this one that installs it",
                )
            )

    def image_env(self) -> None:
        """What BASH_ENV did for the image: the image's CANN file, sourced by bash in the built environment when
        the image's BASH_ENV names it (its exports: ASCEND_*, LD_LIBRARY_PATH, PYTHONPATH, PATH)."""
        if self.env.get("BASH_ENV") == IMAGE_BASH_ENV and os.path.isfile(IMAGE_BASH_ENV):
            self.cann_env()
        self.foreign_code_locations()

    def cann_env(self) -> None:
        """Source the image's CANN file in the built environment (bash ``-p``) and take what it exports."""
        script = 'source "$1" || true; for n in $(compgen -e); do printf "%s=%s\\0" "$n" "${!n}"; done'
        proc = subprocess.run(
            ["/bin/bash", "-p", "-c", script, "_", IMAGE_BASH_ENV],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            check=False,
        )
        before = self.env
        after = dict(read_environ(proc.stdout))
        for n in _SHELL_OWN:
            if n in before:
                after[n] = before[n]
            else:
                after.pop(n, None)
        # CANN's files prepend with `export X=...:$X`: where X was unset that leaves an empty entry, which the
        # loader (LD_LIBRARY_PATH), Python (PYTHONPATH, even under -P) and PATH read as the working directory
        # (a repeated entry adds nothing: the first one is where the search stops)
        for n in ("PATH", *IMAGE_CODE_NAMES):
            if n in after:
                _set_search_path(after, n, after[n])
        self.env = after

    def count_devices(self, platform: str, driver: bool) -> dict[str, str] | None:
        """The one device counter's answer (``python3 -P -s -m vlgrpo devices --format shell``, a child in the built
        environment; ``driver``: with the host driver check): its ``key=value`` lines, or None with the problem
        recorded when it failed; a visibility list's problem (field cases C06, C12) is recorded too."""
        args = ["python3", "-P", "-s", "-m", "vlgrpo", "devices", "--format", "shell", "--dev-dir", self.hooks.dev_dir]
        if platform:
            args += ["--platform", platform]
        if driver:
            args += ["--driver", "--root", self.hooks.driver_root]
        rc, out = self.children.run(args, self.env, capture=True, limit=DEVICE_COUNT_LIMIT_S)
        dev: dict[str, str] = {}
        for line in out.decode("utf-8", "surrogateescape").split("\n"):
            key, sep, value = line.partition("=")
            if sep and 1 <= len(key) <= 32 and all(c.islower() and c.isascii() or c == "_" for c in key):
                dev[key] = value
        if rc != 0 or not _count(dev.get("devices", "")) or not _count(dev.get("node_devices", "")):
            self.problems.append(
                settings.problem(
                    "VLGRPO_PLATFORM",
                    f"the device counter (python3 -m vlgrpo devices) failed (exit {rc})",
                    "run it by hand to see why; python3 must have the vlgrpo package (the images install it)",
                )
            )
            return None
        if dev.get("list_problem"):  # field cases C06, C12
            self.problems.append(
                settings.problem(dev.get("visibility_var", ""), dev["list_problem"], dev.get("list_fix", ""))
            )
        return dev

    def detect_node(self) -> None:
        """The platform and this node's accelerators (the one device counter, a child), with the planning override
        of a dry run; problems recorded."""
        v, st = self.st.values, self.st
        st.platform = v.get("PLATFORM", "")
        dev = self.count_devices(st.platform, driver=True)
        if dev is None:
            return
        st.platform = dev.get("platform", "")
        cluster = bool(v.get("RAY_ADDRESS"))
        if not st.platform and cluster:
            self.problems.append(
                settings.problem(
                    "VLGRPO_PLATFORM",
                    "no accelerator on this node to tell the platform from (cluster mode)",
                    "set VLGRPO_PLATFORM=npu or gpu for the cluster's nodes",
                )
            )
            return
        if not st.platform:
            self.problems.append(
                settings.problem(
                    "VLGRPO_PLATFORM",
                    "no Ascend NPU (/dev/davinci*, npu-smi) or NVIDIA GPU (nvidia-smi) found on this node",
                    "run on an accelerator node, or plan elsewhere with VLGRPO_DRY_RUN=1 VLGRPO_PLATFORM=npu|gpu "
                    "VLGRPO_PLAN_DEVICES_PER_NODE=N",
                )
            )
            return
        if dev.get("ray_hidden", "0") == "1":  # field case B14
            self.problems.append(
                settings.problem(dev.get("visibility_var", ""), dev.get("cause", ""), dev.get("fix", ""))
            )
            return
        plan = v.get("PLAN_DEVICES_PER_NODE", "")
        if dev.get("driver_problem"):
            if self.dry_run and plan:
                self.notes.append(
                    f"warning: host driver: {dev['driver_problem']} (planning dry run: not refused here; a launch on "
                    "this machine would be)"
                )
            else:
                self.problems.append(settings.problem("host driver", dev["driver_problem"], dev.get("driver_fix", "")))
        n, src = int(dev["devices"]), dev.get("source", "")
        if plan:
            if self.dry_run:
                n, src, self.node_kind = int(plan), "planning override VLGRPO_PLAN_DEVICES_PER_NODE", "plan"
            else:
                self.problems.append(
                    settings.problem(
                        "VLGRPO_PLAN_DEVICES_PER_NODE",
                        "a planning override, refused for a real launch (it would hide the node's real device count)",
                        "unset it, or add VLGRPO_DRY_RUN=1 to plan without starting",
                    )
                )
        st.node, st.node_from = n, src
        if n == 0 and cluster:
            st.node_from = "none here; cluster mode: the cluster's nodes are checked by vlgrpo cluster wait/probe"
            return
        if n == 0 and not plan:
            self.problems.append(
                settings.problem(
                    "VLGRPO_PLATFORM",
                    f"platform {st.platform} but no device found ({src})",
                    "check the device mounts of the container, or plan with VLGRPO_DRY_RUN=1 "
                    "VLGRPO_PLAN_DEVICES_PER_NODE=N",
                )
            )

    def recipe(self) -> None:
        """Derived defaults (a refused one ends the launch here), the recipe's rules, the checkpoint folder, the
        topology, the cluster's size and the argv (:mod:`.recipes`)."""
        st = self.st
        st.markers, st.mountinfo, st.dry_run = list(self.hooks.markers), self.hooks.mountinfo, self.dry_run
        recipes.resolve_derived(self.owner, st, self.cwd)
        if st.problems:
            self.problems += st.problems
            self.flush()
        rec = recipes.load(self.owner)
        self.program = rec.program
        recipes.CHECKS[self.owner](st)
        if st.values.get("CHECKPOINT_DIR"):
            recipes.check_checkpoint_dir(st, "VLGRPO_CHECKPOINT_DIR", st.values["CHECKPOINT_DIR"])
        self.problems += st.problems
        self.notes += st.notes
        try:
            self.argv = recipes.build_argv(rec, st.values)
        except KeyError as exc:
            raise self.internal(f"template placeholder {{{exc.args[0]}}} has no value") from None
        self.recipe_file = rec

    def trackers(self, dry: bool | None = None) -> None:
        """The trackers' settings and the W&B key by :func:`vlgrpo.trackers.plan` (``dry``: judged as a dry run;
        default: whether this launch is one); what verl's loggers read is put in the children's environment (a key
        is never printed)."""
        v = self.st.values
        loggers = v.get("LOGGER", "")
        sent = [r.name[len("VLGRPO_") :] for r in settings.owner_settings(self.owner) if "trackers" in r.owners]
        given = any(v.get(n) for n in sent)
        key_file = self.held.get("WANDB_API_KEY_FILE", "")
        if not (given or key_file or any(t in loggers for t in ("wandb", "tensorboard", "mlflow", "swanlab"))):
            return
        from vlgrpo import trackers

        values = {f"VLGRPO_{n}": v[n] for n in sent if v.get(n)}
        if key_file:
            values["WANDB_API_KEY_FILE"] = key_file
        if self.env.get("WANDB_API_KEY"):
            values["WANDB_API_KEY"] = "set"
        if self.env.get("WANDB_MODE"):
            values["WANDB_MODE"] = self.env["WANDB_MODE"]
        result = trackers.plan(loggers, values, self.owner, self.dry_run if dry is None else dry)
        self.problems += [settings.problem(n, w, f) for n, w, f in result.problems]
        self.notes += list(result.notes)
        own = {n for n, _ in _set_rows(self.owner)}
        for name, value in result.exports.items():
            if name not in own and name != "WANDB_API_KEY":
                raise self.internal(f"vlgrpo.trackers exports {name}, which is no set row of {self.owner}")
            self.env[name] = value

    def overrides(self) -> list[str]:
        """``VLGRPO_OVERRIDES_FILE``, checked by ``python3 -m vlgrpo.preflight.overrides`` (a child) against the
        pinned verl and the recipe: the accepted ``key=value`` overrides (exit 2 with the reasons)."""
        path = self.st.values.get("OVERRIDES_FILE", "")
        if not path:
            return []
        rec = self.recipe_file
        cmd = ["python3", "-P", "-s", "-m", "vlgrpo.preflight.overrides", "--owner", self.owner, "--module"]
        cmd += [rec.program[2], "--prog", self.prog, "--file", path, "--fixed", rec.fixed, "--", *rec.template]
        rc, out = self.children.run(cmd, self.env, capture=True, limit=OVERRIDES_LIMIT_S)
        if rc != 0:
            if rc != 2:
                self.children.say(f"the VLGRPO_OVERRIDES_FILE check could not run (exit {rc}); nothing was started")
            raise Exit(EXIT_CONFIG if rc == 2 else EXIT_FAILURE)
        # fail closed: the overrides count only behind the checker's own verdict, its last NUL-ended element
        from vlgrpo.preflight.overrides import END_MARK

        got = [el.decode("utf-8", "surrogateescape") for el in out[:-1].split(b"\0")]
        if not out.endswith(b"\0") or got[-1] != f"{END_MARK} {len(got) - 1}":
            self.children.say(
                "the VLGRPO_OVERRIDES_FILE check exited 0 without its verdict (python3 -m vlgrpo.preflight.overrides: "
                "is it the vlgrpo package's?); nothing was started"
            )
            raise Exit(EXIT_FAILURE)
        return [el for el in got[:-1] if el]

    def check_argv(self, overrides: list[str]) -> None:
        """The overrides in place of the template's element of the same key or appended (a plan note each), and
        every key the final argv sets twice refused (field case B11)."""
        first = len(self.program)
        self.argv, notes = recipes.merge_overrides(self.argv, first, overrides)
        self.notes += notes
        self.problems += recipes.duplicate_problems(self.argv, first)

    def enter_workdir(self) -> None:
        """The children's working folder: fresh, empty, this user's, mode 0700, under TMPDIR (never the checkpoint
        folder: Ray 2.48.0 puts the driver's working folder first on every worker's sys.path). Removed at the end
        unless verl is exec'd in it."""
        tmp = self.env.get("TMPDIR") or "/tmp"
        try:
            d = tempfile.mkdtemp(prefix="vlgrpo-run.", dir=tmp)
            os.chdir(d)
        except OSError:
            self.problems.append(
                settings.problem(
                    "TMPDIR",
                    f"no private working directory could be made in {settings.show(tmp)} (mktemp -d failed)",
                    "point TMPDIR at an existing folder this user can write (or unset it for /tmp)",
                )
            )
            self.flush()
            return
        self.children.workdir = self.children.pwd = d

    def build_private(self) -> None:
        """The children's home, XDG folders, caches and Ray's temporary folder (:data:`PRIVATE`), made fresh (mode
        0700) in the private working folder, the caches in ``VLGRPO_CACHE_DIR`` when it is set (a folder of this
        user's that passed the path rule); whatever the environment named for them is never used. ``RAY_TMPDIR`` is
        left unset when Ray's socket paths under it would pass the 107-byte AF_UNIX limit (Ray then uses TMPDIR)."""
        wd = self.children.workdir
        home = os.path.join(wd, ".home")
        cache = self.st.values.get("CACHE_DIR") or os.path.join(wd, ".cache")
        if self.st.values.get("CACHE_DIR"):
            # compiled kernels are loaded from it: never where whoever can write checkpoints could fill it
            protect = childenv.protected(
                self.st.values.get("CHECKPOINT_DIR", ""), self.hooks.markers, self.hooks.mountinfo
            )
            real = os.path.realpath(cache)
            for root in protect:
                if real == root or real.startswith(root.rstrip("/") + "/"):
                    self.problems.append(
                        settings.problem(
                            "VLGRPO_CACHE_DIR",
                            f"lies in the checkpoint folder or its volume ({settings.show(root)}): whoever can write "
                            "checkpoints could fill the caches compiled kernels are loaded from",
                            "point it at a folder of yours off the checkpoint volume",
                        )
                    )
                    self.flush()
        for name, base, rel in PRIVATE:
            root = {"home": home, "cache": cache}.get(base, wd)
            path = os.path.join(root, rel) if rel else root
            if name == "RAY_TMPDIR" and len(path.encode()) + _RAY_SOCKET_TAIL > _SUN_PATH_MAX:
                # Ray's sockets would not fit: Ray then uses TMPDIR, which passed the tmpdir rule (this user's own)
                continue
            try:
                os.makedirs(path, mode=0o700, exist_ok=True)
            except OSError as exc:
                var = "VLGRPO_CACHE_DIR" if base == "cache" and self.st.values.get("CACHE_DIR") else "TMPDIR"
                self.problems.append(
                    settings.problem(
                        var,
                        f"the folder for {name} cannot be made ({settings.show(path)}: {exc.strerror or exc})",
                        "point it at a folder of yours that you can write",
                    )
                )
                continue
            self.env[name] = path
        self.flush()

    def cluster(self) -> None:
        """Cluster mode (``VLGRPO_RAY_ADDRESS``): the bounded wait for the nodes, then the device probe (progress on
        stderr). Exit 2 when the cluster is not ready, 1 when the check itself failed."""
        v = self.st.values
        addr = v.get("RAY_ADDRESS", "")
        if not addr:
            return
        res = self.st.platform.upper()
        nodes, per_node, _ = self.st.cluster
        timeout = v.get("RAY_WAIT_TIMEOUT", "")
        self.children.say(
            f"cluster {addr}: waiting for {nodes} node(s) with {per_node} {res} each (timeout {timeout}s)"
        )
        base = ["python3", "-P", "-s", "-m", "vlgrpo", "cluster"]
        size = ["--address", addr, "--resource", res, "--nodes", str(nodes), "--per-node", str(per_node)]
        rc, _ = self.children.run(base + ["wait", *size, "--timeout", timeout], self.env, stdout=2)
        if rc != 0:
            raise self.fail(
                f"cluster {addr} is not ready (vlgrpo cluster wait exit {rc}); nothing was started",
                EXIT_CONFIG if rc == 2 else EXIT_FAILURE,
            )
        loggers = v.get("LOGGER", "").removeprefix("[").removesuffix("]")
        with self.argv_file("device probe") as f:
            probe = [*size, "--loggers", loggers, "--argv-file", f]
            rc, _ = self.children.run(base + ["probe", *probe], self.env, stdout=2)
        if rc != 0:
            raise self.fail(
                f"device probe on cluster {addr} failed (vlgrpo cluster probe exit {rc}); nothing was started",
                EXIT_CONFIG if rc == 2 else EXIT_FAILURE,
            )

    @contextlib.contextmanager
    def argv_file(self, reader: str) -> Iterator[str]:
        """A file of the launch in TMPDIR holding the final argv, one element per line (UTF-8, surrogateescape), as
        ``vlgrpo preflight --argv-file`` and ``vlgrpo cluster probe --argv-file`` read it; removed when the block ends
        (or at any end of the launch). Exit 1 naming TMPDIR when it cannot be made."""
        tmp = self.env.get("TMPDIR") or "/tmp"
        try:
            fd, f = tempfile.mkstemp(prefix="vlgrpo-argv.", dir=tmp)
        except OSError:
            raise self.fail(
                f"cannot create the {reader} argv file in {settings.show(tmp)} (set TMPDIR to a writable folder); "
                "nothing was started"
            ) from None
        self.children.cleanups.append(f)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(b"".join(el.encode("utf-8", "surrogateescape") + b"\n" for el in self.argv))
            yield f
        finally:
            try:
                os.unlink(f)
            except OSError:
                pass
            self.children.cleanups.remove(f)

    def preflight(self) -> None:
        """``python3 -P -s -m vlgrpo preflight`` on the final argv (one element per line in a file of the launch):
        0 clean, 2 findings (exit 2), else a failure of the check (exit 1). ``VLGRPO_PREFLIGHT=warn`` adds
        ``--waive``: exit 3 (findings, none about code the launch would run) goes on; a finding about code loading
        is never waived."""
        warn = self.st.values.get("PREFLIGHT") == "warn"
        cmd = ["python3", "-P", "-s", "-m", "vlgrpo", "preflight", "--purpose", "plan" if self.dry_run else "launch"]
        if self.st.node > 0:
            cmd += ["--devices-per-node", str(self.st.node), "--devices-source", self.node_kind]
        with self.argv_file("preflight") as f:
            rc, _ = self.children.run(cmd + ["--argv-file", f] + (["--waive"] if warn else []), self.env, stdout=2)
        if rc == 0:
            self.preflight_result = "clean"
        elif rc == 3 and warn:
            self.preflight_result = (
                "findings (VLGRPO_PREFLIGHT=warn: continuing; none of them is about code the launch would run)"
            )
            self.children.say("warning: preflight reported findings; continuing because VLGRPO_PREFLIGHT=warn")
        elif rc == 2 and warn:
            raise self.fail(
                "preflight found problems that VLGRPO_PREFLIGHT=warn cannot waive: code the launch would run (above); "
                "nothing was started",
                EXIT_CONFIG,
            )
        elif rc == 2:
            raise self.fail("preflight found problems in the configuration (above); nothing was started", EXIT_CONFIG)
        else:
            raise self.fail(f"preflight could not run (python3 -m vlgrpo preflight exit {rc}); nothing was started")

    # ---- the plan -----------------------------------------------------------------------------------------------

    def plan(self) -> str:
        """The dry-run output: ``# `` lines with the plan, then the exact argv, one element per line."""
        st, v = self.st, self.st.values
        out = [f"# {self.prog} dry run: configuration valid, nothing started"]
        out.append(f"# platform: {st.platform}; devices per node on this node: {st.node} ({st.node_from})")
        out.append(f"# topology: {st.topology}")
        nodes, per_node, devices = st.cluster
        if v.get("RAY_ADDRESS"):
            out.append(f"# cluster: {v['RAY_ADDRESS']} ready and probed")
        elif self.node_kind == "plan" and devices > st.node:
            out.append(
                f"# cluster: this plan needs a Ray cluster of {nodes} node(s) with {per_node} {st.platform} each (set "
                "VLGRPO_RAY_ADDRESS to launch it)"
            )
        out.append(f"# working directory of the children: {self.children.pwd}")
        out += self.env_plan("# ", "every child: preflight, cluster tool, verl")
        if self.env.get("WANDB_API_KEY"):
            out.append("# environment: WANDB_API_KEY (set, not shown)")
        out += self.wandb_plan("# ")
        out += [f"# {n}" for n in self.notes]
        out.append(f"# preflight: {self.preflight_result}")
        out.append(f"# command ({len(self.argv)} arguments, one per line):")
        return "\n".join(out + self.argv) + "\n"

    def child_env(self) -> dict[str, str]:
        """The environment every child gets now (its working folder as PWD)."""
        env = dict(self.env)
        env["PWD"] = self.children.pwd
        return env

    def env_plan(self, p: str, who: str) -> list[str]:
        """The plan's environment lines: the names every child gets (values not shown; the fixed values this
        entrypoint sets shown), the names ``VLGRPO_PASS_ENV`` let through, the names dropped."""
        env = self.child_env()
        got = sorted((n for n in env if n != "_"), key=lambda n: n.encode("utf-8", "surrogateescape"))
        fixed, built = "", ""
        private = {name for name, _b, _r in PRIVATE}
        wd = self.children.workdir
        for name, _value in _set_rows(self.owner):
            if name in private and name in env:
                v = env[name]
                built += " " + name + "=" + (os.path.relpath(v, wd) if wd and v.startswith(wd + "/") else v)
                continue
            if name in env:
                shown = "(not shown)" if name in ("WANDB_API_KEY", "SWANLAB_API_KEY") else env[name]
                fixed += f" {name}={shown}"
        out = [f"{p}child environment ({who}; {len(got)} names, values not shown):" + "".join(" " + n for n in got)]
        if fixed:
            out.append(f"{p}set by the entrypoint:{fixed}")
        if built:
            out.append(
                f"{p}built by the launch (fresh 0700 folders, relative ones in the working directory; the "
                f"environment's values never used):{built}"
            )
        if self.image_path:
            out.append(f"{p}PATH: the image's (lib/image-path), not the environment's: {self.image_path}")
        if self.code_env is not None:
            names = " ".join(n if v is not None else f"{n}(unset)" for n, v in self.code_env.items())
            out.append(f"{p}code locations: the image's (lib/{IMAGE_CODE_FILE}), not the environment's: {names}")
        if self.cls.requested:
            out.append(f"{p}passed because VLGRPO_PASS_ENV names them: {_sorted(self.cls.requested)}")
        if self.cls.unset_named:
            out.append(f"{p}named in VLGRPO_PASS_ENV but not set: {_sorted(self.cls.unset_named)}")
        out.append(
            f"{p}dropped from the environment ({len(self.cls.dropped)} names, values not shown): "
            f"{_sorted(self.cls.dropped)}"
        )
        return out

    def wandb_plan(self, p: str) -> list[str]:
        """The plan's W&B line when the logger list has wandb or a W&B server or entity is given: the server and
        entity the children get (typed: an http(s) URL without credentials, a plain name), and the mode."""
        env = self.env
        if not ("wandb" in self.st.values.get("LOGGER", "") or env.get("WANDB_BASE_URL") or env.get("WANDB_ENTITY")):
            return []
        server = env.get("WANDB_BASE_URL") or "https://api.wandb.ai (the client's default)"
        if not env.get("WANDB_BASE_URL") and "WANDB_BASE_URL" in self.cls.dropped:
            server = (
                "https://api.wandb.ai (the client's default; WANDB_BASE_URL is set but dropped: name it in "
                "VLGRPO_PASS_ENV)"
            )
        entity = env.get("WANDB_ENTITY") or "(the key's default entity)"
        mode = settings.show(env["WANDB_MODE"]) if env.get("WANDB_MODE") else "online (the client's default)"
        return [f"{p}W&B: server {server}, entity {entity}, mode {mode}{_route(env, server)}"]

    # ---- the whole launch ---------------------------------------------------------------------------------------

    def show_help(self, text: str) -> int:
        """Print the --help ``text`` (Markdown; plain text on a terminal, ``COLUMNS`` wide); exit status 0."""
        sys.stdout.write(helptext.plain(text, self.held.get("COLUMNS", "")) if os.isatty(1) else text)
        sys.stdout.flush()
        return 0

    def run(self, words: list[str]) -> int:
        if self.words(words):
            return self.show_help(helptext.markdown(self.owner))
        self.children.install()
        self.read_settings()
        self.build_environment()
        self.flush()
        self.enter_workdir()
        self.build_private()
        self.image_env()
        self.env["RAY_ADDRESS"] = self.st.values.get("RAY_ADDRESS") or "local"
        self.detect_node()
        self.flush()
        self.recipe()
        self.trackers()
        self.check_argv(self.overrides())
        self.flush()
        self.cluster()
        self.preflight()
        if self.dry_run:
            sys.stdout.write(self.plan())
            sys.stdout.flush()
            self.children.cleanup()
            return 0
        self.children.say(f"launching {self.program[2]} ({self.st.topology}; preflight {self.preflight_result})")
        # the signals are verl's from here; SIGPIPE and SIGXFSZ too, which Python ignores for itself
        default_signals()
        env = self.child_env()
        try:
            os.execvpe(self.argv[0], self.argv, env)
        except OSError as exc:
            raise self.fail(f"cannot start {self.argv[0]}: {exc.strerror or exc}") from None
        return EXIT_FAILURE  # not reached


class DoctorLaunch(Launch):
    """``doctor.sh``: ``python3 -m vlgrpo doctor`` behind the recipes' environment filter (the compose doctor
    services get the recipes' env file). The names of the ``VLGRPO_*`` variables are checked (the doctor reads its
    own settings and checks them itself; the recipes' other settings are accepted and dropped); the children's
    environment is built and checked as for a recipe (``VLGRPO_PASS_ENV`` is not the doctor's: pass-on-request rows
    such as PYTHONPATH never reach it; RAY_ADDRESS is refused: the doctor's Ray check would join that cluster); the
    image's CANN file is sourced; the words must be the doctor's own flags (its parser, :func:`vlgrpo.doctor.parser`,
    judges them here, before anything runs); then ``execve`` of the doctor."""

    def run(self, words: list[str]) -> int:
        from vlgrpo import doctor

        try:
            doctor.parser(prog=self.prog).parse_args(words)
        except SystemExit as end:  # --help printed (0), or a word the doctor does not declare (2, usage printed)
            return int(end.code or 0)
        names = setting_names(self.entries)
        self.problems += settings.unknown_vars(self.owner, names)
        self.problems += settings.interpreter_problems(self.hooks.lib, self.held.get("VLGRPO_PYTHON", ""))
        self.build_environment()
        self.flush()
        self.image_env()
        self.flush()
        default_signals()
        argv = ["python3", "-P", "-s", "-m", "vlgrpo", "doctor", *words]
        try:
            os.execvpe(argv[0], argv, self.child_env())
        except OSError as exc:
            raise self.fail(f"cannot start {argv[0]}: {exc.strerror or exc}") from None
        return EXIT_FAILURE  # not reached


def _count(text: str) -> bool:
    return 1 <= len(text) <= 6 and text.isascii() and text.isdigit()


def _sorted(words: list[str]) -> str:
    """The words sorted in the C locale, on one line."""
    return " ".join(sorted(words, key=lambda w: w.encode("utf-8", "surrogateescape")))


USAGE = (
    "usage: python3 -I -m vlgrpo.launch entry fully-async-grpo|veomni-grpo|doctor|ray-node "
    "[--lib DIR] (--environ-fd N | --environ-file FILE | --environ-unreadable PATH) [test hooks] -- [WORD...]"
)


def main(args: list[str], kinds: "dict[str, type[Launch]] | None" = None) -> int:
    """``entry RECIPE OPTIONS -- WORDS`` (see the module docstring). ``kinds``: the launch class of an owner that is
    not defined here (``node``: :class:`vlgrpo.launch.raynode.RayNodeLaunch`, passed in by ``__main__`` so this
    module does not import the one built on it)."""
    if not args or args[0] not in RECIPES:
        print(USAGE, file=sys.stderr)
        return 2
    owner, rest = RECIPES[args[0]], args[1:]
    hooks, data, path, readable, markers = Hooks(), b"", "", True, None
    while rest and rest[0] != "--":
        opt = rest[0]
        if len(rest) < 2:
            print(USAGE, file=sys.stderr)
            return 2
        val, rest = rest[1], rest[2:]
        if opt == "--environ-fd" and val.isdigit():
            with open(int(val), "rb", closefd=True) as fh:
                data = fh.read()
            path = "/proc/self/environ"
        elif opt == "--environ-file":
            path = val
            try:
                with open(val, "rb") as fh:
                    data = fh.read()
            except OSError:
                readable = False
        elif opt == "--lib":
            hooks.lib = os.path.abspath(val)
            # the entrypoints' lib/: the image's copy of the registry and the recipe files there, else the
            # checkout's (lib/../../python/src/vlgrpo), else this package's
            for cand in (
                os.path.join(hooks.lib, "environment.tsv"),
                os.path.join(hooks.lib, "../../python/src/vlgrpo/environment.tsv"),
            ):
                if os.path.isfile(cand):
                    # absolute: the launch leaves the caller's folder for its private one before it reads recipes
                    environment.PATH = os.path.normpath(cand)
                    break
        elif opt == "--environ-unreadable":
            path, readable = val, False
        elif opt == "--dev-dir":
            hooks.dev_dir = val
        elif opt == "--driver-root":
            hooks.driver_root = val
        elif opt == "--mountinfo":
            hooks.mountinfo = val
        elif opt == "--container-marker":
            markers = (markers or []) + ([val] if val else [])
        else:
            print(USAGE, file=sys.stderr)
            return 2
    if markers is not None:
        hooks.markers = markers
    if not path:
        print(USAGE, file=sys.stderr)
        return 2
    kind: type[Launch] = Launch
    if owner == "doctor":
        kind = DoctorLaunch
    elif kinds and owner in kinds:
        kind = kinds[owner]
    elif owner == "node":
        print(f"{USAGE} (the ray-node launch is started by python3 -I -m vlgrpo.launch)", file=sys.stderr)
        return 2
    launch = kind(owner, read_environ(data), path, readable, hooks)
    try:
        return launch.run(rest[1:])
    except Exit as end:
        launch.children.cleanup()
        return end.code
    except (OSError, ValueError) as exc:
        launch.children.cleanup()
        print(f"{launch.prog}: internal error: {exc} (this is a bug in the entrypoint)", file=sys.stderr)
        return EXIT_FAILURE
