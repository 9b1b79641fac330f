/* The page-op protocol's life cycle: the pool, the stage and its one transition
 * function, the waits, and the end (page_op.h has the diagram). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_core.h"
#include "engine_internal.h"
#include "fifo.h"
#include "log.h"
#include "page_op.h"
#include "page_read.h"
#include "page_write.h"

#define TO(s) (1u << (s))

/* The transitions the protocol has, by kind and from each stage. A read never writes
 * and a write never reads; a move is a read whose verified bytes become a write. */
static const unsigned allowed_next[3][PAGE_OP_STAGES] = {
  [PAGE_OP_READ] = {
    [PAGE_OP_FREE] = TO(PAGE_OP_READING),
    [PAGE_OP_READING] = TO(PAGE_OP_READING) | TO(PAGE_OP_REBUILDING) | TO(PAGE_OP_FREE),
    [PAGE_OP_REBUILDING] = TO(PAGE_OP_READING) | TO(PAGE_OP_FREE),
  },
  [PAGE_OP_WRITE] = {
    [PAGE_OP_FREE] = TO(PAGE_OP_WRITING),
    [PAGE_OP_WRITING] = TO(PAGE_OP_WRITING) | TO(PAGE_OP_ENDING) | TO(PAGE_OP_FREE),
    [PAGE_OP_ENDING] = TO(PAGE_OP_FREE),
  },
  [PAGE_OP_MOVE] = {
    [PAGE_OP_FREE] = TO(PAGE_OP_READING),
    [PAGE_OP_READING] = TO(PAGE_OP_READING) | TO(PAGE_OP_REBUILDING) | TO(PAGE_OP_WRITING) |
                        TO(PAGE_OP_FREE),
    [PAGE_OP_REBUILDING] = TO(PAGE_OP_READING) | TO(PAGE_OP_WRITING) | TO(PAGE_OP_FREE),
    [PAGE_OP_WRITING] = TO(PAGE_OP_WRITING) | TO(PAGE_OP_ENDING) | TO(PAGE_OP_FREE),
    [PAGE_OP_ENDING] = TO(PAGE_OP_FREE),
  },
};

const char *page_op_stage_name(enum page_op_stage stage)
{
  static const char *const names[PAGE_OP_STAGES] = {
    [PAGE_OP_FREE] = "free",
    [PAGE_OP_READING] = "reading",
    [PAGE_OP_REBUILDING] = "rebuilding",
    [PAGE_OP_WRITING] = "writing",
    [PAGE_OP_ENDING] = "ending",
  };
  return (unsigned)stage < PAGE_OP_STAGES ? names[stage] : "?";
}

static const char *kind_name(enum page_op_kind kind)
{
  return kind == PAGE_OP_READ ? "read" : kind == PAGE_OP_WRITE ? "write" : "move";
}

/* Two paths that both think they own an op (a completion run twice, an op started
 * while it waits): going on would complete some later request early, or with another
 * one's bytes. A pager must not do that; it stops, loudly, and the kernel's I/O errors
 * say so too. */
static _Noreturn void protocol_broken(const struct page_op *op, const char *what)
{
  rp_log(RP_LOG_ERROR, "internal error: page operation (%s of page %llu, %s): %s",
         kind_name(op->kind), (unsigned long long)op->page, page_op_stage_name(op->stage),
         what);
  abort();
}

void page_op_enter(struct page_op *op, enum page_op_stage next)
{
  bool allowed = (unsigned)op->kind <= PAGE_OP_MOVE && (unsigned)op->stage < PAGE_OP_STAGES &&
                 (allowed_next[op->kind][op->stage] & TO(next)) != 0;
  if (next == PAGE_OP_FREE && op->waits != PAGE_OP_NOT_WAITING)
    allowed = false; /* still on a queue: whatever ends its wait would start it again */
  if (!allowed) {
    char what[96];
    snprintf(what, sizeof what, "no transition to %s%s", page_op_stage_name(next),
             op->waits != PAGE_OP_NOT_WAITING ? " while it waits" : "");
    protocol_broken(op, what);
  }
  op->stage = next;
}

/* ---- the pool ----------------------------------------------------------------------- */

struct page_op *page_op_get(struct rampart_engine *e)
{
  struct page_op *op = e->free_ops;
  if (!op)
    return NULL;
  e->free_ops = op->next;
  uint8_t *scratch = op->scratch;
  memset(op, 0, sizeof *op); /* stage FREE, waiting for nothing */
  op->scratch = scratch;
  op->engine = e;
  return op;
}

/* page_op_finished has checked the op is not free already (before telling its owner). */
static void page_op_put(struct rampart_engine *e, struct page_op *op)
{
  page_op_enter(op, PAGE_OP_FREE);
  if (e->state)
    page_write_op_recycled(op);
  op->next = e->free_ops;
  e->free_ops = op;
}

void page_op_withhold(struct rampart_engine *e, struct page_op *op)
{
  for (struct page_op **p = &e->free_ops; *p; p = &(*p)->next)
    if (*p == op) {
      *p = op->next;
      op->next = NULL;
      return;
    }
}

/* Pooled only: the ops never withheld (at least half) finish and start what waits. */
void page_op_release_withheld(struct rampart_engine *e, struct page_op *op)
{
  op->next = e->free_ops;
  e->free_ops = op;
}

/* ---- waits ------------------------------------------------------------------------- */

void page_op_begin_wait(struct page_op *op, enum page_op_wait why)
{
  if (op->waits != PAGE_OP_NOT_WAITING)
    protocol_broken(op, "waits twice"); /* on two queues at once, it would start twice */
  if (op->stage == PAGE_OP_FREE || op->stage == PAGE_OP_ENDING)
    protocol_broken(op, "waits with nothing left to do");
  op->waits = why;
  /* A writing op holds a pending count while it waits, so that a write-through disk
   * copy finishing meanwhile cannot end the op under the queue it is on. */
  if (op->stage == PAGE_OP_WRITING)
    op->pending++;
}

void page_op_resume(struct page_op *op)
{
  if (op->waits == PAGE_OP_NOT_WAITING)
    protocol_broken(op, "resumed without waiting");
  op->waits = PAGE_OP_NOT_WAITING;
  if (op->stage == PAGE_OP_WRITING) {
    op->pending--;
    page_write_start(op);
  } else {
    page_read_start(op);
  }
}

/* An op that must wait for a parity buffer, a degraded read's buffers or cleaning. */
void page_op_wait(struct rampart_engine *e, struct page_op *op, enum page_op_wait why)
{
  page_op_begin_wait(op, why);
  FIFO_APPEND(e->wait_head, e->wait_tail, op, next);
}

/* Restarts ops that waited for a resource; called when one is released. */
void page_op_run_waiting(struct rampart_engine *e)
{
  struct page_op *head;
  FIFO_TAKE_ALL(e->wait_head, e->wait_tail, head);
  while (head) {
    struct page_op *op = head;
    head = op->next;
    op->next = NULL;
    page_op_resume(op);
  }
}

/* ---- the end ------------------------------------------------------------------------- */

void page_op_finished(struct page_op *op, int result)
{
  struct rampart_engine *e = op->engine;
  if (op->stage == PAGE_OP_FREE)
    protocol_broken(op, "completed twice");
  op->owner->ended(op, result);
  page_op_put(e, op);
  engine_start_ios(e);
}
