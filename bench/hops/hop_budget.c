/* rampart-hop-budget: one QD1 page-in's time, hop by hop, from the stamps every process
 * wrote into a RAMPART_HOP_TRACE file (common/hop_trace.h; README.md).
 *
 *   rampart-hop-budget FILE [LABEL]
 *
 * A request is the stamps from a frontend-in to the next frontend-out, each hop taken
 * at its first stamp after the hop before it (a server's stamp of an earlier reply can
 * land inside the window: a server preempted by the client it woke stamps late). One
 * with every hop stamped and no other frontend-in inside it is a clean QD1 page-in and
 * is counted. Prints, per hop, the median and mean µs and the share of the mean total,
 * then one TSV line per hop (LABEL, hop, p50, mean, p90) for bench/pagein to collect.
 *
 * Errors: exit status 1 with a sentence on stderr when the file cannot be read or holds
 * no clean request.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hop_trace.h"

static const char *const interval_name[RP_HOP_COUNT - 1] = {
  "frontend: request taken, to the engine",
  "engine: submit to frame sent",
  "wire out + server wake",
  "server: frame read to reply sent",
  "wire back + client wake",
  "engine: reply to done (tag, seal)",
  "frontend: done to answer sent",
};

static const char *const interval_key[RP_HOP_COUNT - 1] = {
  "frontend_in", "engine_submit", "to_server",    "server",
  "to_client",   "engine_reply",  "frontend_out",
};

static int by_ns(const void *a, const void *b)
{
  const struct rp_hop_stamp *x = a, *y = b;
  return x->ns < y->ns ? -1 : x->ns > y->ns;
}

static int by_value(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

struct series {
  double *v;
  size_t n;
};

static double quantile(struct series *s, double q)
{
  if (s->n == 0)
    return 0;
  qsort(s->v, s->n, sizeof *s->v, by_value);
  return s->v[(size_t)(q * (double)(s->n - 1))];
}

static double mean(const struct series *s)
{
  double sum = 0;
  for (size_t i = 0; i < s->n; i++)
    sum += s->v[i];
  return s->n ? sum / (double)s->n : 0;
}

static struct rp_hop_stamp *load(const char *path, size_t *count)
{
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0) {
    fprintf(stderr, "rampart-hop-budget: cannot read %s: %s\n", path, strerror(errno));
    exit(1);
  }
  if ((size_t)st.st_size < sizeof(struct rp_hop_trace_file)) {
    fprintf(stderr, "rampart-hop-budget: %s is empty: did the processes run with %s=%s?\n",
            path, RP_HOP_TRACE_ENV, path);
    exit(1);
  }
  struct rp_hop_trace_file *t = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (t == MAP_FAILED || t->magic != RP_HOP_TRACE_MAGIC ||
      rp_hop_trace_bytes(t->capacity) > (size_t)st.st_size) {
    fprintf(stderr, "rampart-hop-budget: %s is not a hop trace\n", path);
    exit(1);
  }
  uint64_t claimed = atomic_load(&t->next);
  size_t n = claimed < t->capacity ? (size_t)claimed : t->capacity, kept = 0;
  if (claimed > t->capacity)
    fprintf(stderr,
            "rampart-hop-budget: %s filled up: %llu stamps dropped; make it fresh "
            "for each run\n",
            path, (unsigned long long)(claimed - t->capacity));
  struct rp_hop_stamp *s = malloc((n ? n : 1) * sizeof *s);
  if (!s) {
    fprintf(stderr, "rampart-hop-budget: out of memory for %zu stamps\n", n);
    exit(1);
  }
  for (size_t i = 0; i < n; i++)
    if (t->stamp[i].ns && t->stamp[i].hop < RP_HOP_COUNT)
      s[kept++] = t->stamp[i];
  qsort(s, kept, sizeof *s, by_ns);
  *count = kept;
  return s;
}

int main(int argc, char **argv)
{
  if (argc < 2 || argc > 3 || !strcmp(argv[1], "--help")) {
    fprintf(argc < 2 ? stderr : stdout, "usage: rampart-hop-budget FILE [LABEL]\n");
    return argc < 2 ? 2 : 0;
  }
  const char *label = argc > 2 ? argv[2] : "trace";
  size_t n;
  struct rp_hop_stamp *s = load(argv[1], &n);
  struct series iv[RP_HOP_COUNT], total = { calloc(n + 1, sizeof(double)), 0 };
  for (unsigned h = 0; h < RP_HOP_COUNT; h++)
    iv[h] = (struct series){ calloc(n + 1, sizeof(double)), 0 };
  uint64_t at[RP_HOP_COUNT] = { 0 };
  size_t windows = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned h = s[i].hop;
    if (h == RP_HOP_FRONTEND_IN) {
      memset(at, 0, sizeof at);
      at[h] = s[i].ns;
      windows++;
      continue;
    }
    if (!at[h - 1] || at[h])
      continue; /* outside a request, out of order, or a later frame of the same one */
    at[h] = s[i].ns;
    if (h != RP_HOP_FRONTEND_OUT)
      continue;
    for (unsigned k = 1; k < RP_HOP_COUNT; k++)
      iv[k - 1].v[iv[k - 1].n++] = (double)(at[k] - at[k - 1]) / 1e3;
    total.v[total.n++] = (double)(at[RP_HOP_FRONTEND_OUT] - at[RP_HOP_FRONTEND_IN]) / 1e3;
    memset(at, 0, sizeof at);
  }
  if (total.n == 0) {
    fprintf(stderr,
            "rampart-hop-budget: %s: no request with every hop stamped, of %zu "
            "started (%zu stamps)\n",
            argv[1], windows, n);
    return 1;
  }
  double all = mean(&total);
  printf("%s: %zu clean page-ins of %zu (QD1, every hop stamped)\n", label, total.n, windows);
  printf("  %-40s %8s %8s %6s\n", "hop", "p50 µs", "mean µs", "share");
  for (unsigned k = 0; k + 1 < RP_HOP_COUNT; k++) {
    double m = mean(&iv[k]);
    printf("  %-40s %8.1f %8.1f %5.0f%%\n", interval_name[k], quantile(&iv[k], 0.5), m,
           100 * m / all);
  }
  printf("  %-40s %8.1f %8.1f\n", "total, frontend in to out", quantile(&total, 0.5), all);
  for (unsigned k = 0; k + 1 < RP_HOP_COUNT; k++)
    printf("TSV\t%s\t%s\t%.2f\t%.2f\t%.2f\n", label, interval_key[k], quantile(&iv[k], 0.5),
           mean(&iv[k]), quantile(&iv[k], 0.9));
  printf("TSV\t%s\ttotal\t%.2f\t%.2f\t%.2f\n", label, quantile(&total, 0.5), all,
         quantile(&total, 0.9));
  free(s);
  free(total.v);
  for (unsigned h = 0; h < RP_HOP_COUNT; h++)
    free(iv[h].v);
  return 0;
}
