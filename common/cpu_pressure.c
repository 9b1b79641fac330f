/* CPU pressure between two samples (cpu_pressure.h). */
#include "cpu_pressure.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cpu_pressure_open(struct cpu_pressure *p)
{
  *p = (struct cpu_pressure){ .fd = open("/proc/pressure/cpu", O_RDONLY | O_CLOEXEC) };
}

void cpu_pressure_close(struct cpu_pressure *p)
{
  if (p->fd >= 0)
    close(p->fd);
  p->fd = -1;
}

int cpu_pressure_percent(uint64_t stalled_before_us, uint64_t stalled_now_us,
                         uint64_t before_ns, uint64_t now_ns)
{
  if (now_ns <= before_ns || stalled_now_us < stalled_before_us)
    return -1;
  uint64_t pct = (stalled_now_us - stalled_before_us) * 100000u / (now_ns - before_ns);
  return pct > 100 ? 100 : (int)pct;
}

/* The "some" line's total=, in µs: "some avg10=0.00 avg60=0.00 avg300=0.00 total=N". */
static int read_stalled_us(int fd, uint64_t *us)
{
  char buf[256];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0)
    return -1;
  buf[n] = '\0';
  buf[strcspn(buf, "\n")] = '\0'; /* the "some" line only: "full" has a total= too */
  const char *total = strncmp(buf, "some ", 5) == 0 ? strstr(buf, "total=") : NULL;
  if (!total)
    return -1;
  char *end;
  *us = strtoull(total + 6, &end, 10);
  return end == total + 6 ? -1 : 0;
}

int cpu_pressure_sample(struct cpu_pressure *p, uint64_t now_ns)
{
  uint64_t us;
  if (p->fd < 0 || read_stalled_us(p->fd, &us) != 0)
    return -1;
  int pct = p->at_ns ? cpu_pressure_percent(p->stalled_us, us, p->at_ns, now_ns) : -1;
  p->stalled_us = us;
  p->at_ns = now_ns;
  return pct;
}
