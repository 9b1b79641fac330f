/* The monotonic clock in milliseconds, for deadlines, back-off and intervals: unlike
 * the wall clock it never jumps when the time of day is set.
 *
 * Errors: none: nothing here fails.
 */
#ifndef RAMPART_COMMON_CLOCK_H
#define RAMPART_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t rp_now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

#endif
