/* Log lines written by a thread of their own, so that the thread that must reconnect
 * a swap device never waits on its own stderr: a file on tmpfs, or journald's socket,
 * needs memory to take a line, and while the device waits for a daemon the machine may
 * have none to give: a thread blocked writing "reconnecting" to a tmpfs file leaves
 * the device's requests to time out. Lines go into a fixed ring; when it is full,
 * lines are counted and dropped.
 *
 * Errors: deferred_log_start returns -1 when its thread cannot start, and nothing else
 * fails: a line that does not fit the ring is counted and dropped.
 */
#ifndef RAMPART_NBD_DEFERRED_LOG_H
#define RAMPART_NBD_DEFERRED_LOG_H

/* Starts the writer; lines are prefixed with prefix. -1 if the thread cannot start (then
 * deferred_log writes directly). */
int deferred_log_start(const char *prefix);
void deferred_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Writes what is left and stops the writer. */
void deferred_log_stop(void);

#endif
