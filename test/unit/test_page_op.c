/* The page-op protocol's transitions (src/engine/page_op.c): every (kind, from, to) the
 * protocol has is taken, and every one it does not have stops the process with an
 * internal error naming the op. A transition wrongly allowed would let two paths both
 * run an op (a request completed twice, or with another one's bytes); one wrongly
 * refused would stop a pager that was doing the right thing. The legal set is written
 * here from docs/engine.md's table, not copied from the code. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "page_op.h"

struct legal {
  enum page_op_kind kind;
  enum page_op_stage from, to;
};

static const struct legal legal[] = {
  /* a read: its copy, or its group's pieces, starting over from the map as it needs */
  { PAGE_OP_READ, PAGE_OP_FREE, PAGE_OP_READING },
  { PAGE_OP_READ, PAGE_OP_READING, PAGE_OP_READING },
  { PAGE_OP_READ, PAGE_OP_READING, PAGE_OP_REBUILDING },
  { PAGE_OP_READ, PAGE_OP_READING, PAGE_OP_FREE },
  { PAGE_OP_READ, PAGE_OP_REBUILDING, PAGE_OP_READING },
  { PAGE_OP_READ, PAGE_OP_REBUILDING, PAGE_OP_FREE },
  /* a write: placed (again), ending with a sub-request out */
  { PAGE_OP_WRITE, PAGE_OP_FREE, PAGE_OP_WRITING },
  { PAGE_OP_WRITE, PAGE_OP_WRITING, PAGE_OP_WRITING },
  { PAGE_OP_WRITE, PAGE_OP_WRITING, PAGE_OP_ENDING },
  { PAGE_OP_WRITE, PAGE_OP_WRITING, PAGE_OP_FREE },
  { PAGE_OP_WRITE, PAGE_OP_ENDING, PAGE_OP_FREE },
  /* a move: a read, then a write of what it read */
  { PAGE_OP_MOVE, PAGE_OP_FREE, PAGE_OP_READING },
  { PAGE_OP_MOVE, PAGE_OP_READING, PAGE_OP_READING },
  { PAGE_OP_MOVE, PAGE_OP_READING, PAGE_OP_REBUILDING },
  { PAGE_OP_MOVE, PAGE_OP_READING, PAGE_OP_WRITING },
  { PAGE_OP_MOVE, PAGE_OP_READING, PAGE_OP_FREE },
  { PAGE_OP_MOVE, PAGE_OP_REBUILDING, PAGE_OP_READING },
  { PAGE_OP_MOVE, PAGE_OP_REBUILDING, PAGE_OP_WRITING },
  { PAGE_OP_MOVE, PAGE_OP_REBUILDING, PAGE_OP_FREE },
  { PAGE_OP_MOVE, PAGE_OP_WRITING, PAGE_OP_WRITING },
  { PAGE_OP_MOVE, PAGE_OP_WRITING, PAGE_OP_ENDING },
  { PAGE_OP_MOVE, PAGE_OP_WRITING, PAGE_OP_FREE },
  { PAGE_OP_MOVE, PAGE_OP_ENDING, PAGE_OP_FREE },
};

static bool is_legal(enum page_op_kind kind, enum page_op_stage from, enum page_op_stage to)
{
  for (size_t i = 0; i < sizeof legal / sizeof legal[0]; i++)
    if (legal[i].kind == kind && legal[i].from == from && legal[i].to == to)
      return true;
  return false;
}

static struct page_op op_in(enum page_op_kind kind, enum page_op_stage stage)
{
  struct page_op op;
  memset(&op, 0, sizeof op);
  op.kind = kind;
  op.stage = stage;
  op.page = 4242;
  return op;
}

/* Runs fn in a child; returns whether it aborted, with its stderr in `out`. */
static bool aborts(void (*fn)(void *), void *arg, char *out, size_t outlen)
{
  int pipefd[2];
  assert_int_equal(pipe(pipefd), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(pipefd[0]);
    dup2(pipefd[1], STDERR_FILENO);
    signal(SIGABRT, SIG_DFL);
    fn(arg);
    _exit(0);
  }
  close(pipefd[1]);
  size_t got = 0;
  ssize_t n;
  while (got + 1 < outlen && (n = read(pipefd[0], out + got, outlen - 1 - got)) > 0)
    got += (size_t)n;
  out[got] = '\0';
  close(pipefd[0]);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (WIFEXITED(status)) {
    assert_int_equal(WEXITSTATUS(status), 0);
    return false;
  }
  assert_true(WIFSIGNALED(status));
  assert_int_equal(WTERMSIG(status), SIGABRT);
  return true;
}

struct transition {
  struct page_op op;
  enum page_op_stage to;
};

static void take_transition(void *arg)
{
  struct transition *t = arg;
  page_op_enter(&t->op, t->to);
  if (t->op.stage != t->to)
    _exit(3); /* allowed but not taken */
}

static const char *const kind_names[] = { "read", "write", "move" };

/* 3 kinds x 5 x 5 stages: exactly the legal ones are taken, every other one aborts
 * and says which op, which page, from which stage to which. */
static void test_every_transition_is_taken_or_refused_as_the_protocol_says(void **state)
{
  (void)state;
  unsigned taken = 0, refused = 0;
  for (int kind = PAGE_OP_READ; kind <= PAGE_OP_MOVE; kind++)
    for (int from = 0; from < PAGE_OP_STAGES; from++)
      for (int to = 0; to < PAGE_OP_STAGES; to++) {
        struct transition t = { op_in((enum page_op_kind)kind, (enum page_op_stage)from),
                                (enum page_op_stage)to };
        char err[512];
        bool aborted = aborts(take_transition, &t, err, sizeof err);
        bool want = is_legal((enum page_op_kind)kind, (enum page_op_stage)from,
                             (enum page_op_stage)to);
        if (aborted == want)
          fail_msg(
            "%s: %s -> %s %s", kind_names[kind], page_op_stage_name((enum page_op_stage)from),
            page_op_stage_name((enum page_op_stage)to),
            want ? "refused, but the protocol has it" : "taken, but the protocol lacks it");
        if (aborted) {
          refused++;
          char expect[128];
          snprintf(expect, sizeof expect,
                   "internal error: page operation (%s of page 4242, %s)", kind_names[kind],
                   page_op_stage_name((enum page_op_stage)from));
          assert_non_null(strstr(err, expect));
          assert_non_null(strstr(err, page_op_stage_name((enum page_op_stage)to)));
        } else {
          taken++;
        }
      }
  assert_int_equal(taken, sizeof legal / sizeof legal[0]);
  assert_int_equal(refused, 3 * PAGE_OP_STAGES * PAGE_OP_STAGES - taken);
}

/* An op still on a queue must not end: whatever ends its wait would start it again. */
static void end_while_waiting(void *arg)
{
  struct page_op *op = arg;
  page_op_enter(op, PAGE_OP_FREE);
}

static void test_an_op_cannot_end_while_it_waits(void **state)
{
  (void)state;
  struct page_op op = op_in(PAGE_OP_WRITE, PAGE_OP_WRITING);
  op.waits = PAGE_OP_WAITS_FOR_SERVER;
  char err[512];
  assert_true(aborts(end_while_waiting, &op, err, sizeof err));
  assert_non_null(strstr(err, "while it waits"));
  op.waits = PAGE_OP_NOT_WAITING;
  assert_false(aborts(end_while_waiting, &op, err, sizeof err));
}

static void begin_wait(void *arg)
{
  page_op_begin_wait(arg, PAGE_OP_WAITS_FOR_BUFFER);
}

/* Waits happen in reading, rebuilding and writing; a writing op holds a pending count
 * while it waits. An op that waits twice (on two queues), or waits in free or ending
 * (nothing left to do, so nothing would resume it right), stops the engine. */
static void test_waits_are_checked_and_a_writing_op_holds_a_count(void **state)
{
  (void)state;
  char err[512];
  struct page_op op = op_in(PAGE_OP_MOVE, PAGE_OP_WRITING);
  page_op_begin_wait(&op, PAGE_OP_WAITS_FOR_CLEANING);
  assert_int_equal(op.pending, 1);
  assert_int_equal(op.waits, PAGE_OP_WAITS_FOR_CLEANING);
  assert_true(aborts(begin_wait, &op, err, sizeof err));
  assert_non_null(strstr(err, "waits twice"));

  op = op_in(PAGE_OP_READ, PAGE_OP_REBUILDING);
  page_op_begin_wait(&op, PAGE_OP_WAITS_FOR_WRITE);
  assert_int_equal(op.pending, 0); /* reads hold nothing */

  op = op_in(PAGE_OP_WRITE, PAGE_OP_ENDING);
  assert_true(aborts(begin_wait, &op, err, sizeof err));
  assert_non_null(strstr(err, "waits with nothing left to do"));
  op = op_in(PAGE_OP_READ, PAGE_OP_FREE);
  assert_true(aborts(begin_wait, &op, err, sizeof err));
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_every_transition_is_taken_or_refused_as_the_protocol_says),
    cmocka_unit_test(test_an_op_cannot_end_while_it_waits),
    cmocka_unit_test(test_waits_are_checked_and_a_writing_op_holds_a_count),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
