/* An intrusive doubly linked list: any item removed in O(1), nothing allocated. The
 * companion of fifo.h, in the same style: the list's pointers already live in a struct
 * and the links are fields of the item, named by the caller, so one item type can sit in
 * several lists (a connection: all connections, and the unauthenticated ones oldest
 * first).
 *
 * A list that keeps only its head:
 *   DLIST_PUSH(l->head, item, prev, next);       at the head
 *   DLIST_UNLINK(l->head, item, prev, next);     item's links are NULL after
 * A list that keeps a head and a tail:
 *   DLIST_PUSH_HEAD(l->head, l->tail, item, prev, next);
 *   DLIST_PUSH_TAIL(l->head, l->tail, item, prev, next);
 *   DLIST_REMOVE(l->head, l->tail, item, prev, next);   item's links are NULL after
 *
 * Arguments are evaluated more than once: pass plain lvalues.
 *
 * Errors: none.
 */
#ifndef RAMPART_DLIST_H
#define RAMPART_DLIST_H

#include <stddef.h>

#define DLIST_PUSH(head, item, prev, next) \
  do { \
    (item)->prev = NULL; \
    (item)->next = (head); \
    if (head) \
      (head)->prev = (item); \
    (head) = (item); \
  } while (0)

#define DLIST_UNLINK(head, item, prev, next) \
  do { \
    if ((item)->prev) \
      (item)->prev->next = (item)->next; \
    else \
      (head) = (item)->next; \
    if ((item)->next) \
      (item)->next->prev = (item)->prev; \
    (item)->prev = (item)->next = NULL; \
  } while (0)

#define DLIST_PUSH_HEAD(head, tail, item, prev, next) \
  do { \
    if (!(head)) \
      (tail) = (item); \
    DLIST_PUSH(head, item, prev, next); \
  } while (0)

/* Appending is pushing at the head of the list read backwards. */
#define DLIST_PUSH_TAIL(head, tail, item, prev, next) \
  DLIST_PUSH_HEAD(tail, head, item, next, prev)

#define DLIST_REMOVE(head, tail, item, prev, next) \
  do { \
    if (!(item)->next) \
      (tail) = (item)->prev; \
    DLIST_UNLINK(head, item, prev, next); \
  } while (0)

#endif
