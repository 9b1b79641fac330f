# Finds every system library rampart builds against, and says which Debian package to
# install when one is missing (the README's first command installs them all).
find_package(PkgConfig REQUIRED)

function(rampart_require_pkg var module debian_pkg)
  pkg_check_modules(${var} QUIET IMPORTED_TARGET ${module})
  if(NOT ${var}_FOUND)
    message(FATAL_ERROR
      "rampart needs ${module}, which pkg-config cannot find.\n"
      "Install it with: apt-get install ${debian_pkg}\n"
      "(or run the README's first command, which installs everything).")
  endif()
endfunction()

rampart_require_pkg(PROTOBUF_C libprotobuf-c libprotobuf-c-dev)
rampart_require_pkg(LIBCRYPTO  libcrypto      libssl-dev)
rampart_require_pkg(LIBURING   liburing       liburing-dev)
rampart_require_pkg(LIBISAL    libisal        libisal-dev)
rampart_require_pkg(LIBNBD     libnbd         libnbd-dev)
rampart_require_pkg(NBDKIT     nbdkit         nbdkit-plugin-dev)
rampart_require_pkg(FUSE3      fuse3          libfuse3-dev)
if(RAMPART_TESTS)
  rampart_require_pkg(CMOCKA cmocka libcmocka-dev)
endif()

find_program(PROTOC_C protoc-c)
if(NOT PROTOC_C)
  message(FATAL_ERROR "rampart needs protoc-c to generate the wire messages.\n"
                      "Install it with: apt-get install protobuf-c-compiler")
endif()

# Debian's libev ships no pkg-config file, so look for the header and library directly.
find_path(LIBEV_INCLUDE_DIR ev.h)
find_library(LIBEV_LIBRARY ev)
if(NOT LIBEV_INCLUDE_DIR OR NOT LIBEV_LIBRARY)
  message(FATAL_ERROR "rampart needs libev (ev.h, libev.so).\n"
                      "Install it with: apt-get install libev-dev")
endif()
add_library(rampart_libev INTERFACE)
target_include_directories(rampart_libev SYSTEM INTERFACE ${LIBEV_INCLUDE_DIR})
target_link_libraries(rampart_libev INTERFACE ${LIBEV_LIBRARY})
# ev.h trips -Wstrict-prototypes and friends; it is not our code.
target_compile_options(rampart_libev INTERFACE -Wno-strict-prototypes)

find_package(Threads REQUIRED)
