/* A libfuse worker's side of the engine: its read buffer, its wake-up, and the requests
 * it hands the engine and waits for by reading the servers' replies itself
 * (rampart_reap_or_fd), where the blocking forms would sleep until the engine's I/O
 * thread read the reply and woke it: one sleep and one wake per page-in, not two.
 *
 * The engine lends the servers' sockets to one reading thread at a time, and keeps them
 * lent for 100-200 ms after it leaves. So the workers waiting together are listed
 * (struct fuse_waiters): a worker whose request is done wakes one still waiting, which
 * then reads in its place, and no reply waits for the I/O thread to take its sockets
 * back.
 *
 * Errors: fuse_worker_run returns 0 or the engine's negative errno, -ENOMEM when the
 * worker's buffer or wake-up cannot be made (CONTRIBUTING.md, convention 2);
 * fuse_worker_read_buffer returns NULL then.
 */
#ifndef RAMPART_FUSE_WORKER_H
#define RAMPART_FUSE_WORKER_H

#include <pthread.h>
#include <stdint.h>

#include "rampart.h"

struct fuse_worker;

/* The workers waiting for the engine, one list per mount. */
struct fuse_waiters {
  pthread_mutex_t lock;
  struct fuse_worker *head;
};

#define FUSE_WAITERS_INIT \
  { \
    .lock = PTHREAD_MUTEX_INITIALIZER, .head = NULL \
  }

/* The calling worker's read buffer (FUSE_DEVICE_MAX_IO bytes, page-aligned), made at
 * its first request and freed when libfuse ends the thread. */
void *fuse_worker_read_buffer(void);

/* One whole-page read or write (offset and length multiples of RAMPART_PAGE_SIZE),
 * submitted from the calling worker, which reads the replies itself until it is done. */
int fuse_worker_run(struct fuse_waiters *waiters, struct rampart_engine *engine,
                    enum rampart_op op, void *buf, uint32_t length, uint64_t offset);

#endif
