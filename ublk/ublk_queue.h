/* One ublk queue: a thread with its own io_uring that holds a FETCH_REQ for every tag,
 * hands each request the driver returns to the engine (rampart_submit_list), and
 * answers it with COMMIT_AND_FETCH_REQ when the engine completes it.
 * While requests are out and the driver has nothing new, the thread waits in
 * rampart_reap_or_fd on the servers' sockets and its ring's fd together: it reads the
 * replies itself and its requests complete on it (done_here), with no other thread
 * woken. What completes on the engine's I/O thread instead (timeouts, failures, a
 * second queue's thread reaping) queues the tag in `done` and wakes this ring through
 * an eventfd read in the same ring: one wake-up for however many are waiting.
 * Everything is allocated at start (request buffers locked with the rest of the daemon):
 * nothing on the I/O path allocates.
 *
 * Errors: ublk_queue_start returns 0 or a negative errno with a sentence in err
 * (CONTRIBUTING.md, conventions 2 and 1 together, as ublk_control.h); a request's
 * own result goes back to the driver as bytes done or -errno (convention 2).
 */
#ifndef RAMPART_UBLK_QUEUE_H
#define RAMPART_UBLK_QUEUE_H

#include <liburing.h>
#include <linux/ublk_cmd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mailbox.h"
#include "rampart.h"

struct ublk_queue;

struct ublk_tag {
  struct ublk_queue *queue;
  struct rampart_io io;
  uint16_t tag;
  int result; /* for COMMIT: bytes done, or -errno */
};

struct ublk_queue {
  uint16_t id, depth;
  uint32_t max_io_bytes;
  int char_fd; /* /dev/ublkcN */
  struct rampart_engine *engine;
  const struct ublksrv_io_desc *descs; /* the driver's request descriptors, mapped */
  size_t descs_len;
  uint8_t *buffers; /* depth * max_io_bytes */
  struct ublk_tag *tags;
  struct io_uring ring;
  struct rp_mailbox done; /* tags the engine completed on another thread (struct
                             ublk_tag *); the ring reads its eventfd */
  uint64_t event_count;   /* that read's target */
  void **done_here;       /* queue thread only: tags completed on it (struct ublk_tag *), and
                         those taken from `done`, to commit */
  unsigned ndone_here;
  unsigned in_engine; /* queue thread only: requests submitted and not yet committed */
  /* queue thread only: the requests fetched in this pass, for rampart_submit_list */
  struct rampart_io *batch_head, *batch_tail;
  unsigned aborted; /* tags the driver gave back (device stopping) */
  pthread_t thread;
  bool thread_started, locks_made;
  pthread_mutex_t ready_lock;
  pthread_cond_t ready_cond;
  int ready; /* 0 starting, 1 every tag fetched, <0 -errno */
  char err[256];
};

/* Maps the queue's descriptors, allocates its buffers and starts its thread; returns
 * once every tag's FETCH_REQ is submitted (what START_DEV waits for), or fails. */
int ublk_queue_start(struct ublk_queue *q, int char_fd, uint16_t id, uint16_t depth,
                     uint32_t max_io_bytes, struct rampart_engine *engine, char *err,
                     size_t errlen);
/* After STOP_DEV: waits for the thread (every tag given back), frees the queue. On a
 * failed start, ublk_queue_start has already done this. */
void ublk_queue_join(struct ublk_queue *q);

#endif
