"""Static check of the images' pinning (run by scripts/lint.sh; negative cases in test_check_pins.py).

Fails (exit 2, one line per finding) on:
  - a FROM that is not a stage of the same Dockerfile or ``${ARG}`` whose default is a pinned image
    (``name:tag`` with a tag other than ``latest``, optionally ``@sha256:<64 hex>``);
  - a ``pip install`` / ``pip download`` that is not hash-checked from a lock (``--require-hashes -r``) or a
    local artifact built in the same build; ``--upgrade``/``-U``, ``git+``/VCS URLs, ``--pre``, a
    ``git clone`` or ``--branch``, a cleared ``PIP_CONSTRAINT``, ``--no-constraints``; ``apt-get install``
    in an image Dockerfile (only the CI stand-in installs Debian's python3);
  - a lock line without ``==`` and a sha256 hash;
  - pins.env disagreeing with the requirement inputs, the Dockerfiles' ARG defaults or base-digests.lock;
    a digest that is neither ``unresolved`` nor ``sha256:<64 hex>``.
Usage: ``python3 tests/docker/check_pins.py [REPO_ROOT]``. Standard library only.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PINNED_IMAGE = re.compile(r"^[a-z0-9./_-]+(:[0-9A-Za-z._-]+)(@sha256:[0-9a-f]{64})?$")
DIGEST = re.compile(r"^(unresolved|sha256:[0-9a-f]{64})$")


def instructions(text: str) -> list[tuple[int, str]]:
    """Dockerfile instructions with continuation lines joined: [(line number, text)]. Comments dropped."""
    out, buf, start = [], "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue
        if not buf:
            start = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        out.append((start, buf + line))
        buf = ""
    if buf:
        out.append((start, buf))
    return out


def check_dockerfile(path: Path, image_dockerfile: bool) -> list[str]:
    findings = []
    text = path.read_text()
    instrs = instructions(text)
    global_args: dict[str, str] = {}
    stages: list[str] = []
    seen_from = False
    for n, ins in instrs:
        word = ins.split(None, 1)[0].upper()
        rest = ins.split(None, 1)[1] if " " in ins else ""
        where = f"{path}:{n}"
        if word == "ARG" and not seen_from:
            name, _, default = rest.partition("=")
            global_args[name.strip()] = default.strip().strip('"')
        if word == "FROM":
            seen_from = True
            parts = rest.split()
            parts = [p for p in parts if not p.startswith("--platform")]
            ref = parts[0]
            if len(parts) >= 3 and parts[1].upper() == "AS":
                stage = parts[2]
            else:
                stage = None
            m = re.fullmatch(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", ref)
            m_stage = re.fullmatch(r"([a-z0-9-]*)\$\{([A-Za-z_][A-Za-z0-9_]*)\}", ref)
            if ref in stages:
                pass
            elif m:
                default = global_args.get(m.group(1))
                if default is None:
                    findings.append(f"{where}: FROM {ref}: {m.group(1)} is not a global ARG declared before FROM")
                elif not PINNED_IMAGE.match(default) or default.split("@")[0].endswith(":latest"):
                    findings.append(
                        f"{where}: FROM {ref}: ARG {m.group(1)} default {default!r} is not a pinned "
                        "image (name:tag[@sha256:...], tag not latest)"
                    )
            elif m_stage and m_stage.group(2) in global_args:
                options = [s for s in stages if s.startswith(m_stage.group(1))]
                if f"{m_stage.group(1)}{global_args[m_stage.group(2)]}" not in options:
                    findings.append(f"{where}: FROM {ref}: default does not name a stage of this Dockerfile")
            else:
                findings.append(f"{where}: FROM {ref}: base must be ${{ARG}} with a pinned default or an earlier stage")
            if stage:
                stages.append(stage)
        if word == "RUN":
            findings += check_run(where, rest, image_dockerfile)
    return findings


def check_run(where: str, cmd: str, image_dockerfile: bool) -> list[str]:
    findings = []
    # split into simple commands on ; && || | and newlines (good enough for RUN lines)
    for part in re.split(r";|&&|\|\||\|(?!\|)", cmd):
        words = part.split()
        if not words:
            continue
        joined = " ".join(words)
        if re.search(
            r"(^|\s)(-U|--upgrade|--upgrade-strategy|--force-reinstall|--pre|--no-constraints)(\s|=|$)", joined
        ) and re.search(r"\b(pip|uv|apt-get|apt)\b", joined):
            findings.append(f"{where}: forbidden option in: {joined}")
        if re.search(r"\bgit\+|\bhg\+|\bsvn\+|\bbzr\+", joined):
            findings.append(f"{where}: VCS requirement in: {joined}")
        if re.search(r"\bgit\s+clone\b", joined) or re.search(r"\bgit\b.*\s--branch\b", joined):
            findings.append(f"{where}: git clone/--branch (fetch a commit id instead): {joined}")
        if re.search(r"PIP_CONSTRAINT=(\s|$|''|\"\")", joined + " "):
            findings.append(f"{where}: clears PIP_CONSTRAINT: {joined}")
        m = re.search(r"\bpip3?\s+(install|download)\b(.*)", joined)
        if m:
            args = m.group(2).split()
            hashed = "--require-hashes" in args and ("-r" in args or any(a.startswith("--requirement") for a in args))
            local = [a for a in args if not a.startswith("-") and (a.startswith("/") or a.startswith("./"))]
            positional = [
                a
                for i, a in enumerate(args)
                if not a.startswith("-")
                and not (
                    i
                    and args[i - 1]
                    in (
                        "-r",
                        "-c",
                        "-d",
                        "-w",
                        "--requirement",
                        "--constraint",
                        "--dest",
                        "--wheel-dir",
                        "--target",
                        "--prefix",
                    )
                )
            ]
            if not hashed and not (positional and positional == local):
                findings.append(
                    f"{where}: pip {m.group(1)} neither from a hash-checked lock (--require-hashes -r) "
                    f"nor of a local build artifact: {joined}"
                )
            if hashed and positional:
                findings.append(f"{where}: pip {m.group(1)} mixes a lock with unpinned names {positional}: {joined}")
        if image_dockerfile and re.search(r"\bapt(-get)?\s+install\b", joined):
            findings.append(
                f"{where}: apt install in an image Dockerfile (the vendor base provides the system): {joined}"
            )
    return findings


def check_lock(path: Path) -> list[str]:
    findings = []
    text = path.read_text()
    entries = re.split(r"\n(?=[^\s#])", text)
    for entry in entries:
        first = entry.strip().splitlines()[0] if entry.strip() else ""
        if not first or first.startswith("#"):
            continue
        if first.startswith("-"):
            findings.append(f"{path}: option line {first!r} in a lock")
            continue
        if not re.match(r"^[A-Za-z0-9._-]+(\[[^\]]*\])?(==[^\s\\;]+| @ file:///\S+)", first):
            findings.append(f"{path}: {first!r} is not pinned with ==")
        if "--hash=sha256:" not in entry:
            findings.append(f"{path}: {first.split()[0]} has no sha256 hash")
    return findings


def read_env(path: Path) -> dict[str, str]:
    return dict(l.split("=", 1) for l in path.read_text().splitlines() if l and not l.startswith("#") and "=" in l)


def check_consistency(root: Path) -> list[str]:
    findings = []
    pins = read_env(root / "docker/pins.env")
    common = (root / "docker/requirements/common.in").read_text()
    for pkg, key in (
        ("transformers", "TRANSFORMERS_VERSION"),
        ("ray[default]", "RAY_VERSION"),
        ("hydra-core", "HYDRA_VERSION"),
        ("omegaconf", "OMEGACONF_VERSION"),
        ("tensordict", "TENSORDICT_VERSION"),
    ):
        if f"\n{pkg}=={pins[key]}\n" not in f"\n{common}":
            findings.append(f"docker/requirements/common.in: {pkg}=={pins[key]} (pins.env {key}) missing")
    if f"veomni=={pins['VEOMNI_VERSION']}" not in (root / "docker/requirements/nodeps.in").read_text():
        findings.append("docker/requirements/nodeps.in disagrees with VEOMNI_VERSION")
    if f"verl=={pins['VERL_VERSION']}" not in (root / "docker/requirements/verl-pypi.in").read_text():
        findings.append("docker/requirements/verl-pypi.in disagrees with VERL_VERSION")
    for lock_key in ("GPU_LOCK", "NPU_LOCK", "CI_LOCK"):
        lock = (root / pins[lock_key]).read_text()
        for pkg, key in (("transformers", "TRANSFORMERS_VERSION"), ("ray", "RAY_VERSION")):
            if not re.search(rf"^{pkg}(\[[^\]]*\])?=={re.escape(pins[key])} ", lock, re.M):
                findings.append(f"{pins[lock_key]}: {pkg} is not at {pins[key]}: run make lock")
    for df, base_key in (("docker/npu.Dockerfile", "NPU_A2_BASE_IMAGE"), ("docker/gpu.Dockerfile", "GPU_BASE_IMAGE")):
        text = (root / df).read_text()
        for key, want in (
            ("BASE_IMAGE", pins[base_key]),
            ("VERL_COMMIT", pins["VERL_COMMIT"]),
            ("VERL_FIX_COMMITS", pins["VERL_FIX_COMMITS"]),
            ("VERL_REPO", pins["VERL_REPO"]),
        ):
            for value in re.findall(rf"^ARG {key}=(\S+)", text, re.M):
                if value != want:
                    findings.append(f"{df}: ARG {key}={value} disagrees with pins.env ({want})")
    images = {"gpu": pins["GPU_BASE_IMAGE"], "npu-a2": pins["NPU_A2_BASE_IMAGE"], "npu-a3": pins["NPU_A3_BASE_IMAGE"]}
    for line in (root / "docker/base-digests.lock").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        platform, image, digest = line.split("\t")
        if images.get(platform) != image:
            findings.append(
                f"docker/base-digests.lock: {platform} {image} disagrees with pins.env ({images.get(platform)})"
            )
        if not DIGEST.match(digest):
            findings.append(
                f"docker/base-digests.lock: {platform} digest {digest!r} is neither unresolved nor sha256:<64 hex>"
            )
    for line in (root / "docker/artifacts.lock").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, url, sha = line.split("\t")
        if not re.fullmatch(r"unresolved|[0-9a-f]{64}", sha):
            findings.append(f"docker/artifacts.lock: {name} sha256 {sha!r} is neither unresolved nor 64 hex")
        if name == "flash-attn" and url != pins["GPU_FLASH_ATTN_WHEEL"]:
            findings.append("docker/artifacts.lock: flash-attn URL disagrees with pins.env GPU_FLASH_ATTN_WHEEL")
    return findings


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else Path(__file__).resolve().parents[2])
    findings = []
    dockerfiles = sorted(root.glob("docker/*.Dockerfile")) + [root / "docker/ci-base/Dockerfile"]
    for df in dockerfiles:
        findings += check_dockerfile(df, image_dockerfile=df.name != "Dockerfile")
    for lock in sorted((root / "docker/locks").glob("*.txt")):
        findings += check_lock(lock)
    findings += check_consistency(root)
    for f in findings:
        print(f"check_pins: {f}", file=sys.stderr)
    if findings:
        return 2
    print(
        f"check_pins: {len(dockerfiles)} Dockerfiles, {len(list((root / 'docker/locks').glob('*.txt')))} locks: "
        "every base ARG-controlled and pinned, every install hash-pinned, pins consistent"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
