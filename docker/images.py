"""Image tags, build commands and generated docs of the vlgrpo images, computed from docker/pins.env.

One implementation for the Makefile, the README tables and compose.yaml's image names, so a tag is never
typed by hand::

    python3 docker/images.py tag npu-a2              -> 0.1.0-npu-a2-cann8.5.0-torch2.8.0-vllm0.13.0-verl0.8.0
    python3 docker/images.py build-cmd npu-a3 [--repo R] [--revision SHA] [--source URL] [--ca FILE]
                                                     -> the exact `docker build` command (every pin a build arg)
    python3 docker/images.py base npu-a2             -> tag@digest once docker/base-digests.lock has it, else tag
    python3 docker/images.py build npu-a2 [--repo R] [--revision SHA] [--source URL] [--ca FILE]
            [--base-lock FILE] [--artifacts-lock FILE] [--dry-run] [-- DOCKER-BUILD-OPTION...]
                                                     -> `make image-*`: resolve what the locks leave "unresolved"
                                                        (the base's digest from its registry, flash-attn's sha256
                                                        from its download), then run the build with those values
    python3 docker/images.py sync                    -> rewrite README's versions block and compose.yaml's image
                                                        defaults and build: sections (the env example:
                                                        scripts/gen-docs)
    python3 docker/images.py check                   -> exit 2 if any of them is stale (lint runs it)

Platforms: gpu, npu-a2, npu-a3. Tag = <project version>-<platform>-<cann|cuda><ver>-torch<ver>-vllm<ver>-verl<ver>.
Standard library only (runs before the venv exists).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pin_digests  # docker/pin_digests.py beside this file: the registry and download reads

ROOT = Path(__file__).resolve().parent.parent
PLATFORMS = ("gpu", "npu-a2", "npu-a3")


def pins() -> dict[str, str]:
    out = {}
    for line in (ROOT / "docker/pins.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def project_version() -> str:
    m = re.search(r'^version\s*=\s*"([^"]+)"', (ROOT / "python/pyproject.toml").read_text(), re.M)
    if not m:
        raise SystemExit("images: no version in python/pyproject.toml")
    return m.group(1)


def tag(platform: str, p: dict[str, str] | None = None) -> str:
    p = p or pins()
    if platform == "gpu":
        accel = f"cuda{p['GPU_CUDA']}-torch{p['GPU_TORCH']}-vllm{p['GPU_VLLM']}"
    elif platform in ("npu-a2", "npu-a3"):
        accel = f"cann{p['NPU_CANN']}-torch{p['NPU_TORCH']}-vllm{p['NPU_VLLM']}"
    else:
        raise SystemExit(f"images: unknown platform {platform!r}; use one of {', '.join(PLATFORMS)}")
    return f"{project_version()}-{platform}-{accel}-verl{p['VERL_VERSION']}"


BASE_LOCK = ROOT / "docker/base-digests.lock"
ARTIFACTS_LOCK = ROOT / "docker/artifacts.lock"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _lock_line(lock: Path, name: str) -> tuple[str, str] | None:
    for line in lock.read_text().splitlines():
        fields = line.split("\t")
        if not line.startswith("#") and len(fields) == 3 and fields[0] == name:
            return fields[1], fields[2]
    return None


def base_ref(platform: str, lock: Path = BASE_LOCK, digest: str | None = None) -> tuple[str, str]:
    """(FROM reference, digest or 'unresolved') for ``platform`` from ``lock`` (docker/base-digests.lock's
    format). ``digest``, when given, is used in place of an unresolved lock value (resolved at build time)."""
    line = _lock_line(lock, platform)
    if line is None:
        raise SystemExit(f"images: {platform} missing from {lock}")
    image, pinned = line
    if not _DIGEST.fullmatch(pinned) and digest is not None:
        pinned = digest
    if _DIGEST.fullmatch(pinned):
        return f"{image}@{pinned}", pinned
    return image, "unresolved"


def artifact(name: str, lock: Path = ARTIFACTS_LOCK) -> str:
    line = _lock_line(lock, name)
    return line[1] if line else "unresolved"


def artifact_url(name: str, lock: Path = ARTIFACTS_LOCK) -> str | None:
    line = _lock_line(lock, name)
    return line[0] if line else None


def build_args(
    platform: str,
    revision: str,
    source: str,
    base_lock: Path = BASE_LOCK,
    artifacts_lock: Path = ARTIFACTS_LOCK,
    resolved: dict[str, str] | None = None,
) -> list[tuple[str, str]]:
    """Every build arg of ``platform``'s image. ``resolved`` ({"base": digest, "flash-attn": sha256}) holds what
    :func:`resolve_at_build` found for values the locks leave unresolved; its keys become RESOLVED_AT_BUILD."""
    p = pins()
    resolved = resolved or {}
    base, digest = base_ref(platform, base_lock, resolved.get("base"))
    args = [
        ("BASE_IMAGE", base),
        ("BASE_DIGEST", digest),
        ("RESOLVED_AT_BUILD", " ".join(sorted(resolved))),
        ("PLATFORM", platform),
        ("VERL_SOURCE", "git"),
        ("VERL_REPO", p["VERL_REPO"]),
        ("VERL_COMMIT", p["VERL_COMMIT"]),
        ("VERL_FIX_COMMITS", p["VERL_FIX_COMMITS"]),
        ("VLGRPO_VERSION", project_version()),
        ("VCS_REF", revision),
        ("SOURCE_URL", source),
    ]
    if platform == "gpu":
        args += [
            ("LOCK", p["GPU_LOCK"]),
            ("BASE_CONSTRAINTS", "gpu-base.txt"),
            ("FLASH_ATTN_WHEEL", artifact_url("flash-attn", artifacts_lock) or p["GPU_FLASH_ATTN_WHEEL"]),
            ("FLASH_ATTN_SHA256", resolved.get("flash-attn") or artifact("flash-attn", artifacts_lock)),
        ]
    else:
        args += [("LOCK", p["NPU_LOCK"]), ("BASE_CONSTRAINTS", "npu-base.txt")]
    return args


def build_cmd(
    platform: str,
    repo: str = "vlgrpo",
    revision: str = "unknown",
    source: str = "unknown",
    ca: str = "/etc/ssl/certs/ca-certificates.crt",
    base_lock: Path = BASE_LOCK,
    artifacts_lock: Path = ARTIFACTS_LOCK,
    resolved: dict[str, str] | None = None,
    extra: list[str] | None = None,
) -> list[str]:
    """The ``docker build`` command of ``platform``'s image; ``extra`` options go last, before the context, so a
    repeated ``--platform`` or ``--build-arg KEY=`` there wins (docker keeps the last)."""
    p = pins()
    dockerfile = "docker/gpu.Dockerfile" if platform == "gpu" else "docker/npu.Dockerfile"
    cmd = [
        "docker",
        "build",
        "--platform",
        p["GPU_PLATFORM"] if platform == "gpu" else p["NPU_PLATFORM"],
        "-f",
        dockerfile,
        "--target",
        "smoke",
        "--secret",
        f"id=ca,src={ca}",
    ]
    for key, value in build_args(platform, revision, source, base_lock, artifacts_lock, resolved):
        cmd += ["--build-arg", f"{key}={value}"]
    cmd += ["-t", f"{repo}:{tag(platform, p)}", *(extra or []), "."]
    return cmd


class Unresolvable(Exception):
    """A value the locks leave unresolved could not be read at build time; the message names it and the fix."""


def resolve_at_build(
    platform: str, base_lock: Path = BASE_LOCK, artifacts_lock: Path = ARTIFACTS_LOCK
) -> dict[str, str]:
    """Read from the network what ``base_lock`` / ``artifacts_lock`` leave "unresolved" for ``platform``: the base
    tag's manifest digest from its registry (``pin_digests.digest_of``: Registry HTTP API v2, plain HTTP on
    loopback only) and, for gpu, flash-attn's sha256 from its download (``pin_digests.sha256_of``). The values are
    the ones ``make pin-digests`` would write. Verification is the build's: the engine pulls the base by that
    digest and checks it, and pip installs the wheel with ``--require-hashes`` against that sha256.

    Returns {"base": "sha256:<64 hex>", "flash-attn": "<64 hex>"}, only the keys that were unresolved.
    Raises :class:`Unresolvable` naming the value, the address asked and the error."""
    out: dict[str, str] = {}
    image, pinned = _lock_line(base_lock, platform) or (None, None)
    if image is None:
        raise Unresolvable(f"{platform} is missing from {base_lock}")
    if not _DIGEST.fullmatch(pinned or ""):
        try:
            out["base"] = pin_digests.digest_of(image)
        except Exception as exc:
            local = engine_repo_digest(image)
            if local is None:
                raise Unresolvable(
                    f"the base {image} has no digest in {base_lock}, its registry did not give one "
                    f"({type(exc).__name__}: {exc}) and the local engine holds no pulled copy of it: build where "
                    f"the registry is reachable (HTTPS_PROXY and SSL_CERT_FILE are honoured), `docker pull {image}` "
                    f"first, or pin it there: make pin-digests"
                ) from exc
            print(
                f"images: the registry of {image} is not reachable ({type(exc).__name__}); using the digest the local "
                f"engine recorded when it pulled the tag: {local}",
                file=sys.stderr,
            )
            out["base"] = local
    if platform == "gpu":
        url, sha = _lock_line(artifacts_lock, "flash-attn") or (None, None)
        if url and not _SHA256.fullmatch(sha or ""):
            try:
                out["flash-attn"] = pin_digests.sha256_of(url)
            except Exception as exc:
                raise Unresolvable(
                    f"flash-attn's sha256 is unresolved in {artifacts_lock} and {url} could not be downloaded "
                    f"({type(exc).__name__}: {exc}): build where it is reachable, or pin it first: make pin-digests"
                ) from exc
    return out


def engine_repo_digest(image: str) -> str | None:
    """The manifest digest the local Docker engine recorded for ``image`` (``repo:tag``) when it pulled or pushed it
    (``docker image inspect``'s RepoDigests entry of the same repository), or None: no engine, no such image, or
    an image that was built or loaded here and never came from that registry."""
    repo = image.rpartition(":")[0] if ":" in image.rsplit("/", 1)[-1] else image
    try:
        done = subprocess.run(
            ["docker", "image", "inspect", "--format", "{{json .RepoDigests}}", image],
            capture_output=True,
            text=True,
            timeout=60,
        )
        entries = json.loads(done.stdout) if done.returncode == 0 else []
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    for entry in entries or []:
        name, _, digest = entry.partition("@")
        if name == repo and _DIGEST.fullmatch(digest):
            return digest
    return None


def build(argv: list[str]) -> int:
    """``images.py build``: what ``make image-gpu`` / ``make image-npu`` run (see the module docstring)."""
    extra: list[str] = []
    if "--" in argv:
        argv, extra = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    ap = argparse.ArgumentParser(prog="images.py build")
    ap.add_argument("platform", choices=PLATFORMS)
    ap.add_argument("--repo", default="vlgrpo")
    ap.add_argument("--revision", default="unknown")
    ap.add_argument("--source", default="unknown")
    ap.add_argument("--ca", default="/etc/ssl/certs/ca-certificates.crt")
    ap.add_argument("--base-lock", type=Path, default=BASE_LOCK)
    ap.add_argument("--artifacts-lock", type=Path, default=ARTIFACTS_LOCK)
    ap.add_argument("--dry-run", action="store_true", help="print the command; read nothing from the network")
    a = ap.parse_args(argv)
    target = "image-gpu" if a.platform == "gpu" else f"image-npu NPU={a.platform[4:]}"
    resolved: dict[str, str] = {}
    if a.dry_run:
        image, pinned = _lock_line(a.base_lock, a.platform) or ("?", "")
        if not _DIGEST.fullmatch(pinned):
            print(f"{target}: DRY_RUN: the base {image} is unresolved; a build reads its digest first", file=sys.stderr)
    else:
        try:
            resolved = resolve_at_build(a.platform, a.base_lock, a.artifacts_lock)
        except Unresolvable as exc:
            print(f"{target}: {exc}", file=sys.stderr)
            return 1
    cmd = build_cmd(a.platform, a.repo, a.revision, a.source, a.ca, a.base_lock, a.artifacts_lock, resolved, extra)
    for key, value in sorted(resolved.items()):
        what = (
            f"the base {_lock_line(a.base_lock, a.platform)[0]}"  # type: ignore[index]
            if key == "base"
            else f"flash-attn ({artifact_url('flash-attn', a.artifacts_lock)})"
        )
        print(
            f"{target}: resolved at build time: {what} -> {value}; the image records it (labels "
            f"org.opencontainers.image.base.digest / io.vlgrpo.resolved-at-build, /opt/vlgrpo/build-manifest.json). "
            f"To build from the same {('digest' if key == 'base' else 'sha256')} every time: make pin-digests "
            f"(writes {a.base_lock if key == 'base' else a.artifacts_lock}), then commit it",
            file=sys.stderr,
        )
    if a.dry_run:
        print("DOCKER_BUILDKIT=1 " + shlex.join(cmd))
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(cmd[0], cmd, {**os.environ, "DOCKER_BUILDKIT": "1"})
    return 127


# ---- generated docs ------------------------------------------------------------------------------------
def versions_block() -> str:
    p = pins()
    rows = [
        ("base image", p["GPU_BASE_IMAGE"], f"{p['NPU_A2_BASE_IMAGE']} (A2), {p['NPU_A3_BASE_IMAGE']} (A3)"),
        ("Python", p["GPU_PYTHON"], p["NPU_PYTHON"]),
        ("CUDA / CANN", f"CUDA {p['GPU_CUDA']}", f"CANN {p['NPU_CANN']} (host HDK {p['NPU_HDK']})"),
        ("torch", p["GPU_TORCH"], f"{p['NPU_TORCH']} + torch-npu {p['NPU_TORCH_NPU']}"),
        ("vLLM", p["GPU_VLLM"], f"{p['NPU_VLLM']} + vllm-ascend {p['NPU_VLLM_ASCEND']}"),
        ("triton", "(base)", f"triton-ascend {p['NPU_TRITON_ASCEND']}"),
        (
            "verl",
            f"{p['VERL_TAG']} ({p['VERL_COMMIT'][:9]}) + {' '.join(c[:9] for c in p['VERL_FIX_COMMITS'].split())}, --no-deps",
            "same",
        ),
        ("veomni", f"{p['VEOMNI_VERSION']}, --no-deps", "same"),
        ("transformers", p["TRANSFORMERS_VERSION"], "same"),
        ("ray", f"ray[default,cgraph]=={p['RAY_VERSION']}", f"ray[default]=={p['RAY_VERSION']}"),
        ("hydra-core / omegaconf", f"{p['HYDRA_VERSION']} / {p['OMEGACONF_VERSION']}", "same"),
        ("tensordict", p["TENSORDICT_VERSION"], "same"),
        ("flash-attn", f"{p['GPU_FLASH_ATTN']} (release wheel, sha256 in docker/artifacts.lock)", "—"),
        ("quack-kernels", p["GPU_QUACK"], "—"),
        ("everything else", f"`{p['GPU_LOCK']}` (hashes)", f"`{p['NPU_LOCK']}` (hashes)"),
    ]
    out = ["| component | NVIDIA image | Ascend image |", "|---|---|---|"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    out += ["", "| hardware | image tag (`make image-…`) | base digest |", "|---|---|---|"]
    hw = {
        "gpu": (
            "NVIDIA Hopper/Ampere (SM80+; quack kernels SM90+), driver R575+ (data-center GPUs: R525.60.13+ on the image's CUDA forward-compatibility libraries)",
            "make image-gpu",
        ),
        "npu-a2": ("Ascend Atlas A2 (910B), 8 NPUs per node", "make image-npu NPU=a2"),
        "npu-a3": ("Ascend Atlas A3, 16 NPUs per node", "make image-npu NPU=a3"),
    }
    for platform in PLATFORMS:
        _, digest = base_ref(platform)
        out.append(f"| {hw[platform][0]} | `vlgrpo:{tag(platform, p)}` (`{hw[platform][1]}`) | {digest} |")
    out += [
        "",
        "Generated by `make docs` from `docker/pins.env`, `docker/base-digests.lock` and the locks; "
        '"unresolved" digests are filled in by `make pin-digests` on a machine that reaches the registries.',
    ]
    return "\n".join(out)


def replace_block(text: str, name: str, body: str) -> str:
    begin, end = f"<!-- BEGIN GENERATED: {name} -->", f"<!-- END GENERATED: {name} -->"
    if begin not in text or end not in text:
        raise SystemExit(f"images: README.md lacks the {begin} / {end} markers")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}\n{end}{tail}"


#: build args compose.yaml takes from the caller's environment (the Makefile computes them: git, SOURCE_URL)
COMPOSE_ARG_VARS = {"VCS_REF": "${VCS_REF:-unknown}", "SOURCE_URL": "${SOURCE_URL:-unknown}"}


def compose_build(platform: str, indent: str = "  ") -> str:
    """compose.yaml's ``build:`` section of ``platform``'s services: the build :func:`build_cmd` gives ``make
    image-*`` (Dockerfile, target, platform, the CA secret, every build arg), but for VCS_REF and SOURCE_URL, which
    compose takes from the environment (``VCS_REF=$(git rev-parse HEAD) docker compose build ...``)."""
    p = pins()
    cmd = build_cmd(platform)
    lines = [
        "build:",
        "  context: .",
        f"  dockerfile: {cmd[cmd.index('-f') + 1]}",
        f"  target: {cmd[cmd.index('--target') + 1]}",
        f"  platforms: [{p['GPU_PLATFORM'] if platform == 'gpu' else p['NPU_PLATFORM']}]",
        "  secrets: [ca]",
        "  args:",
    ]
    for key, value in build_args(platform, "unknown", "unknown"):
        lines.append(f"    {key}: {json.dumps(COMPOSE_ARG_VARS.get(key, value))}")
    return "\n".join(indent + line for line in lines)


def compose_text(text: str) -> str:
    p = pins()
    for platform, var in (("gpu", "GPU_IMAGE"), ("npu-a2", "NPU_A2_IMAGE"), ("npu-a3", "NPU_A3_IMAGE")):
        text = re.sub(r"\$\{%s:-[^}]*\}" % var, "${%s:-vlgrpo:%s}" % (var, tag(platform, p)), text)
        begin = f"  # BEGIN GENERATED: build {platform} (docker/images.py sync: the build of `make image-*`)"
        end = f"  # END GENERATED: build {platform}"
        if begin in text and end in text:
            head, rest = text.split(begin, 1)
            _, tail = rest.split(end, 1)
            text = f"{head}{begin}\n{compose_build(platform)}\n{end}{tail}"
    return text


def sync(write: bool) -> int:
    stale = []
    readme = ROOT / "README.md"
    targets = [(readme, replace_block(readme.read_text(), "versions", versions_block()))]
    compose = ROOT / "compose.yaml"
    if compose.exists():
        targets.append((compose, compose_text(compose.read_text())))
    for path, new in targets:
        old = path.read_text() if path.exists() else ""
        if old != new:
            stale.append(str(path.relative_to(ROOT)))
            if write:
                path.write_text(new)
    if write:
        print("images: " + (f"updated {', '.join(stale)}" if stale else "up to date"))
        return 0
    if stale:
        print(f"images: stale generated text in {', '.join(stale)}: run `make docs`", file=sys.stderr)
        return 2
    print("images: README versions block and compose image names are up to date")
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    cmd, rest = argv[0], argv[1:]
    opts = dict(zip(rest[1::2], rest[2::2])) if len(rest) > 1 else {}
    if cmd == "tag":
        print(tag(rest[0]))
    elif cmd == "base":
        print(base_ref(rest[0])[0])
    elif cmd == "build-cmd":
        print(
            shlex.join(
                build_cmd(
                    rest[0],
                    opts.get("--repo", "vlgrpo"),
                    opts.get("--revision", "unknown"),
                    opts.get("--source", "unknown"),
                    opts.get("--ca", "/etc/ssl/certs/ca-certificates.crt"),
                )
            )
        )
    elif cmd == "build":
        return build(rest)
    elif cmd == "sync":
        return sync(write=True)
    elif cmd == "check":
        return sync(write=False)
    else:
        print(f"images: unknown command {cmd!r}\n{__doc__}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
