/* Requests answered from their completion: a libfuse worker hands a whole-page read or
 * write to the engine with a buffer of this pool and goes back for the next request at
 * once; whichever thread completes it (the engine's I/O thread reading a batch of
 * replies, a worker submitting inline, a reaper) answers the kernel with it. A worker
 * that waits for its own request holds one request per thread: under swap the loop
 * device has 19-36 requests in flight and 8 workers take 8 of them. Here every request
 * the kernel sends can be out at once, up to the pool's slots, and the engine's I/O
 * thread answers a batch of them per wake (fuse/README.md has what it buys).
 *
 * A request the pool cannot take (longer than a slot's buffer, not whole pages, or every
 * slot out) is the caller's to serve on its own thread.
 *
 * Errors: fuse_async_io_pool_new returns NULL with errno (ENOMEM); the kernel gets the
 * engine's errno as FUSE's positive one (docs/CONTRIBUTING.md, convention 2).
 */
#ifndef RAMPART_FUSE_ASYNC_IO_H
#define RAMPART_FUSE_ASYNC_IO_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <stdbool.h>
#include <stdint.h>

#include "rampart.h"

/* A slot's buffer: 32 pages, more than a swap-in's readahead (at most 8) and most
 * swap-out clusters; a longer request holds its worker. */
#define FUSE_ASYNC_IO_MAX (128u << 10)

struct fuse_async_io_pool;

/* slots requests at once, each with a FUSE_ASYNC_IO_MAX buffer (locked with the rest of
 * the process). */
struct fuse_async_io_pool *fuse_async_io_pool_new(unsigned slots);

/* Waits until every request taken is answered, then frees the pool. The engine must
 * still be running (it completes them) and the session not yet unmounted (they answer
 * through its /dev/fuse descriptor, which the unmount closes). */
void fuse_async_io_pool_free(struct fuse_async_io_pool *pool);

/* A read that finds nothing out (none taken by the pool, no burst for SOLE_AFTER_NS, no
 * other worker holding one this way) is faster on its own worker, which reads its
 * reply itself (fuse_worker_run) and may spin for it (poll-us=): a thread faulting
 * alone, queue depth 1, where the I/O thread's answer costs a wake-up more
 * (docs/page-in.md). True: the caller holds the one request out, and gives it back
 * with fuse_async_io_release_sole once it completed, before it answers (the faulting
 * thread's next read may come the moment it does); requests that come meanwhile go to
 * the pool, and the worker reads their replies while it waits for its own. False (and
 * always without a pool): take it to the pool. */
bool fuse_async_io_claim_sole(struct fuse_async_io_pool *pool);
void fuse_async_io_release_sole(struct fuse_async_io_pool *pool);

/* Takes the read or write (op) of size bytes at offset, whole pages, and answers req
 * when the engine completes it: true. The answer runs in the engine's completion, under
 * its lock, on whichever thread completes it (inside this call, when the engine ends
 * the request at once): it only writes to /dev/fuse, never calls the engine. False: not
 * taken; req is still the caller's. A write's bytes are copied into the slot, since
 * libfuse reuses its buffer once the handler returns. */
bool fuse_async_io_take(struct fuse_async_io_pool *pool, struct rampart_engine *engine,
                        fuse_req_t req, enum rampart_op op, const void *write_buf,
                        size_t size, uint64_t offset);

#endif
