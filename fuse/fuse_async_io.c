/* Requests answered from their completion (fuse_async_io.h). */
#include "fuse_async_io.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "hop_trace.h"

/* How long after the last burst a read may be its worker's alone: a lone read lends the
 * servers' sockets to its worker, and the next request the pool takes gives them back to
 * the I/O thread (an epoll_ctl per socket and a wake each way). A burst is a write, or a
 * request taken while others are out; a read the pool takes with nothing else out (one
 * that came within the time) does not extend it, so a thread faulting alone gets its
 * reads back 1 ms after the last burst, however fast they come. */
#define SOLE_AFTER_NS 1000000u

struct async_slot {
  struct rampart_io io;
  fuse_req_t req;
  struct fuse_async_io_pool *pool;
  struct async_slot *next_free;
  uint8_t *buf; /* FUSE_ASYNC_IO_MAX bytes, page-aligned */
};

struct fuse_async_io_pool {
  pthread_mutex_t lock;
  pthread_cond_t all_back; /* signalled as the last request out is answered */
  struct async_slot *free;
  unsigned out;           /* taken with a slot, or the lone read a worker holds */
  uint64_t last_burst_ns; /* when the pool last took a write, or a request beside others */
  uint8_t *buffers;
  unsigned nslots;
  struct async_slot slots[];
};

struct fuse_async_io_pool *fuse_async_io_pool_new(unsigned slots)
{
  struct fuse_async_io_pool *pool = calloc(1, sizeof *pool + slots * sizeof pool->slots[0]);
  if (!pool)
    return NULL;
  if (posix_memalign((void **)&pool->buffers, RAMPART_PAGE_SIZE,
                     (size_t)slots * FUSE_ASYNC_IO_MAX) != 0) {
    free(pool);
    errno = ENOMEM;
    return NULL;
  }
  /* Touched now, so the buffers are resident (and locked) before the first swap-out
   * needs them. */
  memset(pool->buffers, 0, (size_t)slots * FUSE_ASYNC_IO_MAX);
  pthread_mutex_init(&pool->lock, NULL);
  pthread_cond_init(&pool->all_back, NULL);
  pool->nslots = slots;
  for (unsigned i = slots; i-- > 0;) {
    struct async_slot *s = &pool->slots[i];
    s->pool = pool;
    s->buf = pool->buffers + (size_t)i * FUSE_ASYNC_IO_MAX;
    s->next_free = pool->free;
    pool->free = s;
  }
  return pool;
}

void fuse_async_io_pool_free(struct fuse_async_io_pool *pool)
{
  if (!pool)
    return;
  pthread_mutex_lock(&pool->lock);
  while (pool->out > 0)
    pthread_cond_wait(&pool->all_back, &pool->lock);
  pthread_mutex_unlock(&pool->lock);
  pthread_cond_destroy(&pool->all_back);
  pthread_mutex_destroy(&pool->lock);
  free(pool->buffers);
  free(pool);
}

static struct async_slot *slot_take(struct fuse_async_io_pool *pool, enum rampart_op op)
{
  pthread_mutex_lock(&pool->lock);
  struct async_slot *s = pool->free;
  if (s) {
    pool->free = s->next_free;
    if (op == RAMPART_OP_WRITE || pool->out > 0)
      pool->last_burst_ns = rp_now_ns();
    pool->out++;
  }
  pthread_mutex_unlock(&pool->lock);
  return s;
}

/* Under the pool's lock. */
static void request_ended(struct fuse_async_io_pool *pool)
{
  if (--pool->out == 0)
    pthread_cond_broadcast(&pool->all_back);
}

static void slot_give_back(struct async_slot *s)
{
  struct fuse_async_io_pool *pool = s->pool;
  pthread_mutex_lock(&pool->lock);
  s->next_free = pool->free;
  pool->free = s;
  request_ended(pool);
  pthread_mutex_unlock(&pool->lock);
}

bool fuse_async_io_claim_sole(struct fuse_async_io_pool *pool)
{
  if (!pool)
    return false;
  pthread_mutex_lock(&pool->lock);
  bool sole = pool->out == 0 && rp_now_ns() - pool->last_burst_ns >= SOLE_AFTER_NS;
  pool->out += sole;
  pthread_mutex_unlock(&pool->lock);
  return sole;
}

void fuse_async_io_release_sole(struct fuse_async_io_pool *pool)
{
  pthread_mutex_lock(&pool->lock);
  request_ended(pool);
  pthread_mutex_unlock(&pool->lock);
}

/* On the thread that completed the request, often the engine's I/O thread with a batch
 * of replies: the answer is one writev to /dev/fuse, which ends the kernel's request
 * there. */
static void answer(struct rampart_io *io, int result)
{
  struct async_slot *s = io->user;
  if (result < 0)
    fuse_reply_err(s->req, -result);
  else if (io->op == RAMPART_OP_READ)
    fuse_reply_buf(s->req, (const char *)s->buf, io->length);
  else
    fuse_reply_write(s->req, io->length);
  rp_hop(RP_HOP_FRONTEND_OUT);
  slot_give_back(s);
}

bool fuse_async_io_take(struct fuse_async_io_pool *pool, struct rampart_engine *engine,
                        fuse_req_t req, enum rampart_op op, const void *write_buf,
                        size_t size, uint64_t offset)
{
  if (!pool || size > FUSE_ASYNC_IO_MAX || ((size | offset) & (RAMPART_PAGE_SIZE - 1)))
    return false;
  struct async_slot *s = slot_take(pool, op);
  if (!s)
    return false;
  if (op == RAMPART_OP_WRITE)
    memcpy(s->buf, write_buf, size);
  s->req = req;
  s->io = (struct rampart_io){ .op = op,
                               .flags = RAMPART_IO_NO_REAPER,
                               .offset = offset,
                               .length = (uint32_t)size,
                               .buf = s->buf,
                               .done = answer,
                               .user = s };
  rampart_submit(engine, &s->io);
  return true;
}
