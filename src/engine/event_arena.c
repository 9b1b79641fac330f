/* libev's own memory, from a preallocated arena instead of the heap (docs/engine.md,
 * "Threads": nothing on the steady-state I/O path allocates).
 *
 * libev grows its internal arrays (pending watchers, fds changed in one loop iteration,
 * the timer heap, the per-fd table) the first time the loop meets a new high-water mark,
 * with realloc. On a pager that is an allocation on the I/O path at an unpredictable
 * moment, possibly in the middle of the memory shortage it is relieving, which
 * test_io_allocations must not see after warm-up. ev_set_allocator
 * (documented libev API, process-wide) routes those arrays here: power-of-two blocks
 * carved from one static arena, which mlockall keeps resident, and recycled per size.
 * A block that does not fit (the arena is used up, or an array past the largest class)
 * falls back to the heap, as libev would have done; nothing is ever refused.
 *
 * Thread-safe (every engine loop and the client library's private loops share it); the
 * lock is taken only when an array grows or a loop is created or destroyed.
 */
#include <pthread.h>
#include <stdalign.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>

#include "rampart.h"
#include "event_arena.h"

#define ARENA_BYTES (1u << 20)
#define MIN_SHIFT 6u  /* 64-byte blocks */
#define MAX_SHIFT 17u /* 128 KiB blocks: libev's per-fd table for about 5,000 fds */
#define CLASSES (MAX_SHIFT - MIN_SHIFT + 1)
#define HEADER 16u /* keeps the block's class; 16 keeps libev's arrays aligned */

static alignas(64) unsigned char arena[ARENA_BYTES];
static size_t arena_used;
static void *free_blocks[CLASSES]; /* a freed block's first word links the next */
static pthread_mutex_t arena_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t installed = PTHREAD_ONCE_INIT;

static bool in_arena(const void *p)
{
  return (const unsigned char *)p >= arena && (const unsigned char *)p < arena + ARENA_BYTES;
}

static int class_for(size_t size)
{
  for (unsigned c = 0; c < CLASSES; c++)
    if (size + HEADER <= (size_t)1 << (MIN_SHIFT + c))
      return (int)c;
  return -1;
}

static size_t capacity_of(const unsigned char *user)
{
  return ((size_t)1 << (MIN_SHIFT + *(user - HEADER))) - HEADER;
}

/* A block of class c, or NULL when the arena has none left. Called locked. */
static unsigned char *block_take(unsigned c)
{
  unsigned char *b = free_blocks[c];
  if (b) {
    memcpy(&free_blocks[c], b, sizeof(void *));
  } else {
    size_t bytes = (size_t)1 << (MIN_SHIFT + c);
    if (arena_used + bytes > ARENA_BYTES)
      return NULL;
    b = arena + arena_used;
    arena_used += bytes;
  }
  b[0] = (unsigned char)c;
  return b + HEADER;
}

static void block_give_back(unsigned char *user)
{
  unsigned char *b = user - HEADER;
  unsigned c = b[0];
  memcpy(b, &free_blocks[c], sizeof(void *));
  free_blocks[c] = b;
}

/* libev's allocator contract: realloc semantics, size 0 frees and returns NULL. */
static void *event_arena_realloc(void *ptr, long size)
{
  if (ptr && !in_arena(ptr)) {
    if (size == 0) {
      free(ptr);
      return NULL;
    }
    return realloc(ptr, (size_t)size); /* it outgrew the arena once; stays on the heap */
  }
  if (size == 0) {
    if (ptr) {
      pthread_mutex_lock(&arena_lock);
      block_give_back(ptr);
      pthread_mutex_unlock(&arena_lock);
    }
    return NULL;
  }
  if (ptr && (size_t)size <= capacity_of(ptr))
    return ptr;
  int c = class_for((size_t)size);
  pthread_mutex_lock(&arena_lock);
  unsigned char *fresh = c >= 0 ? block_take((unsigned)c) : NULL;
  pthread_mutex_unlock(&arena_lock);
  if (!fresh) {
    fresh = malloc((size_t)size);
    if (!fresh)
      return NULL; /* libev reports it and aborts, as with its own allocator */
  }
  if (ptr) {
    size_t keep = capacity_of(ptr);
    memcpy(fresh, ptr, keep < (size_t)size ? keep : (size_t)size);
    pthread_mutex_lock(&arena_lock);
    block_give_back(ptr);
    pthread_mutex_unlock(&arena_lock);
  }
  return fresh;
}

static void install(void)
{
  ev_set_allocator(event_arena_realloc);
}

size_t rampart_event_arena_bytes(void)
{
  return ARENA_BYTES;
}

void rampart_event_arena_install(void)
{
  pthread_once(&installed, install);
}
