/* The state file, $RAMPART_RUN_DIR/NAME/state: KEY=VALUE lines that 'on' and the keeper
 * append to, so 'off' undoes exactly what was done; the last line for a key wins. The
 * layout is shared with every rampart-swap before this one (and the tests write it).
 *
 * Errors: swap_state_get returns false when the key is absent or the file unreadable;
 * swap_state_set ends the process through swap_die when it cannot write (swap_context.h).
 */
#ifndef RAMPART_SUPERVISOR_SWAP_STATE_H
#define RAMPART_SUPERVISOR_SWAP_STATE_H

#include <stdbool.h>
#include <stddef.h>

struct swap_context;

/* The last value of key into buf (empty when the value is); false when there is none. */
bool swap_state_get(const struct swap_context *c, const char *key, char *buf, size_t buflen);
/* The last value as a number: its pid, a count; 0 when absent or not a number. */
long swap_state_num(const struct swap_context *c, const char *key);
void swap_state_set(const struct swap_context *c, const char *key, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));
/* Calls fn for each value of key, in order. */
void swap_state_each(const struct swap_context *c, const char *key,
                     void (*fn)(const char *value, void *arg), void *arg);
/* Calls fn for each line (without its newline) of the file in the state directory;
 * nothing when it cannot be read. */
void swap_state_file_lines(const struct swap_context *c, const char *file,
                           void (*fn)(const char *line, void *arg), void *arg);
/* The state file exists and can be read. */
bool swap_state_exists(const struct swap_context *c);
/* path of a file in the state directory into buf; returns buf. */
const char *swap_state_path(const struct swap_context *c, const char *file, char *buf,
                            size_t buflen);

#endif
