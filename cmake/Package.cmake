# The Debian package, rampart_<version>_amd64.deb, made by CPack (scripts/build-deb runs
# it). Only with -DRAMPART_DEB=ON, which also installs for a Debian system rather than
# /usr/local: configure with -DCMAKE_INSTALL_PREFIX=/usr. The maintainer scripts and
# the copyright file are in packaging/debian (packaging/README.md says what each does).
if(NOT CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  message(FATAL_ERROR "RAMPART_DEB=ON packages for Debian: configure with "
                      "-DCMAKE_INSTALL_PREFIX=/usr (scripts/build-deb does)")
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME rampart)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "rampart maintainers <rampart@localhost>")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "rampart maintainers <rampart@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "remote-memory pager: swap to other machines' RAM")
set(CPACK_PACKAGE_DESCRIPTION
  "rampart turns the idle RAM of other machines into swap. rampartd lends this host's
memory to other hosts; the nbdkit plugin 'rampart' stripes their 4 KiB pages over
several rampartd with parity logging, and rampart-swap attaches it as a swap device.
Ships systemd units for both roles, rampartctl, and example configuration in
/etc/rampart.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Shared libraries (libev, libssl3, libprotobuf-c1, liburing2, libisal2) come from dpkg-shlibdeps;
# the programs rampart-swap runs are named here: nbdkit (with its plugin directory),
# nbd-client to attach, kmod for 'modprobe nbd', procps for sysctl, adduser for the
# system user. Where the kernel has neither NBD nor ublk, rampart-fuse (libfuse3-3, which
# dpkg-shlibdeps adds) is the fall-back; nbdfuse (libnbd-bin) only for other plugins.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "nbdkit, nbd-client, kmod, procps, adduser")
# libcurl4 and libjson-c5 are loaded (dlopen) only by rampartd --etcd and devices with
# cluster=etcd://, so dpkg-shlibdeps does not see them (etcd/etcd_libs.c).
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libnbd-bin, libcurl4, libjson-c5")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "prometheus-node-exporter")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# Stripped, as Debian ships binaries (the debug symbols are not packaged).
set(CPACK_STRIP_FILES ON)

# conffiles: the examples under /etc/rampart are the operator's to edit; dpkg keeps
# their changes across upgrades.
set(rampart_conffiles "")
foreach(f rampartd.conf.example swap.conf.example cluster.example)
  string(APPEND rampart_conffiles "/etc/rampart/${f}\n")
endforeach()
file(WRITE ${CMAKE_BINARY_DIR}/debian/conffiles "${rampart_conffiles}")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${CMAKE_BINARY_DIR}/debian/conffiles
  ${PROJECT_SOURCE_DIR}/packaging/debian/postinst
  ${PROJECT_SOURCE_DIR}/packaging/debian/prerm
  ${PROJECT_SOURCE_DIR}/packaging/debian/postrm)

install(FILES ${PROJECT_SOURCE_DIR}/packaging/debian/copyright
        DESTINATION ${CMAKE_INSTALL_DOCDIR})

include(CPack)
