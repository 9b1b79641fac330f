/* The file system rampart-fuse mounts: a root directory (inode 1) holding one regular
 * file (inode 2) the size of the device, as nbdfuse lays it out, so that `losetup`
 * makes a block device of it. Every request on the file goes to the engine from the
 * libfuse worker that received it. With a pool of requests answered as they complete
 * (--async, the default; fuse_async_io.h), a whole-page request of up to 32 pages (every
 * read a loop device sends for swap, most writes) is started and left to the thread
 * that completes it, and anything else goes through the engine's blocking calls: the
 * engine's I/O thread reads the replies, so under load the servers' sockets are not
 * lent to a worker and given back again (an epoll_ctl per socket and a wake, each way).
 * The one exception is a whole-page read that finds nothing out: its worker reads the
 * reply itself (fuse_worker.h), which at queue depth 1 is faster than the I/O thread's
 * answer and lets poll-us= spin for it (fuse_async_io_claim_sole). Without the pool
 * (--async 0), every whole-page request is its worker's that way. The blocking calls
 * patch partial pages.
 *
 * The file is opened with direct I/O (FOPEN_DIRECT_IO): the kernel caches none of it,
 * so a swapped-out page is never held twice, in the page cache and in the servers, under
 * the very shortage swap relieves, and a loop device over it can use direct I/O too.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuse_device_file.h"
#include "fuse_worker.h"
#include "hop_trace.h"

#define ROOT_INODE FUSE_ROOT_ID
#define FILE_INODE 2

static struct fuse_device_file *device_of(fuse_req_t req)
{
  return fuse_req_userdata(req);
}

static void fill_attr(const struct fuse_device_file *f, fuse_ino_t ino, struct stat *st)
{
  memset(st, 0, sizeof *st);
  st->st_ino = ino;
  if (ino == ROOT_INODE) {
    st->st_mode = S_IFDIR | 0700;
    st->st_nlink = 2;
  } else {
    st->st_mode = S_IFREG | 0600;
    st->st_nlink = 1;
    st->st_size = (off_t)f->size;
    st->st_blocks = (blkcnt_t)(f->size / 512);
  }
  st->st_blksize = RAMPART_PAGE_SIZE;
}

/* The attributes never change behind the kernel's back: it may keep them for good. */
#define ATTR_TIMEOUT 86400.0

static void device_init(void *userdata, struct fuse_conn_info *conn)
{
  struct fuse_device_file *f = userdata;
  conn->max_write = FUSE_DEVICE_MAX_IO;
  conn->max_readahead = 0;
  /* A loop device submits asynchronous direct I/O: it is what lets several requests be
   * in flight at once, each on its own worker. */
  conn->want |= conn->capable & FUSE_CAP_ASYNC_DIO;
  conn->want &= ~(unsigned)(FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_AUTO_INVAL_DATA);
  conn->max_background = f->max_background;
  conn->congestion_threshold = f->max_background * 3 / 4;
}

static void device_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
  struct fuse_device_file *f = device_of(req);
  if (parent != ROOT_INODE || strcmp(name, f->name) != 0) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  struct fuse_entry_param e = { .ino = FILE_INODE,
                                .attr_timeout = ATTR_TIMEOUT,
                                .entry_timeout = ATTR_TIMEOUT };
  fill_attr(f, FILE_INODE, &e.attr);
  fuse_reply_entry(req, &e);
}

static void device_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
  struct stat st;
  if (ino != ROOT_INODE && ino != FILE_INODE) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  fill_attr(device_of(req), ino, &st);
  fuse_reply_attr(req, &st, ATTR_TIMEOUT);
}

/* Only what leaves the device as it is: a device's size is the engine's. */
static void device_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                           struct fuse_file_info *fi)
{
  struct fuse_device_file *f = device_of(req);
  if ((to_set & FUSE_SET_ATTR_SIZE) &&
      (ino != FILE_INODE || (uint64_t)attr->st_size != f->size)) {
    fuse_reply_err(req, EPERM);
    return;
  }
  device_getattr(req, ino, fi);
}

static void device_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
  if (ino != FILE_INODE) {
    fuse_reply_err(req, EISDIR);
    return;
  }
  fi->direct_io = 1;
  fi->keep_cache = 0;
  fi->noflush = 1; /* a close has nothing to flush: fsync does */
  fuse_reply_open(req, fi);
}

static bool whole_pages(size_t size, uint64_t offset)
{
  return ((size | offset) & (RAMPART_PAGE_SIZE - 1)) == 0;
}

/* Without the pool a worker reads the replies to its whole-page requests; with it, one
 * the pool cannot take goes through the blocking calls (the file's header says why). */
static bool worker_reads_reply(const struct fuse_device_file *f, size_t size, uint64_t offset)
{
  return !f->async && whole_pages(size, offset);
}

static void device_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                        struct fuse_file_info *fi)
{
  rp_hop(RP_HOP_FRONTEND_IN);
  struct fuse_device_file *f = device_of(req);
  uint64_t offset = (uint64_t)off;
  if (offset >= f->size) {
    fuse_reply_buf(req, NULL, 0);
    return;
  }
  if (size > f->size - offset)
    size = (size_t)(f->size - offset);
  if (size > FUSE_DEVICE_MAX_IO)
    size = FUSE_DEVICE_MAX_IO; /* a short read: the kernel asks again for the rest */
  bool sole = whole_pages(size, offset) && fuse_async_io_claim_sole(f->async);
  if (!sole &&
      fuse_async_io_take(f->async, f->engine, req, RAMPART_OP_READ, NULL, size, offset))
    return; /* answered as it completes */
  void *buf = fuse_worker_read_buffer();
  int r;
  if (!buf)
    r = -ENOMEM;
  else if (sole || worker_reads_reply(f, size, offset))
    r = fuse_worker_run(f->engine, RAMPART_OP_READ, buf, (uint32_t)size, offset);
  else
    r = rampart_pread(f->engine, buf, (uint32_t)size, offset);
  if (sole)
    fuse_async_io_release_sole(f->async);
  if (r < 0)
    fuse_reply_err(req, -r);
  else
    fuse_reply_buf(req, buf, size);
  rp_hop(RP_HOP_FRONTEND_OUT);
}

static void device_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
                         off_t off, struct fuse_file_info *fi)
{
  rp_hop(RP_HOP_FRONTEND_IN);
  struct fuse_device_file *f = device_of(req);
  uint64_t offset = (uint64_t)off;
  if (offset >= f->size || size > f->size - offset || size > UINT32_MAX) {
    fuse_reply_err(req, ENOSPC); /* a device does not grow */
    return;
  }
  if (fuse_async_io_take(f->async, f->engine, req, RAMPART_OP_WRITE, buf, size, offset))
    return; /* answered as it completes */
  /* The engine never writes through a write's buffer: libfuse's receive buffer serves. */
  int r = worker_reads_reply(f, size, offset)
            ? fuse_worker_run(f->engine, RAMPART_OP_WRITE, (void *)buf, (uint32_t)size,
                              offset)
            : rampart_pwrite(f->engine, buf, (uint32_t)size, offset, 0);
  if (r < 0)
    fuse_reply_err(req, -r);
  else
    fuse_reply_write(req, size);
  rp_hop(RP_HOP_FRONTEND_OUT);
}

/* A hole reads back as zeros: its whole pages are discarded (a loop device's discard,
 * swapon --discard's), and a partial page at either end, which the engine's trim leaves
 * as it is, is zeroed. */
static int punch_hole(struct rampart_engine *engine, uint64_t offset, uint64_t len)
{
  uint64_t end = offset + len;
  uint64_t first = (offset + RAMPART_PAGE_SIZE - 1) & ~(uint64_t)(RAMPART_PAGE_SIZE - 1);
  uint64_t last = end & ~(uint64_t)(RAMPART_PAGE_SIZE - 1);
  if (first >= last)
    return rampart_zero(engine, (uint32_t)len, offset);
  int r = first > offset ? rampart_zero(engine, (uint32_t)(first - offset), offset) : 0;
  if (r == 0)
    r = rampart_trim(engine, (uint32_t)(last - first), first);
  if (r == 0 && end > last)
    r = rampart_zero(engine, (uint32_t)(end - last), last);
  return r;
}

/* Zeroing a range is write-zeroes; a plain allocation has nothing to do, every page of
 * the device being there already. */
static void device_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off,
                             off_t length, struct fuse_file_info *fi)
{
  struct fuse_device_file *f = device_of(req);
  uint64_t offset = (uint64_t)off, len = (uint64_t)length;
  if (off < 0 || length <= 0) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  if (offset > f->size || len > f->size - offset || len > UINT32_MAX) {
    fuse_reply_err(req, ENOSPC); /* a device does not grow */
    return;
  }
  int r;
  if (mode == (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE))
    r = punch_hole(f->engine, offset, len);
  else if ((mode & ~FALLOC_FL_KEEP_SIZE) == FALLOC_FL_ZERO_RANGE)
    r = rampart_zero(f->engine, (uint32_t)len, offset);
  else if ((mode & ~FALLOC_FL_KEEP_SIZE) == 0)
    r = 0;
  else
    r = -EOPNOTSUPP;
  fuse_reply_err(req, -r);
}

static void device_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
                         struct fuse_file_info *fi)
{
  fuse_reply_err(req, -rampart_flush(device_of(req)->engine));
}

static void device_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
  if (ino != ROOT_INODE) {
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  fuse_reply_open(req, fi);
}

/* Adds one entry to buf; returns its new length, or len when it does not fit. */
static size_t add_entry(fuse_req_t req, char *buf, size_t len, size_t size, const char *name,
                        fuse_ino_t ino, off_t next)
{
  struct stat st = { .st_ino = ino, .st_mode = ino == ROOT_INODE ? S_IFDIR : S_IFREG };
  size_t need = fuse_add_direntry(req, buf + len, size - len, name, &st, next);
  return need <= size - len ? len + need : len;
}

static void device_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi)
{
  char buf[512];
  size_t len = 0;
  if (size > sizeof buf)
    size = sizeof buf;
  const char *names[3] = { ".", "..", device_of(req)->name };
  const fuse_ino_t inodes[3] = { ROOT_INODE, ROOT_INODE, FILE_INODE };
  for (off_t i = off; i < 3; i++) {
    size_t grown = add_entry(req, buf, len, size, names[i], inodes[i], i + 1);
    if (grown == len)
      break;
    len = grown;
  }
  fuse_reply_buf(req, buf, len);
}

static const struct fuse_lowlevel_ops ops = {
  .init = device_init,
  .lookup = device_lookup,
  .getattr = device_getattr,
  .setattr = device_setattr,
  .open = device_open,
  .read = device_read,
  .write = device_write,
  .fallocate = device_fallocate,
  .fsync = device_fsync,
  .opendir = device_opendir,
  .readdir = device_readdir,
};

const struct fuse_lowlevel_ops *fuse_device_file_ops(void)
{
  return &ops;
}
