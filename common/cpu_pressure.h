/* How much of the time tasks on this machine waited for a CPU: the kernel's pressure
 * stall information (/proc/pressure/cpu, "some"), sampled between two calls.
 *
 * A thread that spins for a reply instead of sleeping (the engine's poll-us=, rampartd
 * --poll-us) wins only while a CPU is idle for the thread it waits on: on a machine
 * whose runnable tasks already wait for CPUs, the spin takes a CPU from one of them, the
 * server or the application among them, and the page-in gets slower, not faster
 * (docs/page-in.md). The share of time some task waited says which of the two it is.
 *
 * Errors: cpu_pressure_open leaves fd -1 where the kernel has no PSI (built without it,
 * or booted psi=0); cpu_pressure_sample then returns -1, "unknown".
 */
#ifndef RAMPART_CPU_PRESSURE_H
#define RAMPART_CPU_PRESSURE_H

#include <stdint.h>

struct cpu_pressure {
  int fd;
  uint64_t stalled_us; /* "some" total at the last sample */
  uint64_t at_ns;      /* when it was taken (CLOCK_MONOTONIC) */
};

void cpu_pressure_open(struct cpu_pressure *p);
void cpu_pressure_close(struct cpu_pressure *p);

/* The percentage (0-100) of the time since the previous sample that at least one
 * runnable task waited for a CPU; -1 when unknown (no PSI, or the first sample). */
int cpu_pressure_sample(struct cpu_pressure *p, uint64_t now_ns);

/* The same figure from two readings, for tests: "some" totals in µs, times in ns. */
int cpu_pressure_percent(uint64_t stalled_before_us, uint64_t stalled_now_us,
                         uint64_t before_ns, uint64_t now_ns);

#endif
