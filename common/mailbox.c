/* The completion mailbox (mailbox.h). */
#include "mailbox.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

int rp_mailbox_init(struct rp_mailbox *m, unsigned cap, bool nonblocking)
{
  memset(m, 0, sizeof *m);
  m->event_fd = eventfd(0, EFD_CLOEXEC | (nonblocking ? EFD_NONBLOCK : 0));
  void **items = calloc(cap ? cap : 1, sizeof *items);
  if (m->event_fd < 0 || !items) {
    int saved = m->event_fd < 0 ? errno : ENOMEM;
    if (m->event_fd >= 0)
      close(m->event_fd);
    free(items);
    m->event_fd = -1;
    errno = saved;
    return -1;
  }
  pthread_mutex_init(&m->lock, NULL);
  m->items = items;
  return 0;
}

void rp_mailbox_free(struct rp_mailbox *m)
{
  if (!m->items)
    return;
  pthread_mutex_destroy(&m->lock);
  close(m->event_fd);
  free(m->items);
  m->items = NULL;
  m->event_fd = -1;
}

void rp_mailbox_wake(struct rp_mailbox *m)
{
  uint64_t one = 1;
  while (write(m->event_fd, &one, sizeof one) < 0 && errno == EINTR)
    ;
  /* After the write: an owner that sees the flag finds the count there to read, and
   * event_fd does not stay readable for what it has taken already. */
  atomic_store(&m->woken, true);
}

void rp_mailbox_post(struct rp_mailbox *m, void *item)
{
  pthread_mutex_lock(&m->lock);
  m->items[m->n++] = item;
  bool first = m->n == 1; /* else a wake-up is on its way */
  pthread_mutex_unlock(&m->lock);
  if (first)
    rp_mailbox_wake(m);
}

unsigned rp_mailbox_take(struct rp_mailbox *m, void **out)
{
  /* Copied out under the lock, used outside it: a poster waits for this lock at most as
   * long as a copy of cap pointers takes. */
  pthread_mutex_lock(&m->lock);
  unsigned n = m->n;
  memcpy(out, m->items, n * sizeof *out);
  m->n = 0;
  pthread_mutex_unlock(&m->lock);
  return n;
}

unsigned rp_mailbox_take_woken(struct rp_mailbox *m, void **out)
{
  if (!atomic_exchange(&m->woken, false))
    return 0;
  uint64_t count;
  ssize_t ignored = read(m->event_fd, &count, sizeof count);
  (void)ignored;
  return rp_mailbox_take(m, out);
}
