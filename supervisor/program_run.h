/* Running a short-lived program (modprobe, mkswap, swapon, losetup, nbdinfo, ...) with
 * posix_spawn, no shell, and waiting for it: its output captured, or sent away.
 *
 * Errors: run_program returns the program's exit status, 128 + the signal that ended it,
 * 124 when it outlived the timeout (it is then killed), or 127 when it could not be run.
 */
#ifndef RAMPART_SUPERVISOR_PROGRAM_RUN_H
#define RAMPART_SUPERVISOR_PROGRAM_RUN_H

#include <stdbool.h>
#include <stddef.h>

enum run_output {
  RUN_INHERIT, /* the program writes where we do */
  RUN_CAPTURE, /* into out (NUL-terminated, cut at outlen) */
  RUN_DISCARD, /* to /dev/null */
};

struct run_io {
  enum run_output out_mode;
  enum run_output err_mode; /* RUN_CAPTURE: into out, after the output */
  char *out;
  size_t outlen;
  int timeout_ms;        /* 0: none */
  const char *append_to; /* both to this file, appended; overrides the modes */
};

int run_program(const char *const argv[], const struct run_io *io);
/* run_program with both outputs discarded, no timeout: true when it exits 0. */
bool run_quiet(const char *const argv[]);

#endif
