/* A libfuse worker's side of the engine: its read buffer, its wake-up, and the requests
 * it hands the engine and waits for by reading the servers' replies itself
 * (rampart_reap_or_fd), where the blocking forms would sleep until the engine's I/O
 * thread read the reply and woke it: one sleep and one wake per page-in, not two.
 *
 * The engine lends the servers' sockets to one reading thread at a time; the others
 * wait on their eventfds, and the engine tells one of them to read in its place when
 * that thread leaves (engine_reap.c).
 *
 * Errors: fuse_worker_run returns 0 or the engine's negative errno, -ENOMEM when the
 * worker's buffer or wake-up cannot be made (CONTRIBUTING.md, convention 2);
 * fuse_worker_read_buffer returns NULL then.
 */
#ifndef RAMPART_FUSE_WORKER_H
#define RAMPART_FUSE_WORKER_H

#include <stdint.h>

#include "rampart.h"

struct fuse_worker;

/* The calling worker's read buffer (FUSE_DEVICE_MAX_IO bytes, page-aligned), made at
 * its first request and freed when libfuse ends the thread. */
void *fuse_worker_read_buffer(void);

/* One whole-page read or write (offset and length multiples of RAMPART_PAGE_SIZE),
 * submitted from the calling worker, which reads the replies itself until it is done. */
int fuse_worker_run(struct rampart_engine *engine, enum rampart_op op, void *buf,
                    uint32_t length, uint64_t offset);

#endif
