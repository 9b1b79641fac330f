/* rampartd's metrics (see metrics_render.h). Every name is rampart_server_*, with its
 * unit in the name; the server's name is a label of rampart_server_info only, as the
 * Prometheus target (instance) already tells servers apart. */
#include "metrics_render.h"

#include "prom_text.h"
#include "rps_server.h"
#include "server_stat.h"

static void store_metrics(struct prom_out *o, const Rampart__Stat *st)
{
  prom_metric(o, "rampart_server_capacity_pages", "gauge",
              "Pages this server may lend (--memory / 4 KiB).", (double)st->capacity_pages);
  prom_metric(o, "rampart_server_reserved_pages", "gauge",
              "Pages reserved by clients' sessions.", (double)st->reserved_pages);
  prom_metric(o, "rampart_server_stored_pages", "gauge",
              "Pages stored for clients now (every client, live or old versions, parity).",
              (double)st->stored_pages);
  prom_metric(o, "rampart_server_resident_bytes", "gauge",
              "Memory the page store has mapped, metadata included.",
              (double)st->resident_bytes);
}

static void session_metrics(struct prom_out *o, const Rampart__Stat *st)
{
  prom_metric(o, "rampart_server_connections", "gauge", "Open client connections.",
              (double)st->clients_connected);
  const struct prom_sample sessions[] = {
    { "attached", st->sessions_attached },
    { "detached", st->sessions_detached },
  };
  prom_labelled(o, "rampart_server_sessions", "gauge",
                "Client sessions: attached to a connection, or detached and kept for their "
                "lease.",
                "state", sessions, sizeof sessions / sizeof sessions[0]);
  prom_metric(o, "rampart_server_sessions_expired_total", "counter",
              "Sessions whose lease ran out: their pages were freed.",
              (double)st->sessions_expired);
}

static void request_metrics(struct prom_out *o, const struct rps_server *srv,
                            const Rampart__Stat *st)
{
  const struct prom_sample ops[] = {
    { "write", st->ops_write },
    { "read", st->ops_read },
    { "free", st->ops_free },
  };
  prom_labelled(o, "rampart_server_requests_total", "counter", "Page requests served, by op.",
                "op", ops, sizeof ops / sizeof ops[0]);
  prom_metric(o, "rampart_server_received_bytes_total", "counter",
              "Bytes received from clients.", (double)st->bytes_in);
  prom_metric(o, "rampart_server_sent_bytes_total", "counter", "Bytes sent to clients.",
              (double)st->bytes_out);
  const struct prom_sample errors[] = {
    { "protocol", st->errors_protocol },
    { "auth", st->errors_auth },
    { "refused", st->errors_refused },
  };
  prom_labelled(o, "rampart_server_errors_total", "counter",
                "Requests or connections refused, by kind.", "kind", errors,
                sizeof errors / sizeof errors[0]);
  prom_metric(o, "rampart_server_connections_refused_total", "counter",
              "Connections refused at accept: over the unauthenticated budget.",
              (double)srv->stats.connections_refused);
  prom_metric(o, "rampart_server_connections_dropped_total", "counter",
              "Handshakes dropped to make room for newer ones.",
              (double)srv->stats.connections_dropped);
}

static void pressure_metrics(struct prom_out *o, const Rampart__Stat *st)
{
  prom_metric(o, "rampart_server_memory_pressure", "gauge",
              "1 while this host counts as under memory pressure (clients are advised to "
              "move away).",
              st->pressure ? 1.0 : 0.0);
  prom_metric(o, "rampart_server_draining", "gauge",
              "1 once SIGUSR1 asked this server to drain.", st->draining ? 1.0 : 0.0);
  prom_metric(o, "rampart_server_memory_psi_some_avg10_ratio", "gauge",
              "Memory PSI 'some avg10' of this host, as a ratio (0.1 is 10%).",
              st->psi_some_avg10 / 100.0);
  prom_metric(o, "rampart_server_memory_available_bytes", "gauge",
              "MemAvailable of this host.", (double)st->mem_available_bytes);
  prom_metric(o, "rampart_server_advises_sent_total", "counter",
              "Pressure advice frames sent to clients.", (double)st->advises_sent);
}

size_t rps_metrics_render(struct rps_server *srv, char *buf, size_t buflen)
{
  Rampart__Stat st = RAMPART__STAT__INIT;
  rps_server_fill_stat(srv, NULL, &st);
  struct prom_out o;
  prom_begin(&o, buf, buflen);
  char name[200];
  prom_escape_label(st.server_name ? st.server_name : "", name, sizeof name);
  prom_header(&o, "rampart_server_info", "gauge",
              "The server's --name and protocol version.");
  prom_put(&o, "rampart_server_info{name=\"%s\",protocol_version=\"%u\"} 1\n", name,
           st.version);
  prom_metric(&o, "rampart_server_uptime_seconds", "gauge",
              "Seconds since this server started.", (double)st.uptime_seconds);
  store_metrics(&o, &st);
  session_metrics(&o, &st);
  request_metrics(&o, srv, &st);
  pressure_metrics(&o, &st);
  return o.len;
}
