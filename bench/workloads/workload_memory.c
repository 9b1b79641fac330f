/* Data and memory shared by the workloads: a counter-based generator (splitmix64 of a
 * seed, a stream and an index), and plain anonymous mappings. */
#include "workload.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

uint64_t workload_hash(uint64_t seed, uint64_t stream, uint64_t index)
{
  uint64_t z = seed * 0x9e3779b97f4a7c15ULL ^ stream * 0xd1b54a32d192ed03ULL ^ index;
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double workload_unit(uint64_t seed, uint64_t stream, uint64_t index)
{
  /* 53 random bits give every double in [0, 1) its full precision. */
  return (double)(workload_hash(seed, stream, index) >> 11) * 0x1.0p-52 - 1.0;
}

void *workload_map(uint64_t bytes, struct workload_result *result)
{
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    snprintf(result->detail, sizeof result->detail,
             "cannot map %llu bytes of memory: %s (use a smaller --size)",
             (unsigned long long)bytes, strerror(errno));
    return NULL;
  }
  /* Whole-page transparent huge pages would make the kernel swap 2 MiB at a time (after
   * splitting) and blur the page-level picture the benchmark wants. */
  (void)madvise(p, bytes, MADV_NOHUGEPAGE);
  return p;
}

void workload_unmap(void *p, uint64_t bytes)
{
  munmap(p, bytes);
}
