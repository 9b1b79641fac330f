/* Which process a recorded pid is. A pid alone names whatever process has it now: once a
 * daemon has ended, the kernel may give its pid to any other. So every process rampart-swap
 * starts is recorded in the state with its start time (field 22 of /proc/PID/stat, which
 * exec leaves as it is) and, once it has said it is ready (and so exec'd its program),
 * with that program: proc_PID=START [EXE]. A recorded pid is the device's process while
 * they still match. Signals and waits go through a pidfd opened and then checked against
 * the record, so a signal can reach no process that took the pid since.
 *
 * Errors: the checks return false (or -1 for a pidfd) for a process that is not the one
 * recorded; swap_pid_ours says so on stderr and in the state. swap_stop_pid ends the
 * process through swap_die when a process survives SIGKILL (swap_context.h).
 */
#ifndef RAMPART_SUPERVISOR_PROC_IDENTITY_H
#define RAMPART_SUPERVISOR_PROC_IDENTITY_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct swap_context;

/* The running process's start time into buf; false when there is no such process. */
bool proc_start_time(pid_t pid, char *buf, size_t buflen);
/* The running process's program (without " (deleted)"); false when it cannot be read. */
bool proc_exe(pid_t pid, char *buf, size_t buflen);

/* Records pid's start time, and with with_exe its program (nothing when it has ended). */
void swap_identity_record(const struct swap_context *c, pid_t pid, bool with_exe);
/* The process recorded under pid still runs (its start time matches; for a state that
 * records no identity, it runs one of the programs rampart-swap starts). */
bool swap_pid_alive(const struct swap_context *c, pid_t pid);
/* swap_pid_alive, and its program is the one recorded; when pid now belongs to another
 * process, says so, notes it in the state (left_alone=) and returns false. */
bool swap_pid_ours(const struct swap_context *c, pid_t pid, const char *what);
/* A pidfd for the process recorded under pid, checked after it is opened; -1 when that
 * process has ended (or pid is now another's). */
int swap_pidfd(const struct swap_context *c, pid_t pid);
/* Waits up to ms for the process behind pidfd to end; true when it has. */
bool pidfd_wait_gone(int pidfd, int ms);

/* SIGTERM, then after 10 s SIGKILL, to the process recorded under pid, if it is ours. */
void swap_stop_pid(const struct swap_context *c, pid_t pid, const char *what);
/* SIGKILL to it, if it is ours; false when it survives 5 s. */
bool swap_kill_pid(const struct swap_context *c, pid_t pid, const char *what);
/* Waits up to ms for the process recorded under pid to end; true when it has. */
bool swap_wait_gone(const struct swap_context *c, pid_t pid, int ms);

/* What a daemon holds, from /proc: "N MiB resident, M MiB locked", or "?". */
const char *proc_memory(pid_t pid, char *buf, size_t buflen);

#endif
