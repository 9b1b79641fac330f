/* Logging for rampart's own processes (rampartd, rampartctl, tests): one line per
 * event on stderr, which journald captures under systemd. The nbdkit plugin logs
 * through nbdkit_debug/nbdkit_error instead and installs a hook here.
 *
 * Errors: none: logging cannot fail.
 */
#ifndef RAMPART_COMMON_LOG_H
#define RAMPART_COMMON_LOG_H

enum rp_log_level { RP_LOG_ERROR, RP_LOG_WARN, RP_LOG_INFO, RP_LOG_DEBUG };

void rp_log(enum rp_log_level level, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));
void rp_log_set_level(enum rp_log_level level);
/* Prefix every line with this program name (default "rampart"). */
void rp_log_set_program(const char *name);
/* Route lines to a function instead of stderr (the nbdkit plugin uses nbdkit's). */
void rp_log_set_sink(void (*sink)(enum rp_log_level level, const char *line));

#endif
