/* gauss: Gaussian elimination of a banded, diagonally dominant n×n system A x = b,
 * with a known solution x*. A dense n×n elimination costs n³ operations, which at
 * today's swap sizes (n ≈ 10⁴ for 768 MiB) would take hours on the CPU alone; a band of
 * half-width 128 keeps the papers' access pattern (each pivot row updates the rows
 * below it, forward, then back substitution backwards) at a few seconds of arithmetic.
 * Verification: the computed x against x*, element by element. */
#include "workload.h"

#include <math.h>
#include <stdio.h>

enum { HALF_BAND = 128, ROW_WIDTH = 2 * HALF_BAND + 1 };

/* Row i stores columns i-HALF_BAND .. i+HALF_BAND. */
static double *band_at(double *band, size_t row, size_t col)
{
  return &band[row * ROW_WIDTH + (col + HALF_BAND - row)];
}

static double solution_at(uint64_t seed, size_t i)
{
  return workload_unit(seed, 3, i);
}

/* Off-diagonal entries in [-1, 1); the diagonal outweighs the 2·HALF_BAND of them, so
 * elimination needs no pivoting and the answer is well conditioned. */
static void fill_system(double *band, double *rhs, size_t n, uint64_t seed)
{
  for (size_t i = 0; i < n; i++) {
    size_t lo = i >= HALF_BAND ? i - HALF_BAND : 0;
    size_t hi = i + HALF_BAND < n ? i + HALF_BAND : n - 1;
    double *row = &band[i * ROW_WIDTH];
    for (size_t k = 0; k < ROW_WIDTH; k++)
      row[k] = 0.0;
    double b = 0.0;
    for (size_t j = lo; j <= hi; j++) {
      double a = j == i ? 2.0 * HALF_BAND + 2.0
                        : workload_unit(seed, 2, i * ROW_WIDTH + j - lo);
      *band_at(band, i, j) = a;
      b += a * solution_at(seed, j);
    }
    rhs[i] = b;
  }
}

static void eliminate(double *band, double *rhs, size_t n)
{
  for (size_t k = 0; k < n; k++) {
    size_t last = k + HALF_BAND < n ? k + HALF_BAND : n - 1;
    double pivot = *band_at(band, k, k);
    const double *pivot_row = band_at(band, k, k);
    for (size_t i = k + 1; i <= last; i++) {
      double *row = band_at(band, i, k);
      double factor = row[0] / pivot;
      for (size_t j = 0; j <= last - k; j++)
        row[j] -= factor * pivot_row[j];
      rhs[i] -= factor * rhs[k];
    }
  }
}

/* Overwrites rhs with x. */
static void back_substitute(double *band, double *rhs, size_t n)
{
  for (size_t k = n; k-- > 0;) {
    size_t last = k + HALF_BAND < n ? k + HALF_BAND : n - 1;
    const double *row = band_at(band, k, k);
    double s = rhs[k];
    for (size_t j = 1; j <= last - k; j++)
      s -= row[j] * rhs[k + j];
    rhs[k] = s / row[0];
  }
}

int workload_gauss(uint64_t size, uint64_t seed, struct workload_result *result)
{
  const uint64_t per_row = (ROW_WIDTH + 1) * sizeof(double);
  size_t n = (size_t)(size / per_row);
  if (n < 2 * HALF_BAND) {
    snprintf(result->detail, sizeof result->detail, "--size must be at least %llu bytes",
             (unsigned long long)(2 * HALF_BAND * per_row));
    return -1;
  }
  uint64_t bytes = n * per_row;
  double *band = workload_map(bytes, result);
  if (!band)
    return -1;
  double *rhs = band + n * ROW_WIDTH;
  fill_system(band, rhs, n, seed);
  eliminate(band, rhs, n);
  back_substitute(band, rhs, n);
  struct workload_error err = { 0.0, 0 };
  for (size_t i = 0; i < n; i++) {
    double e = fabs(rhs[i] - solution_at(seed, i));
    workload_error_note(&err, e, i);
  }
  workload_unmap(band, bytes);
  result->used_bytes = bytes;
  result->verified = err.worst < 1e-9;
  if (!result->verified)
    snprintf(result->detail, sizeof result->detail,
             "solution error %.3g at x[%zu] (n=%zu) is above 1e-9", err.worst, err.at, n);
  return 0;
}
