/* quicksort: sort 64-bit keys in place. Verification: the result is in order, and its
 * sum and xor equal those of the input (a lost or duplicated page changes them). */
#include "workload.h"

#include <stdio.h>

enum { INSERTION_LIMIT = 24 };

static void insertion_sort(uint64_t *a, size_t n)
{
  for (size_t i = 1; i < n; i++) {
    uint64_t v = a[i];
    size_t j = i;
    for (; j > 0 && a[j - 1] > v; j--)
      a[j] = a[j - 1];
    a[j] = v;
  }
}

static void swap(uint64_t *x, uint64_t *y)
{
  uint64_t t = *x;
  *x = *y;
  *y = t;
}

/* Hoare partition (the pivot value is the middle element, after ordering the first,
 * middle and last, so the split index stays inside [0, n-2]); recursion only into the
 * smaller side, so the stack stays O(log n) whatever the data. */
static void quicksort(uint64_t *a, size_t n)
{
  while (n > INSERTION_LIMIT) {
    size_t mid = n / 2;
    if (a[mid] < a[0])
      swap(&a[mid], &a[0]);
    if (a[n - 1] < a[0])
      swap(&a[n - 1], &a[0]);
    if (a[n - 1] < a[mid])
      swap(&a[n - 1], &a[mid]);
    uint64_t pivot = a[mid];
    size_t i = 0, j = n - 1;
    for (;;) {
      while (a[i] < pivot)
        i++;
      while (a[j] > pivot)
        j--;
      if (i >= j)
        break;
      swap(&a[i], &a[j]);
      i++;
      j--;
    }
    size_t left = j + 1;
    if (left < n - left) {
      quicksort(a, left);
      a += left;
      n -= left;
    } else {
      quicksort(a + left, n - left);
      n = left;
    }
  }
  insertion_sort(a, n);
}

int workload_quicksort(uint64_t size, uint64_t seed, struct workload_result *result)
{
  size_t n = (size_t)(size / sizeof(uint64_t));
  if (n < 2) {
    snprintf(result->detail, sizeof result->detail, "--size must be at least 16 bytes");
    return -1;
  }
  uint64_t *a = workload_map(n * sizeof *a, result);
  if (!a)
    return -1;
  uint64_t sum_in = 0, xor_in = 0;
  for (size_t i = 0; i < n; i++) {
    a[i] = workload_hash(seed, 1, i);
    sum_in += a[i];
    xor_in ^= a[i];
  }
  quicksort(a, n);
  uint64_t sum_out = a[0], xor_out = a[0];
  size_t out_of_order = 0;
  for (size_t i = 1; i < n; i++) {
    out_of_order += a[i - 1] > a[i];
    sum_out += a[i];
    xor_out ^= a[i];
  }
  workload_unmap(a, n * sizeof *a);
  result->used_bytes = n * sizeof *a;
  result->verified = out_of_order == 0 && sum_in == sum_out && xor_in == xor_out;
  if (!result->verified)
    snprintf(result->detail, sizeof result->detail, "%zu keys out of order; sum %s, xor %s",
             out_of_order, sum_in == sum_out ? "kept" : "CHANGED",
             xor_in == xor_out ? "kept" : "CHANGED");
  return 0;
}
