#!/bin/bash
# Unpack libaio (headers and shared library) into DEST/aio for DeepSpeed's async_io op on the
# device, whose image lacks it (NVMe offload). Run here, where apt-get reaches Debian:
#   bash tools/device/dsbench/fetch_libaio.sh .dsbench
# go.sh points the compiler, linker and loader at DEST/aio when it is there. Links are replaced
# by copies (a carried tree keeps plain files only). The library's ABI (libaio.so.1) is the one
# Ubuntu 24.04 ships as libaio1t64.
set -eu
DEST=${1:?usage: fetch_libaio.sh DEST_DIR}
mkdir -p "$DEST"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
(cd "$TMP" && apt-get download libaio1 libaio-dev >/dev/null 2>&1) || {
  echo "fetch_libaio.sh: apt-get download libaio1 libaio-dev failed (is a Debian mirror reachable?)" >&2
  exit 1
}
rm -rf "$DEST/aio"
for deb in "$TMP"/*.deb; do dpkg-deb -x "$deb" "$TMP/root"; done
mkdir -p "$DEST/aio"
cp -rL "$TMP/root/usr" "$DEST/aio/"
test -f "$DEST/aio/usr/include/libaio.h" && test -f "$DEST/aio/usr/lib/x86_64-linux-gnu/libaio.so" || {
  echo "fetch_libaio.sh: the packages did not hold libaio.h and libaio.so" >&2
  exit 1
}
echo "libaio in $DEST/aio ($(du -sh "$DEST/aio" | cut -f1))"
