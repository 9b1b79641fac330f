/* Hop stamps into a file shared by every process of a benchmark (hop_trace.h). */
#include "hop_trace.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"

struct rp_hop_trace_file *rp_hop_trace;
static uint32_t my_pid;

size_t rp_hop_trace_bytes(uint32_t capacity)
{
  return sizeof(struct rp_hop_trace_file) + (size_t)capacity * sizeof(struct rp_hop_stamp);
}

void rp_hop_trace_record(enum rp_hop hop)
{
  struct rp_hop_trace_file *t = rp_hop_trace;
  /* A full file is only read: the claims' atomic add would bounce its line between
   * every stamping core for nothing. */
  if (atomic_load_explicit(&t->next, memory_order_relaxed) >= t->capacity)
    return;
  uint64_t i = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
  if (i >= t->capacity)
    return;
  t->stamp[i].hop = (uint32_t)hop;
  t->stamp[i].pid = my_pid;
  atomic_thread_fence(memory_order_release);
  t->stamp[i].ns = rp_now_ns();
}

int rp_hop_trace_start(char *err, size_t errlen)
{
  const char *path = getenv(RP_HOP_TRACE_ENV);
  if (!path || !*path || rp_hop_trace)
    return 0;
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    snprintf(err, errlen, "%s=%s: cannot open it: %s; unset %s to run without hop stamps",
             RP_HOP_TRACE_ENV, path, strerror(errno), RP_HOP_TRACE_ENV);
    return -1;
  }
  size_t bytes = rp_hop_trace_bytes(RP_HOP_TRACE_STAMPS);
  struct stat st;
  /* The first process sizes it; ftruncate to the same size again is harmless, and a
   * fresh file reads as zeros, so the header below is the only thing to agree on. */
  if (fstat(fd, &st) < 0 || ((size_t)st.st_size < bytes && ftruncate(fd, (off_t)bytes) < 0)) {
    snprintf(err, errlen, "%s=%s: cannot size it to %zu bytes: %s", RP_HOP_TRACE_ENV, path,
             bytes, strerror(errno));
    close(fd);
    return -1;
  }
  void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    snprintf(err, errlen, "%s=%s: cannot map it: %s", RP_HOP_TRACE_ENV, path,
             strerror(errno));
    return -1;
  }
  struct rp_hop_trace_file *t = m;
  t->capacity = RP_HOP_TRACE_STAMPS;
  t->magic = RP_HOP_TRACE_MAGIC;
  my_pid = (uint32_t)getpid();
  rp_hop_trace = t;
  return 0;
}
