/* libev's arrays come from a preallocated arena, not the heap (event_arena.c): process-
 * wide, installed once, before the first loop.
 *
 * Errors: none: the arena is static and cannot fail.
 */
#ifndef RAMPART_EVENT_ARENA_H
#define RAMPART_EVENT_ARENA_H

#include <stddef.h>

void rampart_event_arena_install(void);
size_t rampart_event_arena_bytes(void); /* resident for the process's lifetime */

#endif
