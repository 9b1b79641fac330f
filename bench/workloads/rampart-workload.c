/* rampart-workload: the papers' paging workloads (quicksort, Gaussian elimination, FFT,
 * matrix-vector), sized in bytes, with deterministic data and a self-check. On success
 * it prints one line and exits 0:
 *   workload quicksort size=402653184 seconds=12.345 verified=yes
 * A failed check prints "verified=no" and why, and exits 1; bad usage exits 2. */
#include "clock.h"
#include "parse.h"
#include "workload.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static const struct {
  const char *name;
  int (*run)(uint64_t size, uint64_t seed, struct workload_result *result);
  const char *what;
} workloads[] = {
  { "quicksort", workload_quicksort, "sort 64-bit keys in place" },
  { "gauss", workload_gauss, "Gaussian elimination of a banded system (half-band 128)" },
  { "fft", workload_fft, "complex FFT of 2^k points, forward and inverse" },
  { "matvec", workload_matvec, "matrix-vector products, 4 passes over the matrix" },
  { "pages", workload_pages,
    "fill every page with its own pattern, check all in random order" },
  { "forks", workload_forks, "16 processes at once, each running pages on 1/16 of the size" },
};
enum { WORKLOAD_COUNT = sizeof workloads / sizeof workloads[0] };

static void usage(FILE *to)
{
  fprintf(
    to, "usage: rampart-workload WORKLOAD --size BYTES [--seed N]\n"
        "\n"
        "Allocates about BYTES of memory, fills all of it from the seed, computes, checks\n"
        "the answer, and prints 'workload NAME size=BYTES seconds=S verified=yes'.\n"
        "BYTES takes K, M, G suffixes (768M). Run it in a memory cgroup smaller than BYTES\n"
        "to make it page. Workloads:\n");
  for (int i = 0; i < WORKLOAD_COUNT; i++)
    fprintf(to, "  %-10s %s\n", workloads[i].name, workloads[i].what);
}


/* Takes "--opt VALUE" or "--opt=VALUE"; returns the value or NULL if argv[*i] is not opt. */
static const char *option_value(int argc, char **argv, int *i, const char *opt)
{
  size_t len = strlen(opt);
  if (strncmp(argv[*i], opt, len) != 0)
    return NULL;
  if (argv[*i][len] == '=')
    return argv[*i] + len + 1;
  if (argv[*i][len] != '\0')
    return NULL;
  if (*i + 1 >= argc) {
    fprintf(stderr, "rampart-workload: %s needs a value\n", opt);
    return "";
  }
  return argv[++*i];
}

int main(int argc, char **argv)
{
  if (argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
    usage(stdout);
    return 0;
  }
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  int which = -1;
  for (int i = 0; i < WORKLOAD_COUNT; i++)
    if (strcmp(argv[1], workloads[i].name) == 0)
      which = i;
  if (which < 0) {
    fprintf(stderr,
            "rampart-workload: unknown workload '%s': use quicksort, gauss, fft, "
            "matvec, pages or forks (--help lists them)\n",
            argv[1]);
    return 2;
  }
  uint64_t size = 0, seed = 1;
  char err[256];
  for (int i = 2; i < argc; i++) {
    const char *v;
    if ((v = option_value(argc, argv, &i, "--size"))) {
      if (rp_parse_size("--size", v, &size, err, sizeof err) < 0) {
        fprintf(stderr, "rampart-workload: %s\n", err);
        return 2;
      }
    } else if ((v = option_value(argc, argv, &i, "--seed"))) {
      if (rp_parse_uint("--seed", v, UINT64_MAX, &seed, err, sizeof err) < 0) {
        fprintf(stderr, "rampart-workload: %s\n", err);
        return 2;
      }
    } else {
      fprintf(stderr, "rampart-workload: unknown option '%s' (try --help)\n", argv[i]);
      return 2;
    }
  }
  if (size == 0) {
    fprintf(stderr, "rampart-workload: --size is required, e.g. --size 768M\n");
    return 2;
  }

  struct workload_result result = { 0 };
  double start = rp_now_seconds();
  if (workloads[which].run(size, seed, &result) < 0) {
    fprintf(stderr, "rampart-workload: %s: %s\n", workloads[which].name, result.detail);
    return 2;
  }
  double seconds = rp_now_seconds() - start;
  printf("workload %s size=%llu seconds=%.3f verified=%s\n", workloads[which].name,
         (unsigned long long)result.used_bytes, seconds, result.verified ? "yes" : "no");
  fflush(stdout);
  if (!result.verified) {
    fprintf(stderr, "rampart-workload: %s: VERIFICATION FAILED: %s\n", workloads[which].name,
            result.detail);
    return 1;
  }
  return 0;
}
