#!/usr/bin/env bash
# A one-node Ceph cluster with an S3 gateway (radosgw), from Debian 12's Ceph 16.2 packages,
# for the object tier's bench against a second S3 implementation (issue 45): one monitor,
# one OSD on memstore (RAM, no disk), radosgw on 127.0.0.1:PORT (the monitor on PORT + 1000,
# messenger v1), no cephx (loopback only),
# an S3 user and a bucket. Needs root (apt-get, when Ceph is missing; scripts/setup.sh installs
# it for the tests). About 20 s to install and 20 s to start. tests/integration/python/
# s3_server.py (RadosgwServer) starts it for the object-tier tests.
#
#   bash bench/object_tier/radosgw.sh start DIR [PORT]   # prints ENDPOINT, BUCKET, CREDENTIALS
#   build/bench/object_tier/object_tier_bench --endpoint=http://127.0.0.1:7480 \
#       --bucket=kvstrata --credentials_file=DIR/credentials --blocks=1000 --rounds=7
#   bash bench/object_tier/radosgw.sh stop DIR
set -euo pipefail
cmd="${1:?start|stop}" dir="${2:?a directory for the cluster}" port="${3:-7480}"
access="KVSTRATAACCESS" secret="kvstrata-radosgw-secret-0123456789" bucket="kvstrata"

# stop: SIGTERM to every daemon of the cluster, then waits (up to 15 s) until they are gone,
# so that a new cluster's monitor never meets the old one on the same port.
stop() {
  local pids=() pidfile
  for pidfile in "$dir"/run/*.pid; do
    [ -f "$pidfile" ] && pids+=("$(cat "$pidfile")")
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  kill "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 1 30); do
    kill -0 "${pids[@]}" 2>/dev/null || return 0
    sleep 0.5
  done
  kill -9 "${pids[@]}" 2>/dev/null || true
}

if [ "$cmd" = stop ]; then
  stop
  exit 0
fi
[ "$cmd" = start ] || { echo "radosgw.sh: start or stop, not $cmd" >&2; exit 2; }

if ! command -v radosgw >/dev/null || ! command -v ceph-osd >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    radosgw ceph-mon ceph-osd >/dev/null
fi
stop
rm -rf "$dir" && mkdir -p "$dir"/{mon,osd,run,log,rgw}
fsid="$(uuidgen)"
conf="$dir/ceph.conf"
cat >"$conf" <<EOF
[global]
fsid = $fsid
mon host = v1:127.0.0.1:$((port + 1000))
auth cluster required = none
auth service required = none
auth client required = none
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon max pg per osd = 1000
mon allow pool size one = true
mon warn on pool no redundancy = false
osd objectstore = memstore
memstore device bytes = 2147483648
osd crush chooseleaf type = 0
ms bind ipv6 = false
osd data = $dir/osd/\$cluster-\$id
mon data = $dir/mon/\$cluster-\$id
run dir = $dir/run
log file = $dir/log/\$name.log
admin socket = $dir/run/\$name.asok
pid file = $dir/run/\$name.pid
[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:$port
rgw data = $dir/rgw
EOF
monmaptool --create --addv a "[v1:127.0.0.1:$((port + 1000))]" --fsid "$fsid" "$dir/monmap" >/dev/null
ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" >/dev/null 2>&1
ceph-mon -c "$conf" -i a
# The OSD's uuid named up front, in the monitor's map and in its mkfs alike: left to
# chance, a booting OSD sometimes met the map's entry under another uuid ('wrong fsid').
osd_uuid="$(uuidgen)"
osd="$(timeout 30 ceph -c "$conf" osd create "$osd_uuid")"
mkdir -p "$dir/osd/ceph-$osd"
ceph-osd -c "$conf" -i "$osd" --mkfs --osd-uuid "$osd_uuid" >/dev/null 2>&1
timeout 30 ceph -c "$conf" osd crush add "osd.$osd" 1.0 host=localhost >/dev/null 2>&1
ceph-osd -c "$conf" -i "$osd" >/dev/null 2>&1
radosgw -c "$conf" -n client.rgw
for _ in $(seq 1 120); do
  curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/" 2>/dev/null | grep -q 200 && break
  sleep 0.5
done
timeout 60 radosgw-admin -c "$conf" user create --uid=kvstrata --display-name=kvstrata \
  --access-key="$access" --secret="$secret" >/dev/null 2>&1
printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' "$access" "$secret" \
  >"$dir/credentials"
# The bucket, signed with the same credentials (curl's own SigV4).
curl -s -f -X PUT -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" --aws-sigv4 "aws:amz:us-east-1:s3" \
  --user "$access:$secret" \
  "http://127.0.0.1:$port/$bucket" >/dev/null
echo "ENDPOINT=http://127.0.0.1:$port"
echo "BUCKET=$bucket"
echo "CREDENTIALS=$dir/credentials"
