/* The completion mailbox (common/mailbox.c): items posted from other threads reach the
 * owner in order, the first post since a take wakes it once, and a take with no wake
 * reads nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include "mailbox.h"

#define POSTS 1000

static bool readable(int fd)
{
  struct pollfd p = { .fd = fd, .events = POLLIN };
  return poll(&p, 1, 0) == 1;
}

static void test_first_post_wakes_once(void **state)
{
  (void)state;
  struct rp_mailbox m;
  int items[3];
  void *out[3];
  assert_int_equal(rp_mailbox_init(&m, 3, true), 0);
  assert_false(readable(m.event_fd));
  assert_int_equal(rp_mailbox_take_woken(&m, out), 0);
  for (int i = 0; i < 3; i++)
    rp_mailbox_post(&m, &items[i]);
  assert_true(readable(m.event_fd));
  assert_int_equal(rp_mailbox_take_woken(&m, out), 3);
  for (int i = 0; i < 3; i++)
    assert_ptr_equal(out[i], &items[i]);
  assert_false(readable(m.event_fd)); /* one count for the three: read with them */
  assert_int_equal(rp_mailbox_take_woken(&m, out), 0);
  rp_mailbox_wake(&m); /* nothing posted: woken all the same, and nothing to take */
  assert_true(readable(m.event_fd));
  assert_int_equal(rp_mailbox_take_woken(&m, out), 0);
  assert_false(readable(m.event_fd));
  rp_mailbox_free(&m);
  rp_mailbox_free(&m); /* twice: harmless */
}

static void *poster(void *arg)
{
  struct rp_mailbox *m = arg;
  for (uintptr_t i = 1; i <= POSTS; i++)
    rp_mailbox_post(m, (void *)i);
  return NULL;
}

static void test_posts_from_another_thread_arrive_in_order(void **state)
{
  (void)state;
  struct rp_mailbox m;
  void *out[POSTS];
  assert_int_equal(rp_mailbox_init(&m, POSTS, true), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, poster, &m), 0);
  uintptr_t next = 1;
  while (next <= POSTS) {
    struct pollfd p = { .fd = m.event_fd, .events = POLLIN };
    assert_int_equal(poll(&p, 1, 10000), 1); /* a post that is not taken yet wakes */
    unsigned n = rp_mailbox_take_woken(&m, out);
    for (unsigned i = 0; i < n; i++)
      assert_int_equal((uintptr_t)out[i], next++);
  }
  pthread_join(t, NULL);
  rp_mailbox_free(&m);
}

static void test_blocking_take(void **state)
{
  (void)state;
  struct rp_mailbox m = { 0 };
  rp_mailbox_free(&m); /* zeroed and never made: harmless */
  void *out[1];
  int item;
  assert_int_equal(rp_mailbox_init(&m, 1, false), 0);
  rp_mailbox_post(&m, &item);
  uint64_t count;
  assert_int_equal(read(m.event_fd, &count, sizeof count), (ssize_t)sizeof count);
  assert_int_equal(count, 1);
  assert_int_equal(rp_mailbox_take(&m, out), 1); /* the owner read event_fd itself */
  assert_ptr_equal(out[0], &item);
  assert_int_equal(rp_mailbox_take(&m, out), 0);
  rp_mailbox_free(&m);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_first_post_wakes_once),
    cmocka_unit_test(test_posts_from_another_thread_arrive_in_order),
    cmocka_unit_test(test_blocking_take),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
