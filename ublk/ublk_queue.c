/* The ublk queue thread (ublk_queue.h). */
#include "ublk_queue.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fifo.h"
#include "mailbox.h"

#define EVENT_USER_DATA UINT64_MAX /* the eventfd read; a tag otherwise */

/* The queue whose thread this is: its own completions need no lock and no wake. */
static _Thread_local struct ublk_queue *queue_of_this_thread;

/* The driver maps each queue's descriptors at its own offset: room for the largest
 * queue the driver allows, whatever this one's depth. */
static off_t descs_offset(uint16_t id)
{
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t stride = (UBLK_MAX_QUEUE_DEPTH * sizeof(struct ublksrv_io_desc) + page - 1) / page *
                  page;
  return (off_t)(UBLKSRV_CMD_BUF_OFFSET + (size_t)id * stride);
}

static struct io_uring_sqe *queue_sqe(struct ublk_queue *q)
{
  /* The ring holds 2 * depth + 2 entries and at most depth + 1 commands are ever
   * outstanding: a full submission queue only needs submitting. */
  struct io_uring_sqe *sqe;
  while (!(sqe = io_uring_get_sqe(&q->ring)))
    io_uring_submit(&q->ring);
  return sqe;
}

static void prep_io_command(struct ublk_queue *q, uint32_t op, uint16_t tag, int result)
{
  struct io_uring_sqe *sqe = queue_sqe(q);
  memset(sqe, 0, sizeof *sqe);
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = q->char_fd;
  sqe->cmd_op = op;
  sqe->user_data = tag;
  struct ublksrv_io_cmd *cmd = (struct ublksrv_io_cmd *)sqe->cmd;
  cmd->q_id = q->id;
  cmd->tag = tag;
  cmd->result = result;
  cmd->addr = (uint64_t)(uintptr_t)(q->buffers + (size_t)tag * q->max_io_bytes);
}

static void prep_event_read(struct ublk_queue *q)
{
  struct io_uring_sqe *sqe = queue_sqe(q);
  io_uring_prep_read(sqe, q->done.event_fd, &q->event_count, sizeof q->event_count, 0);
  sqe->user_data = EVENT_USER_DATA;
}

/* Runs on the queue's thread (in rampart_reap_or_fd or rampart_submit_list), or on
 * another: the engine's I/O thread or another queue's. */
static void on_engine_done(struct rampart_io *io, int result)
{
  struct ublk_tag *t = io->user;
  struct ublk_queue *q = t->queue;
  bool data = io->op == RAMPART_OP_READ || io->op == RAMPART_OP_WRITE;
  t->result = result < 0 ? result : data ? (int)io->length : 0;
  if (q == queue_of_this_thread)
    q->done_here[q->ndone_here++] = t;
  else
    rp_mailbox_post(&q->done, t);
}

/* A request the driver handed us in tag t's descriptor. */
static void start_request(struct ublk_queue *q, struct ublk_tag *t)
{
  const struct ublksrv_io_desc *d = &q->descs[t->tag];
  struct rampart_io *io = &t->io;
  memset(io, 0, sizeof *io);
  io->offset = d->start_sector << 9;
  io->length = d->nr_sectors << 9;
  io->buf = q->buffers + (size_t)t->tag * q->max_io_bytes;
  io->done = on_engine_done;
  io->user = t;
  switch (ublksrv_get_op(d)) {
  case UBLK_IO_OP_READ:
    io->op = RAMPART_OP_READ;
    break;
  case UBLK_IO_OP_WRITE:
    io->op = RAMPART_OP_WRITE;
    if (d->op_flags & UBLK_IO_F_FUA)
      io->flags = RAMPART_IO_FUA;
    break;
  case UBLK_IO_OP_FLUSH:
    io->op = RAMPART_OP_FLUSH;
    break;
  case UBLK_IO_OP_DISCARD:
    io->op = RAMPART_OP_TRIM; /* the pages' memory goes back to the servers */
    break;
  case UBLK_IO_OP_WRITE_ZEROES:
    io->op = RAMPART_OP_ZERO;
    break;
  default:
    t->result = -EOPNOTSUPP;
    prep_io_command(q, UBLK_IO_COMMIT_AND_FETCH_REQ, t->tag, t->result);
    return;
  }
  /* submitted with the rest of this pass's requests */
  FIFO_APPEND(q->batch_head, q->batch_tail, io, next);
  q->in_engine++;
}

/* Hands each completed tag's result back to the driver with a fetch of its next
 * request. */
static void commit_done_here(struct ublk_queue *q)
{
  for (unsigned i = 0; i < q->ndone_here; i++) {
    const struct ublk_tag *t = q->done_here[i];
    prep_io_command(q, UBLK_IO_COMMIT_AND_FETCH_REQ, t->tag, t->result);
  }
  q->in_engine -= q->ndone_here;
  q->ndone_here = 0;
}

/* Submits what is prepared and waits for the ring or, while requests are out at the
 * servers, for their replies too, read on this thread. */
static int wait_for_work(struct ublk_queue *q)
{
  if (q->in_engine == 0 || io_uring_cq_ready(&q->ring) > 0)
    return io_uring_submit_and_wait(&q->ring, q->in_engine == 0 ? 1 : 0);
  int r = io_uring_submit(&q->ring);
  if (r >= 0 && io_uring_cq_ready(&q->ring) == 0)
    rampart_reap_or_fd(q->engine, q->ring.ring_fd);
  commit_done_here(q);
  return r;
}

static void set_ready(struct ublk_queue *q, int state)
{
  pthread_mutex_lock(&q->ready_lock);
  q->ready = state;
  pthread_cond_broadcast(&q->ready_cond);
  pthread_mutex_unlock(&q->ready_lock);
}

static void *queue_main(void *arg)
{
  struct ublk_queue *q = arg;
  char name[16];
  snprintf(name, sizeof name, "rampart-uq%u", q->id);
  pthread_setname_np(pthread_self(), name);
  queue_of_this_thread = q;
  /* The driver takes the task that fetches as the queue's daemon: every command for this
   * queue goes through this ring, from this thread. */
  int r = io_uring_queue_init(2u * q->depth + 2, &q->ring, 0);
  if (r < 0) {
    snprintf(q->err, sizeof q->err, "cannot set up queue %u's io_uring: %s", q->id,
             strerror(-r));
    set_ready(q, r);
    return NULL;
  }
  for (uint16_t tag = 0; tag < q->depth; tag++)
    prep_io_command(q, UBLK_IO_FETCH_REQ, tag, 0);
  prep_event_read(q);
  r = io_uring_submit(&q->ring);
  if (r < 0) {
    snprintf(q->err, sizeof q->err, "queue %u cannot fetch requests from the ublk driver: %s",
             q->id, strerror(-r));
    io_uring_queue_exit(&q->ring);
    set_ready(q, r);
    return NULL;
  }
  set_ready(q, 1);
  while (q->aborted < q->depth) {
    r = wait_for_work(q);
    if (r < 0 && r != -EINTR) {
      fprintf(stderr, "rampart-ublk: queue %u: io_uring_submit: %s\n", q->id, strerror(-r));
      break;
    }
    struct io_uring_cqe *cqe;
    unsigned head, seen = 0;
    q->batch_head = q->batch_tail = NULL;
    io_uring_for_each_cqe(&q->ring, head, cqe)
    {
      seen++;
      if (cqe->user_data == EVENT_USER_DATA) {
        /* the eventfd's count is read: what other threads completed joins ours */
        q->ndone_here += rp_mailbox_take(&q->done, q->done_here + q->ndone_here);
        commit_done_here(q);
        prep_event_read(q);
        continue;
      }
      struct ublk_tag *t = &q->tags[cqe->user_data];
      if (cqe->res == UBLK_IO_RES_OK) {
        start_request(q, t);
      } else if (cqe->res == UBLK_IO_RES_ABORT) {
        q->aborted++; /* the device is stopping: this tag is given back */
      } else {
        fprintf(stderr,
                "rampart-ublk: queue %u tag %u: the driver answered %d (%s); "
                "that tag is out of service\n",
                q->id, t->tag, cqe->res, strerror(-cqe->res));
        q->aborted++;
      }
    }
    io_uring_cq_advance(&q->ring, seen);
    /* one lock and one send per server for every request this pass fetched */
    rampart_submit_list(q->engine, q->batch_head);
    commit_done_here(q); /* those that completed at once (zero pages, errors) */
  }
  io_uring_queue_exit(&q->ring);
  return NULL;
}

int ublk_queue_start(struct ublk_queue *q, int char_fd, uint16_t id, uint16_t depth,
                     uint32_t max_io_bytes, struct rampart_engine *engine, char *err,
                     size_t errlen)
{
  memset(q, 0, sizeof *q);
  q->id = id;
  q->depth = depth;
  q->max_io_bytes = max_io_bytes;
  q->char_fd = char_fd;
  q->engine = engine;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  q->descs_len = (depth * sizeof(struct ublksrv_io_desc) + page - 1) / page * page;
  void *descs = mmap(NULL, q->descs_len, PROT_READ, MAP_SHARED | MAP_POPULATE, char_fd,
                     descs_offset(id));
  if (descs == MAP_FAILED) {
    snprintf(err, errlen, "cannot map queue %u's request descriptors: %s", id,
             strerror(errno));
    return -errno;
  }
  q->descs = descs;
  q->tags = calloc(depth, sizeof *q->tags);
  q->done_here = calloc(depth, sizeof *q->done_here);
  void *buffers = NULL;
  int r = posix_memalign(&buffers, page, (size_t)depth * max_io_bytes);
  /* blocking: the ring's read of its eventfd waits for a post */
  int made = rp_mailbox_init(&q->done, depth, false);
  if (!q->tags || made < 0 || !q->done_here || r != 0) {
    snprintf(err, errlen, "out of memory for queue %u (%u requests of %u bytes)", id, depth,
             max_io_bytes);
    free(buffers);
    ublk_queue_join(q);
    return -ENOMEM;
  }
  q->buffers = buffers;
  for (uint16_t tag = 0; tag < depth; tag++)
    q->tags[tag] = (struct ublk_tag){ .queue = q, .tag = tag };
  pthread_mutex_init(&q->ready_lock, NULL);
  pthread_cond_init(&q->ready_cond, NULL);
  q->locks_made = true;
  r = pthread_create(&q->thread, NULL, queue_main, q);
  if (r != 0) {
    snprintf(err, errlen, "cannot start queue %u's thread: %s", id, strerror(r));
    ublk_queue_join(q);
    return -r;
  }
  q->thread_started = true;
  pthread_mutex_lock(&q->ready_lock);
  while (q->ready == 0)
    pthread_cond_wait(&q->ready_cond, &q->ready_lock);
  r = q->ready < 0 ? q->ready : 0;
  pthread_mutex_unlock(&q->ready_lock);
  if (r < 0) {
    snprintf(err, errlen, "%s", q->err);
    ublk_queue_join(q); /* the thread has ended */
  }
  return r;
}

void ublk_queue_join(struct ublk_queue *q)
{
  if (q->thread_started) /* it ends by itself once every tag is given back */
    pthread_join(q->thread, NULL);
  q->thread_started = false;
  if (q->locks_made) {
    pthread_mutex_destroy(&q->ready_lock);
    pthread_cond_destroy(&q->ready_cond);
    q->locks_made = false;
  }
  rp_mailbox_free(&q->done);
  if (q->descs)
    munmap((void *)q->descs, q->descs_len);
  free(q->buffers);
  free(q->tags);
  free(q->done_here);
}
