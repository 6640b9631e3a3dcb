#!/usr/bin/env bash
# Download the wheels the GPU suite carries to a machine without a package index (the lent H200 has
# python3 3.12, torch 2.11 and transformers 5.17): transformers 4.57.6 (the pinned version) and the
# versions of what it requires that differ there -- tokenizers 0.22.1 (4.57.6 needs <=0.23.0; the machine
# has 0.23.2) and huggingface-hub 0.36.0 (4.57.6 needs <1.0; the machine has 1.33). Its other
# requirements (filelock, numpy, packaging, pyyaml, regex, requests, safetensors, tqdm) are there.
# usage: tests/gpu/fetch-wheels.sh [DEST]   (default .whl, git-ignored); needs pip and PyPI access.
set -Eeuo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
dest=${1:-.whl}
mkdir -p "$dest"
for spec in transformers==4.57.6 tokenizers==0.22.1 huggingface-hub==0.36.0; do
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$dest" "$spec"
done
ls -l "$dest"
