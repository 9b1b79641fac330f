/* The local-disk page store (see spill_store.h): 4 KiB slots in a preallocated file or
 * a block device, read and written with io_uring through registered bounce buffers.
 *
 * Why it is built this way:
 * - This is the path pages take when the host is short of memory, so everything it
 *   needs is allocated (and the bounce buffers locked) at open: the ring, the buffers,
 *   the slot bitmap. Submitting and reaping allocate nothing.
 * - O_DIRECT keeps swapped-out pages out of the page cache (caching them would spend
 *   the very memory we are trying to free) and makes completion mean "the device has
 *   it". Only where the file system refuses O_DIRECT (tmpfs before Linux 6.6, ramfs)
 *   do we fall back to buffered I/O, with one warning.
 * - Caller pages are copied into aligned, registered bounce buffers, so callers need
 *   no alignment and the kernel does not pin and unpin user pages on every request.
 *   The number of bounce buffers bounds the I/O in flight; requests beyond it wait in
 *   an intrusive FIFO and start, in order, as buffers come back.
 * - Each request's SQE is prepared at submit time and the kernel is entered once per
 *   batch (spill_store_flush_submissions, and at the end of every reap).
 * - Slots come from the stores' one allocator (slot_allocator.h): a two-level bitmap,
 *   32 MiB per TiB of store.
 */
#include "spill_store.h"
#include "file_create.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <limits.h>
#include <linux/fs.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fifo.h"
#include "log.h"
#include "msgf.h"
#include "slot_allocator.h"
#include "wire.h"

#define SPILL_PAGE_SIZE 4096u
#define SPILL_DEFAULT_QD 64u
/* io_uring allows 32768 SQEs, but 4096 pages in flight (16 MiB of locked buffers) is
 * already far past what one disk can use; a bigger number is a typo. */
#define SPILL_MAX_QD 4096u
/* A completion with -EAGAIN/-EINTR is retried on the same buffer this many times
 * before the error reaches the caller. */
#define SPILL_MAX_RETRIES 8u

struct spill_store {
  int fd;
  int event_fd;
  bool direct;
  bool closing;
  uint64_t pages;
  uint32_t queue_depth;
  struct io_uring ring;
  bool ring_ready;

  /* Bounce buffers: queue_depth pages in one aligned, locked, registered block. */
  uint8_t *bounce;
  bool bounce_locked;
  uint32_t *free_bounce; /* stack of free buffer indices */
  uint32_t free_bounce_count;
  struct spill_io **owner; /* request using each buffer, or NULL */
  uint8_t *retries;        /* per buffer: resubmissions of the current request */

  uint32_t syncs_in_flight; /* fdatasyncs in the ring (they hold no bounce buffer) */

  /* Requests waiting for a buffer, oldest first. */
  struct spill_io *queue_head, *queue_tail;
  /* Requests that failed before reaching the kernel; reap delivers them so callbacks
   * never run inside spill_store_submit. */
  struct spill_io *failed_head, *failed_tail;

  struct slot_allocator slots;
};

/* ---- Errors ---------------------------------------------------------------------- */


/* ---- Slots ------------------------------------------------------------------------ */

int64_t spill_store_alloc_slot(struct spill_store *s)
{
  return slot_allocator_alloc(&s->slots);
}

void spill_store_free_slot(struct spill_store *s, uint64_t slot)
{
  /* A double free means the engine's map and ours disagree; freeing anyway would
   * let two pages share a slot later. */
  if (slot_allocator_release(&s->slots, slot) != 0)
    rp_log(RP_LOG_ERROR, "spill store: free of slot %" PRIu64 " which is %s", slot,
           slot >= s->pages ? "out of range" : "not allocated");
}

void spill_store_claim_slot(struct spill_store *s, uint64_t slot)
{
  /* Idempotent: write-through claims slot N again each time page N is rewritten. */
  if (slot_allocator_claim(&s->slots, slot) != 0)
    rp_log(RP_LOG_ERROR, "spill store: claim of slot %" PRIu64 " past capacity %" PRIu64,
           slot, s->pages);
}

uint64_t spill_store_capacity(const struct spill_store *s)
{
  return s->pages;
}
uint64_t spill_store_used(const struct spill_store *s)
{
  return s->slots.in_use;
}
bool spill_store_is_direct(const struct spill_store *s)
{
  return s->direct;
}
int spill_store_event_fd(const struct spill_store *s)
{
  return s->event_fd;
}

/* ---- Opening the file ------------------------------------------------------------ */

/* Not /tmp: it is often tmpfs, i.e. RAM, which is what we are trying to free. */
static const char *temp_dir_for(const struct spill_store_options *opts)
{
  if (opts->temp_dir && *opts->temp_dir)
    return opts->temp_dir;
  const char *env = getenv("TMPDIR");
  if (env && *env)
    return env;
  return "/var/tmp";
}

/* An unlinked file in dir, so it vanishes however the process ends. O_TMPFILE never
 * gives it a name; where the file system lacks O_TMPFILE, mkstemp + unlink leaves a
 * name only for an instant. */
static int open_temp(const char *dir, char *err, size_t errlen)
{
  int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0)
    return fd;
  int e = errno;
  if (e == EOPNOTSUPP || e == EISDIR || e == EINVAL) {
    char tmpl[PATH_MAX];
    int n = snprintf(tmpl, sizeof tmpl, "%s/rampart-spill-XXXXXX", dir);
    if (n < 0 || (size_t)n >= sizeof tmpl) {
      rp_msgf(err, errlen, "spill store: temporary directory %s: name too long", dir);
      return -1;
    }
    fd = mkostemp(tmpl, O_CLOEXEC);
    if (fd >= 0) {
      unlink(tmpl);
      return fd;
    }
    e = errno;
  }
  rp_msgf(err, errlen,
          "spill store: cannot create a temporary file in %s: %s: set temp_dir (or "
          "TMPDIR) to a writable directory on a local disk",
          dir, strerror(e));
  return -1;
}

/* A spill file or device already there. A link is followed only to a block device (the
 * names udev makes, /dev/disk/by-id/...): the pager runs as root, and a link planted at
 * a file's path would have it write pages over whatever the link names. On a block
 * device O_EXCL (without O_CREAT) claims it exclusively, so a mounted partition or an
 * active swap device is refused instead of overwritten. */
static int open_existing(const char *path)
{
  struct stat st;
  if (lstat(path, &st) < 0)
    return -1;
  if (!S_ISLNK(st.st_mode))
    return open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | (S_ISBLK(st.st_mode) ? O_EXCL : 0));
  if (stat(path, &st) == 0 && !S_ISBLK(st.st_mode)) {
    errno = ELOOP;
    return -1;
  }
  int fd = open(path, O_RDWR | O_EXCL | O_CLOEXEC);
  if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISBLK(st.st_mode))) {
    close(fd);
    errno = ELOOP;
    return -1;
  }
  return fd;
}

/* Creates the file if missing, remembering whether we did so a failed open can remove
 * it again instead of leaving a half-allocated file behind. */
static int open_path(const char *path, bool *created, char *err, size_t errlen)
{
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd >= 0) {
    *created = true;
    return fd;
  }
  if (errno == EEXIST)
    fd = open_existing(path);
  if (fd >= 0)
    return fd;
  int e = errno;
  if (e == ELOOP) {
    rp_msgf(err, errlen, "spill=%s: %s (a link may lead only to a block device)", path,
            rp_file_why(e));
    return -1;
  }
  const char *advice = e == ENOENT   ? "create its directory or choose another path"
                       : e == EBUSY  ? "the device is in use (mounted, swap or opened by "
                                       "another program): choose an unused device"
                       : e == EACCES ? "check the permissions of the file and its directory"
                       : e == EISDIR ? "give a file name, not a directory"
                       : e == EROFS  ? "choose a path on a writable file system"
                                     : "choose another path";
  rp_msgf(err, errlen, "spill=%s: cannot open: %s: %s", path, strerror(e), advice);
  return -1;
}

/* O_DIRECT is switched on after opening, rather than passed to open(), so the temp
 * file, mkstemp and named paths share one fallback and a refused O_DIRECT never needs
 * a second open of a path that may have changed meanwhile. */
static void enable_direct(struct spill_store *s, const char *what)
{
  int flags = fcntl(s->fd, F_GETFL);
  if (flags >= 0 && fcntl(s->fd, F_SETFL, flags | O_DIRECT) == 0) {
    s->direct = true;
    return;
  }
  static int warned;
  if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
    rp_log(RP_LOG_WARN,
           "%s: the file system refuses O_DIRECT (%s); using buffered I/O, "
           "so spilled pages also occupy the page cache: put the spill file on a disk "
           "file system (ext4, xfs) instead of tmpfs or ramfs",
           what, strerror(errno));
  s->direct = false;
}

/* Regular files are preallocated so writes under memory pressure never need the file
 * system to find blocks; a block device must simply be big enough. */
static int size_backing(struct spill_store *s, const char *what, char *err, size_t errlen)
{
  uint64_t bytes = s->pages * SPILL_PAGE_SIZE;
  struct stat st;
  if (fstat(s->fd, &st) != 0) {
    rp_msgf(err, errlen, "%s: fstat: %s", what, strerror(errno));
    return -1;
  }
  if (S_ISBLK(st.st_mode)) {
    uint64_t dev_bytes = 0;
    if (ioctl(s->fd, BLKGETSIZE64, &dev_bytes) != 0) {
      rp_msgf(err, errlen, "%s: cannot read the device size: %s", what, strerror(errno));
      return -1;
    }
    if (dev_bytes < bytes) {
      rp_msgf(err, errlen,
              "%s: the device holds %" PRIu64 " MiB but %" PRIu64 " pages need %" PRIu64
              " MiB: use a bigger device or a smaller size",
              what, dev_bytes >> 20, s->pages, bytes >> 20);
      return -1;
    }
    return 0;
  }
  if (!S_ISREG(st.st_mode)) {
    rp_msgf(err, errlen, "%s: not a regular file or a block device: choose a file path",
            what);
    return -1;
  }
  if (fallocate(s->fd, 0, 0, (off_t)bytes) == 0)
    return 0;
  int e = errno;
  if (e == ENOSPC || e == EFBIG || e == EDQUOT) {
    rp_msgf(err, errlen,
            "%s: %s for %" PRIu64 " pages (%" PRIu64 " MiB): free space or choose a "
            "smaller size",
            what, e == ENOSPC ? "no space left on its file system" : strerror(e), s->pages,
            bytes >> 20);
    return -1;
  }
  if (e != EOPNOTSUPP) {
    rp_msgf(err, errlen, "%s: cannot preallocate %" PRIu64 " MiB: %s", what, bytes >> 20,
            strerror(e));
    return -1;
  }
  rp_log(RP_LOG_WARN,
         "%s: the file system cannot preallocate; the file is sparse and "
         "writes may need new blocks under memory pressure",
         what);
  if ((uint64_t)st.st_size < bytes && ftruncate(s->fd, (off_t)bytes) != 0) {
    rp_msgf(err, errlen, "%s: cannot extend to %" PRIu64 " MiB: %s", what, bytes >> 20,
            strerror(errno));
    return -1;
  }
  return 0;
}

/* ---- Ring and buffers ------------------------------------------------------------ */

static int setup_buffers(struct spill_store *s, const char *what, char *err, size_t errlen)
{
  uint32_t qd = s->queue_depth;
  size_t bytes = (size_t)qd * SPILL_PAGE_SIZE;
  void *mem = NULL;
  int rc = posix_memalign(&mem, SPILL_PAGE_SIZE, bytes);
  if (rc != 0) {
    rp_msgf(err, errlen, "%s: cannot allocate %zu KiB of buffers: %s", what, bytes >> 10,
            strerror(rc));
    return -1;
  }
  s->bounce = mem;
  /* Touch every page now so the first spill under pressure does not fault them in. */
  memset(s->bounce, 0, bytes);
  if (mlock(s->bounce, bytes) == 0)
    s->bounce_locked = true;
  else if (errno == EPERM || errno == ENOMEM)
    rp_log(RP_LOG_DEBUG,
           "spill store: mlock of %zu KiB of buffers: %s (registered buffers "
           "are pinned by the kernel anyway)",
           bytes >> 10, strerror(errno));

  s->free_bounce = calloc(qd, sizeof *s->free_bounce);
  s->owner = calloc(qd, sizeof *s->owner);
  s->retries = calloc(qd, sizeof *s->retries);
  if (!s->free_bounce || !s->owner || !s->retries) {
    rp_msgf(err, errlen, "%s: out of memory", what);
    return -1;
  }
  /* Pushed in reverse so buffer 0 is handed out first. */
  for (uint32_t i = 0; i < qd; i++)
    s->free_bounce[i] = qd - 1 - i;
  s->free_bounce_count = qd;
  return 0;
}

static int setup_ring(struct spill_store *s, const char *what, char *err, size_t errlen)
{
  int rc = io_uring_queue_init(s->queue_depth, &s->ring, 0);
  if (rc < 0) {
    rp_msgf(err, errlen, "%s: cannot set up io_uring with %u entries: %s%s", what,
            s->queue_depth, strerror(-rc),
            rc == -EPERM    ? ": io_uring is disabled (sysctl kernel.io_uring_disabled)"
            : rc == -ENOMEM ? ": raise the memlock limit (ulimit -l) or lower queue_depth"
                            : "");
    return -1;
  }
  s->ring_ready = true;

  /* One registration covering every buffer: a fixed read/write may address any part of
   * a registered buffer, and one iovec needs no temporary array. */
  struct iovec iov = { .iov_base = s->bounce,
                       .iov_len = (size_t)s->queue_depth * SPILL_PAGE_SIZE };
  rc = io_uring_register_buffers(&s->ring, &iov, 1);
  if (rc < 0) {
    rp_msgf(err, errlen, "%s: cannot register %zu KiB of buffers: %s%s", what,
            iov.iov_len >> 10, strerror(-rc),
            rc == -ENOMEM ? ": raise the memlock limit (ulimit -l) or lower queue_depth"
                          : "");
    return -1;
  }

  s->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s->event_fd < 0) {
    rp_msgf(err, errlen, "%s: eventfd: %s", what, strerror(errno));
    return -1;
  }
  rc = io_uring_register_eventfd(&s->ring, s->event_fd);
  if (rc < 0) {
    rp_msgf(err, errlen, "%s: cannot register the eventfd: %s", what, strerror(-rc));
    return -1;
  }
  return 0;
}

static void destroy(struct spill_store *s)
{
  if (s->ring_ready)
    io_uring_queue_exit(&s->ring); /* also drops the registered buffers and eventfd */
  if (s->event_fd >= 0)
    close(s->event_fd);
  if (s->fd >= 0)
    close(s->fd);
  if (s->bounce) {
    if (s->bounce_locked)
      munlock(s->bounce, (size_t)s->queue_depth * SPILL_PAGE_SIZE);
    free(s->bounce);
  }
  free(s->free_bounce);
  free(s->owner);
  free(s->retries);
  slot_allocator_destroy(&s->slots);
  free(s);
}

static bool check_options(const struct spill_store_options *opts, uint32_t qd, char *err,
                          size_t errlen)
{
  const char *name = opts->path ? opts->path : "(temporary file)";
  /* Offsets must fit off_t. */
  if (opts->pages == 0 || opts->pages > (uint64_t)INT64_MAX / SPILL_PAGE_SIZE) {
    rp_msgf(err, errlen, "spill=%s: size of %" PRIu64 " pages is %s", name, opts->pages,
            opts->pages == 0 ? "zero: give a size" : "too large");
    return false;
  }
  if (qd > SPILL_MAX_QD) {
    rp_msgf(err, errlen, "spill=%s: queue depth %u is above the limit of %u", name, qd,
            SPILL_MAX_QD);
    return false;
  }
  return true;
}

struct spill_store *spill_store_open(const struct spill_store_options *opts, char *err,
                                     size_t errlen)
{
  if (errlen)
    err[0] = '\0';
  uint32_t qd = opts->queue_depth ? opts->queue_depth : SPILL_DEFAULT_QD;
  if (!check_options(opts, qd, err, errlen))
    return NULL;

  struct spill_store *s = calloc(1, sizeof *s);
  if (!s) {
    rp_msgf(err, errlen, "spill store: out of memory");
    return NULL;
  }
  s->fd = -1;
  s->event_fd = -1;
  s->pages = opts->pages;
  s->queue_depth = qd;

  char what[PATH_MAX + 40];
  bool created = false;
  if (opts->path) {
    snprintf(what, sizeof what, "spill=%s", opts->path);
    s->fd = open_path(opts->path, &created, err, errlen);
  } else {
    const char *dir = temp_dir_for(opts);
    snprintf(what, sizeof what, "spill file (temporary, in %s)", dir);
    s->fd = open_temp(dir, err, errlen);
  }
  if (s->fd < 0)
    goto fail;
  enable_direct(s, what);
  if (size_backing(s, what, err, errlen) != 0 ||
      slot_allocator_init(&s->slots, s->pages) != 0 ||
      setup_buffers(s, what, err, errlen) != 0 || setup_ring(s, what, err, errlen) != 0)
    goto fail;
  rp_log(RP_LOG_DEBUG, "%s: %" PRIu64 " pages, queue depth %u, %s I/O", what, s->pages, qd,
         s->direct ? "direct" : "buffered");
  return s;

fail:
  if (errlen && err[0] == '\0')
    rp_msgf(err, errlen, "%s: out of memory", what);
  if (created && opts->path)
    unlink(opts->path);
  destroy(s);
  return NULL;
}

/* ---- Submission ------------------------------------------------------------------ */

/* Wakes the owner's loop so it calls reap, for work that no CQE will announce. */
static void kick(struct spill_store *s)
{
  uint64_t one = 1;
  ssize_t ignored = write(s->event_fd, &one, sizeof one);
  (void)ignored; /* EAGAIN only when the counter is saturated, i.e. already readable */
}

static void fail_later(struct spill_store *s, struct spill_io *io, int result)
{
  io->result = result;
  io->bounce_index = -1;
  FIFO_APPEND(s->failed_head, s->failed_tail, io, next_queued);
  kick(s);
}

static int enter_kernel(struct spill_store *s)
{
  for (;;) {
    int rc = io_uring_submit(&s->ring);
    if (rc != -EINTR)
      return rc;
  }
}

void spill_store_flush_submissions(struct spill_store *s)
{
  if (io_uring_sq_ready(&s->ring) == 0)
    return;
  int rc = enter_kernel(s);
  if (rc >= 0)
    return;
  /* The SQEs stay in the ring and go with the next successful submit; make sure a reap
   * (which flushes again) comes even if nothing else is in flight. */
  if (rc != -EAGAIN && rc != -EBUSY)
    rp_log(RP_LOG_ERROR, "spill store: io_uring submit: %s", strerror(-rc));
  kick(s);
}

static uint8_t *bounce_of(struct spill_store *s, uint32_t index)
{
  return s->bounce + (size_t)index * SPILL_PAGE_SIZE;
}

static bool prep_sqe(struct spill_store *s, struct spill_io *io, uint32_t index)
{
  struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
  if (!sqe) {
    /* Cannot happen without SQPOLL (the SQ has as many entries as there are buffers),
     * but if it does, pushing what is queued makes room. */
    enter_kernel(s);
    sqe = io_uring_get_sqe(&s->ring);
    if (!sqe)
      return false;
  }
  off_t offset = (off_t)(io->slot * SPILL_PAGE_SIZE);
  if (io->sync)
    io_uring_prep_fsync(sqe, s->fd, IORING_FSYNC_DATASYNC);
  else if (io->write)
    io_uring_prep_write_fixed(sqe, s->fd, bounce_of(s, index), SPILL_PAGE_SIZE, offset, 0);
  else
    io_uring_prep_read_fixed(sqe, s->fd, bounce_of(s, index), SPILL_PAGE_SIZE, offset, 0);
  io_uring_sqe_set_data(sqe, io);
  return true;
}

static void release_bounce(struct spill_store *s, uint32_t index);

static void start(struct spill_store *s, struct spill_io *io, uint32_t index)
{
  s->owner[index] = io;
  s->retries[index] = 0;
  io->bounce_index = (int)index;
  if (io->write)
    memcpy(bounce_of(s, index), io->page, SPILL_PAGE_SIZE);
  if (!prep_sqe(s, io, index)) {
    rp_log(RP_LOG_ERROR, "spill store: no submission queue entry free");
    release_bounce(s, index);
    fail_later(s, io, -EIO);
  }
}

/* A freed buffer goes straight to the oldest waiting request, which keeps the queue
 * FIFO: a new submit only takes a free buffer when nobody is waiting. */
static void release_bounce(struct spill_store *s, uint32_t index)
{
  s->owner[index] = NULL;
  if (s->queue_head && !s->closing) {
    struct spill_io *next;
    FIFO_POP(s->queue_head, s->queue_tail, next, next_queued);
    start(s, next, index);
    return;
  }
  s->free_bounce[s->free_bounce_count++] = index;
}

/* Completed O_DIRECT writes may still sit in the device's volatile cache, and writes
 * into preallocated (unwritten) extents change metadata: fdatasync covers both. Through
 * the ring, so the engine's loop never waits on the disk for a flush. */
/* What every submit does first: the store's fields of io reset, and a closing store
 * refuses it (delivered from reap, never from here). false: io is taken care of. */
static bool submit_begin(struct spill_store *s, struct spill_io *io, bool sync)
{
  io->sync = sync;
  io->next_queued = NULL;
  io->bounce_index = -1;
  io->result = 0;
  if (s->closing) {
    fail_later(s, io, -ECANCELED);
    return false;
  }
  return true;
}

void spill_store_submit_sync(struct spill_store *s, struct spill_io *io)
{
  if (!submit_begin(s, io, true))
    return;
  if (!prep_sqe(s, io, 0)) {
    rp_log(RP_LOG_ERROR, "spill store: no submission queue entry free for a sync");
    fail_later(s, io, -EIO);
    return;
  }
  s->syncs_in_flight++;
}

static void group_synced(struct spill_io *io);

static void group_submit(struct spill_group_sync *g)
{
  g->running = true;
  g->wanted = false;
  g->cover(g);
  memset(&g->io, 0, sizeof g->io);
  g->io.done = group_synced;
  g->io.user = g;
  spill_store_submit_sync(g->store, &g->io);
}

static void group_synced(struct spill_io *io)
{
  struct spill_group_sync *g = io->user;
  g->running = false;
  g->synced(g, io->result);
  /* What asked meanwhile gets the next fdatasync (unless a flush completed just now
   * asked again, and started it). */
  if (g->wanted && !g->running)
    group_submit(g);
}

void spill_store_group_sync(struct spill_store *s, struct spill_group_sync *g)
{
  g->store = s;
  g->wanted = true;
  if (!g->running)
    group_submit(g);
}

void spill_store_submit(struct spill_store *s, struct spill_io *io)
{
  if (!submit_begin(s, io, false))
    return;
  if (io->slot >= s->pages || !io->page) {
    fail_later(s, io, -EINVAL);
    return;
  }
  if (s->free_bounce_count > 0 && !s->queue_head) {
    start(s, io, s->free_bounce[--s->free_bounce_count]);
    return;
  }
  FIFO_APPEND(s->queue_head, s->queue_tail, io, next_queued);
}

/* ---- Completion ------------------------------------------------------------------ */

static void drain_event_fd(struct spill_store *s)
{
  uint64_t count;
  ssize_t ignored = read(s->event_fd, &count, sizeof count);
  (void)ignored; /* EAGAIN: nothing signalled, which is fine */
}

static bool is_transient(int res)
{
  return res == -EAGAIN || res == -EINTR;
}

/* Handles one CQE; returns the finished request, or NULL if it was resubmitted. */
static struct spill_io *complete_sync(struct spill_store *s, struct spill_io *io, int res)
{
  if (is_transient(res) && prep_sqe(s, io, 0))
    return NULL;
  s->syncs_in_flight--;
  io->result = res;
  if (res < 0)
    rp_log(RP_LOG_ERROR, "spill store: fdatasync failed: %s", strerror(-res));
  return io;
}

static struct spill_io *complete(struct spill_store *s, struct spill_io *io, int res)
{
  if (io->sync)
    return complete_sync(s, io, res);
  uint32_t index = (uint32_t)io->bounce_index;
  if (is_transient(res) && s->retries[index] < SPILL_MAX_RETRIES) {
    s->retries[index]++;
    if (prep_sqe(s, io, index))
      return NULL;
  }
  if (res == (int)SPILL_PAGE_SIZE) {
    if (!io->write)
      memcpy(io->page, bounce_of(s, index), SPILL_PAGE_SIZE);
    io->result = 0;
  } else {
    /* A short transfer of an aligned 4 KiB block means the device or file is not what
     * we sized it to be; report it as an I/O error rather than retrying. */
    io->result = res < 0 ? res : -EIO;
    rp_log(RP_LOG_ERROR, "spill store: %s of slot %" PRIu64 " failed: %s",
           io->write ? "write" : "read", io->slot,
           res < 0 ? strerror(-res) : "short transfer");
  }
  io->bounce_index = -1;
  release_bounce(s, index);
  return io;
}

static unsigned run_failed(struct spill_store *s)
{
  unsigned n = 0;
  while (s->failed_head) {
    struct spill_io *io;
    FIFO_POP(s->failed_head, s->failed_tail, io, next_queued);
    io->done(io);
    n++;
  }
  return n;
}

unsigned spill_store_reap(struct spill_store *s)
{
  /* Drained before looking at the CQ, so a completion posted after this point signals
   * the eventfd again and is not missed by a level-triggered watcher. */
  drain_event_fd(s);
  unsigned n = run_failed(s);
  for (;;) {
    struct io_uring_cqe *cqe;
    if (io_uring_peek_cqe(&s->ring, &cqe) != 0)
      break;
    struct spill_io *io = io_uring_cqe_get_data(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&s->ring, cqe);
    io = complete(s, io, res);
    if (io) {
      io->done(io);
      n++;
    }
    n += run_failed(s);
  }
  /* Requests started on freed buffers, retries and whatever the callbacks submitted. */
  spill_store_flush_submissions(s);
  return n;
}

static uint32_t in_flight(const struct spill_store *s)
{
  return s->queue_depth - s->free_bounce_count + s->syncs_in_flight;
}

/* Blocks until a completion is available (submitting anything prepared first). */
static void wait_for_completion(struct spill_store *s)
{
  int rc = io_uring_submit_and_wait(&s->ring, 1);
  if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
    rp_log(RP_LOG_ERROR, "spill store: waiting for completions: %s", strerror(-rc));
}

/* ---- Blocking helpers ------------------------------------------------------------ */

static void mark_done(struct spill_io *io)
{
  *(bool *)io->user = true;
}

static int run_sync(struct spill_store *s, bool write, uint64_t slot, uint8_t *page)
{
  bool done = false;
  struct spill_io io = {
    .write = write, .slot = slot, .page = page, .done = mark_done, .user = &done
  };
  spill_store_submit(s, &io);
  while (!done) {
    if (spill_store_reap(s) > 0 || done)
      continue;
    wait_for_completion(s);
  }
  return io.result;
}

int spill_store_write_sync(struct spill_store *s, uint64_t slot, const uint8_t *page)
{
  /* The store only reads a write's page; the cast serves the shared struct. */
  return run_sync(s, true, slot, (uint8_t *)(uintptr_t)page);
}

int spill_store_read_sync(struct spill_store *s, uint64_t slot, uint8_t *page)
{
  return run_sync(s, false, slot, page);
}

int spill_store_sync(struct spill_store *s)
{
  bool done = false;
  struct spill_io io = { .done = mark_done, .user = &done };
  spill_store_submit_sync(s, &io);
  spill_store_flush_submissions(s);
  while (!done) {
    if (spill_store_reap(s) > 0 || done)
      continue;
    wait_for_completion(s);
  }
  return io.result;
}

void spill_store_close(struct spill_store *s)
{
  if (!s)
    return;
  /* Requests still waiting for a buffer never reach the disk; their owners hear so. */
  s->closing = true;
  struct spill_io *queued;
  FIFO_TAKE_ALL(s->queue_head, s->queue_tail, queued);
  while (queued) {
    struct spill_io *io = queued;
    queued = io->next_queued; /* before fail_later links io into the failed queue */
    fail_later(s, io, -ECANCELED);
  }
  /* The kernel is still writing into (or reading from) the bounce buffers and the
   * caller's requests must get their callbacks: wait for every one before freeing. */
  spill_store_flush_submissions(s);
  while (in_flight(s) > 0 || s->failed_head) {
    if (spill_store_reap(s) > 0)
      continue;
    if (in_flight(s) > 0)
      wait_for_completion(s);
  }
  destroy(s);
}
