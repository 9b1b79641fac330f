/* What each redundancy policy does, as one table of behaviour.
 *
 * Every policy is a group (docs/engine.md): parity-log is S members and their XOR,
 * mirror is one member and its copy, none and write-through are members with no
 * parity. What still differs between them is listed here, once, as behaviour the
 * engine's files ask about ("does a read fall back to the disk copy?"), instead of
 * each file comparing the policy's name: a reader finds every difference in this
 * table, and a new policy is a new row, not a hunt through page_read.c, page_write.c,
 * page_mover.c and server_health.c. The policy's name (redundancy=NAME) lives here too:
 * config.c parses and prints it through redundancy_policy_named and the row's name.
 * The one place that still switches on the id is config.c's resolution of the
 * defaults (redundancy=auto, group=), which is about settings, not behaviour.
 *
 * Errors: none; a lookup that finds nothing returns NULL.
 */
#ifndef RAMPART_REDUNDANCY_POLICY_H
#define RAMPART_REDUNDANCY_POLICY_H

#include <stdbool.h>

#include "rampart_types.h"

/* Where a read goes when its page's server cannot serve it (lost, reconnecting, or its
 * copy failed verification). */
enum second_copy {
  SECOND_COPY_NONE,   /* there is none: the read waits for the server or fails EIO */
  SECOND_COPY_PARITY, /* rebuilt from the group's other members and parity (degraded) */
  SECOND_COPY_DISK,   /* the page's own disk copy at spill slot = page */
};

struct redundancy_policy {
  enum rampart_redundancy id;
  const char *name; /* as redundancy= takes it, and as reports print it */
  /* A group keeps a parity page (mirror: a copy of its one member), on a server of
   * its own: a group needs two placeable servers, and costs 1/S more slots per page. */
  bool parity;
  /* A write completes only once its group's parity is stored too (mirror: the copy),
   * not as soon as its member is (parity-log: the client's open parity covers it). */
  bool write_waits_for_parity;
  /* Every page is also written to the spill store at slot = page, which is claimed for
   * good at open (so spill-size= must be at least size=). That copy is the page when
   * no server can take it, and moves never touch it. */
  bool disk_copy;
  enum second_copy second_copy;
  /* A write its server never answered waits for the server's session to resume (and
   * is sent again there). Not with a disk copy: that copy already is the page. */
  bool unanswered_write_waits;
  /* A flush makes the disk copies durable (fdatasync of the spill store). */
  bool flush_syncs_disk;
  /* Pages that had to go to the spill store move back to servers with room. Not with
   * a disk copy: a page in the spill store is at its own slot, where it stays. */
  bool spilled_pages_move_back;
  /* For the log line when a server fails: what happens to its pages meanwhile. */
  const char *while_server_away;
  /* For a read that cannot be served: why there is no other copy. */
  const char *no_second_copy;
};

/* The row of an effective policy (never RAMPART_REDUNDANCY_AUTO: rampart_config_effective
 * resolves that first). */
const struct redundancy_policy *redundancy_policy_of(enum rampart_redundancy id);
/* The row whose name is `name` (redundancy=NAME), or NULL: "auto" has no row. */
const struct redundancy_policy *redundancy_policy_named(const char *name);

/* Placeable servers a new group needs: its members', and the parity's own. */
static inline unsigned redundancy_policy_servers_needed(const struct redundancy_policy *p)
{
  return p->parity ? 2u : 1u;
}

#endif
