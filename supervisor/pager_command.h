/* The command lines of the device's pager and standbys, built from what 'on' recorded:
 * the pager's settings ($state/pager.args, one per line: a standby must have exactly the
 * serving pager's) and the state's daemon=, threads=, ublk_id=, queues=, depth=.
 *
 * Errors: the builders end the process through swap_die when memory runs out
 * (swap_context.h); pager_state_layout returns false when the binary cannot say.
 */
#ifndef RAMPART_SUPERVISOR_PAGER_COMMAND_H
#define RAMPART_SUPERVISOR_PAGER_COMMAND_H

#include <stdbool.h>
#include <stddef.h>

struct swap_context;

/* A NULL-ended argument vector that owns its strings. */
struct arg_list {
  char **v;
  size_t n;
};

void arg_push(struct arg_list *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void arg_free(struct arg_list *a);

/* The pager's settings, one argument each. */
void pager_settings_push(const struct swap_context *c, struct arg_list *a);
/* rampart-nbd-server or nbdkit (as the state's daemon= says) serving socket, with the
 * pager's settings and extra (NULL or a setting such as "standby=true"). */
void pager_nbd_command(const struct swap_context *c, const char *socket, const char *extra,
                       struct arg_list *a);
/* rampart-ublk for the device, extra (NULL or "standby=true") first. */
void pager_ublk_command(const struct swap_context *c, const char *extra, struct arg_list *a);
/* LD_PRELOAD for the pager: nbdkit's in a sanitizer build, else NULL. */
const char *pager_preload(const struct swap_context *c);

/* The state layout that the pager binary installed now takes over for frontend (ublk or
 * nbd, with daemon the NBD daemon), as it says itself; false when it cannot say. */
bool pager_state_layout(const struct swap_context *c, const char *frontend,
                        const char *daemon, char *buf, size_t buflen);

#endif
