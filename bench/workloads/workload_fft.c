/* fft: an in-place radix-2 complex FFT of n = 2^k points, forward then inverse.
 * Memory: the n points (16 bytes each) and a table of n/2 twiddle factors (16 bytes
 * each), 24·n bytes in all, with n the largest power of two that fits --size (so 384M
 * and 768M are used exactly). The bit-reversal permutation touches pages in a scattered
 * order; each of the log2(n) stages sweeps the whole array. Verification: the round trip
 * must give back the input, regenerated from the seed, within 1e-9. */
#include "workload.h"

#include <complex.h>
#include <math.h>
#include <stdio.h>

static void bit_reverse(double complex *x, size_t n)
{
  for (size_t i = 1, j = 0; i < n; i++) {
    size_t bit = n >> 1;
    for (; j & bit; bit >>= 1)
      j ^= bit;
    j |= bit;
    if (i < j) {
      double complex t = x[i];
      x[i] = x[j];
      x[j] = t;
    }
  }
}

/* inverse: conjugate twiddles and divide by n. */
static void transform(double complex *x, const double complex *twiddle, size_t n, int inverse)
{
  bit_reverse(x, n);
  for (size_t half = 1; half < n; half <<= 1) {
    size_t stride = n / (2 * half);
    for (size_t start = 0; start < n; start += 2 * half) {
      for (size_t j = 0; j < half; j++) {
        double complex w = twiddle[j * stride];
        if (inverse)
          w = conj(w);
        double complex u = x[start + j];
        double complex v = x[start + j + half] * w;
        x[start + j] = u + v;
        x[start + j + half] = u - v;
      }
    }
  }
  if (inverse) {
    double scale = 1.0 / (double)n;
    for (size_t i = 0; i < n; i++)
      x[i] *= scale;
  }
}

static double complex input_at(uint64_t seed, size_t i)
{
  /* (not CMPLX: glibc hides it from clang) */
  return workload_unit(seed, 4, 2 * i) + workload_unit(seed, 4, 2 * i + 1) * I;
}

int workload_fft(uint64_t size, uint64_t seed, struct workload_result *result)
{
  const uint64_t per_point = sizeof(double complex) + sizeof(double complex) / 2;
  size_t n = 1;
  while ((uint64_t)n * 2 * per_point <= size)
    n *= 2;
  if (n < 4) {
    snprintf(result->detail, sizeof result->detail, "--size must be at least %llu bytes",
             (unsigned long long)(4 * per_point));
    return -1;
  }
  uint64_t bytes = n * per_point;
  double complex *x = workload_map(bytes, result);
  if (!x)
    return -1;
  double complex *twiddle = x + n;
  for (size_t j = 0; j < n / 2; j++) {
    double angle = -2.0 * M_PI * (double)j / (double)n;
    twiddle[j] = cos(angle) + sin(angle) * I;
  }
  for (size_t i = 0; i < n; i++)
    x[i] = input_at(seed, i);
  transform(x, twiddle, n, 0);
  transform(x, twiddle, n, 1);
  struct workload_error err = { 0.0, 0 };
  for (size_t i = 0; i < n; i++) {
    double e = cabs(x[i] - input_at(seed, i));
    workload_error_note(&err, e, i);
  }
  workload_unmap(x, bytes);
  result->used_bytes = bytes;
  result->verified = err.worst < 1e-9;
  if (!result->verified)
    snprintf(result->detail, sizeof result->detail,
             "round-trip error %.3g at point %zu of %zu is above 1e-9", err.worst, err.at, n);
  return 0;
}
