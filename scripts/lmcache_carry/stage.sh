#!/usr/bin/env bash
# On the GPU machine, from the repository root, in a call that carries [".lmcachecarry/p1"]
# (one part today, ~10 MB): keeps a copy of the part(s) in /tmp/lmc_parts (a later call on
# the same warm machine then needs no carry) and unpacks the LMCache 0.5.3 site into
# /tmp/lmcache_site. bench/node/lmcache_role.py does the same on first use, so this is only
# for calls that want the site without the role (e.g. a first import check):
#   bash scripts/lmcache_carry/stage.sh && PYTHONPATH=/tmp/lmcache_site python3 -c 'import lmcache.c_ops'
# Returns non-zero (3 missing, 4 checksum, 5 unpack) when a part is missing or damaged.
set -u
carry="${LMCACHE_CARRY_DIR:-.lmcachecarry}"
site="${LMCACHE_SITE:-/tmp/lmcache_site}"
stamp="$site/.lmcache-0.5.3-staged"
[ -f "$stamp" ] && [ -f "$site/lmcache/__init__.py" ] && exit 0
mkdir -p /tmp/lmc_parts
if compgen -G "$carry/p*/site.part.*" >/dev/null; then cp -f "$carry"/p*/site.* /tmp/lmc_parts/; fi
[ -f /tmp/lmc_parts/site.sha256 ] || exit 3
n=0; : >/tmp/lmc_parts/site.tar.xz
while [ -f "/tmp/lmc_parts/site.part.$n" ]; do
  cat "/tmp/lmc_parts/site.part.$n" >>/tmp/lmc_parts/site.tar.xz || exit 3; n=$((n + 1)); done
(cd /tmp/lmc_parts && sha256sum -c --quiet site.sha256) || exit 4
rm -rf "$site.tmp" "$site" && mkdir -p "$site.tmp"
tar -C "$site.tmp" -xJf /tmp/lmc_parts/site.tar.xz || exit 5
rm -f /tmp/lmc_parts/site.tar.xz
mv "$site.tmp" "$site" && awk '{print $1}' /tmp/lmc_parts/site.sha256 >"$stamp"
