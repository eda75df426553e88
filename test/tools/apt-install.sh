#!/bin/sh
# apt-install.sh PACKAGE...: install Debian packages for the test tools
# (make tools-prometheus) without leaving any of their services running or
# enabled: the tests run the binaries themselves, on loopback ports.
#
# During the install a policy-rc.d denies every service start (invoke-rc.d
# and deb-systemd-invoke obey it; one that is already there is kept). After
# it, every systemd unit and init script the packages ship is disabled (a
# later upgrade of the package keeps it so), and stopped where systemd runs.
# Then it checks that none is enabled or active.
# Run as root.
set -eu

policy=/usr/sbin/policy-rc.d
ours=
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\n# Written by test/tools/apt-install.sh while it installs: no service starts.\nexit 101\n' >"$policy"
	chmod 0755 "$policy"
	ours=1
fi
trap '[ -z "$ours" ] || rm -f "$policy"' EXIT

export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "$@"

systemd=
[ -d /run/systemd/system ] && systemd=1
units=
for pkg in "$@"; do
	units="$units $(dpkg -L "$pkg" | sed -n 's%^\(/usr\)\{0,1\}/lib/systemd/system/\([^/@]*\.\(service\|socket\|timer\)\)$%\2%p')"
	for script in $(dpkg -L "$pkg" | sed -n 's|^/etc/init\.d/\([^/]*\)$|\1|p'); do
		[ -n "$systemd" ] || invoke-rc.d "$script" stop >/dev/null 2>&1 || true # nothing to stop when the start was denied
		update-rc.d "$script" disable >/dev/null
	done
done
for unit in $units; do
	if [ -n "$systemd" ]; then
		systemctl disable --now --quiet "$unit"
	else
		systemctl disable --quiet "$unit" # works on the unit files alone
	fi
done

bad=
for unit in $units; do
	if [ "$(systemctl is-enabled "$unit" 2>/dev/null)" = enabled ]; then
		bad="$bad $unit(enabled)"
	fi
	if [ -n "$systemd" ] && systemctl is-active --quiet "$unit"; then
		bad="$bad $unit(active)"
	fi
done
if [ -n "$bad" ]; then
	echo "apt-install.sh: services of $* are still on after disabling them:$bad" >&2
	exit 1
fi
echo "installed $*; services disabled and not running:${units:- none}"
