/* Test helper: many pages in flight through the async API (see page_io.h). */
#include "page_io.h"

#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_process.h"

struct run {
  struct rp_conn *conn;
  uint8_t op;
  uint64_t next, end, issued, completed, seed;
  struct rp_test_io_result *res;
  uint8_t expect[RP_PAGE_SIZE];
};

static void issue(struct run *run, struct rp_request *r);

static void done(struct rp_request *r)
{
  struct run *run = r->user;
  struct rp_test_io_result *res = run->res;
  run->completed++;
  res->status_count[r->status < 128 ? r->status : 127]++;
  if (r->status != RP_OK) {
    if (res->failed++ == 0) {
      res->first_status = r->status;
      snprintf(res->first_error, sizeof res->first_error, "%s slot %llu: %s: %s",
               rp_op_name(r->op), (unsigned long long)r->slot, rp_status_name(r->status),
               r->error_message);
    }
  } else if (r->op == RP_OP_READ) {
    rp_test_fill_page(run->expect, run->seed, r->slot);
    if (memcmp(run->expect, r->page, RP_PAGE_SIZE) != 0) {
      if (res->mismatched++ == 0)
        fprintf(stderr, "test: slot %llu read back different bytes\n",
                (unsigned long long)r->slot);
    } else {
      res->ok++;
    }
  } else {
    res->ok++;
  }
  if (rp_conn_is_connected(run->conn))
    issue(run, r);
}

static void issue(struct run *run, struct rp_request *r)
{
  if (run->next >= run->end)
    return;
  r->op = run->op;
  r->slot = run->next++;
  r->count = 0;
  if (r->op == RP_OP_WRITE)
    rp_test_fill_page(r->page, run->seed, r->slot);
  else
    memset(r->page, 0xEE, RP_PAGE_SIZE);
  run->issued++;
  rp_conn_submit(run->conn, r);
}

int rp_test_pages(struct rp_conn *conn, uint8_t op, uint64_t first, uint64_t n,
                  unsigned depth, uint64_t seed, struct rp_test_io_result *res)
{
  struct rp_test_io_result local;
  if (!res)
    res = &local;
  memset(res, 0, sizeof *res);
  struct ev_loop *loop = rp_conn_loop(conn);
  if (!loop || depth == 0)
    return -1;
  struct rp_request *reqs = calloc(depth, sizeof *reqs);
  uint8_t *bufs = malloc((size_t)depth * RP_PAGE_SIZE);
  if (!reqs || !bufs) {
    free(reqs);
    free(bufs);
    return -1;
  }
  struct run run = {
    .conn = conn, .op = op, .next = first, .end = first + n, .seed = seed, .res = res
  };
  for (unsigned i = 0; i < depth && i < n; i++) {
    reqs[i].page = bufs + (size_t)i * RP_PAGE_SIZE;
    reqs[i].done = done;
    reqs[i].user = &run;
    issue(&run, &reqs[i]);
  }
  while (run.completed < run.issued)
    ev_run(loop, EVRUN_ONCE);
  free(reqs);
  free(bufs);
  return res->ok == n ? 0 : -1;
}
