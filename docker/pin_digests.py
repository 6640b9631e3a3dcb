"""`make pin-digests`: resolve the base image tags to digests and hash the non-PyPI artifacts.

Reads the images of docker/base-digests.lock and the URLs of docker/artifacts.lock, asks the registries
(Docker Registry HTTP API v2, anonymous pull token: Docker Hub and quay.io) for each tag's manifest-list
digest (``Docker-Content-Digest`` of a HEAD on ``/v2/<name>/manifests/<tag>``) and downloads each artifact
to compute its sha256. Writes a line only with a value read from the network; anything it cannot reach
stays "unresolved" and the command exits 1 naming it. Never invents a digest. Standard library only;
honours HTTPS_PROXY and SSL_CERT_FILE. A registry on loopback (a local mirror, CI's) is asked over plain HTTP, as
Docker does.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ACCEPT = ", ".join(
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)


def split_ref(image: str) -> tuple[str, str, str]:
    """``quay.io/ascend/vllm-ascend:v0.13.0`` -> (registry host, repository, tag); Docker Hub defaults."""
    name, _, tag = image.rpartition(":")
    first = name.split("/", 1)[0]
    if "." in first or ":" in first or first == "localhost" or first.startswith("["):
        host, repo = first, name.split("/", 1)[1]
    else:
        host, repo = "registry-1.docker.io", name if "/" in name else f"library/{name}"
    return host, repo, tag


def scheme(host: str) -> str:
    """``http`` for a registry on this machine's loopback (``localhost``, ``127.0.0.0/8``, ``[::1]``, any port), which
    Docker itself reaches without TLS by default (its insecure-registries default); ``https`` for every other."""
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    if name == "localhost" or name == "[::1]" or re.fullmatch(r"127(\.\d{1,3}){3}", name):
        return "http"
    return "https"


def token(host: str, repo: str, challenge: str) -> str | None:
    m = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    if "realm" not in m:
        return None
    url = f"{m['realm']}?service={m.get('service', host)}&scope=repository:{repo}:pull"
    with urllib.request.urlopen(url, timeout=30) as resp:
        body = json.load(resp)
    return body.get("token") or body.get("access_token")


def digest_of(image: str) -> str:
    host, repo, tag = split_ref(image)
    url = f"{scheme(host)}://{host}/v2/{repo}/manifests/{tag}"
    headers = {"Accept": ACCEPT}
    for _ in range(2):
        req = urllib.request.Request(url, method="HEAD", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                digest = resp.headers.get("Docker-Content-Digest", "")
                if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
                    raise RuntimeError(f"{image}: registry answered without a Docker-Content-Digest")
                return digest
        except urllib.error.HTTPError as exc:
            if exc.code == 401 and "Authorization" not in headers:
                tok = token(host, repo, exc.headers.get("WWW-Authenticate", ""))
                if tok:
                    headers["Authorization"] = f"Bearer {tok}"
                    continue
            raise
    raise RuntimeError(f"{image}: not authorised")


def sha256_of(url: str) -> str:
    h = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=120) as resp:
        for chunk in iter(lambda: resp.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def update(path: Path, resolve, key_index: int) -> list[str]:
    failed, lines = [], []
    for line in path.read_text().splitlines():
        fields = line.split("\t")
        if line.startswith("#") or len(fields) != 3:
            lines.append(line)
            continue
        try:
            fields[2] = resolve(fields[key_index])
            print(f"pin-digests: {fields[0]} {fields[key_index]} -> {fields[2]}")
        except Exception as exc:  # reported, the line keeps its old value
            failed.append(f"{fields[0]} ({fields[key_index]}): {type(exc).__name__}: {exc}")
        lines.append("\t".join(fields))
    path.write_text("\n".join(lines) + "\n")
    return failed


def main() -> int:
    failed = update(ROOT / "docker/base-digests.lock", digest_of, 1)
    failed += update(ROOT / "docker/artifacts.lock", sha256_of, 1)
    for f in failed:
        print(f"pin-digests: NOT resolved, left as it was: {f}", file=sys.stderr)
    if failed:
        print("pin-digests: run this on a machine that reaches the registries and GitHub", file=sys.stderr)
        return 1
    print("pin-digests: all resolved; rebuild the images (make image-gpu / image-npu) and run make docs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
