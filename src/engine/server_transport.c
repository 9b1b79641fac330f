/* Where a page op meets the wire: the TCP connection, and a filter over it (see
 * server_transport.h). */
#include <stdio.h>

#include "engine_core.h"
#include "engine_internal.h"
#include "server_health.h"
#include "server_transport.h"

bool server_usable_for_reads(const struct server *s)
{
  return (s->state == RAMPART_SERVER_UP || s->state == RAMPART_SERVER_ADVISED) && s->conn &&
         rp_conn_is_connected(s->conn);
}

/* A request for a server that cannot take it now. Writes and frees must reach this
 * server's own session: they wait for it while it reconnects (the servers' health
 * queues them, server_health_queue). Reads restart from the page map instead
 * (page_read.c); anything else completes at once with RP_ERR_DISCONNECTED. */
static void server_unreachable(struct rampart_engine *e, struct server *s,
                               struct rp_request *req)
{
  if ((req->op == RP_OP_WRITE || req->op == RP_OP_FREE) && server_health_queue(e, s, req))
    return;
  req->status = RP_ERR_DISCONNECTED;
  snprintf(req->error_message, sizeof req->error_message, "server %s is %s", s->address,
           s->state == RAMPART_SERVER_LOST ? "lost" : "not connected");
  req->done(req);
}

void server_transport_pass(struct rampart_engine *e, unsigned index, struct rp_request *req)
{
  struct server *s = e->set.servers[index];
  if (server_usable_for_reads(s))
    rp_conn_submit(s->conn, req);
  else
    server_unreachable(e, s, req);
}

void server_transport_send(struct rampart_engine *e, unsigned index, struct rp_request *req)
{
  if (e->set.transport_filter)
    e->set.transport_filter->send(e->set.transport_filter_ctx, e, index, req);
  else
    server_transport_pass(e, index, req);
}

void server_transport_flush(struct rampart_engine *e)
{
  /* A flush that finds a connection broken fails its requests, and their callbacks may
   * close it: read each server's connection afresh. */
  for (unsigned i = 0; i < e->set.nservers; i++)
    if (e->set.servers[i]->conn)
      rp_conn_flush(e->set.servers[i]->conn);
}

struct filter_change {
  const struct server_transport_filter *filter;
  void *ctx;
};

static void change_filter(struct rampart_engine *e, void *arg)
{
  const struct filter_change *c = arg;
  if (e->set.transport_filter && e->set.transport_filter->detach)
    e->set.transport_filter->detach(e->set.transport_filter_ctx, e, e->loop);
  e->set.transport_filter = c->filter;
  e->set.transport_filter_ctx = c->ctx;
  if (c->filter && c->filter->attach)
    c->filter->attach(c->ctx, e, e->loop);
  /* A frontend thread may run this while the loop sleeps: wake it to see the filter's
   * watchers, and what a detach passed on. */
  e->loop_changes++;
  server_transport_flush(e);
}

void server_transport_set_filter(struct rampart_engine *e,
                                 const struct server_transport_filter *f, void *ctx)
{
  struct filter_change c = { .filter = f, .ctx = ctx };
  engine_call(e, change_filter, &c);
}
