#!/usr/bin/env bash
# Checks a built rampart .deb (scripts/build-deb) as dpkg and an operator would see it:
# the control fields, every file where Debian and nbdkit look for it, the conffiles,
# the maintainer scripts, the units pointing at /usr, and that the packaged programs
# and plugin run. Not lintian (it would add some 130 packages to the CI machine); the
# checks below are the ones of its tags that apply to this package.
#
#   test/package/test_deb_package.sh PATH/rampart_VERSION_amd64.deb
set -euo pipefail
deb=${1:?usage: test_deb_package.sh PATH.deb}
name=test_deb_package
fail() { echo "[$name] FAIL: $*" >&2; exit 1; }
log() { echo "[$name] $*"; }
[[ -f $deb ]] || fail "$deb does not exist: build it with scripts/build-deb"
work=$(mktemp -d "${TMPDIR:-/tmp}/rampart-$name.XXXXXX")
trap 'rm -rf --one-file-system "$work"' EXIT

# ---- the control file --------------------------------------------------------------
field() { dpkg-deb -f "$deb" "$1"; }
[[ $(field Package) == rampart ]] || fail "Package is '$(field Package)'"
[[ $(field Architecture) == amd64 ]] || fail "Architecture is '$(field Architecture)'"
version=$(field Version)
[[ $(basename "$deb") == "rampart_${version}_amd64.deb" ]] ||
  fail "file name $(basename "$deb") does not match version $version"
[[ -n $(field Maintainer) && -n $(field Description) ]] || fail "no Maintainer or Description"
depends=$(field Depends)
# What rampart-swap and the postinst run, and the libraries dpkg-shlibdeps must find.
for dep in nbdkit nbd-client kmod procps adduser libc6 libev4 libssl3 libprotobuf-c1 \
    liburing2 libisal2 libfuse3-3; do
  [[ ", $depends," == *", $dep"[\ ,]* ]] || fail "Depends lacks $dep: $depends"
done
log "control: rampart $version amd64; Depends: $depends"

# ---- the files ---------------------------------------------------------------------
dpkg-deb -c "$deb" | awk '{print $1, $6}' >"$work/list"
plugindir=$(pkg-config --variable=plugindir nbdkit)
expect_file() { # mode path
  grep -qxF -- "$1 .$2" "$work/list" || fail "no $2 with mode $1 in the package: $(grep -F -- "$2" "$work/list" || echo absent)"
}
expect_file -rwxr-xr-x /usr/bin/rampartd
expect_file -rwxr-xr-x /usr/bin/rampartctl
expect_file -rwxr-xr-x /usr/sbin/rampart-swap
expect_file -rwxr-xr-x /usr/sbin/rampart-ublk
expect_file -rwxr-xr-x /usr/sbin/rampart-nbd-attach
expect_file -rwxr-xr-x /usr/sbin/rampart-nbd-server
expect_file -rwxr-xr-x /usr/sbin/rampart-fuse
expect_file -rw-r--r-- "$plugindir/nbdkit-rampart-plugin.so"
expect_file -rw-r--r-- /lib/systemd/system/rampartd.service
expect_file -rw-r--r-- /lib/systemd/system/rampart-swap.service
expect_file -rw-r--r-- /lib/systemd/system/rampartd@.service
for f in rampartd.conf.example swap.conf.example cluster.example; do
  expect_file -rw-r--r-- "/etc/rampart/$f"
done
for f in copyright README.md operations.md; do expect_file -rw-r--r-- "/usr/share/doc/rampart/$f"; done
! grep -Eq 'usr/local|rampartd-faults|rampart-workload|/test' "$work/list" ||
  fail "the package holds what it must not: $(grep -E 'usr/local|rampartd-faults|rampart-workload|/test' "$work/list")"
log "files: $(grep -c '^-' "$work/list") files, each in its place"

# ---- conffiles and maintainer scripts -----------------------------------------------
dpkg-deb -e "$deb" "$work/control"
diff <(printf '/etc/rampart/%s\n' rampartd.conf.example swap.conf.example cluster.example) \
  "$work/control/conffiles" || fail "conffiles is not the three examples"
[[ -s $work/control/md5sums ]] || fail "no md5sums"
for s in postinst prerm postrm; do
  [[ -x $work/control/$s ]] || fail "$s is missing or not executable"
  head -1 "$work/control/$s" | grep -qx '#!/bin/sh' || fail "$s does not start with #!/bin/sh"
  grep -qx 'set -e' "$work/control/$s" || fail "$s lacks set -e"
  sh -n "$work/control/$s" || fail "$s is not valid sh"
done
grep -q 'adduser --system --group' "$work/control/postinst" || fail "postinst creates no system user"
log "conffiles, md5sums, postinst/prerm/postrm: as Debian wants them"

# ---- what is inside runs -------------------------------------------------------------
dpkg-deb -x "$deb" "$work/root"
unit=$work/root/lib/systemd/system/rampartd.service
grep -q '^ExecStart=/usr/bin/rampartd ' "$unit" || fail "rampartd.service does not run /usr/bin/rampartd"
grep -qx 'User=rampart' "$unit" || fail "rampartd.service does not name User=rampart"
# rampart-swap is the C supervisor (supervisor/), an ELF program, not a script.
[[ $(head -c 4 "$work/root/usr/sbin/rampart-swap" | od -An -c | tr -d ' ') == 177ELF ]] ||
  fail "/usr/sbin/rampart-swap is not an ELF program: $(head -n 1 "$work/root/usr/sbin/rampart-swap")"
grep -q '^ExecStart=/usr/sbin/rampart-swap on' "$work/root/lib/systemd/system/rampart-swap.service" ||
  fail "rampart-swap.service does not run /usr/sbin/rampart-swap"
! grep -rq '@[A-Z]*DIR@' "$work/root/lib/systemd/system" || fail "a unit still holds an @...DIR@"
for b in usr/bin/rampartd usr/bin/rampartctl usr/sbin/rampart-ublk usr/sbin/rampart-nbd-attach usr/sbin/rampart-nbd-server usr/sbin/rampart-fuse "${plugindir#/}/nbdkit-rampart-plugin.so"; do
  ! readelf -S "$work/root/$b" | grep -q '\.symtab' || fail "$b is not stripped"
done
"$work/root/usr/bin/rampartd" --version >"$work/version" 2>&1 || fail "rampartd --version: $(cat "$work/version")"
"$work/root/usr/bin/rampartctl" --help >/dev/null 2>&1 || fail "rampartctl --help failed"
nbdkit "$work/root$plugindir/nbdkit-rampart-plugin.so" --dump-plugin >"$work/dump" 2>&1 ||
  fail "nbdkit cannot load the packaged plugin: $(cat "$work/dump")"
grep -q '^name=rampart$' "$work/dump" || fail "the packaged plugin is not named rampart"
[[ $("$work/root/usr/sbin/rampart-nbd-server" --state-layout 2>&1) == "$(nbdkit "$work/root$plugindir/nbdkit-rampart-plugin.so" --dump-plugin | sed -n 's/^rampart_state_layout=//p')" ]] ||
  fail "rampart-nbd-server and the plugin read different state layouts"
log "rampartd $(head -1 "$work/version"); nbdkit loads the plugin; rampart-nbd-server reads its state layout"
log "PASS: $(basename "$deb")"
