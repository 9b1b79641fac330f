/* The application workloads of bench/workloads (see README.md): each one allocates its
 * memory, fills all of it from a seed, computes, and checks its own answer, so that a
 * page lost or corrupted on the way through swap shows up as a failed verification.
 *
 * Errors: -1 or NULL with a sentence in result->detail (CONTRIBUTING.md,
 * convention 1, the buffer being the result's); a failed verification is not an error
 * but result->verified.
 */
#ifndef RAMPART_BENCH_WORKLOAD_H
#define RAMPART_BENCH_WORKLOAD_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* What a workload reports back to main. used_bytes is the memory it actually touched
 * (an FFT rounds down to a power of two); detail is a sentence on failure. */
struct workload_result {
  uint64_t used_bytes;
  int verified;
  char detail[256];
};

/* Each returns 0 when it ran (verified or not, see result), -1 when it could not start
 * (result->detail says why: too small a size, no memory). */
int workload_quicksort(uint64_t size, uint64_t seed, struct workload_result *result);
int workload_gauss(uint64_t size, uint64_t seed, struct workload_result *result);
int workload_fft(uint64_t size, uint64_t seed, struct workload_result *result);
int workload_matvec(uint64_t size, uint64_t seed, struct workload_result *result);
int workload_pages(uint64_t size, uint64_t seed, struct workload_result *result);
int workload_forks(uint64_t size, uint64_t seed, struct workload_result *result);

/* Deterministic data: the value at an index, for a seed and a stream (so that
 * verification can regenerate inputs instead of keeping a copy in memory). */
uint64_t workload_hash(uint64_t seed, uint64_t stream, uint64_t index);
/* The same, as a double uniform in [-1, 1). */
double workload_unit(uint64_t seed, uint64_t stream, uint64_t index);

/* The largest error a numeric check found, and where. NaN counts as larger than any
 * number, so that a NaN in the answer fails the check: once worst is NaN it stays, since
 * every comparison with NaN is false and the next number would otherwise replace it. */
struct workload_error {
  double worst;
  size_t at;
};

static inline void workload_error_note(struct workload_error *w, double e, size_t at)
{
  if (isnan(w->worst))
    return;
  if (!(e <= w->worst)) {
    w->worst = e;
    w->at = at;
  }
}

/* Anonymous memory for the workload's data, never locked, so the kernel may swap it.
 * Returns NULL and fills result->detail when the mapping fails. */
void *workload_map(uint64_t bytes, struct workload_result *result);
void workload_unmap(void *p, uint64_t bytes);

#endif
