/* Named steps of the engine's multi-step updates where a test may kill the pager
 * (test_engine_recovery): a crash between any two of them must leave a state that a
 * restart takes over without losing a page, even with a server lost at the same time.
 * A random kill lands inside these windows only now and then; a named point lands
 * there every time.
 *
 * Only a test that links the engine sets the hook, in its own process: no option,
 * config line or environment variable can make an installed pager stop here.
 *
 * Errors: none: crash points only name steps.
 */
#ifndef RAMPART_CRASH_POINT_H
#define RAMPART_CRASH_POINT_H

extern void (*rampart_crash_point_hook)(const char *point);

static inline void crash_point(const char *point)
{
  if (rampart_crash_point_hook)
    rampart_crash_point_hook(point);
}

#endif
