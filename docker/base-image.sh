#!/bin/sh
# Print the base image to build murmur-door's image from (docs/containers.md): the one
# asked for ($1, default python:3.11-slim) when the engine has it or can pull it; else a
# Debian bookworm base with python3-venv made here, offline from the Debian mirror apt
# uses, with mmdebstrap, and imported as murmur-base:bookworm (made once).
set -eu
want="${1:-python:3.11-slim}"
if docker image inspect "$want" >/dev/null 2>&1; then echo "$want"; exit 0; fi
if timeout 60 docker pull --quiet "$want" >/dev/null 2>&1; then echo "$want"; exit 0; fi
fallback=murmur-base:bookworm
if ! docker image inspect "$fallback" >/dev/null 2>&1; then
  if ! command -v mmdebstrap >/dev/null 2>&1; then
    echo "base-image: $want cannot be pulled and mmdebstrap is missing to make a base;" \
         "install it (apt-get install mmdebstrap) or give BASE_IMAGE=<an image you have>" >&2
    exit 1
  fi
  echo "base-image: $want cannot be pulled; making $fallback with mmdebstrap" >&2
  mmdebstrap --quiet --variant=minbase \
    --include=python3,python3-venv,ca-certificates,passwd --format=tar bookworm - \
    | docker import - "$fallback" >/dev/null
fi
echo "$fallback"
