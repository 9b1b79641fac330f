/* An intrusive first-in, first-out queue: a head and a tail pointer, the items linked
 * through a pointer field of their own, nothing allocated. As sys/queue.h's STAILQ, but
 * over a head and tail already in a struct and any link field, so one item type can wait
 * in several queues (a request: its connection's send queue, a reconnect's replay list)
 * and the structs the state segment lays out keep their layout.
 *
 *   FIFO_APPEND(q->head, q->tail, item, next);   at the tail
 *   FIFO_POP(q->head, q->tail, item, next);      item = the head, or NULL when empty
 *   FIFO_TAKE_ALL(q->head, q->tail, list);       empties the queue; list is the old head
 *
 * head and tail are evaluated more than once: pass plain lvalues.
 *
 * Errors: none.
 */
#ifndef RAMPART_FIFO_H
#define RAMPART_FIFO_H

#include <stddef.h>

#define FIFO_APPEND(head, tail, item, link) \
  do { \
    (item)->link = NULL; \
    if (tail) \
      (tail)->link = (item); \
    else \
      (head) = (item); \
    (tail) = (item); \
  } while (0)

#define FIFO_POP(head, tail, item, link) \
  do { \
    (item) = (head); \
    if (item) { \
      (head) = (item)->link; \
      if (!(head)) \
        (tail) = NULL; \
      (item)->link = NULL; \
    } \
  } while (0)

#define FIFO_TAKE_ALL(head, tail, list) \
  do { \
    (list) = (head); \
    (head) = (tail) = NULL; \
  } while (0)

#endif
