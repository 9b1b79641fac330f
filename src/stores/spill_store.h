/* The local-disk page store: where pages go when no server can hold them, and the
 * second copy under write-through. A file or a block device addressed in 4 KiB slots,
 * written with io_uring and O_DIRECT through registered (fixed) bounce buffers that are
 * allocated and locked at open, so the fallback path allocates no memory while the host
 * is under memory pressure and never dirties the page cache.
 *
 * Threading: one spill store belongs to one I/O thread (the engine's). Completions are
 * signalled on an eventfd, which the engine's libev loop watches; spill_store_reap()
 * then runs the callbacks on that thread.
 *
 * Errors: opening: NULL with a sentence in err (CONTRIBUTING.md, convention 1);
 * I/O: 0 or negative errno in a completion's result (convention 2).
 */
#ifndef RAMPART_SPILL_STORE_H
#define RAMPART_SPILL_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


struct spill_store;

struct spill_store_options {
  const char *path; /* file or block device; NULL: an unlinked temporary file */
  const char *
    temp_dir; /* where the temporary file goes when path is NULL; NULL: $TMPDIR or /var/tmp */
  uint64_t pages; /* capacity in 4 KiB slots; a file is preallocated (fallocate) to this */
  uint32_t queue_depth; /* io_uring entries and bounce buffers; 0: 64 */
};

/* Opens (creating and preallocating a regular file if needed) and sets up the ring and
 * registered buffers. A block device must be at least pages * 4 KiB. Falls back to
 * buffered I/O with a warning only where the file system refuses O_DIRECT (tmpfs).
 * NULL with err on failure, saying what to do (e.g. "spill=PATH: no space left on ...:
 * free space or choose a smaller size"). */
struct spill_store *spill_store_open(const struct spill_store_options *opts, char *err,
                                     size_t errlen);
/* Waits for the I/O in flight and runs its callbacks; requests still queued for a
 * bounce buffer complete with -ECANCELED, as does anything submitted from those
 * callbacks. A temporary file disappears with its descriptor. */
void spill_store_close(struct spill_store *store);

uint64_t spill_store_capacity(const struct spill_store *store);
uint64_t spill_store_used(const struct spill_store *store);
/* Test API: false when the file system refused O_DIRECT and the store fell back to
 * buffered I/O. */
bool spill_store_is_direct(const struct spill_store *store);

/* Slot allocation inside the store (O(1), no allocation). -1 when full. */
int64_t spill_store_alloc_slot(struct spill_store *store);
void spill_store_free_slot(struct spill_store *store, uint64_t slot);
/* Marks a specific slot used (write-through keeps logical page N at slot N). */
void spill_store_claim_slot(struct spill_store *store, uint64_t slot);

struct spill_io;
typedef void (*spill_io_done_fn)(struct spill_io *io);

/* A caller-owned request, like struct rp_request. result: 0 or -errno (-EINVAL for a
 * slot past capacity, -EIO for a short transfer, -ECANCELED when the store closes
 * first). done always runs from spill_store_reap (or close), never from submit. */
struct spill_io {
  bool write;
  bool sync; /* set by spill_store_submit_sync: an fdatasync, no slot or page */
  uint64_t slot;
  uint8_t *page; /* 4096 bytes: copied into a bounce buffer (write) or out of it (read) */
  spill_io_done_fn done;
  void *user;
  int result;
  /* owned by the store */
  struct spill_io *next_queued;
  int bounce_index;
};

/* Queues the request; it is submitted to the ring as soon as a bounce buffer is free.
 * Never blocks, never allocates. */
void spill_store_submit(struct spill_store *store, struct spill_io *io);
/* Submits queued requests to the kernel (one io_uring_submit for the batch). */
void spill_store_flush_submissions(struct spill_store *store);
/* An eventfd readable when completions are waiting. */
int spill_store_event_fd(const struct spill_store *store);
/* Runs the callbacks of every completed request; returns how many. */
unsigned spill_store_reap(struct spill_store *store);

/* Test API: blocking helpers that submit one request and wait. */
int spill_store_write_sync(struct spill_store *store, uint64_t slot, const uint8_t *page);
int spill_store_read_sync(struct spill_store *store, uint64_t slot, uint8_t *page);

/* fdatasync through the ring (a flush from the frontend when write-through is on): done
 * runs from spill_store_reap with result 0 or -errno once every write that completed
 * before the submit is durable. Takes no bounce buffer; never blocks or allocates. */
void spill_store_submit_sync(struct spill_store *store, struct spill_io *io);

/* Test API: the same, blocking. 0 or -errno. */
int spill_store_sync(struct spill_store *store);

/* Group commit (write-through's flushes): one fdatasync in flight covers every flush
 * that was waiting when it was submitted; flushes arriving meanwhile wait for the next
 * one, which starts when it ends. One spill_io, no allocation, and the loop never
 * blocks on the disk. The owner keeps its waiting flushes and is told which ones a sync
 * covers: */
struct spill_group_sync {
  /* An fdatasync is being submitted: what waits now is what it covers. */
  void (*cover)(struct spill_group_sync *g);
  /* That fdatasync ended (0 or -errno): what it covered is durable, or failed. */
  void (*synced)(struct spill_group_sync *g, int result);
  void *user;
  /* owned by the store */
  struct spill_store *store;
  struct spill_io io;
  bool running; /* an fdatasync is in flight */
  bool wanted;  /* asked for since it was submitted */
};

/* Asks g for an fdatasync that starts after now: at once if none is in flight, else
 * once the one in flight ends. */
void spill_store_group_sync(struct spill_store *store, struct spill_group_sync *g);

#endif
