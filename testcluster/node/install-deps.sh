#!/usr/bin/env bash
# The Debian packages the real node uses next to what testcluster/node/build.sh builds: runc (the OCI
# runtime), the CNI plugins (bridge, host-local, loopback), iptables and iproute2. Installed when
# missing and this is root with apt-get; otherwise says what is missing (the node is then skipped).
set -euo pipefail
need=()
[ -x /usr/sbin/runc ] || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
command -v iptables >/dev/null || need+=(iptables)
command -v ip >/dev/null || need+=(iproute2)
[ ${#need[@]} = 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing for the real node (apt): ${need[*]}" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
else
  echo "note: the real node needs ${need[*]} (apt-get install them as root); its tests skip without" >&2
fi
