/* The STAT reply from the server's parts (server_stat.h). */
#include "server_stat.h"

#include "wire.h"

void rps_server_fill_stat(struct rps_server *srv, const struct rps_session *asking,
                          Rampart__Stat *st)
{
  struct rps_store_stats ss;
  rps_store_get_stats(srv->store, &ss);
  const struct rps_pressure_sample *ps = rps_pressure_last(srv->pressure);
  st->server_name = (char *)srv->opt->name;
  st->version = RP_PROTOCOL_VERSION;
  st->uptime_seconds = (uint64_t)(ev_now(srv->loop) - srv->started);
  st->page_size = RP_PAGE_SIZE;
  st->capacity_pages = ss.capacity_pages;
  st->reserved_pages = ss.reserved_pages;
  st->stored_pages = ss.stored_pages;
  st->stored_bytes = ss.stored_pages * RP_PAGE_SIZE;
  st->resident_bytes = ss.resident_bytes;
  st->clients_connected = srv->nconns;
  st->sessions_attached = srv->sessions->attached;
  st->sessions_detached = srv->sessions->detached;
  st->sessions_expired = srv->sessions->expired;
  st->ops_write = srv->stats.ops_write;
  st->ops_read = srv->stats.ops_read;
  st->ops_free = srv->stats.ops_free;
  st->bytes_in = srv->stats.bytes_in;
  st->bytes_out = srv->stats.bytes_out;
  st->errors_protocol = srv->stats.errors_protocol;
  st->errors_auth = srv->stats.errors_auth;
  st->errors_refused = srv->stats.errors_refused;
  st->pressure = rps_pressure_active(srv->pressure);
  st->draining = rps_pressure_draining(srv->pressure);
  st->psi_some_avg10 = ps->psi_ok ? ps->psi_some_avg10 : 0.0;
  st->mem_available_bytes = ps->mem_ok ? ps->mem_available : 0;
  st->advises_sent = srv->stats.advises_sent;
  st->session_stored_pages = asking ? rps_account_stored(asking->acct) : 0;
  st->session_reserved_pages = asking ? rps_account_reserved(asking->acct) : 0;
}
