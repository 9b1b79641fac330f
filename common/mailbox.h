/* A mailbox for one thread's completions that other threads deliver: a thread that
 * serves requests (an NBD connection, a ublk queue) hands them to the engine, whose
 * callbacks may run on another thread; those post the request here, and the owner takes
 * them in a batch. Posting is a lock and an append into an array made at init (nothing
 * allocates afterwards); the first post since the owner last took wakes it through an
 * eventfd it waits on beside its other work (a poll or epoll set, an io_uring read), so
 * a burst of completions costs one wake-up.
 *
 * At most cap items wait: the owner posts each of its requests at most once between two
 * takes, so cap is how many it has in flight.
 *
 *   rp_mailbox_post(&m, r);                  any thread
 *   n = rp_mailbox_take_woken(&m, out);      the owner, polling event_fd itself
 *   n = rp_mailbox_take(&m, out);            the owner, once its own read of event_fd
 *                                            (an io_uring read) completed
 *
 * Errors: rp_mailbox_init returns 0, or -1 with errno (nothing is left to free); the
 * rest cannot fail.
 */
#ifndef RAMPART_COMMON_MAILBOX_H
#define RAMPART_COMMON_MAILBOX_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

struct rp_mailbox {
  pthread_mutex_t lock;
  void **items; /* under lock; cap of them, NULL before init */
  unsigned n;
  int event_fd;      /* written by the first post since the last take, and by a wake */
  atomic_bool woken; /* set after each write of event_fd: see rp_mailbox_take_woken */
};

/* nonblocking: event_fd is O_NONBLOCK, for an owner that reads it itself
 * (rp_mailbox_take_woken); an io_uring read wants it blocking, as a nonblocking read
 * there may complete at once with -EAGAIN. */
int rp_mailbox_init(struct rp_mailbox *m, unsigned cap, bool nonblocking);
/* Once no thread posts any more. Harmless on a mailbox zeroed and never made, or freed. */
void rp_mailbox_free(struct rp_mailbox *m);
/* From any thread. */
void rp_mailbox_post(struct rp_mailbox *m, void *item);
/* Wakes the owner with nothing posted (to make it look at a flag of its own). */
void rp_mailbox_wake(struct rp_mailbox *m);
/* Moves every item posted into out (room for cap), in the order they came; how many.
 * For an owner whose wait read event_fd already. */
unsigned rp_mailbox_take(struct rp_mailbox *m, void **out);
/* The same for an owner that waits for event_fd to be readable: when a wake came since
 * the last call, reads event_fd (so it is not readable for what is taken now) and takes;
 * else 0 at the cost of one atomic operation. */
unsigned rp_mailbox_take_woken(struct rp_mailbox *m, void **out);

#endif
