/* Failure domains in placement: a group keeps at most as many of its pieces (members
 * and parities) in one failure domain as it has parities, so losing a whole domain (a
 * rack, a host) costs it no more than its parity rebuilds: under parity=1 every piece
 * in a domain of its own, under parity=2 at most two in one.
 *
 * The domains are what each server registered in etcd (rampartd --failure-domain), set
 * by the device's follower (cluster_follow.c). A group spreads over them when every
 * placeable server has one and there are enough for it, decided when it opens; else its
 * pieces go to distinct servers only, and the log says so once.
 *
 * Errors: none: nothing here fails.
 */
#ifndef RAMPART_PLACEMENT_DOMAINS_H
#define RAMPART_PLACEMENT_DOMAINS_H

#include <stdbool.h>

struct rampart_engine;
struct server;
struct group;

/* Server s is in failure domain `domain` (a name; "" or NULL: not known). */
void placement_domains_set(struct rampart_engine *e, struct server *s, const char *domain);

/* Whether the open group g, its parity servers reserved, can keep at most g->parities
 * pieces per domain with the placeable servers there are now. */
bool placement_domains_spread(struct rampart_engine *e, const struct group *g);

/* Whether server i's domain has room for one more piece of the open group g. */
bool placement_domain_has_room(const struct rampart_engine *e, const struct group *g,
                               unsigned i);

#endif
