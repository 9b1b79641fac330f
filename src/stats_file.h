/* The stats file (stats-file=PATH) that rampartctl reads, written by a thread of its own.
 *
 * The engine's loop formats a report once a second and hands it over here; the file
 * system is never touched on the loop. Writing a file can block for as long as the
 * file system likes (a full or slow disk, page cache allocation inside a memory
 * shortage, which is when a swap daemon is busiest), and every request of the device
 * would wait behind it. The writer replaces the file whole (write a temporary, rename),
 * so readers never see half a report, with plain system calls: nothing here allocates
 * after the start.
 */
#ifndef RAMPART_STATS_FILE_H
#define RAMPART_STATS_FILE_H

#include <stddef.h>

#define STATS_FILE_MAX_REPORT 16384u

struct stats_file;

/* Starts the writer for path. NULL with err when out of memory or no thread. */
struct stats_file *stats_file_start(const char *path, char *err, size_t errlen);

/* Hands a report over, copied; never blocks. If the writer is still busy with the last
 * one, this one is dropped: the next second's replaces it anyway. */
void stats_file_publish(struct stats_file *sf, const char *report, size_t len);

/* Stops the writer, removes the file (a stale report would mislead rampartctl) and frees
 * everything. NULL is a no-op. */
void stats_file_stop(struct stats_file *sf);

#endif
