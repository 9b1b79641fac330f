/* matvec: y = Σ_p A·x_p for PASSES vectors x_p, with A a rows×COLUMNS matrix of doubles
 * filling --size. Each pass streams the whole matrix through memory again, which is what
 * makes matrix-vector products page. Verification: y recomputed row by row from A's
 * entries regenerated from the seed (not from memory), within a relative 1e-12. */
#include "workload.h"

#include <math.h>
#include <stdio.h>

enum { COLUMNS = 4096, PASSES = 4 };

static double matrix_at(uint64_t seed, size_t i, size_t j)
{
  return workload_unit(seed, 5, (uint64_t)i * COLUMNS + j);
}

static double vector_at(uint64_t seed, size_t pass, size_t j)
{
  return workload_unit(seed, 6, (uint64_t)pass * COLUMNS + j);
}

int workload_matvec(uint64_t size, uint64_t seed, struct workload_result *result)
{
  const uint64_t per_row = (COLUMNS + 1) * sizeof(double);
  const uint64_t vectors = (uint64_t)PASSES * COLUMNS * sizeof(double);
  if (size < vectors + 2 * per_row) {
    snprintf(result->detail, sizeof result->detail, "--size must be at least %llu bytes",
             (unsigned long long)(vectors + 2 * per_row));
    return -1;
  }
  size_t rows = (size_t)((size - vectors) / per_row);
  uint64_t bytes = vectors + rows * per_row;
  double *x = workload_map(bytes, result);
  if (!x)
    return -1;
  double *a = x + (size_t)PASSES * COLUMNS;
  double *y = a + rows * COLUMNS;
  for (size_t p = 0; p < PASSES; p++)
    for (size_t j = 0; j < COLUMNS; j++)
      x[p * COLUMNS + j] = vector_at(seed, p, j);
  for (size_t i = 0; i < rows; i++) {
    for (size_t j = 0; j < COLUMNS; j++)
      a[i * COLUMNS + j] = matrix_at(seed, i, j);
    y[i] = 0.0;
  }
  for (size_t p = 0; p < PASSES; p++) {
    const double *xp = &x[p * COLUMNS];
    for (size_t i = 0; i < rows; i++) {
      const double *row = &a[i * COLUMNS];
      double s = 0.0;
      for (size_t j = 0; j < COLUMNS; j++)
        s += row[j] * xp[j];
      y[i] += s;
    }
  }
  struct workload_error err = { 0.0, 0 };
  for (size_t i = 0; i < rows; i++) {
    double want = 0.0;
    for (size_t p = 0; p < PASSES; p++) {
      double s = 0.0;
      for (size_t j = 0; j < COLUMNS; j++)
        s += matrix_at(seed, i, j) * vector_at(seed, p, j);
      want += s;
    }
    double e = fabs(y[i] - want) / (fabs(want) + 1.0);
    workload_error_note(&err, e, i);
  }
  workload_unmap(x, bytes);
  result->used_bytes = bytes;
  result->verified = err.worst < 1e-12;
  if (!result->verified)
    snprintf(result->detail, sizeof result->detail,
             "relative error %.3g in y[%zu] of %zu is above 1e-12", err.worst, err.at, rows);
  return 0;
}
