/* The files the engine publishes once a second, each written by a thread of its own:
 * stats-file=PATH (what rampartctl device shows) and metrics-file=PATH (Prometheus text
 * for node_exporter's textfile collector).
 *
 * The engine's loop formats a report and hands it over here; the file system is never
 * touched on the loop. Writing a file can block for as long as the
 * file system likes (a full or slow disk, page cache allocation inside a memory
 * shortage, which is when a swap daemon is busiest), and every request of the device
 * would wait behind it. The writer replaces the file whole (write a temporary, rename),
 * so readers never see half a report, with plain system calls: nothing here allocates
 * after the start.
 *
 * Errors: starting: NULL with a sentence in err (CONTRIBUTING.md, convention 1); a
 * failed write of a report is logged once, and the next report is written anyway.
 */
#ifndef RAMPART_STATS_FILE_H
#define RAMPART_STATS_FILE_H

#include <stdbool.h>
#include <stddef.h>

/* The largest report either file takes (the metrics grow with the servers). */
#define STATS_FILE_MAX_REPORT (256u * 1024u)

struct stats_file;

/* Starts the writer for path; `what` names the setting in messages ("stats-file").
 * With process_memory, what the kernel says the process holds is appended to every
 * report (a line for people). NULL with err when out of memory or no thread. */
struct stats_file *stats_file_start(const char *path, const char *what, bool process_memory,
                                    char *err, size_t errlen);

/* Hands a report over, copied; never blocks. If the writer is still busy with the last
 * one, this one is dropped: the next second's replaces it anyway. */
void stats_file_publish(struct stats_file *sf, const char *report, size_t len);

/* Stops the writer, removes the file (a stale report would mislead rampartctl, and
 * stale metrics would show a device that is gone as healthy) and frees everything.
 * NULL is a no-op. */
void stats_file_stop(struct stats_file *sf);

#endif
