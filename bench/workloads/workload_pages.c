/* pages: the swap path's own check, not a paper's workload. Every 64-bit word of every
 * page gets a value that only its (seed, page, word) produce, then every page is read
 * back in a scattered order (a stride coprime to the page count) so that swap-ins come
 * in random order rather than as readahead-friendly runs. A page lost, swapped with
 * another, stale or torn shows up as a word that does not match. */
#include "workload.h"

#include <stdio.h>

enum { PAGE = 4096, WORDS = PAGE / sizeof(uint64_t) };

static uint64_t gcd(uint64_t a, uint64_t b)
{
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

int workload_pages(uint64_t size, uint64_t seed, struct workload_result *result)
{
  uint64_t pages = size / PAGE;
  if (pages < 2) {
    snprintf(result->detail, sizeof result->detail, "--size must be at least %d bytes",
             2 * PAGE);
    return -1;
  }
  uint64_t *mem = workload_map(pages * PAGE, result);
  if (!mem)
    return -1;
  for (uint64_t p = 0; p < pages; p++)
    for (uint64_t w = 0; w < WORDS; w++)
      mem[p * WORDS + w] = workload_hash(seed, p, w);

  /* About a golden-ratio step through the pages, nudged until it visits every one. */
  uint64_t stride = pages * 5 / 8 + 1;
  while (gcd(stride, pages) != 1)
    stride++;
  uint64_t bad_pages = 0, first_bad = 0;
  for (uint64_t i = 0, p = 0; i < pages; i++, p = (p + stride) % pages) {
    for (uint64_t w = 0; w < WORDS; w++) {
      if (mem[p * WORDS + w] != workload_hash(seed, p, w)) {
        if (bad_pages++ == 0)
          first_bad = p;
        break;
      }
    }
  }
  workload_unmap(mem, pages * PAGE);
  result->used_bytes = pages * PAGE;
  result->verified = bad_pages == 0;
  if (bad_pages)
    snprintf(result->detail, sizeof result->detail,
             "%llu of %llu pages read back wrong (first: page %llu)",
             (unsigned long long)bad_pages, (unsigned long long)pages,
             (unsigned long long)first_bad);
  return 0;
}
