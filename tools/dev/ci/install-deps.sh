#!/usr/bin/env bash
# Installs the Debian packages the runner's tests and the guest fixture need: QEMU and qemu-img
# to boot the guest, qemu-guest-agent (the fixture guest runs it; pkg/guestagent tests against
# it), busybox-static and e2fsprogs (mkfs.ext4) to build it, ISC dhclient (the guest and
# pkg/network/ipv6serve take their IPv6 address with it), iproute2 for the
# tests' network namespaces; SeaBIOS and OVMF for guests that boot from their disk, mmdebstrap to
# build the Debian cloud guest; runc, the CNI plugins and iptables for the local cluster. Needs root; a no-op when everything is installed.
set -euo pipefail

packages=(qemu-system-x86 qemu-utils qemu-guest-agent seabios ovmf busybox-static e2fsprogs isc-dhcp-client mmdebstrap iproute2 ca-certificates runc containernetworking-plugins iptables)

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "install-deps: all of ${packages[*]} installed"
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "install-deps: missing ${missing[*]}; run this script as root" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
