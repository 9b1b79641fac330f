/* A libfuse worker's wait for the engine (fuse_worker.h). */
#include "fuse_worker.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "fuse_device_file.h"

struct worker_request {
  struct rampart_io io;
  struct fuse_worker *worker;
  _Atomic bool done;
  int result;
};

struct fuse_worker {
  int wake_fd; /* an eventfd: written when another thread completes this one's request */
  void *read_buf;
};

static _Thread_local struct fuse_worker *this_worker;
static pthread_key_t worker_key; /* frees the worker when libfuse ends its thread */
static pthread_once_t worker_key_once = PTHREAD_ONCE_INIT;

static void end_worker(void *p)
{
  struct fuse_worker *w = p;
  close(w->wake_fd);
  free(w->read_buf);
  free(w);
}

static void make_worker_key(void)
{
  if (pthread_key_create(&worker_key, end_worker) != 0)
    abort(); /* only EAGAIN or ENOMEM, at start-up: nothing could be served */
}

static struct fuse_worker *worker(void)
{
  if (this_worker)
    return this_worker;
  pthread_once(&worker_key_once, make_worker_key);
  struct fuse_worker *w = calloc(1, sizeof *w);
  if (!w)
    return NULL;
  w->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (w->wake_fd < 0 || posix_memalign(&w->read_buf, RAMPART_PAGE_SIZE, FUSE_DEVICE_MAX_IO) ||
      pthread_setspecific(worker_key, w) != 0) {
    if (w->wake_fd >= 0)
      close(w->wake_fd);
    free(w->read_buf);
    free(w);
    return NULL;
  }
  this_worker = w;
  return w;
}

void *fuse_worker_read_buffer(void)
{
  struct fuse_worker *w = worker();
  return w ? w->read_buf : NULL;
}

static void wake(struct fuse_worker *w)
{
  uint64_t one = 1;
  while (write(w->wake_fd, &one, sizeof one) < 0 && errno == EINTR)
    ;
}

static void drain_wakes(struct fuse_worker *w)
{
  uint64_t count;
  ssize_t ignored = read(w->wake_fd, &count, sizeof count);
  (void)ignored; /* EAGAIN: another pass drained it first */
}

/* Runs on the worker's own thread (in rampart_submit or rampart_reap_or_fd) or on
 * another: the engine's I/O thread, or a worker reading replies. Only another thread's
 * completion costs a wake. The worker outlives its request (libfuse keeps every worker
 * made), so a wake that lands after it has returned only makes its next wait look once
 * more. */
static void request_done(struct rampart_io *io, int result)
{
  struct worker_request *r = io->user;
  struct fuse_worker *w = r->worker;
  r->result = result;
  atomic_store_explicit(&r->done, true, memory_order_release);
  if (w != this_worker)
    wake(w);
}

int fuse_worker_run(struct rampart_engine *engine, enum rampart_op op, void *buf,
                    uint32_t length, uint64_t offset)
{
  struct fuse_worker *w = worker();
  if (!w)
    return -ENOMEM;
  struct worker_request r = { .io = { .op = op,
                                      .offset = offset,
                                      .length = length,
                                      .buf = buf,
                                      .done = request_done,
                                      .user = &r },
                              .worker = w };
  rampart_submit(engine, &r.io);
  while (!atomic_load_explicit(&r.done, memory_order_acquire))
    if (rampart_reap_or_fd(engine, w->wake_fd))
      drain_wakes(w);
  return r.result;
}
