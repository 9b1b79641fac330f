/* The monotonic clock, for deadlines, back-off, intervals and benchmarks' timings: unlike
 * the wall clock it never jumps when the time of day is set. In nanoseconds,
 * milliseconds or seconds.
 *
 * Errors: none: nothing here fails.
 */
#ifndef RAMPART_COMMON_CLOCK_H
#define RAMPART_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t rp_now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t rp_now_ms(void)
{
  return rp_now_ns() / 1000000u;
}

static inline double rp_now_seconds(void)
{
  return (double)rp_now_ns() / 1e9;
}

#endif
