/* Starting the device's daemons, and what they say. Each daemon runs in a session of its
 * own under a small supervisor, a fork of rampart-swap (no shell) that stays its parent
 * and writes how it ended to the daemon's log, $state/TAG.log, where 'status' and a
 * failed 'on' show its last words. Why a parent that lives exactly as long as the daemon:
 * Debian's nbdkit 1.32 arms PR_SET_PDEATHSIG(SIGTERM) when it starts, so with rampart-swap
 * as its parent it would begin shutting down the moment 'on' returns, and swap-out writes
 * would fail under the kernel. The OOM killer leaves the supervisor and its daemon alone:
 * every page swapped out is behind them.
 *
 * The daemons say that they serve, stand by or took over by sd_notify: every one is
 * started with NOTIFY_SOCKET=$state/notify, where the notify listener (rampartctl's
 * notify_listen_main, run in a fork) writes each line as "PID KEY=VALUE" to
 * $state/notify.log with the sender's pid as the kernel gives it: READY=1,
 * RAMPART_STANDBY=1, RAMPART_TOOK_OVER=1, STATUS=... The logs are for people only.
 *
 * Errors: the spawns and waits end the process through swap_die, with what failed and
 * the daemon's log's end (swap_context.h); the queries return false.
 */
#ifndef RAMPART_SUPERVISOR_DAEMON_SPAWN_H
#define RAMPART_SUPERVISOR_DAEMON_SPAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct swap_context;

/* argv (NULL-ended) under a supervisor, its output to $state/TAG.log; ld_preload, when
 * not NULL, is its LD_PRELOAD. Records the supervisor (supervisor_pid=) and the daemon
 * with their start times, and log_PID=; returns the daemon's pid. */
pid_t swap_spawn(const struct swap_context *c, const char *tag, const char *const argv[],
                 const char *ld_preload);

/* The notify listener, before any daemon: records notify_pid. */
void swap_start_notify_listener(const struct swap_context *c);

/* pid sent the line KEY=VALUE kv. */
bool swap_notified(const struct swap_context *c, pid_t pid, const char *kv);
/* The rest of the last STATUS=PREFIX... that pid sent, into buf; false when none. */
bool swap_notified_status(const struct swap_context *c, pid_t pid, const char *prefix,
                          char *buf, size_t buflen);
/* Waits until pid sent kv; fails saying what and its log's end when pid exits first or
 * seconds pass. Then records pid's program: it has exec'd it to say anything. */
void swap_wait_notified(const struct swap_context *c, pid_t pid, const char *kv, int seconds,
                        const char *what);
/* The last n lines of a file joined by ' ' into buf (empty when unreadable); returns buf. */
const char *file_tail(const char *path, int n, char *buf, size_t buflen);

#endif
