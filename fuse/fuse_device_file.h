/* The FUSE file system rampart-fuse serves: a directory holding one regular file, the
 * device, whose reads, writes, fallocate and fsync go straight to the engine.
 *
 * Errors: I/O replies carry the engine's negative errno to the kernel as FUSE's
 * positive one (docs/CONTRIBUTING.md, convention 2); fuse_device_file_ops fails
 * nothing.
 */
#ifndef RAMPART_FUSE_DEVICE_FILE_H
#define RAMPART_FUSE_DEVICE_FILE_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include <stdint.h>

#include "fuse_async_io.h"
#include "fuse_worker.h"
#include "rampart.h"

/* The largest read or write the kernel sends in one request: libfuse's own buffer
 * (FUSE_MAX_MAX_PAGES pages) bounds it, and swap's clustered I/O fits in it. */
#define FUSE_DEVICE_MAX_IO (1u << 20)

struct fuse_device_file {
  struct rampart_engine *engine;
  uint64_t size;
  const char *name;                 /* the file's name in the mount's root */
  unsigned max_background;          /* asynchronous requests the kernel keeps in flight */
  struct fuse_async_io_pool *async; /* NULL: every request holds its worker */
};

/* The low-level operations over `file`, the session's userdata. */
const struct fuse_lowlevel_ops *fuse_device_file_ops(void);

#endif
