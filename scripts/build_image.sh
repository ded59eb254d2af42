#!/usr/bin/env bash
# Builds deploy/container/Dockerfile into a local OCI image with buildah (no container
# daemon), FROM a Debian 12 root filesystem that debootstrap makes here from Debian's
# packages (no base image is pulled from a registry):
#   bash scripts/build_image.sh [TAG]      # default: localhost/kvstratad:<project version>
# Needs root and Debian's package mirror (DEBIAN_MIRROR, default deb.debian.org); installs
# buildah and debootstrap when they are missing. Builds with --isolation chroot, which also
# works where an OCI runtime cannot create cgroups. The build context is the repository
# (.dockerignore keeps build trees and virtual environments out). About 4 minutes on 2 cores.
# Exits 3 (with the reason on stderr) when the machine cannot build images at all (no
# buildah/debootstrap to be had, no mirror, no way to mount a container's root), and
# non-zero otherwise when the Dockerfile's build fails.
# Then, for example:
#   buildah run --isolation chroot "$(buildah from localhost/kvstratad:0.1.0)" -- kvstratad --check_config
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="$(sed -n 's/^project(kvstrata VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")"
tag="${1:-localhost/kvstratad:$version}"
base="${KVSTRATA_IMAGE_BASE:-localhost/kvstrata-debian:12}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
step() { echo "build_image: $*"; }
cannot() { echo "build_image: this machine cannot build images: $*" >&2; exit 3; }
[[ "$(id -u)" == 0 ]] || cannot "not root"

if ! command -v buildah >/dev/null || ! command -v debootstrap >/dev/null; then
  step "installing buildah and debootstrap"
  apt-get install -y -q buildah debootstrap >/dev/null ||
    cannot "apt-get install buildah debootstrap failed"
fi
if ! buildah inspect --type image "$base" >/dev/null 2>&1; then
  step "making $base from Debian 12 (debootstrap --variant=minbase bookworm $mirror)"
  rootfs="$(mktemp -d)"
  trap 'rm -rf "$rootfs"' EXIT
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >/dev/null ||
    cannot "debootstrap of Debian 12 from $mirror failed"
  ctr="$(buildah from scratch)" || cannot "buildah from scratch failed"
  mnt="$(buildah mount "$ctr")" || cannot "buildah mount failed"
  tar -C "$rootfs" -cf - . | tar -C "$mnt" -xf - || cannot "copying the root filesystem failed"
  buildah umount "$ctr" >/dev/null
  buildah commit -q "$ctr" "$base" >/dev/null || cannot "buildah commit of $base failed"
  buildah rm "$ctr" >/dev/null
fi
step "building $tag from deploy/container/Dockerfile (BASE=$base)"
buildah bud --isolation chroot --build-arg "BASE=$base" -f "$repo/deploy/container/Dockerfile" \
  -t "$tag" "$repo"
step "done: $tag"
