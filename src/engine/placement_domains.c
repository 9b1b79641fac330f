/* Failure domains in placement (see placement_domains.h). */
#include "placement_domains.h"

#include <stdio.h>
#include <string.h>

#include "engine_core.h"
#include "log.h"
#include "parity_group.h"
#include "server_set.h"

void placement_domains_set(struct rampart_engine *e, struct server *s, const char *domain)
{
  if (!domain || !domain[0] || strcmp(s->domain, domain) == 0)
    return;
  snprintf(s->domain, sizeof s->domain, "%s", domain);
  s->domain_id = 0;
  for (unsigned i = 0; i < e->set.nservers && !s->domain_id; i++) {
    const struct server *o = e->set.servers[i];
    if (o != s && o->domain_id && strcmp(o->domain, domain) == 0)
      s->domain_id = o->domain_id;
  }
  if (!s->domain_id)
    s->domain_id = ++e->placement.domain_ids;
}

/* The open group's pieces in domain d: members placed so far and its parity servers. */
static unsigned pieces_in(const struct rampart_engine *e, const struct group *g, unsigned d)
{
  unsigned n = 0;
  for (unsigned m = 0; m < g->members; m++)
    n += e->set.servers[g->server[m]]->domain_id == d;
  if (g->has_parity)
    n += e->set.servers[e->placement.open_parity_server]->domain_id == d;
  if (g->parities > 1)
    n += e->set.servers[e->placement.open_q_server]->domain_id == d;
  return n;
}

static bool is_parity_server(const struct rampart_engine *e, const struct group *g,
                             unsigned i)
{
  return (g->has_parity && i == e->placement.open_parity_server) ||
         (g->parities > 1 && i == e->placement.open_q_server);
}

/* The members domain d can still take: its placeable servers not holding a parity,
 * up to what the per-domain bound leaves. */
static unsigned room_in(const struct rampart_engine *e, const struct group *g, unsigned d)
{
  unsigned servers = 0, used = pieces_in(e, g, d), bound = g->parities;
  for (unsigned i = 0; i < e->set.nservers; i++)
    servers += e->set.servers[i]->domain_id == d &&
               server_usable_for_placement(e->set.servers[i]) && !is_parity_server(e, g, i);
  unsigned left = used < bound ? bound - used : 0;
  return servers < left ? servers : left;
}

bool placement_domains_spread(struct rampart_engine *e, const struct group *g)
{
  if (!g->parities || !g->has_parity)
    return false;
  unsigned room = 0, domains = 0;
  for (unsigned i = 0; i < e->set.nservers; i++) {
    const struct server *s = e->set.servers[i];
    if (!server_usable_for_placement(s))
      continue;
    if (!s->domain_id)
      return false; /* domains not known (no etcd, or not yet read) */
    bool first = true;
    for (unsigned j = 0; j < i && first; j++)
      first = !(e->set.servers[j]->domain_id == s->domain_id &&
                server_usable_for_placement(e->set.servers[j]));
    if (first) {
      domains++;
      room += room_in(e, g, s->domain_id);
    }
  }
  bool spread = room >= g->capacity;
  uint8_t say = spread ? DOMAINS_SAID_SPREAD : DOMAINS_SAID_NOT;
  if (!(e->placement.domains_said & say)) { /* each, once a device */
    e->placement.domains_said |= say;
    if (spread)
      rp_log(RP_LOG_INFO,
             "placement: groups spread over %u failure domains, at most %u pieces of a "
             "group in one",
             domains, (unsigned)g->parities);
    else
      rp_log(RP_LOG_WARN,
             "placement: %u failure domains cannot hold a group of %u+%u with at most %u "
             "pieces in one: its pieces go to distinct servers only, and losing a whole "
             "domain may take more than its parities rebuild; register servers in more "
             "domains (rampartd --failure-domain)",
             domains, (unsigned)g->capacity, (unsigned)g->parities, (unsigned)g->parities);
  }
  return spread;
}

bool placement_domain_has_room(const struct rampart_engine *e, const struct group *g,
                               unsigned i)
{
  unsigned d = e->set.servers[i]->domain_id;
  return d && pieces_in(e, g, d) < g->parities;
}
