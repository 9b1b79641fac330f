/* xorshift64*: a fast, well-mixed stream of 64-bit numbers from a nonzero state, for
 * choosing pages and filling buffers in benchmarks. Predictable: never for secrets or
 * nonces (secret.h, rp_random_bytes).
 *
 * Errors: none: nothing here fails.
 */
#ifndef RAMPART_COMMON_XORSHIFT_H
#define RAMPART_COMMON_XORSHIFT_H

#include <stdint.h>

static inline uint64_t rp_xorshift64s(uint64_t *state)
{
  uint64_t x = *state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * UINT64_C(2685821657736338717);
}

#endif
