/* An intrusive doubly linked list over a head and a tail pointer: any item removed in
 * O(1), nothing allocated. The companion of fifo.h, in the same style: the head and tail
 * already live in a struct and the links are fields of the item, named by the caller, so
 * one item type can sit in several lists (a connection: all connections, and the
 * unauthenticated ones oldest first).
 *
 *   DLIST_PUSH_HEAD(l->head, l->tail, item, prev, next);
 *   DLIST_PUSH_TAIL(l->head, l->tail, item, prev, next);
 *   DLIST_REMOVE(l->head, l->tail, item, prev, next);    item's links are NULL after
 *
 * Arguments are evaluated more than once: pass plain lvalues.
 *
 * Errors: none.
 */
#ifndef RAMPART_DLIST_H
#define RAMPART_DLIST_H

#include <stddef.h>

#define DLIST_PUSH_HEAD(head, tail, item, prev, next) \
  do {                                                \
    (item)->prev = NULL;                              \
    (item)->next = (head);                            \
    if (head)                                         \
      (head)->prev = (item);                          \
    else                                              \
      (tail) = (item);                                \
    (head) = (item);                                  \
  } while (0)

#define DLIST_PUSH_TAIL(head, tail, item, prev, next) \
  do {                                                \
    (item)->next = NULL;                              \
    (item)->prev = (tail);                            \
    if (tail)                                         \
      (tail)->next = (item);                          \
    else                                              \
      (head) = (item);                                \
    (tail) = (item);                                  \
  } while (0)

#define DLIST_REMOVE(head, tail, item, prev, next) \
  do {                                             \
    if ((item)->prev)                              \
      (item)->prev->next = (item)->next;           \
    else                                           \
      (head) = (item)->next;                       \
    if ((item)->next)                              \
      (item)->next->prev = (item)->prev;           \
    else                                           \
      (tail) = (item)->prev;                       \
    (item)->prev = (item)->next = NULL;            \
  } while (0)

#endif
